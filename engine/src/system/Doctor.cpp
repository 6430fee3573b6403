#include "k3/doctor.hpp"

#include "k3/config.hpp"
#include "k3/expert_cache.hpp"
#include "k3/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace k3 {
namespace {

std::string gb(double bytes) {
    char text[32];
    if (bytes >= 1e12)
        std::snprintf(text, sizeof text, "%.2f TB", bytes / 1e12);
    else
        std::snprintf(text, sizeof text, "%.1f GB", bytes / 1e9);
    return text;
}

// The nearest existing folder at or above `path`: free space of a folder that does
// not exist yet is the free space where it will be created.
std::filesystem::path existingAncestor(std::filesystem::path path) {
    std::error_code ec;
    path = std::filesystem::absolute(path, ec);
    while (!path.empty() && !std::filesystem::exists(path, ec)) {
        if (path == path.parent_path()) break;
        path = path.parent_path();
    }
    return path;
}

// Opens the checkpoint with the readers the model uses: config.json, the index, every
// shard's header and the routed experts in the form config.json declares (names, dtypes,
// shapes). No weight data is read. Throws the first error, which names the file.
std::string openCheckpoint(const std::filesystem::path& dir) {
    const ModelConfig config = readModelConfig(dir / "config.json");
    const Checkpoint ckpt = Checkpoint::open(dir);
    const CheckpointExpertStore experts(ckpt, config, config.numHiddenLayers);
    return std::to_string(ckpt.tensorCount()) + " tensors in " +
           std::to_string(ckpt.shardPaths().size()) + " shard(s), " +
           std::to_string(config.numHiddenLayers) + " layers, routed experts " +
           (config.quantization ? "MXFP4" : "plain BF16/F32");
}

std::string shellQuote(const std::string& s) {
    if (s.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-~") ==
        std::string::npos)
        return s;
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

} // namespace

const char* toString(CheckStatus status) {
    switch (status) {
    case CheckStatus::Ok:
        return "ok";
    case CheckStatus::Warning:
        return "warning";
    case CheckStatus::Fail:
        return "fail";
    }
    return "?";
}

bool DoctorReport::canRun() const {
    for (const auto& c : checks)
        if (c.status == CheckStatus::Fail) return false;
    return true;
}

DoctorCheck diskSpeedCheck(const DiskBandwidth& disk) {
    const char* how = disk.directIo ? "O_DIRECT" : "buffered: O_DIRECT refused here";
    char text[400];
    // 10% of slack: two equal figures differ a little from pass to pass.
    if (disk.gbPerSecondQd1 > 1.1 * disk.gbPerSecondQd16) {
        std::snprintf(text, sizeof text,
                      "Disk speed: the measurement was disturbed (%.2f GB/s at queue depth 1 "
                      "but %.2f GB/s at depth 16, which is never slower on a quiet disk; %s); "
                      "another program was probably using the disk: check again when it is idle",
                      disk.gbPerSecondQd1, disk.gbPerSecondQd16, how);
        return {"disk-speed", CheckStatus::Warning, text};
    }
    std::snprintf(text, sizeof text,
                  "Disk speed: %.2f GB/s at queue depth 16, %.2f GB/s at depth 1 (%s)",
                  disk.gbPerSecondQd16, disk.gbPerSecondQd1, how);
    // Below ~1 GB/s every token waits on the disk for tens of seconds more.
    return {"disk-speed", disk.gbPerSecondQd16 >= 1.0 ? CheckStatus::Ok : CheckStatus::Warning,
            text};
}

namespace {

DoctorCheck cpuCheck(const CpuFeatures& cpu) {
    if ((cpu.avx2 && cpu.fma) || cpu.neon)
        return {"cpu", CheckStatus::Ok, "CPU: " + cpu.summary() + ", the fast kernels run"};
    return {"cpu", CheckStatus::Warning,
            "CPU: no AVX2/FMA, the portable kernels run (same output, slower)"};
}

// The memory check, and the preset it recommends.
DoctorCheck memoryCheck(DoctorReport& r) {
    if (!r.memory)
        return {"memory", CheckStatus::Fail,
                "RAM: /proc/meminfo has no MemTotal/MemAvailable, cannot size a plan"};
    const double avail = static_cast<double>(r.memory->availableBytes);
    const std::string bound = r.memory->boundBy == "MemAvailable"
                                  ? std::string()
                                  : " (bound by " + r.memory->boundBy + ")";
    r.recommendedPreset = recommendPreset(r.memory->availableBytes);
    if (r.recommendedPreset)
        return {"memory", CheckStatus::Ok,
                "RAM: " + gb(avail) + " available" + bound + " -> preset " +
                    std::string(r.recommendedPreset->name)};
    return {"memory", CheckStatus::Fail,
            "RAM: " + gb(avail) + " available" + bound +
                "; the smallest preset (ultra) needs about 4 GB. Close other programs or add "
                "memory."};
}

// A checkpoint in the folder is opened (no weight data read); otherwise the free space
// for downloading one is checked.
DoctorCheck checkpointOrSpaceCheck(DoctorReport& r) {
    std::error_code ec;
    r.checkpointPresent =
        std::filesystem::is_regular_file(r.modelDir / "config.json", ec) &&
        std::filesystem::is_regular_file(r.modelDir / "model.safetensors.index.json", ec);
    const auto space = std::filesystem::space(existingAncestor(r.modelDir), ec);
    if (!ec) r.freeBytes = space.available;
    if (r.checkpointPresent) {
        // Present is not readable: a broken config, a missing shard or a truncated header
        // would only surface at load (issue 22). The same readers, no weight data.
        try {
            const std::string what = openCheckpoint(r.modelDir);
            return {"checkpoint", CheckStatus::Ok,
                    "Checkpoint: readable at " + r.modelDir.string() + " (" + what + ")"};
        } catch (const std::exception& e) {
            r.checkpointError = e.what();
            return {"checkpoint", CheckStatus::Fail,
                    "Checkpoint: cannot be read: " + r.checkpointError};
        }
    }
    if (!r.freeBytes)
        return {"disk-space", CheckStatus::Warning,
                "Disk: cannot read free space at " + r.modelDir.string()};
    const std::string have = "Disk: " + gb(double(*r.freeBytes)) + " free at " +
                             r.modelDir.string() + ", " + gb(double(kCheckpointBytes)) + " needed";
    if (*r.freeBytes >= kCheckpointBytes) return {"disk-space", CheckStatus::Ok, have};
    return {"disk-space", CheckStatus::Warning,
            have + " (short by " + gb(double(kCheckpointBytes - *r.freeBytes)) +
                "); choose another folder or free space"};
}

// The one command that moves this machine forward: download, pack, or run.
std::string nextCommand(const DoctorReport& r) {
    if (!r.canRun()) return {};
    const std::string dir = shellQuote(r.modelDir.string());
    const std::string trunk = shellQuote((r.modelDir / "trunk").string());
    std::error_code ec;
    if (!r.checkpointPresent) return "k3 download " + dir;
    if (!std::filesystem::is_regular_file(r.modelDir / "trunk" / "trunk.json", ec))
        return "k3 pack " + dir + " " + trunk;
    return "k3 " + dir + " --trunk " + trunk + " --preset " +
           std::string(r.recommendedPreset->name) + " --prompt 'Hello'";
}

} // namespace

DoctorReport runDoctor(const DoctorOptions& options) {
    DoctorReport r;
    r.modelDir = options.modelDir.empty() ? std::filesystem::current_path() : options.modelDir;
    r.cpu = detectCpuFeatures();
    r.memory = readMemoryInfo();
    r.checks.push_back(cpuCheck(r.cpu));
    r.checks.push_back(memoryCheck(r));
    r.checks.push_back(checkpointOrSpaceCheck(r));
    if (options.measureDisk) {
        try {
            const auto dir = r.checkpointPresent ? r.modelDir : existingAncestor(r.modelDir);
            r.disk = measureDiskBandwidth(dir, options.disk);
            r.checks.push_back(diskSpeedCheck(*r.disk));
        } catch (const std::exception& e) {
            r.checks.push_back({"disk-speed", CheckStatus::Warning,
                                std::string("Disk speed: not measured: ") + e.what()});
        }
    }
    r.nextCommand = nextCommand(r);
    return r;
}

std::string formatDoctorReport(const DoctorReport& r) {
    std::string out;
    for (const auto& c : r.checks) {
        const char* mark = c.status == CheckStatus::Ok        ? "[ok]  "
                           : c.status == CheckStatus::Warning ? "[!]   "
                                                              : "[FAIL]";
        out += std::string(mark) + " " + c.verdict + "\n";
    }
    if (r.canRun()) {
        out += "Recommendation: preset " + std::string(r.recommendedPreset->name) + ".\n";
        out += "Next: " + r.nextCommand + "\n";
    } else if (!r.checkpointError.empty()) {
        out += "The checkpoint at " + r.modelDir.string() +
               " cannot be read; see the failed check above.\n";
    } else {
        out += "This computer cannot run Kimi K3 as it is; see the failed checks above.\n";
    }
    return out;
}

std::string doctorReportJson(const DoctorReport& r) {
    nlohmann::json j;
    j["cpu"] = {{"avx2", r.cpu.avx2},
                {"fma", r.cpu.fma},
                {"avx512f", r.cpu.avx512f},
                {"neon", r.cpu.neon},
                {"summary", r.cpu.summary()}};
    if (r.memory)
        j["memory"] = {{"total_bytes", r.memory->totalBytes},
                       {"available_bytes", r.memory->availableBytes},
                       {"bound_by", r.memory->boundBy}};
    j["recommended_preset"] = r.recommendedPreset
                                  ? nlohmann::json(std::string(r.recommendedPreset->name))
                                  : nlohmann::json();
    j["model_dir"] = r.modelDir.string();
    j["checkpoint_present"] = r.checkpointPresent;
    j["checkpoint_error"] =
        r.checkpointError.empty() ? nlohmann::json() : nlohmann::json(r.checkpointError);
    j["free_bytes"] = r.freeBytes ? nlohmann::json(*r.freeBytes) : nlohmann::json();
    if (r.disk)
        j["disk"] = {{"gb_per_s_qd1", r.disk->gbPerSecondQd1},
                     {"gb_per_s_qd16", r.disk->gbPerSecondQd16},
                     {"block_bytes", r.disk->blockBytes},
                     {"bytes_read", r.disk->bytesRead},
                     {"seconds", r.disk->seconds},
                     {"direct_io", r.disk->directIo},
                     {"file", r.disk->fileMeasured}};
    auto checks = nlohmann::json::array();
    for (const auto& c : r.checks)
        checks.push_back(
            {{"name", c.name}, {"status", toString(c.status)}, {"verdict", c.verdict}});
    j["checks"] = checks;
    j["can_run"] = r.canRun();
    j["next_command"] = r.nextCommand;
    return j.dump(2);
}

} // namespace k3
