// `k3 --remote URL --model NAME --chat` through the real binary, against the scripted
// OpenAI-compatible server: the same REPL, transcript and stop rules as a local model.
#include "FakeOpenAiServer.hpp"
#include "K3Process.hpp"

#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

class TestK3Remote : public QObject {
    Q_OBJECT
private slots:
    void chatStreamsThinkThenAnswerAndSavesTheModel() {
        FakeOpenAiServer server("sk-cli-test");
        QTemporaryDir dir;
        const QString keyFile = dir.filePath(QStringLiteral("key"));
        QFile key(keyFile);
        QVERIFY(key.open(QIODevice::WriteOnly));
        key.write("sk-cli-test\n");
        key.close();
        const QString history = dir.filePath(QStringLiteral("chat.jsonl"));
        const QString url = QString::fromStdString(server.url());
        const K3Run r =
            runK3({QStringLiteral("--remote"), url, QStringLiteral("--model"),
                   QStringLiteral("k3-think"), QStringLiteral("--api-key-file"), keyFile,
                   QStringLiteral("--chat"), QStringLiteral("--history"), history},
                  "Hi\n/exit\n");
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        QCOMPARE(r.out, QStringLiteral("<think>\nThe user greets; answer briefly. Done.\n</think>\n"
                                       "Hello, wörld!\n"));
        QVERIFY2(r.err.contains(QStringLiteral("[k3-think: prompt 12 tokens, 6 tokens in ")),
                 qPrintable(r.err));
        QVERIFY(!r.err.contains(QStringLiteral("sk-cli-test"))); // the key is never printed
        QFile saved(history);
        QVERIFY(saved.open(QIODevice::ReadOnly));
        const QList<QByteArray> lines = saved.readAll().trimmed().split('\n');
        QCOMPARE(lines.size(), 2);
        const auto answer = nlohmann::json::parse(lines[1].toStdString());
        QCOMPARE(answer["content"].get<std::string>(), std::string("Hello, wörld!"));
        QCOMPARE(answer["model"].get<std::string>(), std::string("k3-think"));
    }

    // A server's tool calls are printed, one line each (name and the arguments' JSON
    // text), kept in the conversation and saved, and the next turn sends them back.
    void toolCallsArePrintedAndSentBack() {
        FakeOpenAiServer server;
        QTemporaryDir dir;
        const QString history = dir.filePath(QStringLiteral("chat.jsonl"));
        const K3Run r = runK3({QStringLiteral("--remote"), QString::fromStdString(server.url()),
                               QStringLiteral("--model"), QStringLiteral("k3-tools"),
                               QStringLiteral("--chat"), QStringLiteral("--history"), history},
                              "Weather in Oslo?\nAnd the time?\n/exit\n");
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        const QString turn = QStringLiteral("<think>\nNeed the weather.\n</think>\n"
                                            "[tool call] get_weather({\"city\":\"Oslo\"})\n"
                                            "[tool call] clock({})\n");
        QCOMPARE(r.out, turn + turn);
        QVERIFY2(r.err.contains(QStringLiteral("[k3-tools: prompt 20 tokens, 9 tokens in ")),
                 qPrintable(r.err));
        QVERIFY2(r.err.contains(QStringLiteral("end of turn]")), qPrintable(r.err));
        // The second request carries the first answer's calls, as OpenAI's API shapes them.
        const auto body = nlohmann::ordered_json::parse(server.lastBody());
        QCOMPARE(body["messages"].size(), std::size_t(3));
        QCOMPARE(body["messages"][1].dump(),
                 std::string(
                     "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"Need t"
                     "he weather.\",\"tool_calls\":[{\"id\":\"call_a\",\"type\":\"function\","
                     "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Os"
                     "lo\\\"}\"}},{\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\""
                     ":\"clock\",\"arguments\":\"{}\"}}]}"));
        QCOMPARE(body["messages"][2].dump(),
                 std::string(R"({"role":"user","content":"And the time?"})"));
        QFile saved(history);
        QVERIFY(saved.open(QIODevice::ReadOnly));
        const QList<QByteArray> lines = saved.readAll().trimmed().split('\n');
        QCOMPARE(lines.size(), 4);
        const auto answer = nlohmann::json::parse(lines[3].toStdString());
        QCOMPARE(answer["tool_calls"][0]["function"]["name"].get<std::string>(),
                 std::string("get_weather"));
        QCOMPARE(answer["tool_calls"][0]["function"]["arguments"]["city"].get<std::string>(),
                 std::string("Oslo"));
    }

    void aCutStreamKeepsThePartialAnswerAndSaysWhy() {
        FakeOpenAiServer server;
        const QString root = QStringLiteral("http://127.0.0.1:%1").arg(server.port());
        const K3Run r = runK3({QStringLiteral("--remote"), root, QStringLiteral("--model"),
                               QStringLiteral("k3-cut"), QStringLiteral("--chat")},
                              "Hi\n/exit\n");
        // Kept and said, but never a success: the answer is not the whole answer.
        QCOMPARE(r.exitCode, 1);
        QCOMPARE(r.out, QStringLiteral("<think>\nThinking\n</think>\nPartial answer\n"));
        QVERIFY2(r.err.contains(QStringLiteral("the server at %1 closed the stream early, after "
                                               "3 deltas (no finish_reason or [DONE]); the "
                                               "partial answer is kept")
                                    .arg(root)),
                 qPrintable(r.err));
    }

    // Issue 35 item 11: a server streaming without end is cut off at 4 deltas a asked
    // token; the REPL keeps the partial answer and says why (as for a cut stream).
    void anEndlessStreamIsClosedAndSaysWhy() {
        FakeOpenAiServer server;
        const QString root = QStringLiteral("http://127.0.0.1:%1").arg(server.port());
        const K3Run r = runK3({QStringLiteral("--remote"), root, QStringLiteral("--model"),
                               QStringLiteral("k3-endless"), QStringLiteral("--max-tokens"),
                               QStringLiteral("4"), QStringLiteral("--chat")},
                              "Hi\n/exit\n");
        QString expected = QStringLiteral("again");
        for (int i = 1; i < 17; ++i) expected += QStringLiteral(" and again");
        QCOMPARE(r.out, expected + QStringLiteral("\n"));
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains(QStringLiteral("the server at %1 sent more than 16 text deltas "
                                               "for an answer of at most 4 tokens (max_tokens); "
                                               "closed the stream, the partial answer is kept")
                                    .arg(root)),
                 qPrintable(r.err));
    }

    // Issue 35 item 20: one reader for the key file on both sides. A second line used to
    // be dropped by k3 --remote and sent as part of the key by k3 serve.
    void theKeyFileIsReadTheSameWayByBothSides() {
        FakeOpenAiServer server("sk-cli-test");
        QTemporaryDir dir;
        const QString keyFile = dir.filePath(QStringLiteral("key"));
        QFile key(keyFile);
        QVERIFY(key.open(QIODevice::WriteOnly));
        key.write("sk-cli-test\nsecond line\n");
        key.close();
        const QString expected = QStringLiteral("--api-key-file: %1: the API key file holds "
                                                "more than one line; it should hold only the key")
                                     .arg(keyFile);
        const K3Run remote =
            runK3({QStringLiteral("--remote"), QString::fromStdString(server.url()),
                   QStringLiteral("--model"), QStringLiteral("k3-think"),
                   QStringLiteral("--api-key-file"), keyFile, QStringLiteral("--chat")},
                  "Hi\n/exit\n");
        QCOMPARE(remote.exitCode, 2);
        QVERIFY2(remote.err.contains(expected), qPrintable(remote.err));
        QCOMPARE(server.streamsStarted(), 0);
        const K3Run serve =
            runK3({QStringLiteral("serve"), QStringLiteral(K3_SOURCE_DIR "/resources/demo"),
                   QStringLiteral("--port"), QStringLiteral("0"), QStringLiteral("--api-key-file"),
                   keyFile});
        QCOMPARE(serve.exitCode, 2);
        QVERIFY2(serve.err.contains(expected), qPrintable(serve.err));
    }

    void usageAndConnectionErrorsAreClear() {
        const K3Run noModel =
            runK3({QStringLiteral("--remote"), QStringLiteral("http://127.0.0.1:9/v1"),
                   QStringLiteral("--chat")});
        QCOMPARE(noModel.exitCode, 2);
        QVERIFY2(noModel.err.contains(QStringLiteral("--remote needs --model NAME")),
                 qPrintable(noModel.err));
        const K3Run noChat =
            runK3({QStringLiteral("--remote"), QStringLiteral("http://127.0.0.1:9/v1")});
        QCOMPARE(noChat.exitCode, 2);
        QVERIFY2(noChat.err.contains(QStringLiteral("--remote needs --chat")),
                 qPrintable(noChat.err));
        const K3Run badUrl =
            runK3({QStringLiteral("--remote"), QStringLiteral("gpu-node:8000"),
                   QStringLiteral("--model"), QStringLiteral("m"), QStringLiteral("--chat")});
        QCOMPARE(badUrl.exitCode, 2);
        QVERIFY2(badUrl.err.contains(QStringLiteral(
                     "--remote: the server URL \"gpu-node:8000\" must start with http:// or "
                     "https://")),
                 qPrintable(badUrl.err));

        int port = 0;
        {
            FakeOpenAiServer gone;
            port = gone.port();
        }
        const QString dead = QStringLiteral("http://127.0.0.1:%1").arg(port);
        const K3Run refused = runK3({QStringLiteral("--remote"), dead, QStringLiteral("--model"),
                                     QStringLiteral("k3-think"), QStringLiteral("--chat")},
                                    "Hi\nHi again\n/exit\n");
        // Each message says why; the REPL goes on, and the session ends as a failure.
        QCOMPARE(refused.exitCode, 1);
        QCOMPARE(refused.err.count(QStringLiteral("could not connect to")), 2);
        QVERIFY2(refused.err.contains(
                     QStringLiteral("the server failed: could not connect to 127.0.0.1:%1: "
                                    "connection refused; check that the server is running and "
                                    "the URL %2 is right")
                         .arg(port)
                         .arg(dead)),
                 qPrintable(refused.err));
    }
};

QTEST_GUILESS_MAIN(TestK3Remote)
#include "tst_k3remote.moc"
