#pragma once
// The memory plan of a model load, computed from the files on disk (config.json, the
// safetensors headers, trunk.json) before any weight is read. Model::load and
// k3::planLaunch both call planLoad, so the app's wizard, the k3 CLI and a Session see
// one plan from one set of formulas.

#include "k3/config.hpp"
#include "k3/expert_cache.hpp"
#include "k3/memory_plan.hpp"
#include "k3/model.hpp"
#include "k3/safetensors.hpp"
#include "k3/trunk.hpp"

#include <filesystem>
#include <memory>
#include <optional>

namespace k3::model {

// A launch as a load reads it: the config and diagnostics as given, the budget resolved
// once (a preset's sizes unless replaced), and the model a draft serves.
struct LoadOptions {
    LaunchConfig launch;
    LaunchDiagnostics diagnostics;
    std::uint64_t trunkBytes = 0; // LaunchBudget::resolvedTrunkBytes
    std::uint64_t cacheBytes = 0; // LaunchBudget::resolvedCacheBytes
    bool streamModelTables = false;
    std::string budgetSource; // LaunchBudget::describe
    // A draft (Model::loadDraft): no trunk, cache or routed experts of its own; draftOf is
    // the model it serves once that is loaded (planning a draft before it: null).
    bool draft = false;
    const Model* draftOf = nullptr;
};

// `config` resolved for loading; throws LaunchError listing what validate(config) finds
// and MemoryRefusal for an unknown preset.
LoadOptions loadOptionsFor(const LaunchConfig& config, const LaunchDiagnostics& diagnostics);
// The draft in `config.draftDir` as it is loaded beside the model `config` opens: the
// model's context and chunk, no rollback records (a draft is restored, never rolled
// back), the layer limit; resident and not enforced on its own (the model's plan counts it).
LoadOptions draftOptionsFor(const LaunchConfig& config, const LaunchDiagnostics& diagnostics);

// What planning opened, handed on to the load so nothing is read twice.
struct LoadPlan {
    ModelConfig config;
    Checkpoint checkpoint;
    int layers = 0;                  // bound layers (the layer limit applied)
    std::optional<TrunkIndex> trunk; // a packed trunk streamed (not for a draft)
    // Routed experts through the cache: the store whose slot the plan counted.
    std::shared_ptr<CheckpointExpertStore> store;
    PlanInputs inputs;
    MemoryPlan plan;
};

// Reads `dir`'s config and headers (and the trunk's index) and adds everything up for
// `options` against `availableBytes`. Throws ModelError / ConfigError / FormatError naming
// the file; does not enforce the plan.
LoadPlan planLoad(const std::filesystem::path& dir, const LoadOptions& options,
                  std::uint64_t availableBytes);

} // namespace k3::model
