#pragma once
// The system doctor: can this computer run Kimi K3, with which preset, how fast will
// its disk feed the engine, and what should the user run next. Shared by `k3 doctor`
// and the app's setup wizard.

#include "k3/presets.hpp"
#include "k3/system.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace k3 {

// Bytes of the released checkpoint (96 shards), from the model card.
inline constexpr std::uint64_t kCheckpointBytes = 1'560'936'091'448ull;

struct DiskBandwidth {
    double gbPerSecondQd1 = 0;  // one read in flight, as the trunk ring reads
    double gbPerSecondQd16 = 0; // sixteen in flight, as the expert cache batches
    std::uint64_t blockBytes = 0;
    std::uint64_t bytesRead = 0;
    double seconds = 0;
    bool directIo = false; // false: the filesystem refused O_DIRECT (cache may flatter)
    std::string fileMeasured;
};

struct DiskBenchOptions {
    std::uint64_t blockBytes = 4u << 20;  // the engine reads whole layers and experts
    std::uint64_t fileBytes = 256u << 20; // test file written when no shard exists
    double maxSecondsPerDepth = 3.0;
    std::uint64_t maxBytesPerDepth = 2ull << 30;
    // Each depth is measured this many times (the time and byte bounds shared out) and
    // the best pass counts: a pass another program's reads slowed down is not the disk.
    int passes = 3;
};

// Large random reads at queue depth 1 and 16 from `file` (or a scratch file written
// into `dir` and removed afterwards). Throws std::runtime_error naming the path.
DiskBandwidth measureDiskBandwidth(const std::filesystem::path& dir,
                                   const DiskBenchOptions& options = {},
                                   const std::atomic<bool>* cancel = nullptr);

enum class CheckStatus { Ok, Warning, Fail };

struct DoctorCheck {
    std::string name; // "cpu", "memory", "disk-space", "disk-speed", "checkpoint"
    CheckStatus status;
    std::string verdict; // one sentence for a person
};

// The "disk-speed" check for measured figures. Sixteen reads in flight are never slower
// than one on a quiet disk, so depth 1 measured faster says the measurement was
// disturbed (a Warning that asks for a re-run), never a figure to trust.
DoctorCheck diskSpeedCheck(const DiskBandwidth& disk);

struct DoctorOptions {
    std::filesystem::path modelDir;
    bool measureDisk = true;
    DiskBenchOptions disk;
};

struct DoctorReport {
    CpuFeatures cpu;
    std::optional<MemoryInfo> memory;
    std::optional<Preset> recommendedPreset;
    std::filesystem::path modelDir;
    std::optional<std::uint64_t> freeBytes;
    bool checkpointPresent = false; // config.json + model.safetensors.index.json in modelDir
    // When present: "" if config, index, shard headers and expert tensors read (no weight
    // data), else the first error (it names the file); the "checkpoint" check then fails.
    std::string checkpointError;
    std::optional<DiskBandwidth> disk;
    std::vector<DoctorCheck> checks;
    std::string nextCommand;

    // False when any check failed: the model cannot run here at all.
    bool canRun() const;
};

DoctorReport runDoctor(const DoctorOptions& options);

// A plain-text report for a terminal, and JSON for the app (`k3 doctor --json`).
std::string formatDoctorReport(const DoctorReport& report);
std::string doctorReportJson(const DoctorReport& report);

const char* toString(CheckStatus status);

} // namespace k3
