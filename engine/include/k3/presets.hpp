#pragma once
// Memory presets: how many GB go to the pinned trunk and to the routed-expert cache.
// The numbers are the public C engine's, so its users find the same dial here. The
// output never depends on the preset; memory only buys speed.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace k3 {

struct Preset {
    std::string_view name;
    double trunkGB;          // pinned trunk + streaming ring
    double cacheGB;          // routed-expert cache
    double minAvailableGB;   // MemAvailable at which the doctor recommends it
    std::string_view summary;
    bool streamsModelTables = false; // embeddings and lm_head stay on disk (ultra)
};

// Every named preset, smallest first ("auto" is not a table entry: it is computed).
std::span<const Preset> presets();

// The preset called `name`, or nothing when no preset has that name.
std::optional<Preset> findPreset(std::string_view name);

// The largest preset whose threshold `memAvailableBytes` reaches; "ultra" below the
// laptop threshold. Nothing when even ultra cannot fit (under 4 GB available).
std::optional<Preset> recommendPreset(std::uint64_t memAvailableBytes);

// A human-readable table for `k3 --list-presets` and the wizard.
std::string formatPresetTable();

} // namespace k3
