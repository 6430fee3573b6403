#pragma once
// A synthetic checkpoint with the released tensor COUNT and naming (497,220 names over
// 96 shards), each tensor tiny, for timing and testing the index at full size.
// Shared by tst_checkpointindex and tests/bench/bench_index.cpp.

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace k3::test {

inline constexpr int kSyntheticLayers = 93;
inline constexpr int kSyntheticExperts = 896;
inline constexpr int kSyntheticShards = 96;
inline constexpr std::size_t kReleasedTensorCount = 497'220;

inline std::string shardFileName(int shard) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", shard + 1, kSyntheticShards);
    return name;
}

// Every tensor name in checkpoint order (each layer's tensors together). MLA layers
// are the ONE-based multiples of 4 plus 93; layer 0 is dense. The reference names
// account for 497,052 tensors; the 168 the release has beyond those (7 per MLA
// layer) are filled with "unlisted_K" names so the count, and the index size, match.
inline std::vector<std::string> syntheticTensorNames() {
    std::vector<std::string> names;
    names.reserve(kReleasedTensorCount);
    const std::string p = "language_model.model.";
    names.push_back(p + "embed_tokens.weight");
    for (int layer = 0; layer < kSyntheticLayers; ++layer) {
        const std::string l = p + "layers." + std::to_string(layer) + ".";
        for (const char* n :
             {"input_layernorm", "post_attention_layernorm", "self_attention_res_norm",
              "self_attention_res_proj", "mlp_res_norm", "mlp_res_proj"})
            names.push_back(l + n + ".weight");
        const bool mla = (layer + 1) % 4 == 0 || layer + 1 == kSyntheticLayers;
        if (mla) {
            for (const char* n : {"q_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_proj_with_mqa",
                                  "kv_a_layernorm", "kv_b_proj", "g_proj", "o_proj"})
                names.push_back(l + "self_attn." + n + ".weight");
            for (int k = 0; k < 7; ++k)
                names.push_back(l + "self_attn.unlisted_" + std::to_string(k) + ".weight");
        } else {
            for (const char* n :
                 {"q_proj", "k_proj", "v_proj", "g_proj", "o_proj", "q_conv1d", "k_conv1d",
                  "v_conv1d", "f_a_proj", "f_b_proj", "b_proj", "o_norm"})
                names.push_back(l + "self_attn." + n + ".weight");
            names.push_back(l + "self_attn.A_log");
            names.push_back(l + "self_attn.dt_bias");
        }
        if (layer == 0) {
            for (const char* n : {"gate_proj", "up_proj", "down_proj"})
                names.push_back(l + "mlp." + n + ".weight");
            continue;
        }
        const std::string moe = l + "block_sparse_moe.";
        for (const char* n : {"gate.weight", "gate.e_score_correction_bias",
                              "routed_expert_down_proj.weight", "routed_expert_up_proj.weight",
                              "routed_expert_norm.weight", "shared_experts.gate_proj.weight",
                              "shared_experts.up_proj.weight", "shared_experts.down_proj.weight"})
            names.push_back(moe + n);
        for (int e = 0; e < kSyntheticExperts; ++e) {
            const std::string x = moe + "experts." + std::to_string(e) + ".";
            for (const char* w : {"w1", "w2", "w3"}) {
                names.push_back(x + w + ".weight_packed");
                names.push_back(x + w + ".weight_scale");
            }
        }
    }
    for (const char* n :
         {"norm.weight", "output_attn_res_norm.weight", "output_attn_res_proj.weight"})
        names.push_back(p + n);
    names.push_back("language_model.lm_head.weight");
    return names;
}

// Tensor i lives in shard shardOf(i): contiguous runs, as in the release.
inline int syntheticShardOf(std::size_t i, std::size_t count) {
    return static_cast<int>(i * kSyntheticShards / count);
}

// Each tensor is U8 [2, 3] (6 bytes) at the next offset of its shard.
inline constexpr std::uint64_t kSyntheticTensorBytes = 6;

// Writes model.safetensors.index.json and the 96 shards into `dir`; returns the names.
// Returns the index file's size in *indexBytes when given.
inline std::vector<std::string> writeSyntheticCheckpoint(const std::string& dir,
                                                         std::uint64_t* indexBytes = nullptr) {
    const auto names = syntheticTensorNames();
    std::string index =
        "{\"metadata\": {\"total_size\": " + std::to_string(names.size() * kSyntheticTensorBytes) +
        "}, \"weight_map\": {";
    std::vector<std::string> headers(kSyntheticShards, "{\"__metadata__\":{\"format\":\"pt\"}");
    std::vector<std::uint64_t> used(kSyntheticShards, 0);
    for (std::size_t i = 0; i < names.size(); ++i) {
        const int shard = syntheticShardOf(i, names.size());
        index += (i ? ",\n  \"" : "\n  \"") + names[i] + "\": \"" + shardFileName(shard) + "\"";
        auto& h = headers[static_cast<std::size_t>(shard)];
        auto& at = used[static_cast<std::size_t>(shard)];
        h += ",\"" + names[i] + "\":{\"dtype\":\"U8\",\"shape\":[2,3],\"data_offsets\":[" +
             std::to_string(at) + "," + std::to_string(at + kSyntheticTensorBytes) + "]}";
        at += kSyntheticTensorBytes;
    }
    index += "\n}}\n";
    std::ofstream(dir + "/model.safetensors.index.json", std::ios::binary) << index;
    if (indexBytes) *indexBytes = index.size();
    for (int s = 0; s < kSyntheticShards; ++s) {
        std::string& h = headers[static_cast<std::size_t>(s)];
        h += "}";
        std::string file(8, '\0');
        for (int b = 0; b < 8; ++b) file[b] = static_cast<char>((h.size() >> (8 * b)) & 0xff);
        file += h;
        file.append(used[static_cast<std::size_t>(s)], '\x5a');
        std::ofstream(dir + "/" + shardFileName(s), std::ios::binary) << file;
    }
    return names;
}

} // namespace k3::test
