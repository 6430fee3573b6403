#include "k3/presets.hpp"

#include <array>
#include <cstdio>

namespace k3 {
namespace {

// Trunk/cache GB and thresholds from the seed's preset table and doctor rules.
constexpr std::array<Preset, 6> kPresets{{
    {"ultra", 2.5, 0.31, 4.0, "about 3 GB; streams embeddings and lm_head too", true},
    {"laptop", 3.0, 1.0, 10.0, "about 8.2 GB peak"},
    {"desktop", 16.0, 10.0, 32.0, "about 31.9 GB peak"},
    {"workstation", 60.0, 30.0, 96.0, "about 95.5 GB peak"},
    {"server", 110.0, 13.0, 192.0, "about 128 GB peak, 90 of 93 layers pinned"},
    {"max", 110.0, 109.0, 256.0, "about 224 GB peak"},
}};

constexpr double kGB = 1e9;

} // namespace

std::span<const Preset> presets() { return kPresets; }

std::optional<Preset> findPreset(std::string_view name) {
    for (const Preset& p : kPresets)
        if (p.name == name) return p;
    return std::nullopt;
}

std::optional<Preset> recommendPreset(std::uint64_t memAvailableBytes) {
    const double gb = static_cast<double>(memAvailableBytes) / kGB;
    std::optional<Preset> best;
    // "max" is never recommended automatically: past "server" more cache buys little.
    for (const Preset& p : kPresets) {
        if (p.name == "max") continue;
        if (gb >= p.minAvailableGB) best = p;
    }
    return best;
}

std::string formatPresetTable() {
    std::string out = "preset        trunk GB  cache GB  recommended from  notes\n";
    char line[160];
    for (const Preset& p : kPresets) {
        std::snprintf(line, sizeof line, "%-12s  %8.2f  %8.2f  %10.0f GB     %.*s\n",
                      std::string(p.name).c_str(), p.trunkGB, p.cacheGB, p.minAvailableGB,
                      static_cast<int>(p.summary.size()), p.summary.data());
        out += line;
    }
    out += "auto          trunk first, then cache, from MemAvailable\n";
    return out;
}

} // namespace k3
