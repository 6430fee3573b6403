// The batch run's reporter (RunReport.hpp): everything `k3 MODEL_DIR --prompt ...` prints
// about a run and the run.json it writes, read from one memory report after the run.
#include "RunReport.hpp"

#include "CliSupport.hpp"

#include <k3/chat.hpp>
#include <k3/console.hpp>
#include <k3/memory_plan.hpp>
#include <k3/read_file.hpp>
#include <k3/version.hpp>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace k3cli {

using Json = nlohmann::ordered_json;

ReportOnStdout::ReportOnStdout(bool active) {
    if (!active) return;
    report_ = k3::console::divertStdout();
    if (report_ < 0)
        throw CommandError{kExitFailure,
                           std::string("--out -: cannot set up stdout: ") + std::strerror(errno)};
}

ReportOnStdout::~ReportOnStdout() {
    k3::console::restoreStdout(report_);
}

void ReportOnStdout::write(const std::string& text) const {
    if (!k3::console::writeDiverted(report_, text))
        throw k3::ChatError(std::string("writing to stdout failed: ") + std::strerror(errno));
}

namespace {

Json orNull(const std::string& text) {
    return text.empty() ? Json() : Json(text);
}

template <class T> Json orNull(const std::optional<T>& value) {
    return value ? Json(*value) : Json();
}

double tokensPerPass(const k3::GenerateResult& r) {
    return r.decodePasses > 0
               ? double(r.decodePasses + r.acceptedProposals) / double(r.decodePasses)
               : 0.0;
}

double positionsPerSecond(const k3::GenerateResult& r) {
    return r.prefillSeconds > 0 ? r.prefillPositions / r.prefillSeconds : 0.0;
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

// The summary after the step table; the generated text is `text`.
void printSummary(const BatchRun& run, const std::string& text, const k3::MemoryReport& memory) {
    const k3::GenerateResult& result = run.result;
    const k3::Session& session = run.loaded.session;
    const double total = result.prefillSeconds + result.decodeSeconds;
    std::printf("--------------------------------------------------------------------\n");
    if (session.hasTokenizer())
        std::printf("\n--- generated text ---\n%s\n----------------------\n",
                    (stdoutIsTty() ? terminalSafe(text) : text).c_str());
    std::printf("%zu tokens in %.1f s, %.2f s/token average\n", result.ids.size(), total,
                result.ids.empty() ? 0.0 : result.decodeSeconds / double(result.ids.size()));
    if (run.args.model.speculation != 0)
        std::printf("speculation (%s): %d proposals verified in %d of %d passes, %d accepted, %.2f "
                    "tokens per trunk pass\n",
                    run.args.model.draftDir.empty() ? "prompt lookup" : "draft trunk",
                    result.proposed, result.verifyPasses, result.decodePasses,
                    result.acceptedProposals, tokensPerPass(result));
    std::printf("prefill: %d positions in %d chunks of up to %d, trunk %.3f GB, experts %.3f GB "
                "read, %.2f s, %.2f positions/s\n",
                result.prefillPositions, result.prefillChunks, session.prefillChunk(),
                double(result.prefillTrunkBytes) / 1e9, double(result.prefillExpertBytes) / 1e9,
                result.prefillSeconds, positionsPerSecond(result));
    std::fputs(memory.format().c_str(), stdout);
}

Json planJson(const MemoryArgs& m, const k3::Session& session, const k3::MemoryReport& memory) {
    Json plan;
    plan["streaming"] = !m.trunkDir.empty();            // the trunk streams from trunk.bin
    plan["expert_cache"] = m.cacheGB && *m.cacheGB > 0; // routed experts through the cache
    plan["resident_weight_bytes"] = session.model().weightBytes();
    plan["preset"] = orNull(m.preset);
    plan["preset_resolved"] = orNull(m.resolvedPreset);
    plan["trunk_gb"] = orNull(m.trunkGB);
    plan["cache_gb"] = orNull(m.cacheGB);
    plan["trunk_dir"] = orNull(m.trunkDir);
    plan["pin_mode"] = k3::pinModeName(m.pinMode);
    plan["dump_cache_trace"] = orNull(m.cacheTraceDir);
    plan["memory"] = memory.format();
    return plan;
}

Json modelJson(const BatchRun& run) {
    const k3::Session& session = run.loaded.session;
    const k3::ModelConfig& cfg = session.config();
    return {{"dir", run.args.model.modelDir},
            {"tokenizer_dir", orNull(run.loaded.tokenizerDir)},
            {"config_summary", cfg.summary()},
            {"layer_map", cfg.layerMapString()},
            {"num_hidden_layers", cfg.numHiddenLayers},
            {"layers_bound", session.model().layersBound()},
            {"hidden_size", cfg.hiddenSize},
            {"vocab_size", cfg.vocabSize},
            {"load_seconds", run.loaded.loadSeconds}};
}

Json optionsJson(const BatchRun& run) {
    const RunArgs& args = run.args;
    return {{"prompt_source", args.ids      ? "ids"
                              : args.prompt ? "prompt"
                                            : "prompt-file"},
            {"gen", args.gen},
            {"incremental", true},
            {"incremental_flag", args.incremental},
            {"layers", args.model.layers},
            {"out", args.out},
            {"dump_logits", orNull(args.dumpLogits)},
            {"sampling",
             {{"greedy", !run.sampling.sampling},
              {"temperature", run.options.sampling.temperature},
              {"top_p", run.options.sampling.topP},
              {"seed", run.sampling.seedGiven ? Json(run.sampling.seed) : Json()}}}};
}

Json promptJson(const BatchRun& run) {
    Json prompt = {{"tokens", run.promptIds.size()}, {"ids", run.promptIds}};
    if (!run.images.empty()) {
        // Each pad of the ids became the image's positions: what the prefill read.
        prompt["positions"] = run.result.promptTokens;
        Json list = Json::array();
        for (std::size_t i = 0; i < run.images.size(); ++i) {
            const k3::ImagePlan& plan = run.images[i].plan;
            list.push_back({{"file", run.args.images[i]},
                            {"width", plan.width},
                            {"height", plan.height},
                            {"resized", {plan.resizedWidth, plan.resizedHeight}},
                            {"positions", plan.tokens()}});
        }
        prompt["images"] = list;
    }
    if (run.loaded.session.hasTokenizer()) prompt["text"] = run.promptText;
    return prompt;
}

Json tokensJson(const BatchRun& run) {
    const bool text = run.loaded.session.hasTokenizer();
    Json tokens = Json::array();
    for (std::size_t i = 0; i < run.tokens.size(); ++i) {
        const TokenRecord& t = run.tokens[i];
        Json row = {{"step", i}, {"id", t.id}, {"seconds", t.seconds}};
        row["cache_true_hit_percent"] = t.cacheHitPercent >= 0 ? Json(t.cacheHitPercent) : Json();
        row["gb_read"] = t.gbRead;
        row["text"] = text ? Json(t.piece) : Json();
        tokens.push_back(std::move(row));
    }
    return tokens;
}

Json prefillJson(const BatchRun& run) {
    const k3::GenerateResult& r = run.result;
    return {{"positions", r.prefillPositions},
            {"chunks", r.prefillChunks},
            {"chunk_size", run.loaded.session.prefillChunk()},
            {"reused_positions", r.reusedPositions},
            {"trunk_bytes", r.prefillTrunkBytes},
            {"expert_bytes", r.prefillExpertBytes},
            {"seconds", r.prefillSeconds},
            {"positions_per_second", positionsPerSecond(r)},
            {"restored_positions", run.restoredPositions + r.restoredPositions}};
}

Json speculationJson(const BatchRun& run, const k3::MemoryReport& memory) {
    const ModelArgs& model = run.args.model;
    const k3::GenerateResult& r = run.result;
    const int committed = int(r.ids.size());
    return {{"width", model.speculation < 0 ? Json("auto") : Json(model.speculation)},
            {"proposer", model.draftDir.empty() ? "prompt lookup" : "draft trunk"},
            {"draft_trunk", orNull(model.draftDir)},
            {"draft_bytes", memory.draftBytes},
            {"draft_file_bytes", memory.draftFileBytes},
            {"proposals", r.proposed},
            {"accepted", r.acceptedProposals},
            {"decode_passes", r.decodePasses},
            {"verify_passes", r.verifyPasses},
            {"tokens_per_pass", tokensPerPass(r)},
            {"seconds_per_token", committed > 0 ? r.decodeSeconds / committed : 0.0}};
}

Json trunkJson(const k3::MemoryReport& mem) {
    return {{"streamed", mem.trunkStreamed},
            {"pinned_layers", mem.trunk.pinnedLayers},
            {"total_layers", mem.trunk.totalLayers},
            {"ring_slots", mem.trunk.ringSlots},
            {"ring_slot_bytes", mem.trunk.ringSlotBytes},
            {"reads", mem.trunk.reads},
            {"bytes_read", mem.trunk.bytesRead},
            {"read_seconds", mem.trunk.ioSeconds},
            {"wait_seconds", mem.trunk.waitSeconds}};
}

Json cacheJson(const k3::MemoryReport& mem) {
    return {{"requests", mem.cache.requests},
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
}

std::vector<std::string> invalidReasons(const k3::GenerateResult& result) {
    std::vector<std::string> reasons;
    if (result.droppedExperts > 0)
        reasons.push_back(std::to_string(result.droppedExperts) +
                          " routed expert(s) could not be loaded");
    if (result.nonFinite) reasons.push_back("a NaN or Inf reached the logits");
    return reasons;
}

// The run report before the files are written (state, state_cache and cache_trace are
// filled in by writeRunFiles).
Json reportJson(const BatchRun& run, const std::string& text, const k3::MemoryReport& mem,
                std::uint64_t peakRss) {
    const k3::GenerateResult& result = run.result;
    const bool hasText = run.loaded.session.hasTokenizer();
    const std::vector<std::string> invalid = invalidReasons(result);
    Json report;
    report["k3_version"] = k3::kVersion;
    report["model"] = modelJson(run);
    report["options"] = optionsJson(run);
    report["plan"] = planJson(run.args.model.memory, run.loaded.session, mem);
    report["prompt"] = promptJson(run);
    report["tokens"] = tokensJson(run);
    report["ids"] = result.ids;
    report["text"] = hasText ? Json(text) : Json();
    report["timing"] = {{"prefill_seconds", result.prefillSeconds},
                        {"decode_seconds", result.decodeSeconds},
                        {"total_seconds", result.prefillSeconds + result.decodeSeconds},
                        {"reused_positions", result.reusedPositions}};
    report["prefill"] = prefillJson(run);
    report["speculation"] = speculationJson(run, mem);
    report["peak_rss_bytes"] = peakRss;
    report["valid"] = invalid.empty();
    report["invalid_reasons"] = invalid;
    report["dropped_experts"] = result.droppedExperts;
    report["non_finite"] = result.nonFinite;
    report["cancelled"] = result.cancelled;
    report["trunk"] = trunkJson(mem);
    if (mem.plan.visionBytes > 0) // the tower's rule (MemoryPlan::visionResident) and what it did
        report["vision"] = {{"tower_bytes", mem.plan.visionBytes},
                            {"rule", mem.plan.visionResident ? "resident" : "transient"},
                            {"held_bytes", mem.vision.heldBytes},
                            {"peak_bytes", mem.vision.peakBytes},
                            {"loads", mem.vision.loads},
                            {"releases", mem.vision.releases}};
    report["io_share"] = mem.ioShare();
    if (mem.expertsCached) report["cache"] = cacheJson(mem);
    report["state"] = {{"loaded", orNull(run.args.loadState)},
                       {"restored_positions", run.restoredPositions},
                       {"saved", nullptr},
                       {"saved_positions", 0}};
    // The prefix cache on disk (--state-cache): positions it gave, states it kept.
    report["state_cache"] = run.args.model.stateCacheDir.empty()
                                ? Json()
                                : Json{{"restored_positions", result.restoredPositions},
                                       {"states_saved", result.statesSaved}};
    return report;
}

// --save-state and --dump-cache-trace, recorded in the report; false when one failed.
bool writeStateAndTrace(const BatchRun& run, const k3::MemoryReport& mem, Json& report) {
    const RunArgs& args = run.args;
    k3::Session& session = run.loaded.session;
    bool ok = true;
    if (!args.saveState.empty()) {
        try {
            session.saveState(args.saveState);
            report["state"]["saved"] = args.saveState;
            report["state"]["saved_positions"] = session.positions();
            std::printf("state: %s (%d positions)\n", terminalSafe(args.saveState).c_str(),
                        session.positions());
        } catch (const std::exception& error) {
            printError(std::string("--save-state: ") + error.what());
            ok = false;
        }
    }
    const std::string& traceDir = args.model.memory.cacheTraceDir;
    if (!traceDir.empty()) {
        try {
            session.model().writeCacheTrace(traceDir);
            std::printf("cache trace: %s/expert_requests.tsv (%llu requests)\n",
                        terminalSafe(traceDir).c_str(), (unsigned long long)mem.cache.requests);
            report["cache_trace"] = {{"dir", traceDir},
                                     {"requests_file", "expert_requests.tsv"},
                                     {"records", mem.cache.requests}};
        } catch (const std::exception& error) {
            printError(std::string("--dump-cache-trace: ") + error.what());
            ok = false;
        }
    }
    return ok;
}

// The report to --out (or stdout); false when it could not be written.
bool writeReport(const RunArgs& args, const Json& report, const ReportOnStdout& stdoutReport) {
    try {
        const std::string json = report.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
        if (args.out == "-") {
            std::fflush(stdout);
            stdoutReport.write(json);
        } else {
            k3::writeFileAtomically(args.out, json);
            std::printf("run report: %s\n", terminalSafe(args.out).c_str());
        }
        return true;
    } catch (const std::exception& error) {
        printError(std::string("cannot write the run report: ") + error.what());
        return false;
    }
}

// --dump-logits: the first step's logits; false when they could not be written.
bool writeLogits(const RunArgs& args, const std::vector<float>& logits) {
    if (logits.empty()) {
        printError("--dump-logits " + args.dumpLogits +
                   ": the run stopped before the first step's logits existed");
        return false;
    }
    try { // the same rule as the report: regular files only, replaced atomically
        k3::writeFileAtomically(args.dumpLogits,
                                std::string_view(reinterpret_cast<const char*>(logits.data()),
                                                 logits.size() * sizeof(float)));
    } catch (const std::exception& e) {
        printError(std::string("--dump-logits: ") + e.what());
        return false;
    }
    std::printf("first-step logits: %s (%zu float32)\n", terminalSafe(args.dumpLogits).c_str(),
                logits.size());
    return true;
}

} // namespace

void printRunHeader(const RunArgs& args, const LoadedSession& loaded,
                    const std::vector<k3::TokenId>& promptIds,
                    const std::vector<k3::PreparedImage>& images,
                    const ResolvedSampling& sampling) {
    const k3::Session& session = loaded.session;
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
}

int reportBatchRun(const BatchRun& run, const ReportOnStdout& stdoutReport) {
    const k3::Session& session = run.loaded.session;
    std::string text;
    if (session.hasTokenizer()) text = k3::sanitizeUtf8(session.tokenizer().decode(run.result.ids));
    const std::uint64_t peak = peakRssBytes();
    // Cache and trunk summaries, the I/O share of wall clock and PEAK RSS. Read once: the
    // printed summary and the report's figures are the same snapshot.
    const k3::MemoryReport memory = session.memoryReport();
    printSummary(run, text, memory);
    Json report = reportJson(run, text, memory, peak);

    int code = kExitOk;
    if (!writeStateAndTrace(run, memory, report)) code = kExitFailure;
    if (!writeReport(run.args, report, stdoutReport)) code = kExitFailure;
    if (!run.args.dumpLogits.empty() && !writeLogits(run.args, run.firstLogits))
        code = kExitFailure;
    std::fflush(stdout);
    const std::vector<std::string> invalid = invalidReasons(run.result);
    if (!invalid.empty()) {
        std::string why;
        for (const std::string& r : invalid) why += (why.empty() ? "" : "; ") + r;
        printError("RUN INVALID: " + why + ". The output above is not the model's.");
        return kExitInvalid;
    }
    if (run.result.cancelled) {
        printError("stopped with Ctrl-C after " + std::to_string(run.result.ids.size()) +
                   " tokens; the report holds what was generated");
        return kExitInterrupted;
    }
    return code;
}

} // namespace k3cli
