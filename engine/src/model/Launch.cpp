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
    if (modelTablesOnDisk) return *modelTablesOnDisk;
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
    if (modelTablesOnDisk)
        add(*modelTablesOnDisk ? "model tables on disk" : "model tables in memory");
    return out;
}

const char* pinModeName(PinMode mode) {
    switch (mode) {
    case PinMode::Raw:
        return "raw";
    case PinMode::Compressed:
        return "compressed";
    case PinMode::Measured:
        return "measured";
    }
    return "measured";
}

std::optional<PinMode> pinModeNamed(std::string_view name) {
    for (const PinMode m : {PinMode::Raw, PinMode::Compressed, PinMode::Measured})
        if (name == pinModeName(m)) return m;
    return std::nullopt;
}

std::vector<std::string> validate(const LaunchConfig& config) {
    std::vector<std::string> problems;
    const auto range = [&problems](const char* what, long long value, LaunchRange r,
                                   const char* note) {
        if (!r.contains(value))
            problems.push_back(std::string(what) + " " + std::to_string(value) + " is outside " +
                               std::to_string(r.min) + ".." + std::to_string(r.max) + note);
    };
    if (config.modelDir.empty()) problems.push_back("no model folder is given");
    range("the thread count", config.threads, kThreadsRange, " (0: every core)");
    range("the context length", config.contextLength, kContextRange, " positions");
    range("the prefill chunk", config.prefillChunk, kPrefillChunkRange,
          " positions (0: as the memory plan sizes it)");
    range("the speculation width", config.maxSpeculation, kSpeculationRange, " proposals");
    if (config.budget.trunkBytes && *config.budget.trunkBytes > kMaxBudgetBytes)
        problems.push_back("the trunk budget " + formatBytes(*config.budget.trunkBytes) +
                           " is over the largest size taken (" + formatBytes(kMaxBudgetBytes) +
                           ")");
    if (config.budget.cacheBytes && *config.budget.cacheBytes > kMaxBudgetBytes)
        problems.push_back("the expert-cache budget " + formatBytes(*config.budget.cacheBytes) +
                           " is over the largest size taken (" + formatBytes(kMaxBudgetBytes) +
                           ")");
    if (!config.budget.preset.empty() && !findPreset(config.budget.preset)) {
        std::string names;
        for (const Preset& p : presets())
            names += (names.empty() ? "" : ", ") + std::string(p.name);
        problems.push_back("unknown preset \"" + config.budget.preset + "\"; the presets are " +
                           names);
    }
    if (config.stateCacheBytes > 0 && config.stateCacheDir.empty())
        problems.push_back("a state-cache budget is given without a state-cache folder");
    return problems;
}

namespace model {

LoadOptions loadOptionsFor(const LaunchConfig& config, const LaunchDiagnostics& diagnostics) {
    if (const auto problems = validate(config); !problems.empty()) {
        std::string message;
        for (const std::string& p : problems) message += (message.empty() ? "" : "; ") + p;
        throw LaunchError(message);
    }
    LoadOptions o;
    o.launch = config;
    o.diagnostics = diagnostics;
    o.trunkBytes = config.budget.resolvedTrunkBytes();
    o.cacheBytes = config.budget.resolvedCacheBytes();
    o.streamModelTables = config.budget.streamsModelTables();
    o.budgetSource = config.budget.describe();
    return o;
}

LoadOptions draftOptionsFor(const LaunchConfig& config, const LaunchDiagnostics& diagnostics) {
    LaunchConfig draft;
    draft.modelDir = config.draftDir;
    draft.contextLength = config.contextLength;
    draft.prefillChunk = config.prefillChunk;
    draft.maxSpeculation = 0;
    LaunchDiagnostics d;
    d.layerLimit = diagnostics.layerLimit;
    d.enforceMemoryPlan = false;
    LoadOptions o = loadOptionsFor(draft, d);
    o.draft = true;
    return o;
}

} // namespace model

MemoryPlan planLaunch(const LaunchConfig& config, std::uint64_t availableBytes) {
    return model::planLoad(config.modelDir, model::loadOptionsFor(config, {}), availableBytes).plan;
}

LaunchBudget automaticBudget(const LaunchConfig& config, std::uint64_t availableBytes) {
    // Without a packed trunk nothing streams: the wizard's "skip packing".
    if (config.trunkDir.empty()) return LaunchBudget::resident();
    // Planned with a cache, so the plan knows the expert slot it fills the rest with.
    LaunchConfig probe = config;
    probe.budget = LaunchBudget::ofBytes(0, 1);
    model::LoadPlan lp =
        model::planLoad(config.modelDir, model::loadOptionsFor(probe, {}), availableBytes);
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
                    throw MemoryRefusal("the automatic preset needs the available memory, "
                                        "which is unknown here (no MemAvailable); pick a "
                                        "preset by name");
                const auto p = recommendPreset(availableBytes);
                if (!p)
                    throw MemoryRefusal("the automatic preset finds under 4 GB available on "
                                        "this machine; no preset fits");
                name = std::string(p->name);
            }
            presetNamed(name); // refused here, naming the valid ones
            b = LaunchBudget::ofPreset(name);
            continue;
        }
        const bool trunk = f.kind == MemoryFlag::Kind::TrunkGB;
        if (!std::isfinite(f.gb) || f.gb < 0 || f.gb > double(kMaxBudgetBytes) / 1e9)
            throw MemoryRefusal(
                std::string(trunk ? "the trunk budget " : "the expert-cache budget ") +
                std::to_string(f.gb) + " GB is not a size between 0 and 1e6 GB");
        (trunk ? b.trunkBytes : b.cacheBytes) = gbToBytes(f.gb);
    }
    return b;
}

} // namespace k3
