#pragma once
// The prefix cache on disk (LaunchConfig::stateCacheDir): conversation states keyed by
// the ids they hold, so no prompt position is read twice. What the front ends need to
// show and clear it; the Session reads and writes it (docs/state-format.md).

#include <cstdint>
#include <filesystem>

namespace k3 {

// The budget when none is set: a few states of the real model (about 0.45 GB of
// recurrent state plus 55 KB per position each).
inline constexpr std::uint64_t kDefaultStateCacheBytes = 4'000'000'000ull;

// $XDG_CACHE_HOME/k3/states, else ~/.cache/k3/states; empty when neither is known.
std::filesystem::path defaultStateCacheDirectory();

struct StateCacheUsage {
    int files = 0;
    std::uint64_t bytes = 0;
};
// The state files in `directory` (other files are not counted); none when it is missing.
StateCacheUsage stateCacheUsage(const std::filesystem::path& directory);
// Removes every state file in `directory` (nothing else); returns what was removed.
StateCacheUsage clearStateCache(const std::filesystem::path& directory);

} // namespace k3
