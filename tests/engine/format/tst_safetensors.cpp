// Safetensors headers, shards and the index: the peer's adversarial shards read
// exactly, and every malformed header refused with the file and tensor named.
#include "k3/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <QTemporaryDir>
#include <QtTest>

#include <bit>
#include <cstring>
#include <fstream>

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kPeerSt = K3_PEER_DIR "/st";
const std::string kPeerCache = K3_PEER_DIR "/cache";

void writeBytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string lengthPrefix(std::uint64_t n) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    return s;
}

// A shard with `header` verbatim and `dataBytes` bytes of data (value = index & 0xff).
std::string shardBytes(const std::string& header, std::size_t dataBytes) {
    std::string s = lengthPrefix(header.size()) + header;
    for (std::size_t i = 0; i < dataBytes; ++i) s.push_back(static_cast<char>(i & 0xff));
    return s;
}

std::string refusal(const std::function<void()>& f) {
    try {
        f();
    } catch (const k3::FormatError& e) {
        return e.what();
    }
    return {};
}

std::string hexOf(const std::vector<std::byte>& bytes) {
    static const char* digits = "0123456789abcdef";
    std::string s;
    for (std::byte b : bytes) {
        s.push_back(digits[std::to_integer<int>(b) >> 4]);
        s.push_back(digits[std::to_integer<int>(b) & 15]);
    }
    return s;
}

} // namespace

class TestSafetensors : public QObject {
    Q_OBJECT

    QTemporaryDir tmp_;
    std::string path(const char* name) const { return (tmp_.path() + "/" + name).toStdString(); }

    // Writes `header` + data to a shard and returns readShardHeader's refusal.
    std::string headerRefusal(const std::string& header, std::size_t dataBytes) {
        const std::string file = path("bad.safetensors");
        writeBytes(file, shardBytes(header, dataBytes));
        return refusal([&] { k3::readShardHeader(file); });
    }

private slots:
    void initTestCase() { QVERIFY(tmp_.isValid()); }

    void widening() {
        QCOMPARE(std::bit_cast<std::uint32_t>(k3::f16ToFloat(0x0001)),
                 0x33800000u); // min subnormal
        QCOMPARE(std::bit_cast<std::uint32_t>(k3::f16ToFloat(0x03ff)),
                 0x387fc000u); // max subnormal
        QCOMPARE(k3::f16ToFloat(0x3c00), 1.0f);
        QCOMPARE(k3::f16ToFloat(0xc000), -2.0f);
        QCOMPARE(k3::f16ToFloat(0x7bff), 65504.0f);
        QCOMPARE(std::bit_cast<std::uint32_t>(k3::f16ToFloat(0x8000)), 0x80000000u);
        QCOMPARE(std::bit_cast<std::uint32_t>(k3::f16ToFloat(0xfc00)), 0xff800000u);
        const std::byte bf16[4] = {std::byte{0x80}, std::byte{0x3f}, std::byte{0xf7},
                                   std::byte{0xc2}};
        float wide[2];
        k3::widenToFloat(k3::DType::BF16, bf16, wide);
        QCOMPARE(wide[0], 1.0f);
        QCOMPARE(wide[1], -123.5f);
        // Every f16 widens exactly: the round trip through Qt's qfloat16 agrees bit for bit.
        for (std::uint32_t h = 0; h < 0x10000; ++h) {
            const float ours = k3::f16ToFloat(static_cast<std::uint16_t>(h));
            const auto q = std::bit_cast<qfloat16>(static_cast<std::uint16_t>(h));
            const float theirs = static_cast<float>(q);
            if (std::isnan(theirs)) {
                QVERIFY(std::isnan(ours));
                continue;
            }
            QCOMPARE(std::bit_cast<std::uint32_t>(ours), std::bit_cast<std::uint32_t>(theirs));
        }
    }

    // Every tensor of the peer's two shards, against an independent Python decode.
    void peerShardsExact() {
        const k3::Checkpoint ckpt = k3::Checkpoint::open(kPeerSt);
        QCOMPARE(ckpt.shardPaths().size(), std::size_t{2});
        std::ifstream in(K3_SOURCE_DIR "/tests/fixtures/st/peer-st-expected.json");
        const json expected = json::parse(in);
        QCOMPARE(expected.size(), std::size_t{13});
        QCOMPARE(ckpt.tensorCount(), expected.size()); // __metadata__ is not a tensor
        QVERIFY(ckpt.find("__metadata__") == nullptr);
        for (const auto& [name, want] : expected.items()) {
            const k3::TensorInfo* t = ckpt.find(name);
            QVERIFY2(t, name.c_str());
            QCOMPARE(t->shard, want["shard"].get<std::uint32_t>());
            QCOMPARE(t->offset, want["offset"].get<std::uint64_t>());
            QCOMPARE(t->nbytes, want["nbytes"].get<std::uint64_t>());
            QCOMPARE(std::string(k3::dtypeName(t->dtype)), want["dtype"].get<std::string>());
            const auto shape = want["shape"].get<std::vector<std::uint64_t>>();
            QCOMPARE(std::vector<std::uint64_t>(t->dims().begin(), t->dims().end()), shape);
            if (want.contains("hex")) {
                QCOMPARE(hexOf(ckpt.readRaw(name)), want["hex"].get<std::string>());
                continue;
            }
            const auto values = ckpt.readFloats(name);
            const auto bits = want["f32_bits"].get<std::vector<std::uint32_t>>();
            QCOMPARE(values.size(), bits.size());
            for (std::size_t i = 0; i < bits.size(); ++i)
                if (std::bit_cast<std::uint32_t>(values[i]) != bits[i])
                    QFAIL(qPrintable(QString("%1[%2]: bits %3, expected %4")
                                         .arg(QString::fromStdString(name))
                                         .arg(i)
                                         .arg(std::bit_cast<std::uint32_t>(values[i]), 8, 16)
                                         .arg(bits[i], 8, 16)));
        }
    }

    void peerShardsSpecificCases() {
        const k3::Checkpoint ckpt = k3::Checkpoint::open(kPeerSt);
        const k3::TensorInfo& scalar = ckpt.at("scalar.f32");
        QCOMPARE(int(scalar.rank), 0);
        QCOMPARE(scalar.numel(), std::uint64_t{1});
        QCOMPARE(ckpt.readFloats("scalar.f32"), std::vector<float>{3.5f});
        const k3::TensorInfo& empty = ckpt.at("empty.f32");
        QCOMPARE(empty.numel(), std::uint64_t{0});
        QCOMPARE(ckpt.readFloats("empty.f32").size(), std::size_t{0});
        QCOMPARE(ckpt.readFloats("weird\\name.\"with\"quotes"), (std::vector<float>{1, 2, 3}));
        QCOMPARE(ckpt.at("second.shard.f32").shard, 1u);
        QCOMPARE(ckpt.at("second.shard.f32").offset, std::uint64_t{8 + 253});
        const auto bf16 = ckpt.readFloats("plain.bf16.1d");
        QVERIFY(std::isinf(bf16[0]) && bf16[0] > 0);
        QVERIFY(std::isnan(bf16[2]));
        QCOMPARE(bf16[7], -223.0f);
        const auto f16 = ckpt.readFloats("tricky.f16.1d");
        QCOMPARE(f16.size(), std::size_t{64});
        QCOMPARE(f16[5], 5.960464477539063e-08f); // smallest f16 subnormal
        QCOMPARE(f16[49], 2.015625f);
        const std::string m = refusal([&] { ckpt.at("no.such.tensor"); });
        QVERIFY2(m.find("no tensor named \"no.such.tensor\"") != std::string::npos, m.c_str());
        const std::string u8 = refusal([&] { ckpt.readFloats("packed.u8.2d"); });
        QVERIFY2(u8.find("\"packed.u8.2d\" is U8") != std::string::npos, u8.c_str());
    }

    // Expert content is derived from the expert index (read from the data: byte i of
    // tensor t of expert e is (base + i) % 251, base = ((209 e + T[t]) % 256) % 251), so
    // one expert's bytes returned for another's cannot pass.
    void peerCacheFixture() {
        const k3::Checkpoint ckpt = k3::Checkpoint::open(kPeerCache);
        QCOMPARE(ckpt.tensorCount(), std::size_t{144});
        const char* parts[] = {"w1.weight_packed", "w1.weight_scale",  "w2.weight_packed",
                               "w2.weight_scale",  "w3.weight_packed", "w3.weight_scale"};
        const int partBase[] = {0, 7, 31, 38, 62, 69};
        const std::uint64_t partOffset[] = {0, 512, 544, 1056, 1088, 1600};
        const std::uint64_t dataStart = 8 + 20600, expertBytes = 1632; // not a 4096 multiple
        for (int e = 0; e < 24; ++e) {
            for (int p = 0; p < 6; ++p) {
                const std::string name = "language_model.model.layers.0.block_sparse_moe.experts." +
                                         std::to_string(e) + "." + parts[p];
                const k3::TensorInfo& t = ckpt.at(name);
                QCOMPARE(t.dtype, k3::DType::U8);
                QCOMPARE(t.offset, dataStart + e * expertBytes + partOffset[p]);
                QCOMPARE(t.nbytes, std::uint64_t{p % 2 ? 32u : 512u});
                const auto bytes = ckpt.readRaw(name);
                const int base = ((209 * e + partBase[p]) % 256) % 251;
                for (std::size_t i = 0; i < bytes.size(); ++i)
                    if (std::to_integer<int>(bytes[i]) != (base + int(i)) % 251)
                        QFAIL(qPrintable(QString::fromStdString(name) + " byte " +
                                         QString::number(i)));
            }
        }
    }

    void indexOverPeerShards() {
        QTemporaryDir dir;
        const std::string d = dir.path().toStdString();
        for (const char* f :
             {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})
            fs::copy_file(kPeerSt + "/" + f, d + "/" + f);
        json index;
        index["metadata"] = {{"total_size", 2588}};
        const k3::Checkpoint plain = k3::Checkpoint::open(kPeerSt);
        for (const auto& [name, t] : plain.tensors())
            index["weight_map"][name] = plain.shardPaths()[t.shard].filename().string();
        // Shard numbers follow the file names even when the second shard is seen first.
        json reordered;
        reordered["weight_map"]["second.shard.u8"] = "model-00002-of-00002.safetensors";
        for (const auto& [k, v] : index["weight_map"].items()) reordered["weight_map"][k] = v;
        writeBytes(d + "/model.safetensors.index.json", reordered.dump());
        const k3::Checkpoint ckpt = k3::Checkpoint::open(d);
        QCOMPARE(ckpt.tensorCount(), std::size_t{13});
        QCOMPARE(ckpt.at("second.shard.u8").shard, 1u);
        QCOMPARE(ckpt.at("plain.f32.2d").shard, 0u);
        QCOMPARE(ckpt.readFloats("scalar.f32"), std::vector<float>{3.5f});

        auto openWith = [&](const json& weightMap) {
            json j;
            j["weight_map"] = weightMap;
            writeBytes(d + "/model.safetensors.index.json", j.dump());
            return refusal([&] { k3::Checkpoint::open(d); });
        };
        json wm = index["weight_map"];
        wm["scalar.f32"] = "../model-00001-of-00002.safetensors";
        QVERIFY(openWith(wm).find("is not a plain shard file name") != std::string::npos);
        wm["scalar.f32"] = "sub/model-00001-of-00002.safetensors";
        QVERIFY(openWith(wm).find("is not a plain shard file name") != std::string::npos);
        wm = index["weight_map"];
        wm["scalar.f32"] = "model-00002-of-00002.safetensors";
        std::string m = openWith(wm);
        QVERIFY2(m.find("tensor \"scalar.f32\" is here, but the index maps it to "
                        "model-00002-of-00002.safetensors") != std::string::npos,
                 m.c_str());
        wm = index["weight_map"];
        wm.erase("rank3.f32");
        m = openWith(wm);
        QVERIFY2(m.find("\"rank3.f32\" is not listed in the index") != std::string::npos,
                 m.c_str());
        wm = index["weight_map"];
        wm["ghost.tensor"] = "model-00002-of-00002.safetensors";
        m = openWith(wm);
        QVERIFY2(m.find("\"ghost.tensor\" is mapped to model-00002-of-00002.safetensors but that "
                        "shard's header does not hold it") != std::string::npos,
                 m.c_str());
        wm = index["weight_map"];
        wm["scalar.f32"] = 7;
        QVERIFY(openWith(wm).find("weight_map[\"scalar.f32\"] is a number") != std::string::npos);
        writeBytes(d + "/model.safetensors.index.json", "{\"metadata\": {}}");
        QVERIFY(refusal([&] { k3::Checkpoint::open(d); }).find("no weight_map") !=
                std::string::npos);
        writeBytes(d + "/model.safetensors.index.json", "{\"weight_map\": {\"a\": \"b\"");
        QVERIFY(refusal([&] { k3::Checkpoint::open(d); }).find("not valid JSON") !=
                std::string::npos);
    }

    void shardSetsWithoutIndex() {
        QTemporaryDir dir;
        const std::string d = dir.path().toStdString();
        fs::copy_file(kPeerSt + "/model-00002-of-00002.safetensors",
                      d + "/model-00002-of-00002.safetensors");
        std::string m = refusal([&] { k3::Checkpoint::open(d); });
        QVERIFY2(m.find("incomplete shard set of 2, missing shard(s) 1") != std::string::npos,
                 m.c_str());
        // The same tensor in two shards is refused, naming both.
        fs::copy_file(kPeerSt + "/model-00002-of-00002.safetensors",
                      d + "/model-00001-of-00002.safetensors");
        m = refusal([&] { k3::Checkpoint::open(d); });
        QVERIFY2(m.find("is also in") != std::string::npos, m.c_str());
        // A single model.safetensors; an empty directory.
        QTemporaryDir single;
        fs::copy_file(kPeerSt + "/model-00002-of-00002.safetensors",
                      single.path().toStdString() + "/model.safetensors");
        QCOMPARE(k3::Checkpoint::open(single.path().toStdString()).tensorCount(), std::size_t{3});
        QCOMPARE(k3::Checkpoint::open(kPeerSt + "/model-00002-of-00002.safetensors").tensorCount(),
                 std::size_t{3});
        QTemporaryDir empty;
        QVERIFY(refusal([&] {
                    k3::Checkpoint::open(empty.path().toStdString());
                }).find("no model.safetensors.index.json") != std::string::npos);
    }

    void malformedHeaders_data() {
        QTest::addColumn<QString>("header");
        QTest::addColumn<int>("dataBytes");
        QTest::addColumn<QString>("mustSay");
        auto row = [](const char* tag, const char* header, int data, const char* say) {
            QTest::newRow(tag) << QString(header) << data << QString(say);
        };
        row("offsets past end", R"({"t":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", 16,
            "tensor \"t\": data_offsets [0, 32] run past the data section (16 bytes");
        row("begin after end", R"({"t":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}})", 16,
            "tensor \"t\": data_offsets [8, 4] has begin after end");
        row("overlap",
            R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},"b":{"dtype":"U8","shape":[16],"data_offsets":[8,24]}})",
            24, "tensor \"b\" [8, 24) overlaps tensor \"a\" (ends at 16)");
        row("unknown dtype I64", R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", 16,
            "tensor \"ids\": dtype \"I64\" is not supported");
        row("shape size mismatch", R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", 16,
            "tensor \"t\": shape needs 12 bytes of F32 but data_offsets [0, 16] hold 16");
        row("element overflow",
            R"({"t":{"dtype":"U8","shape":[4294967296,4294967296,16],"data_offsets":[0,16]}})", 16,
            "tensor \"t\": shape element count overflows 64 bits");
        row("byte overflow",
            R"({"t":{"dtype":"F32","shape":[4611686018427387904,2],"data_offsets":[0,16]}})", 16,
            "tensor \"t\": byte size overflows 64 bits");
        row("byte size overflow",
            R"({"t":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,16]}})", 16,
            "tensor \"t\": byte size overflows 64 bits");
        // (not a raw string: moc counts the braces inside raw strings)
        row("invalid JSON", "{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offs", 16,
            "header is not valid JSON at byte");
        row("negative offset", R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[-4,0]}})", 16,
            "tensor \"t\": negative value -4 in data_offsets");
        row("float in shape", R"({"t":{"dtype":"U8","shape":[4.0],"data_offsets":[0,4]}})", 16,
            "tensor \"t\": non-integer or out-of-range value 4.0 in shape");
        row("huge offset",
            R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[0,99999999999999999999]}})", 16,
            "non-integer or out-of-range value 99999999999999999999 in data_offsets");
        row("missing offsets", R"({"t":{"dtype":"U8","shape":[4]}})", 16,
            "tensor \"t\": missing data_offsets");
        row("three offsets", R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4,8]}})", 16,
            "data_offsets has more than 2 entries");
        row("duplicate name",
            R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"t":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
            16, "tensor \"t\": appears twice in the header");
        row("unknown key", R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4],"stride":[1]}})",
            16, "tensor \"t\": unexpected key \"stride\"");
        row("rank 7", R"({"t":{"dtype":"U8","shape":[1,1,1,1,1,1,1],"data_offsets":[0,1]}})", 16,
            "rank above 6 is not supported");
        row("header is a list", R"([1,2])", 16, "header is an array, expected an object");
        row("tensor is a number", R"({"t":5})", 16, "tensor \"t\": unexpected a number");
        row("dtype not a string", R"({"t":{"dtype":4,"shape":[4],"data_offsets":[0,4]}})", 16,
            "tensor \"t\": unexpected a number in dtype");
    }
    void malformedHeaders() {
        QFETCH(QString, header);
        QFETCH(int, dataBytes);
        QFETCH(QString, mustSay);
        const std::string m = headerRefusal(header.toStdString(), std::size_t(dataBytes));
        QVERIFY2(m.find(path("bad.safetensors")) == 0, m.c_str()); // the file is named first
        QVERIFY2(m.find(mustSay.toStdString()) != std::string::npos, m.c_str());
    }

    void headerLengthAndTruncation() {
        const std::string file = path("len.safetensors");
        writeBytes(file, lengthPrefix(1000) + std::string(42, ' '));
        std::string m = refusal([&] { k3::readShardHeader(file); });
        QVERIFY2(m.find("header length 1000 is larger than the file (50 bytes)") !=
                     std::string::npos,
                 m.c_str());
        writeBytes(file, lengthPrefix(std::uint64_t{1} << 40) + "{}");
        m = refusal([&] { k3::readShardHeader(file); });
        QVERIFY2(m.find("header length 1099511627776 is absurd") != std::string::npos, m.c_str());
        writeBytes(file, "abc");
        m = refusal([&] { k3::readShardHeader(file); });
        QVERIFY2(m.find("3 bytes is too short") != std::string::npos, m.c_str());
        // A valid shard cut short: the last tensor now runs past the data section.
        const std::string good = shardBytes(
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
            16);
        writeBytes(file, good.substr(0, good.size() - 3));
        m = refusal([&] { k3::readShardHeader(file); });
        QVERIFY2(m.find("tensor \"b\": data_offsets [8, 16] run past the data section (13 "
                        "bytes): the file is cut short; download the model again (a download "
                        "resumes and checks every file)") != std::string::npos,
                 m.c_str());
        writeBytes(file, good);
        QCOMPARE(k3::readShardHeader(file).tensors.size(), std::size_t{2});
        QVERIFY(refusal([&] {
                    k3::readShardHeader(path("missing.safetensors"));
                }).find("cannot open") != std::string::npos);
    }

    void acceptedOddities() {
        // Free-form __metadata__ of any shape is skipped; empty tensors share no bytes;
        // trailing padding spaces in the header are legal safetensors.
        const std::string file = path("ok.safetensors");
        writeBytes(file, shardBytes(R"({"__metadata__":{"format":"pt","x":{"y":[1,{"z":null}]}},)"
                                    R"("a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},)"
                                    R"("e":{"dtype":"F16","shape":[0],"data_offsets":[4,4]},)"
                                    R"("s":{"dtype":"F32","shape":[],"data_offsets":[8,12]}}    )",
                                    12));
        const k3::ShardHeader h = k3::readShardHeader(file);
        QCOMPARE(h.tensors.size(), std::size_t{3});
        QCOMPARE(h.tensors[0].first, std::string("a"));
        QCOMPARE(h.tensors[2].second.rank, std::uint8_t{0});
        QCOMPARE(h.tensors[2].second.offset, h.dataStart + 8);
        writeBytes(
            file,
            shardBytes(
                R"({"__metadata__":"just a string","a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})",
                2));
        QCOMPARE(k3::readShardHeader(file).tensors.size(), std::size_t{1});
    }
};

QTEST_GUILESS_MAIN(TestSafetensors)
#include "tst_safetensors.moc"
