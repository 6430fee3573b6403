#pragma once
// The `--chat` REPL, shared by a local model (ChatCommand.cpp) and a server
// (RemoteChatCommand.cpp): both open a k3::ChatBackend and hand it to chatLoop().

#include "Commands.hpp"

#include <k3/backend.hpp>
#include <k3/chat.hpp>

#include <cstdint>
#include <optional>
#include <vector>

namespace k3cli {

// Checks and locks --history (usage error for a folder/FIFO, failure when another
// session holds it).
void lockHistory(const ChatArgs& args, std::optional<k3::OutputLock>& historyLock);
// The transcript on disk checked against --system, or the opening messages.
std::vector<k3::ChatMessage> loadChatHistory(const ChatArgs& args);
// --no-think, --thinking-effort, --max-tokens, --spec and sampling; seed: the session's.
k3::GenerateOptions chatOptions(const ChatArgs& args, std::uint64_t& seed);
// Reads messages until /exit or end of input; `seen` is interruptCount() when the
// caller installed the handler. Returns the exit code.
int chatLoop(const ChatArgs& args, k3::ChatBackend& backend, std::vector<k3::ChatMessage>& history,
             k3::GenerateOptions options, std::uint64_t seed, int seen);

} // namespace k3cli
