// The simdjson scan of headers and index (engine/src/format/SafetensorsJson.cpp): what it
// refuses beyond tst_safetensors' cases, where it says the text breaks, and the order
// tensors() gives back.
#include "k3/name_map.hpp"
#include "k3/safetensors.hpp"

#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace {

std::string refusal(const std::function<void()>& f) {
    try {
        f();
    } catch (const k3::FormatError& e) {
        return e.what();
    }
    return "(accepted)";
}

void writeBytes(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
}

// A shard: 8-byte little-endian header length, the header, `dataBytes` bytes of data.
std::string shardBytes(const std::string& header, std::size_t dataBytes) {
    std::string out(8, '\0');
    for (int b = 0; b < 8; ++b) out[b] = static_cast<char>((header.size() >> (8 * b)) & 0xff);
    return out + header + std::string(dataBytes, '\x11');
}

std::string u8Tensor(const std::string& name, int begin) {
    return "\"" + name + "\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[" +
           std::to_string(begin) + "," + std::to_string(begin + 2) + "]}";
}

} // namespace

class TestSafetensorsJson : public QObject {
    Q_OBJECT

    QTemporaryDir tmp_;
    std::string path(const char* name) const { return (tmp_.path() + "/" + name).toStdString(); }

    std::string headerRefusal(const std::string& header) {
        const std::string file = path("h.safetensors");
        writeBytes(file, shardBytes(header, 16));
        return refusal([&] { k3::readShardHeader(file); });
    }

private slots:
    void headerSyntaxNamesTheByte() {
        // nlohmann's convention, as before: the 1-based position of the offending byte.
        std::string m = headerRefusal("{" + u8Tensor("a", 0) + "} x");
        QVERIFY2(m.find("h.safetensors: header is not valid JSON at byte 55: ") !=
                     std::string::npos,
                 m.c_str());
        m = headerRefusal("{" + u8Tensor("a", 0) + "}{}");
        QVERIFY2(m.find("header is not valid JSON at byte 54: ") != std::string::npos, m.c_str());
        m = headerRefusal("{" + u8Tensor("a", 0) + ",}");
        QVERIFY2(m.find("header is not valid JSON at byte 54: ") != std::string::npos, m.c_str());
        m = headerRefusal(R"({"a":{"dtype":"U8","shape":[2 2],"data_offsets":[0,2]}})");
        QVERIFY2(m.find("header is not valid JSON at byte 31: ") != std::string::npos, m.c_str());
        m = headerRefusal("{\"a\xff\":1}");
        QVERIFY2(m.find("header is not valid JSON") != std::string::npos, m.c_str());
    }

    void freeFormMetadataMustStillBeJson() {
        const std::string tensor = u8Tensor("a", 0);
        std::string m = headerRefusal(R"({"__metadata__":{"x":[1,tru]},)" + tensor + "}");
        QVERIFY2(m.find("header is not valid JSON at byte 28: ") != std::string::npos, m.c_str());
        m = headerRefusal(R"({"__metadata__":{"x":01},)" + tensor + "}");
        QVERIFY2(m.find("header is not valid JSON") != std::string::npos, m.c_str());
        const std::string file = path("ok.safetensors");
        writeBytes(file, shardBytes(R"({"__metadata__":{"x":[1.5e3,true,null,{"y":"\u00e9"}]},)" +
                                        tensor + "}",
                                    2));
        const k3::ShardHeader h = k3::readShardHeader(file);
        QCOMPARE(h.tensors.size(), std::size_t{1});
        QCOMPARE(h.tensors[0].first, std::string("a"));
    }

    // Issue 35 item 7: __metadata__ nested 100,000 deep ran simdjson's recursive skip out
    // of stack (SIGSEGV); an index's extra field 50,000 deep too. 64 levels is the limit.
    void deepJsonIsRefusedNamingTheFile() {
        const std::string deep = std::string(100000, '[') + std::string(100000, ']');
        const std::string tensor = u8Tensor("a", 0);
        std::string m = headerRefusal("{\"__metadata__\":" + deep + "," + tensor + "}");
        QVERIFY2(m.ends_with("h.safetensors: header is JSON nested deeper than 64 levels of "
                             "arrays and objects (at byte 79)"),
                 m.c_str());
        // 64 levels in all (the header's own object is the first) are fine.
        const std::string file = path("ok.safetensors");
        writeBytes(file, shardBytes("{\"__metadata__\":{\"x\":" + std::string(62, '[') +
                                        std::string(62, ']') + "}," + tensor + "}",
                                    2));
        QCOMPARE(k3::readShardHeader(file).tensors.size(), std::size_t(1));
        m = headerRefusal("{\"__metadata__\":{\"x\":" + std::string(63, '[') +
                          std::string(63, ']') + "}," + tensor + "}");
        QVERIFY2(m.find("header is JSON nested deeper than 64 levels") != std::string::npos,
                 m.c_str());

        QTemporaryDir dir;
        const std::string d = dir.path().toStdString();
        writeBytes(d + "/s1.safetensors", shardBytes("{" + tensor + "}", 2));
        writeBytes(d + "/model.safetensors.index.json",
                   "{\"extra\":" + deep.substr(50000, 100000) +
                       ",\"weight_map\":{\"a\":\"s1.safetensors\"}}");
        m = refusal([&] { k3::Checkpoint::open(d); });
        QVERIFY2(m.ends_with("model.safetensors.index.json: JSON nested deeper than 64 levels "
                             "of arrays and objects (at byte 72)"),
                 m.c_str());
    }

    void valueTypesInFields() {
        QVERIFY(headerRefusal(R"({"t":{"dtype":"U8","shape":"4","data_offsets":[0,4]}})")
                    .find("tensor \"t\": unexpected a string in shape") != std::string::npos);
        QVERIFY(headerRefusal(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[0,null]}})")
                    .find("tensor \"t\": unexpected null in data_offsets") != std::string::npos);
        QVERIFY(headerRefusal(R"({"t":{"dtype":"U8","shape":[[4]],"data_offsets":[0,4]}})")
                    .find("tensor \"t\": unexpected an array in shape") != std::string::npos);
        QVERIFY(headerRefusal(R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[0,1e1]}})")
                    .find("tensor \"t\": non-integer or out-of-range value 1e1 in data_offsets") !=
                std::string::npos);
        QVERIFY(headerRefusal(R"({"t":{"dtype":["U8"],"shape":[4],"data_offsets":[0,4]}})")
                    .find("tensor \"t\": unexpected an array in dtype") != std::string::npos);
        QVERIFY(headerRefusal(R"("just text")").find("header is a string, expected an object") !=
                std::string::npos);
        // Escaped names are unescaped once, exactly (no raw string: moc misreads \" in one).
        const std::string file = path("esc.safetensors");
        writeBytes(
            file,
            shardBytes(
                "{\"a\\u0041\\\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2));
        QCOMPARE(k3::readShardHeader(file).tensors[0].first, std::string("aA\"b"));
    }

    void indexRefusals() {
        QTemporaryDir dir;
        const std::string d = dir.path().toStdString();
        writeBytes(d + "/s1.safetensors", shardBytes("{" + u8Tensor("a", 0) + "}", 2));
        const auto openWith = [&](const std::string& index) {
            writeBytes(d + "/model.safetensors.index.json", index);
            return refusal([&] { k3::Checkpoint::open(d); });
        };
        std::string m = openWith(R"({"weight_map":{"a":"s1.safetensors","a":"s1.safetensors"}})");
        QVERIFY2(m.find("model.safetensors.index.json: weight_map lists tensor \"a\" twice") !=
                     std::string::npos,
                 m.c_str());
        m = openWith(R"({"weight_map":{"a":"s1.safetensors"},"weight_map":{}})");
        QVERIFY2(m.find("weight_map appears twice") != std::string::npos, m.c_str());
        m = openWith(R"({"weight_map":["s1.safetensors"]})");
        QVERIFY2(m.find("unexpected an array in weight_map") != std::string::npos, m.c_str());
        m = openWith(R"([{"weight_map":{}}])");
        QVERIFY2(m.find("unexpected an array at the top level") != std::string::npos, m.c_str());
        m = openWith(R"({"weight_map":{"a":"s1.safetensors"}} {"weight_map":{}})");
        QVERIFY2(m.find("model.safetensors.index.json: not valid JSON at byte 39: ") !=
                     std::string::npos,
                 m.c_str());
        m = openWith(R"({"metadata":{"total_size":2,},"weight_map":{"a":"s1.safetensors"}})");
        QVERIFY2(m.find("not valid JSON at byte 29: ") != std::string::npos, m.c_str());
        m = openWith(R"({"weight_map":{"a":""}})");
        QVERIFY2(m.find("weight_map[\"a\"] = \"\" is not a plain shard file name") !=
                     std::string::npos,
                 m.c_str());
        // Found by fuzz_shard_index: a DEL (or any control character) in a shard name
        // was accepted here while the downloader refused the same index.
        m = openWith("{\"weight_map\":{\"a\":\"s\x7f"
                     "1.safetensors\"}}");
        QVERIFY2(m.find("is not a plain shard file name (no path separators, control characters") !=
                     std::string::npos,
                 m.c_str());
        m = openWith("{\"weight_map\":{\"a\":\"s\\u001b[31m.safetensors\"}}");
        QVERIFY2(m.find("is not a plain shard file name") != std::string::npos, m.c_str());
        QCOMPARE(openWith(R"({"metadata":{"x":[{}]},"weight_map":{"a":"s1.safetensors"}})"),
                 std::string("(accepted)"));
    }

    void duplicateInAnIndexedShard() {
        QTemporaryDir dir;
        const std::string d = dir.path().toStdString();
        writeBytes(d + "/s1.safetensors",
                   shardBytes("{" + u8Tensor("a", 0) + "," + u8Tensor("a", 2) + "}", 4));
        writeBytes(d + "/model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors"}})");
        const std::string m = refusal([&] { k3::Checkpoint::open(d); });
        QVERIFY2(m.find("s1.safetensors: tensor \"a\": appears twice in the header") !=
                     std::string::npos,
                 m.c_str());
    }

    // tensors() follows the index's order (then each shard's order without an index),
    // so whatever walks it is reproducible.
    void orderFollowsTheIndex() {
        QTemporaryDir dir;
        const std::string d = dir.path().toStdString();
        writeBytes(d + "/b.safetensors",
                   shardBytes("{" + u8Tensor("z", 0) + "," + u8Tensor("m", 2) + "}", 4));
        writeBytes(d + "/a.safetensors", shardBytes("{" + u8Tensor("q", 0) + "}", 2));
        writeBytes(
            d + "/model.safetensors.index.json",
            R"({"weight_map":{"m":"b.safetensors","q":"a.safetensors","z":"b.safetensors"}})");
        const k3::Checkpoint ckpt = k3::Checkpoint::open(d);
        std::vector<std::string> names;
        for (const auto& [name, t] : ckpt.tensors()) names.push_back(name);
        QCOMPARE(names, (std::vector<std::string>{"m", "q", "z"}));
        QCOMPARE(ckpt.shardPaths()[0].filename().string(), std::string("a.safetensors"));
        QCOMPARE(ckpt.at("m").shard, 1u);
        QCOMPARE(ckpt.at("m").offset, std::uint64_t{8 + 105 + 2});
        QCOMPARE(ckpt.at("q").shard, 0u);

        const k3::ShardIndex index =
            k3::parseShardIndex(R"({"weight_map":{"m":"b.safetensors","q":"a.safetensors"}})", "i");
        QCOMPARE(index.shardFiles, (std::vector<std::string>{"a.safetensors", "b.safetensors"}));
        QCOMPARE(index.tensorShard.at("m"), 1u);
        QCOMPARE(index.tensorShard.at("q"), 0u);
    }
};

QTEST_GUILESS_MAIN(TestSafetensorsJson)
#include "tst_safetensorsjson.moc"
