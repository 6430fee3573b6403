#pragma once
// Opening a model for `k3 MODEL_DIR ...`: everything a user can get wrong is checked
// before the weights are touched, so it fails fast with exit 2 and a message naming it.

#include "Commands.hpp"

#include <k3/session.hpp>

#include <string>

namespace k3cli {

enum class TokenizerNeed {
    Required,  // text in or out: --prompt, --prompt-file, --chat
    IfPresent, // --ids: decode the output when the checkpoint ships a tokenizer
};

struct LoadedSession {
    k3::Session session;
    std::string tokenizerDir; // empty when none was loaded
    double loadSeconds = 0;
};

// Reads and checks config.json (exit 2 on refusal), --layers and the tokenizer folder,
// then loads. Throws CommandError with the exit code the failure calls for.
LoadedSession openModel(const ModelArgs& args, TokenizerNeed need);

// Reads config.json only, for checks that must come before loading (exit 2 on refusal).
k3::ModelConfig readConfigOrThrow(const std::string& modelDir);

} // namespace k3cli
