// k3: run Kimi K3 from a terminal. Exit codes (DESIGN.md): 0 ok, 1 load/forward
// failure or memory refusal, 2 usage error or unreadable config, 4 run invalid.
// This file maps the command line onto app/cli/Commands.hpp; the commands live there.
#include <CLI/CLI.hpp>

#include "cli/CliSupport.hpp"
#include "cli/Commands.hpp"

#include <k3/config.hpp>
#include <k3/doctor.hpp>
#include <k3/hub.hpp>
#include <k3/launch.hpp>
#include <k3/presets.hpp>
#include <k3/system.hpp>
#include <k3/version.hpp>

#include <cstdio>
#include <iostream>

namespace {

using k3cli::kExitUsage;

// The flags take the ranges validate(LaunchConfig) enforces (k3/launch.hpp).
CLI::Range rangeOf(k3::LaunchRange r) {
    return CLI::Range(r.min, r.max);
}
constexpr double kMaxBudgetGB = double(k3::kMaxBudgetBytes) / 1e9;

// --preset and the two -gb flags set the same two numbers; a later flag wins. The
// engine's resolveMemoryFlags applies them; the report keeps what was asked.
void resolveMemory(const CLI::App& app, const CLI::Option* presetOpt, const CLI::Option* trunkOpt,
                   const CLI::Option* cacheOpt, double trunkGB, double cacheGB,
                   k3cli::MemoryArgs& m) {
    std::vector<k3::MemoryFlag> flags;
    for (const CLI::Option* o : app.parse_order()) {
        if (o == presetOpt) flags.push_back({k3::MemoryFlag::Kind::Preset, m.preset, 0});
        if (o == trunkOpt) flags.push_back({k3::MemoryFlag::Kind::TrunkGB, {}, trunkGB});
        if (o == cacheOpt) flags.push_back({k3::MemoryFlag::Kind::CacheGB, {}, cacheGB});
    }
    const auto mem = k3::readMemoryInfo();
    try {
        m.budget = k3::resolveMemoryFlags(flags, mem ? mem->availableBytes : 0);
    } catch (const k3::MemoryRefusal& e) {
        throw k3cli::usageError(e.what());
    }
    m.resolvedPreset = m.budget.preset;
    const bool preset = !m.budget.preset.empty();
    if (preset || m.budget.trunkBytes) m.trunkGB = double(m.budget.resolvedTrunkBytes()) / 1e9;
    if (preset || m.budget.cacheBytes) m.cacheGB = double(m.budget.resolvedCacheBytes()) / 1e9;
}

constexpr const char* kPinModeHelp =
    "How a compressed trunk's pinned layers are held: raw (decoded once, at load), "
    "compressed (decoded at each use, so the budget pins more layers) or measured (compressed "
    "where a measurement at load says it pays; the default)";

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"k3: run the 2.78-trillion-parameter Kimi K3 on one CPU by streaming its "
                 "weights from disk.\n\n"
                 "  k3 MODEL_DIR (--prompt TEXT | --prompt-file FILE | --ids 1,2,3) [options]\n"
                 "  k3 MODEL_DIR --chat [--system TEXT] [--history FILE] [options]\n"
                 "  k3 --remote URL --model NAME [--api-key-file F] --chat [options]\n"
                 "  k3 serve MODEL_DIR [--host H --port P --api-key-file F] [options]\n"
                 "  k3 doctor [DIR]      k3 download DIR\n"
                 "  k3 replay TRACE [--cache-gb 0.5,1,2,4,16] [--report run.json]\n",
                 "k3"};
    app.set_version_flag("--version", std::string("k3 (k3chat) ") + k3::kVersion);
    bool listPresets = false;
    app.add_flag("--list-presets", listPresets,
                 "Print the memory presets (trunk GB / expert-cache GB) and exit");

    k3cli::RunArgs run;
    k3cli::ChatArgs chat;
    k3cli::ModelArgs& model = run.model;
    app.add_option("MODEL_DIR", model.modelDir,
                   "The checkpoint folder: config.json and the .safetensors shards")
        ->envname("K3_MODEL_DIR")
        ->type_name("DIR");

    const char* promptGroup = "Prompt (exactly one, except with --chat)";
    std::string promptText, promptFile, idsText;
    CLI::Option* promptOpt =
        app.add_option("--prompt", promptText, "Text to continue, tokenized as is")
            ->group(promptGroup)
            ->type_name("TEXT");
    CLI::Option* promptFileOpt =
        app.add_option("--prompt-file", promptFile,
                       "Read the text verbatim from FILE (use this for non-ASCII text)")
            ->group(promptGroup)
            ->type_name("FILE");
    CLI::Option* idsOpt =
        app.add_option("--ids", idsText, "Token ids in, ids out, e.g. 1008,10484,318")
            ->group(promptGroup)
            ->type_name("IDS");
    CLI::Option* imageOpt =
        app.add_option("--image", run.images,
                       "An image (PNG, JPEG, WebP) read before the prompt text; repeat for "
                       "several. With --ids: one <|media_pad|> id per image")
            ->group(promptGroup)
            ->type_name("FILE");
    app.add_option("--image-patch-limit", run.imagePatchLimit,
                   "Largest image in 14-px patches, a quarter of them prompt positions "
                   "(default 65536, the release's; lower it to make images cheaper)")
        ->check(CLI::Range(1, 65536))
        ->group(promptGroup)
        ->type_name("N");
    CLI::Option* tokOpt =
        app.add_option(
               "--tok", model.tokenizerDir,
               "Tokenizer folder (tiktoken.model, tokenizer_config.json); default MODEL_DIR")
            ->group(promptGroup)
            ->type_name("DIR");

    const char* memoryGroup =
        "Memory (the same tokens at every budget; memory only buys speed. --trunk DIR streams "
        "the trunk packed by k3 pack; --cache-gb sends the routed experts through the cache)";
    std::vector<std::string> presetNames;
    for (const k3::Preset& p : k3::presets()) presetNames.emplace_back(p.name);
    presetNames.emplace_back("auto");
    double trunkGB = 0, cacheGB = 0;
    CLI::Option* presetOpt =
        app.add_option("--preset", model.memory.preset, "A named budget (k3 --list-presets)")
            ->check(CLI::IsMember(presetNames))
            ->group(memoryGroup)
            ->type_name("NAME");
    CLI::Option* trunkGbOpt =
        app.add_option("--trunk-gb", trunkGB,
                       "GB for the pinned trunk + ring (0: stream every layer through the "
                       "smallest ring)")
            ->check(CLI::Range(0.0, kMaxBudgetGB))
            ->group(memoryGroup)
            ->type_name("GB");
    CLI::Option* cacheGbOpt =
        app.add_option("--cache-gb", cacheGB, "GB for the routed-expert cache")
            ->check(CLI::Range(0.0, kMaxBudgetGB))
            ->group(memoryGroup)
            ->type_name("GB");
    app.add_option("--trunk", model.memory.trunkDir, "The packed trunk folder")
        ->check(CLI::ExistingDirectory)
        ->group(memoryGroup)
        ->type_name("DIR");
    std::string pinModeText;
    CLI::Option* pinModeOpt = app.add_option("--pin-mode", pinModeText, kPinModeHelp)
                                  ->group(memoryGroup)
                                  ->type_name("raw|compressed|measured");
    app.add_option("--dump-cache-trace", model.memory.cacheTraceDir,
                   "Write the expert-cache request trace to DIR: expert_requests.tsv (step, layer, "
                   "expert, hit), expert_trace.bin and expert_hist.json (needs a cache)")
        ->group(memoryGroup)
        ->type_name("DIR");

    const char* genGroup = "Generation";
    CLI::Option* genOpt =
        app.add_option("--gen", run.gen,
                       "Tokens to generate, 1..4096 (default 16; --chat: 4096 per answer; 0 "
                       "with --save-state: read the prompt only)")
            ->check(CLI::Range(0, 4096))
            ->group(genGroup)
            ->type_name("N");
    app.add_flag("--incremental", run.incremental,
                 "Accepted for the seed's scripts: decoding here is always incremental")
        ->group(genGroup);
    double temperature = 1.0, topP = 0.95;
    std::uint64_t seed = 0;
    CLI::Option* temperatureOpt = app.add_option("--temperature", temperature,
                                                 "Sample at this temperature (default 1.0 "
                                                 "once sampling is on)")
                                      ->check(CLI::Range(0.0, 100.0))
                                      ->group(genGroup)
                                      ->type_name("T");
    CLI::Option* topPOpt = app.add_option("--top-p", topP, "Nucleus sampling mass (default 0.95)")
                               ->check(CLI::Range(0.0, 1.0))
                               ->group(genGroup)
                               ->type_name("P");
    CLI::Option* seedOpt =
        app.add_option("--seed", seed, "Sampling seed (one stream per assistant turn)")
            ->group(genGroup)
            ->type_name("N");
    app.add_flag("--greedy", model.sampling.greedy, "Argmax even when a sampling flag is given")
        ->group(genGroup);

    const char* chatGroup = "Chat (XTML, the official Kimi K3 format)";
    bool chatMode = false;
    std::string systemText;
    app.add_flag("--chat", chatMode, "Talk to the model: a REPL with /help, /reset, /exit")
        ->group(chatGroup);
    CLI::Option* systemOpt = app.add_option("--system", systemText, "The system message")
                                 ->group(chatGroup)
                                 ->type_name("TEXT");
    CLI::Option* historyOpt =
        app.add_option("--history", chat.history,
                       "JSONL transcript: resumed when it exists, saved after every turn; "
                       "what the model has read of it is kept in FILE.states/ (unless "
                       "--state-cache is given), so a resumed conversation is not read again")
            ->group(chatGroup)
            ->type_name("FILE");
    CLI::Option* noThinkOpt =
        app.add_flag("--no-think", chat.noThink, "Answer at once, without a think channel")
            ->group(chatGroup);
    CLI::Option* effortOpt = app.add_option("--thinking-effort", chat.thinkingEffort,
                                            "low, medium, high or max "
                                            "(default max)")
                                 ->check(CLI::IsMember({"low", "medium", "high", "max"}))
                                 ->group(chatGroup)
                                 ->type_name("LEVEL");
    CLI::Option* maxTokensOpt =
        app.add_option("--max-tokens", chat.maxTokens, "Longest answer in tokens (default 4096)")
            ->check(CLI::Range(1, 4096))
            ->group(chatGroup)
            ->type_name("N");

    CLI::Option* jsonOpt =
        app.add_flag("--json", chat.json, "Every answer is a JSON object (constrained decoding)")
            ->group(chatGroup);
    CLI::Option* jsonSchemaOpt =
        app.add_option("--json-schema", chat.jsonSchema,
                       "Every answer is JSON valid against this JSON Schema (the subset the "
                       "user guide lists)")
            ->group(chatGroup)
            ->type_name("FILE")
            ->excludes(jsonOpt);

    const char* remoteGroup = "Remote (chat with an OpenAI-compatible server: vLLM, SGLang, "
                              "k3 serve)";
    CLI::Option* remoteOpt =
        app.add_option("--remote", chat.remote.url,
                       "The server's URL, e.g. http://gpu-node:8000/v1 (with --chat)")
            ->group(remoteGroup)
            ->type_name("URL");
    CLI::Option* remoteModelOpt =
        app.add_option("--model", chat.remote.model, "The server's name for the model")
            ->group(remoteGroup)
            ->type_name("NAME");
    CLI::Option* apiKeyFileOpt =
        app.add_option("--api-key-file", chat.remote.apiKeyFile,
                       "A file whose first line is the server's API key (sent as Bearer)")
            ->group(remoteGroup)
            ->type_name("FILE");

    const char* diagGroup = "Diagnostics";
    std::string specText;
    // --spec of a run, a chat and k3 serve.
    const auto specCheck = [](const std::string& v) -> std::string {
        if (v == "auto") return {};
        char* end = nullptr;
        const long n = std::strtol(v.c_str(), &end, 10);
        if (v.empty() || *end || n < 0 || n > 32)
            return "--spec " + v + " is not auto or a number of proposals 0..32";
        return {};
    };
    app.add_option("--spec", specText,
                   "Speculative decoding: verify up to N prompt-lookup proposals per trunk pass, "
                   "1..32, or auto (an adaptive width); greedy gives the same tokens as "
                   "without it, sampling the same distribution")
        ->check(specCheck)
        ->group(genGroup)
        ->type_name("N|auto");
    app.add_option("--draft-trunk", model.draftDir,
                   "Propose with this draft trunk (k3 pack --draft) instead of prompt lookup; "
                   "turns on --spec auto unless --spec is given")
        ->group(genGroup)
        ->type_name("DIR");
    app.add_option("--context", model.context,
                   "Positions a conversation may hold, 16..1048576 (default 4096); the memory "
                   "plan sizes the KV cache for it")
        ->check(rangeOf(k3::kContextRange))
        ->group(memoryGroup)
        ->type_name("N");
    const char* stateCacheHelp =
        "Keep conversation states in DIR (default: ~/.cache/k3/states) so a prompt that "
        "starts with positions read before reads only the rest; the same tokens";
    CLI::Option* stateCacheOpt =
        app.add_option("--state-cache", model.stateCacheDir, stateCacheHelp)
            ->group(memoryGroup)
            ->type_name("DIR|default");
    app.add_option("--state-cache-gb", model.stateCacheGB,
                   "Disk budget of --state-cache, least recently used states go first (default 4)")
        ->check(CLI::Range(0.001, 1e6))
        ->needs(stateCacheOpt)
        ->group(memoryGroup)
        ->type_name("GB");
    app.add_option("--prefill-chunk", model.prefillChunk,
                   "Prompt positions per forward pass, 0..4096 (default 0: as many as the expert "
                   "cache's memory pays for, at least 64, at most the context); the same tokens "
                   "at every size")
        ->check(rangeOf(k3::kPrefillChunkRange))
        ->group(memoryGroup)
        ->type_name("N");
    app.add_option("--layers", model.layers, "Bind and run only the first N layers")
        ->check(CLI::Range(1, 1000000))
        ->group(diagGroup)
        ->type_name("N");
    CLI::Option* outOpt = app.add_option("--out", run.out,
                                         "The JSON run report (default k3_run.json; - writes it to "
                                         "stdout and the rest to stderr)")
                              ->group(diagGroup)
                              ->type_name("FILE");
    CLI::Option* dumpLogitsOpt =
        app.add_option("--dump-logits", run.dumpLogits,
                       "Write the first step's logits (vocab_size float32) to FILE")
            ->group(diagGroup)
            ->type_name("FILE");
    CLI::Option* loadStateOpt =
        app.add_option("--load-state", run.loadState,
                       "Continue the conversation state saved in FILE (by --save-state): the "
                       "prompt then gives only the new tokens, or none to go on generating")
            ->group(promptGroup)
            ->type_name("FILE");
    CLI::Option* saveStateOpt =
        app.add_option("--save-state", run.saveState,
                       "Save the conversation state at the end of the run to FILE (--gen 0: "
                       "read the prompt only)")
            ->group(promptGroup)
            ->type_name("FILE");

    // k3 doctor [DIR]: can this machine run the model, which preset, how fast is the disk.
    CLI::App* doctor = app.add_subcommand(
        "doctor", "Check this computer: CPU, RAM -> preset, free space and measured disk speed "
                  "at DIR, and the exact next command");
    std::string doctorDir = ".";
    bool doctorJson = false;
    bool doctorNoDisk = false;
    double doctorSeconds = 3.0;
    doctor->add_option("DIR", doctorDir, "Where the checkpoint is or will be (default: here)")
        ->type_name("DIR");
    doctor->add_flag("--json", doctorJson, "Print the report as JSON (for the app)");
    doctor->add_flag("--no-disk-test", doctorNoDisk, "Skip the disk speed measurement");
    doctor
        ->add_option("--disk-seconds", doctorSeconds,
                     "Seconds spent reading at each queue depth (default 3)")
        ->check(CLI::Range(0.1, 60.0));

    // k3 download DIR: the checkpoint from the hub, resumable and verified.
    CLI::App* download = app.add_subcommand(
        "download", "Download the checkpoint into DIR: parallel, resumable, every file's size "
                    "and sha256 verified. HF_TOKEN from the environment is used when set.");
    k3cli::DownloadArgs dl;
    download->add_option("DIR", dl.dir, "Destination folder (created when missing)")
        ->required()
        ->type_name("DIR");
    download
        ->add_option("--repo", dl.repo,
                     std::string("Hub repository (default ") + k3::kDefaultHubRepo + ")")
        ->type_name("OWNER/NAME");
    download
        ->add_option("--revision", dl.revision,
                     "Commit or branch (default: the pinned "
                     "release commit)")
        ->envname("K3_REVISION")
        ->type_name("REV");
    download
        ->add_option("--layers", dl.layers,
                     "Only the shards layers 0..N-1 need (for development, not the model)")
        ->check(CLI::Range(1, 1000000))
        ->type_name("N");
    download->add_option("--parallel", dl.parallel, "Files transferred at once (default 4)")
        ->check(CLI::Range(1, 64))
        ->type_name("N");
    download
        ->add_option("--endpoint", dl.endpoint,
                     "Hub URL (default $HF_ENDPOINT, else https://huggingface.co)")
        ->type_name("URL");

    // k3 serve MODEL_DIR: the OpenAI chat-completions protocol over HTTP.
    CLI::App* serve = app.add_subcommand(
        "serve", "Serve the model over HTTP with the OpenAI chat-completions protocol "
                 "(GET /v1/models, GET /health, POST /v1/chat/completions, streaming or not)");
    k3cli::ServeArgs sv;
    double serveTrunkGB = 0, serveCacheGB = 0;
    std::string serveSpec;
    serve->add_option("MODEL_DIR", sv.model.modelDir, "The checkpoint folder")
        ->required()
        ->type_name("DIR");
    CLI::Option* serveTokOpt =
        serve->add_option("--tok", sv.model.tokenizerDir, "Tokenizer folder (default MODEL_DIR)")
            ->type_name("DIR");
    CLI::Option* servePresetOpt =
        serve->add_option("--preset", sv.model.memory.preset, "A named budget (k3 --list-presets)")
            ->check(CLI::IsMember(presetNames))
            ->type_name("NAME");
    CLI::Option* serveTrunkGbOpt =
        serve->add_option("--trunk-gb", serveTrunkGB, "GB for the pinned trunk + ring")
            ->check(CLI::Range(0.0, kMaxBudgetGB))
            ->type_name("GB");
    CLI::Option* serveCacheGbOpt =
        serve->add_option("--cache-gb", serveCacheGB, "GB for the routed-expert cache")
            ->check(CLI::Range(0.0, kMaxBudgetGB))
            ->type_name("GB");
    serve->add_option("--trunk", sv.model.memory.trunkDir, "The packed trunk folder")
        ->check(CLI::ExistingDirectory)
        ->type_name("DIR");
    std::string servePinModeText;
    CLI::Option* servePinModeOpt = serve->add_option("--pin-mode", servePinModeText, kPinModeHelp)
                                       ->type_name("raw|compressed|measured");
    serve->add_option("--context", sv.model.context, "Positions a conversation may hold")
        ->check(rangeOf(k3::kContextRange))
        ->type_name("N");
    CLI::Option* serveStateCacheOpt =
        serve->add_option("--state-cache", sv.model.stateCacheDir, stateCacheHelp)
            ->type_name("DIR|default");
    serve
        ->add_option("--state-cache-gb", sv.model.stateCacheGB,
                     "Disk budget of --state-cache (default 4)")
        ->check(CLI::Range(0.001, 1e6))
        ->needs(serveStateCacheOpt)
        ->type_name("GB");
    serve->add_option("--prefill-chunk", sv.model.prefillChunk, "Prompt positions per forward pass")
        ->check(rangeOf(k3::kPrefillChunkRange))
        ->type_name("N");
    serve->add_option("--spec", serveSpec, "Speculative decoding: N proposals (0..32) or auto")
        ->check(specCheck)
        ->type_name("N|auto");
    serve
        ->add_option("--host", sv.host,
                     "Address to listen on (default 127.0.0.1; any other needs --api-key-file)")
        ->type_name("ADDR");
    serve->add_option("--port", sv.port, "Port (default 8000; 0 picks a free one and prints it)")
        ->check(CLI::Range(0, 65535))
        ->type_name("N");
    serve
        ->add_option("--api-key-file", sv.apiKeyFile,
                     "Require Authorization: Bearer KEY, the key being this file's content")
        ->type_name("FILE");
    serve
        ->add_option("--queue", sv.queue,
                     "Requests that may wait behind the running one (default 8; more get 429)")
        ->check(CLI::Range(0, 1024))
        ->type_name("N");
    serve
        ->add_option("--max-body-mb", sv.maxBodyMB,
                     "Largest request body (default 4; more get 413)")
        ->check(CLI::Range(1, 1024))
        ->type_name("MB");
    serve
        ->add_option("--allow-host", sv.allowHosts,
                     "Also accept requests whose Host header names NAME (repeatable; "
                     "127.0.0.1, localhost, [::1] and --host always are)")
        ->type_name("NAME");
    serve
        ->add_option("--cors-origin", sv.corsOrigins,
                     "Answer web pages from ORIGIN (scheme://host[:port]) with CORS headers "
                     "(repeatable); requests with any other Origin get 403")
        ->type_name("ORIGIN");

    // k3 pack MODEL_DIR TRUNK_DIR: the one-time rewrite of the dense trunk.
    CLI::App* pack = app.add_subcommand(
        "pack", "Pack every layer's non-expert tensors of MODEL_DIR into TRUNK_DIR/trunk.bin "
                "(one aligned read per layer) with trunk.json; needed once per checkpoint");
    std::string packModel, packTrunk;
    pack->add_option("MODEL_DIR", packModel, "The checkpoint folder")->required();
    pack->add_option("TRUNK_DIR", packTrunk,
                     "Where trunk.bin and trunk.json go (with --draft: the draft's folder)")
        ->required();
    bool packDraft = false;
    CLI::Option* packDraftOpt =
        pack->add_flag("--draft", packDraft,
                       "Write a draft trunk for speculation instead (the projections in MXFP4, no "
                       "routed experts; use it with --draft-trunk)");
    bool packCompress = false;
    pack->add_flag("--compress", packCompress,
                   "Store each layer losslessly coded per block (trunk format 3): fewer bytes "
                   "read per token, the same bits; blocks where coding does not pay stay raw")
        ->excludes(packDraftOpt);

    // k3 replay TRACE: what more (or less) memory would buy, from a recorded cache trace.
    CLI::App* replay = app.add_subcommand(
        "replay", "Replay an expert cache trace (--dump-cache-trace's expert_trace.bin) at "
                  "several cache budgets: TRUE hit rate, expert GB read per token and the "
                  "s/token the disk and compute rates predict");
    k3cli::ReplayArgs rp;
    replay->add_option("TRACE", rp.trace, "expert_trace.bin, or the folder holding it")->required();
    replay->add_option("--cache-gb", rp.cacheGB, "Budgets to replay, comma-separated GB")
        ->capture_default_str();
    replay->add_option("--report", rp.report,
                       "A run.json (k3 --cache-gb ... --out): the expert size, slot size, "
                       "disk rate and compute per pass it measured become the defaults");
    replay->add_option("--expert-mb", rp.expertMB,
                       "Bytes read per expert, MB (default: "
                       "the report's, else the real K3's 17.55 MB)");
    replay->add_option("--slot-mb", rp.slotMB, "Cache bytes per expert, MB");
    replay->add_option("--disk-gbps", rp.diskGBps,
                       "Expert read rate, GB/s (default: the report's, else 2)");
    replay->add_option("--compute-s", rp.computeSeconds,
                       "Compute seconds per forward pass (default: the report's, else 0)");
    replay->add_option("--tokens", rp.tokens,
                       "Tokens the trace covers (default: its passes, one per forward)");

    app.footer("Exit codes: 0 ok, 1 load or forward failure or memory refusal, 2 usage error "
               "or unreadable config, 4 run invalid (dropped expert or NaN; the report is "
               "printed first), 130 stopped with Ctrl-C.\n"
               "Environment: K3_MODEL_DIR (MODEL_DIR), HF_TOKEN and K3_REVISION (download), "
               "OMP_NUM_THREADS, K3_EXPERT_IO (threads or uring: how routed experts are read; "
               "unset, io_uring where the kernel allows it).");

    // CLI11's own errors quote the arguments: shown, never obeyed, like every message.
    app.failure_message([](const CLI::App* failed, const CLI::Error& e) {
        return k3cli::terminalSafe(CLI::FailureMessage::simple(failed, e));
    });
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e); // prints help/version, or the error and a hint
        return code == 0 ? 0 : kExitUsage;
    }

    try {
        if (*doctor) {
            k3::DoctorOptions options;
            options.modelDir = doctorDir;
            options.measureDisk = !doctorNoDisk;
            options.disk.maxSecondsPerDepth = doctorSeconds;
            const k3::DoctorReport report = k3::runDoctor(options);
            // The text report names paths and the checkpoint's own strings: shown, not obeyed.
            const std::string text = doctorJson
                                         ? k3::doctorReportJson(report) + "\n"
                                         : k3cli::terminalSafe(k3::formatDoctorReport(report));
            std::fputs(text.c_str(), stdout);
            return report.canRun() ? 0 : 1;
        }
        if (*download) return k3cli::runDownload(dl);
        if (*replay) return k3cli::runReplay(rp);
        if (*pack)
            return packDraft ? k3cli::runPackDraft(packModel, packTrunk)
                             : k3cli::runPack(packModel, packTrunk, packCompress);
        if (*serve) {
            sv.model.tokenizerGiven = serveTokOpt->count() > 0;
            resolveMemory(*serve, servePresetOpt, serveTrunkGbOpt, serveCacheGbOpt, serveTrunkGB,
                          serveCacheGB, sv.model.memory);
            if (servePinModeOpt->count())
                sv.model.memory.pinMode = k3cli::parsePinMode(servePinModeText);
            if (!serveSpec.empty())
                sv.model.speculation = serveSpec == "auto" ? -1 : std::stoi(serveSpec);
            return k3cli::runServe(sv);
        }
        if (listPresets) {
            std::fputs(k3::formatPresetTable().c_str(), stdout);
            return 0;
        }
        if (argc == 1) {
            std::cout << app.help();
            return 0;
        }

        model.tokenizerGiven = tokOpt->count() > 0;
        resolveMemory(app, presetOpt, trunkGbOpt, cacheGbOpt, trunkGB, cacheGB, model.memory);
        if (pinModeOpt->count()) model.memory.pinMode = k3cli::parsePinMode(pinModeText);
        if (!specText.empty()) model.speculation = specText == "auto" ? -1 : std::stoi(specText);
        if (!model.draftDir.empty() && specText.empty()) model.speculation = -1;
        if (temperatureOpt->count()) model.sampling.temperature = temperature;
        if (topPOpt->count()) model.sampling.topP = topP;
        if (seedOpt->count()) model.sampling.seed = seed;
        if (model.sampling.topP && *model.sampling.topP <= 0.0)
            throw k3cli::usageError("--top-p must be above 0 (1 keeps every token)");

        if (chatMode) {
            if (run.gen == 0 && genOpt->count())
                throw k3cli::usageError("--gen 0 is for a batch run with --save-state");
            for (const CLI::Option* o : {promptOpt, promptFileOpt, idsOpt, outOpt, dumpLogitsOpt,
                                         loadStateOpt, saveStateOpt, imageOpt})
                if (o->count())
                    throw k3cli::usageError(o->get_name() +
                                            " is for a batch run; --chat reads your messages "
                                            "from the terminal");
            chat.model = model;
            chat.imagePatchLimit = run.imagePatchLimit;
            if (systemOpt->count()) chat.system = systemText;
            if (maxTokensOpt->count() == 0 && genOpt->count()) chat.maxTokens = run.gen;
            if (remoteOpt->count()) {
                for (const CLI::Option* o : {jsonOpt, jsonSchemaOpt})
                    if (o->count())
                        throw k3cli::usageError(o->get_name() +
                                                " constrains a local model's answers; with "
                                                "--remote ask the server (response_format)");
                if (!model.modelDir.empty())
                    throw k3cli::usageError("--remote chats with a server: drop MODEL_DIR (or "
                                            "unset K3_MODEL_DIR)");
                return k3cli::runRemoteChat(chat);
            }
            for (const CLI::Option* o : {remoteModelOpt, apiKeyFileOpt})
                if (o->count()) throw k3cli::usageError(o->get_name() + " needs --remote URL");
            return k3cli::runChat(chat);
        }
        for (const CLI::Option* o : {remoteOpt, remoteModelOpt, apiKeyFileOpt})
            if (o->count())
                throw k3cli::usageError(o->get_name() + " needs --chat (k3 --remote URL --model " +
                                        "NAME --chat)");
        for (const CLI::Option* o :
             {systemOpt, historyOpt, noThinkOpt, effortOpt, maxTokensOpt, jsonOpt, jsonSchemaOpt})
            if (o->count()) throw k3cli::usageError(o->get_name() + " needs --chat");
        if (promptOpt->count()) run.prompt = promptText;
        if (promptFileOpt->count()) run.promptFile = promptFile;
        if (idsOpt->count()) run.ids = idsText;
        return k3cli::runBatch(run);
    } catch (const k3cli::CommandError& error) {
        k3cli::printError(error.message);
        return error.exitCode;
    } catch (const k3::ConfigError& error) {
        k3cli::printError(error.what());
        return kExitUsage;
    } catch (const std::exception& error) {
        k3cli::printError(error.what() + k3cli::cliAdvice(error));
        return k3cli::kExitFailure;
    }
}
