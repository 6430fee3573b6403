// `k3 MODEL_DIR --chat` driven through stdin: answers, /reset, prefix reuse, --history
// resume (re-rendered and re-prefilled), refused transcripts, Ctrl-C.
// The tiny models are random: their answers are gibberish, so the checks are on ids,
// counts and structure, never on pleasant text.
#include "K3Process.hpp"

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>

#include <csignal>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <k3/chat.hpp>
#include <k3/tokenizer.hpp>
#include <k3/vision.hpp>

namespace {

const QString kModels = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/");

struct Turn {
    int reused = -1;
    int prompt = -1;
    int tokens = -1;
    QString how;
};

// "[reused R of P positions, N tokens in T, HOW]" lines, in order.
QList<Turn> turns(const QString& err) {
    static const QRegularExpression re(
        QStringLiteral(R"(\[reused (\d+) of (\d+) positions, (\d+) tokens in [^,]+, ([a-z ]+)\])"));
    QList<Turn> list;
    for (auto it = re.globalMatch(err); it.hasNext();) {
        const auto m = it.next();
        list.push_back(
            {m.captured(1).toInt(), m.captured(2).toInt(), m.captured(3).toInt(), m.captured(4)});
    }
    return list;
}

void writeFile(const QString& path, const QByteArray& data) {
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
    f.write(data);
}

// Reads `channel` into `buffer` until it holds `needle` (empty: any data) or time runs out.
bool waitFor(QProcess& p, QByteArray& buffer, QProcess::ProcessChannel channel,
             const QByteArray& needle, int ms) {
    const auto done = [&] {
        return needle.isEmpty() ? !buffer.isEmpty() : buffer.contains(needle);
    };
    QElapsedTimer t;
    t.start();
    p.setReadChannel(channel);
    buffer += p.readAll();
    while (!done() && t.elapsed() < ms) {
        p.waitForReadyRead(100);
        buffer += p.readAll();
    }
    return done();
}

// The positions a restart renders the transcript `saved` to with --no-think: no
// generation prompt, as the resumed conversation is read before the next message.
int resumedPositions(const QString& dir, const std::vector<k3::ChatMessage>& saved) {
    const k3::Tokenizer tok = k3::Tokenizer::fromDirectory(dir.toStdString());
    k3::ChatRenderOptions render;
    render.thinking = false;
    render.addGenerationPrompt = false;
    return int(k3::encodeChatSegments(tok, k3::renderChatSegments(saved, render)).size());
}

} // namespace

class TestK3ChatCli : public QObject {
    Q_OBJECT
private slots:
    void answersResetsAndReusesPositions();
    void historyRoundTripsAndIsRePrefilled();
    void historyStateIsRestoredNotReadAgain();
    void transcriptWithBadLineIsRefused();
    void systemMismatchIsRefused();
    void ctrlCStopsTheAnswerAndKeepsTheConversation();
    void ctrlCTwiceAtThePromptExits();
    void historyFolderOrFifoIsRefused();
    void secondSessionOnOneHistoryIsRefused();
    void symlinkedHistoryStaysALink();
    void hardLinkedHistoryIsRefused();
    void transcriptValuesAreShownNotObeyed();
    void invalidAnswerIsMarkedInTheHistory();
    void jsonSchemaHoldsEveryAnswer();
    void historyWithImagesIsResumed();
};

void TestK3ChatCli::answersResetsAndReusesPositions() {
    const K3Run r = runK3({kModels + "k3_tiny_a", "--chat", "--no-think", "--max-tokens", "6"},
                          "hello\nagain\n/help\n/reset\nhello\n/exit\n");
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    const QList<Turn> t = turns(r.err);
    QCOMPARE(t.size(), 3);
    QCOMPARE(t[0].reused, 0);
    QVERIFY(t[0].prompt > 5);
    // The second turn's prompt starts with the first conversation as it stood before its
    // generation prompt (the 10 tokens of the assistant header and the closed think
    // channel with --no-think): that snapshot is reused, whatever became of the answer.
    QCOMPARE(t[1].reused, t[0].prompt - 10);
    QVERIFY(t[1].prompt > t[0].prompt);
    // After /reset the same message is a fresh conversation with the same (greedy) answer.
    QVERIFY(r.err.contains("[conversation reset]"));
    QCOMPARE(t[2].reused, 0);
    QCOMPARE(t[2].prompt, t[0].prompt);
    QCOMPARE(t[2].tokens, t[0].tokens);
    QVERIFY2(r.out.contains("/reset  start a new conversation"), qPrintable(r.out));
    QVERIFY(!r.out.contains("<think>")); // --no-think opens the response channel directly
}

void TestK3ChatCli::historyRoundTripsAndIsRePrefilled() {
    const QString dir = kModels + "k3_tiny_a";
    QTemporaryDir tmp;
    const QString history = tmp.filePath("chat.jsonl");
    const QStringList args{dir,     "--chat",     "--system",     "Be brief.", "--history",
                           history, "--no-think", "--max-tokens", "6"};
    const K3Run first = runK3(args, "hi\nmore\n");
    QVERIFY2(first.exitCode == 0, qPrintable(first.err));
    QCOMPARE(turns(first.err).size(), 2);
    const std::vector<k3::ChatMessage> saved = k3::readTranscript(history.toStdString());
    QCOMPARE(saved.size(), std::size_t(5));
    QCOMPARE(saved[0].role, k3::ChatRole::System);
    QCOMPARE(saved[0].content, std::string("Be brief."));
    QCOMPARE(saved[1].content, std::string("hi"));
    QCOMPARE(saved[2].role, k3::ChatRole::Assistant);
    QCOMPARE(saved[3].content, std::string("more"));
    QCOMPARE(saved[4].role, k3::ChatRole::Assistant);

    // The restart re-renders the transcript (no generation prompt) and prefills exactly it.
    const int positions = resumedPositions(dir, saved);
    const K3Run second = runK3(args, "third\n");
    QVERIFY2(second.exitCode == 0, qPrintable(second.err));
    QVERIFY2(
        second.err.contains(
            QString("[resumed 5 messages from %1: %2 positions, ").arg(history).arg(positions)),
        qPrintable(second.err));
    const QList<Turn> t = turns(second.err);
    QCOMPARE(t.size(), 1);
    QCOMPARE(t[0].reused, positions);
    const std::vector<k3::ChatMessage> after = k3::readTranscript(history.toStdString());
    QCOMPARE(after.size(), std::size_t(7));
    QVERIFY(std::equal(saved.begin(), saved.end(), after.begin()));
    QCOMPARE(after[5].content, std::string("third"));
}

// What the model read of a --history conversation is kept beside it (FILE.states/,
// owner-only), so a resumed conversation restores it instead of reading it again: all of
// it but the last answer's final token, which was sampled and never fed.
void TestK3ChatCli::historyStateIsRestoredNotReadAgain() {
    const QString dir = QStringLiteral(K3_SOURCE_DIR "/resources/demo");
    QTemporaryDir tmp;
    const QString history = tmp.filePath("chat.jsonl");
    const QStringList args{dir, "--chat", "--history", history, "--no-think"};
    const K3Run first = runK3(args, "hi\nmore\n");
    QVERIFY2(first.exitCode == 0, qPrintable(first.err));
    const QDir states(history + ".states");
    QVERIFY(states.exists());
    QCOMPARE(QFileInfo(states.path()).permissions() & 0x0077, QFileDevice::Permissions());
    QCOMPARE(states.entryList({"*.k3state"}, QDir::Files).size(), 1);

    const std::vector<k3::ChatMessage> saved = k3::readTranscript(history.toStdString());
    QCOMPARE(saved.size(), std::size_t(4));
    const int positions = resumedPositions(dir, saved);
    const K3Run second = runK3(args, "third\n");
    QVERIFY2(second.exitCode == 0, qPrintable(second.err));
    QVERIFY2(second.err.contains(QString("[resumed 4 messages from %1: %2 positions, %3 restored "
                                         "from its saved state, 1 read in ")
                                     .arg(history)
                                     .arg(positions)
                                     .arg(positions - 1)),
             qPrintable(second.err));
    QCOMPARE(turns(second.err).at(0).reused, positions);

    // An explicit --state-cache is used instead; nothing is made beside the transcript.
    QTemporaryDir other;
    const QString elsewhere = other.filePath("chat.jsonl");
    const K3Run explicitCache = runK3(
        {dir, "--chat", "--history", elsewhere, "--no-think", "--state-cache", other.filePath("s")},
        "hi\n");
    QVERIFY2(explicitCache.exitCode == 0, qPrintable(explicitCache.err));
    QVERIFY(!QDir(elsewhere + ".states").exists());
    QVERIFY(QDir(other.filePath("s")).exists());
}

void TestK3ChatCli::transcriptWithBadLineIsRefused() {
    QTemporaryDir tmp;
    const QString history = tmp.filePath("bad.jsonl");
    writeFile(history, "{\"role\":\"user\",\"content\":\"hi\"}\n{\"role\":\"user\",\"content\":\n");
    const QByteArray before = [&] {
        QFile f(history);
        f.open(QIODevice::ReadOnly);
        return f.readAll();
    }();
    const K3Run r = runK3({kModels + "k3_tiny_a", "--chat", "--history", history}, "hello\n");
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.startsWith("k3: error: --history: "), qPrintable(r.err));
    QVERIFY2(r.err.contains(history + ":2: not valid JSON"), qPrintable(r.err));
    QFile f(history);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.readAll(), before); // refused, never rewritten

    writeFile(
        history,
        "{\"role\":\"user\",\"content\":\"hi\"}\n\n{\"role\":\"wizard\",\"content\":\"x\"}\n");
    const K3Run role = runK3({kModels + "k3_tiny_a", "--chat", "--history", history}, "hello\n");
    QCOMPARE(role.exitCode, 2);
    QVERIFY2(role.err.contains(history + ":3:"), qPrintable(role.err));
    QVERIFY2(role.err.contains("wizard"), qPrintable(role.err));
}

void TestK3ChatCli::systemMismatchIsRefused() {
    QTemporaryDir tmp;
    const QString history = tmp.filePath("h.jsonl");
    writeFile(history,
              "{\"role\":\"system\",\"content\":\"A\"}\n{\"role\":\"user\",\"content\":\"hi\"}\n");
    const K3Run r =
        runK3({kModels + "k3_tiny_a", "--chat", "--history", history, "--system", "B"}, "x\n");
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("--system does not match"), qPrintable(r.err));
}

void TestK3ChatCli::ctrlCStopsTheAnswerAndKeepsTheConversation() {
    // Greedy k3_tiny_b answers this with 783 tokens (seconds of work): Ctrl-C as soon as
    // the answer streams stops it long before that.
    QTemporaryDir tmp;
    const QString history = tmp.filePath("h.jsonl");
    QProcess p;
    p.start(QStringLiteral(K3_CLI_PATH), {kModels + "k3_tiny_b", "--chat", "--no-think",
                                          "--max-tokens", "800", "--history", history});
    QVERIFY(p.waitForStarted());
    QByteArray out, err;
    QVERIFY2(waitFor(p, err, QProcess::StandardError, "k3 chat:", 10000), err.constData());
    p.write("tell me a story\n");
    QVERIFY2(waitFor(p, out, QProcess::StandardOutput, {}, 10000), err.constData());
    ::kill(pid_t(p.processId()), SIGINT);
    QVERIFY2(waitFor(p, err, QProcess::StandardError, "stopped]", 10000), err.constData());
    p.write("/exit\n");
    p.closeWriteChannel();
    QVERIFY(p.waitForFinished(10000));
    err += p.readAllStandardError();
    QCOMPARE(p.exitCode(), 0);
    const QList<Turn> t = turns(QString::fromUtf8(err));
    QCOMPARE(t.size(), 1);
    QCOMPARE(t[0].how, QStringLiteral("stopped"));
    QVERIFY2(t[0].tokens > 0 && t[0].tokens < 783, qPrintable(QString::number(t[0].tokens)));
    const std::vector<k3::ChatMessage> saved = k3::readTranscript(history.toStdString());
    QCOMPARE(saved.size(), std::size_t(2));
    QCOMPARE(saved[0].content, std::string("tell me a story"));
    QCOMPARE(saved[1].role, k3::ChatRole::Assistant);
}

void TestK3ChatCli::ctrlCTwiceAtThePromptExits() {
    QProcess p;
    p.start(QStringLiteral(K3_CLI_PATH), {kModels + "k3_tiny_a", "--chat"});
    QVERIFY(p.waitForStarted());
    QByteArray err;
    QVERIFY2(waitFor(p, err, QProcess::StandardError, "k3 chat:", 10000), err.constData());
    ::kill(pid_t(p.processId()), SIGINT);
    QVERIFY2(waitFor(p, err, QProcess::StandardError, "Ctrl-C again", 10000), err.constData());
    QCOMPARE(p.state(), QProcess::Running); // one press only warns
    ::kill(pid_t(p.processId()), SIGINT);
    QVERIFY(p.waitForFinished(10000));
    QCOMPARE(p.exitStatus(), QProcess::NormalExit);
    QCOMPARE(p.exitCode(), 0);
}

void TestK3ChatCli::historyFolderOrFifoIsRefused() {
    // `--history DIR` used to chat, save nothing and exit 0; a FIFO blocked the read.
    QTemporaryDir tmp;
    const K3Run dir = runK3({kModels + "k3_tiny_a", "--chat", "--history", tmp.path()}, "hi\n");
    QCOMPARE(dir.exitCode, 2);
    QCOMPARE(dir.err, "k3: error: --history: cannot write " + tmp.path() +
                          ": it is a directory; k3 writes only regular files; give a file "
                          "name\n");
    QCOMPARE(QDir(tmp.path()).entryList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden),
             QStringList());
    const QString fifo = tmp.filePath("h.jsonl");
    QCOMPARE(::mkfifo(QFile::encodeName(fifo).constData(), 0600), 0);
    const K3Run pipe = runK3({kModels + "k3_tiny_a", "--chat", "--history", fifo}, "hi\n");
    QCOMPARE(pipe.exitCode, 2);
    QCOMPARE(pipe.err, "k3: error: --history: cannot write " + fifo +
                           ": it is a FIFO (named pipe); k3 writes only regular files\n");
}

// Issue 35 item 15: a hard link to a history forked it at the first save and took a
// lock of its own; refused, exit 1, before the model loads.
void TestK3ChatCli::hardLinkedHistoryIsRefused() {
    QTemporaryDir tmp;
    const QString history = tmp.filePath("h.jsonl");
    k3::writeTranscript(history.toStdString(), {{k3::ChatRole::User, "hi", {}, {}, {}}});
    const QString second = tmp.filePath("g.jsonl");
    QCOMPARE(::link(QFile::encodeName(history).constData(), QFile::encodeName(second).constData()),
             0);
    const K3Run r = runK3({kModels + "k3_tiny_a", "--chat", "--history", second}, "hi\n");
    QCOMPARE(r.exitCode, 1);
    QCOMPARE(r.err, "k3: error: --history: cannot use " + second +
                        ": it has 2 hard links; each save replaces the file, so its other names "
                        "would keep the old conversation and a session through another name "
                        "would not see this one; use a copy (cp) or remove the other links\n");
    QCOMPARE(k3::readTranscript(history.toStdString()).size(), std::size_t(1));
}

void TestK3ChatCli::secondSessionOnOneHistoryIsRefused() {
    // Two sessions on one history: the last writer used to win silently. This process
    // plays the first session (k3chat and k3 take the same lock).
    QTemporaryDir tmp;
    const QString history = tmp.filePath("h.jsonl");
    const QString alias = tmp.filePath("alias.jsonl");
    QVERIFY(QFile::link(QStringLiteral("h.jsonl"), alias));
    {
        k3::OutputLock first(history.toStdString());
        for (const QString& path : {history, alias}) {
            const K3Run r = runK3({kModels + "k3_tiny_a", "--chat", "--history", path}, "hi\n");
            QCOMPARE(r.exitCode, 1);
            QCOMPARE(r.err, "k3: error: --history: " + path +
                                QStringLiteral(" is in use by another session (pid %1): two "
                                               "sessions writing one conversation would "
                                               "overwrite each other's turns; close the other "
                                               "one or choose another file\n")
                                    .arg(::getpid()));
        }
        QVERIFY(!QFile::exists(history));
    }
    const K3Run r = runK3(
        {kModels + "k3_tiny_a", "--chat", "--no-think", "--max-tokens", "2", "--history", history},
        "hi\n");
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    QCOMPARE(k3::readTranscript(history.toStdString()).size(), std::size_t(2));
    // The session's lock file went with it.
    QCOMPARE(QDir(tmp.path()).entryList(QDir::Files | QDir::Hidden | QDir::System),
             (QStringList{"alias.jsonl", "h.jsonl"}));
}

void TestK3ChatCli::symlinkedHistoryStaysALink() {
    QTemporaryDir tmp;
    QVERIFY(QDir().mkpath(tmp.filePath("real")));
    const QString target = tmp.filePath("real/chat.jsonl");
    writeFile(target,
              "{\"role\":\"user\",\"content\":\"hi\"}\n"
              "{\"role\":\"assistant\",\"content\":\"hello\",\"reasoning_content\":\"\"}\n");
    QCOMPARE(::chmod(QFile::encodeName(target).constData(), 0640), 0);
    const QString link = tmp.filePath("chat.jsonl");
    QVERIFY(QFile::link(QStringLiteral("real/chat.jsonl"), link));
    const K3Run r = runK3(
        {kModels + "k3_tiny_a", "--chat", "--no-think", "--max-tokens", "2", "--history", link},
        "again\n");
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    struct stat st {};
    QCOMPARE(::lstat(QFile::encodeName(link).constData(), &st), 0);
    QVERIFY(S_ISLNK(st.st_mode));
    QCOMPARE(::stat(QFile::encodeName(target).constData(), &st), 0);
    QCOMPARE(int(st.st_mode & 07777), 0640);
    // The resumed pair, again, and its answer: all in the real file.
    const auto saved = k3::readTranscript(target.toStdString());
    QCOMPARE(saved.size(), std::size_t(4));
    QCOMPARE(saved[2].content, std::string("again"));
}

void TestK3ChatCli::transcriptValuesAreShownNotObeyed() {
    // A transcript value in an error message: the escape sequences are printed as text.
    QTemporaryDir tmp;
    const QString history = tmp.filePath("h.jsonl");
    writeFile(history, "{\"role\":\"\\u001b]0;pwned\\u0007\\u001b[2J\",\"content\":\"x\"}\n");
    const K3Run r = runK3({kModels + "k3_tiny_a", "--chat", "--history", history}, "hi\n");
    QCOMPARE(r.exitCode, 2);
    QCOMPARE(r.err, "k3: error: --history: " + history +
                        ":1: field \"role\" has unknown value \"\\x1b]0;pwned\\x07\\x1b[2J\" "
                        "(expected system, user, assistant or tool)\n");
}

void TestK3ChatCli::invalidAnswerIsMarkedInTheHistory() {
    // An answer from a run that lost experts was saved as an ordinary message.
    QTemporaryDir tmp;
    const QString history = tmp.filePath("h.jsonl");
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("K3_FAULT_INJECT"), QStringLiteral("kind:expert,error:eio"));
    const K3Run r = runK3({kModels + "k3_tiny_b", "--chat", "--no-think", "--max-tokens", "3",
                           "--cache-gb", "0.0001", "--history", history},
                          "hi\n", env);
    QVERIFY2(r.exitCode == 4, qPrintable(QString::number(r.exitCode) + " " + r.err));
    const auto saved = k3::readTranscript(history.toStdString());
    QCOMPARE(saved.size(), std::size_t(2));
    QCOMPARE(saved[0].invalid, std::string());
    QVERIFY2(saved[1].invalid.ends_with(" routed expert(s) could not be loaded"),
             saved[1].invalid.c_str());
    QVERIFY2(r.err.contains("k3: error: RUN INVALID: " + QString::fromStdString(saved[1].invalid) +
                            "; this answer is not the model's"),
             qPrintable(r.err));
    // Read back by the next session, the mark is still there.
    QFile f(history);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QVERIFY(f.readAll().contains("\"invalid\":\""));
}

// --json-schema FILE: each answer of the demo model is JSON of the schema (greedy and
// sampled, thinking off and on); --json any object; a keyword outside the subset is a
// usage error naming it.
void TestK3ChatCli::jsonSchemaHoldsEveryAnswer() {
    const QString demo = QStringLiteral(K3_SOURCE_DIR "/resources/demo");
    QTemporaryDir tmp;
    const QString schema = tmp.filePath("schema.json");
    writeFile(schema, R"({"type":"object","properties":{"topic":{"type":"string","maxLength":20},)"
                      R"("bits":{"type":"integer"}},"required":["topic","bits"],)"
                      R"("additionalProperties":false})");
    // The answer: what stdout holds after the think channel's closing line, if any.
    const auto answer = [](const QString& out) {
        const qsizetype end = out.lastIndexOf("</think>");
        return (end < 0 ? out : out.mid(end + 8)).trimmed().toUtf8();
    };
    for (const QStringList& extra : {QStringList{"--no-think"}, QStringList{"--seed", "5"},
                                     QStringList{"--no-think", "--json"}}) {
        const bool anyObject = extra.contains("--json");
        QStringList args{demo, "--chat", "--max-tokens", "120"};
        if (!anyObject) args << "--json-schema" << schema;
        const K3Run r = runK3(args + extra, "What is MXFP4?\n");
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QJsonParseError error;
        const QJsonDocument doc = QJsonDocument::fromJson(answer(r.out), &error);
        QVERIFY2(error.error == QJsonParseError::NoError && doc.isObject(), qPrintable(r.out));
        if (anyObject) continue;
        QCOMPARE(doc.object().keys(), (QStringList{"bits", "topic"}));
        QVERIFY(doc["topic"].isString() && doc["topic"].toString().size() <= 20);
        QVERIFY(doc["bits"].isDouble() &&
                doc["bits"].toDouble() == double(doc["bits"].toInteger()));
    }
    writeFile(schema, R"({"type":"object","properties":{"n":{"type":"integer","minimum":1}}})");
    const K3Run bad = runK3({demo, "--chat", "--json-schema", schema}, "hi\n");
    QCOMPARE(bad.exitCode, 2);
    QVERIFY2(bad.err.contains("properties.n.minimum: not supported"), qPrintable(bad.err));
    const K3Run batch = runK3({demo, "--json", "--prompt", "x"});
    QCOMPARE(batch.exitCode, 2);
    QVERIFY2(batch.err.contains("--json needs --chat"), qPrintable(batch.err));
}

// Issue 33: a --history transcript with images (the app's: files relative to the
// transcript, under images/) was refused; its images are read and their rows prefilled.
void TestK3ChatCli::historyWithImagesIsResumed() {
    const QString dir = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/vision/k3_tiny_vl");
    const QString picture =
        QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/vision/images/rgb_97x61.png");
    QTemporaryDir tmp;
    QVERIFY(QDir(tmp.path()).mkdir("images"));
    QVERIFY(QFile::copy(picture, tmp.filePath("images/cat.png")));
    const QString history = tmp.filePath("chat.jsonl");
    std::vector<k3::ChatMessage> saved(2);
    saved[0].role = k3::ChatRole::User;
    saved[0].content = std::string(k3::kImagePlaceholder) + "What is this?";
    saved[0].images.push_back({nullptr, "images/cat.png"});
    saved[1].role = k3::ChatRole::Assistant;
    saved[1].content = "A cat.";
    k3::writeTranscript(history.toStdString(), saved);

    // 97x61 pads to 112x84: 8 x 6 patches, 48, merged 2x2 into 12 prompt positions.
    const k3::PreparedImage prepared = k3::prepareImage(k3::readImageFile(picture.toStdString()));
    QCOMPARE(prepared.plan.tokens(), 12);
    std::vector<k3::ChatMessage> rendered = saved;
    rendered[0].images[0].image = std::make_shared<const k3::PreparedImage>(prepared);
    const int positions = resumedPositions(dir, rendered) + 12 - 1; // the pad becomes 12 rows
    // Run from elsewhere: the image is found beside the transcript, not in the cwd.
    const K3Run r = runK3({dir, "--chat", "--history", history, "--no-think", "--max-tokens", "3"},
                          "And now?\n", QProcessEnvironment::systemEnvironment(), QDir::rootPath());
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    QVERIFY2(
        r.err.contains(QString("[resumed 2 messages from %1: %2 positions, 0 restored from its "
                               "saved state, %2 read in ")
                           .arg(history)
                           .arg(positions)),
        qPrintable(r.err));
    // The first message continues the resumed state: the same image, by its rows' hashes.
    QCOMPARE(turns(r.err).size(), 1);
    QCOMPARE(turns(r.err).at(0).reused, positions);
    QVERIFY(turns(r.err).at(0).prompt > positions);
    const std::vector<k3::ChatMessage> after = k3::readTranscript(history.toStdString());
    QCOMPARE(after.size(), std::size_t(4));
    QCOMPARE(after[0].images.size(), std::size_t(1));
    QCOMPARE(after[0].images[0].file, std::string("images/cat.png")); // still relative
    QCOMPARE(after[2].content, std::string("And now?"));

    // A missing image is refused naming it, and the transcript is left as it was.
    QVERIFY(QFile::remove(tmp.filePath("images/cat.png")));
    const K3Run missing = runK3({dir, "--chat", "--history", history, "--no-think"}, "x\n");
    QCOMPARE(missing.exitCode, 2);
    QVERIFY2(missing.err.contains(QString("--history %1: image \"images/cat.png\": ").arg(history)),
             qPrintable(missing.err));
    QCOMPARE(k3::readTranscript(history.toStdString()).size(), std::size_t(4));
}

QTEST_GUILESS_MAIN(TestK3ChatCli)
#include "tst_k3chat_cli.moc"
