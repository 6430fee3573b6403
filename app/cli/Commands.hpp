#pragma once
// The `k3` commands as plain functions over parsed arguments, so main() only maps the
// command line (CLI11) onto these structs. Each returns the process exit code.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <k3/launch.hpp>

namespace k3cli {

// --preset / --trunk-gb / --cache-gb / --trunk / --pin-mode / --dump-cache-trace. With
// --trunk the trunk streams from the packed trunk within the trunk budget; a cache budget
// sends the routed experts through the expert cache.
struct MemoryArgs {
    k3::LaunchBudget budget;       // the flags in order (k3::resolveMemoryFlags)
    std::string preset;            // as asked ("auto" resolved into resolvedPreset)
    std::string resolvedPreset;    // the table entry the numbers came from, if any
    std::optional<double> trunkGB; // the budget's, for the report (unset: not asked)
    std::optional<double> cacheGB;
    std::string trunkDir;
    std::string cacheTraceDir;
    k3::PinMode pinMode = k3::PinMode::Measured; // --pin-mode (a compressed trunk's pinned layers)
};

// Sampling as the seed defines it: greedy unless --temperature, --top-p or --seed is
// given (then temperature 1.0 and top-p 0.95 unless given); --greedy forces argmax.
struct SamplingArgs {
    std::optional<double> temperature;
    std::optional<double> topP;
    std::optional<std::uint64_t> seed;
    bool greedy = false;
};

struct ModelArgs {
    std::string modelDir;
    std::string tokenizerDir; // empty: the model directory
    bool tokenizerGiven = false;
    int layers = 0;
    int prefillChunk = 0; // --prefill-chunk (0: the plan's)
    int speculation = 0;  // --spec: 0 off, N proposals per pass, -1 auto
    std::string draftDir; // --draft-trunk: proposals from this draft (k3 pack --draft)
    int context = 4096;   // --context: positions the KV cache holds
    // --state-cache DIR ("default": k3::defaultStateCacheDirectory()) / --state-cache-gb:
    // the prefix cache on disk; empty: none.
    std::string stateCacheDir;
    double stateCacheGB = 0; // 0: k3::kDefaultStateCacheBytes
    MemoryArgs memory;
    SamplingArgs sampling;
};

struct RunArgs {
    ModelArgs model;
    std::optional<std::string> prompt;
    std::optional<std::string> promptFile;
    std::optional<std::string> ids;
    int gen = 16;
    bool incremental = false;
    std::string out = "k3_run.json";
    std::string dumpLogits;
    std::string loadState; // --load-state: continue a saved state (the prompt: new ids only)
    std::string saveState; // --save-state: the state at the end of the run
    // --image FILE (repeatable): images read before the prompt text (or at the pads of
    // --ids), each cut to at most imagePatchLimit 14-px patches (--image-patch-limit).
    std::vector<std::string> images;
    int imagePatchLimit = 65536; // k3::kOfficialPatchLimit
};

// k3 --remote URL --chat: an OpenAI-compatible server instead of MODEL_DIR.
struct RemoteArgs {
    std::string url;        // empty: chat with the local MODEL_DIR
    std::string model;      // --model: the server's name for the model
    std::string apiKeyFile; // --api-key-file: the key's first line (never a flag: ps shows flags)
};

struct ChatArgs {
    ModelArgs model;
    RemoteArgs remote;
    std::optional<std::string> system;
    std::string history;
    bool noThink = false;
    std::string thinkingEffort = "max";
    int maxTokens = 4096;
    // --json: every answer is a JSON object; --json-schema FILE: JSON of that schema.
    bool json = false;
    std::string jsonSchema;
    // --image-patch-limit: the cap for the images of a --history transcript.
    int imagePatchLimit = 65536; // k3::kOfficialPatchLimit
};

// k3 serve MODEL_DIR: the OpenAI chat-completions protocol over HTTP (ServeCommand.cpp).
struct ServeArgs {
    ModelArgs model;
    std::string host = "127.0.0.1";
    int port = 8000;        // 0: any free port (the one chosen is printed)
    std::string apiKeyFile; // required to bind anything but loopback
    int queue = 8;          // requests that may wait behind the running one
    int maxBodyMB = 4;      // larger request bodies get 413
    // Host names accepted besides 127.0.0.1, localhost, [::1] and --host (--allow-host).
    std::vector<std::string> allowHosts;
    // Web page origins answered with CORS headers (--cors-origin); every other Origin is
    // refused.
    std::vector<std::string> corsOrigins;
};

struct DownloadArgs {
    std::string dir;
    std::string repo;
    std::string revision;
    std::string endpoint;
    int layers = 0;
    int parallel = 4;
};

// k3 replay TRACE: the cache trace replayed at other budgets (ReplayCommand.cpp).
struct ReplayArgs {
    std::string trace;                         // expert_trace.bin, or the folder holding it
    std::string cacheGB = "0.5,1,2,4,8,16,32"; // budgets, comma-separated GB
    std::string report;                        // a run.json: defaults for the sizes and rates below
    std::optional<double> expertMB;            // bytes per expert read (default: report, else K3's)
    std::optional<double> slotMB;         // cache bytes per expert (default: report, else derived)
    std::optional<double> diskGBps;       // expert read rate (default: report, else 2)
    std::optional<double> computeSeconds; // compute per pass (default: report, else 0)
    std::optional<double> tokens;         // tokens the trace covers (default: its passes)
};

int runBatch(const RunArgs& args);
int runReplay(const ReplayArgs& args);
int runChat(const ChatArgs& args);
int runRemoteChat(const ChatArgs& args); // RemoteChatCommand.cpp
int runDownload(const DownloadArgs& args);
int runServe(const ServeArgs& args);

// The sampling seed of an assistant turn: one stream per turn, so replaying a
// conversation with the same seed repeats it (k3 --chat and k3 serve alike).
std::uint64_t turnSeed(std::uint64_t seed, std::size_t turn);

// Shared by batch and chat (RunCommand.cpp).
struct ResolvedSampling {
    bool sampling = false; // false: greedy
    float temperature = 0.0f;
    float topP = 1.0f;
    std::uint64_t seed = 0;
    bool seedGiven = false;
};
ResolvedSampling resolveSampling(const SamplingArgs& args);

// Comma-separated token ids ("1,2, 3"). Throws a usage CommandError naming the bad item.
std::vector<std::int32_t> parseIdList(const std::string& text);

// k3 pack MODEL_DIR TRUNK_DIR
int runPack(const std::string& modelDir, const std::string& trunkDir, bool compress = false);
int runPackDraft(const std::string& modelDir, const std::string& draftDir);

} // namespace k3cli
