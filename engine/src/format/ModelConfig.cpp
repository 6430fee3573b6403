#include "k3/config.hpp"
#include "k3/json_duplicates.hpp"
#include "k3/json_limits.hpp"
#include "k3/read_file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <fstream>
#include <initializer_list>
#include <sstream>

namespace k3 {

namespace {

using nlohmann::json;

// Where a group of keys lives: the object and its dotted path for messages.
struct Scope {
    const json* object = nullptr;
    std::string path; // "" for the root, else "text_config." etc.
};

std::string typeName(const json& v) {
    if (v.is_number_integer()) return "integer " + v.dump();
    if (v.is_number_float()) return "number " + v.dump();
    if (v.is_string()) return "string " + v.dump();
    return std::string(v.type_name());
}

// Reads typed fields and collects every problem instead of stopping at the first, so
// one run of the tool tells the user everything that is wrong with the file.
class FieldReader {
public:
    std::vector<std::string> problems;

    // The value under the first of `names` present in `scope`, or null (a problem is
    // recorded when `required`).
    const json* find(const Scope& scope, std::initializer_list<const char*> names, bool required,
                     std::string* where = nullptr) {
        if (scope.object && scope.object->is_object()) {
            for (const char* name : names) {
                auto it = scope.object->find(name);
                if (it != scope.object->end()) {
                    if (where) *where = scope.path + name;
                    return &*it;
                }
            }
        }
        if (required) {
            std::string msg = scope.path + *names.begin() + ": missing";
            if (names.size() > 1) {
                msg += " (also looked for";
                for (auto it = names.begin() + 1; it != names.end(); ++it)
                    msg += std::string(" ") + *it;
                msg += ")";
            }
            problems.push_back(msg);
        }
        return nullptr;
    }

    void requireInt(const Scope& scope, std::initializer_list<const char*> names, int& out) {
        std::string where;
        if (const json* v = find(scope, names, true, &where)) readInt(*v, where, out);
    }

    void optionalInt64(const Scope& scope, std::initializer_list<const char*> names,
                       std::optional<std::int64_t>& out) {
        std::string where;
        const json* v = find(scope, names, false, &where);
        if (!v || v->is_null()) return;
        if (!v->is_number_integer()) {
            problems.push_back(where + ": expected an integer, got " + typeName(*v));
            return;
        }
        out = v->get<std::int64_t>();
    }

    void requireDouble(const Scope& scope, std::initializer_list<const char*> names, double& out) {
        std::string where;
        const json* v = find(scope, names, true, &where);
        if (!v) return;
        if (!v->is_number()) {
            problems.push_back(where + ": expected a number, got " + typeName(*v));
            return;
        }
        out = v->get<double>();
    }

    void requireBool(const Scope& scope, std::initializer_list<const char*> names, bool& out) {
        std::string where;
        const json* v = find(scope, names, true, &where);
        if (!v) return;
        if (!v->is_boolean()) {
            problems.push_back(where + ": expected true or false, got " + typeName(*v));
            return;
        }
        out = v->get<bool>();
    }

    // Returns false when absent (not an error unless `required`).
    bool readIntList(const Scope& scope, const char* name, bool required, std::vector<int>& out) {
        std::string where;
        const json* v = find(scope, {name}, required, &where);
        if (!v) return false;
        if (!v->is_array()) {
            problems.push_back(where + ": expected a list of layer numbers, got " + typeName(*v));
            return false;
        }
        out.clear();
        for (std::size_t i = 0; i < v->size(); ++i) {
            int value = 0;
            if (!readInt((*v)[i], where + "[" + std::to_string(i) + "]", value)) return false;
            out.push_back(value);
        }
        return true;
    }

    bool readInt(const json& v, const std::string& where, int& out) {
        if (!v.is_number_integer()) {
            problems.push_back(where + ": expected an integer, got " + typeName(v));
            return false;
        }
        const auto wide = v.is_number_unsigned()
                              ? static_cast<std::int64_t>(
                                    std::min<std::uint64_t>(v.get<std::uint64_t>(), INT64_MAX))
                              : v.get<std::int64_t>();
        if (wide < INT_MIN || wide > INT_MAX) {
            problems.push_back(where + ": " + v.dump() + " does not fit in a 32-bit integer");
            return false;
        }
        out = static_cast<int>(wide);
        return true;
    }
};

// Fields that change the architecture: the value the engine implements, or a list of
// problems naming field, value and what is supported. Checked after the required fields
// so one message lists every unsupported value at once.
class ArchitectureCheck {
public:
    std::vector<std::string> problems;

    // An ABSENT field is not an error: it takes the released value (checkArchitecture).
    void text(const Scope& scope, const char* name, const char* supported) {
        const json* v = find(scope, name);
        if (v && !(v->is_string() && v->get<std::string>() == supported))
            problems.push_back(scope.path + name + " = " + v->dump() + ": supported \"" +
                               supported + "\"");
    }
    void boolean(const Scope& scope, const char* name, bool supported) {
        const json* v = find(scope, name);
        if (v && !(v->is_boolean() && v->get<bool>() == supported))
            problems.push_back(scope.path + name + " = " + v->dump() + ": supported " +
                               (supported ? "true" : "false"));
    }
    void integer(const Scope& scope, const char* name, int supported) {
        const json* v = find(scope, name);
        if (v && !(v->is_number_integer() && v->get<std::int64_t>() == supported))
            problems.push_back(scope.path + name + " = " + v->dump() + ": supported " +
                               std::to_string(supported));
    }

private:
    static const json* find(const Scope& scope, const char* name) {
        if (!scope.object || !scope.object->is_object()) return nullptr;
        auto it = scope.object->find(name);
        return it == scope.object->end() ? nullptr : &*it;
    }
};

// The released graph. An absent field takes the released value named here.
void checkArchitecture(ArchitectureCheck& a, const Scope& text, const Scope& kda) {
    a.text(text, "hidden_act", "situ");                    // absent: SiTU-GLU, as released
    a.text(text, "moe_router_activation_func", "sigmoid"); // absent: sigmoid
    // The router bias steers selection only ("noaux_tc"); the released config has no
    // topk_method key, so absent means noaux_tc.
    a.text(text, "topk_method", "noaux_tc");
    // Group-limited routing is not implemented: one group, all of it kept (absent: 1).
    a.integer(text, "num_expert_group", 1);
    a.integer(text, "topk_group", 1);
    // true: the 64 rope dims are cached and scored but never rotated (absent: true).
    a.boolean(text, "mla_use_nope", true);
    // true: g_proj is one full-rank [heads*head_dim, hidden] matrix (absent: true).
    a.boolean(kda, "use_full_rank_gate", true);
}

void readQuantization(FieldReader& reader, ArchitectureCheck& arch, const json& q,
                      const std::string& path, QuantizationConfig& out) {
    if (!q.is_object()) {
        reader.problems.push_back(path + ": expected an object, got " + typeName(q));
        return;
    }
    Scope top{&q, path + "."};
    // Only the MXFP4 kernel exists: E2M1 nibbles, one E8M0 scale per 32 weights.
    arch.text(top, "quant_method", "compressed-tensors");
    arch.text(top, "format", "mxfp4-pack-quantized");
    if (const json* f = reader.find(top, {"format"}, false); f && f->is_string())
        out.format = f->get<std::string>();
    const json* groups = reader.find(top, {"config_groups"}, true);
    if (!groups) return;
    if (!groups->is_object() || groups->empty()) {
        reader.problems.push_back(path + ".config_groups: expected a non-empty object");
        return;
    }
    // Every group must agree: one group size serves the whole MXFP4 kernel.
    for (const auto& [groupName, group] : groups->items()) {
        const std::string groupPath = path + ".config_groups." + groupName;
        Scope groupScope{&group, groupPath + "."};
        arch.text(groupScope, "format", "mxfp4-pack-quantized");
        if (const json* f = reader.find(groupScope, {"format"}, false); f && f->is_string())
            out.format = f->get<std::string>();
        const json* weights = reader.find(groupScope, {"weights"}, true);
        if (!weights) continue;
        Scope weightScope{weights, groupPath + ".weights."};
        int groupSize = 0, numBits = 0;
        reader.requireInt(weightScope, {"group_size"}, groupSize);
        reader.requireInt(weightScope, {"num_bits"}, numBits);
        arch.integer(weightScope, "num_bits", 4);
        arch.integer(weightScope, "group_size", 32);
        arch.text(weightScope, "type", "float"); // E2M1, not integer codes
        if (out.groupSize != 0 && groupSize != out.groupSize)
            reader.problems.push_back(
                groupPath + ".weights.group_size: " + std::to_string(groupSize) + " differs from " +
                std::to_string(out.groupSize) + " in another group");
        out.groupSize = groupSize;
        out.numBits = numBits;
    }
}

// Value checks, after every field was read. Each problem is collected as well. Long on
// purpose: one line per rule, all of them visible together.
std::vector<std::string> validate(ModelConfig& c, bool kdaGiven) {
    std::vector<std::string> bad;
    auto positive = [&](const char* name, int v) {
        if (v <= 0)
            bad.push_back(std::string(name) + " = " + std::to_string(v) + " must be positive");
    };
    positive("hidden_size", c.hiddenSize);
    positive("num_hidden_layers", c.numHiddenLayers);
    positive("vocab_size", c.vocabSize);
    positive("num_heads (KDA)", c.kdaNumHeads);
    positive("head_dim (KDA)", c.kdaHeadDim);
    positive("short_conv_kernel_size", c.shortConvKernelSize);
    positive("num_attention_heads", c.numAttentionHeads);
    positive("q_lora_rank", c.qLoraRank);
    positive("kv_lora_rank", c.kvLoraRank);
    // A special-token id outside the vocabulary names no token: an end that never comes
    // (eos -1 or 2^40 used to be accepted and the answer ran to the token limit).
    for (const auto& [name, id] :
         {std::pair{"bos_token_id", c.bosTokenId}, std::pair{"eos_token_id", c.eosTokenId}})
        if (id && c.vocabSize > 0 && (*id < 0 || *id >= c.vocabSize))
            bad.push_back(std::string(name) + " = " + std::to_string(*id) +
                          " is not a token id (the vocabulary is 0.." +
                          std::to_string(c.vocabSize - 1) + ")");
    if (c.maxPositionEmbeddings && *c.maxPositionEmbeddings < 2)
        bad.push_back("max_position_embeddings = " + std::to_string(*c.maxPositionEmbeddings) +
                      " leaves no room for a prompt and an answer (at least 2)");
    positive("qk_nope_head_dim", c.qkNopeHeadDim);
    positive("v_head_dim", c.vHeadDim);
    positive("num_experts", c.numExperts);
    positive("routed_expert_hidden_size", c.routedExpertHiddenSize);
    positive("moe_intermediate_size", c.moeIntermediateSize);
    positive("intermediate_size", c.intermediateSize);
    positive("attn_res_block_size", c.attnResBlockSize);
    if (c.qkRopeHeadDim < 0)
        bad.push_back("qk_rope_head_dim = " + std::to_string(c.qkRopeHeadDim) + " is negative");
    if (c.numSharedExperts < 0)
        bad.push_back("num_shared_experts = " + std::to_string(c.numSharedExperts) +
                      " is negative");
    if (!(c.rmsNormEps > 0))
        bad.push_back("rms_norm_eps = " + std::to_string(c.rmsNormEps) + " must be positive");
    if (c.numExperts > 0 && (c.numExpertsPerToken < 1 || c.numExpertsPerToken > c.numExperts))
        bad.push_back("num_experts_per_token = " + std::to_string(c.numExpertsPerToken) +
                      " is outside 1.." + std::to_string(c.numExperts) + " (num_experts)");
    const int n = c.numHiddenLayers;
    if (n > 0 && (c.firstKDenseReplace < 0 || c.firstKDenseReplace > n))
        bad.push_back("first_k_dense_replace = " + std::to_string(c.firstKDenseReplace) +
                      " is outside 0.." + std::to_string(n));
    if (c.quantization && c.quantization->groupSize <= 0)
        bad.push_back("quantization_config group_size = " +
                      std::to_string(c.quantization->groupSize) + " must be positive");
    if (n <= 0) return bad;

    // owner[L] = which list claimed ONE-based layer L (0 = none yet).
    std::vector<int> owner(static_cast<std::size_t>(n) + 1, 0);
    auto claim = [&](const std::vector<int>& list, const char* name, int tag) {
        for (std::size_t i = 0; i < list.size(); ++i) {
            const int layer = list[i];
            if (layer < 1 || layer > n) {
                bad.push_back(std::string(name) + "[" + std::to_string(i) +
                              "] = " + std::to_string(layer) + " is outside 1.." +
                              std::to_string(n) + " (the list is ONE-based)");
                continue;
            }
            auto& slot = owner[static_cast<std::size_t>(layer)];
            if (slot == tag)
                bad.push_back(std::string(name) + " lists layer " + std::to_string(layer) +
                              " twice");
            else if (slot != 0)
                bad.push_back("layer " + std::to_string(layer) +
                              " is in both full_attn_layers and kda_layers");
            else
                slot = tag;
        }
    };
    claim(c.fullAttnLayers, "full_attn_layers", 1);
    if (kdaGiven) claim(c.kdaLayers, "kda_layers", 2);
    std::vector<int> unclaimed;
    for (int layer = 1; layer <= n; ++layer)
        if (owner[static_cast<std::size_t>(layer)] == 0) unclaimed.push_back(layer);
    if (kdaGiven && !unclaimed.empty()) {
        std::string list;
        for (std::size_t i = 0; i < unclaimed.size() && i < 12; ++i)
            list += (i ? "," : "") + std::to_string(unclaimed[i]);
        if (unclaimed.size() > 12) list += ",...";
        bad.push_back(std::to_string(unclaimed.size()) +
                      " layer(s) in neither kda_layers nor full_attn_layers: " + list);
    }
    if (!bad.empty()) return bad;

    // Without kda_layers (the flat test configs), KDA is exactly the complement of
    // full_attn_layers: every layer is still named by the file, just once.
    if (!kdaGiven) c.kdaLayers = unclaimed;
    std::sort(c.fullAttnLayers.begin(), c.fullAttnLayers.end());
    std::sort(c.kdaLayers.begin(), c.kdaLayers.end());
    c.layers.resize(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
        auto& spec = c.layers[static_cast<std::size_t>(i)];
        spec.attention =
            owner[static_cast<std::size_t>(i) + 1] == 1 ? AttentionKind::Mla : AttentionKind::Kda;
        spec.mlp = i < c.firstKDenseReplace ? MlpKind::Dense : MlpKind::Moe;
    }
    return bad;
}

[[noreturn]] void fail(std::string_view source, const std::string& what,
                       const std::vector<std::string>& items) {
    std::ostringstream msg;
    msg << source << ": " << what;
    for (const auto& item : items) msg << "\n    " << item;
    throw ConfigError(msg.str());
}

} // namespace

int ModelConfig::countAttention(AttentionKind kind) const {
    return static_cast<int>(std::count_if(layers.begin(), layers.end(),
                                          [&](const LayerSpec& s) { return s.attention == kind; }));
}

int ModelConfig::countMlp(MlpKind kind) const {
    return static_cast<int>(std::count_if(layers.begin(), layers.end(),
                                          [&](const LayerSpec& s) { return s.mlp == kind; }));
}

std::string ModelConfig::layerMapString() const {
    std::string s;
    for (const auto& spec : layers) s += spec.attention == AttentionKind::Mla ? 'M' : 'K';
    return s;
}

std::string ModelConfig::summary() const {
    std::ostringstream s;
    s << "hidden=" << hiddenSize << " layers=" << numHiddenLayers << " vocab=" << vocabSize << " | "
      << countAttention(AttentionKind::Mla) << " MLA + " << countAttention(AttentionKind::Kda)
      << " KDA | experts " << numExperts << " top" << numExpertsPerToken << " shared"
      << numSharedExperts << " | latent=" << routedExpertHiddenSize;
    if (!gateLowerBoundFromFile) s << " | gate_lower_bound " << gateLowerBound << " (not in file)";
    return s.str();
}

// Long on purpose: one read per config.json key, in the file's order, so the list of keys
// the engine understands is one screenful to compare with the released config.
ModelConfig parseModelConfig(std::string_view jsonText, std::string_view sourceName) {
    if (const auto deep = jsonDepthProblem(jsonText))
        throw ConfigError(std::string(sourceName) + ": " + *deep);
    json root;
    try {
        root = parseJsonWithoutDuplicateKeys<json>(jsonText);
    } catch (const DuplicateJsonKey& e) {
        throw ConfigError(std::string(sourceName) + ": " + e.what() +
                          "; which one is meant is not clear, refusing the file");
    } catch (const json::parse_error& e) {
        // Said in plain words: where, and what to do (the parser's own text names its
        // grammar, "syntax error while parsing object key - invalid literal").
        // e.byte counts from 1; past the last byte the text ended too early.
        const std::string where = e.byte > jsonText.size()
                                      ? "it ends after " + std::to_string(jsonText.size()) +
                                            " bytes, in the middle of a value"
                                      : "at byte " + std::to_string(e.byte);
        throw ConfigError(std::string(sourceName) + ": not valid JSON (" + where +
                          "): the file is damaged or is not a model's config.json; download "
                          "the model again (a download resumes and checks every file)");
    } catch (const json::exception& e) { // out_of_range for 1e999
        throw ConfigError(std::string(sourceName) + ": not valid JSON: " + e.what());
    }
    if (!root.is_object())
        throw ConfigError(std::string(sourceName) + ": expected a JSON object at the top level");

    ModelConfig c;
    Scope rootScope{&root, ""};
    Scope text = rootScope;
    FieldReader r;
    if (auto it = root.find("text_config"); it != root.end()) {
        if (!it->is_object())
            throw ConfigError(std::string(sourceName) + ": text_config is " + typeName(*it) +
                              ", expected an object");
        c.shape = ConfigShape::Nested;
        text = Scope{&*it, "text_config."};
    }
    Scope kda = text;
    if (auto it = text.object->find("linear_attn_config"); it != text.object->end()) {
        if (!it->is_object())
            r.problems.push_back(text.path + "linear_attn_config: expected an object, got " +
                                 typeName(*it));
        kda = Scope{&*it, text.path + "linear_attn_config."};
    } else if (c.shape == ConfigShape::Nested) {
        kda = Scope{nullptr, text.path + "linear_attn_config."}; // every KDA key reports missing
    }

    r.requireInt(text, {"hidden_size"}, c.hiddenSize);
    r.requireInt(text, {"num_hidden_layers"}, c.numHiddenLayers);
    r.requireInt(text, {"vocab_size"}, c.vocabSize);
    r.requireDouble(text, {"rms_norm_eps"}, c.rmsNormEps);
    // HF composite configs may keep tie_word_embeddings at the top level only.
    if (r.find(text, {"tie_word_embeddings"}, false) || c.shape == ConfigShape::Flat)
        r.requireBool(text, {"tie_word_embeddings"}, c.tieWordEmbeddings);
    else
        r.requireBool(rootScope, {"tie_word_embeddings"}, c.tieWordEmbeddings);

    r.requireInt(kda, {"num_heads", "kda_num_heads"}, c.kdaNumHeads);
    r.requireInt(kda, {"head_dim", "kda_head_dim"}, c.kdaHeadDim);
    r.requireInt(kda, {"short_conv_kernel_size"}, c.shortConvKernelSize);
    if (r.find(kda, {"gate_lower_bound"}, false)) {
        r.requireDouble(kda, {"gate_lower_bound"}, c.gateLowerBound);
        c.gateLowerBoundFromFile = true;
    }
    r.readIntList(kda, "full_attn_layers", true, c.fullAttnLayers);
    const bool kdaGiven = r.readIntList(kda, "kda_layers", false, c.kdaLayers);

    r.requireInt(text, {"num_attention_heads"}, c.numAttentionHeads);
    r.requireInt(text, {"q_lora_rank"}, c.qLoraRank);
    r.requireInt(text, {"kv_lora_rank"}, c.kvLoraRank);
    r.requireInt(text, {"qk_nope_head_dim"}, c.qkNopeHeadDim);
    r.requireInt(text, {"qk_rope_head_dim"}, c.qkRopeHeadDim);
    r.requireInt(text, {"v_head_dim"}, c.vHeadDim);
    r.requireBool(text, {"mla_use_output_gate"}, c.mlaUseOutputGate);

    r.requireInt(text, {"num_experts"}, c.numExperts);
    r.requireInt(text, {"num_experts_per_token"}, c.numExpertsPerToken);
    r.requireInt(text, {"num_shared_experts"}, c.numSharedExperts);
    r.requireInt(text, {"routed_expert_hidden_size"}, c.routedExpertHiddenSize);
    r.requireInt(text, {"moe_intermediate_size"}, c.moeIntermediateSize);
    r.requireDouble(text, {"routed_scaling_factor"}, c.routedScalingFactor);
    r.requireBool(text, {"moe_renormalize"}, c.moeRenormalize);
    r.requireBool(text, {"latent_moe_use_norm"}, c.latentMoeUseNorm);
    r.requireInt(text, {"first_k_dense_replace"}, c.firstKDenseReplace);
    r.requireInt(text, {"intermediate_size"}, c.intermediateSize);

    r.requireInt(text, {"attn_res_block_size"}, c.attnResBlockSize);
    r.requireDouble(text, {"activation_situ_beta", "situ_beta"}, c.activationSituBeta);
    r.requireDouble(text, {"activation_situ_linear_beta", "situ_linear_beta"},
                    c.activationSituLinearBeta);

    // The released file keeps the special-token ids at the top level.
    r.optionalInt64(text, {"bos_token_id"}, c.bosTokenId);
    r.optionalInt64(text, {"eos_token_id"}, c.eosTokenId);
    if (!c.bosTokenId) r.optionalInt64(rootScope, {"bos_token_id"}, c.bosTokenId);
    if (!c.eosTokenId) r.optionalInt64(rootScope, {"eos_token_id"}, c.eosTokenId);
    r.optionalInt64(text, {"max_position_embeddings"}, c.maxPositionEmbeddings);

    std::string qWhere;
    const json* q = r.find(text, {"quantization_config"}, false, &qWhere);
    if (!q && c.shape == ConfigShape::Nested)
        q = r.find(rootScope, {"quantization_config"}, false, &qWhere);
    ArchitectureCheck arch;
    checkArchitecture(arch, text, kda);
    if (q && !q->is_null()) {
        c.quantization.emplace();
        readQuantization(r, arch, *q, qWhere, *c.quantization);
        // compressed-tensors names the format at the top or in the group; absent in both
        // leaves the experts' encoding unknown.
        if (c.quantization->format.empty())
            r.problems.push_back(qWhere + ".format: missing (also looked in config_groups)");
    }

    if (!r.problems.empty())
        fail(sourceName,
             "cannot read " + std::to_string(r.problems.size()) +
                 " required field(s); refusing to substitute defaults, because a config this "
                 "reader cannot fully understand would silently produce a DIFFERENT model:",
             r.problems);
    if (!arch.problems.empty())
        fail(sourceName,
             std::to_string(arch.problems.size()) +
                 " field(s) describe an architecture this engine does not implement (it runs "
                 "the released Kimi K3 graph only):",
             arch.problems);
    const auto bad = validate(c, kdaGiven);
    if (!bad.empty()) fail(sourceName, "invalid value(s):", bad);
    return c;
}

ModelConfig readModelConfig(const std::filesystem::path& path) {
    std::string text;
    try {
        text = readRegularFile(path, kMaxConfigBytes, "config");
    } catch (const FileReadError& e) {
        throw ConfigError(e.what());
    }
    return parseModelConfig(text, path.string());
}

} // namespace k3
