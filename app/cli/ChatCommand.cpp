// `k3 MODEL_DIR --chat`: a REPL over Session::chat in the official XTML format, with a
// JSONL transcript (--history) that is re-rendered and re-prefilled on restart.
#include "ChatLoop.hpp"
#include "CliSupport.hpp"
#include "Commands.hpp"
#include "SessionLoader.hpp"

#include <k3/backend.hpp>
#include <k3/chat.hpp>
#include <k3/constraint.hpp>
#include <k3/read_file.hpp>
#include <k3/session.hpp>
#include <k3/vision.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <random>
#include <string>

namespace k3cli {

namespace {

constexpr const char* kDim = "\033[2m";
constexpr const char* kPlain = "\033[0m";

const char* kHelp = "commands:\n"
                    "  /help   this list\n"
                    "  /reset  start a new conversation (keeps --system; rewrites --history)\n"
                    "  /exit   leave (so does Ctrl-D, or Ctrl-C twice at the prompt)\n"
                    "Ctrl-C while the model answers stops the answer; the conversation stays.\n";

// Streams the two channels: the think channel dimmed on a terminal, between <think> and
// </think> lines otherwise, then the answer.
class ChatPrinter : public k3::SessionObserver {
public:
    explicit ChatPrinter(bool tty) : tty_(tty), progress_(stderrIsTty()) {}

    void onProgress(const k3::SessionProgress& p) override {
        if (!progress_ || !progressDue(p.done == p.total)) return;
        std::fprintf(stderr, "\r%s %lld/%lld", p.stage.c_str(), (long long)p.done,
                     (long long)p.total);
        if (p.done == p.total) std::fprintf(stderr, "\r\033[2K");
        std::fflush(stderr);
    }

    void onToken(const k3::TokenEvent& ev) override {
        if (!ev.thinkingDelta.empty()) {
            if (!inThink_) {
                std::fputs(tty_ ? kDim : "<think>\n", stdout);
                inThink_ = true;
            }
            std::fputs(shown(ev.thinkingDelta).c_str(), stdout);
        }
        if (!ev.responseDelta.empty()) {
            closeThink();
            std::fputs(shown(ev.responseDelta).c_str(), stdout);
            answered_ = true;
        }
        std::fflush(stdout);
    }

    // Ends the answer; then each tool call the answer makes, one line each:
    // "[tool call] get_weather({"city":"Oslo"})" (the arguments as the JSON text they are).
    void finish(const std::vector<k3::ChatToolCall>& calls = {}) {
        closeThink();
        if (answered_ || calls.empty()) std::fputs("\n", stdout);
        for (const k3::ChatToolCall& call : calls)
            std::fputs(
                ("[tool call] " + shown(call.name) + "(" + shown(call.arguments) + ")\n").c_str(),
                stdout);
        std::fflush(stdout);
    }

private:
    std::string shown(const std::string& text) const { return tty_ ? terminalSafe(text) : text; }

    void closeThink() {
        if (!inThink_) return;
        std::fputs(tty_ ? kPlain : "\n</think>", stdout);
        std::fputs("\n", stdout);
        inThink_ = false;
    }

    bool tty_;
    bool progress_;
    bool inThink_ = false;
    bool answered_ = false; // answer text was printed
};

std::vector<k3::ChatMessage> initialHistory(const ChatArgs& args) {
    std::vector<k3::ChatMessage> history;
    if (args.system) history.push_back({k3::ChatRole::System, *args.system, {}, {}, {}});
    return history;
}

// False when the save failed (warned; the conversation goes on).
bool saveHistory(const ChatArgs& args, const std::vector<k3::ChatMessage>& history) {
    if (args.history.empty()) return true;
    try {
        k3::writeTranscript(args.history, history);
        return true;
    } catch (const std::exception& error) {
        printWarning(std::string("the transcript was not saved: ") + error.what());
        return false;
    }
}

// The transcript on disk, checked against --system. Refusals are usage errors (exit 2).
std::vector<k3::ChatMessage> loadHistory(const ChatArgs& args) {
    std::error_code ec;
    if (args.history.empty() || !std::filesystem::exists(args.history, ec))
        return initialHistory(args);
    std::vector<k3::ChatMessage> history;
    try {
        history = k3::readTranscript(args.history);
    } catch (const std::exception& error) {
        throw usageError(std::string("--history: ") + error.what());
    }
    if (args.system) {
        const bool matches = !history.empty() && history.front().role == k3::ChatRole::System &&
                             history.front().content == *args.system;
        if (history.empty())
            history = initialHistory(args);
        else if (!matches)
            throw usageError("--system does not match the first (system) message of " +
                             args.history +
                             "; drop --system to continue that conversation, or use another "
                             "--history file");
    }
    return history;
}

// The transcript's images (files relative to its folder, as the app and `k3 --chat` keep
// them) decoded and prepared, so its messages render and the session reads their rows;
// returns them in prompt order. A missing or broken image is a usage error naming it.
std::vector<k3::PreparedImage> prepareHistoryImages(const ChatArgs& args,
                                                    std::vector<k3::ChatMessage>& history) {
    std::vector<k3::PreparedImage> images;
    const std::filesystem::path folder = std::filesystem::path(args.history).parent_path();
    for (k3::ChatMessage& m : history) {
        for (k3::ChatImage& image : m.images) {
            if (!image.image) {
                const std::filesystem::path file = folder / image.file;
                try {
                    image.image = std::make_shared<const k3::PreparedImage>(
                        k3::prepareImage(k3::readImageFile(file), args.imagePatchLimit));
                } catch (const k3::Error& error) {
                    throw usageError("--history " + args.history + ": image \"" + image.file +
                                     "\": " + error.what());
                }
            }
            images.push_back(*image.image);
        }
    }
    return images;
}

std::size_t assistantTurns(const std::vector<k3::ChatMessage>& history) {
    std::size_t n = 0;
    for (const auto& m : history) n += m.role == k3::ChatRole::Assistant;
    return n;
}

} // namespace

// SplitMix64 of the seed and the turn.
std::uint64_t turnSeed(std::uint64_t seed, std::size_t turn) {
    std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (turn + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void lockHistory(const ChatArgs& args, std::optional<k3::OutputLock>& historyLock) {
    // --history is checked and locked before anything is read: a folder, device or FIFO
    // is refused (it would chat and save nothing), and a second session on the same file
    // is told so instead of silently overwriting this one's turns.
    if (!args.history.empty()) {
        try {
            k3::resolveOutputFile(args.history);
        } catch (const k3::ChatError& error) {
            throw usageError(std::string("--history: ") + error.what());
        }
        try {
            historyLock.emplace(args.history);
        } catch (const k3::ChatError& error) {
            throw CommandError{kExitFailure, std::string("--history: ") + error.what()};
        }
    }
}

std::vector<k3::ChatMessage> loadChatHistory(const ChatArgs& args) {
    return loadHistory(args);
}

k3::GenerateOptions chatOptions(const ChatArgs& args, std::uint64_t& seed) {
    const ResolvedSampling sampling = resolveSampling(args.model.sampling);
    seed = sampling.seed;
    if (sampling.sampling && !sampling.seedGiven) seed = std::random_device{}();
    k3::GenerateOptions options;
    options.render.thinking = !args.noThink;
    options.render.thinkingEffort = args.thinkingEffort;
    options.maxTokens = args.maxTokens;
    options.speculation = args.model.speculation;
    options.sampling.temperature = sampling.sampling ? sampling.temperature : 0.0f;
    options.sampling.topP = sampling.sampling ? sampling.topP : 1.0f;
    return options;
}

// A schema file larger than this is no schema (k3 serve's bodies are 4 MB at most).
constexpr std::uint64_t kMaxSchemaBytes = 4ull << 20;

// --json / --json-schema FILE: the answer is held to JSON (any object, or the schema's),
// and the prompt says so as the template's response-format message does.
void constrainAnswers(const ChatArgs& args, const k3::Tokenizer& tokenizer,
                      k3::GenerateOptions& options) {
    if (!args.json && args.jsonSchema.empty()) return;
    k3::JsonGrammar grammar = k3::JsonGrammar::anyObject();
    options.render.responseFormat = "json_object";
    if (!args.jsonSchema.empty()) {
        std::string text;
        try {
            text = k3::readRegularFile(args.jsonSchema, kMaxSchemaBytes, "--json-schema");
            grammar = k3::JsonGrammar::fromSchema(text);
        } catch (const k3::FileReadError& error) {
            throw usageError(error.what());
        } catch (const k3::SchemaError& error) {
            throw usageError("--json-schema " + args.jsonSchema + ": " + error.what());
        }
        options.render.responseFormat = "json_schema";
        options.render.responseSchemaJson = text;
    }
    options.constraint = k3::OutputConstraint::jsonAnswer(grammar, tokenizer);
}

int runChat(const ChatArgs& args) {
    std::optional<k3::OutputLock> historyLock;
    lockHistory(args, historyLock);
    std::vector<k3::ChatMessage> history = loadHistory(args);
    const std::vector<k3::PreparedImage> historyImages = prepareHistoryImages(args, history);
    // The conversation's states go beside its transcript, so resuming it restores what
    // was read instead of reading it again (a prefix cache: a state of another model or
    // another transcript is never used).
    ModelArgs modelArgs = args.model;
    if (!args.history.empty() && modelArgs.stateCacheDir.empty())
        modelArgs.stateCacheDir = args.history + ".states";
    LoadedSession loaded = openModel(modelArgs, TokenizerNeed::Required);
    k3::Session& session = loaded.session;
    const bool tty = stdoutIsTty();
    std::uint64_t seed = 0;
    k3::GenerateOptions options = chatOptions(args, seed);
    constrainAnswers(args, session.tokenizer(), options);
    const ResolvedSampling sampling = resolveSampling(args.model.sampling);

    installInterruptHandler(false); // before the banner: from then on Ctrl-C is ours
    int seen = interruptCount();    // presses dealt with (those that stopped an answer)
    std::fprintf(stderr, "k3 chat: %s (%d layers, %s), %s%s. /help for commands.\n",
                 terminalSafe(args.model.modelDir).c_str(), session.model().layersBound(),
                 formatDuration(loaded.loadSeconds).c_str(),
                 args.noThink ? "thinking off" : ("thinking " + args.thinkingEffort).c_str(),
                 sampling.sampling ? ", sampling" : ", greedy");

    // A resumed conversation is prefilled now, so the first turn only adds its tail.
    const bool resumed = history.size() > (args.system ? 1u : 0u);
    if (!history.empty()) {
        k3::ChatRenderOptions render = options.render;
        render.addGenerationPrompt = false;
        try {
            const std::vector<k3::TokenId> ids = k3::encodeChatSegments(
                session.tokenizer(), k3::renderChatSegments(history, render));
            k3::GenerateOptions prefillOnly;
            prefillOnly.maxTokens = 0;
            prefillOnly.images = historyImages;
            ChatPrinter progress(tty);
            const k3::GenerateResult r =
                session.generateIds(ids, prefillOnly, &progress, &cancelFlag());
            if (resumed)
                std::fprintf(stderr,
                             "[resumed %zu messages from %s: %d positions, %d restored from "
                             "its saved state, %d read in %s]\n",
                             history.size(), terminalSafe(args.history).c_str(),
                             session.positions(), r.restoredPositions, r.prefillPositions,
                             formatDuration(r.prefillSeconds).c_str());
            if (r.cancelled) session.reset();
        } catch (const k3::ChatError& error) {
            throw usageError("--history " + args.history + ": " + error.what());
        } catch (const std::exception& error) {
            throw CommandError{kExitFailure,
                               std::string("the forward pass failed: ") + error.what()};
        }
    }
    const std::unique_ptr<k3::ChatBackend> backend =
        k3::wrapSession(std::move(loaded.session), args.model.modelDir);
    return chatLoop(args, *backend, history, options, seed, seen);
}

namespace {

// What the chat loop keeps from one turn to the next.
struct ChatLoopState {
    int seen = 0;             // Ctrl-C presses dealt with (those that stopped an answer)
    int promptInterrupts = 0; // consecutive Ctrl-C at the prompt
    bool unsaved = false;     // the last save failed: the file lacks the latest turns
    int exitCode = kExitOk;
};

enum class LineAction { Leave, Next, Send };

// One line from the user: a message to send, or a command handled here.
LineAction readUserLine(const ChatArgs& args, k3::ChatBackend& backend,
                        std::vector<k3::ChatMessage>& history, ChatLoopState& state,
                        std::string& line) {
    if (stdinIsTty()) {
        std::fputs("> ", stdout);
        std::fflush(stdout);
    }
    const PromptInput input = readPromptLine(line, state.seen);
    if (input == PromptInput::Interrupted) { // Ctrl-C at the prompt, or just before it showed
        state.seen = interruptCount();
        if (++state.promptInterrupts >= 2) {
            std::fputs("\n", stderr);
            return LineAction::Leave;
        }
        std::fputs("\n(Ctrl-C again or /exit to leave)\n", stderr);
        return LineAction::Next;
    }
    if (input == PromptInput::End) return LineAction::Leave;
    state.promptInterrupts = 0;
    clearCancel();
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) return LineAction::Next;
    if (line == "/exit" || line == "/quit") return LineAction::Leave;
    if (line == "/help") {
        std::fputs(kHelp, stdout);
        std::fflush(stdout);
        return LineAction::Next;
    }
    if (line == "/reset") {
        backend.forgetSavedStates(history); // the old conversation leaves no state
        history = initialHistory(args);
        backend.reset();
        state.unsaved = !saveHistory(args, history);
        std::fprintf(stderr, "[conversation reset]\n");
        return LineAction::Next;
    }
    if (line.front() == '/' && line.find(' ') == std::string::npos) {
        printNote("unknown command " + line + "; /help lists the commands");
        return LineAction::Next;
    }
    return LineAction::Send;
}

// The answer to the user message at the end of history, printed as it comes; nothing
// when the message was dropped (said why; history is as before the message).
std::optional<k3::GenerateResult> answer(const ChatArgs& args, k3::ChatBackend& backend,
                                         std::vector<k3::ChatMessage>& history,
                                         const k3::GenerateOptions& options, ChatLoopState& state) {
    ChatPrinter printer(stdoutIsTty());
    k3::GenerateResult r;
    try {
        r = backend.chat(history, options, &printer, &cancelFlag());
    } catch (const k3::ChatError& error) {
        history.pop_back();
        printError(error.what());
        return std::nullopt;
    } catch (const k3::ContextFull& error) { // nothing computed: the message is dropped
        history.pop_back();
        printError(std::string(error.what()) + " (--context " + std::to_string(error.context()) +
                   "; /reset starts a new conversation)");
        return std::nullopt;
    } catch (const k3::RemoteError& error) {
        // A server can be busy or briefly away: say so and keep the conversation; the
        // session still ends with a failure code.
        history.pop_back();
        printError(std::string("the server failed: ") + error.what());
        if (state.exitCode == kExitOk) state.exitCode = kExitFailure;
        return std::nullopt;
    } catch (const std::exception& error) {
        history.pop_back();
        saveHistory(args, history);
        throw CommandError{kExitFailure, std::string("the forward pass failed: ") + error.what()};
    }
    // The calls stay in the reply (history), so the next turn sends them back.
    printer.finish(r.reply.toolCalls);
    state.seen = interruptCount(); // a press during the answer stopped it, not a prompt press
    if (r.cancelled && r.tokenCount() == 0) {
        history.pop_back(); // stopped before any answer: as if never sent
        std::fprintf(stderr, "[stopped before the answer began; message dropped]\n");
        return std::nullopt;
    }
    return r;
}

// The answer joins the conversation (saved) and its summary line, problems and
// validity are said.
void recordAnswer(const ChatArgs& args, const k3::ChatBackend& backend,
                  std::vector<k3::ChatMessage>& history, const k3::GenerateResult& r,
                  ChatLoopState& state) {
    k3::ChatMessage reply = r.reply;
    if (!r.valid()) // saved marked, so a resumed conversation still says it
        reply.invalid = r.nonFinite ? "a NaN or Inf reached the logits"
                                    : std::to_string(r.droppedExperts) +
                                          " routed expert(s) could not be loaded";
    history.push_back(std::move(reply));
    state.unsaved = !saveHistory(args, history);
    const char* how = r.cancelled               ? "stopped"
                      : !r.interruption.empty() ? "interrupted"
                      : r.endOfTurn             ? "end of turn"
                                                : "token limit";
    if (backend.info().remote)
        std::fprintf(stderr, "[%s: prompt %d tokens, %d tokens in %s, %s]\n",
                     terminalSafe(r.model).c_str(), r.promptTokens, r.tokenCount(),
                     formatDuration(r.prefillSeconds + r.decodeSeconds).c_str(), how);
    else
        std::fprintf(stderr, "[reused %d of %d positions, %d tokens in %s, %s]\n",
                     r.reusedPositions, r.promptTokens, r.tokenCount(),
                     formatDuration(r.prefillSeconds + r.decodeSeconds).c_str(), how);
    // The partial answer stays in the conversation; the reason is said once, and the
    // session does not end as a success: an answer arrived cut.
    if (!r.interruption.empty()) {
        printError(r.interruption);
        if (state.exitCode == kExitOk) state.exitCode = kExitFailure;
    }
    // A few are enough to tell malformed output; a random model makes hundreds.
    for (std::size_t i = 0; i < r.problems.size() && i < 3; ++i)
        printNote("[model output: " + r.problems[i] + "]");
    if (r.problems.size() > 3)
        std::fprintf(stderr, "[model output: %zu more problems]\n", r.problems.size() - 3);
    if (!r.valid()) {
        printError("RUN INVALID: " + history.back().invalid + "; this answer is not the model's");
        state.exitCode = kExitInvalid;
    }
}

} // namespace

int chatLoop(const ChatArgs& args, k3::ChatBackend& backend, std::vector<k3::ChatMessage>& history,
             k3::GenerateOptions options, std::uint64_t seed, int seen) {
    ChatLoopState state;
    state.seen = seen;
    for (;;) {
        clearCancel();
        std::string line;
        const LineAction action = readUserLine(args, backend, history, state, line);
        if (action == LineAction::Leave) break;
        if (action == LineAction::Next) continue;
        history.push_back({k3::ChatRole::User, k3::sanitizeUtf8(line), {}, {}, {}});
        options.sampling.seed = turnSeed(seed, assistantTurns(history));
        if (const auto r = answer(args, backend, history, options, state))
            recordAnswer(args, backend, history, *r, state);
    }
    // The session may go on after a failed save, but it does not end as a success: the
    // history file is not the conversation.
    if (state.unsaved) {
        printError("--history " + args.history +
                   ": the last save failed (see the warning above), so the file does not hold "
                   "the whole conversation");
        if (state.exitCode == kExitOk) state.exitCode = kExitFailure;
    }
    return state.exitCode;
}

} // namespace k3cli
