#pragma once
// The `k3` command line in three steps: parseCommandLine() turns argv into one plain
// CommandLine (every flag is defined once, in CommandLine.cpp, for a run, a chat and
// k3 serve alike), runCommand() runs the command it names, and each command reports on
// its own (the batch run through RunReport). k3_main.cpp maps errors to exit codes.

#include "Commands.hpp"

namespace k3cli {

// k3 doctor [DIR]: can this machine run the model, which preset, how fast is the disk.
struct DoctorArgs {
    std::string dir = ".";
    bool json = false;       // --json: the report as JSON (for the app)
    bool noDiskTest = false; // --no-disk-test: skip the disk speed measurement
    double diskSeconds = 3.0;
};
int runDoctor(const DoctorArgs& args); // DoctorCommand.cpp

// k3 pack MODEL_DIR TRUNK_DIR [--compress | --draft].
struct PackArgs {
    std::string modelDir;
    std::string trunkDir; // with draft: the draft's folder
    bool draft = false;
    bool compress = false;
};

struct CommandLine {
    enum class Command {
        Done,        // parsing ended it: --help, --version or a parse error (exitCode)
        Help,        // `k3` alone: the usage text
        ListPresets, // --list-presets
        Batch,
        Chat,
        RemoteChat,
        Serve,
        Doctor,
        Download,
        Pack,
        Replay,
    };
    Command command = Command::Done;
    int exitCode = 0;
    std::string help; // Command::Help

    RunArgs run;   // Batch
    ChatArgs chat; // Chat, RemoteChat
    ServeArgs serve;
    DoctorArgs doctor;
    DownloadArgs download;
    PackArgs pack;
    ReplayArgs replay;
};

// Parses and checks the whole command line: CLI11's own errors (and --help, --version)
// are printed here and end in Command::Done with the exit code; the checks across flags
// throw a usage CommandError (exit 2) naming the flag.
CommandLine parseCommandLine(int argc, const char* const* argv);

// Runs the parsed command; returns the process exit code. Throws what the command throws.
int runCommand(const CommandLine& commandLine);

} // namespace k3cli
