#include "k3/session.hpp"
#include "chat/ChatResume.hpp"
#include "k3/draft.hpp"
#include "k3/speculation.hpp"
#include "model/LoadPlan.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <optional>

namespace k3 {

struct Session::Impl {
    Model model;
    std::optional<Tokenizer> tokenizer;
    InferenceState state;
    std::vector<TokenId> fed; // ids the state holds, in order
    // The state right after the last prompt: a re-rendered history usually shares the
    // prompt but not the generated tokens' exact ids, and KDA state cannot be rewound.
    std::optional<InferenceState> promptSnapshot;
    std::vector<TokenId> promptSnapshotIds;
    // Stopped answers' places in later prompts (chat/ChatResume.hpp), the latest last:
    // Regenerate and edits go back to conversations before the latest one.
    std::vector<chat::ResumePoint> resume;
    std::vector<float> logits;
    int chunk = 1;          // positions per prefill chunk
    double wallSeconds = 0; // time spent feeding tokens
    TokenTiming lastTiming; // of the last fed token

    // The draft (SessionOptions::draftDir) runs `model`'s experts, so it is declared after
    // it (destroyed first). draftFed: the ids draftState holds.
    std::optional<Model> draft;
    std::optional<InferenceState> draftState;
    std::vector<TokenId> draftFed;
    std::vector<float> draftLogits;
    std::uint64_t draftFileBytes = 0;

    Impl(Model m) : model(std::move(m)), state(model.newState()) {
        logits.assign(std::size_t(model.config().vocabSize), 0.0f);
    }
};

namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

bool isPrefix(const std::vector<TokenId>& prefix, std::span<const TokenId> of) {
    return prefix.size() <= of.size() && std::equal(prefix.begin(), prefix.end(), of.begin());
}

std::uint64_t peakRss() {
    struct rusage ru {};
    if (::getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return std::uint64_t(ru.ru_maxrss) * 1024; // kilobytes on Linux
}

} // namespace

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

ModelOptions model::modelOptionsFor(const SessionOptions& options) {
    ModelOptions mo;
    mo.layerLimit = options.layerLimit;
    mo.trunkDir = options.trunkDir;
    mo.trunkBytes = options.trunkBytes;
    mo.expertCacheBytes = options.expertCacheBytes;
    mo.expertCacheSlots = options.expertCacheSlots;
    mo.contextLength = options.contextLength;
    mo.prefillChunk = options.prefillChunk;
    mo.maxSpeculation = options.maxSpeculation;
    mo.enforceMemoryPlan = options.enforceMemoryPlan;
    mo.recordCacheTrace = options.recordCacheTrace;
    mo.streamModelTables = options.streamModelTables;
    mo.budgetSource = options.budgetSource;
    return mo;
}

Session Session::open(const SessionOptions& options) {
    const ModelOptions mo = model::modelOptionsFor(options);
    auto impl = std::make_unique<Impl>(Model::load(options.modelDir, mo));
    impl->chunk = std::max(1, impl->model.memoryPlan().chunkPositions);
    if (!options.draftDir.empty()) {
        checkDraft(options.draftDir, options.modelDir);
        ModelOptions dmo;
        dmo.draftOf = &impl->model;
        dmo.layerLimit = options.layerLimit;
        dmo.contextLength = options.contextLength;
        dmo.prefillChunk = options.prefillChunk;
        dmo.maxSpeculation = 0; // the draft's proposals are never rolled back, it is restored
        impl->draft = Model::load(options.draftDir, dmo);
        impl->draftState = impl->draft->newState();
        impl->draftLogits.assign(std::size_t(impl->draft->config().vocabSize), 0.0f);
        std::error_code ec;
        const auto size = std::filesystem::file_size(options.draftDir / "model.safetensors", ec);
        impl->draftFileBytes = ec ? 0 : size;
    }
    if (options.loadTokenizer) {
        impl->tokenizer = Tokenizer::fromDirectory(
            options.tokenizerDir.empty() ? options.modelDir : options.tokenizerDir);
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
    impl_->state.reset();
    impl_->fed.clear();
    impl_->promptSnapshot.reset();
    impl_->promptSnapshotIds.clear();
    impl_->resume.clear();
    if (impl_->draftState) impl_->draftState->reset();
    impl_->draftFed.clear();
}

MemoryReport Session::memoryReport() const {
    MemoryReport r;
    const Model& m = impl_->model;
    r.plan = m.memoryPlan();
    const MemoryStats st = m.memoryStats();
    r.trunkStreamed = st.trunkStreamed;
    r.expertsCached = st.expertsCached;
    r.trunk = st.trunk;
    r.cache = st.cache;
    r.cacheSlots = st.cacheSlots;
    r.cacheSlotBytes = st.cacheSlotBytes;
    r.peakRssBytes = peakRss();
    if (impl_->draft) {
        r.draftBytes =
            impl_->draft->weightBytes() + (impl_->draftState ? impl_->draftState->heldBytes() : 0);
        r.draftFileBytes = impl_->draftFileBytes;
    }
    r.wallSeconds = impl_->wallSeconds;
    return r;
}

double MemoryReport::ioShare() const {
    return wallSeconds > 0 ? (trunk.waitSeconds + cache.readSeconds) / wallSeconds : 0;
}

std::string MemoryReport::format() const {
    std::string out;
    char buf[256];
    if (expertsCached) {
        std::snprintf(buf, sizeof buf,
                      "cache\n  slots        : %d of %s = %s arena\n"
                      "  requests     : %llu  hits %llu (%.2f%%)  misses %llu  evictions %llu\n"
                      "                 TRUE resident hit rate %.2f%% (prefetch hits %llu)\n",
                      cacheSlots, formatBytes(cacheSlotBytes).c_str(),
                      formatBytes(std::uint64_t(cacheSlots) * cacheSlotBytes).c_str(),
                      (unsigned long long)cache.requests, (unsigned long long)cache.hits,
                      100.0 * cache.hitRate(), (unsigned long long)cache.misses,
                      (unsigned long long)cache.evictions, 100.0 * cache.residentHitRate(),
                      (unsigned long long)cache.prefetchHits);
        out += buf;
        std::snprintf(buf, sizeof buf, "  read from disk: %s in %.2f s (%llu reads, %llu failed)\n",
                      formatBytes(cache.bytesRead).c_str(), cache.readSeconds,
                      (unsigned long long)cache.diskReads, (unsigned long long)cache.failedReads);
        out += buf;
    } else {
        out += "cache\n  routed experts resident (no cache)\n";
    }
    std::snprintf(buf, sizeof buf,
                  "I/O share of wall clock: %.1f%%  (trunk %.2f s + experts %.2f s of %.2f s)\n",
                  100.0 * ioShare(), trunk.waitSeconds, cache.readSeconds, wallSeconds);
    out += buf;
    if (trunkStreamed) {
        const double mbps =
            trunk.ioSeconds > 0 ? double(trunk.bytesRead) / 1e6 / trunk.ioSeconds : 0;
        std::snprintf(
            buf, sizeof buf,
            "trunk\n  pinned %d/%d layers, ring %d slots of %s\n"
            "  binds %llu, pinned hits %llu, reads %llu\n  read %s in %.2f s (%.0f MB/s)\n",
            trunk.pinnedLayers, trunk.totalLayers, trunk.ringSlots,
            formatBytes(trunk.ringSlotBytes).c_str(), (unsigned long long)trunk.binds,
            (unsigned long long)trunk.pinnedHits, (unsigned long long)trunk.reads,
            formatBytes(trunk.bytesRead).c_str(), trunk.ioSeconds, mbps);
        out += buf;
        if (trunk.piecewiseLayers > 0) {
            std::snprintf(
                buf, sizeof buf,
                "  %d layers larger than the slot, streamed in 2 pieces (%llu piece reads)\n",
                trunk.piecewiseLayers, (unsigned long long)trunk.pieceReads);
            out += buf;
        }
    } else {
        out += "trunk\n  resident (no packed trunk)\n";
    }
    if (draftBytes > 0) {
        std::snprintf(buf, sizeof buf, "draft\n  %s in memory (weights and state), %s on disk\n",
                      formatBytes(draftBytes).c_str(), formatBytes(draftFileBytes).c_str());
        out += buf;
    }
    std::snprintf(buf, sizeof buf, "PEAK RSS for the whole run: %s   <- quote this, not the plan\n",
                  formatBytes(peakRssBytes).c_str());
    out += buf;
    return out;
}

namespace {
// Runs a chunk of positions (one, when decoding), records them as held by the state,
// adds their validity figures to `result` and splits the time into trunk wait, expert
// reads and compute. The logits are the last position's.
void feed(Session::Impl& s, std::span<const TokenId> ids, GenerateResult& result) {
    const MemoryStats before = s.model.memoryStats();
    const auto t0 = Clock::now();
    const TokenStats st = s.model.forward(s.state, ids, s.logits);
    const double total = secondsSince(t0);
    const MemoryStats after = s.model.memoryStats();
    s.wallSeconds += total;
    s.lastTiming.trunkIoSeconds = after.trunk.waitSeconds - before.trunk.waitSeconds;
    s.lastTiming.expertIoSeconds = after.cache.readSeconds - before.cache.readSeconds;
    s.lastTiming.computeSeconds =
        std::max(0.0, total - s.lastTiming.trunkIoSeconds - s.lastTiming.expertIoSeconds);
    result.droppedExperts += st.droppedExperts;
    result.nonFinite = result.nonFinite || st.nonFinite;
    s.fed.insert(s.fed.end(), ids.begin(), ids.end());
}

void feed(Session::Impl& s, TokenId id, GenerateResult& result) {
    feed(s, std::span<const TokenId>(&id, 1), result);
}
} // namespace

// Brings the state to hold exactly `prompt`, reusing what it can. Returns the reused count.
namespace {
// `snapshotAt`: where the prompt snapshot is taken (a chunk ends there). A chat puts it
// before the generation prompt (the assistant header), which every follow-up shares
// whether the answer was kept, stopped or re-rendered without its thinking.
int prefill(Session::Impl& s, std::span<const TokenId> prompt, SessionObserver* observer,
            const std::atomic<bool>* cancel, GenerateResult& result, std::size_t snapshotAt) {
    // Refused before anything is computed: the KV cache the plan holds has this many places.
    const int context = s.model.memoryPlan().contextLength;
    if (context > 0 && int(prompt.size()) >= context)
        throw ContextFull(int(prompt.size()), context);
    // The logits of the last prompt position are needed, so at least one position is
    // always recomputed.
    const auto reusable = [&](const std::vector<TokenId>& ids) {
        return !ids.empty() && ids.size() < prompt.size() && isPrefix(ids, prompt);
    };
    if (reusable(s.fed)) {
        // keep the live state
    } else if (s.promptSnapshot && reusable(s.promptSnapshotIds)) {
        // The live state goes first, then the snapshot is copied back: two copies at most.
        s.state = std::move(*s.promptSnapshot);
        s.promptSnapshot = s.state.clone();
        s.fed = s.promptSnapshotIds;
    } else {
        s.state.reset();
        s.fed.clear();
    }
    const int reused = int(s.fed.size());
    SessionProgress progress;
    progress.stage = "prefill";
    progress.total = std::int64_t(prompt.size() - s.fed.size());
    const MemoryStats start = s.model.memoryStats();
    const auto t0 = Clock::now();
    // Said before the first chunk too: on a streamed trunk one chunk can take minutes.
    if (observer && progress.total > 0) observer->onProgress(progress);
    // Chunks: each reads the trunk once and each of its experts once. Cancel is checked
    // between chunks; the state then holds whole chunks, which the next turn reuses.
    for (std::size_t i = s.fed.size(); i < prompt.size();) {
        if (cancel && cancel->load()) {
            result.cancelled = true;
            break;
        }
        std::size_t n = std::min(std::size_t(s.chunk), prompt.size() - i);
        if (i < snapshotAt && i + n > snapshotAt) n = snapshotAt - i;
        feed(s, prompt.subspan(i, n), result);
        i += n;
        if (i == snapshotAt) {
            s.promptSnapshot.reset(); // the old one goes before the new one is made
            s.promptSnapshot = s.state.clone();
            s.promptSnapshotIds = s.fed;
        }
        const MemoryStats now = s.model.memoryStats();
        progress.done += std::int64_t(n);
        ++progress.chunks;
        progress.seconds = secondsSince(t0);
        progress.trunkBytes = now.trunk.bytesRead - start.trunk.bytesRead;
        progress.expertBytes = now.cache.bytesRead - start.cache.bytesRead;
        if (observer) observer->onProgress(progress);
    }
    result.prefillPositions = int(progress.done);
    result.prefillChunks = progress.chunks;
    result.prefillTrunkBytes = progress.trunkBytes;
    result.prefillExpertBytes = progress.expertBytes;
    return reused;
}
} // namespace

namespace {

double share(double total, int parts) {
    return parts > 0 ? total / parts : 0;
}

// Up to k tokens the draft's greedy decode continues `context` with (the conversation
// and the pending token). The draft first catches up with the conversation (in chunks;
// from scratch when the conversation is not a continuation of what it holds), then
// proposes from a copy of its state point, which is put back afterwards: the draft never
// needs a rollback.
std::vector<TokenId> proposeWithDraft(Session::Impl& s, std::span<const TokenId> context, int k) {
    const Model& d = *s.draft;
    InferenceState& st = *s.draftState;
    const std::size_t known = context.size() - 1;
    if (!isPrefix(s.draftFed, context.first(known))) {
        st.reset();
        s.draftFed.clear();
    }
    const std::size_t chunk = std::size_t(std::max(1, d.memoryPlan().chunkPositions));
    while (s.draftFed.size() < known) {
        const std::size_t n = std::min(chunk, known - s.draftFed.size());
        d.forward(st, context.subspan(s.draftFed.size(), n), s.draftLogits);
        s.draftFed.insert(s.draftFed.end(), context.begin() + std::ptrdiff_t(s.draftFed.size()),
                          context.begin() + std::ptrdiff_t(s.draftFed.size() + n));
    }
    InferenceState saved = st.clone();
    std::vector<TokenId> out;
    TokenId current = context.back();
    for (int i = 0; i < k; ++i) {
        d.forward(st, current, s.draftLogits);
        current = argmax(s.draftLogits);
        out.push_back(current);
    }
    st = std::move(saved);
    return out;
}

// The answer's tokens, one trunk pass per token, or (greedy with speculation on) several:
// the pending token and up to k proposals verified in one chunk, the longest prefix equal
// to the model's own argmax kept, the state rolled back to it. Every id is the one serial
// greedy decode gives. `decide(id)` says whether the turn goes on after id (false: id
// ends it and is not fed); `report(id, timing, proposed)` follows each decide.
template <typename Decide, typename Report>
void decode(Session::Impl& s, const GenerateOptions& options, GenerateResult& result,
            const std::atomic<bool>* cancel, Decide&& decide, Report&& report) {
    Sampler sampler(options.sampling);
    const bool spec = options.speculation != 0;
    // Greedy --spec auto follows measured seconds too. A fixed width is judged by
    // acceptance only, so its passes (and counts) do not depend on the machine's load;
    // so is sampling, whose draws depend on what was proposed: a seed must reproduce.
    const bool autoWidth = options.speculation < 0 && options.sampling.temperature <= 0.0f;
    // A rejected proposal's correction: the next token (-1: none). Not a std::optional:
    // GCC 12 warns it may be read uninitialised.
    TokenId forced = -1;
    SpeculationWidth width(options.speculation > 0 ? options.speculation : 16,
                           options.speculation > 0 ? options.speculation : 4);
    const std::size_t V = s.logits.size();
    std::vector<float> chunkLogits;
    int emitted = 0;
    while (emitted < options.maxTokens) {
        if (cancel && cancel->load()) {
            result.cancelled = true;
            break;
        }
        const auto tt = Clock::now();
        s.lastTiming = {};
        const TokenId next = forced >= 0 ? forced : sampler.sample(s.logits);
        forced = -1;
        result.ids.push_back(next);
        ++emitted;
        // A token that is not fed still took its sampling time.
        const auto sampledOnly = [&] {
            TokenTiming t;
            t.computeSeconds = secondsSince(tt);
            return t;
        };
        if (!decide(next)) {
            report(next, sampledOnly(), false);
            result.endOfTurn = true;
            break;
        }
        if (emitted == options.maxTokens) { // the last token's logits are not needed
            report(next, sampledOnly(), false);
            break;
        }
        const int context = s.model.memoryPlan().contextLength;
        if (context > 0 && s.state.length() + 1 > context) { // no place left to feed it
            report(next, sampledOnly(), false);
            result.contextFull = true;
            break;
        }
        std::vector<TokenId> proposals;
        if (spec && width.propose()) {
            const int room = context > 0 ? context - s.state.length() - 1 : width.width();
            const int k = std::min({width.width(), options.maxTokens - emitted, room,
                                    s.model.memoryPlan().maxSpeculation});
            // The conversation so far plus `next`, without copying it every step.
            s.fed.push_back(next);
            proposals = s.draft ? proposeWithDraft(s, s.fed, k) : proposePromptLookup(s.fed, k);
            s.fed.pop_back();
        }
        if (proposals.empty()) { // one position, as serial decode
            feed(s, next, result);
            ++result.decodePasses;
            if (autoWidth) width.recordSerial(secondsSince(tt));
            TokenTiming t = s.lastTiming;
            t.computeSeconds =
                std::max(0.0, secondsSince(tt) - t.trunkIoSeconds - t.expertIoSeconds);
            report(next, t, false);
            continue;
        }
        // Verify: the pending token and the proposals in one chunk, every position's logits.
        std::vector<TokenId> chunk{next};
        chunk.insert(chunk.end(), proposals.begin(), proposals.end());
        const int start = s.state.length();
        chunkLogits.resize(chunk.size() * V);
        const MemoryStats before = s.model.memoryStats();
        const auto t0 = Clock::now();
        const TokenStats st = s.model.forward(s.state, chunk, chunkLogits, /*keepRollback=*/true);
        const double passSeconds = secondsSince(t0);
        const MemoryStats after = s.model.memoryStats();
        s.wallSeconds += passSeconds;
        result.droppedExperts += st.droppedExperts;
        result.nonFinite = result.nonFinite || st.nonFinite;
        ++result.decodePasses;
        ++result.verifyPasses;
        result.proposed += int(proposals.size());
        // Greedy: kept while equal to the argmax. Sampled: each kept with probability p(d)
        // (exact in distribution); the first rejection's correction is the next token.
        int accepted = 0;
        std::optional<TokenId> correction;
        while (accepted < int(proposals.size())) {
            TokenId c = 0;
            if (sampler.acceptProposal(
                    std::span<const float>(chunkLogits.data() + std::size_t(accepted) * V, V),
                    proposals[std::size_t(accepted)], c)) {
                ++accepted;
                continue;
            }
            if (options.sampling.temperature > 0.0f) correction = c;
            break;
        }
        // Walk the accepted proposals as if decoded one by one: one may end the turn or
        // reach maxTokens, and then it is not fed.
        int keep = 1; // `next` is fed
        bool stop = false;
        std::vector<std::pair<TokenId, bool>> committed{{next, false}};
        for (int a = 0; a < accepted; ++a) {
            const TokenId d = proposals[std::size_t(a)];
            result.ids.push_back(d);
            ++emitted;
            ++result.acceptedProposals;
            committed.emplace_back(d, true);
            if (!decide(d)) {
                result.endOfTurn = true;
                stop = true;
                break;
            }
            if (emitted == options.maxTokens) {
                stop = true;
                break;
            }
            ++keep;
        }
        s.model.rollback(s.state, start + keep);
        s.fed.insert(s.fed.end(), chunk.begin(), chunk.begin() + keep);
        std::copy_n(chunkLogits.data() + std::size_t(keep - 1) * V, V, s.logits.data());
        width.record(int(proposals.size()), accepted,
                     autoWidth ? share(secondsSince(tt), int(committed.size())) : 0.0);
        // The pass's time, shared by the tokens it committed.
        TokenTiming t;
        t.trunkIoSeconds =
            share(after.trunk.waitSeconds - before.trunk.waitSeconds, int(committed.size()));
        t.expertIoSeconds =
            share(after.cache.readSeconds - before.cache.readSeconds, int(committed.size()));
        t.computeSeconds = std::max(0.0, share(secondsSince(tt), int(committed.size())) -
                                             t.trunkIoSeconds - t.expertIoSeconds);
        s.lastTiming = t;
        for (const auto& [id, proposed] : committed) report(id, t, proposed);
        if (stop) break;
        if (correction && keep == 1 + accepted) forced = *correction;
    }
}

} // namespace

GenerateResult Session::generateIds(std::span<const TokenId> prompt, const GenerateOptions& options,
                                    SessionObserver* observer, const std::atomic<bool>* cancel) {
    Impl& s = *impl_;
    GenerateResult result;
    if (prompt.empty()) throw ModelError("the prompt is empty: give at least one token id");
    result.promptTokens = int(prompt.size());
    const auto t0 = Clock::now();
    result.reusedPositions = prefill(s, prompt, observer, cancel, result, prompt.size());
    result.prefillSeconds = secondsSince(t0);
    const auto t1 = Clock::now();
    if (!result.cancelled) {
        int index = 0;
        decode(
            s, options, result, cancel, [](TokenId) { return true; },
            [&](TokenId id, const TokenTiming& timing, bool proposed) {
                if (!observer) return;
                TokenEvent ev;
                ev.id = id;
                ev.index = index++;
                ev.timing = timing;
                ev.fromProposal = proposed;
                observer->onToken(ev);
                observer->onMemory(memoryReport());
            });
    }
    result.decodeSeconds = secondsSince(t1);
    return result;
}

// Over 80 lines: render, prefill, the decode callbacks sharing one parser and decoder, and
// the stopped answer's resume point read as one turn; split, they would share a struct.
GenerateResult Session::chat(const std::vector<ChatMessage>& history,
                             const GenerateOptions& options, SessionObserver* observer,
                             const std::atomic<bool>* cancel) {
    Impl& s = *impl_;
    const Tokenizer& tok = tokenizer();
    const std::vector<TokenId> prompt =
        chat::encodeResuming(tok, history, options.render, s.resume);
    // The conversation without the generation prompt: where the snapshot goes.
    ChatRenderOptions closed = options.render;
    closed.addGenerationPrompt = false;
    const std::vector<TokenId> head = chat::encodeResuming(tok, history, closed, s.resume);
    const std::size_t snapshotAt =
        !head.empty() && head.size() < prompt.size() && isPrefix(head, prompt) ? head.size()
                                                                               : prompt.size();
    GenerateResult result;
    result.promptTokens = int(prompt.size());
    const auto t0 = Clock::now();
    result.reusedPositions = prefill(s, prompt, observer, cancel, result, snapshotAt);
    result.prefillSeconds = secondsSince(t0);

    ChatOutputParser parser = ChatOutputParser::forOptions(options.render);
    StreamDecoder decoder(tok);
    const auto t1 = Clock::now();
    // decide() parses each token as it is committed; report() hands its text on in the
    // same order (a verification pass decides several before it reports them).
    std::deque<ChatParseDelta> pending;
    int index = 0;
    if (!result.cancelled)
        decode(
            s, options, result, cancel,
            [&](TokenId next) {
                ChatParseDelta delta;
                if (tok.isAddedToken(next)) {
                    // Text held back for an incomplete UTF-8 sequence belongs before the marker.
                    const ChatParseDelta before = parser.feedText(decoder.flush());
                    delta = parser.feedSpecial(tok.tokenBytes(next));
                    delta.thinking = before.thinking + delta.thinking;
                    delta.response = before.response + delta.response;
                } else {
                    delta = parser.feedText(decoder.push(next));
                }
                const bool more = !(delta.endOfTurn || parser.finished());
                pending.push_back(std::move(delta));
                return more;
            },
            [&](TokenId id, const TokenTiming& timing, bool proposed) {
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
                observer->onToken(ev);
                observer->onMemory(memoryReport());
            });
    if (!result.endOfTurn) {
        // The decoder's held-back bytes, then whatever the parser held until the end:
        // the observer must see every byte that lands in the reply.
        ChatParseDelta tail = parser.feedText(decoder.flush());
        const ChatParseDelta released = parser.finish();
        tail.thinking += released.thinking;
        tail.response += released.response;
        if (observer && (!tail.thinking.empty() || !tail.response.empty())) {
            TokenEvent ev;
            ev.index = int(result.ids.size());
            ev.thinkingDelta = tail.thinking;
            ev.responseDelta = tail.response;
            observer->onToken(ev);
        }
    }
    parser.finish();
    result.decodeSeconds = secondsSince(t1);
    result.reply.role = ChatRole::Assistant;
    result.reply.content = parser.response();
    result.reply.reasoningContent = parser.thinking();
    result.problems = parser.problems();
    result.reply.toolCalls = parseToolCalls(parser.otherChannels(), &result.problems);
    if (result.cancelled && !result.endOfTurn)
        if (auto point = chat::resumeAfterStoppedAnswer(tok, history, result.reply, options.render,
                                                        prompt, s.fed, result.ids))
            s.resume.push_back(std::move(*point));
    if (s.resume.size() > 8) s.resume.erase(s.resume.begin()); // older turns are rarely resent
    return result;
}

} // namespace k3
