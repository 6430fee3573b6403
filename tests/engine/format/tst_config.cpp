// config.json reader: the released nested shape, the flat shape, and refusals that
// name the file and every problem at once.
#include "k3/config.hpp"

#include <nlohmann/json.hpp>

#include <QtTest>

#include <fstream>
#include <sstream>

using nlohmann::json;

namespace {

const char* kFixture = K3_SOURCE_DIR "/tests/fixtures/config/kimi-k3-config.json";

json loadJson(const std::string& path) {
    std::ifstream in(path);
    return json::parse(in);
}

// The message of the ConfigError that parsing `text` raises ("" when it parses).
std::string refusal(const std::string& text, const std::string& name = "mutated.json") {
    try {
        k3::parseModelConfig(text, name);
    } catch (const k3::ConfigError& e) {
        return e.what();
    }
    return {};
}

std::string refusalOfFile(const std::string& path) {
    try {
        k3::readModelConfig(path);
    } catch (const k3::ConfigError& e) {
        return e.what();
    }
    return {};
}

// The nested release config flattened: every key at the top level.
json flatten(const json& nested) {
    json flat = nested;
    const json text = flat["text_config"];
    flat.erase("text_config");
    for (const auto& [k, v] : text.items())
        if (k != "linear_attn_config") flat[k] = v;
    for (const auto& [k, v] : text["linear_attn_config"].items()) flat[k] = v;
    return flat;
}

std::vector<int> range(int first, int last, int step) {
    std::vector<int> v;
    for (int i = first; i <= last; i += step) v.push_back(i);
    return v;
}

} // namespace

class TestConfig : public QObject {
    Q_OBJECT

private slots:
    void releasedNestedConfig() {
        const k3::ModelConfig c = k3::readModelConfig(kFixture);
        QCOMPARE(c.shape, k3::ConfigShape::Nested);
        QCOMPARE(c.hiddenSize, 7168);
        QCOMPARE(c.numHiddenLayers, 93);
        QCOMPARE(c.vocabSize, 163840);
        QCOMPARE(c.rmsNormEps, 1e-5);
        QCOMPARE(c.tieWordEmbeddings, false);
        QCOMPARE(c.kdaNumHeads, 96);
        QCOMPARE(c.kdaHeadDim, 128);
        QCOMPARE(c.shortConvKernelSize, 4);
        QCOMPARE(c.gateLowerBound, -5.0);
        QVERIFY(c.gateLowerBoundFromFile);
        QCOMPARE(c.numAttentionHeads, 96);
        QCOMPARE(c.qLoraRank, 1536);
        QCOMPARE(c.kvLoraRank, 512);
        QCOMPARE(c.qkNopeHeadDim, 128);
        QCOMPARE(c.qkRopeHeadDim, 64);
        QCOMPARE(c.vHeadDim, 128);
        QCOMPARE(c.mlaUseOutputGate, true);
        QCOMPARE(c.numExperts, 896);
        QCOMPARE(c.numExpertsPerToken, 16);
        QCOMPARE(c.numSharedExperts, 2);
        QCOMPARE(c.routedExpertHiddenSize, 3584);
        QCOMPARE(c.moeIntermediateSize, 3072);
        QCOMPARE(c.routedScalingFactor, 1.0);
        QCOMPARE(c.moeRenormalize, true);
        QCOMPARE(c.latentMoeUseNorm, true);
        QCOMPARE(c.firstKDenseReplace, 1);
        QCOMPARE(c.intermediateSize, 33792);
        QCOMPARE(c.attnResBlockSize, 12);
        QCOMPARE(c.activationSituBeta, 4.0);
        QCOMPARE(c.activationSituLinearBeta, 25.0);
        QCOMPARE(c.bosTokenId.value_or(-1), std::int64_t{163584});
        QCOMPARE(c.eosTokenId.value_or(-1), std::int64_t{163586});
        QVERIFY(c.quantization.has_value());
        QCOMPARE(c.quantization->groupSize, 32);
        QCOMPARE(c.quantization->numBits, 4);
        QCOMPARE(c.quantization->format, std::string("mxfp4-pack-quantized"));

        // The layer map: 24 MLA (ONE-based 4,8,...,92 and 93), 69 KDA, layer 0 dense.
        std::vector<int> full = range(4, 92, 4);
        full.push_back(93);
        QCOMPARE(c.fullAttnLayers, full);
        QCOMPARE(c.kdaLayers.size(), std::size_t{69});
        QCOMPARE(c.layers.size(), std::size_t{93});
        QCOMPARE(c.countAttention(k3::AttentionKind::Mla), 24);
        QCOMPARE(c.countAttention(k3::AttentionKind::Kda), 69);
        QCOMPARE(c.countMlp(k3::MlpKind::Dense), 1);
        QCOMPARE(c.countMlp(k3::MlpKind::Moe), 92);
        QCOMPARE(c.layers[0].mlp, k3::MlpKind::Dense);
        QCOMPARE(c.layers[0].attention, k3::AttentionKind::Kda);
        QCOMPARE(c.layers[1].mlp, k3::MlpKind::Moe);
        QCOMPARE(c.layers[2].attention, k3::AttentionKind::Kda);
        QCOMPARE(c.layers[3].attention, k3::AttentionKind::Mla); // file layer 4
        QCOMPARE(c.layers[4].attention, k3::AttentionKind::Kda);
        QCOMPARE(c.layers[90].attention, k3::AttentionKind::Kda);
        QCOMPARE(c.layers[91].attention, k3::AttentionKind::Mla); // 92
        QCOMPARE(c.layers[92].attention, k3::AttentionKind::Mla); // 93
        std::string expected;
        for (int i = 0; i < 23; ++i) expected += "KKKM";
        expected += "M";
        QCOMPARE(c.layerMapString(), expected);
        QVERIFY(c.summary().find("24 MLA + 69 KDA") != std::string::npos);
    }

    void flatShapeReadsTheSame() {
        const json nested = loadJson(kFixture);
        const k3::ModelConfig a = k3::parseModelConfig(nested.dump(), "nested.json");
        const k3::ModelConfig b = k3::parseModelConfig(flatten(nested).dump(), "flat.json");
        QCOMPARE(b.shape, k3::ConfigShape::Flat);
        QCOMPARE(b.hiddenSize, a.hiddenSize);
        QCOMPARE(b.kdaNumHeads, a.kdaNumHeads);
        QCOMPARE(b.kdaHeadDim, a.kdaHeadDim);
        QCOMPARE(b.fullAttnLayers, a.fullAttnLayers);
        QCOMPARE(b.kdaLayers, a.kdaLayers);
        QCOMPARE(b.layerMapString(), a.layerMapString());
        QCOMPARE(b.numExpertsPerToken, a.numExpertsPerToken);
        QCOMPARE(b.quantization->groupSize, 32);
        QCOMPARE(b.bosTokenId.value_or(-1), std::int64_t{163584});
    }

    // The peer's tiny flat config (alias names kda_num_heads, situ_beta, no kda_layers).
    void peerTinyFlatConfig() {
        const json manifest = loadJson(K3_PEER_DIR "/ops/MANIFEST.json");
        const k3::ModelConfig c = k3::parseModelConfig(manifest["config"].dump(), "MANIFEST.json");
        QCOMPARE(c.hiddenSize, 128);
        QCOMPARE(c.numHiddenLayers, 13);
        QCOMPARE(c.kdaNumHeads, 4);
        QCOMPARE(c.kdaHeadDim, 16);
        QCOMPARE(c.activationSituBeta, 4.0);
        QCOMPARE(c.activationSituLinearBeta, 25.0);
        QCOMPARE(c.numExpertsPerToken, 2);
        // What the peer's oracle printed: "layer map (0-based): KKKMKKKMKKKMM".
        QCOMPARE(c.layerMapString(), std::string("KKKMKKKMKKKMM"));
        QCOMPARE(c.kdaLayers, (std::vector<int>{1, 2, 3, 5, 6, 7, 9, 10, 11}));
        QVERIFY(!c.quantization.has_value());
        QVERIFY(!c.bosTokenId.has_value());
    }

    void peerRefusals_data() {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QStringList>("mustSay");
        QTest::newRow("no_layermap")
            << "no_layermap.json"
            << QStringList{"full_attn_layers: missing", "1 required field(s)"};
        QTest::newRow("bad_layer_index")
            << "bad_layer_index.json"
            << QStringList{"full_attn_layers[2] = 999 is outside 1..13", "ONE-based"};
        QTest::newRow("bad_topk") << "bad_topk.json"
                                  << QStringList{"num_experts_per_token = 128 is outside 1..8"};
    }
    void peerRefusals() {
        QFETCH(QString, file);
        QFETCH(QStringList, mustSay);
        const std::string path = std::string(K3_PEER_DIR "/cfg/") + file.toStdString();
        const std::string message = refusalOfFile(path);
        QVERIFY2(message.find(path) != std::string::npos, message.c_str());
        for (const QString& s : mustSay)
            QVERIFY2(message.find(s.toStdString()) != std::string::npos, message.c_str());
    }

    void everyMissingFieldListedAtOnce() {
        json j = loadJson(kFixture);
        j["text_config"].erase("hidden_size");
        j["text_config"].erase("vocab_size");
        j["text_config"]["linear_attn_config"].erase("num_heads");
        j["text_config"]["q_lora_rank"] = "1536";
        j["text_config"]["hidden_size"] = nullptr; // present but wrong type wins over absent
        const std::string m = refusal(j.dump(), "broken/config.json");
        QVERIFY2(m.find("broken/config.json") == 0, m.c_str());
        QVERIFY2(m.find("4 required field(s)") != std::string::npos, m.c_str());
        QVERIFY2(m.find("text_config.hidden_size: expected an integer, got null") !=
                     std::string::npos,
                 m.c_str());
        QVERIFY2(m.find("text_config.vocab_size: missing") != std::string::npos, m.c_str());
        QVERIFY2(m.find("text_config.linear_attn_config.num_heads: missing") != std::string::npos,
                 m.c_str());
        QVERIFY2(m.find("text_config.q_lora_rank: expected an integer, got string \"1536\"") !=
                     std::string::npos,
                 m.c_str());
    }

    void wrongTypesRefused_data() {
        QTest::addColumn<QString>("key");
        QTest::addColumn<QString>("value");
        QTest::addColumn<QString>("mustSay");
        QTest::newRow("float for int") << "hidden_size"
                                       << "7168.0"
                                       << "hidden_size: expected an integer, got number 7168.0";
        QTest::newRow("string for bool") << "mla_use_output_gate"
                                         << "\"true\""
                                         << "mla_use_output_gate: expected true or false";
        QTest::newRow("bool for number") << "rms_norm_eps"
                                         << "true"
                                         << "rms_norm_eps: expected a number, got boolean";
        QTest::newRow("huge int") << "vocab_size"
                                  << "99999999999"
                                  << "vocab_size: 99999999999 does not fit in a 32-bit integer";
        QTest::newRow("layer list not a list") << "linear_attn_config.full_attn_layers"
                                               << "4"
                                               << "full_attn_layers: expected a list";
        QTest::newRow("layer list of strings")
            << "linear_attn_config.full_attn_layers"
            << "[\"4\"]"
            << "full_attn_layers[0]: expected an integer, got string";
        QTest::newRow("gate bound string") << "linear_attn_config.gate_lower_bound"
                                           << "\"-5\""
                                           << "gate_lower_bound: expected a number";
        QTest::newRow("group size string")
            << "quantization_config.config_groups.group_0.weights.group_size"
            << "\"32\""
            << "weights.group_size: expected an integer";
    }
    void wrongTypesRefused() {
        QFETCH(QString, key);
        QFETCH(QString, value);
        QFETCH(QString, mustSay);
        json j = loadJson(kFixture);
        json* node = &j["text_config"];
        const QStringList parts = key.split('.');
        for (int i = 0; i + 1 < parts.size(); ++i) node = &(*node)[parts[i].toStdString()];
        (*node)[parts.last().toStdString()] = json::parse(value.toStdString());
        const std::string m = refusal(j.dump());
        QVERIFY2(m.find(mustSay.toStdString()) != std::string::npos, m.c_str());
    }

    void layerMapRefused_data() {
        QTest::addColumn<QString>("full");
        QTest::addColumn<QString>("kda");
        QTest::addColumn<QString>("mustSay");
        // A tiny 6-layer map keeps the cases readable.
        QTest::newRow("zero-based slip") << "[0,4,6]"
                                         << ""
                                         << "full_attn_layers[0] = 0 is outside 1..6";
        QTest::newRow("past the end") << "[4,7]"
                                      << ""
                                      << "full_attn_layers[1] = 7 is outside 1..6";
        QTest::newRow("duplicate") << "[4,4,6]"
                                   << ""
                                   << "full_attn_layers lists layer 4 twice";
        QTest::newRow("in both") << "[4,6]"
                                 << "[1,2,3,4,5]"
                                 << "layer 4 is in both full_attn_layers and kda_layers";
        QTest::newRow("in neither") << "[4,6]"
                                    << "[1,2,3]"
                                    << "1 layer(s) in neither kda_layers nor full_attn_layers: 5";
        QTest::newRow("negative") << "[-1,6]"
                                  << ""
                                  << "full_attn_layers[0] = -1 is outside 1..6";
    }
    void layerMapRefused() {
        QFETCH(QString, full);
        QFETCH(QString, kda);
        QFETCH(QString, mustSay);
        json j = loadJson(kFixture);
        j["text_config"]["num_hidden_layers"] = 6;
        auto& lin = j["text_config"]["linear_attn_config"];
        lin["full_attn_layers"] = json::parse(full.toStdString());
        if (kda.isEmpty())
            lin.erase("kda_layers");
        else
            lin["kda_layers"] = json::parse(kda.toStdString());
        const std::string m = refusal(j.dump());
        QVERIFY2(m.find(mustSay.toStdString()) != std::string::npos, m.c_str());
    }

    void smallMapWithoutKdaListIsTheComplement() {
        json j = loadJson(kFixture);
        j["text_config"]["num_hidden_layers"] = 6;
        j["text_config"]["linear_attn_config"]["full_attn_layers"] = {6, 3};
        j["text_config"]["linear_attn_config"].erase("kda_layers");
        const k3::ModelConfig c = k3::parseModelConfig(j.dump(), "six.json");
        QCOMPARE(c.layerMapString(), std::string("KKMKKM"));
        QCOMPARE(c.fullAttnLayers, (std::vector<int>{3, 6}));
        QCOMPARE(c.kdaLayers, (std::vector<int>{1, 2, 4, 5}));
    }

    void topKBounds() {
        json j = loadJson(kFixture);
        j["text_config"]["num_experts_per_token"] = 0;
        QVERIFY(refusal(j.dump()).find("num_experts_per_token = 0 is outside 1..896") !=
                std::string::npos);
        j["text_config"]["num_experts_per_token"] = 896;
        QCOMPARE(refusal(j.dump()), std::string());
        j["text_config"]["num_experts_per_token"] = 897;
        QVERIFY(refusal(j.dump()).find("num_experts_per_token = 897 is outside 1..896") !=
                std::string::npos);
    }

    // Issue 35 item 19: values that were accepted silently.
    void specialTokensAndPositionsAreChecked() {
        json j = loadJson(kFixture);
        const int vocab = j["text_config"]["vocab_size"].get<int>();
        const std::string range = "(the vocabulary is 0.." + std::to_string(vocab - 1) + ")";
        for (const std::int64_t id : {std::int64_t(-1), std::int64_t(1) << 40}) {
            json bad = j;
            bad["eos_token_id"] = id;
            bad["text_config"].erase("eos_token_id");
            const std::string m = refusal(bad.dump());
            QVERIFY2(m.find("eos_token_id = " + std::to_string(id) + " is not a token id " +
                            range) != std::string::npos,
                     m.c_str());
        }
        for (const int positions : {0, 1}) {
            json bad = j;
            bad["text_config"]["max_position_embeddings"] = positions;
            const std::string m = refusal(bad.dump());
            QVERIFY2(m.find("max_position_embeddings = " + std::to_string(positions) +
                            " leaves no room for a prompt and an answer (at least 2)") !=
                         std::string::npos,
                     m.c_str());
        }
        j["text_config"]["max_position_embeddings"] = 2;
        QCOMPARE(refusal(j.dump()), std::string());
    }

    // Issue 35 item 19: {"hidden_size": 7168, ..., "hidden_size": 64} meant whichever the
    // reader kept; refused naming the key.
    void duplicateKeysAreRefused() {
        const json j = loadJson(kFixture);
        const std::string text = j.dump();
        const std::string first = j.begin().key(); // a top-level key, given again in front
        const std::string twice = "{\"" + first + "\": 5, " + text.substr(1);
        QCOMPARE(refusal(twice, "dup.json"),
                 "dup.json: key \"" + first +
                     "\" appears twice in one object; which one is meant is not clear, "
                     "refusing the file");
        // The same key in two objects is not a duplicate.
        QCOMPARE(refusal(text), std::string());
    }

    // The key name is unconfirmed in the release: absent means the documented -5, flagged.
    void gateLowerBoundFallback() {
        json j = loadJson(kFixture);
        j["text_config"]["linear_attn_config"].erase("gate_lower_bound");
        const k3::ModelConfig c = k3::parseModelConfig(j.dump(), "nogate.json");
        QCOMPARE(c.gateLowerBound, -5.0);
        QVERIFY(!c.gateLowerBoundFromFile);
        QVERIFY(c.summary().find("(not in file)") != std::string::npos);
        j["text_config"]["linear_attn_config"]["gate_lower_bound"] = -3.5;
        QCOMPARE(k3::parseModelConfig(j.dump(), "gate.json").gateLowerBound, -3.5);
    }

    void nestedWithoutLinearAttnConfig() {
        json j = loadJson(kFixture);
        j["text_config"].erase("linear_attn_config");
        const std::string m = refusal(j.dump());
        QVERIFY2(m.find("4 required field(s)") != std::string::npos, m.c_str());
        QVERIFY2(m.find("text_config.linear_attn_config.num_heads: missing") != std::string::npos,
                 m.c_str());
        QVERIFY2(m.find("text_config.linear_attn_config.full_attn_layers: missing") !=
                     std::string::npos,
                 m.c_str());
    }

    // Issue 22, point 10: a field that changes the architecture is refused by name, with
    // its value and the supported one (the exact message, one field at a time).
    void unsupportedArchitectureRefused_data() {
        QTest::addColumn<QString>("key");
        QTest::addColumn<QString>("value");
        QTest::addColumn<QString>("line");
        const QString q = QStringLiteral("quantization_config.");
        const QString w = q + QStringLiteral("config_groups.group_0.weights.");
        QTest::newRow("hidden_act") << "hidden_act"
                                    << "\"silu\""
                                    << "text_config.hidden_act = \"silu\": supported \"situ\"";
        QTest::newRow("router activation")
            << "moe_router_activation_func"
            << "\"softmax\""
            << "text_config.moe_router_activation_func = \"softmax\": supported \"sigmoid\"";
        QTest::newRow("topk_method")
            << "topk_method"
            << "\"greedy\""
            << "text_config.topk_method = \"greedy\": supported \"noaux_tc\"";
        QTest::newRow("num_expert_group") << "num_expert_group"
                                          << "8"
                                          << "text_config.num_expert_group = 8: supported 1";
        QTest::newRow("topk_group") << "topk_group"
                                    << "4"
                                    << "text_config.topk_group = 4: supported 1";
        QTest::newRow("mla_use_nope") << "mla_use_nope"
                                      << "false"
                                      << "text_config.mla_use_nope = false: supported true";
        QTest::newRow("mla_use_nope string")
            << "mla_use_nope"
            << "\"true\""
            << "text_config.mla_use_nope = \"true\": supported true";
        QTest::newRow("use_full_rank_gate")
            << "linear_attn_config.use_full_rank_gate"
            << "false"
            << "text_config.linear_attn_config.use_full_rank_gate = false: supported true";
        QTest::newRow("num_bits") << w + "num_bits"
                                  << "8"
                                  << "text_config.quantization_config.config_groups.group_0."
                                     "weights.num_bits = 8: supported 4";
        QTest::newRow("group_size") << w + "group_size"
                                    << "64"
                                    << "text_config.quantization_config.config_groups.group_0."
                                       "weights.group_size = 64: supported 32";
        QTest::newRow("weight type") << w + "type"
                                     << "\"int\""
                                     << "text_config.quantization_config.config_groups.group_0."
                                        "weights.type = \"int\": supported \"float\"";
        QTest::newRow("format") << q + "format"
                                << "\"nvfp4-pack-quantized\""
                                << "text_config.quantization_config.format = "
                                   "\"nvfp4-pack-quantized\": supported \"mxfp4-pack-quantized\"";
        QTest::newRow("group format")
            << q + "config_groups.group_0.format"
            << "\"float-quantized\""
            << "text_config.quantization_config.config_groups.group_0.format = "
               "\"float-quantized\": supported \"mxfp4-pack-quantized\"";
        QTest::newRow("quant_method") << q + "quant_method"
                                      << "\"gptq\""
                                      << "text_config.quantization_config.quant_method = \"gptq\": "
                                         "supported \"compressed-tensors\"";
    }
    void unsupportedArchitectureRefused() {
        QFETCH(QString, key);
        QFETCH(QString, value);
        QFETCH(QString, line);
        json j = loadJson(kFixture);
        json* node = &j["text_config"];
        const QStringList parts = key.split('.');
        for (int i = 0; i + 1 < parts.size(); ++i) node = &(*node)[parts[i].toStdString()];
        (*node)[parts.last().toStdString()] = json::parse(value.toStdString());
        const std::string m = refusal(j.dump(), "arch/config.json");
        QCOMPARE(QString::fromStdString(m),
                 QStringLiteral("arch/config.json: 1 field(s) describe an architecture this "
                                "engine does not implement (it runs the released Kimi K3 graph "
                                "only):\n    ") +
                     line);
    }

    void everyUnsupportedFieldListedAtOnce() {
        json j = loadJson(kFixture);
        j["text_config"]["hidden_act"] = "gelu";
        j["text_config"]["topk_method"] = "group_limited_greedy";
        j["text_config"]["num_expert_group"] = 8;
        j["text_config"]["topk_group"] = 4;
        j["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] =
            8;
        const std::string m = refusal(j.dump(), "arch/config.json");
        QCOMPARE(QString::fromStdString(m),
                 QStringLiteral(
                     "arch/config.json: 5 field(s) describe an architecture this engine does not "
                     "implement (it runs the released Kimi K3 graph only):\n"
                     "    text_config.hidden_act = \"gelu\": supported \"situ\"\n"
                     "    text_config.topk_method = \"group_limited_greedy\": supported "
                     "\"noaux_tc\"\n"
                     "    text_config.num_expert_group = 8: supported 1\n"
                     "    text_config.topk_group = 4: supported 1\n"
                     "    text_config.quantization_config.config_groups.group_0.weights.num_bits "
                     "= 8: supported 4"));
        // The flat shape names the same fields without the prefix.
        const std::string f = refusal(flatten(j).dump(), "flat.json");
        QVERIFY2(f.find("flat.json: 5 field(s)") == 0, f.c_str());
        QVERIFY2(f.find("\n    hidden_act = \"gelu\": supported \"situ\"") != std::string::npos,
                 f.c_str());
    }

    // Absent, each of those fields takes the released value: the config still reads, and
    // without quantization_config the experts are plain float tensors.
    void absentArchitectureFieldsTakeTheReleasedValues() {
        json j = loadJson(kFixture);
        for (const char* k :
             {"hidden_act", "moe_router_activation_func", "topk_method", "num_expert_group",
              "topk_group", "mla_use_nope", "quantization_config"})
            j["text_config"].erase(k);
        j["text_config"]["linear_attn_config"].erase("use_full_rank_gate");
        const k3::ModelConfig c = k3::parseModelConfig(j.dump(), "absent.json");
        QCOMPARE(c.hiddenSize, 7168);
        QVERIFY(!c.quantization);
        const k3::ModelConfig released = k3::readModelConfig(kFixture);
        QVERIFY(released.quantization);
        QCOMPARE(released.quantization->format, std::string("mxfp4-pack-quantized"));
        QCOMPARE(released.quantization->numBits, 4);
        QCOMPARE(released.quantization->groupSize, 32);
        // A quantization_config that names no format anywhere leaves the encoding unknown.
        json nf = loadJson(kFixture);
        nf["text_config"]["quantization_config"].erase("format");
        nf["text_config"]["quantization_config"]["config_groups"]["group_0"].erase("format");
        const std::string m = refusal(nf.dump(), "nf.json");
        QVERIFY2(m.find("text_config.quantization_config.format: missing (also looked in "
                        "config_groups)") != std::string::npos,
                 m.c_str());
    }

    void notJsonOrWrongShape() {
        QCOMPARE(
            refusal("{\"hidden_size\": 12,", "trunc.json"),
            std::string("trunc.json: not valid JSON (it ends after 19 bytes, in the middle of a "
                        "value): the file is damaged or is "
                        "not a model's config.json; download the model again (a download "
                        "resumes and checks every file)"));
        QCOMPARE(refusal("{x}", "x.json"),
                 std::string("x.json: not valid JSON (at byte 2): the file is damaged or is not "
                             "a model's config.json; download the model again (a download "
                             "resumes and checks every file)"));
        QVERIFY(refusal("[1,2]", "arr.json").find("arr.json: expected a JSON object") == 0);
        QVERIFY(
            refusal("{\"text_config\": 3}", "tc.json").find("tc.json: text_config is integer 3") ==
            0);
        // Found by fuzz_model_config: a number too large for a double escaped as
        // nlohmann's out_of_range instead of a ConfigError.
        QVERIFY(
            refusal("{\"pad_token_id\": 1E4444}", "big.json").find("big.json: not valid JSON") ==
            0);
        const std::string m = refusalOfFile("/nonexistent/dir/config.json");
        QVERIFY2(m.find("/nonexistent/dir/config.json: cannot open") == 0, m.c_str());
    }
};

QTEST_GUILESS_MAIN(TestConfig)
#include "tst_config.moc"
