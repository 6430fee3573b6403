// JSONL transcripts: exact format, round trip, validation messages, atomic replace.
#include <QTemporaryDir>
#include <QTest>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <k3/chat.hpp>

using k3::ChatMessage;
using k3::ChatRole;

namespace {

std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

std::vector<std::string> dirEntries(const std::filesystem::path& dir) {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

std::vector<ChatMessage> sample() {
    return {
        {ChatRole::System, "You are a helpful assistant.", {}, {}},
        {ChatRole::User, "Explain \"cache\"\nlocality <|open|> 你好 😀", {}, "Ann"},
        {ChatRole::Assistant, "Locality means…", "  The user asks.\n", {}},
        {ChatRole::User, std::string("nul\0byte", 8), {}, {}},
        {ChatRole::Assistant, "", "", {}},
        {ChatRole::Tool, "{\"t\":1}", {}, "clock"},
    };
}

std::string errorOf(std::string_view text) {
    try {
        k3::parseTranscript(text, "h.jsonl");
    } catch (const k3::ChatError& e) {
        return e.what();
    }
    return "(accepted)";
}

} // namespace

class TestTranscript : public QObject {
    Q_OBJECT
private slots:
    void formatIsThePublicEngines();
    void roundTrip();
    void validationNamesLineAndField_data();
    void validationNamesLineAndField();
    void acceptsBlankLinesAndCrlf();
    void invalidUtf8IsReplaced();
    void missingFileIsNamed();
    void failedWriteKeepsOldFile();
    void unwritableDirectoryKeepsOldFile();
    void failedRenameLeavesNoTemp();
};

void TestTranscript::formatIsThePublicEngines() {
    const std::string text =
        k3::formatTranscript({{ChatRole::System, "You are a helpful assistant.", {}, {}},
                              {ChatRole::User, "Explain cache locality.", {}, {}},
                              {ChatRole::Assistant, "…", "…", {}},
                              {ChatRole::Tool, "r", {}, "clock"}});
    QCOMPARE(text,
             std::string("{\"role\":\"system\",\"content\":\"You are a helpful assistant.\"}\n"
                         "{\"role\":\"user\",\"content\":\"Explain cache locality.\"}\n"
                         "{\"role\":\"assistant\",\"content\":\"…\",\"reasoning_content\":\"…\"}\n"
                         "{\"role\":\"tool\",\"name\":\"clock\",\"content\":\"r\"}\n"));
}

void TestTranscript::roundTrip() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::filesystem::path path = dir.filePath("chat.jsonl").toStdString();
    k3::writeTranscript(path, sample());
    QVERIFY(k3::readTranscript(path) == sample());
    // Only the transcript: the temporary file was renamed, not left behind.
    QCOMPARE(dirEntries(dir.path().toStdString()), std::vector<std::string>{"chat.jsonl"});
    struct stat st {};
    QCOMPARE(::stat(path.c_str(), &st), 0);
    QCOMPARE(int(st.st_mode & 0777), 0600);
    // Overwrite with a shorter history.
    auto shorter = sample();
    shorter.resize(2);
    k3::writeTranscript(path, shorter);
    QVERIFY(k3::readTranscript(path) == shorter);
    QCOMPARE(dirEntries(dir.path().toStdString()), std::vector<std::string>{"chat.jsonl"});
}

void TestTranscript::validationNamesLineAndField_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("error");
    const QString ok = R"({"role":"user","content":"hi"})"
                       "\n";
    QTest::newRow("bad json") << ok + "\n" + R"({"role":"user",)"
                              << "h.jsonl:3: not valid JSON: ";
    QTest::newRow("unknown role")
        << ok + R"({"role":"developer","content":"x"})"
        << R"(h.jsonl:2: field "role" has unknown value "developer" (expected system, user, assistant or tool))";
    QTest::newRow("missing role") << R"({"content":"x"})"
                                  << R"(h.jsonl:1: missing field "role")";
    QTest::newRow("missing content") << ok + ok + R"({"role":"assistant"})"
                                     << R"(h.jsonl:3: missing field "content")";
    QTest::newRow("content number") << R"({"role":"user","content":4})"
                                    << R"(h.jsonl:1: field "content" must be a string, not number)";
    QTest::newRow("content parts")
        << R"({"role":"user","content":[{"type":"image"}]})"
        << R"(h.jsonl:1: field "content" is a list of parts; multimodal content (images) is not supported, only a string)";
    QTest::newRow("reasoning on user")
        << R"({"role":"user","content":"x","reasoning_content":"r"})"
        << R"(h.jsonl:1: field "reasoning_content" is only allowed on assistant messages, not user)";
    QTest::newRow("unknown field") << R"({"role":"user","content":"x","contnet":"y"})"
                                   << R"(h.jsonl:1: unknown field "contnet")";
    QTest::newRow("tool calls")
        << R"({"role":"assistant","content":"","tool_calls":[]})"
        << R"(h.jsonl:1: field "tool_calls" is not supported (tool calls and tool declarations))";
    QTest::newRow("tool without name")
        << R"({"role":"tool","content":"x"})"
        << R"(h.jsonl:1: field "name" (the tool's name) is required for role tool)";
    QTest::newRow("not an object") << "[1,2]"
                                   << "h.jsonl:1: expected a JSON object, got array";
    QTest::newRow("role not string") << R"({"role":1,"content":"x"})"
                                     << R"(h.jsonl:1: field "role" must be a string, not number)";
}

void TestTranscript::validationNamesLineAndField() {
    QFETCH(QString, text);
    QFETCH(QString, error);
    const std::string got = errorOf(text.toStdString());
    const std::string want = error.toStdString();
    if (want.ends_with(": "))
        QVERIFY2(got.starts_with(want), got.c_str());
    else
        QCOMPARE(got, want);
}

void TestTranscript::acceptsBlankLinesAndCrlf() {
    const auto m =
        k3::parseTranscript("\r\n{\"role\":\"user\",\"content\":\"a\"}\r\n   \n"
                            "{\"role\":\"assistant\",\"content\":\"b\",\"reasoning_content\":null}",
                            "x");
    QCOMPARE(m.size(), std::size_t(2));
    QCOMPARE(m[0].content, std::string("a"));
    QVERIFY(m[1].role == ChatRole::Assistant);
    QCOMPARE(m[1].reasoningContent, std::string());
    QVERIFY(k3::parseTranscript("", "x").empty());
}

void TestTranscript::invalidUtf8IsReplaced() {
    // A generation stopped inside a character must still save.
    const std::string text = k3::formatTranscript({{ChatRole::Assistant, "ok\xE4\xBD", {}, {}}});
    const auto back = k3::parseTranscript(text, "x");
    QCOMPARE(back.size(), std::size_t(1));
    QCOMPARE(back[0].content, std::string("ok\xEF\xBF\xBD"));
}

void TestTranscript::missingFileIsNamed() {
    try {
        k3::readTranscript("/nonexistent/k3/history.jsonl");
        QFAIL("a missing file was read");
    } catch (const k3::ChatError& e) {
        QVERIFY2(std::string(e.what()).starts_with(
                     "cannot open transcript /nonexistent/k3/history.jsonl: "),
                 e.what());
    }
}

void TestTranscript::failedWriteKeepsOldFile() {
    // A full disk mid-write, simulated with a file size limit (works even as root).
    QTemporaryDir dir;
    const std::filesystem::path path = dir.filePath("chat.jsonl").toStdString();
    k3::writeTranscript(path, sample());
    const std::string before = slurp(path);

    std::vector<ChatMessage> big = sample();
    big.push_back({ChatRole::User, std::string(64 * 1024, 'x'), {}, {}});
    rlimit old{};
    QCOMPARE(::getrlimit(RLIMIT_FSIZE, &old), 0);
    rlimit small = old;
    small.rlim_cur = 4096;
    auto* oldHandler = std::signal(SIGXFSZ, SIG_IGN);
    QCOMPARE(::setrlimit(RLIMIT_FSIZE, &small), 0);
    std::string error;
    try {
        k3::writeTranscript(path, big);
    } catch (const k3::ChatError& e) {
        error = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, oldHandler);

    QVERIFY2(error.starts_with("cannot write " + path.string() + ": writing "), error.c_str());
    QCOMPARE(slurp(path), before);
    QCOMPARE(dirEntries(dir.path().toStdString()), std::vector<std::string>{"chat.jsonl"});
}

void TestTranscript::unwritableDirectoryKeepsOldFile() {
    if (::geteuid() == 0)
        QSKIP("root ignores directory permissions (failedWriteKeepsOldFile covers this)");
    QTemporaryDir dir;
    const std::filesystem::path sub = std::filesystem::path(dir.path().toStdString()) / "ro";
    std::filesystem::create_directory(sub);
    const auto path = sub / "chat.jsonl";
    k3::writeTranscript(path, sample());
    const std::string before = slurp(path);
    std::filesystem::permissions(sub, std::filesystem::perms::owner_read |
                                          std::filesystem::perms::owner_exec);
    std::string error;
    try {
        k3::writeTranscript(path, {});
    } catch (const k3::ChatError& e) {
        error = e.what();
    }
    std::filesystem::permissions(sub, std::filesystem::perms::owner_all);
    QVERIFY2(error.starts_with("cannot write " + path.string() + ": creating a temporary file in "),
             error.c_str());
    QCOMPARE(slurp(path), before);
}

void TestTranscript::failedRenameLeavesNoTemp() {
    // A directory where the file should go: the rename fails after a complete write.
    QTemporaryDir dir;
    const std::filesystem::path path = dir.filePath("taken").toStdString();
    std::filesystem::create_directory(path);
    std::ofstream(path / "keep") << "x";
    std::string error;
    try {
        k3::writeTranscript(path, sample());
    } catch (const k3::ChatError& e) {
        error = e.what();
    }
    QVERIFY2(error.starts_with("cannot write " + path.string() + ": rename failed: "),
             error.c_str());
    QCOMPARE(dirEntries(dir.path().toStdString()), std::vector<std::string>{"taken"});
    QCOMPARE(slurp(path / "keep"), std::string("x"));
}

QTEST_GUILESS_MAIN(TestTranscript)
#include "tst_transcript.moc"
