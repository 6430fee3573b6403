#pragma once
// The one base of every engine error. The engine's message says what is wrong, with the
// numbers; each front end reads kind() (and a subclass's fields) to add what to do: flags
// in the CLI, settings and buttons in the app.

#include <stdexcept>
#include <string>

namespace k3 {

enum class ErrorKind {
    Config,      // config.json or a launch setting
    Format,      // a safetensors shard or index
    FileRead,    // a file that cannot be read (missing, too big, not a file)
    Io,          // a read or write that failed mid-way
    Model,       // the model cannot run as asked
    ContextFull, // the conversation outgrew the context length
    Memory,      // the memory plan does not fit the budget or the machine
    Tokenizer,   // tokenizer files
    Chat,        // chat template, transcript or tool-call text
    Pack,        // the packed trunk or draft
    StaleTrunk,  // a packed trunk from another checkpoint or an older format
    Trunk,       // streaming the trunk
    Cache,       // the expert cache
    Kernel,      // a compute kernel's preconditions
    Hub,         // downloading from the hub
    Remote,      // a remote server
    Api,         // a request to `k3 serve`
    State,       // a saved conversation state (session state file)
    Image,       // an image input: not an image, damaged, too large, unsupported
};

// "config", "memory", ...: for logs and tests.
const char* errorKindName(ErrorKind kind);

class Error : public std::runtime_error {
public:
    Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
    ErrorKind kind() const { return kind_; }

private:
    ErrorKind kind_;
};

} // namespace k3
