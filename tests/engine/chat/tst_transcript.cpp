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
#include <nlohmann/json.hpp>

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
    void invalidUtf8AndDuplicateKeysAreRefusedWhenRead();
    void missingFileIsNamed();
    void failedWriteKeepsOldFile();
    void unwritableDirectoryKeepsOldFile();
    void directoryIsRefusedAndKept();
    void outputRuleReplacesTheSymlinkTarget();
    void outputRuleFollowsRelativeLinksIntoOtherFolders();
    void outputRuleRefusesFifoAndDevice();
    void outputRuleKeepsPermissions();
    void outputRuleRefusesReadOnlyFiles();
    void lockRefusesASecondSession();
    void lockRefusesHardLinkedFiles();
    void outputRuleRefusesForeignLinksInSharedFolders();
    void readRefusesFifoWithoutBlocking();
    void invalidAnswersAreMarkedAndKept();
    void toolNameIsKept();
    void stoppedAnswersAndFiguresAreKept();
    void toolCallsAndResultsAreKept();
    void toolConversationsRenderAsTheTemplate();
    void transcriptsWithoutToolFieldsAreUnchanged();
    void versionsAreKeptBesideTheShownBranch();
    void imagesAreSavedAsFilesBesideTheTranscript();
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
    QTest::newRow("tool declarations")
        << R"({"role":"user","content":"","tools":[]})"
        << R"(h.jsonl:1: field "tools" is not supported (tool declarations belong to a request, not to a message))";
    QTest::newRow("tool without name or call")
        << R"({"role":"tool","content":"x"})"
        << R"(h.jsonl:1: field "name" (the tool's name) or "tool_call_id" (the call answered) is required for role tool)";
    QTest::newRow("tool calls on user")
        << R"({"role":"user","content":"","tool_calls":[]})"
        << R"(h.jsonl:1: field "tool_calls" is only allowed on assistant messages)";
    QTest::newRow("tool calls not array")
        << R"({"role":"assistant","content":"","tool_calls":{}})"
        << R"(h.jsonl:1: field "tool_calls" must be an array, not object)";
    QTest::newRow("tool call not object")
        << R"({"role":"assistant","content":"","tool_calls":["f"]})"
        << R"(h.jsonl:1: field "tool_calls[0]" must be an object, not string)";
    QTest::newRow("tool call unknown key")
        << R"({"role":"assistant","content":"","tool_calls":[{"function":{"name":"f"},"index":0}]})"
        << R"(h.jsonl:1: field "tool_calls[0].index" is unknown (id, type, function))";
    QTest::newRow("tool call type")
        << R"({"role":"assistant","content":"","tool_calls":[{"type":"code","function":{"name":"f"}}]})"
        << R"(h.jsonl:1: field "tool_calls[0].type" must be "function")";
    QTest::newRow("tool call id number")
        << R"({"role":"assistant","content":"","tool_calls":[{"id":7,"function":{"name":"f"}}]})"
        << R"(h.jsonl:1: field "tool_calls[0].id" must be a string)";
    QTest::newRow("tool call without function")
        << R"({"role":"assistant","content":"","tool_calls":[{"id":"c"}]})"
        << R"(h.jsonl:1: field "tool_calls[0].function" is required, an object)";
    QTest::newRow("tool call without name")
        << R"({"role":"assistant","content":"","tool_calls":[{"function":{"name":""}}]})"
        << R"(h.jsonl:1: field "tool_calls[0].function.name" is required, a non-empty string)";
    QTest::newRow("tool call arguments number")
        << R"({"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":3}}]})"
        << R"(h.jsonl:1: field "tool_calls[0].function.arguments" must be an object or a string, not number)";
    QTest::newRow("tool call id on assistant")
        << R"({"role":"assistant","content":"","tool_call_id":"c"})"
        << R"(h.jsonl:1: field "tool_call_id" is only allowed on tool messages)";
    QTest::newRow("tool call id number on tool")
        << R"({"role":"tool","content":"","tool_call_id":1})"
        << R"(h.jsonl:1: field "tool_call_id" must be a string, not number)";
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

// Issue 35 item 19: what is written is replaced (above); what is read is refused, naming
// the line, as docs/security.md now says; and a key given twice is refused by name.
void TestTranscript::invalidUtf8AndDuplicateKeysAreRefusedWhenRead() {
    const auto errorOf = [](const std::string& text) {
        try {
            k3::parseTranscript(text, "t.jsonl");
        } catch (const k3::ChatError& e) {
            return std::string(e.what());
        }
        return std::string("(accepted)");
    };
    const std::string bad = errorOf("{\"role\":\"user\",\"content\":\"a\"}\n"
                                    "{\"role\":\"user\",\"content\":\"b\xff\"}\n");
    QVERIFY2(bad.rfind("t.jsonl:2: not valid JSON: ", 0) == 0, bad.c_str());
    QVERIFY2(bad.find("UTF-8") != std::string::npos, bad.c_str());
    QCOMPARE(errorOf("{\"role\":\"user\",\"content\":\"a\",\"role\":\"system\"}\n"),
             std::string("t.jsonl:1: key \"role\" appears twice in one object"));
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

void TestTranscript::directoryIsRefusedAndKept() {
    // A folder where the file should go: refused before anything is written (it used to
    // get as far as the rename).
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
    QCOMPARE(error, "cannot write " + path.string() +
                        ": it is a directory; k3 writes only regular files; give a file name");
    QCOMPARE(dirEntries(dir.path().toStdString()), std::vector<std::string>{"taken"});
    QCOMPARE(slurp(path / "keep"), std::string("x"));
}

namespace {
std::string writeError(const std::filesystem::path& path, std::string_view data = "new\n") {
    try {
        k3::writeFileAtomically(path, data);
    } catch (const k3::ChatError& e) {
        return e.what();
    }
    return "(written)";
}

mode_t modeOf(const std::filesystem::path& p) {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0 ? st.st_mode : 0;
}
} // namespace

void TestTranscript::outputRuleReplacesTheSymlinkTarget() {
    // A symlinked history: the link stays a link, its target gets the new content (it used
    // to become a plain file while the real target silently stopped being updated).
    QTemporaryDir dir;
    const std::filesystem::path root = dir.path().toStdString();
    const auto target = root / "real.jsonl";
    const auto link = root / "link.jsonl";
    std::ofstream(target) << "old\n";
    std::filesystem::permissions(target, std::filesystem::perms(0644));
    std::filesystem::create_symlink(target, link);
    k3::writeTranscript(link, sample());
    QVERIFY(S_ISLNK(modeOf(link)));
    QCOMPARE(std::filesystem::read_symlink(link), target);
    QVERIFY(k3::readTranscript(target) == sample());
    QCOMPARE(int(modeOf(target) & 07777), 0644);
    QCOMPARE(dirEntries(root), (std::vector<std::string>{"link.jsonl", "real.jsonl"}));
    // A dangling link: the file is created where the link points.
    const auto dangling = root / "dangling.jsonl";
    std::filesystem::create_symlink("new.jsonl", dangling);
    k3::writeFileAtomically(dangling, "fresh\n");
    QVERIFY(S_ISLNK(modeOf(dangling)));
    QCOMPARE(slurp(root / "new.jsonl"), std::string("fresh\n"));
    QCOMPARE(int(modeOf(root / "new.jsonl") & 07777), 0600);
    // A link loop is an error naming the path, not a hang.
    std::filesystem::create_symlink("loop2", root / "loop1");
    std::filesystem::create_symlink("loop1", root / "loop2");
    QCOMPARE(writeError(root / "loop1"), "cannot write " + (root / "loop1").string() +
                                             ": more than 40 symbolic links (a loop?)");
}

void TestTranscript::outputRuleFollowsRelativeLinksIntoOtherFolders() {
    // The temporary file goes beside the target (the rename must stay on its file
    // system), and no temporary file is left in either folder.
    QTemporaryDir dir;
    const std::filesystem::path root = dir.path().toStdString();
    std::filesystem::create_directories(root / "a");
    std::filesystem::create_directories(root / "b");
    std::ofstream(root / "b" / "t.jsonl") << "old\n";
    std::filesystem::create_symlink("../b/t.jsonl", root / "a" / "h.jsonl");
    k3::writeFileAtomically(root / "a" / "h.jsonl", "new\n");
    QCOMPARE(slurp(root / "b" / "t.jsonl"), std::string("new\n"));
    QVERIFY(S_ISLNK(modeOf(root / "a" / "h.jsonl")));
    QCOMPARE(dirEntries(root / "a"), std::vector<std::string>{"h.jsonl"});
    QCOMPARE(dirEntries(root / "b"), std::vector<std::string>{"t.jsonl"});
    QCOMPARE(k3::resolveOutputFile(root / "a" / "h.jsonl"), root / "a" / ".." / "b" / "t.jsonl");
}

void TestTranscript::outputRuleRefusesFifoAndDevice() {
    // Stand-ins the test creates: a FIFO, and a link to /dev/null (as root the old code
    // turned such a device into a regular file holding the report; through the link it
    // would have replaced the link, so the test is safe either way).
    QTemporaryDir dir;
    const std::filesystem::path root = dir.path().toStdString();
    const auto fifo = root / "pipe";
    QCOMPARE(::mkfifo(fifo.c_str(), 0600), 0);
    // Refused without opening it: an open for writing would wait for a reader for good
    // (the test's time-out is the hang guard; no clock here).
    QCOMPARE(writeError(fifo), "cannot write " + fifo.string() +
                                   ": it is a FIFO (named pipe); k3 writes only regular files");
    QVERIFY(S_ISFIFO(modeOf(fifo)));

    const auto devLink = root / "out.json";
    std::filesystem::create_symlink("/dev/null", devLink);
    QCOMPARE(writeError(devLink), "cannot write " + devLink.string() +
                                      " (a link to /dev/null): it is a character device; k3 "
                                      "writes only regular files");
    QVERIFY(S_ISLNK(modeOf(devLink)));
    QVERIFY(S_ISCHR(modeOf("/dev/null")));
    try {
        k3::resolveOutputFile(devLink);
        QFAIL("a link to a device was accepted");
    } catch (const k3::ChatError& e) {
        QVERIFY2(std::string(e.what()).find("character device") != std::string::npos, e.what());
    }
    QCOMPARE(dirEntries(root), (std::vector<std::string>{"out.json", "pipe"}));
}

void TestTranscript::outputRuleKeepsPermissions() {
    QTemporaryDir dir;
    const std::filesystem::path root = dir.path().toStdString();
    const auto shared = root / "report.json";
    std::ofstream(shared) << "old\n";
    QCOMPARE(::chmod(shared.c_str(), 0640), 0);
    k3::writeFileAtomically(shared, "new\n");
    QCOMPARE(slurp(shared), std::string("new\n"));
    QCOMPARE(int(modeOf(shared) & 07777), 0640);
    k3::writeFileAtomically(root / "fresh.json", "x");
    QCOMPARE(int(modeOf(root / "fresh.json") & 07777), 0600); // private by default
}

void TestTranscript::outputRuleRefusesReadOnlyFiles() {
    QTemporaryDir dir;
    const std::filesystem::path path = dir.filePath("ro.json").toStdString();
    std::ofstream(path) << "keep\n";
    QCOMPARE(::chmod(path.c_str(), 0444), 0);
    QCOMPARE(writeError(path), "cannot write " + path.string() +
                                   ": the file is read-only (mode 0444); make it writable or "
                                   "choose another file");
    QCOMPARE(slurp(path), std::string("keep\n"));
    QCOMPARE(int(modeOf(path) & 07777), 0444);
}

void TestTranscript::lockRefusesASecondSession() {
    QTemporaryDir dir;
    const std::filesystem::path root = dir.path().toStdString();
    const auto history = root / "h.jsonl";
    const auto link = root / "alias.jsonl";
    std::filesystem::create_symlink("h.jsonl", link);
    {
        k3::OutputLock first(history);
        QCOMPARE(first.file(), history);
        QCOMPARE(first.lockFile(), root / ".h.jsonl.lock");
        // A second session, by name or through a link, is told who holds it.
        for (const auto& path : {history, link}) {
            std::string error;
            try {
                k3::OutputLock second(path);
            } catch (const k3::ChatError& e) {
                error = e.what();
            }
            QCOMPARE(error, path.string() + " is in use by another session (pid " +
                                std::to_string(::getpid()) +
                                "): two sessions writing one conversation would overwrite "
                                "each other's turns; close the other one or choose another "
                                "file");
        }
        // Writing is not blocked by the lock: the holder saves as usual.
        k3::writeTranscript(history, sample());
    }
    // Released: the lock file is gone and the next session gets it.
    QCOMPARE(dirEntries(root), (std::vector<std::string>{"alias.jsonl", "h.jsonl"}));
    k3::OutputLock again(link);
    QCOMPARE(again.file(), root / "h.jsonl");
    // A folder cannot be locked as a history.
    try {
        k3::OutputLock folder(root);
        QFAIL("a folder was locked as a history");
    } catch (const k3::ChatError& e) {
        QVERIFY2(std::string(e.what()).ends_with(": it is a directory; k3 writes only regular "
                                                 "files; give a file name"),
                 e.what());
    }
}

// Issue 35 item 15: a second hard link to a history used to take its own lock file, and
// the first save (a rename) forked the two names into two conversations.
void TestTranscript::lockRefusesHardLinkedFiles() {
    QTemporaryDir dir;
    const std::filesystem::path root = dir.path().toStdString();
    std::filesystem::create_directory(root / "other");
    const auto history = root / "h.jsonl";
    const auto second = root / "other" / "g.jsonl";
    k3::writeTranscript(history, sample());
    std::filesystem::create_hard_link(history, second);
    for (const auto& path : {history, second}) {
        std::string error;
        try {
            k3::OutputLock lock(path);
        } catch (const k3::ChatError& e) {
            error = e.what();
        }
        QCOMPARE(error, "cannot use " + path.string() +
                            ": it has 2 hard links; each save replaces the file, so its other "
                            "names would keep the old conversation and a session through "
                            "another name would not see this one; use a copy (cp) or remove "
                            "the other links");
    }
    QCOMPARE(dirEntries(root / "other"), (std::vector<std::string>{"g.jsonl"})); // no lock file
    std::filesystem::remove(second);
    k3::OutputLock one(history); // one name again: locked as usual
    QCOMPARE(one.lockFile(), root / ".h.jsonl.lock");
}

// Issue 35 item 10: as root, `--out /tmp/x/run.json` where another user planted run.json
// as a link to a root-owned file replaced that file. In a world-writable sticky folder a
// link is followed only when it is this user's or the folder owner's.
void TestTranscript::outputRuleRefusesForeignLinksInSharedFolders() {
    if (::geteuid() != 0) QSKIP("needs root: the test gives a link to another user (lchown)");
    QTemporaryDir dir;
    const std::filesystem::path root = dir.path().toStdString();
    const auto shared = root / "sticky";
    std::filesystem::create_directory(shared);
    QCOMPARE(::chmod(shared.c_str(), 01777), 0);
    const auto victim = root / "victim.conf";
    { std::ofstream(victim) << "root's own\n"; }
    const auto planted = shared / "run.json";
    std::filesystem::create_symlink(victim, planted);
    QCOMPARE(::lchown(planted.c_str(), 65534, 65534), 0); // nobody's link
    const std::string expected =
        "cannot write " + planted.string() + ": " + planted.string() +
        " is a symbolic link owned by another user (uid 65534) in the shared folder " +
        shared.string() +
        " (world-writable, sticky); k3 does not follow such links (as the kernel's "
        "protected_symlinks); remove it or choose another file";
    for (int call = 0; call < 2; ++call) {
        std::string error;
        try {
            if (call == 0)
                k3::writeFileAtomically(planted, "{}\n");
            else
                k3::resolveOutputFile(planted);
        } catch (const k3::ChatError& e) {
            error = e.what();
        }
        QCOMPARE(error, expected);
    }
    std::ifstream in(victim);
    std::stringstream text;
    text << in.rdbuf();
    QCOMPARE(text.str(), std::string("root's own\n"));
    // This user's own link in the same folder is followed, as before.
    QCOMPARE(::lchown(planted.c_str(), 0, 0), 0);
    k3::writeFileAtomically(planted, "{}\n");
    std::ifstream again(victim);
    std::stringstream now;
    now << again.rdbuf();
    QCOMPARE(now.str(), std::string("{}\n"));
    // Outside a shared folder another user's link is followed too (the folder is ours).
    const auto own = root / "link.json";
    std::filesystem::create_symlink(victim, own);
    QCOMPARE(::lchown(own.c_str(), 65534, 65534), 0);
    k3::writeFileAtomically(own, "[]\n");
}

void TestTranscript::readRefusesFifoWithoutBlocking() {
    QTemporaryDir dir;
    const std::filesystem::path fifo = dir.filePath("h.jsonl").toStdString();
    QCOMPARE(::mkfifo(fifo.c_str(), 0600), 0);
    // An open for reading would wait for a writer for good: the test's time-out is the
    // hang guard, no clock here.
    std::string error;
    try {
        k3::readTranscript(fifo);
    } catch (const k3::ChatError& e) {
        error = e.what();
    }
    QCOMPARE(error, "cannot read transcript " + fifo.string() +
                        ": it is a FIFO (named pipe), not a regular file");
    try {
        k3::readTranscript("/dev/zero");
        QFAIL("/dev/zero was read as a transcript");
    } catch (const k3::ChatError& e) {
        QCOMPARE(std::string(e.what()), std::string("cannot read transcript /dev/zero: it is a "
                                                    "character device, not a regular file"));
    }
}

void TestTranscript::invalidAnswersAreMarkedAndKept() {
    std::vector<ChatMessage> messages = {{ChatRole::User, "hi", {}, {}},
                                         {ChatRole::Assistant,
                                          "x",
                                          "",
                                          {},
                                          "a NaN or Inf "
                                          "reached the logits"}};
    const std::string text = k3::formatTranscript(messages);
    QCOMPARE(text, std::string("{\"role\":\"user\",\"content\":\"hi\"}\n"
                               "{\"role\":\"assistant\",\"content\":\"x\",\"reasoning_content\":"
                               "\"\",\"invalid\":\"a NaN or Inf reached the logits\"}\n"));
    const auto back = k3::parseTranscript(text, "h.jsonl");
    QVERIFY(back == messages);
    QCOMPARE(back[1].invalid, std::string("a NaN or Inf reached the logits"));
    QCOMPARE(errorOf(R"({"role":"user","content":"x","invalid":"why"})"),
             std::string(
                 R"(h.jsonl:1: field "invalid" is only allowed on assistant messages, not user)"));
    QCOMPARE(errorOf(R"({"role":"assistant","content":"x","invalid":true})"),
             std::string(R"(h.jsonl:1: field "invalid" must be a string, not boolean)"));
}

void TestTranscript::toolNameIsKept() {
    QTemporaryDir dir;
    const std::filesystem::path path = dir.filePath("t.jsonl").toStdString();
    const std::vector<ChatMessage> messages = {{ChatRole::User, "time?", {}, {}},
                                               {ChatRole::Tool, "12:00", {}, "clock"}};
    k3::writeTranscript(path, messages);
    const auto back = k3::readTranscript(path);
    QCOMPARE(back.size(), std::size_t(2));
    QCOMPARE(back[1].name, std::string("clock"));
}

// A cut answer and its speed survive a save; older transcripts (without them) still read.
void TestTranscript::stoppedAnswersAndFiguresAreKept() {
    ChatMessage answer{ChatRole::Assistant, "half an ans", "", {}};
    answer.stopped = true;
    answer.figures = {12, 48.5, 0.25};
    const std::vector<ChatMessage> messages = {{ChatRole::User, "hi", {}, {}}, answer};
    const std::string text = k3::formatTranscript(messages);
    QCOMPARE(text, std::string("{\"role\":\"user\",\"content\":\"hi\"}\n"
                               "{\"role\":\"assistant\",\"content\":\"half an ans\","
                               "\"reasoning_content\":\"\",\"stopped\":true,\"figures\":{"
                               "\"tokens\":12,\"tokens_per_second\":48.5,"
                               "\"first_token_seconds\":0.25}}\n"));
    const auto back = k3::parseTranscript(text, "h.jsonl");
    QVERIFY(back == messages);
    QVERIFY(back[1].stopped);
    QCOMPARE(back[1].figures.tokens, 12);
    QCOMPARE(back[1].figures.tokensPerSecond, 48.5);
    QCOMPARE(back[1].figures.firstTokenSeconds, 0.25);
    const auto old = k3::parseTranscript(R"({"role":"assistant","content":"x"})", "h.jsonl");
    QVERIFY(!old[0].stopped);
    QCOMPARE(old[0].figures.tokens, 0);
    QCOMPARE(errorOf(R"({"role":"user","content":"x","stopped":true})"),
             std::string(R"(h.jsonl:1: field "stopped" is only allowed on assistant messages)"));
    QCOMPARE(errorOf(R"({"role":"assistant","content":"x","stopped":"yes"})"),
             std::string(R"(h.jsonl:1: field "stopped" must be a boolean, not string)"));
    QCOMPARE(errorOf(R"({"role":"assistant","content":"x","figures":{"tokens":-1}})"),
             std::string(R"(h.jsonl:1: field "figures.tokens" must be a number of at least 0)"));
    QCOMPARE(errorOf(R"({"role":"assistant","content":"x","figures":{"tokens":1.5}})"),
             std::string(R"(h.jsonl:1: field "figures.tokens" must be a whole number)"));
}

// An assistant's calls (both argument forms) and the results that answer them, saved in
// OpenAI's message shape and read back exactly.
void TestTranscript::toolCallsAndResultsAreKept() {
    ChatMessage calls{ChatRole::Assistant, "", "Need the weather.", {}};
    calls.toolCalls = {{"call_1", "get_weather", R"({"city":"Oslo","days":3,"a":[1,{"z":null}]})"},
                       {"call_2", "clock", R"({"tz": "UTC"})", true},
                       {"", "ping", "{}"}};
    ChatMessage byId{ChatRole::Tool, "-3 C", {}, {}};
    byId.toolCallId = "call_1";
    ChatMessage both{ChatRole::Tool, "12:00", {}, "clock"};
    both.toolCallId = "call_2";
    const std::vector<ChatMessage> messages = {
        {ChatRole::User, "Weather?", {}, {}}, calls, byId, both};
    const std::string text = k3::formatTranscript(messages);
    QCOMPARE(
        text,
        std::string(
            R"({"role":"user","content":"Weather?"})"
            "\n"
            R"({"role":"assistant","content":"","reasoning_content":"Need the weather.",)"
            R"("tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather",)"
            R"("arguments":{"city":"Oslo","days":3,"a":[1,{"z":null}]}}},)"
            R"({"id":"call_2","type":"function","function":{"name":"clock",)"
            "\"arguments\":\"{\\\"tz\\\": \\\"UTC\\\"}\"}},"
            R"({"type":"function","function":{"name":"ping","arguments":{}}}]})"
            "\n"
            R"({"role":"tool","tool_call_id":"call_1","content":"-3 C"})"
            "\n"
            R"({"role":"tool","name":"clock","tool_call_id":"call_2","content":"12:00"})"
            "\n"));
    QVERIFY(k3::parseTranscript(text, "h.jsonl") == messages);
    QTemporaryDir dir;
    const std::filesystem::path path = dir.filePath("t.jsonl").toStdString();
    k3::writeTranscript(path, messages);
    const auto back = k3::readTranscript(path);
    QVERIFY(back == messages);
    QCOMPARE(back[1].toolCalls.size(), std::size_t(3));
    QVERIFY(!back[1].toolCalls[0].argumentsAsJsonBlock);
    QVERIFY(back[1].toolCalls[1].argumentsAsJsonBlock);
    QCOMPARE(back[1].toolCalls[1].arguments, std::string(R"({"tz": "UTC"})"));
    QCOMPARE(back[2].toolCallId, std::string("call_1"));
    // Argument-form text that is no JSON object renders as a json block: stored so.
    ChatMessage odd{ChatRole::Assistant, "", "", {}};
    odd.toolCalls = {{"c", "f", "[1, 2]"}};
    const auto oddBack = k3::parseTranscript(k3::formatTranscript({odd}), "h.jsonl");
    QCOMPARE(oddBack[0].toolCalls[0].arguments, std::string("[1, 2]"));
    QVERIFY(oddBack[0].toolCalls[0].argumentsAsJsonBlock);
    QCOMPARE(k3::renderChat(oddBack, {}), k3::renderChat({odd}, {}));
}

// The official template's tool conversations (tests/fixtures/chat/tool_renders.json),
// written one message per line as a transcript, read back and rendered: byte for byte
// what jinja2 rendered, before and after a save.
void TestTranscript::toolConversationsRenderAsTheTemplate() {
    using Json = nlohmann::ordered_json;
    std::ifstream in(K3_SOURCE_DIR "/tests/fixtures/chat/tool_renders.json");
    QVERIFY(in.good());
    const Json fixtures = Json::parse(in);
    int checked = 0;
    for (const Json& c : fixtures.at("cases")) {
        if (!c.contains("expected")) continue;
        bool tools = false, named = true;
        std::string text;
        for (const Json& m : c.at("messages")) {
            tools = tools || m.contains("tool_calls") || m.at("role") == "tool";
            named = named &&
                    (m.at("role") != "tool" || m.contains("name") || m.contains("tool_call_id"));
            text += m.dump() + "\n";
        }
        if (!tools) continue;
        const std::string name = c.at("name").get<std::string>();
        if (!named) { // results matched by position only: a transcript names the call
            QVERIFY2(errorOf(text).find(R"("tool_call_id" (the call answered) is required)") !=
                         std::string::npos,
                     name.c_str());
            continue;
        }
        k3::ChatRenderOptions options;
        const Json& o = c.at("options");
        options.thinking = o.value("thinking", true);
        options.addGenerationPrompt = o.value("add_generation_prompt", false);
        if (o.contains("tools")) options.toolsJson = o.at("tools").dump();
        const auto read = k3::parseTranscript(text, name);
        const std::string expected = c.at("expected").get<std::string>();
        QCOMPARE(k3::renderChat(read, options), expected);
        const auto saved = k3::parseTranscript(k3::formatTranscript(read), name);
        QVERIFY2(saved == read, name.c_str());
        QCOMPARE(k3::renderChat(saved, options), expected);
        ++checked;
    }
    // calls_and_results_by_id(_nothink), assistant_calls_nogen, string_arguments,
    // results_partly_unmatched, escaped_tool_name.
    QCOMPARE(checked, 6);
}

// Files written before tool calls were saved read as they did, and write back unchanged.
void TestTranscript::transcriptsWithoutToolFieldsAreUnchanged() {
    const std::string old =
        R"({"role":"system","content":"Be brief."})"
        "\n"
        R"({"role":"user","name":"Ann","content":"hi"})"
        "\n"
        R"({"role":"assistant","content":"x","reasoning_content":"r","invalid":"why",)"
        R"("model":"k3","stopped":true,"figures":{"tokens":2,"tokens_per_second":4.0,)"
        R"("first_token_seconds":0.5}})"
        "\n"
        R"({"role":"tool","name":"clock","content":"12:00"})"
        "\n";
    const auto messages = k3::parseTranscript(old, "old.jsonl");
    QCOMPARE(messages.size(), std::size_t(4));
    for (const ChatMessage& m : messages) {
        QVERIFY(m.toolCalls.empty());
        QVERIFY(m.toolCallId.empty());
    }
    QCOMPARE(messages[3].name, std::string("clock"));
    QCOMPARE(k3::formatTranscript(messages), old);
}

// Regenerated answers and edited questions: the lines are the shown branch (what
// k3 --chat --history renders and continues); the other versions ride on the message
// they are versions of, each with what followed it, and survive a round trip.
void TestTranscript::versionsAreKeptBesideTheShownBranch() {
    ChatMessage shown{ChatRole::Assistant, "third", "", {}};
    shown.versionIndex = 2;
    shown.otherVersions = {{{ChatRole::Assistant, "first", "", {}},
                            {ChatRole::User, "more", {}, {}},
                            {ChatRole::Assistant, "after first", "", {}}},
                           {{ChatRole::Assistant, "second", "", {}}}};
    const std::vector<ChatMessage> messages = {
        {ChatRole::System, "be brief", {}, {}}, {ChatRole::User, "hi", {}, {}}, shown};
    const std::string text = k3::formatTranscript(messages);
    QCOMPARE(text, std::string(
                       "{\"role\":\"system\",\"content\":\"be brief\"}\n"
                       "{\"role\":\"user\",\"content\":\"hi\"}\n"
                       "{\"role\":\"assistant\",\"content\":\"third\",\"reasoning_content\":\"\","
                       "\"versions\":{\"index\":2,\"others\":["
                       "[{\"role\":\"assistant\",\"content\":\"first\",\"reasoning_content\":\"\"},"
                       "{\"role\":\"user\",\"content\":\"more\"},"
                       "{\"role\":\"assistant\",\"content\":\"after first\","
                       "\"reasoning_content\":\"\"}],"
                       "[{\"role\":\"assistant\",\"content\":\"second\","
                       "\"reasoning_content\":\"\"}]]}}\n"));
    const auto back = k3::parseTranscript(text, "h.jsonl");
    QVERIFY(back == messages);
    QCOMPARE(back.size(), std::size_t(3));
    QCOMPARE(back[2].versionIndex, 2);
    QCOMPARE(back[2].otherVersions.size(), std::size_t(2));
    QCOMPARE(back[2].otherVersions[0][2].content, std::string("after first"));
    // The render sees only the shown branch.
    QCOMPARE(k3::renderChat(back),
             k3::renderChat({messages[0], messages[1], {ChatRole::Assistant, "third", "", {}}}));
    // An old transcript has no versions.
    const auto old = k3::parseTranscript(R"({"role":"assistant","content":"x"})", "h.jsonl");
    QVERIFY(old[0].otherVersions.empty());
    QCOMPARE(old[0].versionIndex, 0);
    QCOMPARE(
        errorOf(R"({"role":"user","content":"x","versions":[]})"),
        std::string(R"(h.jsonl:1: field "versions" must be an object with an array "others")"));
    QCOMPARE(
        errorOf(
            R"({"role":"user","content":"x","versions":{"index":2,"others":[[{"role":"user","content":"y"}]]}})"),
        std::string(R"(h.jsonl:1: field "versions.index" must be a whole number from 0 to 1)"));
    QCOMPARE(
        errorOf(
            R"({"role":"user","content":"x","versions":{"index":0,"others":[[{"role":"user"}]]}})"),
        std::string(R"(h.jsonl:1: missing field "content")"));
}

// A user message's images are written as the files kept beside the transcript and read
// back as those files, without pixels; what is not a safe reference is refused by line.
void TestTranscript::imagesAreSavedAsFilesBesideTheTranscript() {
    const std::string content = std::string(k3::kImagePlaceholder) + "What is this?";
    ChatMessage question{ChatRole::User, content, {}, {}};
    question.images = {k3::ChatImage{nullptr, "images/ab12.png"}};
    const std::vector<ChatMessage> messages = {question, {ChatRole::Assistant, "A cat.", "", {}}};
    const std::string text = k3::formatTranscript(messages);
    QCOMPARE(text, std::string("{\"role\":\"user\",\"content\":\"<|kimi_image_placeholder|>What is "
                               "this?\",\"images\":[{\"file\":\"images/ab12.png\"}]}\n"
                               "{\"role\":\"assistant\",\"content\":\"A cat.\","
                               "\"reasoning_content\":\"\"}\n"));
    const auto back = k3::parseTranscript(text, "h.jsonl");
    QVERIFY(back == messages);
    QCOMPARE(back[0].images.size(), std::size_t(1));
    QCOMPARE(back[0].images[0].file, std::string("images/ab12.png"));
    QVERIFY(back[0].images[0].image == nullptr);
    // Rendering needs the pixels: a front end prepares the file first.
    QVERIFY_THROWS_EXCEPTION(k3::ChatError, k3::renderChat(back));
    // Pixels alone are not a transcript's image.
    ChatMessage unsaved = question;
    unsaved.images[0].file.clear();
    QVERIFY_THROWS_EXCEPTION(k3::ChatError, k3::formatTranscript({unsaved}));

    const auto line = [](const std::string& images) {
        return R"({"role":"user","content":"<|kimi_image_placeholder|>x","images":)" + images + "}";
    };
    QCOMPARE(errorOf(line(R"([{"file":"../secret.png"}])")),
             std::string(R"(h.jsonl:1: field "images[0].file" must name a file inside the )"
                         R"(transcript's folder, not "../secret.png")"));
    QCOMPARE(errorOf(line(R"([{"file":"/etc/passwd"}])")),
             std::string(R"(h.jsonl:1: field "images[0].file" must name a file inside the )"
                         R"(transcript's folder, not "/etc/passwd")"));
    QCOMPARE(errorOf(line(R"([{"file":""}])")),
             std::string(R"(h.jsonl:1: field "images[0].file" is required, a non-empty string)"));
    QCOMPARE(errorOf(line(R"({"file":"a.png"})")),
             std::string(R"(h.jsonl:1: field "images" must be an array, not object)"));
    QCOMPARE(errorOf(line(R"([{"file":"a.png"},{"file":"b.png"}])")),
             std::string(R"(h.jsonl:1: field "images" names 2 image(s) for 1 )"
                         R"(<|kimi_image_placeholder|> in the content)"));
    QCOMPARE(errorOf(R"({"role":"assistant","content":"x","images":[]})"),
             std::string(R"(h.jsonl:1: field "images" is only allowed on user messages)"));
}

QTEST_GUILESS_MAIN(TestTranscript)
#include "tst_transcript.moc"
