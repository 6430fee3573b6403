#pragma once
// The model's dimensions, read from the checkpoint's own config.json. Nothing here is
// compiled in: a permissive reader that fills defaults for an unrecognised layout
// loads a model that still speaks English but is not Kimi K3 (e.g. an empty
// full_attn_layers turns all 24 MLA layers into KDA). So:
//   - an absent or wrong-typed required field is an error, and every such field is
//     listed in ONE message that names the file;
//   - layer lists are ONE-based and must cover 1..num_hidden_layers exactly once;
//   - the only value with a fallback is gate_lower_bound (see ModelConfig);
//   - a field that changes the architecture (hidden_act, moe_router_activation_func,
//     topk_method, num_expert_group/topk_group, mla_use_nope, use_full_rank_gate, the
//     quantization's format/num_bits/group_size/type) must hold the value the engine
//     implements; others are refused by name, all in one message. Absent, such a field
//     takes the released value.
// Both the released nested shape (text_config, text_config.linear_attn_config,
// text_config.quantization_config) and the flat shape of small test models read alike.

#include "k3/error.hpp"
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace k3 {

// A config.json that cannot be read with confidence (the CLI exits 2 on it).
class ConfigError : public Error {
public:
    explicit ConfigError(const std::string& message) : Error(ErrorKind::Config, message) {}
};

enum class AttentionKind { Kda, Mla };
enum class MlpKind { Dense, Moe };

struct LayerSpec {
    AttentionKind attention;
    MlpKind mlp;
};

// compressed-tensors "quantization_config" (the routed experts' MXFP4).
struct QuantizationConfig {
    std::string format; // "mxfp4-pack-quantized" in the release
    int numBits = 0;    // 4
    int groupSize = 0;  // 32 weights per E8M0 scale
};

enum class ConfigShape { Nested, Flat };

struct ModelConfig {
    ConfigShape shape = ConfigShape::Flat;

    int hiddenSize = 0;      // 7168
    int numHiddenLayers = 0; // 93
    int vocabSize = 0;       // 163840
    double rmsNormEps = 0;   // 1e-5
    bool tieWordEmbeddings = false;

    // Kimi Delta Attention (linear_attn_config in the nested shape).
    int kdaNumHeads = 0;         // 96
    int kdaHeadDim = 0;          // 128
    int shortConvKernelSize = 0; // 4
    // The decay lower bound. The reference documents the value (-5) but marks the key
    // name unconfirmed in the release, so an ABSENT key falls back to -5 and says so
    // in gateLowerBoundFromFile; a present key of the wrong type is still an error.
    double gateLowerBound = -5.0;
    bool gateLowerBoundFromFile = false;
    std::vector<int> kdaLayers;      // ONE-based, sorted
    std::vector<int> fullAttnLayers; // ONE-based, sorted (MLA layers)

    // Gated MLA.
    int numAttentionHeads = 0; // 96
    int qLoraRank = 0;         // 1536
    int kvLoraRank = 0;        // 512
    int qkNopeHeadDim = 0;     // 128
    int qkRopeHeadDim = 0;     // 64: present and cached, never rotated
    int vHeadDim = 0;          // 128
    bool mlaUseOutputGate = false;

    // Latent MoE.
    int numExperts = 0;             // 896
    int numExpertsPerToken = 0;     // 16
    int numSharedExperts = 0;       // 2
    int routedExpertHiddenSize = 0; // 3584, the latent width
    int moeIntermediateSize = 0;    // 3072
    double routedScalingFactor = 0; // 1.0
    bool moeRenormalize = false;
    bool latentMoeUseNorm = false;
    int firstKDenseReplace = 0; // 1
    int intermediateSize = 0;   // 33792, the dense layer(s)

    int attnResBlockSize = 0;            // 12
    double activationSituBeta = 0;       // 4.0
    double activationSituLinearBeta = 0; // 25.0

    // Token ids and quantization are optional: small flat test models carry neither,
    // and tokenizer_config.json is the authority for special-token ids.
    std::optional<std::int64_t> bosTokenId;
    std::optional<std::int64_t> eosTokenId;
    // The longest context the model was trained for, when config.json says; a --context
    // above it is refused (issue 35 item 19).
    std::optional<std::int64_t> maxPositionEmbeddings;
    // Present: the routed experts are MXFP4 (weight_packed + weight_scale). Absent: they
    // are plain NAME.weight tensors in the dtype the checkpoint declares (BF16 or F32).
    std::optional<QuantizationConfig> quantization;

    // One entry per layer, ZERO-based index (layer L here is layer L+1 in the file).
    std::vector<LayerSpec> layers;

    int countAttention(AttentionKind kind) const;
    int countMlp(MlpKind kind) const;
    // "KKKMKKKM..." (K = KDA, M = MLA), zero-based, for logs and tests.
    std::string layerMapString() const;
    // One line: "hidden=7168 layers=93 ... | 24 MLA + 69 KDA | experts 896 top16 ...".
    std::string summary() const;
};

// Parse `json` (the text of config.json); `sourceName` names it in error messages.
// Throws ConfigError.
ModelConfig parseModelConfig(std::string_view json, std::string_view sourceName);

// Read and parse a config.json file. Throws ConfigError (also for an unreadable file).
ModelConfig readModelConfig(const std::filesystem::path& path);

} // namespace k3
