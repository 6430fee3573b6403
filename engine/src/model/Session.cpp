#include "k3/session.hpp"
#include "chat/ChatResume.hpp"
#include "io/Xxh3.hpp"
#include "k3/draft.hpp"
#include "k3/speculation.hpp"
#include "k3/state_cache.hpp"
#include "model/ConstrainedPick.hpp"
#include "model/LoadPlan.hpp"
#include "model/LogitAdjuster.hpp"
#include "model/SessionImpl.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <optional>
#include <type_traits>

namespace k3 {

namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

bool isPrefix(const std::vector<TokenId>& prefix, std::span<const TokenId> of) {
    return prefix.size() <= of.size() && std::equal(prefix.begin(), prefix.end(), of.begin());
}

} // namespace

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

Session Session::open(const LaunchConfig& config, const LaunchDiagnostics& diagnostics) {
    auto impl = std::make_unique<Impl>(Model::load(config, diagnostics));
    impl->modelDir = config.modelDir;
    impl->chunk = std::max(1, impl->model.memoryPlan().chunkPositions);
    if (!config.draftDir.empty()) {
        checkDraft(config.draftDir, config.modelDir);
        impl->draft = Model::loadDraft(config.draftDir, impl->model, config, diagnostics);
        impl->draftState = impl->draft->newState();
        impl->draftLogits.assign(std::size_t(impl->draft->config().vocabSize), 0.0f);
        std::error_code ec;
        const auto size = std::filesystem::file_size(config.draftDir / "model.safetensors", ec);
        impl->draftFileBytes = ec ? 0 : size;
    }
    if (!config.stateCacheDir.empty()) {
        // Owner-only: the states hold what the user wrote.
        std::error_code ec;
        std::filesystem::create_directories(config.stateCacheDir, ec);
        if (!ec)
            std::filesystem::permissions(config.stateCacheDir, std::filesystem::perms::owner_all,
                                         std::filesystem::perm_options::replace, ec);
        if (ec)
            throw StateError(config.stateCacheDir.string() +
                             ": cannot create the state cache folder: " + ec.message());
        impl->stateCacheBinding = impl->stateBinding();
        impl->stateCache.emplace(config.stateCacheDir,
                                 config.stateCacheBytes > 0 ? config.stateCacheBytes
                                                            : kDefaultStateCacheBytes,
                                 impl->stateCacheBinding);
    }
    if (diagnostics.loadTokenizer) {
        impl->tokenizer = Tokenizer::fromDirectory(
            diagnostics.tokenizerDir.empty() ? config.modelDir : diagnostics.tokenizerDir);
        if (impl->tokenizer->vocabSize() > std::size_t(impl->model.config().vocabSize))
            throw ModelError("the tokenizer has " + std::to_string(impl->tokenizer->vocabSize()) +
                             " tokens but the model's vocab_size is " +
                             std::to_string(impl->model.config().vocabSize));
    }
    return Session(std::move(impl));
}

const ModelConfig& Session::config() const {
    return impl_->model.config();
}
const Model& Session::model() const {
    return impl_->model;
}
bool Session::hasTokenizer() const {
    return impl_->tokenizer.has_value();
}
const Tokenizer& Session::tokenizer() const {
    if (!impl_->tokenizer) throw ModelError("this session was opened without a tokenizer");
    return *impl_->tokenizer;
}
std::span<const float> Session::lastLogits() const {
    return impl_->logits;
}
int Session::positions() const {
    return impl_->state.length();
}
std::span<const TokenId> Session::heldIds() const {
    return impl_->fed;
}
int Session::prefillChunk() const {
    return impl_->chunk;
}
int Session::contextLength() const {
    return impl_->model.memoryPlan().contextLength;
}
std::uint64_t Session::stateBytesHeld() const {
    return impl_->state.heldBytes() +
           (impl_->promptSnapshot ? impl_->promptSnapshot->heldBytes() : 0);
}

void Session::reset() {
    impl_->logitsRestored = false;
    impl_->fedMedia.clear();
    impl_->promptSnapshotMedia.clear();
    impl_->state.reset();
    impl_->fed.clear();
    impl_->promptSnapshot.reset();
    impl_->promptSnapshotIds.clear();
    impl_->promptSnapshotLogits.clear();
    impl_->resume.clear();
    if (impl_->draftState) impl_->draftState->reset();
    impl_->draftSeen.clear();
}

namespace {
// Runs a chunk of positions (one, when decoding), records them as held by the state,
// adds their validity figures to `result` and splits the time into trunk wait, expert
// reads and compute. The logits are the last position's.
// `rows`: image rows fed in place of embeddings (Model::forward). beforeLayer: a press of
// Stop it reports ends the chunk within a layer (false returned): the state is then what
// it was, or empty when some layer had run.
bool feed(Session::Impl& s, std::span<const TokenId> ids, GenerateResult& result,
          const InputRows& rows = {}, const std::function<bool(int)>& beforeLayer = {}) {
    const MemoryStats before = s.model.memoryStats();
    const auto t0 = Clock::now();
    const TokenStats st = s.model.forward(s.state, ids, s.logits, false, rows, beforeLayer);
    const double total = secondsSince(t0);
    const MemoryStats after = s.model.memoryStats();
    s.wallSeconds += total;
    s.lastTiming.trunkIoSeconds = after.trunk.waitSeconds - before.trunk.waitSeconds;
    s.lastTiming.expertIoSeconds = after.cache.readSeconds - before.cache.readSeconds;
    s.lastTiming.computeSeconds =
        std::max(0.0, total - s.lastTiming.trunkIoSeconds - s.lastTiming.expertIoSeconds);
    result.droppedExperts += st.droppedExperts;
    result.nonFinite = result.nonFinite || st.nonFinite;
    if (st.stopped) {
        result.cancelled = true;
        if (s.state.length() != int(s.fed.size())) { // emptied: the logits went with it
            s.fed.clear();
            s.logitsRestored = false;
        }
        return false;
    }
    s.fed.insert(s.fed.end(), ids.begin(), ids.end());
    s.logitsRestored = false;
    return true;
}

void feed(Session::Impl& s, TokenId id, GenerateResult& result) {
    feed(s, std::span<const TokenId>(&id, 1), result);
}
} // namespace

namespace {

// Saves the state as the prefix cache's file for the ids it holds (never an invalid
// run's: a NaN or a dropped expert would be continued from). A failed write costs only
// the saving: the conversation goes on.
void saveToCache(Session::Impl& s, model::StateCache::Kind kind, GenerateResult& result,
                 bool snapshot = false) {
    const std::vector<TokenId>& ids = snapshot ? s.promptSnapshotIds : s.fed;
    const MediaKeys& media = snapshot ? s.promptSnapshotMedia : s.fedMedia;
    // A file is found by its ids alone: one holding image rows is never written.
    const bool holdsRows = !media.empty() && std::size_t(media.front().first) < ids.size();
    if (!s.stateCache || ids.empty() || !result.valid() || holdsRows) return;
    if (snapshot && !s.promptSnapshot) return;
    if (s.stateCache->holds(ids)) return;
    const std::filesystem::path file = s.stateCache->pathFor(ids, kind);
    try {
        if (snapshot)
            s.saveState(file, *s.promptSnapshot, s.promptSnapshotIds, s.promptSnapshotLogits);
        else
            s.saveState(file);
    } catch (const Error& e) {
        result.problems.push_back(std::string("the state was not saved: ") + e.what());
        return;
    }
    ++result.statesSaved;
    s.stateCache->afterSave(file, ids);
}

// The longest state of the prefix cache that starts `prompt` and holds more than
// `longerThan` positions, loaded into the conversation; its positions, or 0. A file that
// cannot be loaded (damaged, truncated, removed meanwhile) is removed and the next one
// tried: the prompt is then read, never continued from a wrong state.
// `prompt` holds image rows from position `rowsFrom` on: a file (which never holds rows)
// serves only up to there.
int restoreFromCache(Session::Impl& s, std::span<const TokenId> prompt, std::size_t longerThan,
                     std::size_t rowsFrom) {
    if (!s.stateCache || longerThan >= rowsFrom) return 0;
    for (const std::filesystem::path& file :
         s.stateCache->prefixesOf(prompt.first(std::min(prompt.size(), rowsFrom)), longerThan)) {
        try {
            s.loadState(file);
        } catch (const StateError&) {
            s.stateCache->remove(file);
            continue;
        }
        if (s.fed.size() > longerThan && isPrefix(s.fed, prompt) && s.fed.size() <= rowsFrom) {
            s.fedMedia.clear();
            s.stateCache->touch(file);
            return int(s.fed.size());
        }
        // Same name, other ids (a hash collision): not this prompt's state.
        s.state.reset();
        s.fed.clear();
        s.logitsRestored = false;
    }
    return 0;
}

// The image rows among positions [first, first + n) of the prompt, chunk-relative.
InputRows chunkRows(const model::PromptRows* media, std::size_t first, std::size_t n,
                    std::vector<int>& positions) {
    if (!media) return {};
    const auto begin =
        std::lower_bound(media->positions.begin(), media->positions.end(), int(first));
    const auto end = std::lower_bound(begin, media->positions.end(), int(first + n));
    positions.clear();
    for (auto it = begin; it != end; ++it) positions.push_back(*it - int(first));
    const std::size_t width =
        media->positions.empty() ? 0 : media->rows.size() / media->positions.size();
    const std::size_t skip = std::size_t(begin - media->positions.begin());
    return {positions,
            std::span<const float>(media->rows).subspan(skip * width, positions.size() * width)};
}

// The prompt's image rows by content: a held state with the same ids but another
// image (the same size, so the same pads) is not this prompt's.
MediaKeys mediaKeys(const model::PromptRows* media) {
    MediaKeys keys;
    if (!media) return keys;
    const std::size_t width =
        media->positions.empty() ? 0 : media->rows.size() / media->positions.size();
    for (std::size_t k = 0; k < media->positions.size(); ++k)
        keys.emplace_back(media->positions[k],
                          XXH3_64bits(media->rows.data() + k * width, width * sizeof(float)));
    return keys;
}

// The held keys before position n equal the prompt's.
bool sameMediaBefore(const MediaKeys& held, const MediaKeys& prompt, std::size_t n) {
    auto a = held.begin();
    auto b = prompt.cbegin();
    for (;; ++a, ++b) {
        const bool aIn = a != held.end() && std::size_t(a->first) < n;
        const bool bIn = b != prompt.end() && std::size_t(b->first) < n;
        if (!aIn || !bIn) return aIn == bIn;
        if (*a != *b) return false;
    }
}

// The state prefill starts from: the whole prompt held (a loaded state), the longest
// held prefix (the prefix cache on disk, the live state or the prompt snapshot), or
// nothing.
void startFromHeldState(Session::Impl& s, std::span<const TokenId> prompt,
                        const MediaKeys& promptMedia, GenerateResult& result) {
    const std::size_t rowsFrom =
        promptMedia.empty() ? prompt.size() : std::size_t(promptMedia.front().first);
    const auto reusable = [&](const std::vector<TokenId>& ids, const MediaKeys& keys) {
        return !ids.empty() && ids.size() < prompt.size() && isPrefix(ids, prompt) &&
               sameMediaBefore(keys, promptMedia, ids.size());
    };
    const bool wholePromptHeld = s.logitsRestored && s.fed.size() == prompt.size() &&
                                 isPrefix(s.fed, prompt) &&
                                 sameMediaBefore(s.fedMedia, promptMedia, prompt.size());
    std::size_t inMemory = wholePromptHeld ? prompt.size() : 0;
    if (!wholePromptHeld && reusable(s.fed, s.fedMedia)) inMemory = s.fed.size();
    if (!wholePromptHeld && s.promptSnapshot &&
        reusable(s.promptSnapshotIds, s.promptSnapshotMedia))
        inMemory = std::max(inMemory, s.promptSnapshotIds.size());
    if (wholePromptHeld) {
        // A loaded state holds the whole prompt and its last logits: nothing to read.
    } else if (const int restored = restoreFromCache(s, prompt, inMemory, rowsFrom); restored > 0) {
        result.restoredPositions = restored;
    } else if (reusable(s.fed, s.fedMedia) && s.fed.size() == inMemory) {
        // keep the live state
    } else if (s.promptSnapshot && reusable(s.promptSnapshotIds, s.promptSnapshotMedia)) {
        // The live state goes first, then the snapshot is copied back: two copies at most.
        s.state = std::move(*s.promptSnapshot);
        s.promptSnapshot = s.state.clone();
        s.fed = s.promptSnapshotIds;
        s.fedMedia = s.promptSnapshotMedia;
        s.logits = s.promptSnapshotLogits;
    } else {
        s.state.reset();
        s.fed.clear();
        s.logitsRestored = false;
    }
}

// The prompt snapshot: the state, ids, image keys and logits where the prompt's
// shared part ends (prefill's snapshotAt).
void takePromptSnapshot(Session::Impl& s) {
    s.promptSnapshot.reset(); // the old one goes before the new one is made
    s.promptSnapshot = s.state.clone();
    s.promptSnapshotIds = s.fed;
    s.promptSnapshotMedia = s.fedMedia;
    s.promptSnapshotLogits = s.logits;
}

// What the prefill read, as the result reports it.
void recordPrefill(GenerateResult& result, const SessionProgress& progress) {
    result.prefillPositions = int(progress.done);
    result.prefillChunks = progress.chunks;
    result.prefillTrunkBytes = progress.trunkBytes;
    result.prefillExpertBytes = progress.expertBytes;
}

// The prefill's seconds since t0 and bytes read since `start`.
void measureProgress(SessionProgress& progress, const Session::Impl& s, const MemoryStats& start,
                     Clock::time_point t0) {
    const MemoryStats now = s.model.memoryStats();
    progress.seconds = secondsSince(t0);
    progress.trunkBytes = now.trunk.bytesRead - start.trunk.bytesRead;
    progress.expertBytes = now.cache.bytesRead - start.cache.bytesRead;
}

// Brings the state to hold exactly `prompt`, reusing what it can, the prefix cache on
// disk included. Returns the reused count. `snapshotAt`: where the prompt snapshot is
// taken (a chunk ends there). A chat puts it before the generation prompt (the assistant
// header), which every follow-up shares whether the answer was kept, stopped or
// re-rendered without its thinking. `preambleAt`: where the prompt's fixed preamble ends
// (0: none); a chunk ends there too, and the state there goes to the prefix cache.
// `media`: the prompt's image rows; such a prompt is read whole.
int prefill(Session::Impl& s, std::span<const TokenId> prompt, SessionObserver* observer,
            const std::atomic<bool>* cancel, GenerateResult& result, std::size_t snapshotAt,
            std::size_t preambleAt = 0, const model::PromptRows* media = nullptr) {
    // Refused before anything is computed: the KV cache the plan holds has this many places.
    const int context = s.model.memoryPlan().contextLength;
    if (context > 0 && int(prompt.size()) >= context)
        throw ContextFull(int(prompt.size()), context);
    // The logits of the last prompt position are needed, so at least one position is
    // always recomputed (unless a loaded state brought them).
    const MediaKeys promptMedia = mediaKeys(media);
    startFromHeldState(s, prompt, promptMedia, result);
    // From here on the held keys are the prompt's up to what the state holds.
    std::erase_if(s.fedMedia,
                  [&](const auto& key) { return std::size_t(key.first) >= s.fed.size(); });
    const int reused = int(s.fed.size());
    SessionProgress progress;
    progress.stage = "prefill";
    progress.total = std::int64_t(prompt.size() - s.fed.size());
    progress.restored = result.restoredPositions;
    progress.held = std::int64_t(s.fed.size());
    const MemoryStats start = s.model.memoryStats();
    const auto t0 = Clock::now();
    std::vector<int> rowPositions; // a chunk's image positions, relative to the chunk
    // Said before the first chunk too: on a streamed trunk one chunk can take minutes.
    auto lastSaid = Clock::now();
    if (observer && (progress.total > 0 || progress.restored > 0)) observer->onProgress(progress);
    // Chunks: each reads the trunk once and each of its experts once. Cancel is checked
    // between chunks (the state then holds whole chunks, which the next turn reuses) and
    // between the layers of a chunk (the state is then emptied: see feed).
    // Every chunking gives the same bits, so chunks may end where a state is kept.
    const bool savePreamble = s.stateCache && !media && preambleAt > s.fed.size() &&
                              preambleAt < snapshotAt &&
                              !s.stateCache->holds(prompt.first(preambleAt));
    for (std::size_t i = s.fed.size(); i < prompt.size();) {
        if (cancel && cancel->load()) {
            result.cancelled = true;
            break;
        }
        std::size_t n = std::min(std::size_t(s.chunk), prompt.size() - i);
        for (const std::size_t stop : {savePreamble ? preambleAt : 0, snapshotAt})
            if (i < stop && i + n > stop) n = stop - i;
        // Inside the chunk: Stop is heard before each layer, and how far the chunk is
        // said every quarter second (a chunk is often the whole prompt).
        const auto beforeLayer = [&](int layer) {
            if (cancel && cancel->load(std::memory_order_relaxed)) return true;
            if (observer && layer > 0 && secondsSince(lastSaid) >= 0.25) {
                lastSaid = Clock::now();
                progress.chunkPositions = int(n);
                progress.chunkLayersDone = layer;
                progress.layers = s.model.layersBound();
                measureProgress(progress, s, start, t0);
                observer->onProgress(progress);
            }
            return false;
        };
        const bool fed = feed(s, prompt.subspan(i, n), result, chunkRows(media, i, n, rowPositions),
                              beforeLayer);
        progress.chunkPositions = progress.chunkLayersDone = 0;
        if (!fed) {
            if (s.fed.empty()) s.fedMedia.clear();
            break;
        }
        for (const auto& key : promptMedia)
            if (std::size_t(key.first) >= i && std::size_t(key.first) < i + n)
                s.fedMedia.push_back(key);
        i += n;
        if (savePreamble && i == preambleAt)
            saveToCache(s, model::StateCache::Kind::Preamble, result);
        if (i == snapshotAt) takePromptSnapshot(s);
        progress.done += std::int64_t(n);
        ++progress.chunks;
        measureProgress(progress, s, start, t0);
        lastSaid = Clock::now();
        if (observer) observer->onProgress(progress);
    }
    recordPrefill(result, progress);
    return reused;
}
} // namespace

namespace {

// Where the fixed part of a chat prompt ends: the prompt of the history's leading system
// messages alone (the thinking-effort message, the system prompt, the tools), when the
// whole prompt starts with it; 0 when it does not or there is nothing after it.
std::size_t preambleEnd(const Tokenizer& tok, const std::vector<ChatMessage>& history,
                        const ChatRenderOptions& closed, std::span<const TokenId> prompt) {
    std::vector<ChatMessage> leading;
    for (const ChatMessage& m : history) {
        if (m.role != ChatRole::System) break;
        leading.push_back(m);
    }
    std::vector<TokenId> head;
    try {
        head = encodeChatSegments(tok, renderChatSegments(leading, closed));
    } catch (const ChatError&) {
        return 0; // no preamble on its own (the render needs a message)
    }
    return !head.empty() && head.size() < prompt.size() && isPrefix(head, prompt) ? head.size() : 0;
}

double share(double total, int parts) {
    return parts > 0 ? total / parts : 0;
}

// Decoded tokens the draft reads before a proposal, at most: see proposeWithDraft.
constexpr std::size_t kDraftWindow = 8;

// Up to k tokens the draft's greedy decode continues `context` with (the conversation
// and the pending token). The draft first catches up with the conversation in chunks
// (from scratch when the conversation is not a continuation of what it has seen): all
// of it before `decodedFrom` (the prompt), then the last kDraftWindow decoded tokens
// only. Catching up on every committed token would cost one draft position per token (as
// much compute as the model's own step) whatever the back-off; skipping the older
// decoded tokens costs only proposal quality, never the ids. The pending token is read
// in the same chunk, and that state is kept (the next catch-up starts after it); the
// k - 1 further forwards run from a copy that is put back: the draft needs no rollback.
std::vector<TokenId> proposeWithDraft(Session::Impl& s, std::span<const TokenId> context, int k,
                                      std::size_t decodedFrom) {
    if (k <= 0) return {};
    const Model& d = *s.draft;
    InferenceState& st = *s.draftState;
    std::vector<TokenId>& seen = s.draftSeen;
    const std::size_t known = context.size() - 1;
    if (!isPrefix(seen, context.first(known))) {
        st.reset();
        seen.clear();
    }
    const std::size_t chunk = std::size_t(std::max(1, d.memoryPlan().chunkPositions));
    const auto read = [&](std::size_t end) {
        while (seen.size() < end) {
            const std::size_t n = std::min(chunk, end - seen.size());
            d.forward(st, context.subspan(seen.size(), n), s.draftLogits);
            seen.insert(seen.end(), context.begin() + std::ptrdiff_t(seen.size()),
                        context.begin() + std::ptrdiff_t(seen.size() + n));
        }
    };
    read(std::min(decodedFrom, known));
    if (known > kDraftWindow && seen.size() < known - kDraftWindow)
        seen.insert(seen.end(), context.begin() + std::ptrdiff_t(seen.size()),
                    context.begin() + std::ptrdiff_t(known - kDraftWindow));
    read(context.size());
    std::vector<TokenId> out{argmax(s.draftLogits)};
    if (k > 1) {
        InferenceState saved = st.clone();
        for (int i = 1; i < k; ++i) {
            d.forward(st, out.back(), s.draftLogits);
            out.push_back(argmax(s.draftLogits));
        }
        st = std::move(saved);
    }
    return out;
}

// The answer's tokens, one trunk pass per token, or (greedy with speculation on) several:
// the pending token and up to k proposals verified in one chunk, the longest prefix equal
// to the model's own argmax kept, the state rolled back to it. Every id is the one serial
// greedy decode gives. `decide(id)` says whether the turn goes on after id (false: id
// ends it and is not fed); `report(id, timing, proposed, logprobs)` follows each decide
// (logprobs: options.logprobs >= 0, from the logits the sampler saw for id).
template <typename Decide, typename Report> class Decoder {
public:
    Decoder(Session::Impl& s, const GenerateOptions& options, GenerateResult& result,
            Decide& decide, Report& report)
        : s_(s), options_(options), result_(result), decide_(decide), report_(report),
          sampler_(options.sampling), adjust_(options),
          spec_(options.speculation != 0 && !options.constraint),
          // Greedy --spec auto follows measured seconds too. A fixed width is judged by
          // acceptance only, so its passes (and counts) do not depend on the machine's
          // load; so is sampling, whose draws depend on what was proposed: a seed must
          // reproduce.
          autoWidth_(options.speculation < 0 && options.sampling.temperature <= 0.0f),
          // Auto starts the draft at one proposal (each costs a draft forward), prompt
          // lookup (free guesses) at 4.
          width_(options.speculation > 0 ? options.speculation : 16,
                 options.speculation > 0 ? options.speculation
                 : s.draft               ? 1
                                         : 4,
                 autoWidth_),
          decodedFrom_(s.fed.size()), // the draft reads all before (the prompt)
          V_(s.logits.size()) {
        if (options.constraint) constraint_.emplace(*options.constraint, options.render);
    }

    int emitted() const { return emitted_; }

    // One sampled token, fed alone or verified with proposals; false: the turn is over.
    bool step() {
        const auto tt = Clock::now();
        s_.lastTiming = {};
        // A correction was drawn from these same (adjusted) logits while verifying.
        const std::span<const float> seen = adjust_.apply(s_.logits);
        TokenId next = forced_ >= 0 ? forced_ : sampler_.sample(seen);
        forced_ = -1;
        if (constraint_) {
            next = constraint_->pick(sampler_, seen, next, options_.maxTokens - emitted_ - 1);
            constraint_->commit(next);
        }
        const std::optional<TokenLogprobs> lp = logprobsOf(seen, next);
        result_.ids.push_back(next);
        adjust_.count(next);
        ++emitted_;
        // A token that is not fed still took its sampling time.
        const auto sampledOnly = [&] {
            TokenTiming t;
            t.computeSeconds = secondsSince(tt);
            return t;
        };
        if (!decide_(next)) {
            report_(next, sampledOnly(), false, lp);
            result_.endOfTurn = true;
            return false;
        }
        if (emitted_ == options_.maxTokens) { // the last token's logits are not needed
            report_(next, sampledOnly(), false, lp);
            return false;
        }
        const int context = s_.model.memoryPlan().contextLength;
        if (context > 0 && s_.state.length() + 1 > context) { // no place left to feed it
            report_(next, sampledOnly(), false, lp);
            result_.contextFull = true;
            return false;
        }
        const std::vector<TokenId> proposals = propose(next, context);
        if (proposals.empty()) { // one position, as serial decode
            feed(s_, next, result_);
            ++result_.decodePasses;
            if (autoWidth_) width_.recordSerial(secondsSince(tt));
            TokenTiming t = s_.lastTiming;
            t.computeSeconds =
                std::max(0.0, secondsSince(tt) - t.trunkIoSeconds - t.expertIoSeconds);
            report_(next, t, false, lp);
            return true;
        }
        return verify(next, proposals, tt, lp);
    }

private:
    std::optional<TokenLogprobs> logprobsOf(std::span<const float> logits, TokenId id) const {
        if (options_.logprobs < 0) return std::nullopt;
        return tokenLogprobs(logits, id, options_.logprobs);
    }

    std::span<const float> row(int i) const {
        return std::span<const float>(chunkLogits_.data() + std::size_t(i) * V_, V_);
    }

    std::vector<TokenId> propose(TokenId next, int context) {
        std::vector<TokenId> proposals;
        if (spec_ && width_.propose()) {
            const int room = context > 0 ? context - s_.state.length() - 1 : width_.width();
            const int k = std::min({width_.width(), options_.maxTokens - emitted_, room,
                                    s_.model.memoryPlan().maxSpeculation});
            // The conversation so far plus `next`, without copying it every step.
            s_.fed.push_back(next);
            proposals = s_.draft ? proposeWithDraft(s_, s_.fed, k, decodedFrom_)
                                 : proposePromptLookup(s_.fed, k);
            if (const ProposalFilter& filter = proposalFilterForBenchmarks(); filter)
                filter(s_.fed, proposals);
            s_.fed.pop_back();
        }
        return proposals;
    }

    // Greedy: kept while equal to the argmax. Sampled: each kept with probability p(d)
    // (exact in distribution); the first rejection's correction is the next token.
    // A row's logits are adjusted with the proposals before it counted as generated.
    int accept(const std::vector<TokenId>& proposals, std::optional<TokenId>& correction) {
        int accepted = 0;
        while (accepted < int(proposals.size())) {
            TokenId c = 0;
            if (sampler_.acceptProposal(adjust_.apply(row(accepted)),
                                        proposals[std::size_t(accepted)], c)) {
                adjust_.count(proposals[std::size_t(accepted)]);
                ++accepted;
                continue;
            }
            if (options_.sampling.temperature > 0.0f) correction = c;
            break;
        }
        for (int a = 0; a < accepted; ++a) adjust_.count(proposals[std::size_t(a)], -1);
        return accepted;
    }

    // Verify: the pending token and the proposals in one chunk, every position's logits.
    bool verify(TokenId next, const std::vector<TokenId>& proposals, Clock::time_point tt,
                const std::optional<TokenLogprobs>& nextLogprobs) {
        std::vector<TokenId> chunk{next};
        chunk.insert(chunk.end(), proposals.begin(), proposals.end());
        const int start = s_.state.length();
        chunkLogits_.resize(chunk.size() * V_);
        const MemoryStats before = s_.model.memoryStats();
        const auto t0 = Clock::now();
        const TokenStats st =
            s_.model.forward(s_.state, chunk, chunkLogits_, /*keepRollback=*/true);
        const double passSeconds = secondsSince(t0);
        const MemoryStats after = s_.model.memoryStats();
        s_.wallSeconds += passSeconds;
        result_.droppedExperts += st.droppedExperts;
        result_.nonFinite = result_.nonFinite || st.nonFinite;
        ++result_.decodePasses;
        ++result_.verifyPasses;
        result_.proposed += int(proposals.size());
        std::optional<TokenId> correction;
        const int accepted = accept(proposals, correction);
        // Walk the accepted proposals as if decoded one by one: one may end the turn or
        // reach maxTokens, and then it is not fed.
        int keep = 1; // `next` is fed
        bool stop = false;
        std::vector<Committed> committed{{next, false, nextLogprobs}};
        for (int a = 0; a < accepted; ++a) {
            const TokenId d = proposals[std::size_t(a)];
            committed.push_back({d, true, logprobsOf(adjust_.apply(row(a)), d)});
            result_.ids.push_back(d);
            adjust_.count(d);
            ++emitted_;
            ++result_.acceptedProposals;
            if (!decide_(d)) {
                result_.endOfTurn = true;
                stop = true;
                break;
            }
            if (emitted_ == options_.maxTokens) {
                stop = true;
                break;
            }
            ++keep;
        }
        s_.model.rollback(s_.state, start + keep);
        s_.fed.insert(s_.fed.end(), chunk.begin(), chunk.begin() + keep);
        std::copy_n(chunkLogits_.data() + std::size_t(keep - 1) * V_, V_, s_.logits.data());
        width_.record(int(proposals.size()), accepted,
                      autoWidth_ ? share(secondsSince(tt), int(committed.size())) : 0.0);
        // The pass's time, shared by the tokens it committed.
        TokenTiming t;
        t.trunkIoSeconds =
            share(after.trunk.waitSeconds - before.trunk.waitSeconds, int(committed.size()));
        t.expertIoSeconds =
            share(after.cache.readSeconds - before.cache.readSeconds, int(committed.size()));
        t.computeSeconds = std::max(0.0, share(secondsSince(tt), int(committed.size())) -
                                             t.trunkIoSeconds - t.expertIoSeconds);
        s_.lastTiming = t;
        for (const Committed& c : committed) report_(c.id, t, c.proposed, c.logprobs);
        if (stop) return false;
        if (correction && keep == 1 + accepted) forced_ = *correction;
        return true;
    }

    Session::Impl& s_;
    const GenerateOptions& options_;
    GenerateResult& result_;
    Decide& decide_;
    Report& report_;
    struct Committed {
        TokenId id;
        bool proposed;
        std::optional<TokenLogprobs> logprobs;
    };

    Sampler sampler_;
    model::LogitAdjuster adjust_;
    std::optional<model::ConstrainedPick> constraint_;
    const bool spec_;
    const bool autoWidth_;
    // A rejected proposal's correction: the next token (-1: none). Not a std::optional:
    // GCC 12 warns it may be read uninitialised.
    TokenId forced_ = -1;
    SpeculationWidth width_;
    const std::size_t decodedFrom_;
    const std::size_t V_;
    std::vector<float> chunkLogits_;
    int emitted_ = 0;
};

template <typename Decide, typename Report>
void decode(Session::Impl& s, const GenerateOptions& options, GenerateResult& result,
            const std::atomic<bool>* cancel, Decide&& decide, Report&& report) {
    Decoder<std::remove_reference_t<Decide>, std::remove_reference_t<Report>> decoder(
        s, options, result, decide, report);
    while (decoder.emitted() < options.maxTokens) {
        if (cancel && cancel->load()) {
            result.cancelled = true;
            break;
        }
        if (!decoder.step()) break;
    }
}

} // namespace

GenerateResult Session::generateIds(std::span<const TokenId> prompt, const GenerateOptions& options,
                                    SessionObserver* observer, const std::atomic<bool>* cancel) {
    Impl& s = *impl_;
    GenerateResult result;
    if (prompt.empty()) throw ModelError("the prompt is empty: give at least one token id");
    if (options.constraint) throw ModelError("an output constraint applies to chat answers only");
    const auto t0 = Clock::now();
    model::PromptRows media;
    std::vector<TokenId> expanded;
    if (!options.images.empty()) {
        expanded = model::expandImages(s, prompt, options.images, media);
        prompt = expanded;
    }
    result.promptTokens = int(prompt.size());
    result.reusedPositions = prefill(s, prompt, observer, cancel, result, prompt.size(), 0,
                                     options.images.empty() ? nullptr : &media);
    result.prefillSeconds = secondsSince(t0);
    const auto t1 = Clock::now();
    if (!result.cancelled) {
        int index = 0;
        decode(
            s, options, result, cancel,
            [&](TokenId id) {
                return std::find(options.stopIds.begin(), options.stopIds.end(), id) ==
                       options.stopIds.end();
            },
            [&](TokenId id, const TokenTiming& timing, bool proposed,
                const std::optional<TokenLogprobs>& logprobs) {
                if (!observer) return;
                TokenEvent ev;
                ev.id = id;
                ev.index = index++;
                ev.timing = timing;
                ev.fromProposal = proposed;
                ev.logprobs = logprobs;
                observer->onToken(ev);
                observer->onMemory(memoryReport());
            });
    }
    result.decodeSeconds = secondsSince(t1);
    saveToCache(s, model::StateCache::Kind::Conversation, result);
    return result;
}

void Session::setStateOwner(const std::string& owner) {
    Impl& s = *impl_;
    if (!s.stateCache) return;
    // Copied first: emplace destroys the old cache before it builds the new one.
    std::filesystem::path directory = s.stateCache->directory();
    const std::uint64_t budget = s.stateCache->budgetBytes();
    s.stateCache.emplace(std::move(directory), budget,
                         model::ownedBinding(s.stateCacheBinding, owner));
}

namespace {
// `fn(ids)` for the conversation as each setting it may have been answered with renders it
// (closed, without the generation prompt).
template <typename Fn>
void forEachRendering(const Tokenizer& tok, const std::vector<ChatMessage>& history, Fn&& fn) {
    for (const bool thinking : {false, true})
        for (const char* effort : {"low", "medium", "high", "max"}) {
            ChatRenderOptions closed;
            closed.thinking = thinking;
            closed.thinkingEffort = effort;
            closed.addGenerationPrompt = false;
            try {
                fn(encodeChatSegments(tok, renderChatSegments(history, closed)));
            } catch (const ChatError&) {
                // not renderable this way: nothing was saved this way either
            }
            if (!thinking) break; // the effort is rendered only with thinking on
        }
}
} // namespace

int Session::forgetSavedStates(const std::vector<ChatMessage>& history) const {
    const Impl& s = *impl_;
    if (!s.stateCache || !s.tokenizer || history.empty()) return 0;
    int removed = 0;
    forEachRendering(*s.tokenizer, history, [&](const std::vector<TokenId>& ids) {
        removed += s.stateCache->removeConversationPrefixesOf(ids);
    });
    return removed;
}

StateCacheUsage Session::savedStateUsage(const std::vector<ChatMessage>& history) const {
    const Impl& s = *impl_;
    StateCacheUsage usage;
    if (!s.stateCache || !s.tokenizer || history.empty()) return usage;
    std::vector<std::filesystem::path> seen; // a file two renderings share counts once
    forEachRendering(*s.tokenizer, history, [&](const std::vector<TokenId>& ids) {
        for (const auto& [file, bytes] : s.stateCache->conversationPrefixesOf(ids)) {
            if (std::find(seen.begin(), seen.end(), file) != seen.end()) continue;
            seen.push_back(file);
            ++usage.files;
            usage.bytes += bytes;
        }
    });
    return usage;
}

int Session::positionsToRead(const std::vector<ChatMessage>& history,
                             const ChatRenderOptions& render) const {
    const Impl& s = *impl_;
    const std::vector<TokenId> prompt =
        chat::encodeResuming(tokenizer(), history, render, s.resume);
    bool images = s.fedHoldsImageRows();
    for (const ChatMessage& m : history) images = images || !m.images.empty();
    if (images) return int(prompt.size()); // read whole (its images' rows not counted)
    // As prefill decides: what memory holds (short of the last position, whose logits
    // are needed), else the prefix cache's longest file.
    const auto reusable = [&](const std::vector<TokenId>& ids) {
        return !ids.empty() && ids.size() < prompt.size() && isPrefix(ids, prompt);
    };
    if (s.logitsRestored && s.fed.size() == prompt.size() && isPrefix(s.fed, prompt)) return 0;
    std::size_t held = reusable(s.fed) ? s.fed.size() : 0;
    if (s.promptSnapshot && reusable(s.promptSnapshotIds))
        held = std::max(held, s.promptSnapshotIds.size());
    if (s.stateCache) held = std::max(held, s.stateCache->longestPrefixOf(prompt));
    return int(prompt.size() - held);
}

// long: render, prefill, the decode callbacks sharing one ReplyReader, and
// the stopped answer's resume point read as one turn; split, they would share a struct.
GenerateResult Session::chat(const std::vector<ChatMessage>& history,
                             const GenerateOptions& options, SessionObserver* observer,
                             const std::atomic<bool>* cancel) {
    Impl& s = *impl_;
    const Tokenizer& tok = tokenizer();
    const std::vector<TokenId> prompt =
        chat::encodeResuming(tok, history, options.render, s.resume);
    // A stopped answer continued (the last message, its channel left open): `base` is the
    // conversation before it. When the prompt is the ids the state holds (a resume point's
    // openIds), so are its last logits (they always belong to the ids fed): nothing is read.
    const bool continuing = !options.render.continueChannel.empty();
    std::vector<ChatMessage> base = history;
    std::optional<chat::ResumePoint> continued;
    if (continuing) {
        base.pop_back();
        for (const chat::ResumePoint& p : s.resume)
            if (p.openIds == prompt) continued = p;
        if (continued && s.fed == prompt && !s.fedHoldsImageRows()) s.logitsRestored = true;
    }
    // The conversation without the generation prompt (a continued answer's: before it):
    // where the snapshot goes.
    ChatRenderOptions closed = options.render;
    closed.addGenerationPrompt = false;
    closed.continueChannel.clear();
    const std::vector<TokenId> head = chat::encodeResuming(tok, base, closed, s.resume);
    const std::size_t snapshotAt =
        !head.empty() && head.size() < prompt.size() && isPrefix(head, prompt) ? head.size()
                                                                               : prompt.size();
    GenerateResult result;
    const auto t0 = Clock::now();
    // The conversation's images, in order: each pad of the prompt becomes an image's rows.
    std::vector<PreparedImage> images;
    for (const ChatMessage& m : history)
        for (const ChatImage& image : m.images) images.push_back(*image.image);
    if (!images.empty()) {
        model::PromptRows media;
        const std::vector<TokenId> expanded = model::expandImages(s, prompt, images, media);
        result.promptTokens = int(expanded.size());
        result.reusedPositions =
            prefill(s, expanded, observer, cancel, result, expanded.size(), 0, &media);
    } else {
        result.promptTokens = int(prompt.size());
        result.reusedPositions =
            prefill(s, prompt, observer, cancel, result, snapshotAt,
                    s.stateCache ? preambleEnd(tok, history, closed, prompt) : 0);
    }
    result.prefillSeconds = secondsSince(t0);

    ReplyReader reader(tok, options.render);
    const auto t1 = Clock::now();
    // decide() parses each token as it is committed; report() hands its text on in the
    // same order (a verification pass decides several before it reports them).
    std::deque<ChatParseDelta> pending;
    int index = 0;
    if (!result.cancelled)
        decode(
            s, options, result, cancel,
            [&](TokenId next) {
                ChatParseDelta delta = reader.push(next);
                const bool more = !(delta.endOfTurn || reader.done());
                pending.push_back(std::move(delta));
                return more;
            },
            [&](TokenId id, const TokenTiming& timing, bool proposed,
                const std::optional<TokenLogprobs>& logprobs) {
                ChatParseDelta delta = std::move(pending.front());
                pending.pop_front();
                if (!observer) return;
                TokenEvent ev;
                ev.id = id;
                ev.index = index++;
                ev.thinkingDelta = std::move(delta.thinking);
                ev.responseDelta = std::move(delta.response);
                ev.timing = timing;
                ev.fromProposal = proposed;
                ev.logprobs = logprobs;
                observer->onToken(ev);
                observer->onMemory(memoryReport());
            });
    if (!result.endOfTurn) {
        // The decoder's held-back bytes, then whatever the parser held until the end:
        // the observer must see every byte that lands in the reply.
        const ChatParseDelta tail = reader.finish();
        if (observer && (!tail.thinking.empty() || !tail.response.empty())) {
            TokenEvent ev;
            ev.index = int(result.ids.size());
            ev.thinkingDelta = tail.thinking;
            ev.responseDelta = tail.response;
            observer->onToken(ev);
        }
    }
    result.decodeSeconds = secondsSince(t1);
    std::vector<std::string> problems;
    result.reply = reader.reply(problems);
    if (options.constraint) options.constraint->finishReply(result.reply);
    result.problems = std::move(problems);
    // The whole answer: a continued one's text so far and what this call added.
    ChatMessage answer = result.reply;
    if (continuing) {
        answer = history.back();
        answer.reasoningContent += result.reply.reasoningContent;
        answer.content += result.reply.content;
        answer.toolCalls = result.reply.toolCalls;
    }
    ChatRenderOptions answered = options.render;
    answered.continueChannel.clear();
    if (result.cancelled && !result.endOfTurn) {
        // Stopped again: continued from a point, its prompt and every answer id so far.
        std::optional<chat::ResumePoint> point;
        if (!continuing) {
            point = chat::resumeAfterStoppedAnswer(tok, history, result.reply, answered, prompt,
                                                   s.fed, result.ids);
        } else if (continued) {
            const std::span<const TokenId> open(continued->openIds);
            std::vector<TokenId> answerIds(open.begin() + std::ptrdiff_t(continued->promptSize),
                                           open.end());
            answerIds.insert(answerIds.end(), result.ids.begin(), result.ids.end());
            point = chat::resumeAfterStoppedAnswer(
                tok, base, answer, answered, open.first(continued->promptSize), s.fed, answerIds);
        }
        if (point) s.resume.push_back(std::move(*point));
    }
    if (s.resume.size() > 8) s.resume.erase(s.resume.begin()); // older turns are rarely resent
    // Where the conversation stands, so a follow-up (after a restart too) reads only
    // itself: with the answer when the template renders it with the ids the model wrote
    // (it ended the answer, and its text encodes back to them), else up to the question.
    if (s.stateCache) {
        bool answerRendersAsWritten = false;
        if (result.endOfTurn) {
            std::vector<ChatMessage> after = base;
            if (!continuing) after = history;
            after.push_back(answer);
            answerRendersAsWritten =
                isPrefix(s.fed, chat::encodeResuming(tok, after, closed, s.resume));
        }
        saveToCache(s, model::StateCache::Kind::Conversation, result, !answerRendersAsWritten);
    }
    return result;
}

} // namespace k3
