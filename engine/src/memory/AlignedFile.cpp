#include "k3/aligned_io.hpp"

#include "platform/Platform.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace k3 {

namespace {

// Bounded bounce buffer: a 17 MB expert read does not need a 17 MB extra allocation.
constexpr std::size_t kMaxWindow = std::size_t{8} << 20;

struct FreeDeleter {
    void operator()(void* p) const { platform::freeAligned(p); }
};

std::string errnoText(int err) {
    return std::strerror(err);
}

// pread, unless the fault hook asked for this call to fail: then it fails the way the
// disk would (EIO) or ends early (a short read), and the caller's real error path runs.
std::int64_t preadOrFault(const platform::File& file, void* dst, std::size_t n, std::uint64_t at,
                          std::optional<IoFault>& fault) {
    if (fault) {
        const IoFault f = *fault;
        fault.reset();
        if (f == IoFault::ShortRead) return 0;
        errno = EIO;
        return -1;
    }
    return file.readAt(dst, n, at);
}

} // namespace

AlignedFile::AlignedFile(const std::filesystem::path& path, Mode mode, IoKind kind)
    : path_(path.string()), kind_(kind != IoKind::Any              ? kind
                                  : path.filename() == "trunk.bin" ? IoKind::Trunk
                                                                   : IoKind::Shard) {
    // NoWaitOnOpen: a FIFO in place of a shard must not block the open; it is refused below.
    file_ = std::make_unique<platform::File>(
        platform::File::open(path, platform::open::Read | platform::open::NoWaitOnOpen));
    if (!file_->valid()) {
        const int err = errno;
        throw IoError(path_ + ": cannot open: " + errnoText(err));
    }
    platform::FileInfo info;
    if (!file_->info(info)) {
        const int err = errno;
        throw IoError(path_ + ": cannot stat: " + errnoText(err));
    }
    if (info.type != platform::FileType::Regular)
        throw IoError(path_ +
                      ": not a regular file (a FIFO, device or folder); refusing to read it");
    size_ = info.size;
    // EINVAL here means the filesystem has no O_DIRECT (tmpfs): stay buffered.
    directFile_ = std::make_unique<platform::File>(
        mode == Mode::Auto
            ? platform::File::open(path, platform::open::Read | platform::open::Uncached)
            : platform::File());
    direct_ = directFile_->valid();
}

AlignedFile::~AlignedFile() = default;

std::intptr_t AlignedFile::asyncHandle() const {
    return direct() ? directFile_->nativeHandle() : file_->nativeHandle();
}

void AlignedFile::read(std::uint64_t offset, void* dst, std::size_t length) const {
    if (length == 0) return;
    if (offset > size_ || length > size_ - offset)
        throw IoError(path_ + ": read of " + std::to_string(length) + " bytes at offset " +
                      std::to_string(offset) + " runs past the end of the file (" +
                      std::to_string(size_) + " bytes)");
    std::optional<IoFault> fault = faultFor(kind_, path_, false);
    if (direct() && readDirect(offset, dst, length, fault)) return;
    readBuffered(offset, dst, length, fault);
}

// False means "O_DIRECT refused, use the buffered path"; real failures throw.
bool AlignedFile::readDirect(std::uint64_t offset, void* dst, std::size_t length,
                             std::optional<IoFault>& fault) const {
    constexpr std::uint64_t mask = kDirectIoAlignment - 1;
    const std::size_t capacity =
        std::min<std::size_t>(kMaxWindow, ((length + mask) & ~mask) + kDirectIoAlignment);
    void* raw = platform::allocateAligned(kDirectIoAlignment, capacity);
    if (!raw)
        throw IoError(path_ + ": cannot allocate a " + std::to_string(capacity) +
                      "-byte aligned read buffer");
    std::unique_ptr<void, FreeDeleter> buffer(raw);
    auto* bytes = static_cast<unsigned char*>(raw);
    auto* out = static_cast<unsigned char*>(dst);

    std::uint64_t pos = offset;
    std::size_t remaining = length;
    while (remaining > 0) {
        const std::uint64_t lo = pos & ~mask;
        const std::uint64_t pad = pos - lo;
        const std::uint64_t want = std::min<std::uint64_t>(pad + remaining, capacity);
        const std::uint64_t window = (want + mask) & ~mask;
        // The last window of a file runs past EOF, so a short count is fine as long as
        // it covers the payload; a short count that does not is a real short read.
        std::uint64_t got = 0;
        while (got < window) {
            const std::int64_t r =
                preadOrFault(*directFile_, bytes + got, window - got, lo + got, fault);
            if (r < 0) {
                const int err = errno;
                if (err == EINTR) continue;
                if (err == EINVAL && pos == offset && got == 0) {
                    directRefused_.store(true);
                    return false;
                }
                throw IoError(path_ + ": read error at offset " + std::to_string(lo + got) + ": " +
                              errnoText(err));
            }
            if (r == 0) break;
            got += static_cast<std::uint64_t>(r);
            if (got % kDirectIoAlignment != 0) break; // only EOF gives an unaligned count
        }
        const std::uint64_t useful = std::min<std::uint64_t>(want - pad, remaining);
        if (got < pad + useful)
            throw IoError(path_ + ": short read at offset " + std::to_string(pos) + ": got " +
                          std::to_string(got > pad ? got - pad : 0) + " of " +
                          std::to_string(useful) + " bytes (file changed or truncated?)");
        std::memcpy(out, bytes + pad, useful);
        out += useful;
        pos += useful;
        remaining -= useful;
    }
    return true;
}

std::size_t AlignedFile::readWindow(std::uint64_t offset, void* dst, std::size_t length) const {
    constexpr std::uint64_t mask = kDirectIoAlignment - 1;
    if ((offset & mask) || (length & mask) || (reinterpret_cast<std::uintptr_t>(dst) & mask))
        throw IoError(path_ + ": readWindow needs 4096-aligned offset, length and buffer (offset " +
                      std::to_string(offset) + ", length " + std::to_string(length) + ")");
    auto* out = static_cast<unsigned char*>(dst);
    std::size_t got = 0;
    bool useDirect = direct();
    std::optional<IoFault> fault = faultFor(kind_, path_, false);
    while (got < length) {
        const platform::File& file = useDirect ? *directFile_ : *file_;
        const std::int64_t r = preadOrFault(file, out + got, length - got, offset + got, fault);
        if (r < 0) {
            const int err = errno;
            if (err == EINTR) continue;
            if (err == EINVAL && useDirect && got == 0) { // the filesystem refuses O_DIRECT
                directRefused_.store(true);
                useDirect = false;
                continue;
            }
            throw IoError(path_ + ": read error at offset " + std::to_string(offset + got) + ": " +
                          errnoText(err));
        }
        if (r == 0) break; // end of file
        got += static_cast<std::size_t>(r);
        if (useDirect && got % kDirectIoAlignment != 0) break; // only EOF gives an unaligned count
    }
    return got;
}

void AlignedFile::readBuffered(std::uint64_t offset, void* dst, std::size_t length,
                               std::optional<IoFault>& fault) const {
    auto* out = static_cast<unsigned char*>(dst);
    std::size_t got = 0;
    while (got < length) {
        const std::int64_t r = preadOrFault(*file_, out + got, length - got, offset + got, fault);
        if (r < 0) {
            const int err = errno;
            if (err == EINTR) continue;
            throw IoError(path_ + ": read error at offset " + std::to_string(offset + got) + ": " +
                          errnoText(err));
        }
        if (r == 0)
            throw IoError(path_ + ": short read at offset " + std::to_string(offset + got) +
                          ": got " + std::to_string(got) + " of " + std::to_string(length) +
                          " bytes (file changed or truncated?)");
        got += static_cast<std::size_t>(r);
    }
}

} // namespace k3
