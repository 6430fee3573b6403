// Every flag of `k3`, defined once: the model flags (ModelFlags) serve a run, a chat and
// k3 serve alike. Parsing ends in a plain CommandLine; nothing here runs a command.
#include "CommandLine.hpp"

#include "CliSupport.hpp"
#include "MemoryFlagAdvice.hpp"

#include <CLI/CLI.hpp>

#include <k3/hub.hpp>
#include <k3/launch.hpp>
#include <k3/presets.hpp>
#include <k3/system.hpp>
#include <k3/version.hpp>

#include <cstdlib>
#include <initializer_list>
#include <optional>

namespace k3cli {

namespace {

// The flags take the ranges validate(LaunchConfig) enforces (k3/launch.hpp).
CLI::Range rangeOf(k3::LaunchRange r) {
    return CLI::Range(r.min, r.max);
}
constexpr double kMaxBudgetGB = double(k3::kMaxBudgetBytes) / 1e9;

constexpr const char* kPromptGroup = "Prompt (exactly one, except with --chat)";
constexpr const char* kMemoryGroup =
    "Memory (the same tokens at every budget; memory only buys speed. --trunk DIR streams "
    "the trunk packed by k3 pack; --cache-gb sends the routed experts through the cache)";
constexpr const char* kGenGroup = "Generation";
constexpr const char* kChatGroup = "Chat (XTML, the official Kimi K3 format)";
constexpr const char* kRemoteGroup = "Remote (chat with an OpenAI-compatible server: vLLM, "
                                     "SGLang, k3 serve)";
constexpr const char* kDiagGroup = "Diagnostics";

constexpr const char* kPinModeHelp =
    "How a compressed trunk's pinned layers are held: raw (decoded once, at load), "
    "compressed (decoded at each use, so the budget pins more layers) or measured (compressed "
    "where a measurement at load says it pays; the default)";

std::vector<std::string> presetNames() {
    std::vector<std::string> names;
    for (const k3::Preset& p : k3::presets()) names.emplace_back(p.name);
    names.emplace_back("auto");
    return names;
}

// --spec N|auto: a number of proposals 0..32 or the adaptive width.
std::string specCheck(const std::string& v) {
    if (v == "auto") return {};
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || n < 0 || n > 32)
        return "--spec " + v + " is not auto or a number of proposals 0..32";
    return {};
}

bool given(const CLI::Option* option) {
    return option->count() > 0;
}

// The flags that open a model, for a run and a chat (the top level) and for k3 serve.
// They bind to ModelArgs where they can; the rest is read by resolve() after parsing.
class ModelFlags {
public:
    // grouped: the top level's help groups; k3 serve lists its flags in one group.
    ModelFlags(CLI::App& app, ModelArgs& model, bool grouped)
        : app_(app), model_(model), grouped_(grouped) {
        tok_ = app.add_option("--tok", model.tokenizerDir,
                              "Tokenizer folder (tiktoken.model, tokenizer_config.json); "
                              "default MODEL_DIR")
                   ->group(group(kPromptGroup))
                   ->type_name("DIR");
        addMemoryFlags();
        addContextFlags();
        spec_ = app.add_option("--spec", spec_text_,
                               "Speculative decoding: verify up to N prompt-lookup proposals per "
                               "trunk pass, 1..32, or auto (an adaptive width); greedy gives the "
                               "same tokens as without it, sampling the same distribution")
                    ->check(specCheck)
                    ->group(group(kGenGroup))
                    ->type_name("N|auto");
    }
    ModelFlags(const ModelFlags&) = delete; // CLI11 holds pointers into it
    ModelFlags& operator=(const ModelFlags&) = delete;

    // After parsing: the memory flags in their order, --pin-mode and --spec.
    void resolve() const {
        model_.tokenizerGiven = given(tok_);
        resolveMemory();
        if (given(pin_mode_)) model_.memory.pinMode = parsePinMode(pin_mode_text_);
        if (!spec_text_.empty())
            model_.speculation = spec_text_ == "auto" ? -1 : std::stoi(spec_text_);
        if (!model_.draftDir.empty() && spec_text_.empty()) model_.speculation = -1;
    }

private:
    std::string group(const char* name) const { return grouped_ ? name : "Options"; }

    void addMemoryFlags() {
        static const std::vector<std::string> names = presetNames();
        preset_ =
            app_.add_option("--preset", model_.memory.preset, "A named budget (k3 --list-presets)")
                ->check(CLI::IsMember(names))
                ->group(group(kMemoryGroup))
                ->type_name("NAME");
        trunk_gb_ = app_.add_option("--trunk-gb", trunk_gb_value_,
                                    "GB for the pinned trunk + ring (0: stream every layer "
                                    "through the smallest ring)")
                        ->check(CLI::Range(0.0, kMaxBudgetGB))
                        ->group(group(kMemoryGroup))
                        ->type_name("GB");
        cache_gb_ = app_.add_option("--cache-gb", cache_gb_value_, "GB for the routed-expert cache")
                        ->check(CLI::Range(0.0, kMaxBudgetGB))
                        ->group(group(kMemoryGroup))
                        ->type_name("GB");
        app_.add_option("--trunk", model_.memory.trunkDir, "The packed trunk folder")
            ->check(CLI::ExistingDirectory)
            ->group(group(kMemoryGroup))
            ->type_name("DIR");
        pin_mode_ = app_.add_option("--pin-mode", pin_mode_text_, kPinModeHelp)
                        ->group(group(kMemoryGroup))
                        ->type_name("raw|compressed|measured");
    }

    void addContextFlags() {
        app_.add_option("--context", model_.context,
                        "Positions a conversation may hold, 16..1048576 (default 4096); the "
                        "memory plan sizes the KV cache for it")
            ->check(rangeOf(k3::kContextRange))
            ->group(group(kMemoryGroup))
            ->type_name("N");
        CLI::Option* stateCache =
            app_.add_option("--state-cache", model_.stateCacheDir,
                            "Keep conversation states in DIR (default: ~/.cache/k3/states) so a "
                            "prompt that starts with positions read before reads only the rest; "
                            "the same tokens")
                ->group(group(kMemoryGroup))
                ->type_name("DIR|default");
        app_.add_option("--state-cache-gb", model_.stateCacheGB,
                        "Disk budget of --state-cache, least recently used states go first "
                        "(default 4)")
            ->check(CLI::Range(0.001, 1e6))
            ->needs(stateCache)
            ->group(group(kMemoryGroup))
            ->type_name("GB");
        app_.add_option("--prefill-chunk", model_.prefillChunk,
                        "Prompt positions per forward pass, 0..4096 (default 0: as many as the "
                        "expert cache's memory pays for, at least 64, at most the context); the "
                        "same tokens at every size")
            ->check(rangeOf(k3::kPrefillChunkRange))
            ->group(group(kMemoryGroup))
            ->type_name("N");
    }

    // --preset and the two -gb flags set the same two numbers; a later flag wins. The
    // engine's resolveMemoryFlags applies them; the report keeps what was asked.
    void resolveMemory() const {
        MemoryArgs& m = model_.memory;
        std::vector<k3::MemoryFlag> flags;
        for (const CLI::Option* o : app_.parse_order()) {
            if (o == preset_) flags.push_back({k3::MemoryFlag::Kind::Preset, m.preset, 0});
            if (o == trunk_gb_)
                flags.push_back({k3::MemoryFlag::Kind::TrunkGB, {}, trunk_gb_value_});
            if (o == cache_gb_)
                flags.push_back({k3::MemoryFlag::Kind::CacheGB, {}, cache_gb_value_});
        }
        const auto mem = k3::readMemoryInfo();
        const std::uint64_t available = mem ? mem->availableBytes : 0;
        try {
            m.budget = k3::resolveMemoryFlags(flags, available);
        } catch (const k3::MemoryRefusal& e) {
            // The engine names the setting; the flag that set it is ours to add.
            throw usageError(e.what() + memoryFlagAdvice(flags, available));
        }
        m.resolvedPreset = m.budget.preset;
        const bool preset = !m.budget.preset.empty();
        if (preset || m.budget.trunkBytes) m.trunkGB = double(m.budget.resolvedTrunkBytes()) / 1e9;
        if (preset || m.budget.cacheBytes) m.cacheGB = double(m.budget.resolvedCacheBytes()) / 1e9;
    }

    CLI::App& app_;
    ModelArgs& model_;
    bool grouped_;
    CLI::Option* tok_ = nullptr;
    CLI::Option* preset_ = nullptr;
    CLI::Option* trunk_gb_ = nullptr;
    CLI::Option* cache_gb_ = nullptr;
    CLI::Option* pin_mode_ = nullptr;
    CLI::Option* spec_ = nullptr;
    double trunk_gb_value_ = 0;
    double cache_gb_value_ = 0;
    std::string pin_mode_text_;
    std::string spec_text_;
};

// The whole command line: the top level (a batch run or a chat) and the subcommands.
class Parser {
public:
    explicit Parser(CommandLine& out)
        : out_(out), app_("k3: run the 2.78-trillion-parameter Kimi K3 on one CPU by streaming "
                          "its weights from disk.\n\n"
                          "  k3 MODEL_DIR (--prompt TEXT | --prompt-file FILE | --ids 1,2,3) "
                          "[options]\n"
                          "  k3 MODEL_DIR --chat [--system TEXT] [--history FILE] [options]\n"
                          "  k3 --remote URL --model NAME [--api-key-file F] --chat [options]\n"
                          "  k3 serve MODEL_DIR [--host H --port P --api-key-file F] [options]\n"
                          "  k3 doctor [DIR]      k3 download DIR\n"
                          "  k3 replay TRACE [--cache-gb 0.5,1,2,4,16] [--report run.json]\n",
                          "k3") {
        app_.set_version_flag("--version", std::string("k3 (k3chat) ") + k3::kVersion);
        app_.add_flag("--list-presets", list_presets_,
                      "Print the memory presets (trunk GB / expert-cache GB) and exit");
        app_.add_option("MODEL_DIR", out.run.model.modelDir,
                        "The checkpoint folder: config.json and the .safetensors shards")
            ->envname("K3_MODEL_DIR")
            ->type_name("DIR");
        addPromptFlags();
        model_flags_.emplace(app_, out.run.model, true);
        addRunModelFlags();
        addGenerationFlags();
        addChatFlags();
        addRemoteFlags();
        addDiagnosticFlags();
        addDoctor();
        addDownload();
        addServe();
        addPack();
        addReplay();
        app_.footer("Exit codes: 0 ok, 1 load or forward failure or memory refusal, 2 usage "
                    "error or unreadable config, 4 run invalid (dropped expert or NaN; the "
                    "report is printed first), 130 stopped with Ctrl-C.\n"
                    "Environment: K3_MODEL_DIR (MODEL_DIR), HF_TOKEN and K3_REVISION "
                    "(download), OMP_NUM_THREADS, K3_EXPERT_IO (threads or uring: how routed "
                    "experts are read; unset, io_uring where the kernel allows it).");
        // CLI11's own errors quote the arguments: shown, never obeyed, like every message.
        app_.failure_message([](const CLI::App* failed, const CLI::Error& e) {
            return terminalSafe(CLI::FailureMessage::simple(failed, e));
        });
    }

    // CLI11's parse; false when it ended the run (help, version or an error: printed).
    bool parse(int argc, const char* const* argv) {
        try {
            app_.parse(argc, argv);
            return true;
        } catch (const CLI::ParseError& e) {
            const int code = app_.exit(e); // prints help/version, or the error and a hint
            out_.exitCode = code == 0 ? 0 : kExitUsage;
            return false;
        }
    }

    // Which command, with its arguments resolved and checked across flags.
    void finish(int argc) {
        using Command = CommandLine::Command;
        if (*doctor_) return set(Command::Doctor);
        if (*download_) return set(Command::Download);
        if (*replay_) return set(Command::Replay);
        if (*pack_) return set(Command::Pack);
        if (*serve_) {
            serve_model_flags_->resolve();
            return set(Command::Serve);
        }
        if (list_presets_) return set(Command::ListPresets);
        if (argc == 1) {
            out_.help = app_.help();
            return set(Command::Help);
        }
        model_flags_->resolve();
        resolveSamplingFlags();
        if (chat_mode_) return finishChat();
        finishBatch();
    }

private:
    void set(CommandLine::Command command) { out_.command = command; }

    void addPromptFlags();
    void addRunModelFlags();
    void addGenerationFlags();
    void addChatFlags();
    void addRemoteFlags();
    void addDiagnosticFlags();
    void addDoctor();
    void addDownload();
    void addServe();
    void addPack();
    void addReplay();
    void resolveSamplingFlags();
    void finishChat();
    void finishBatch();

    CommandLine& out_;
    CLI::App app_;
    std::optional<ModelFlags> model_flags_;
    std::optional<ModelFlags> serve_model_flags_;
    bool list_presets_ = false;
    bool chat_mode_ = false;
    std::string prompt_text_, prompt_file_, ids_text_, system_text_;
    double temperature_ = 1.0, top_p_ = 0.95;
    std::uint64_t seed_ = 0;
    CLI::Option *prompt_ = nullptr, *prompt_file_opt_ = nullptr, *ids_ = nullptr, *image_ = nullptr;
    CLI::Option *gen_ = nullptr, *temperature_opt_ = nullptr, *top_p_opt_ = nullptr,
                *seed_opt_ = nullptr;
    CLI::Option *system_ = nullptr, *history_ = nullptr, *no_think_ = nullptr, *effort_ = nullptr,
                *max_tokens_ = nullptr, *json_ = nullptr, *json_schema_ = nullptr;
    CLI::Option *remote_ = nullptr, *remote_model_ = nullptr, *api_key_file_ = nullptr;
    CLI::Option *out_opt_ = nullptr, *dump_logits_ = nullptr, *load_state_ = nullptr,
                *save_state_ = nullptr;
    CLI::App *doctor_ = nullptr, *download_ = nullptr, *serve_ = nullptr, *pack_ = nullptr,
             *replay_ = nullptr;
};

void Parser::addPromptFlags() {
    RunArgs& run = out_.run;
    prompt_ = app_.add_option("--prompt", prompt_text_, "Text to continue, tokenized as is")
                  ->group(kPromptGroup)
                  ->type_name("TEXT");
    prompt_file_opt_ =
        app_.add_option("--prompt-file", prompt_file_,
                        "Read the text verbatim from FILE (use this for non-ASCII text)")
            ->group(kPromptGroup)
            ->type_name("FILE");
    ids_ = app_.add_option("--ids", ids_text_, "Token ids in, ids out, e.g. 1008,10484,318")
               ->group(kPromptGroup)
               ->type_name("IDS");
    image_ = app_.add_option("--image", run.images,
                             "An image (PNG, JPEG, WebP) read before the prompt text; repeat for "
                             "several. With --ids: one <|media_pad|> id per image")
                 ->group(kPromptGroup)
                 ->type_name("FILE");
    app_.add_option("--image-patch-limit", run.imagePatchLimit,
                    "Largest image in 14-px patches, a quarter of them prompt positions "
                    "(default 65536, the release's; lower it to make images cheaper)")
        ->check(CLI::Range(1, 65536))
        ->group(kPromptGroup)
        ->type_name("N");
    load_state_ = app_.add_option("--load-state", run.loadState,
                                  "Continue the conversation state saved in FILE (by "
                                  "--save-state): the prompt then gives only the new tokens, or "
                                  "none to go on generating")
                      ->group(kPromptGroup)
                      ->type_name("FILE");
    save_state_ = app_.add_option("--save-state", run.saveState,
                                  "Save the conversation state at the end of the run to FILE "
                                  "(--gen 0: read the prompt only)")
                      ->group(kPromptGroup)
                      ->type_name("FILE");
}

// The model flags k3 serve does not take (and --layers, with the diagnostics).
void Parser::addRunModelFlags() {
    ModelArgs& model = out_.run.model;
    app_.add_option("--dump-cache-trace", model.memory.cacheTraceDir,
                    "Write the expert-cache request trace to DIR: expert_requests.tsv (step, "
                    "layer, expert, hit), expert_trace.bin and expert_hist.json (needs a cache)")
        ->group(kMemoryGroup)
        ->type_name("DIR");
    app_.add_option("--draft-trunk", model.draftDir,
                    "Propose with this draft trunk (k3 pack --draft) instead of prompt lookup; "
                    "turns on --spec auto unless --spec is given")
        ->group(kGenGroup)
        ->type_name("DIR");
}

void Parser::addGenerationFlags() {
    RunArgs& run = out_.run;
    gen_ = app_.add_option("--gen", run.gen,
                           "Tokens to generate, 1..4096 (default 16; --chat: 4096 per answer; 0 "
                           "with --save-state: read the prompt only)")
               ->check(CLI::Range(0, 4096))
               ->group(kGenGroup)
               ->type_name("N");
    app_.add_flag("--incremental", run.incremental,
                  "Accepted for the seed's scripts: decoding here is always incremental")
        ->group(kGenGroup);
    temperature_opt_ =
        app_.add_option("--temperature", temperature_,
                        "Sample at this temperature (default 1.0 once sampling is on)")
            ->check(CLI::Range(0.0, 100.0))
            ->group(kGenGroup)
            ->type_name("T");
    top_p_opt_ = app_.add_option("--top-p", top_p_, "Nucleus sampling mass (default 0.95)")
                     ->check(CLI::Range(0.0, 1.0))
                     ->group(kGenGroup)
                     ->type_name("P");
    seed_opt_ = app_.add_option("--seed", seed_, "Sampling seed (one stream per assistant turn)")
                    ->group(kGenGroup)
                    ->type_name("N");
    app_.add_flag("--greedy", run.model.sampling.greedy,
                  "Argmax even when a sampling flag is given")
        ->group(kGenGroup);
}

void Parser::addChatFlags() {
    ChatArgs& chat = out_.chat;
    app_.add_flag("--chat", chat_mode_, "Talk to the model: a REPL with /help, /reset, /exit")
        ->group(kChatGroup);
    system_ = app_.add_option("--system", system_text_, "The system message")
                  ->group(kChatGroup)
                  ->type_name("TEXT");
    history_ = app_.add_option("--history", chat.history,
                               "JSONL transcript: resumed when it exists, saved after every "
                               "turn; what the model has read of it is kept in FILE.states/ "
                               "(unless --state-cache is given), so a resumed conversation is "
                               "not read again")
                   ->group(kChatGroup)
                   ->type_name("FILE");
    no_think_ = app_.add_flag("--no-think", chat.noThink, "Answer at once, without a think channel")
                    ->group(kChatGroup);
    effort_ = app_.add_option("--thinking-effort", chat.thinkingEffort,
                              "low, medium, high or max (default max)")
                  ->check(CLI::IsMember({"low", "medium", "high", "max"}))
                  ->group(kChatGroup)
                  ->type_name("LEVEL");
    max_tokens_ =
        app_.add_option("--max-tokens", chat.maxTokens, "Longest answer in tokens (default 4096)")
            ->check(CLI::Range(1, 4096))
            ->group(kChatGroup)
            ->type_name("N");
    json_ =
        app_.add_flag("--json", chat.json, "Every answer is a JSON object (constrained decoding)")
            ->group(kChatGroup);
    json_schema_ = app_.add_option("--json-schema", chat.jsonSchema,
                                   "Every answer is JSON valid against this JSON Schema (the "
                                   "subset the user guide lists)")
                       ->group(kChatGroup)
                       ->type_name("FILE")
                       ->excludes(json_);
}

void Parser::addRemoteFlags() {
    RemoteArgs& remote = out_.chat.remote;
    remote_ = app_.add_option("--remote", remote.url,
                              "The server's URL, e.g. http://gpu-node:8000/v1 (with --chat)")
                  ->group(kRemoteGroup)
                  ->type_name("URL");
    remote_model_ = app_.add_option("--model", remote.model, "The server's name for the model")
                        ->group(kRemoteGroup)
                        ->type_name("NAME");
    api_key_file_ = app_.add_option("--api-key-file", remote.apiKeyFile,
                                    "A file whose first line is the server's API key (sent as "
                                    "Bearer)")
                        ->group(kRemoteGroup)
                        ->type_name("FILE");
}

void Parser::addDiagnosticFlags() {
    RunArgs& run = out_.run;
    app_.add_option("--layers", run.model.layers, "Bind and run only the first N layers")
        ->check(CLI::Range(1, 1000000))
        ->group(kDiagGroup)
        ->type_name("N");
    out_opt_ = app_.add_option("--out", run.out,
                               "The JSON run report (default k3_run.json; - writes it to stdout "
                               "and the rest to stderr)")
                   ->group(kDiagGroup)
                   ->type_name("FILE");
    dump_logits_ = app_.add_option("--dump-logits", run.dumpLogits,
                                   "Write the first step's logits (vocab_size float32) to FILE")
                       ->group(kDiagGroup)
                       ->type_name("FILE");
}

// k3 doctor [DIR]: can this machine run the model, which preset, how fast is the disk.
void Parser::addDoctor() {
    DoctorArgs& d = out_.doctor;
    doctor_ = app_.add_subcommand("doctor", "Check this computer: CPU, RAM -> preset, free space "
                                            "and measured disk speed at DIR, and the exact next "
                                            "command");
    doctor_->add_option("DIR", d.dir, "Where the checkpoint is or will be (default: here)")
        ->type_name("DIR");
    doctor_->add_flag("--json", d.json, "Print the report as JSON (for the app)");
    doctor_->add_flag("--no-disk-test", d.noDiskTest, "Skip the disk speed measurement");
    doctor_
        ->add_option("--disk-seconds", d.diskSeconds,
                     "Seconds spent reading at each queue depth (default 3)")
        ->check(CLI::Range(0.1, 60.0));
}

// k3 download DIR: the checkpoint from the hub, resumable and verified.
void Parser::addDownload() {
    DownloadArgs& dl = out_.download;
    download_ = app_.add_subcommand(
        "download", "Download the checkpoint into DIR: parallel, resumable, every file's size "
                    "and sha256 verified. HF_TOKEN from the environment is used when set.");
    download_->add_option("DIR", dl.dir, "Destination folder (created when missing)")
        ->required()
        ->type_name("DIR");
    download_
        ->add_option("--repo", dl.repo,
                     std::string("Hub repository (default ") + k3::kDefaultHubRepo + ")")
        ->type_name("OWNER/NAME");
    download_
        ->add_option("--revision", dl.revision,
                     "Commit or branch (default: the pinned release "
                     "commit)")
        ->envname("K3_REVISION")
        ->type_name("REV");
    download_
        ->add_option("--layers", dl.layers,
                     "Only the shards layers 0..N-1 need (for development, not the model)")
        ->check(CLI::Range(1, 1000000))
        ->type_name("N");
    download_->add_option("--parallel", dl.parallel, "Files transferred at once (default 4)")
        ->check(CLI::Range(1, 64))
        ->type_name("N");
    download_
        ->add_option("--endpoint", dl.endpoint,
                     "Hub URL (default $HF_ENDPOINT, else https://huggingface.co)")
        ->type_name("URL");
}

// k3 serve MODEL_DIR: the OpenAI chat-completions protocol over HTTP.
void Parser::addServe() {
    ServeArgs& sv = out_.serve;
    serve_ = app_.add_subcommand(
        "serve", "Serve the model over HTTP with the OpenAI chat-completions protocol "
                 "(GET /v1/models, GET /health, POST /v1/chat/completions, streaming or not)");
    serve_->add_option("MODEL_DIR", sv.model.modelDir, "The checkpoint folder")
        ->required()
        ->type_name("DIR");
    serve_model_flags_.emplace(*serve_, sv.model, false);
    serve_
        ->add_option("--host", sv.host,
                     "Address to listen on (default 127.0.0.1; any other needs --api-key-file)")
        ->type_name("ADDR");
    serve_->add_option("--port", sv.port, "Port (default 8000; 0 picks a free one and prints it)")
        ->check(CLI::Range(0, 65535))
        ->type_name("N");
    serve_
        ->add_option("--api-key-file", sv.apiKeyFile,
                     "Require Authorization: Bearer KEY, the key being this file's content")
        ->type_name("FILE");
    serve_
        ->add_option("--queue", sv.queue,
                     "Requests that may wait behind the running one (default 8; more get 429)")
        ->check(CLI::Range(0, 1024))
        ->type_name("N");
    serve_
        ->add_option("--max-body-mb", sv.maxBodyMB,
                     "Largest request body (default 4; more get 413)")
        ->check(CLI::Range(1, 1024))
        ->type_name("MB");
    serve_
        ->add_option("--allow-host", sv.allowHosts,
                     "Also accept requests whose Host header names NAME (repeatable; "
                     "127.0.0.1, localhost, [::1] and --host always are)")
        ->type_name("NAME");
    serve_
        ->add_option("--cors-origin", sv.corsOrigins,
                     "Answer web pages from ORIGIN (scheme://host[:port]) with CORS headers "
                     "(repeatable); requests with any other Origin get 403")
        ->type_name("ORIGIN");
}

// k3 pack MODEL_DIR TRUNK_DIR: the one-time rewrite of the dense trunk.
void Parser::addPack() {
    PackArgs& p = out_.pack;
    pack_ = app_.add_subcommand(
        "pack", "Pack every layer's non-expert tensors of MODEL_DIR into TRUNK_DIR/trunk.bin "
                "(one aligned read per layer) with trunk.json; needed once per checkpoint");
    pack_->add_option("MODEL_DIR", p.modelDir, "The checkpoint folder")->required();
    pack_
        ->add_option("TRUNK_DIR", p.trunkDir,
                     "Where trunk.bin and trunk.json go (with --draft: the draft's folder)")
        ->required();
    CLI::Option* draft =
        pack_->add_flag("--draft", p.draft,
                        "Write a draft trunk for speculation instead (the projections in MXFP4, "
                        "no routed experts; use it with --draft-trunk)");
    pack_
        ->add_flag("--compress", p.compress,
                   "Store each layer losslessly coded per block (trunk format 3): fewer bytes "
                   "read per token, the same bits; blocks where coding does not pay stay raw")
        ->excludes(draft);
}

// k3 replay TRACE: what more (or less) memory would buy, from a recorded cache trace.
void Parser::addReplay() {
    ReplayArgs& rp = out_.replay;
    replay_ = app_.add_subcommand(
        "replay", "Replay an expert cache trace (--dump-cache-trace's expert_trace.bin) at "
                  "several cache budgets: TRUE hit rate, expert GB read per token and the "
                  "s/token the disk and compute rates predict");
    replay_->add_option("TRACE", rp.trace, "expert_trace.bin, or the folder holding it")
        ->required();
    replay_->add_option("--cache-gb", rp.cacheGB, "Budgets to replay, comma-separated GB")
        ->capture_default_str();
    replay_->add_option("--report", rp.report,
                        "A run.json (k3 --cache-gb ... --out): the expert size, slot size, "
                        "disk rate and compute per pass it measured become the defaults");
    replay_->add_option("--expert-mb", rp.expertMB,
                        "Bytes read per expert, MB (default: the report's, else the real K3's "
                        "17.55 MB)");
    replay_->add_option("--slot-mb", rp.slotMB, "Cache bytes per expert, MB");
    replay_->add_option("--disk-gbps", rp.diskGBps,
                        "Expert read rate, GB/s (default: the report's, else 2)");
    replay_->add_option("--compute-s", rp.computeSeconds,
                        "Compute seconds per forward pass (default: the report's, else 0)");
    replay_->add_option("--tokens", rp.tokens,
                        "Tokens the trace covers (default: its passes, one per forward)");
}

void Parser::resolveSamplingFlags() {
    SamplingArgs& sampling = out_.run.model.sampling;
    if (given(temperature_opt_)) sampling.temperature = temperature_;
    if (given(top_p_opt_)) sampling.topP = top_p_;
    if (given(seed_opt_)) sampling.seed = seed_;
    if (sampling.topP && *sampling.topP <= 0.0)
        throw usageError("--top-p must be above 0 (1 keeps every token)");
}

void Parser::finishChat() {
    const RunArgs& run = out_.run;
    ChatArgs& chat = out_.chat;
    if (run.gen == 0 && given(gen_))
        throw usageError("--gen 0 is for a batch run with --save-state");
    for (const CLI::Option* o : {prompt_, prompt_file_opt_, ids_, out_opt_, dump_logits_,
                                 load_state_, save_state_, image_})
        if (given(o))
            throw usageError(o->get_name() + " is for a batch run; --chat reads your messages "
                                             "from the terminal");
    chat.model = run.model;
    chat.imagePatchLimit = run.imagePatchLimit;
    if (given(system_)) chat.system = system_text_;
    if (!given(max_tokens_) && given(gen_)) chat.maxTokens = run.gen;
    if (given(remote_)) {
        for (const CLI::Option* o : {json_, json_schema_})
            if (given(o))
                throw usageError(o->get_name() + " constrains a local model's answers; with "
                                                 "--remote ask the server (response_format)");
        if (!run.model.modelDir.empty())
            throw usageError("--remote chats with a server: drop MODEL_DIR (or unset "
                             "K3_MODEL_DIR)");
        return set(CommandLine::Command::RemoteChat);
    }
    for (const CLI::Option* o : {remote_model_, api_key_file_})
        if (given(o)) throw usageError(o->get_name() + " needs --remote URL");
    set(CommandLine::Command::Chat);
}

void Parser::finishBatch() {
    for (const CLI::Option* o : {remote_, remote_model_, api_key_file_})
        if (given(o))
            throw usageError(o->get_name() + " needs --chat (k3 --remote URL --model " +
                             "NAME --chat)");
    for (const CLI::Option* o :
         {system_, history_, no_think_, effort_, max_tokens_, json_, json_schema_})
        if (given(o)) throw usageError(o->get_name() + " needs --chat");
    RunArgs& run = out_.run;
    if (given(prompt_)) run.prompt = prompt_text_;
    if (given(prompt_file_opt_)) run.promptFile = prompt_file_;
    if (given(ids_)) run.ids = ids_text_;
    set(CommandLine::Command::Batch);
}

} // namespace

CommandLine parseCommandLine(int argc, const char* const* argv) {
    CommandLine commandLine;
    Parser parser(commandLine);
    if (parser.parse(argc, argv)) parser.finish(argc);
    return commandLine;
}

} // namespace k3cli
