// `k3 doctor [DIR]`: can this machine run the model, which preset, how fast is the disk.
#include "CliSupport.hpp"
#include "CommandLine.hpp"

#include <k3/doctor.hpp>

#include <cstdio>

namespace k3cli {

int runDoctor(const DoctorArgs& args) {
    k3::DoctorOptions options;
    options.modelDir = args.dir;
    options.measureDisk = !args.noDiskTest;
    options.disk.maxSecondsPerDepth = args.diskSeconds;
    const k3::DoctorReport report = k3::runDoctor(options);
    // The text report names paths and the checkpoint's own strings: shown, not obeyed.
    const std::string text = args.json ? k3::doctorReportJson(report) + "\n"
                                       : terminalSafe(k3::formatDoctorReport(report));
    std::fputs(text.c_str(), stdout);
    return report.canRun() ? kExitOk : kExitFailure;
}

} // namespace k3cli
