#pragma once
// The batch run's one reporter: the plan and header before the run, the summary on
// stdout after it, and the JSON run report (--out FILE, or - for stdout) with the files
// the run was asked to leave (--save-state, --dump-cache-trace, --dump-logits).

#include "Commands.hpp"
#include "SessionLoader.hpp"

#include <k3/session.hpp>
#include <k3/vision.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace k3cli {

// `--out -`: the report is the only thing on stdout (so `k3 ... --out - | jq` works);
// everything else printed to stdout goes to stderr while this lives.
class ReportOnStdout {
public:
    explicit ReportOnStdout(bool active);
    ~ReportOnStdout();
    ReportOnStdout(const ReportOnStdout&) = delete;
    ReportOnStdout& operator=(const ReportOnStdout&) = delete;

    bool active() const { return report_ >= 0; }
    // The whole report to the real stdout.
    void write(const std::string& text) const;

private:
    std::intptr_t report_ = -1;
};

// One generated token as the step table printed it.
struct TokenRecord {
    k3::TokenId id = 0;
    std::string piece;
    double seconds = 0;
    double cacheHitPercent = -1; // this step's expert requests served without a read; -1: none
    double gbRead = 0;           // trunk + expert bytes read from disk so far
};

// What a finished batch run hands its reporter.
struct BatchRun {
    const RunArgs& args;
    LoadedSession& loaded;
    const std::vector<k3::TokenId>& promptIds;
    const std::string& promptText;
    const std::vector<k3::PreparedImage>& images;
    const ResolvedSampling& sampling;
    const k3::GenerateOptions& options;
    const k3::GenerateResult& result;
    std::vector<TokenRecord> tokens; // the step table, the last piece with the decoder's tail
    std::vector<float> firstLogits;  // --dump-logits
    int restoredPositions = 0;       // from --load-state
};

// Before the run: the model, the prompt, the images, the memory plan and the step
// table's heading.
void printRunHeader(const RunArgs& args, const LoadedSession& loaded,
                    const std::vector<k3::TokenId>& promptIds,
                    const std::vector<k3::PreparedImage>& images, const ResolvedSampling& sampling);

// After the run: the summary, the report and the files; returns the exit code (0, 1 when
// a file could not be written, 4 run invalid, 130 stopped with Ctrl-C).
int reportBatchRun(const BatchRun& run, const ReportOnStdout& stdoutReport);

} // namespace k3cli
