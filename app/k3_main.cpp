// k3: run Kimi K3 from a terminal. Exit codes (DESIGN.md): 0 ok, 1 load/forward
// failure or memory refusal, 2 usage error or unreadable config, 4 run invalid.
#include <CLI/CLI.hpp>

#include <k3/doctor.hpp>
#include <k3/presets.hpp>
#include <k3/version.hpp>

#include <cstdio>
#include <iostream>

namespace {
constexpr int kExitUsage = 2;
}

int main(int argc, char** argv) {
    CLI::App app{"k3: run the 2.78-trillion-parameter Kimi K3 on one CPU by streaming its "
                 "weights from disk.",
                 "k3"};
    app.set_version_flag("--version", std::string("k3 (k3chat) ") + k3::kVersion);
    bool listPresets = false;
    app.add_flag("--list-presets", listPresets,
                 "Print the memory presets (trunk GB / expert-cache GB) and exit");
    // k3 doctor [DIR]: can this machine run the model, which preset, how fast is the disk.
    CLI::App* doctor = app.add_subcommand(
        "doctor", "Check this computer: CPU, RAM -> preset, free space and measured disk speed "
                  "at DIR, and the exact next command");
    std::string doctorDir = ".";
    bool doctorJson = false;
    bool doctorNoDisk = false;
    double doctorSeconds = 3.0;
    doctor->add_option("DIR", doctorDir, "Where the checkpoint is or will be (default: here)");
    doctor->add_flag("--json", doctorJson, "Print the report as JSON (for the app)");
    doctor->add_flag("--no-disk-test", doctorNoDisk, "Skip the disk speed measurement");
    doctor->add_option("--disk-seconds", doctorSeconds,
                       "Seconds spent reading at each queue depth (default 3)")
        ->check(CLI::Range(0.1, 60.0));

    app.footer("Exit codes: 0 ok, 1 load or forward failure or memory refusal, 2 usage error "
               "or unreadable config, 4 run invalid.");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e); // prints help/version, or the error and a hint
        return code == 0 ? 0 : kExitUsage;
    }

    if (*doctor) {
        k3::DoctorOptions options;
        options.modelDir = doctorDir;
        options.measureDisk = !doctorNoDisk;
        options.disk.maxSecondsPerDepth = doctorSeconds;
        const k3::DoctorReport report = k3::runDoctor(options);
        const std::string text =
            doctorJson ? k3::doctorReportJson(report) + "\n" : k3::formatDoctorReport(report);
        std::fputs(text.c_str(), stdout);
        return report.canRun() ? 0 : 1;
    }
    if (listPresets) {
        std::fputs(k3::formatPresetTable().c_str(), stdout);
        return 0;
    }
    std::cout << app.help();
    return 0;
}
