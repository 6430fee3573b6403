#include "CliSupport.hpp"
#include "Commands.hpp"

#include <k3/draft.hpp>
#include <k3/pack.hpp>
#include <k3/process.hpp>

#include <atomic>
#include <csignal>
#include <cstdio>

namespace k3cli {
namespace {
std::atomic<bool> packCancel{false};
volatile std::sig_atomic_t packSignal = 0;
extern "C" void onPackStop(int sig) {
    packSignal = sig;
    packCancel.store(true);
}

// A stop the process can see ends the pack through its cancel path, which removes the
// new files and keeps the trunk already there. Past `ulimit -f` a write fails (EFBIG)
// and takes the same path, instead of SIGXFSZ killing k3 with its files half written.
void handleStopSignals() {
    k3::process::catchStopSignals(onPackStop);
}

// 128 + the signal when one stopped the pack, as a shell reports a process it killed.
int packFailureCode() {
    return packCancel.load() && packSignal != 0 ? 128 + int(packSignal) : kExitFailure;
}

// Progress on stderr: one rewritten line on a terminal, every 10% otherwise.
k3::PackObserver packProgress(bool tty) {
    return [tty, lastPercent = -1](const k3::PackProgress& p) mutable {
        const int percent =
            p.bytesTotal ? int(100.0 * double(p.bytesDone) / double(p.bytesTotal)) : 100;
        if (tty) {
            std::fprintf(stderr, "\r\033[2Kpacking %d/%d records · %.1f/%.1f MB · %.0f MB/s · %s",
                         p.recordsDone, p.recordsTotal, double(p.bytesDone) / 1e6,
                         double(p.bytesTotal) / 1e6, p.mbPerSecond, terminalSafe(p.record).c_str());
        } else if (percent / 10 != lastPercent / 10 || p.recordsDone == p.recordsTotal) {
            std::fprintf(stderr, "packing %d/%d records, %d%%\n", p.recordsDone, p.recordsTotal,
                         percent);
        }
        lastPercent = percent;
    };
}
} // namespace

int runPack(const std::string& modelDir, const std::string& trunkDir, bool compress) {
    handleStopSignals();
    const bool tty = stderrIsTty();
    const k3::PackObserver observer = packProgress(tty);
    try {
        k3::PackOptions options;
        options.compress = compress;
        const k3::PackResult r = k3::packTrunk(modelDir, trunkDir, observer, &packCancel, options);
        if (tty) std::fputc('\n', stderr);
        std::printf(
            "packed %d layers into %s/trunk.bin: %.1f MB (largest layer %.1f MB) in %.1f s\n",
            r.layers, terminalSafe(trunkDir).c_str(), double(r.fileBytes) / 1e6,
            double(r.largestLayerBytes) / 1e6, r.seconds);
        if (compress)
            std::printf("compressed: the layers take %.1f MB of %.1f MB raw (%.4f of the size)\n",
                        double(r.layerStoredBytes) / 1e6, double(r.layerBytes) / 1e6,
                        r.layerBytes ? double(r.layerStoredBytes) / double(r.layerBytes) : 1.0);
        return kExitOk;
    } catch (const std::exception& e) {
        if (tty) std::fputc('\n', stderr);
        printNote(std::string("k3 pack: ") + e.what());
        return packFailureCode();
    }
}

int runPackDraft(const std::string& modelDir, const std::string& draftDir) {
    handleStopSignals();
    const bool tty = stderrIsTty();
    try {
        const k3::DraftPackResult r =
            k3::packDraft(modelDir, draftDir, packProgress(tty), &packCancel);
        if (tty) std::fputc('\n', stderr);
        std::printf("packed a draft of %d tensors (%d projections in MXFP4) into "
                    "%s/model.safetensors: %.1f MB from %.1f MB in %.1f s\n",
                    r.tensors, r.quantised, terminalSafe(draftDir).c_str(),
                    double(r.fileBytes) / 1e6, double(r.sourceBytes) / 1e6, r.seconds);
        return kExitOk;
    } catch (const std::exception& e) {
        if (tty) std::fputc('\n', stderr);
        printNote(std::string("k3 pack --draft: ") + e.what());
        return packFailureCode();
    }
}

} // namespace k3cli
