// Oracle test: every case and every repository file in tests/fixtures/tokenizer/ must encode
// to exactly the ids the real tiktoken (npm "tiktoken", Rust compiled to WASM) produced with
// the same vocabulary and the Kimi pattern. Regenerate with
// tests/reference/tokenizer/gen_fixtures.mjs.
#include <QTest>

#include <k3/tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <optional>

namespace {

const std::string kFixtureDir = K3_SOURCE_DIR "/tests/fixtures/tokenizer";

nlohmann::json readJson(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path);
    return nlohmann::json::parse(in);
}

std::string fromHex(const std::string& hex) {
    std::string out;
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
        out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    return out;
}

// The first index where two id lists differ, as a readable message.
QByteArray firstDifference(const std::vector<k3::TokenId>& got,
                           const std::vector<k3::TokenId>& want) {
    std::size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
    return QByteArray("first difference at index ") + QByteArray::number(qulonglong(i)) + " (got " +
           QByteArray::number(qulonglong(got.size())) + " ids, expected " +
           QByteArray::number(qulonglong(want.size())) + ")";
}

} // namespace

class TestTokenizerParity : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void cases_data();
    void cases();
    void repositoryFiles_data();
    void repositoryFiles();
    void megabyteRuns_data();
    void megabyteRuns();

private:
    std::optional<k3::Tokenizer> tok_;
    nlohmann::json cases_;
    nlohmann::json files_;
};

void TestTokenizerParity::initTestCase() {
    tok_ = k3::Tokenizer::fromDirectory(kFixtureDir);
    cases_ = readJson(kFixtureDir + "/cases.json");
    files_ = readJson(kFixtureDir + "/files.json");
    // The fixture vocabulary is cl100k_base: 100,256 ranks, then the 256 K3 added tokens.
    QCOMPARE(tok_->numRanks(), std::size_t(cases_["num_base_tokens"].get<int>()));
    QCOMPARE(tok_->numRanks(), std::size_t(100256));
    QCOMPARE(tok_->vocabSize(), std::size_t(100256 + 256));
    QVERIFY(cases_["cases"].size() >= 60);
    QVERIFY(files_["files"].size() >= 30);
    qInfo("oracle %s: %d cases, %d files", cases_["oracle"].get<std::string>().c_str(),
          int(cases_["cases"].size()), int(files_["files"].size()));
}

void TestTokenizerParity::cases_data() {
    QTest::addColumn<int>("index");
    for (std::size_t i = 0; i < cases_["cases"].size(); ++i)
        QTest::newRow(cases_["cases"][i]["name"].get<std::string>().c_str()) << int(i);
}

void TestTokenizerParity::cases() {
    QFETCH(int, index);
    const auto& c = cases_["cases"][std::size_t(index)];
    const auto want = c["ids"].get<std::vector<k3::TokenId>>();
    const bool special = c.value("special", false);
    const std::string input = c.contains("bytes_hex") ? fromHex(c["bytes_hex"].get<std::string>())
                                                      : c["text"].get<std::string>();
    const auto got = special ? tok_->encodeWithSpecial(input) : tok_->encode(input);
    QVERIFY2(got == want, firstDifference(got, want).constData());
    // Decoding gives the text back (invalid input comes back with its U+FFFD replacements).
    QCOMPARE(tok_->decode(got), k3::sanitizeUtf8(input));
}

void TestTokenizerParity::repositoryFiles_data() {
    QTest::addColumn<int>("index");
    for (std::size_t i = 0; i < files_["files"].size(); ++i)
        QTest::newRow(files_["files"][i]["path"].get<std::string>().c_str()) << int(i);
}

void TestTokenizerParity::repositoryFiles() {
    QFETCH(int, index);
    const auto& f = files_["files"][std::size_t(index)];
    const std::string text = f["text"].get<std::string>();
    const auto want = f["ids"].get<std::vector<k3::TokenId>>();
    const auto got = tok_->encode(text);
    QVERIFY2(got == want, firstDifference(got, want).constData());
    QCOMPARE(tok_->decode(got), text);
}

// One-megabyte runs must finish (the merge is O(n log n); a quadratic merge takes hours
// here and the WASM oracle itself gives up). The ids follow from the oracle's shorter runs:
// 8000 and 10000 'a' are 1000 and 1250 copies of the 8-byte token "aaaaaaaa", and 2000 'é'
// and 3000 '中' are one token per character; bench_tokenizer prints the times.
void TestTokenizerParity::megabyteRuns_data() {
    QTest::addColumn<QString>("unit");
    QTest::addColumn<int>("repeat");
    QTest::addColumn<QString>("oracleCase");
    QTest::addColumn<int>("unitsPerToken");
    QTest::newRow("1 MB of a") << "a" << 1000000 << "repeated a 8000" << 8;
    QTest::newRow("1 MB of e-acute") << "é" << 500000 << "repeated e-acute 2000" << 1;
    QTest::newRow("1 MB of han") << "中" << 333334 << "repeated han 3000" << 1;
}

void TestTokenizerParity::megabyteRuns() {
    QFETCH(QString, unit);
    QFETCH(int, repeat);
    QFETCH(QString, oracleCase);
    QFETCH(int, unitsPerToken);
    k3::TokenId expectedId = -1;
    for (const auto& c : cases_["cases"])
        if (c["name"].get<std::string>() == oracleCase.toStdString())
            expectedId = c["ids"][0].get<k3::TokenId>();
    QVERIFY(expectedId >= 0);

    std::string text;
    const std::string u = unit.toStdString();
    for (int i = 0; i < repeat; ++i) text += u;
    QVERIFY(text.size() >= 1000000);
    const auto ids = tok_->encode(text);
    QCOMPARE(ids.size(), std::size_t(repeat / unitsPerToken));
    QCOMPARE(qlonglong(std::count(ids.begin(), ids.end(), expectedId)), qlonglong(ids.size()));
    QCOMPARE(tok_->decode(ids).size(), text.size());
}

QTEST_GUILESS_MAIN(TestTokenizerParity)
#include "tst_tokenizer_parity.moc"
