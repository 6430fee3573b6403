// `k3 --remote URL --model NAME [--api-key-file F] --chat`: the same REPL as a local
// model, answered by an OpenAI-compatible server (vLLM, SGLang, `k3 serve`).
#include "ChatLoop.hpp"
#include "CliSupport.hpp"
#include "Commands.hpp"

#include <k3/backend.hpp>
#include <k3/hub.hpp>
#include <k3/read_file.hpp>
#include <k3/remote.hpp>

#include <cstdio>

namespace k3cli {

namespace {

// A file, not a flag: a flag's value is visible to every user in `ps`. Read as k3 serve
// reads its own (k3::readApiKeyFile).
std::string readApiKey(const std::string& path) {
    try {
        return k3::readApiKeyFile(path);
    } catch (const std::exception& error) {
        throw usageError(std::string("--api-key-file: ") + error.what());
    }
}

} // namespace

int runRemoteChat(const ChatArgs& args) {
    if (args.remote.model.empty())
        throw usageError("--remote needs --model NAME (the server's name for the model; "
                         "curl URL/v1/models lists them)");
    std::optional<k3::OutputLock> historyLock;
    lockHistory(args, historyLock);
    std::vector<k3::ChatMessage> history = loadChatHistory(args);
    k3::RemoteOptions remote;
    remote.baseUrl = args.remote.url;
    remote.model = args.remote.model;
    if (!args.remote.apiKeyFile.empty()) remote.apiKey = readApiKey(args.remote.apiKeyFile);
    std::unique_ptr<k3::ChatBackend> backend;
    try {
        backend = k3::openRemoteBackend(remote);
    } catch (const k3::RemoteError& error) {
        throw usageError(std::string("--remote: ") + error.what());
    }
    std::uint64_t seed = 0;
    const k3::GenerateOptions options = chatOptions(args, seed);
    installInterruptHandler(false); // before the banner: from then on Ctrl-C is ours
    const int seen = interruptCount();
    std::fprintf(stderr, "k3 chat: %s on %s, %s. /help for commands.\n",
                 terminalSafe(args.remote.model).c_str(),
                 terminalSafe(k3::withoutUrlCredentials(backend->info().location)).c_str(),
                 args.noThink ? "thinking off" : ("thinking " + args.thinkingEffort).c_str());
    // The server keeps no state of ours: a resumed conversation is simply sent again.
    return chatLoop(args, *backend, history, options, seed, seen);
}

} // namespace k3cli
