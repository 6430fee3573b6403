// `k3 MODEL_DIR --chat` driven through stdin: answers, /reset, prefix reuse, --history
// resume (re-rendered and re-prefilled), refused transcripts, Ctrl-C.
// The tiny models are random: their answers are gibberish, so the checks are on ids,
// counts and structure, never on pleasant text.
#include "K3Process.hpp"

#include <QElapsedTimer>
#include <QFile>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>

#include <csignal>
#include <sys/types.h>

#include <k3/chat.hpp>
#include <k3/tokenizer.hpp>

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

} // namespace

class TestK3ChatCli : public QObject {
    Q_OBJECT
private slots:
    void answersResetsAndReusesPositions();
    void historyRoundTripsAndIsRePrefilled();
    void transcriptWithBadLineIsRefused();
    void systemMismatchIsRefused();
    void ctrlCStopsTheAnswerAndKeepsTheConversation();
    void ctrlCTwiceAtThePromptExits();
};

void TestK3ChatCli::answersResetsAndReusesPositions() {
    const K3Run r = runK3({kModels + "k3_tiny_a", "--chat", "--no-think", "--max-tokens", "6"},
                          "hello\nagain\n/help\n/reset\nhello\n/exit\n");
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    const QList<Turn> t = turns(r.err);
    QCOMPARE(t.size(), 3);
    QCOMPARE(t[0].reused, 0);
    QVERIFY(t[0].prompt > 5);
    // The second turn's prompt starts with the first one: that state is reused.
    QCOMPARE(t[1].reused, t[0].prompt);
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
    const k3::Tokenizer tok = k3::Tokenizer::fromDirectory(dir.toStdString());
    k3::ChatRenderOptions render;
    render.thinking = false;
    render.addGenerationPrompt = false;
    const int positions =
        int(k3::encodeChatSegments(tok, k3::renderChatSegments(saved, render)).size());
    const K3Run second = runK3(args, "third\n");
    QVERIFY2(second.exitCode == 0, qPrintable(second.err));
    QVERIFY2(second.err.contains(QString("[resumed 5 messages from %1: prefilled %2 positions")
                                     .arg(history)
                                     .arg(positions)),
             qPrintable(second.err));
    const QList<Turn> t = turns(second.err);
    QCOMPARE(t.size(), 1);
    QCOMPARE(t[0].reused, positions);
    const std::vector<k3::ChatMessage> after = k3::readTranscript(history.toStdString());
    QCOMPARE(after.size(), std::size_t(7));
    QVERIFY(std::equal(saved.begin(), saved.end(), after.begin()));
    QCOMPARE(after[5].content, std::string("third"));
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

QTEST_GUILESS_MAIN(TestK3ChatCli)
#include "tst_k3chat_cli.moc"
