#pragma once
// Reading byte ranges of multi-GB shards without filling the page cache: O_DIRECT
// through a 4096-aligned bounce buffer, widened outward to the enclosing aligned
// window (tensors start wherever the previous one ended). Filesystems that refuse
// O_DIRECT (tmpfs, some FUSE/network mounts: EINVAL on open or on read) fall back to
// buffered pread. A short read or an I/O error is an IoError naming the file and
// offset, never silent zeros. Every read consults the fault-injection test hook
// (k3/fault_injection.hpp) under the file's IoKind.

#include "k3/error.hpp"
#include "k3/fault_injection.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

namespace k3 {

namespace platform {
class File;
}

class IoError : public Error {
public:
    explicit IoError(const std::string& message) : Error(ErrorKind::Io, message) {}
};

inline constexpr std::size_t kDirectIoAlignment = 4096;

class AlignedFile {
public:
    enum class Mode { Auto, Buffered };

    // kind Any: Trunk for a file named trunk.bin, Shard otherwise (the fault hook's view).
    explicit AlignedFile(const std::filesystem::path& path, Mode mode = Mode::Auto,
                         IoKind kind = IoKind::Any);
    ~AlignedFile();
    AlignedFile(const AlignedFile&) = delete;
    AlignedFile& operator=(const AlignedFile&) = delete;

    // Copy bytes [offset, offset + length) into dst. Thread-safe (pread only).
    void read(std::uint64_t offset, void* dst, std::size_t length) const;

    // Zero-copy read of an aligned window straight into `dst`: offset, length and dst
    // must all be multiples of kDirectIoAlignment (IoError otherwise). Returns the bytes
    // read, fewer than `length` only where the window runs past the end of the file.
    std::size_t readWindow(std::uint64_t offset, void* dst, std::size_t length) const;

    // The descriptor an asynchronous reader (io_uring) reads a window through: the
    // O_DIRECT one while it is in use, else the buffered one.
    std::intptr_t asyncHandle() const;
    // An asynchronous O_DIRECT read was refused (EINVAL): later reads go buffered.
    void refuseDirect() const { directRefused_.store(true); }
    // True while reads go through O_DIRECT (false after a fallback).
    bool direct() const { return direct_ && !directRefused_.load(); }
    std::uint64_t size() const { return size_; }
    const std::string& path() const { return path_; }
    IoKind kind() const { return kind_; }

private:
    bool readDirect(std::uint64_t offset, void* dst, std::size_t length,
                    std::optional<IoFault>& fault) const;
    void readBuffered(std::uint64_t offset, void* dst, std::size_t length,
                      std::optional<IoFault>& fault) const;

    std::string path_;
    std::unique_ptr<platform::File> file_;       // buffered, always open
    std::unique_ptr<platform::File> directFile_; // O_DIRECT; invalid when refused or not asked for
    bool direct_ = false;
    std::uint64_t size_ = 0;
    IoKind kind_ = IoKind::Shard;
    mutable std::atomic<bool> directRefused_{false};
};

} // namespace k3
