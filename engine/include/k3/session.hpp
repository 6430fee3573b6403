#pragma once
// The one seam between a front end (the k3 CLI, the desktop app) and the engine: a
// loaded model with its tokenizer, a conversation's state, and generation that reports
// each token to an observer. Sessions are used from one thread at a time; cancel is
// the only thing another thread touches.

#include "k3/chat.hpp"
#include "k3/constraint.hpp"
#include "k3/launch.hpp"
#include "k3/model.hpp"
#include "k3/state_cache.hpp"
#include "k3/tokenizer.hpp"
#include "k3/vision.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace k3 {

// A conversation longer than the context the plan holds (its KV cache): the numbers and
// what to change are in the message; front ends add their own flag or setting.
class ContextFull : public ModelError {
public:
    ContextFull(int tokens, int context)
        : ModelError("the conversation is " + std::to_string(tokens) +
                         " tokens and the context holds " + std::to_string(context) +
                         " positions (the KV cache the memory plan sized); start a new "
                         "conversation or raise the context length",
                     ErrorKind::ContextFull),
          tokens_(tokens), context_(context) {}
    int tokens() const { return tokens_; }
    int context() const { return context_; }

private:
    int tokens_, context_;
};

// A saved conversation state that cannot be used here: another model (config or shard
// headers), other layers, another engine numeric version, more positions than the
// context, a checksum that fails, a truncated file. The message names the file and the
// mismatch; the session is left as it was, so the front end can read the prompt instead.
class StateError : public Error {
public:
    explicit StateError(const std::string& message) : Error(ErrorKind::State, message) {}
};

// The run report's memory figures: the plan (a forecast), what the trunk and the expert
// cache did (the model's MemoryStats), and the measured peak RSS (the figure to quote).
// The vision tower in memory (issue 33): what the plan's rule (MemoryPlan::visionResident)
// did so far. Transient, heldBytes is 0 between prompts and peakBytes the plan's visionBytes.
struct VisionMemory {
    std::uint64_t heldBytes = 0; // its weights now (0: never loaded, or released)
    std::uint64_t peakBytes = 0; // the most it held at once
    int loads = 0;               // times read from the checkpoint
    int releases = 0;            // times dropped once an image prompt's rows were computed
};

struct MemoryReport : MemoryStats {
    MemoryPlan plan;
    VisionMemory vision;
    std::uint64_t peakRssBytes = 0;   // k3::peakResidentBytes (k3/process_memory.hpp)
    std::uint64_t draftBytes = 0;     // the draft's weights and state in memory (0: no draft)
    std::uint64_t draftFileBytes = 0; // its model.safetensors on disk
    double wallSeconds = 0;           // generation wall clock so far
    double ioShare() const;           // (trunk wait + expert reads) / wall clock
    // "cache ...", "trunk ...", "PEAK RSS ..." lines as the CLI prints them.
    std::string format() const;
};

struct SamplingOptions {
    float temperature = 0.0f; // 0: greedy
    float topP = 1.0f;
    std::uint64_t seed = 0;
};

// Where the time of one token went. I/O parts stay 0 while weights are all resident.
struct TokenTiming {
    double computeSeconds = 0;
    double trunkIoSeconds = 0;
    double expertIoSeconds = 0;
    double totalSeconds() const { return computeSeconds + trunkIoSeconds + expertIoSeconds; }
};

// A committed token's log-probability and the most likely alternatives at its position:
// log-softmax of the logits the sampler was given (after logit_bias and the penalties,
// before temperature and top-p), computed in double and reported as float. With
// speculation, the verified position's logits. `top` is most likely first (equal
// log-probabilities: the lower id first).
struct TokenLogprobs {
    float logprob = 0;
    std::vector<std::pair<TokenId, float>> top;
};

// The log-probabilities of `chosen` and the `top` most likely ids under `logits`.
TokenLogprobs tokenLogprobs(std::span<const float> logits, TokenId chosen, int top);

struct TokenEvent {
    TokenId id = 0;
    int index = 0;             // 0-based among generated tokens
    std::string thinkingDelta; // text this token added to the think channel
    std::string responseDelta; // text this token added to the answer
    TokenTiming timing;        // a verification pass's time is shared by its tokens
    bool fromProposal = false; // an accepted speculative proposal
    // The tokens this event stands for: 1 from a local model; a server's delta may carry
    // several (RemoteDelta::tokens), and 0 means the server did not say how many.
    int tokens = 1;
    // GenerateOptions::logprobs >= 0 asked for it (absent for a text-only tail event).
    std::optional<TokenLogprobs> logprobs;
};

// After each prefill chunk: positions read so far of this prompt, and what it cost.
struct SessionProgress {
    std::string stage; // "prefill"
    std::int64_t done = 0;
    std::int64_t total = 0;
    std::int64_t restored = 0;    // positions of the prompt loaded from the state cache
    std::int64_t held = 0;        // positions held before reading (in memory or restored)
    int chunks = 0;               // chunks fed so far
    double seconds = 0;           // since the prefill started
    std::uint64_t trunkBytes = 0; // trunk bytes read so far by this prefill
    std::uint64_t expertBytes = 0;
    // Inside the chunk being read (its `chunkPositions` positions follow `done`): layers
    // of `layers` done. On the real model one chunk is often the whole prompt, minutes
    // long; the layers say how far it is. Said at most about 4 times a second.
    int chunkPositions = 0;
    int chunkLayersDone = 0;
    int layers = 0;
    double positionsPerSecond() const { return seconds > 0 ? double(done) / seconds : 0; }
    // The share of the reading done, the current chunk's layers counted (1: nothing to read).
    double fraction() const {
        if (total <= 0) return 1;
        const double inChunk =
            layers > 0 ? double(chunkPositions) * double(chunkLayersDone) / double(layers) : 0;
        return (double(done) + inChunk) / double(total);
    }
};

class SessionObserver {
public:
    virtual ~SessionObserver() = default;
    virtual void onProgress(const SessionProgress&) {}
    virtual void onToken(const TokenEvent&) {}
    // After every fed token: live memory figures for the panels.
    virtual void onMemory(const MemoryReport&) {}
};

struct GenerateOptions {
    ChatRenderOptions render;
    SamplingOptions sampling;
    int maxTokens = 1024;
    // Speculative decoding with prompt lookup: 0 off, N up to N proposals per
    // verification pass, -1 an adaptive width. Greedy: the ids are serial decode's.
    // Sampling: each proposal is kept with probability p(proposal), so every token has
    // exactly the distribution of serial sampling (the random draws differ).
    int speculation = 0;
    // Report each committed token's TokenLogprobs with this many alternatives (0..20);
    // -1: none (nothing is computed).
    int logprobs = -1;
    // OpenAI's logit adjustments, applied to the logits before sampling (and before the
    // log-probabilities): `logitBias` adds its value to an id's logit; a token generated c
    // times so far in this answer loses c * frequencyPenalty + (c > 0) * presencePenalty.
    std::vector<std::pair<TokenId, float>> logitBias;
    float presencePenalty = 0;
    float frequencyPenalty = 0;
    // generateIds only: ids that end the generation when sampled (endOfTurn; not fed).
    std::vector<TokenId> stopIds;
    // generateIds only: the prompt's images, in order (k3/vision.hpp). The prompt holds one
    // <|media_pad|> per image (imagePrompt()); each is expanded to the image's
    // plan.tokens() positions, fed the vision tower's rows instead of embeddings. A held
    // state is reused only where its image rows are the prompt's (by a hash of each row:
    // the ids alone do not say which image); a state holding image rows is never saved to
    // the prefix cache. Needs a checkpoint with a vision tower (loaded on first use).
    std::vector<PreparedImage> images;
    // chat only: what the answer must be (k3/constraint.hpp), e.g. JSON of a schema. The
    // log-probabilities stay those of the unconstrained logits; speculation is off.
    std::shared_ptr<const OutputConstraint> constraint;
};

struct GenerateResult {
    ChatMessage reply;        // role assistant, content + reasoning_content
    std::vector<TokenId> ids; // generated ids, the end-of-turn marker included
    int promptTokens = 0;
    int reusedPositions = 0;   // prompt positions already in the state (not recomputed)
    int restoredPositions = 0; // of those, read from a state file of the prefix cache
    int statesSaved = 0;       // state files this call wrote to the prefix cache
    bool endOfTurn = false;    // the model ended its turn ([EOS] / <|end_of_msg|>)
    bool cancelled = false;    // stopped by the cancel flag
    bool contextFull = false;  // stopped at the context length (the plan's KV cache)
    int droppedExperts = 0;    // > 0 makes the run invalid
    bool nonFinite = false;    // a NaN/Inf reached the logits: invalid
    double prefillSeconds = 0;
    int prefillPositions = 0;             // positions computed (the prompt less the reused ones)
    int prefillChunks = 0;                // forward calls they took
    std::uint64_t prefillTrunkBytes = 0;  // read from the packed trunk during the prefill
    std::uint64_t prefillExpertBytes = 0; // routed experts read during the prefill
    double decodeSeconds = 0;
    int decodePasses = 0;      // forward passes while decoding (serial steps + verifications)
    int verifyPasses = 0;      // of which verified proposals
    int proposed = 0;          // proposals verified
    int acceptedProposals = 0; // proposals that equalled the model's own next token
    std::vector<std::string> problems; // malformed model output, as the parser saw it
    // A remote backend has no ids: the server's completion count (its usage, else the
    // deltas received), the model it named, and why the stream broke (the reply keeps
    // what arrived before). -1 / empty for a local session.
    int remoteTokens = -1;
    std::string model;
    std::string interruption;
    int tokenCount() const { return remoteTokens >= 0 ? remoteTokens : int(ids.size()); }
    bool valid() const { return droppedExperts == 0 && !nonFinite; }
};

class Session {
public:
    // Opens config.modelDir's model as `config` says (the memory plan enforced unless the
    // diagnostics say otherwise), its draft and prefix cache when named, and the model
    // folder's tokenizer.
    static Session open(const LaunchConfig& config, const LaunchDiagnostics& diagnostics = {});

    ~Session();
    Session(Session&&) noexcept;
    Session& operator=(Session&&) noexcept;

    const ModelConfig& config() const;
    const Model& model() const;
    bool hasTokenizer() const;
    const Tokenizer& tokenizer() const; // throws when opened without one

    // Renders `history` (ending with the user's message), prefills what the state does
    // not already hold, and generates the assistant's reply.
    GenerateResult chat(const std::vector<ChatMessage>& history, const GenerateOptions& options,
                        SessionObserver* observer = nullptr,
                        const std::atomic<bool>* cancel = nullptr);

    // Ids in, ids out: feeds `prompt` (reusing the state when it already holds a
    // prefix of it) and generates up to maxTokens ids. Stops early on cancel and at one
    // of options.stopIds.
    GenerateResult generateIds(std::span<const TokenId> prompt, const GenerateOptions& options,
                               SessionObserver* observer = nullptr,
                               const std::atomic<bool>* cancel = nullptr);

    // The logits after the last fed position (vocab_size floats), e.g. for --dump-logits.
    std::span<const float> lastLogits() const;
    int positions() const;                    // positions held by the state
    std::span<const TokenId> heldIds() const; // the ids those positions read, in order
    int prefillChunk() const;                 // positions per prefill chunk in force
    int contextLength() const; // positions a conversation may hold (the plan's KV cache)
    // Bytes allocated for the conversation's state: the live state, the prompt snapshot
    // and the speculation rollback record (the plan's "recurrent state" + "KV cache").
    std::uint64_t stateBytesHeld() const;
    void reset(); // forget the conversation

    // The conversation's state on disk (docs/state-format.md): the ids fed, the logits
    // after the last one and every layer's state, bound to this model, its layers and the
    // engine's numerics; continuing from a loaded state gives the bits of never having
    // stopped, at any memory budget. saveState writes atomically (owner-only for a new
    // file) and throws ChatError / StateError; it holds nothing back: positions() > 0.
    void saveState(const std::filesystem::path& path) const;
    // Replaces the conversation with the saved one. Throws StateError naming the file and
    // the mismatch, and then leaves the conversation as it was (its prompt snapshot
    // aside). A prompt equal to the loaded ids then reads nothing; one that extends them
    // reads only the new positions.
    void loadState(const std::filesystem::path& path);
    // Deletes the prefix cache's conversation states that hold a part of `history` (as
    // any thinking setting renders it): a deleted conversation leaves no state behind.
    // The preambles stay (they hold no message). Returns the files removed.
    int forgetSavedStates(const std::vector<ChatMessage>& history) const;
    // The prefix cache's conversation states forgetSavedStates would delete: their count
    // and bytes on disk (what the conversation list shows beside it).
    StateCacheUsage savedStateUsage(const std::vector<ChatMessage>& history) const;
    // Whose conversations the prefix cache holds from now on (a server's client): states
    // saved for one owner are never restored for another. Empty: the session's own.
    void setStateOwner(const std::string& owner);
    // The prompt positions chat(history, render) would read now: the prompt less the
    // longest prefix held in memory or kept by the prefix cache (by the files' names, none
    // opened). A front end says it before sending (a conversation whose state is gone is
    // read again whole). Throws ChatError as rendering.
    int positionsToRead(const std::vector<ChatMessage>& history,
                        const ChatRenderOptions& render) const;

    MemoryReport memoryReport() const;

    struct Impl; // defined in model/SessionImpl.hpp

private:
    explicit Session(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Picks the next token: argmax when temperature is 0, else softmax(logits/T) restricted
// to the smallest set whose probability reaches topP, drawn with PCG32 seeded by `seed`.
class Sampler {
public:
    explicit Sampler(const SamplingOptions& options);
    TokenId sample(std::span<const float> logits);
    // Speculative sampling with a one-hot proposal (prompt lookup): accepts `proposal`
    // with probability p(proposal) under this sampler's distribution for `logits`, else
    // returns false with `correction` drawn from p without the proposal, renormalised;
    // the committed token is then distributed exactly as sample() would draw it.
    // Greedy: accepted iff the proposal is the argmax (correction: the argmax).
    bool acceptProposal(std::span<const float> logits, TokenId proposal, TokenId& correction);
    // The next raw PCG32 output (tests compare it with the published sequence).
    std::uint32_t nextRandom32();

private:
    // The tokens top-p keeps, most likely first, with their unnormalised weights.
    struct Kept {
        std::vector<int> ids;
        std::vector<double> weights;
        double mass = 0;
    };
    Kept kept(std::span<const float> logits) const;

    SamplingOptions options_;
    std::uint64_t state_;
};

} // namespace k3
