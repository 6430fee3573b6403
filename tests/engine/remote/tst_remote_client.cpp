// k3::RemoteClient and the remote k3::ChatBackend against a scripted OpenAI-compatible
// server: streamed think + answer deltas, usage, every error a user meets, a stream cut
// before [DONE], and a cancel that closes the stream at once.

#include "FakeOpenAiServer.hpp"

#include "k3/backend.hpp"
#include "k3/chat.hpp"
#include "k3/remote.hpp"

#include <QTemporaryDir>
#include <QTest>

#include <fstream>

#include <nlohmann/json.hpp>

#include <atomic>

namespace QTest {
// Failures print the strings, not only the expressions.
inline char* toString(const std::string& s) {
    return qstrdup(s.c_str());
}
} // namespace QTest

namespace {

std::string root(const FakeOpenAiServer& server) {
    return "http://127.0.0.1:" + std::to_string(server.port());
}

k3::RemoteClient client(const std::string& url, const std::string& model,
                        const std::string& key = {}) {
    k3::RemoteOptions o;
    o.baseUrl = url;
    o.model = model;
    o.apiKey = key;
    return k3::RemoteClient(o);
}

k3::RemoteRequest hello() {
    k3::RemoteRequest r;
    r.messages = {{k3::ChatRole::System, "Be brief.", {}, {}, {}},
                  {k3::ChatRole::User, "Hi", {}, {}, {}}};
    r.maxTokens = 64;
    return r;
}

// The message of the RemoteError `call` throws, and its kind.
template <class F> std::pair<std::string, k3::RemoteErrorKind> errorOf(F&& call) {
    try {
        call();
    } catch (const k3::RemoteError& e) {
        return {e.what(), e.remoteKind()};
    }
    return {"(no error)", k3::RemoteErrorKind::Usage};
}

struct Collector : k3::SessionObserver {
    std::vector<k3::TokenEvent> events;
    void onToken(const k3::TokenEvent& e) override { events.push_back(e); }
};

} // namespace

class TestRemoteClient : public QObject {
    Q_OBJECT
private slots:
    void streamsThinkingThenAnswerWithUsage() {
        FakeOpenAiServer server("sk-test-123");
        std::vector<k3::RemoteDelta> deltas;
        const k3::RemoteReply reply =
            client(server.url(), "k3-think", "sk-test-123")
                .chat(hello(), [&](const k3::RemoteDelta& d) { deltas.push_back(d); });
        // reasoning_content and reasoning both feed the think channel, in order.
        QCOMPARE(reply.reasoning, std::string("The user greets; answer briefly. Done."));
        QCOMPARE(reply.content, std::string("Hello, wörld!"));
        QCOMPARE(reply.finishReason, std::string("stop"));
        QCOMPARE(reply.model, std::string("k3-think"));
        QCOMPARE(reply.promptTokens, 12);
        QCOMPARE(reply.completionTokens, 6);
        QCOMPARE(reply.deltas, 6);
        QCOMPARE(reply.cancelled, false);
        QCOMPARE(int(deltas.size()), 6);
        const std::vector<std::pair<std::string, std::string>> expected = {
            {"The user greets; ", ""},
            {"answer briefly.", ""},
            {" Done.", ""},
            {"", "Hello"},
            {"", ", wörld"},
            {"", "!"}};
        for (std::size_t i = 0; i < deltas.size(); ++i) {
            QCOMPARE(deltas[i].index, int(i));
            QCOMPARE(deltas[i].reasoning, expected[i].first);
            QCOMPARE(deltas[i].content, expected[i].second);
            if (i > 0) QVERIFY(deltas[i].secondsSinceStart >= deltas[i - 1].secondsSinceStart);
            QVERIFY(deltas[i].secondsSincePrevious >= 0);
        }
        QCOMPARE(reply.firstDeltaSeconds, deltas[0].secondsSinceStart);
        QCOMPARE(server.lastAuthorization(), std::string("Bearer sk-test-123"));
        const auto body = nlohmann::ordered_json::parse(server.lastBody());
        QCOMPARE(body["model"].get<std::string>(), std::string("k3-think"));
        QCOMPARE(body["stream"].get<bool>(), true);
        QCOMPARE(body["stream_options"]["include_usage"].get<bool>(), true);
        QCOMPARE(body["max_tokens"].get<int>(), 64);
        QCOMPARE(body["messages"].dump(), std::string(R"([{"role":"system","content":"Be brief."},)"
                                                      R"({"role":"user","content":"Hi"}])"));
    }

    // An assistant's calls and the results answering them go back to the server in
    // OpenAI's shape (arguments as JSON text), as saved transcripts hold them.
    void toolCallsGoBackToTheServer() {
        FakeOpenAiServer server;
        k3::RemoteRequest r = hello();
        k3::ChatMessage calls{k3::ChatRole::Assistant, "", "", {}};
        calls.toolCalls = {{"c1", "get_weather", R"({"city":"Oslo"})"}};
        k3::ChatMessage result{k3::ChatRole::Tool, "-3 C", {}, {}};
        result.toolCallId = "c1";
        r.messages.push_back(calls);
        r.messages.push_back(result);
        QCOMPARE(client(server.url(), "k3-think").chat(r).content, std::string("Hello, wörld!"));
        const auto body = nlohmann::ordered_json::parse(server.lastBody());
        QCOMPARE(body["messages"][2].dump(),
                 std::string(R"({"role":"assistant","content":"","tool_calls":[{"id":"c1",)"
                             R"("type":"function","function":{"name":"get_weather",)"
                             "\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"}}]}"));
        QCOMPARE(body["messages"][3].dump(),
                 std::string(R"({"role":"tool","content":"-3 C","tool_call_id":"c1"})"));
    }

    // Calls the local model wrote in its tools channel (argument tags and json blocks) go
    // to a server as JSON text: the mapping form as its object, the string form as a JSON
    // string holding the block. Read back as a server decodes them (vLLM's json.loads),
    // they are the same calls and render to the same XTML.
    void localToolCallsSurviveTheRoundTrip() {
        const std::string channel =
            "<|open|>tools<|sep|>"
            "<|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
            "<|open|>argument key=\"city\" type=\"string\"<|sep|>Tromsø<|close|>argument<|sep|>"
            "<|open|>argument key=\"days\" type=\"number\"<|sep|>3<|close|>argument<|sep|>"
            "<|open|>argument key=\"units\" type=\"object\"<|sep|>{\"temp\": \"C\"}"
            "<|close|>argument<|sep|>"
            "<|close|>call<|sep|>"
            "<|open|>call tool=\"run\" index=\"2\"<|sep|>"
            "<|open|>json type=\"object\"<|sep|>{\"cmd\": \"ls\"}<|close|>json<|sep|>"
            "<|close|>call<|sep|>"
            "<|open|>call tool=\"note\" index=\"3\"<|sep|>"
            "<|open|>json type=\"object\"<|sep|>50% done<|close|>json<|sep|>"
            "<|close|>call<|sep|>"
            "<|close|>tools<|sep|>";
        std::vector<std::string> problems;
        const std::vector<k3::ChatToolCall> calls = k3::parseToolCalls(channel, &problems);
        QCOMPARE(problems, std::vector<std::string>());
        QCOMPARE(calls.size(), std::size_t(3));
        k3::ChatMessage answer{k3::ChatRole::Assistant, "", "", {}};
        answer.toolCalls = calls;
        const std::vector<k3::ChatMessage> local = {{k3::ChatRole::User, "Go", {}, {}, {}}, answer};
        k3::ChatRenderOptions render;
        render.addGenerationPrompt = false;
        const std::string rendered = k3::renderChat(local, render);

        k3::RemoteRequest r;
        r.messages = local;
        const auto body =
            nlohmann::ordered_json::parse(client("http://127.0.0.1:9", "m").requestBody(r));
        const nlohmann::ordered_json& sent = body["messages"][1]["tool_calls"];
        // [{"type":"function","function":{"name":"get_weather","arguments":
        //      "{\"city\":\"Tromsø\",\"days\":3,\"units\":{\"temp\":\"C\"}}"}},
        //  {... "name":"run","arguments":"\"{\\\"cmd\\\": \\\"ls\\\"}\""}},
        //  {... "name":"note","arguments":"\"50% done\""}}]
        QCOMPARE(
            sent.dump(),
            std::string("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"argume"
                        "nts\":\"{\\\"city\\\":\\\"Tromsø\\\",\\\"days\\\":3,\\\"units\\\":{"
                        "\\\"temp\\\":\\\""
                        "C\\\"}}\"}},{\"type\":\"function\",\"function\":{\"name\":\"run\",\"argume"
                        "nts\":\"\\\"{\\\\\\\"cmd\\\\\\\": "
                        "\\\\\\\"ls\\\\\\\"}\\\"\"}},{\"type\":\"function\",\"f"
                        "unction\":{\"name\":\"note\",\"arguments\":\"\\\"50% done\\\"\"}}]"));
        std::vector<k3::ChatToolCall> back;
        for (const auto& c : sent) {
            const std::string text = c["function"]["arguments"].get<std::string>();
            QVERIFY2(!nlohmann::json::parse(text, nullptr, false).is_discarded(), text.c_str());
            k3::ChatToolCall call;
            call.name = c["function"]["name"].get<std::string>();
            k3::readToolArgumentsJson(text, call);
            back.push_back(call);
        }
        QVERIFY(back == calls);
        std::vector<k3::ChatMessage> again = local;
        again[1].toolCalls = back;
        QCOMPARE(k3::renderChat(again, render), rendered);
        QVERIFY(rendered.find(channel) != std::string::npos); // the model's own text

        // Blank arguments are no arguments: "{}" (a server's empty text reads back so).
        QCOMPARE(k3::toolArgumentsJson({"c", "ping", " \n", false}), std::string("{}"));
        QCOMPARE(k3::toolArgumentsJson({"c", "ping", "", true}), std::string("{}"));
        k3::ChatToolCall empty{"c", "ping", "x", true};
        k3::readToolArgumentsJson("", empty);
        QVERIFY(empty == k3::ChatToolCall({"c", "ping", "{}", false}));
        // Mapping-form text that is no JSON object renders as a block: sent as a string.
        QCOMPARE(k3::toolArgumentsJson({"c", "f", "[1, 2]", false}), std::string("\"[1, 2]\""));
    }

    // A server's streamed calls, assembled by index, are the answer's tool calls (saved
    // with it), and finish_reason "tool_calls" ends the turn without a problem.
    // A user message's images go to the server as OpenAI content parts: the text around
    // each placeholder as text parts, each image's file as a data URL of its own bytes.
    void imagesAreSentAsDataUrlParts() {
        QTemporaryDir dir;
        const std::string png = std::string("\x89PNG\r\n\x1a\n", 8) + "rest";
        const std::string jpeg = "\xff\xd8\xff\xe0jfif";
        const std::string text = "plain text";
        const auto write = [&dir](const char* name, const std::string& bytes) {
            const std::string path = dir.filePath(QString::fromLatin1(name)).toStdString();
            std::ofstream(path, std::ios::binary) << bytes;
            return path;
        };
        k3::ChatMessage question{k3::ChatRole::User, "", {}, {}};
        question.content =
            std::string(k3::kImagePlaceholder) + "Compare" + std::string(k3::kImagePlaceholder);
        question.images = {k3::ChatImage{nullptr, write("a.png", png)},
                           k3::ChatImage{nullptr, write("b.jpg", jpeg)}};
        k3::RemoteRequest r;
        r.messages = {{k3::ChatRole::System, "be brief", {}, {}}, question};
        const auto body =
            nlohmann::ordered_json::parse(client("http://127.0.0.1:9", "m").requestBody(r));
        QCOMPARE(body["messages"][0]["content"].dump(), std::string("\"be brief\""));
        QCOMPARE(body["messages"][1]["content"].dump(),
                 std::string(R"([{"type":"image_url","image_url":{"url":"data:image/png;base64,)"
                             R"(iVBORw0KGgpyZXN0"}},{"type":"text","text":"Compare"},)"
                             R"({"type":"image_url","image_url":{"url":"data:image/jpeg;base64,)"
                             R"(/9j/4GpmaWY="}}])"));
        // A file that is not an image, or is gone, is said before anything is sent.
        question.images[1].file = write("c.txt", text);
        r.messages = {question};
        try {
            (void)client("http://127.0.0.1:9", "m").requestBody(r);
            QFAIL("a text file was sent as an image");
        } catch (const k3::RemoteError& e) {
            QCOMPARE(e.what(), question.images[1].file + " is not a PNG, JPEG or WebP image");
        }
        question.images[1].file = dir.filePath(QStringLiteral("gone.png")).toStdString();
        r.messages = {question};
        QVERIFY_THROWS_EXCEPTION(k3::RemoteError,
                                 (void)client("http://127.0.0.1:9", "m").requestBody(r));
    }

    void streamedToolCallsAreTheAnswers() {
        FakeOpenAiServer server;
        k3::RemoteOptions o;
        o.baseUrl = server.url();
        o.model = "k3-tools";
        const k3::GenerateResult r =
            k3::openRemoteBackend(o)->chat(hello().messages, {}, nullptr, nullptr);
        const std::vector<k3::ChatToolCall> expected = {
            {"call_a", "get_weather", R"({"city":"Oslo"})"}, {"call_b", "clock", "{}"}};
        QVERIFY(r.reply.toolCalls == expected);
        QCOMPARE(r.reply.reasoningContent, std::string("Need the weather."));
        QCOMPARE(r.reply.content, std::string());
        QVERIFY(r.endOfTurn);
        QCOMPARE(r.problems, std::vector<std::string>());
        QCOMPARE(r.tokenCount(), 9);
        const auto saved = k3::parseTranscript(k3::formatTranscript({r.reply}), "t.jsonl");
        QVERIFY(saved[0].toolCalls == expected);
    }

    void baseUrlFormsMeanTheSameServer() {
        FakeOpenAiServer server;
        for (const std::string& url :
             {root(server), root(server) + "/", root(server) + "/v1", root(server) + "/v1/"}) {
            const k3::RemoteClient c = client(url, "k3-think");
            QCOMPARE(c.serverUrl(), root(server));
            QCOMPARE(c.chat(hello()).content, std::string("Hello, wörld!"));
        }
        QCOMPARE(errorOf([] { client("localhost:8000", "m"); }).first,
                 std::string("the server URL \"localhost:8000\" must start with http:// or "
                             "https:// (for example http://127.0.0.1:8000/v1)"));
        QCOMPARE(errorOf([&] { client(server.url(), ""); }).first,
                 "no model name for the server at " + root(server) +
                     " (the \"model\" of each request; Test lists the server's models)");
    }

    void listsModels() {
        FakeOpenAiServer server("sk-test-123");
        const std::vector<std::string> ids =
            client(server.url(), "k3-think", "sk-test-123").listModels();
        QCOMPARE(ids, (std::vector<std::string>{"k3-think", "k3-slow", "k3-cut", "k3-batch",
                                                "k3-batch-usage"}));
    }

    void refusedConnectionNamesHostAndPort() {
        int port = 0;
        {
            FakeOpenAiServer gone;
            port = gone.port();
        } // closed: nothing listens there now
        const std::string url = "http://127.0.0.1:" + std::to_string(port);
        const auto [message, kind] = errorOf([&] { client(url, "k3-think").chat(hello()); });
        QCOMPARE(message, "could not connect to 127.0.0.1:" + std::to_string(port) +
                              ": connection refused; check that the server is running and "
                              "the URL " +
                              url + " is right");
        QVERIFY(kind == k3::RemoteErrorKind::Connection);
        QCOMPARE(errorOf([&] { client(url, "k3-think").listModels(); }).first, message);
    }

    void tlsToAPlainServerIsATlsError() {
        FakeOpenAiServer server;
        const std::string url = "https://127.0.0.1:" + std::to_string(server.port());
        const auto [message, kind] = errorOf([&] { client(url, "k3-think").chat(hello()); });
        QVERIFY(kind == k3::RemoteErrorKind::Tls);
        const std::string head =
            "the TLS connection to 127.0.0.1:" + std::to_string(server.port()) + " failed: ";
        const std::string tail = "; check the server's certificate, or use http:// if the "
                                 "server does not speak TLS";
        QVERIFY2(message.rfind(head, 0) == 0, message.c_str());
        QVERIFY2(message.size() > head.size() + tail.size() &&
                     message.compare(message.size() - tail.size(), tail.size(), tail) == 0,
                 message.c_str());
    }

    void wrongKeyIs401AndTheKeyIsNeverShown() {
        FakeOpenAiServer server("sk-test-123");
        const std::string wrong = "sk-WRONG-secret-987";
        const std::string expected = "the server at " + root(server) +
                                     " answered 401 Unauthorized: Invalid API key; check the "
                                     "API key";
        const auto [message, kind] =
            errorOf([&] { client(server.url(), "k3-think", wrong).chat(hello()); });
        QCOMPARE(message, expected);
        QVERIFY(kind == k3::RemoteErrorKind::Unauthorized);
        QCOMPARE(errorOf([&] { client(server.url(), "k3-think", wrong).listModels(); }).first,
                 expected);
        QCOMPARE(errorOf([&] { client(server.url(), "k3-think").chat(hello()); }).first,
                 expected); // no key at all
        QCOMPARE(server.lastAuthorization(), std::string());
    }

    void unknownModelIs404NamingTheModel() {
        FakeOpenAiServer server;
        const auto [message, kind] =
            errorOf([&] { client(server.url(), "kimi-k9").chat(hello()); });
        QCOMPARE(message, "the server at " + root(server) +
                              " answered 404 Not Found for /v1/chat/completions: The model "
                              "`kimi-k9` does not exist.; check the URL and the model name "
                              "\"kimi-k9\"");
        QVERIFY(kind == k3::RemoteErrorKind::NotFound);
        // A wrong path (no /v1 routes there) says the same about the URL.
        const auto wrongPath =
            errorOf([&] { client(root(server) + "/api", "k3-think").listModels(); });
        QCOMPARE(wrongPath.first, "the server at " + root(server) +
                                      "/api answered 404 Not Found for /v1/models; check the "
                                      "URL");
    }

    void busyAndFailingServersSayWhatTheServerSaid() {
        FakeOpenAiServer server;
        const auto busy = errorOf([&] { client(server.url(), "k3-busy").chat(hello()); });
        QCOMPARE(busy.first, "the server at " + root(server) +
                                 " answered 429 Too Many Requests: Too many requests in the "
                                 "queue (8 waiting); it is busy, try again in a moment");
        QVERIFY(busy.second == k3::RemoteErrorKind::RateLimited);
        const auto broken = errorOf([&] { client(server.url(), "k3-broken").chat(hello()); });
        QCOMPARE(broken.first, "the server at " + root(server) +
                                   " answered 500 Internal Server Error: CUDA error: out of "
                                   "memory");
        QVERIFY(broken.second == k3::RemoteErrorKind::Server);
    }

    void streamCutBeforeDoneKeepsThePartialAnswer() {
        FakeOpenAiServer server;
        try {
            client(server.url(), "k3-cut").chat(hello());
            QFAIL("a cut stream must not look complete");
        } catch (const k3::RemoteStreamError& e) {
            QCOMPARE(std::string(e.what()),
                     "the server at " + root(server) +
                         " closed the stream early, after 3 deltas (no finish_reason or "
                         "[DONE]); the partial answer is kept");
            QVERIFY(e.remoteKind() == k3::RemoteErrorKind::EarlyClose);
            QCOMPARE(e.partial().reasoning, std::string("Thinking"));
            QCOMPARE(e.partial().content, std::string("Partial answer"));
            QCOMPARE(e.partial().finishReason, std::string());
        }
    }

    // Cancelled once "3 " has arrived (on the event, not after a guessed delay): the stream
    // ends with what came, and the server sees the client close it.
    void cancelClosesTheStream() {
        FakeOpenAiServer server;
        std::atomic<bool> cancel{false};
        int deltasAtCancel = -1;
        const k3::RemoteReply reply = client(server.url(), "k3-slow")
                                          .chat(
                                              hello(),
                                              [&](const k3::RemoteDelta& d) {
                                                  if (d.content != "3 " || cancel.load()) return;
                                                  deltasAtCancel = d.index + 1;
                                                  cancel.store(true);
                                              },
                                              &cancel);
        QVERIFY(reply.cancelled);
        QCOMPARE(deltasAtCancel, 5); // two of reasoning, then "1 ", "2 ", "3 "
        QCOMPARE(reply.reasoning, std::string("Counting slowly."));
        // 50 ms a delta: the few in flight when the flag was seen, nowhere near all 200.
        QVERIFY2(reply.content.rfind("1 2 3 ", 0) == 0, reply.content.c_str());
        QVERIFY(reply.deltas >= deltasAtCancel);
        QVERIFY(reply.deltas < 40);
        QCOMPARE(reply.finishReason, std::string());
        // The server sees the closed connection at its next write (a hang guard only).
        QTRY_COMPARE_WITH_TIMEOUT(server.streamsClosedByClient(), 1, 10000);
    }

    // Issue 35 item 11: a server that streams deltas forever used to grow the client
    // without end. An answer may have 4 text deltas per asked token; the next closes the
    // stream, the text so far is kept and the message says why.
    void endlessStreamIsClosedAtTheAskedTokens() {
        FakeOpenAiServer server;
        try {
            client(server.url(), "k3-endless").chat(hello()); // max_tokens 64
            QFAIL("an endless stream must not look complete");
        } catch (const k3::RemoteStreamError& e) {
            QCOMPARE(std::string(e.what()),
                     "the server at " + root(server) +
                         " sent more than 256 text deltas for an answer of at most 64 tokens "
                         "(max_tokens); closed the stream, the partial answer is kept");
            QVERIFY(e.remoteKind() == k3::RemoteErrorKind::Protocol);
            QCOMPARE(e.partial().deltas, 257);
            std::string expected = "again";
            for (int i = 1; i < 257; ++i) expected += " and again";
            QCOMPARE(e.partial().content, expected);
        }
        // The server sees the closed connection at its next write (a hang guard only).
        QTRY_COMPARE_WITH_TIMEOUT(server.streamsClosedByClient(), 1, 10000);

        // The app's remote backend: the same stop, as the answer's interruption.
        k3::RemoteOptions o;
        o.baseUrl = server.url();
        o.model = "k3-endless";
        k3::GenerateOptions options;
        options.maxTokens = 8;
        const k3::GenerateResult r =
            k3::openRemoteBackend(o)->chat(hello().messages, options, nullptr, nullptr);
        QCOMPARE(r.interruption, "the server at " + root(server) +
                                     " sent more than 32 text deltas for an answer of at most 8 "
                                     "tokens (max_tokens); closed the stream, the partial answer "
                                     "is kept");
        QCOMPARE(r.remoteTokens, 33);
        QVERIFY(!r.endOfTurn);
    }

    // The byte cap: 1 KB a asked token (and 64 KB) with max_tokens, 64 MB without.
    void endlessBytesAreCapped() {
        FakeOpenAiServer server;
        k3::RemoteRequest request = hello();
        request.maxTokens = 16;
        auto limited = errorOf([&] { client(server.url(), "k3-endless-big").chat(request); });
        QCOMPARE(limited.first, std::string("the server at ") + root(server) +
                                    " sent more than 81920 bytes of answer text for at most 16 "
                                    "tokens (max_tokens); closed the stream, the partial answer "
                                    "is kept");
        request.maxTokens = 0; // the server's default
        try {
            client(server.url(), "k3-endless-big").chat(request);
            QFAIL("an endless stream must not look complete");
        } catch (const k3::RemoteStreamError& e) {
            QCOMPARE(std::string(e.what()),
                     "the server at " + root(server) +
                         " sent more than 67108864 bytes of answer text; closed the stream, the "
                         "partial answer is kept");
            QCOMPARE(e.partial().deltas, 65);
            QCOMPARE(e.partial().content.size(), std::size_t(65) << 20);
        }
    }

    // Issue 35 item 21: user:password@ in the URL never reaches a message.
    void credentialsInTheUrlAreNeverShown() {
        FakeOpenAiServer server;
        const std::string url =
            "http://bob:s3cret@127.0.0.1:" + std::to_string(server.port()) + "/v1";
        const auto missing = errorOf([&] { client(url, "k3-nope").chat(hello()); });
        QCOMPARE(missing.first, "the server at " + root(server) +
                                    " answered 404 Not Found for /v1/chat/completions: The model "
                                    "`k3-nope` does not exist.; check the URL and the model name "
                                    "\"k3-nope\"");
        const auto cut = errorOf([&] { client(url, "k3-cut").chat(hello()); });
        QVERIFY2(cut.first.find("s3cret") == std::string::npos, cut.first.c_str());
        const auto scheme = errorOf([&] { client("ftp://bob:s3cret@h/v1", "m"); });
        QCOMPARE(scheme.first,
                 std::string("the server URL \"ftp://h/v1\" must start with http:// or "
                             "https:// (for example http://127.0.0.1:8000/v1)"));
    }

    void remoteBackendReportsDeltasAsTokens() {
        FakeOpenAiServer server;
        k3::RemoteOptions o;
        o.baseUrl = server.url();
        o.model = "k3-think";
        const auto backend = k3::openRemoteBackend(o);
        const k3::BackendInfo info = backend->info();
        QVERIFY(info.remote);
        QCOMPARE(info.summary, "remote: " + root(server));
        QCOMPARE(info.modelName, std::string("k3-think"));
        QVERIFY(!backend->memoryReport());
        Collector observer;
        k3::GenerateOptions options;
        options.maxTokens = 32;
        options.render.thinking = true;
        options.render.thinkingEffort = "high";
        const k3::GenerateResult r = backend->chat(hello().messages, options, &observer, nullptr);
        QCOMPARE(r.reply.content, std::string("Hello, wörld!"));
        QCOMPARE(r.reply.reasoningContent, std::string("The user greets; answer briefly. Done."));
        QCOMPARE(r.reply.model, std::string("k3-think"));
        QCOMPARE(r.tokenCount(), 6);
        QCOMPARE(r.promptTokens, 12);
        QVERIFY(r.endOfTurn);
        QCOMPARE(r.interruption, std::string());
        QCOMPARE(int(observer.events.size()), 6);
        QCOMPARE(observer.events[2].thinkingDelta, std::string(" Done."));
        QCOMPARE(observer.events[3].responseDelta, std::string("Hello"));
        const auto body = nlohmann::json::parse(server.lastBody());
        QCOMPARE(body["thinking"]["type"].get<std::string>(), std::string("enabled"));
        QCOMPARE(body["chat_template_kwargs"]["thinking"].get<bool>(), true);
        QCOMPARE(body["reasoning_effort"].get<std::string>(), std::string("high"));
        QCOMPARE(body["temperature"].get<double>(), 0.0);
        QVERIFY(!body.contains("seed")); // greedy: no sampling fields

        o.model = "k3-cut";
        Collector cutObserver;
        const k3::GenerateResult cut =
            k3::openRemoteBackend(o)->chat(hello().messages, options, &cutObserver, nullptr);
        QCOMPARE(cut.reply.content, std::string("Partial answer"));
        QCOMPARE(cut.interruption, "the server at " + root(server) +
                                       " closed the stream early, after 3 deltas (no "
                                       "finish_reason or [DONE]); the partial answer is kept");
        QCOMPARE(int(cutObserver.events.size()), 3);
    }

    // A server that batches tokens: the tokens of each delta when it counts them per chunk
    // (a running usage on every chunk), else 0 (unknown) and the total from the end usage.
    void batchedDeltasSayHowManyTokensTheyCarry() {
        FakeOpenAiServer server;
        k3::RemoteOptions o;
        o.baseUrl = server.url();
        o.model = "k3-batch-usage";
        Collector counted;
        const k3::GenerateResult r =
            k3::openRemoteBackend(o)->chat(hello().messages, {}, &counted, nullptr);
        QCOMPARE(r.reply.content, std::string("one two three four five six seven eight nine ten"));
        QCOMPARE(r.tokenCount(), 10);
        QCOMPARE(int(counted.events.size()), 4);
        const int expected[] = {2, 3, 1, 4};
        for (int i = 0; i < 4; ++i) {
            QCOMPARE(counted.events[std::size_t(i)].index, i);
            QCOMPARE(counted.events[std::size_t(i)].tokens, expected[i]);
        }
        o.model = "k3-batch";
        Collector unknown;
        const k3::GenerateResult u =
            k3::openRemoteBackend(o)->chat(hello().messages, {}, &unknown, nullptr);
        QCOMPARE(u.tokenCount(), 11);
        QCOMPARE(int(unknown.events.size()), 4);
        for (const k3::TokenEvent& e : unknown.events) QCOMPARE(e.tokens, 0);
    }

    void transcriptsRecordTheModelAndReadOldFiles() {
        k3::ChatMessage answer{k3::ChatRole::Assistant, "Hi", "", {}, {}};
        answer.model = "k3-think";
        const std::vector<k3::ChatMessage> messages = {{k3::ChatRole::User, "Hi", {}, {}, {}},
                                                       answer};
        const std::string text = k3::formatTranscript(messages);
        QCOMPARE(
            text,
            std::string(
                R"({"role":"user","content":"Hi"})"
                "\n"
                R"({"role":"assistant","content":"Hi","reasoning_content":"","model":"k3-think"})"
                "\n"));
        QCOMPARE(k3::parseTranscript(text), messages);
        // Written before the field existed: read as "not recorded".
        const auto old =
            k3::parseTranscript(R"({"role":"assistant","content":"Hi","reasoning_content":""})");
        QCOMPARE(old.at(0).model, std::string());
        try {
            k3::parseTranscript(R"({"role":"user","content":"Hi","model":"x"})", "t.jsonl");
            QFAIL("model on a user line must be refused");
        } catch (const k3::ChatError& e) {
            QVERIFY2(std::string(e.what()).find(
                         "field \"model\" is only allowed on assistant messages, not user") !=
                         std::string::npos,
                     e.what());
        }
    }
};

QTEST_GUILESS_MAIN(TestRemoteClient)
#include "tst_remote_client.moc"
