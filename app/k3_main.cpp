// k3: run Kimi K3 from a terminal. Exit codes (DESIGN.md): 0 ok, 1 load/forward
// failure or memory refusal, 2 usage error or unreadable config, 4 run invalid.
// Parse (cli/CommandLine.cpp), run (cli/*Command.cpp), and map errors to exit codes here.
#include "cli/CliSupport.hpp"
#include "cli/CommandLine.hpp"

#include <k3/config.hpp>
#include <k3/presets.hpp>

#include <cstdio>
#include <exception>

namespace k3cli {

int runCommand(const CommandLine& commandLine) {
    using Command = CommandLine::Command;
    switch (commandLine.command) {
    case Command::Done:
        return commandLine.exitCode;
    case Command::Help:
        std::fputs(commandLine.help.c_str(), stdout);
        return kExitOk;
    case Command::ListPresets:
        std::fputs(k3::formatPresetTable().c_str(), stdout);
        return kExitOk;
    case Command::Batch:
        return runBatch(commandLine.run);
    case Command::Chat:
        return runChat(commandLine.chat);
    case Command::RemoteChat:
        return runRemoteChat(commandLine.chat);
    case Command::Serve:
        return runServe(commandLine.serve);
    case Command::Doctor:
        return runDoctor(commandLine.doctor);
    case Command::Download:
        return runDownload(commandLine.download);
    case Command::Pack:
        return commandLine.pack.draft
                   ? runPackDraft(commandLine.pack.modelDir, commandLine.pack.trunkDir)
                   : runPack(commandLine.pack.modelDir, commandLine.pack.trunkDir,
                             commandLine.pack.compress);
    case Command::Replay:
        return runReplay(commandLine.replay);
    }
    return kExitFailure;
}

} // namespace k3cli

int main(int argc, char** argv) {
    try {
        return k3cli::runCommand(k3cli::parseCommandLine(argc, argv));
    } catch (const k3cli::CommandError& error) {
        k3cli::printError(error.message);
        return error.exitCode;
    } catch (const k3::ConfigError& error) {
        k3cli::printError(error.what());
        return k3cli::kExitUsage;
    } catch (const std::exception& error) {
        k3cli::printError(error.what() + k3cli::cliAdvice(error));
        return k3cli::kExitFailure;
    }
}
