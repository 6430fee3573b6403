#include "k3/launch.hpp"

#include "k3/presets.hpp"
#include "model/LoadPlan.hpp"

#include <cmath>
#include <limits>

namespace k3 {
namespace {

std::uint64_t gbToBytes(double gb) {
    return std::uint64_t(std::llround(gb * 1e9));
}

Preset presetNamed(const std::string& name) {
    if (const auto p = findPreset(name)) return *p;
    std::string names;
    for (const Preset& p : presets()) names += std::string(p.name) + ", ";
    throw MemoryRefusal("unknown preset \"" + name + "\"; the presets are " + names + "auto");
}

} // namespace

std::uint64_t LaunchBudget::resolvedTrunkBytes() const {
    if (trunkBytes) return *trunkBytes;
    if (!preset.empty()) return gbToBytes(presetNamed(preset).trunkGB);
    return std::numeric_limits<std::uint64_t>::max();
}

std::uint64_t LaunchBudget::resolvedCacheBytes() const {
    if (cacheBytes) return *cacheBytes;
    if (!preset.empty()) return gbToBytes(presetNamed(preset).cacheGB);
    return 0;
}

bool LaunchBudget::streamsModelTables() const {
    return !preset.empty() && presetNamed(preset).streamsModelTables;
}

std::string LaunchBudget::describe() const {
    if (isResident()) return "everything resident";
    std::string out = preset.empty() ? std::string() : "preset " + preset;
    const auto add = [&out](const std::string& part) {
        out += (out.empty() ? "" : out.rfind("preset ", 0) == 0 ? ", " : " / ") + part;
    };
    if (trunkBytes) add("trunk " + formatBytes(*trunkBytes));
    if (cacheBytes) add("cache " + formatBytes(*cacheBytes));
    return out;
}

SessionOptions toSessionOptions(const LaunchConfig& config) {
    SessionOptions o;
    o.modelDir = config.modelDir;
    o.trunkDir = config.trunkDir;
    o.trunkBytes = config.budget.resolvedTrunkBytes();
    o.pinMode = config.pinMode;
    o.expertCacheBytes = config.budget.resolvedCacheBytes();
    o.streamModelTables = config.budget.streamsModelTables();
    o.budgetSource = config.budget.describe();
    o.contextLength = config.contextLength;
    o.prefillChunk = config.prefillChunk;
    o.maxSpeculation = config.maxSpeculation;
    o.stateCacheDir = config.stateCacheDir;
    o.stateCacheBytes = config.stateCacheBytes;
    o.enforceMemoryPlan = true;
    return o;
}

MemoryPlan planLaunch(const LaunchConfig& config, std::uint64_t availableBytes) {
    const ModelOptions options = model::modelOptionsFor(toSessionOptions(config));
    return model::planLoad(config.modelDir, options, availableBytes).plan;
}

LaunchBudget automaticBudget(const LaunchConfig& config, std::uint64_t availableBytes) {
    // Without a packed trunk nothing streams: the wizard's "skip packing".
    if (config.trunkDir.empty()) return LaunchBudget::resident();
    // Planned with a cache, so the plan knows the expert slot it fills the rest with.
    LaunchConfig probe = config;
    probe.budget = LaunchBudget::ofBytes(0, 1);
    ModelOptions options = model::modelOptionsFor(toSessionOptions(probe));
    model::LoadPlan lp = model::planLoad(config.modelDir, options, availableBytes);
    MemoryBudget automatic;
    automatic.automatic = true;
    const MemoryPlan plan = planMemory(lp.inputs, automatic, availableBytes);
    return LaunchBudget::ofBytes(plan.trunkBytes(), plan.cacheBytes());
}

LaunchBudget resolveMemoryFlags(std::span<const MemoryFlag> flags, std::uint64_t availableBytes) {
    LaunchBudget b;
    for (const MemoryFlag& f : flags) {
        if (f.kind == MemoryFlag::Kind::Preset) {
            std::string name = f.preset;
            if (name == "auto") {
                if (availableBytes == 0)
                    throw MemoryRefusal("--preset auto: the available memory is unknown (no "
                                        "MemAvailable); pick a preset by name (k3 --list-presets)");
                const auto p = recommendPreset(availableBytes);
                if (!p)
                    throw MemoryRefusal("--preset auto: this machine has under 4 GB available; "
                                        "no preset fits");
                name = std::string(p->name);
            }
            presetNamed(name); // refused here, naming the valid ones
            b = LaunchBudget::ofPreset(name);
            continue;
        }
        const bool trunk = f.kind == MemoryFlag::Kind::TrunkGB;
        if (!std::isfinite(f.gb) || f.gb < 0 || f.gb > 1e6)
            throw MemoryRefusal(std::string(trunk ? "--trunk-gb " : "--cache-gb ") +
                                std::to_string(f.gb) + " is not a size in GB between 0 and 1e6");
        (trunk ? b.trunkBytes : b.cacheBytes) = gbToBytes(f.gb);
    }
    return b;
}

} // namespace k3
