#pragma once
// TEST HOOK: process-wide fault injection in the engine's I/O layer. It is how the
// tests prove "never silently wrong": an injected EIO, short read or ENOSPC must end in
// a clear error or an invalid run (exit 4), never in a wrong token or a file that looks
// complete. Not a feature: nothing in the shipped binaries arms it (only C++ tests and
// the test build of the CLI can), and unarmed every I/O site pays one relaxed atomic
// load (faultsArmed()).
//
// The sites that consult it, by kind:
//   expert      reads of routed experts through the expert cache (CheckpointExpertStore)
//   trunk       reads of a packed trunk.bin (the trunk streamer, model-level records)
//   shard       every other safetensors read (resident weights, k3 pack's copy)
//   pack        writes of trunk.bin by k3 pack
//   download    writes of NAME.partial by the hub downloader
//   transcript  writeTranscript() (chat history, the app's conversations)
//   file        other atomic writes (writeFileAtomically(): run.json, exports, trunk.json)
// A read fault acts where pread would have failed, so the real error path runs: "eio"
// makes that pread fail with EIO, "short" makes it hit end-of-file. A write fault
// makes the write fail with ENOSPC ("enospc") or EIO.
//
// From C++ (tests):    k3::ScopedFault f({.kind = k3::IoKind::Expert, .after = 3});
// From the environment, only in `k3_with_test_hooks` (the CLI built for the tests with
// tests/app/FaultFromEnvironment.cpp; the shipped `k3` and `k3chat` never read it):
//   K3_FAULT_INJECT="kind:expert,error:eio,after:3[,times:N][,path:SUBSTR][,layer:L][,expert:E]"
// `after` lets that many matching operations succeed first; `times` limits how many
// fail (default: every one after). A malformed value stops the process with exit 2.

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace k3 {

enum class IoKind { Any, Expert, Trunk, Shard, Pack, Download, Transcript, File };
enum class IoFault { Eio, ShortRead, NoSpace };

const char* ioKindName(IoKind kind);
const char* ioFaultName(IoFault fault);

struct FaultRule {
    IoKind kind = IoKind::Any;
    IoFault error = IoFault::Eio;
    std::uint64_t after = 0; // matching operations that succeed before the first fault
    std::uint64_t times = std::numeric_limits<std::uint64_t>::max(); // faults, then stop
    std::string pathContains;                                        // empty: any file
    // Expert reads only: -1 matches any layer / expert.
    int layer = -1;
    int expert = -1;
    // Expert reads only, C++ only: an extra filter (e.g. "every even expert of layer 3").
    std::function<bool(int layer, int expert)> expertFilter;
};

// Parses the K3_FAULT_INJECT grammar above. Throws std::invalid_argument naming the item.
FaultRule parseFaultRule(std::string_view spec);
std::string describeFaultRule(const FaultRule& rule);

void armFault(FaultRule rule); // replaces any armed rule and zeroes the counters
void disarmFault();
std::uint64_t faultsInjected(); // since the last armFault()

namespace detail {
extern std::atomic<bool> gFaultArmed;
std::optional<IoFault> consultFault(IoKind kind, std::string_view path, bool write);
} // namespace detail

inline bool faultsArmed() {
    return detail::gFaultArmed.load(std::memory_order_relaxed);
}

// The one call an I/O site makes before its operation: the fault to act out, if any.
inline std::optional<IoFault> faultFor(IoKind kind, std::string_view path, bool write) {
    if (!faultsArmed()) return std::nullopt;
    return detail::consultFault(kind, path, write);
}

// Which expert the current thread is reading, for rules that name a layer or expert.
class FaultExpertScope {
public:
    FaultExpertScope(int layer, int expert);
    ~FaultExpertScope();
    FaultExpertScope(const FaultExpertScope&) = delete;
    FaultExpertScope& operator=(const FaultExpertScope&) = delete;

private:
    int prevLayer_, prevExpert_;
};

// Arms a rule for a test's scope.
class ScopedFault {
public:
    explicit ScopedFault(FaultRule rule) { armFault(std::move(rule)); }
    ~ScopedFault() { disarmFault(); }
    ScopedFault(const ScopedFault&) = delete;
    ScopedFault& operator=(const ScopedFault&) = delete;
};

} // namespace k3
