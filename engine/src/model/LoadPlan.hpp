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
#include "k3/session.hpp"
#include "k3/trunk.hpp"

#include <filesystem>
#include <memory>
#include <optional>

namespace k3::model {

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
LoadPlan planLoad(const std::filesystem::path& dir, const ModelOptions& options,
                  std::uint64_t availableBytes);

// The model options a Session opens with (Session::open and planLaunch).
ModelOptions modelOptionsFor(const SessionOptions& options);

} // namespace k3::model
