// `k3 MODEL_DIR (--prompt T | --prompt-file F | --ids 1,2,3) ...`: the seed's batch run.
// Prints the plan, one line per token and a summary; writes the run report (--out).
#include "CliSupport.hpp"
#include "Commands.hpp"
#include "SessionLoader.hpp"

#include <k3/chat.hpp>
#include <k3/console.hpp>
#include <k3/memory_plan.hpp>
#include <k3/presets.hpp>
#include <k3/read_file.hpp>
#include <k3/session.hpp>
#include <k3/version.hpp>
#include <k3/vision.hpp>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace k3cli {

namespace {

constexpr std::size_t kMaxPromptTokens = 32768; // the seed's engine limit

std::string readPromptFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw usageError("--prompt-file " + path + ": " + std::strerror(errno));
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) throw usageError("--prompt-file " + path + ": read error");
    return text.str();
}

// `--out -`: the report is the only thing on stdout (so `k3 ... --out - | jq` works);
// everything else printed to stdout goes to stderr while this lives.
class ReportOnStdout {
public:
    explicit ReportOnStdout(bool active) {
        if (!active) return;
        report_ = k3::console::divertStdout();
        if (report_ < 0)
            throw CommandError{kExitFailure, std::string("--out -: cannot set up stdout: ") +
                                                 std::strerror(errno)};
    }
    ~ReportOnStdout() { k3::console::restoreStdout(report_); }
    ReportOnStdout(const ReportOnStdout&) = delete;
    ReportOnStdout& operator=(const ReportOnStdout&) = delete;

    // The whole report to the real stdout.
    void write(const std::string& text) const {
        if (!k3::console::writeDiverted(report_, text))
            throw k3::ChatError(std::string("writing to stdout failed: ") + std::strerror(errno));
    }

private:
    std::intptr_t report_ = -1;
};

// An output file is checked before the model loads: a run is not thrown away at the end
// because --out names a folder, a device or a read-only file.
void checkOutputFile(const char* option, const std::string& path) {
    try {
        k3::resolveOutputFile(path);
    } catch (const k3::ChatError& error) {
        throw usageError(std::string(option) + ": " + error.what());
    }
}

// Quoted and escaped, so a token's bytes are visible on one line.
std::string jsonQuoted(const std::string& text) {
    return nlohmann::ordered_json(text).dump(-1, ' ', false,
                                             nlohmann::ordered_json::error_handler_t::replace);
}

struct TokenRecord {
    k3::TokenId id = 0;
    std::string piece;
    double seconds = 0;
    double cacheHitPercent = -1; // this step's expert requests served without a read; -1: none
    double gbRead = 0;           // trunk + expert bytes read from disk so far
};

class BatchObserver : public k3::SessionObserver {
public:
    BatchObserver(const k3::Session& session, bool captureLogits)
        : session_(session), captureLogits_(captureLogits), progress_(stderrIsTty()) {
        if (session.hasTokenizer()) decoder_.emplace(session.tokenizer());
    }

    void onProgress(const k3::SessionProgress& p) override {
        // Prefill reports after each fed position, so at the last one the logits are the
        // first step's (what --dump-logits wants), before any token is sampled.
        if (captureLogits_ && p.stage == "prefill" && p.done == p.total) {
            const auto logits = session_.lastLogits();
            firstLogits.assign(logits.begin(), logits.end());
        }
        if (p.stage == "prefill" && p.done == p.total) { // the prompt's requests are not a step's
            const k3::MemoryReport memory = session_.memoryReport();
            seenRequests_ = memory.cache.requests;
            seenHits_ = memory.cache.residentHits;
        }
        if (progress_ && progressDue(p.done == p.total)) {
            std::fprintf(stderr, "\r%s %lld/%lld", p.stage.c_str(), (long long)p.done,
                         (long long)p.total);
            if (p.done == p.total) std::fprintf(stderr, "\r\033[2K");
            std::fflush(stderr);
        }
    }

    void onToken(const k3::TokenEvent& ev) override {
        TokenRecord record{ev.id, {}, ev.timing.totalSeconds()};
        if (decoder_) record.piece = decoder_->push(ev.id);
        // The session has just fed this token (its timing is that forward's): the cache
        // counters' growth since the previous token is this step's TRUE hit rate (a batch
        // read just before use came off the disk: not a hit).
        const k3::MemoryReport memory = session_.memoryReport();
        if (memory.expertsCached) {
            const std::uint64_t requests = memory.cache.requests - seenRequests_;
            const std::uint64_t hits = memory.cache.residentHits - seenHits_; // TRUE hits
            if (requests > 0) record.cacheHitPercent = 100.0 * double(hits) / double(requests);
            seenRequests_ = memory.cache.requests;
            seenHits_ = memory.cache.residentHits;
        }
        record.gbRead = double(memory.trunk.bytesRead + memory.cache.bytesRead) / 1e9;
        // The last token is never fed, so its time is only the sampling: no rate for it.
        char rate[32] = "-";
        if (record.seconds > 1e-4) std::snprintf(rate, sizeof rate, "%.3f", 1.0 / record.seconds);
        char hit[16] = "-";
        if (record.cacheHitPercent >= 0)
            std::snprintf(hit, sizeof hit, "%.1f", record.cacheHitPercent);
        std::printf("%-6d %-10d %-10.3f %-7s %-9.3f %-9s %s\n", ev.index, int(ev.id),
                    record.seconds, hit, record.gbRead, rate,
                    decoder_ ? jsonQuoted(record.piece).c_str() : "");
        std::fflush(stdout);
        tokens.push_back(std::move(record));
    }

    std::string flushText() { return decoder_ ? decoder_->flush() : std::string(); }

    std::vector<TokenRecord> tokens;
    std::vector<float> firstLogits;

private:
    const k3::Session& session_;
    bool captureLogits_;
    bool progress_;
    std::optional<k3::StreamDecoder> decoder_;
    std::uint64_t seenRequests_ = 0, seenHits_ = 0;
};

// `memory`: the session's report after the run (read once by the caller).
nlohmann::ordered_json planJson(const MemoryArgs& m, const k3::Session& session,
                                const k3::MemoryReport& memory) {
    nlohmann::ordered_json plan;
    plan["streaming"] = !m.trunkDir.empty();            // the trunk streams from trunk.bin
    plan["expert_cache"] = m.cacheGB && *m.cacheGB > 0; // routed experts through the cache
    plan["resident_weight_bytes"] = session.model().weightBytes();
    plan["preset"] = m.preset.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(m.preset);
    plan["preset_resolved"] = m.resolvedPreset.empty() ? nlohmann::ordered_json()
                                                       : nlohmann::ordered_json(m.resolvedPreset);
    plan["trunk_gb"] = m.trunkGB ? nlohmann::ordered_json(*m.trunkGB) : nlohmann::ordered_json();
    plan["cache_gb"] = m.cacheGB ? nlohmann::ordered_json(*m.cacheGB) : nlohmann::ordered_json();
    plan["trunk_dir"] =
        m.trunkDir.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(m.trunkDir);
    plan["pin_mode"] = k3::pinModeName(m.pinMode);
    plan["dump_cache_trace"] = m.cacheTraceDir.empty() ? nlohmann::ordered_json()
                                                       : nlohmann::ordered_json(m.cacheTraceDir);
    plan["memory"] = memory.format();
    return plan;
}

void printPlan(const MemoryArgs& m, const k3::Session& session) {
    // Everything added up before anything was allocated (the engine's plan).
    std::printf("%s", session.memoryReport().plan.format().c_str());
    std::printf("  weights (resident)  %s\n",
                k3::formatBytes(session.model().weightBytes()).c_str());
    if (!m.preset.empty() || m.trunkGB || m.cacheGB || !m.trunkDir.empty()) {
        std::string asked = m.preset.empty() ? std::string() : "preset " + m.preset;
        if (!m.resolvedPreset.empty() && m.resolvedPreset != m.preset)
            asked += " (" + m.resolvedPreset + ")";
        char numbers[96];
        std::snprintf(numbers, sizeof numbers, "trunk %.2f GB / cache %.2f GB",
                      m.trunkGB.value_or(0.0), m.cacheGB.value_or(0.0));
        std::printf("  asked               %s%s%s\n", asked.c_str(), asked.empty() ? "" : ", ",
                    numbers);
        std::printf("                      %s\n",
                    m.trunkDir.empty() ? "(trunk resident: give --trunk DIR to stream it)"
                                       : "(trunk streams from the packed trunk)");
    }
}

// --image files, decoded and preprocessed before any weight is read: a bad file is a
// usage error naming it, as is a text-only checkpoint.
std::vector<k3::PreparedImage> prepareImages(const RunArgs& args) {
    std::vector<k3::PreparedImage> images;
    if (args.images.empty()) return images;
    const std::filesystem::path config = std::filesystem::path(args.model.modelDir) / "config.json";
    if (!k3::parseVisionConfig(k3::readRegularFile(config, k3::kMaxConfigBytes, "config"),
                               config.string()))
        throw usageError("--image: " + args.model.modelDir +
                         " is a text-only checkpoint (config.json has no vision_config); it "
                         "cannot read images");
    for (const std::string& file : args.images) {
        try {
            images.push_back(k3::prepareImage(k3::readImageFile(file), args.imagePatchLimit));
        } catch (const k3::Error& e) {
            throw usageError(std::string("--image ") + e.what());
        }
    }
    return images;
}

} // namespace

std::vector<std::int32_t> parseIdList(const std::string& text) {
    std::vector<std::int32_t> ids;
    std::size_t at = 0;
    while (at <= text.size()) {
        std::size_t comma = text.find(',', at);
        if (comma == std::string::npos) comma = text.size();
        std::string item = text.substr(at, comma - at);
        const auto first = item.find_first_not_of(" \t");
        const auto last = item.find_last_not_of(" \t");
        item = first == std::string::npos ? std::string() : item.substr(first, last - first + 1);
        std::int32_t value = 0;
        const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
        if (item.empty() || ec != std::errc() || end != item.data() + item.size() || value < 0)
            throw usageError("--ids \"" + text + "\": \"" + item + "\" (item " +
                             std::to_string(ids.size() + 1) +
                             ") is not a token id; give comma-separated non-negative integers, "
                             "e.g. --ids 1008,10484,318");
        ids.push_back(value);
        at = comma + 1;
    }
    return ids;
}

ResolvedSampling resolveSampling(const SamplingArgs& args) {
    ResolvedSampling r;
    r.seedGiven = args.seed.has_value();
    r.seed = args.seed.value_or(0);
    const bool asked = args.temperature || args.topP || args.seed;
    if (!asked || args.greedy) return r;
    r.sampling = true;
    r.temperature = float(args.temperature.value_or(1.0));
    r.topP = float(args.topP.value_or(0.95));
    if (r.temperature == 0.0f) r.sampling = false; // temperature 0 is argmax
    return r;
}

int runBatch(const RunArgs& args) {
    const int sources =
        int(args.prompt.has_value()) + int(args.promptFile.has_value()) + int(args.ids.has_value());
    const bool continuing = !args.loadState.empty();
    if (args.gen == 0 && args.saveState.empty() && args.model.stateCacheDir.empty())
        throw usageError("--gen 0 generates nothing: it is for reading a prompt into "
                         "--save-state FILE or --state-cache DIR");
    if (sources > 1 || (sources == 0 && !continuing))
        throw usageError(std::string(sources == 0 ? "no prompt given"
                                                  : "more than one prompt "
                                                    "given") +
                         ": pass exactly one of --prompt TEXT, --prompt-file FILE or --ids "
                         "1,2,3 (or --chat for a conversation)");
    std::vector<k3::TokenId> promptIds;
    std::string promptText;
    if (args.ids) promptIds = parseIdList(*args.ids);
    if (args.prompt) promptText = *args.prompt;
    if (args.promptFile) promptText = readPromptFile(*args.promptFile);
    if (sources == 1 && !args.ids && promptText.empty())
        throw usageError(std::string(args.prompt ? "--prompt" : "--prompt-file") +
                         " is empty: give the text to continue");

    const bool reportToStdout = args.out == "-";
    if (!reportToStdout) checkOutputFile("--out", args.out);
    if (!args.dumpLogits.empty()) checkOutputFile("--dump-logits", args.dumpLogits);
    if (!args.saveState.empty()) checkOutputFile("--save-state", args.saveState);

    const MemoryArgs& memory = args.model.memory;
    if (!memory.cacheTraceDir.empty() && !(memory.cacheGB && *memory.cacheGB > 0))
        throw usageError("--dump-cache-trace " + memory.cacheTraceDir +
                         ": the trace records expert-cache requests, and this run has no "
                         "expert cache; give --cache-gb X or a --preset with a cache");

    // The ids and images are checked before any weight is read.
    const k3::ModelConfig config = readConfigOrThrow(args.model.modelDir);
    const std::vector<k3::PreparedImage> images = prepareImages(args);
    for (std::size_t i = 0; i < promptIds.size(); ++i)
        if (promptIds[i] >= config.vocabSize)
            throw usageError("--ids: token id " + std::to_string(promptIds[i]) + " (item " +
                             std::to_string(i + 1) + ") is outside 0.." +
                             std::to_string(config.vocabSize - 1) + " (vocab_size)");

    const ReportOnStdout stdoutReport(reportToStdout);
    LoadedSession loaded =
        openModel(args.model, args.ids ? TokenizerNeed::IfPresent : TokenizerNeed::Required);
    k3::Session& session = loaded.session;
    if (sources == 1 && !args.ids) {
        // Each image's prompt (special markers from us, never from the text), then the text.
        for (const k3::PreparedImage& image : images) {
            const auto marked = session.tokenizer().encodeWithSpecial(k3::imagePrompt(image.plan));
            promptIds.insert(promptIds.end(), marked.begin(), marked.end());
        }
        const auto text = session.tokenizer().encode(promptText);
        promptIds.insert(promptIds.end(), text.begin(), text.end());
    }
    if (sources == 1 && promptIds.empty()) throw usageError("the prompt encodes to no tokens");
    int restored = 0;
    if (continuing) { // the state's ids, then the new ones: only those are read
        session.loadState(args.loadState);
        const std::span<const k3::TokenId> held = session.heldIds();
        restored = int(held.size());
        promptIds.insert(promptIds.begin(), held.begin(), held.end());
    }
    if (promptIds.size() > kMaxPromptTokens)
        throw usageError("the prompt is " + std::to_string(promptIds.size()) +
                         " tokens; the limit is " + std::to_string(kMaxPromptTokens));
    if (args.ids && session.hasTokenizer())
        promptText = k3::sanitizeUtf8(session.tokenizer().decode(promptIds));

    const ResolvedSampling sampling = resolveSampling(args.model.sampling);
    std::printf("Kimi K3, k3 %s, CPU\n", k3::kVersion);
    std::printf("  model    : %s\n", terminalSafe(args.model.modelDir).c_str());
    std::printf("  config   : %s\n", terminalSafe(session.config().summary()).c_str());
    std::printf("  prompt   : %zu tokens, generating %d (%s)\n", promptIds.size(), args.gen,
                sampling.sampling ? "sampling" : "greedy");
    for (std::size_t i = 0; i < images.size(); ++i)
        std::printf("  image    : %s, %dx%d read at %dx%d: %d prompt positions\n",
                    terminalSafe(args.images[i]).c_str(), images[i].plan.width,
                    images[i].plan.height, images[i].plan.resizedWidth,
                    images[i].plan.resizedHeight, images[i].plan.tokens());
    std::printf("  loaded   : %d layers in %s\n\n", session.model().layersBound(),
                formatDuration(loaded.loadSeconds).c_str());
    printPlan(args.model.memory, session);
    std::printf("\n%-6s %-10s %-10s %-7s %-9s %-9s %s\n", "STEP", "TOKEN", "SECONDS", "TRUE %",
                "GB READ", "TOK/S", "TEXT");
    std::printf("--------------------------------------------------------------------\n");
    std::fflush(stdout);

    installInterruptHandler(true);
    BatchObserver observer(session, !args.dumpLogits.empty());
    if (!args.dumpLogits.empty() && restored == int(promptIds.size())) {
        // Nothing to read: the first step's logits are the loaded ones.
        const auto logits = session.lastLogits();
        observer.firstLogits.assign(logits.begin(), logits.end());
    }
    k3::GenerateOptions options;
    options.maxTokens = args.gen;
    options.speculation = args.model.speculation;
    options.sampling.temperature = sampling.sampling ? sampling.temperature : 0.0f;
    options.sampling.topP = sampling.sampling ? sampling.topP : 1.0f;
    options.sampling.seed = sampling.seed;
    options.images = images;
    k3::GenerateResult result;
    try {
        result = session.generateIds(promptIds, options, &observer, &cancelFlag());
    } catch (const k3::ContextFull& error) {
        throw usageError(std::string(error.what()) + " (--context " +
                         std::to_string(error.context()) + "; raise it or shorten the prompt)");
    } catch (const std::exception& error) {
        throw CommandError{kExitFailure, std::string("the forward pass failed: ") + error.what()};
    }
    const std::string tail = observer.flushText();
    if (!tail.empty() && !observer.tokens.empty()) observer.tokens.back().piece += tail;
    std::string text;
    if (session.hasTokenizer()) text = k3::sanitizeUtf8(session.tokenizer().decode(result.ids));

    const double total = result.prefillSeconds + result.decodeSeconds;
    const std::uint64_t peak = peakRssBytes();
    std::printf("--------------------------------------------------------------------\n");
    if (session.hasTokenizer())
        std::printf("\n--- generated text ---\n%s\n----------------------\n",
                    (stdoutIsTty() ? terminalSafe(text) : text).c_str());
    std::printf("%zu tokens in %.1f s, %.2f s/token average\n", result.ids.size(), total,
                result.ids.empty() ? 0.0 : result.decodeSeconds / double(result.ids.size()));
    const double positionsPerSecond =
        result.prefillSeconds > 0 ? result.prefillPositions / result.prefillSeconds : 0.0;
    if (args.model.speculation != 0)
        std::printf("speculation (%s): %d proposals verified in %d of %d passes, %d accepted, %.2f "
                    "tokens per trunk pass\n",
                    args.model.draftDir.empty() ? "prompt lookup" : "draft trunk", result.proposed,
                    result.verifyPasses, result.decodePasses, result.acceptedProposals,
                    result.decodePasses > 0
                        ? double(result.decodePasses + result.acceptedProposals) /
                              double(result.decodePasses)
                        : 0.0);
    std::printf("prefill: %d positions in %d chunks of up to %d, trunk %.3f GB, experts %.3f GB "
                "read, %.2f s, %.2f positions/s\n",
                result.prefillPositions, result.prefillChunks, session.prefillChunk(),
                double(result.prefillTrunkBytes) / 1e9, double(result.prefillExpertBytes) / 1e9,
                result.prefillSeconds, positionsPerSecond);
    // Cache and trunk summaries, the I/O share of wall clock and PEAK RSS. Read once: the
    // printed summary and the report's figures are the same snapshot.
    const k3::MemoryReport summary = session.memoryReport();
    std::fputs(summary.format().c_str(), stdout);

    std::vector<std::string> invalidReasons;
    if (result.droppedExperts > 0)
        invalidReasons.push_back(std::to_string(result.droppedExperts) +
                                 " routed expert(s) could not be loaded");
    if (result.nonFinite) invalidReasons.push_back("a NaN or Inf reached the logits");

    nlohmann::ordered_json report;
    report["k3_version"] = k3::kVersion;
    const k3::ModelConfig& cfg = session.config();
    report["model"] = {{"dir", args.model.modelDir},
                       {"tokenizer_dir", loaded.tokenizerDir.empty()
                                             ? nlohmann::ordered_json()
                                             : nlohmann::ordered_json(loaded.tokenizerDir)},
                       {"config_summary", cfg.summary()},
                       {"layer_map", cfg.layerMapString()},
                       {"num_hidden_layers", cfg.numHiddenLayers},
                       {"layers_bound", session.model().layersBound()},
                       {"hidden_size", cfg.hiddenSize},
                       {"vocab_size", cfg.vocabSize},
                       {"load_seconds", loaded.loadSeconds}};
    report["options"] = {{"prompt_source", args.ids      ? "ids"
                                           : args.prompt ? "prompt"
                                                         : "prompt-file"},
                         {"gen", args.gen},
                         {"incremental", true},
                         {"incremental_flag", args.incremental},
                         {"layers", args.model.layers},
                         {"out", args.out},
                         {"dump_logits", args.dumpLogits.empty()
                                             ? nlohmann::ordered_json()
                                             : nlohmann::ordered_json(args.dumpLogits)},
                         {"sampling",
                          {{"greedy", !sampling.sampling},
                           {"temperature", options.sampling.temperature},
                           {"top_p", options.sampling.topP},
                           {"seed", sampling.seedGiven ? nlohmann::ordered_json(sampling.seed)
                                                       : nlohmann::ordered_json()}}}};
    report["plan"] = planJson(args.model.memory, session, summary);
    report["prompt"] = {{"tokens", promptIds.size()}, {"ids", promptIds}};
    if (!images.empty()) {
        // Each pad of the ids became the image's positions: what the prefill read.
        report["prompt"]["positions"] = result.promptTokens;
        nlohmann::ordered_json list = nlohmann::ordered_json::array();
        for (std::size_t i = 0; i < images.size(); ++i)
            list.push_back(
                {{"file", args.images[i]},
                 {"width", images[i].plan.width},
                 {"height", images[i].plan.height},
                 {"resized", {images[i].plan.resizedWidth, images[i].plan.resizedHeight}},
                 {"positions", images[i].plan.tokens()}});
        report["prompt"]["images"] = list;
    }
    if (session.hasTokenizer()) report["prompt"]["text"] = promptText;
    nlohmann::ordered_json tokens = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < observer.tokens.size(); ++i) {
        const TokenRecord& t = observer.tokens[i];
        nlohmann::ordered_json row = {{"step", i}, {"id", t.id}, {"seconds", t.seconds}};
        row["cache_true_hit_percent"] = t.cacheHitPercent >= 0
                                            ? nlohmann::ordered_json(t.cacheHitPercent)
                                            : nlohmann::ordered_json();
        row["gb_read"] = t.gbRead;
        row["text"] =
            session.hasTokenizer() ? nlohmann::ordered_json(t.piece) : nlohmann::ordered_json();
        tokens.push_back(std::move(row));
    }
    report["tokens"] = std::move(tokens);
    report["ids"] = result.ids;
    report["text"] =
        session.hasTokenizer() ? nlohmann::ordered_json(text) : nlohmann::ordered_json();
    report["timing"] = {{"prefill_seconds", result.prefillSeconds},
                        {"decode_seconds", result.decodeSeconds},
                        {"total_seconds", total},
                        {"reused_positions", result.reusedPositions}};
    report["prefill"] = {{"positions", result.prefillPositions},
                         {"chunks", result.prefillChunks},
                         {"chunk_size", session.prefillChunk()},
                         {"reused_positions", result.reusedPositions},
                         {"trunk_bytes", result.prefillTrunkBytes},
                         {"expert_bytes", result.prefillExpertBytes},
                         {"seconds", result.prefillSeconds},
                         {"positions_per_second", positionsPerSecond},
                         {"restored_positions", restored + result.restoredPositions}};
    const int committed = int(result.ids.size());
    report["speculation"] = {
        {"width", args.model.speculation < 0 ? nlohmann::ordered_json("auto")
                                             : nlohmann::ordered_json(args.model.speculation)},
        {"proposer", args.model.draftDir.empty() ? "prompt lookup" : "draft trunk"},
        {"draft_trunk", args.model.draftDir.empty() ? nlohmann::ordered_json()
                                                    : nlohmann::ordered_json(args.model.draftDir)},
        {"draft_bytes", summary.draftBytes},
        {"draft_file_bytes", summary.draftFileBytes},
        {"proposals", result.proposed},
        {"accepted", result.acceptedProposals},
        {"decode_passes", result.decodePasses},
        {"verify_passes", result.verifyPasses},
        {"tokens_per_pass",
         result.decodePasses > 0
             ? double(result.decodePasses + result.acceptedProposals) / double(result.decodePasses)
             : 0.0},
        {"seconds_per_token", committed > 0 ? result.decodeSeconds / committed : 0.0}};
    report["peak_rss_bytes"] = peak;
    report["valid"] = invalidReasons.empty();
    report["invalid_reasons"] = invalidReasons;
    report["dropped_experts"] = result.droppedExperts;
    report["non_finite"] = result.nonFinite;
    report["cancelled"] = result.cancelled;
    const k3::MemoryReport& mem = summary;
    report["trunk"] = {{"streamed", mem.trunkStreamed},
                       {"pinned_layers", mem.trunk.pinnedLayers},
                       {"total_layers", mem.trunk.totalLayers},
                       {"ring_slots", mem.trunk.ringSlots},
                       {"ring_slot_bytes", mem.trunk.ringSlotBytes},
                       {"reads", mem.trunk.reads},
                       {"bytes_read", mem.trunk.bytesRead},
                       {"read_seconds", mem.trunk.ioSeconds},
                       {"wait_seconds", mem.trunk.waitSeconds}};
    if (mem.plan.visionBytes > 0) // the tower's rule (MemoryPlan::visionResident) and what it did
        report["vision"] = {{"tower_bytes", mem.plan.visionBytes},
                            {"rule", mem.plan.visionResident ? "resident" : "transient"},
                            {"held_bytes", mem.vision.heldBytes},
                            {"peak_bytes", mem.vision.peakBytes},
                            {"loads", mem.vision.loads},
                            {"releases", mem.vision.releases}};
    report["io_share"] = mem.ioShare();
    if (mem.expertsCached)
        report["cache"] = {{"requests", mem.cache.requests},
                           {"true_hits", mem.cache.residentHits},
                           {"resident_hits", mem.cache.residentHits},
                           {"prefetch_hits", mem.cache.prefetchHits},
                           {"misses", mem.cache.misses},
                           {"failed_reads", mem.cache.failedReads},
                           {"evictions", mem.cache.evictions},
                           {"disk_reads", mem.cache.diskReads},
                           {"bytes_read", mem.cache.bytesRead},
                           {"slots", mem.cacheSlots},
                           {"slot_bytes", mem.cacheSlotBytes},
                           {"true_hit_rate", mem.cache.trueHitRate()},
                           {"position_uses", mem.cache.positionUses},
                           {"chunk_reuse", mem.cache.chunkReuse()},
                           {"read_wait_seconds", mem.cache.readSeconds},
                           {"io_busy_seconds", mem.cache.ioBusySeconds},
                           {"max_in_flight", mem.cache.maxInFlight},
                           {"expert_io",
                            {{"mode", mem.expertIo.mode},
                             {"depth", mem.expertIo.depth},
                             {"note", mem.expertIo.note}}}};

    int code = kExitOk;
    report["state"] = {
        {"loaded", continuing ? nlohmann::ordered_json(args.loadState) : nlohmann::ordered_json()},
        {"restored_positions", restored},
        {"saved", nullptr},
        {"saved_positions", 0}};
    // The prefix cache on disk (--state-cache): positions it gave, states it kept.
    report["state_cache"] =
        args.model.stateCacheDir.empty()
            ? nlohmann::ordered_json()
            : nlohmann::ordered_json{{"restored_positions", result.restoredPositions},
                                     {"states_saved", result.statesSaved}};
    if (!args.saveState.empty()) {
        try {
            session.saveState(args.saveState);
            report["state"]["saved"] = args.saveState;
            report["state"]["saved_positions"] = session.positions();
            std::printf("state: %s (%d positions)\n", terminalSafe(args.saveState).c_str(),
                        session.positions());
        } catch (const std::exception& error) {
            printError(std::string("--save-state: ") + error.what());
            code = kExitFailure;
        }
    }
    if (!memory.cacheTraceDir.empty()) {
        try {
            session.model().writeCacheTrace(memory.cacheTraceDir);
            std::printf("cache trace: %s/expert_requests.tsv (%llu requests)\n",
                        terminalSafe(memory.cacheTraceDir).c_str(),
                        (unsigned long long)mem.cache.requests);
            report["cache_trace"] = {{"dir", memory.cacheTraceDir},
                                     {"requests_file", "expert_requests.tsv"},
                                     {"records", mem.cache.requests}};
        } catch (const std::exception& error) {
            printError(std::string("--dump-cache-trace: ") + error.what());
            code = kExitFailure;
        }
    }
    try {
        const std::string json =
            report.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
        if (reportToStdout) {
            std::fflush(stdout);
            stdoutReport.write(json);
        } else {
            k3::writeFileAtomically(args.out, json);
            std::printf("run report: %s\n", terminalSafe(args.out).c_str());
        }
    } catch (const std::exception& error) {
        printError(std::string("cannot write the run report: ") + error.what());
        code = kExitFailure;
    }
    if (!args.dumpLogits.empty()) {
        if (observer.firstLogits.empty()) {
            printError("--dump-logits " + args.dumpLogits +
                       ": the run stopped before the first step's logits existed");
            code = kExitFailure;
        } else {
            std::string error;
            try { // the same rule as the report: regular files only, replaced atomically
                k3::writeFileAtomically(
                    args.dumpLogits,
                    std::string_view(reinterpret_cast<const char*>(observer.firstLogits.data()),
                                     observer.firstLogits.size() * sizeof(float)));
            } catch (const std::exception& e) {
                error = e.what();
            }
            if (!error.empty()) {
                printError("--dump-logits: " + error);
                code = kExitFailure;
            } else {
                std::printf("first-step logits: %s (%zu float32)\n",
                            terminalSafe(args.dumpLogits).c_str(), observer.firstLogits.size());
            }
        }
    }
    std::fflush(stdout);
    if (!invalidReasons.empty()) {
        std::string why;
        for (const std::string& r : invalidReasons) why += (why.empty() ? "" : "; ") + r;
        printError("RUN INVALID: " + why + ". The output above is not the model's.");
        return kExitInvalid;
    }
    if (result.cancelled) {
        printError("stopped with Ctrl-C after " + std::to_string(result.ids.size()) +
                   " tokens; the report holds what was generated");
        return kExitInterrupted;
    }
    return code;
}

} // namespace k3cli
