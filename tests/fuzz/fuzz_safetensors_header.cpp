// The .safetensors header: the input is a whole shard file (8-byte length, JSON header,
// data). It goes through readShardHeader() from an in-memory file (memfd), the path the
// engine opens shards with, and through parseShardHeader() on the same bytes.
#include "FuzzSupport.hpp"

#include <k3/safetensors.hpp>

#include <string>
#include <sys/mman.h>
#include <unistd.h>

namespace {

int memFile() {
    static const int fd = memfd_create("k3fuzz-shard", 0);
    if (fd < 0) k3fuzz::broken("memfd_create failed");
    return fd;
}

void checkHeader(const k3::ShardHeader& h) {
    for (const auto& [name, t] : h.tensors) {
        k3fuzz::check(t.offset >= h.dataStart, "tensor starts before the data section");
        k3fuzz::check(t.offset <= h.fileSize && t.nbytes <= h.fileSize - t.offset,
                      "tensor runs past the end of the file");
        k3fuzz::check(t.rank <= k3::kMaxTensorRank, "rank above the maximum");
        k3fuzz::check(t.numel() * k3::dtypeSize(t.dtype) == t.nbytes,
                      "nbytes disagrees with shape and dtype");
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const int fd = memFile();
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))
        k3fuzz::broken("cannot write the memfd");
    try {
        checkHeader(k3::readShardHeader("/proc/self/fd/" + std::to_string(fd)));
    } catch (const k3::FormatError&) {
    }
    // The header text alone, in a file as large as the input claims.
    if (size >= 8) {
        try {
            checkHeader(k3::parseShardHeader(k3fuzz::asText(data + 8, size - 8), size, "fuzz"));
        } catch (const k3::FormatError&) {
        }
    }
    return 0;
}
