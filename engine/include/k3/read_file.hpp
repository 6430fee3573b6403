#pragma once
// The one file-reading rule for the small files the engine reads whole (config.json, the
// tokenizer files, the index, trunk.json) and the check every large file gets before it
// is read: anything that is not a regular file (a FIFO, a device such as /dev/zero, a
// folder) is refused before a byte is read, without blocking on a FIFO, and a file larger
// than its kind may be is refused with both sizes.

#include "k3/error.hpp"
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace k3 {

class FileReadError : public Error {
public:
    explicit FileReadError(const std::string& message) : Error(ErrorKind::FileRead, message) {}
};

// Caps, far above what the real checkpoint ships (config.json 6 KB, tiktoken.model
// 2.5 MB, tokenizer_config.json 45 KB, the index 58 MB, trunk.json a few MB).
inline constexpr std::uint64_t kMaxConfigBytes = std::uint64_t{16} << 20;
inline constexpr std::uint64_t kMaxTokenizerFileBytes = std::uint64_t{256} << 20;
inline constexpr std::uint64_t kMaxIndexBytes = std::uint64_t{1} << 30;

// Reads `path` whole. `what` names the kind in messages ("config", "tokenizer file").
std::string readRegularFile(const std::filesystem::path& path, std::uint64_t maxBytes,
                            const std::string& what);

// An API key file (`k3 serve --api-key-file`, `k3 --remote --api-key-file`), read one way
// for both: a regular file of at most 4 KB holding the key on one line; whitespace and
// line breaks around it are dropped. Throws FileReadError naming the file when it holds
// nothing, more than one line, or another control character (a header injection).
inline constexpr std::uint64_t kMaxApiKeyFileBytes = 4096;
std::string readApiKeyFile(const std::filesystem::path& path);

// Throws FileReadError unless `path` is a regular file (symlinks followed), opening
// nothing. For files read in pieces (shards, trunk.bin).
void requireRegularFile(const std::filesystem::path& path, const std::string& what);

} // namespace k3
