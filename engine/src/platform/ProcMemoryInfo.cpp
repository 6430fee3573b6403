// /proc/meminfo and the memory cgroups, read under a root folder (k3/system.hpp). Plain
// file reads: built on every OS so the tests' stub roots read the same everywhere; only
// linux/LinuxSystem.cpp reads the real "/" with it.
#include "k3/system.hpp"

#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

namespace k3 {
namespace {

namespace fs = std::filesystem;

// Value in bytes of a "Key:   123 kB" line, or nothing when the line is not that key.
std::optional<std::uint64_t> meminfoField(std::string_view line, std::string_view key) {
    if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ':')
        return std::nullopt;
    std::string_view rest = line.substr(key.size() + 1);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    std::uint64_t kb = 0;
    auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), kb);
    if (ec != std::errc{} || end == rest.data()) return std::nullopt;
    std::string_view unit(end, rest.data() + rest.size() - end);
    if (unit != " kB") return std::nullopt;
    return kb * 1024u;
}

// Small kernel files only (a few lines): read whole, nothing when missing.
std::optional<std::string> readSmallFile(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::nullopt;
    std::string text(4096, '\0');
    in.read(text.data(), std::streamsize(text.size()));
    text.resize(std::size_t(in.gcount()));
    return text;
}

std::string_view trimmed(std::string_view s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r'))
        s.remove_suffix(1);
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    return s;
}

std::optional<std::uint64_t> parseNumber(std::string_view s) {
    s = trimmed(s);
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size() || s.empty()) return std::nullopt;
    return v;
}

// "key value" line of memory.stat, or nothing.
std::optional<std::uint64_t> statField(const std::string& text, std::string_view key) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        std::string_view l = line;
        if (l.size() > key.size() && l.substr(0, key.size()) == key && l[key.size()] == ' ')
            return parseNumber(l.substr(key.size() + 1));
    }
    return std::nullopt;
}

std::string megabytes(std::uint64_t b) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f MB", double(b) / 1e6);
    return text;
}

struct CgroupReading {
    std::uint64_t limit = 0, usage = 0, headroom = 0;
    std::string file; // the limit file, as named in boundBy
    std::string version;
};

// The cgroup folder `rel` (from /proc/self/cgroup) and each folder above it up to the
// mount point; a container without a cgroup namespace sees its own cgroup at the mount
// root, so the mount root itself is always tried too.
std::vector<fs::path> cgroupLevels(const fs::path& mount, std::string_view rel) {
    std::vector<fs::path> levels;
    std::string r(rel);
    while (!r.empty() && r.front() == '/') r.erase(0, 1);
    fs::path p = r;
    // No ".." may climb out of the mount (the file is the kernel's, but stay careful).
    for (const auto& part : p)
        if (part == "..") return {mount};
    while (!p.empty()) {
        levels.push_back(mount / p);
        p = p.parent_path();
    }
    levels.push_back(mount);
    return levels;
}

void considerLevel(const fs::path& dir, bool v2, std::optional<CgroupReading>& best) {
    const fs::path limitFile = dir / (v2 ? "memory.max" : "memory.limit_in_bytes");
    const auto limitText = readSmallFile(limitFile);
    if (!limitText) return;
    if (v2 && trimmed(*limitText) == "max") return;
    const auto limit = parseNumber(*limitText);
    if (!limit || *limit >= (std::uint64_t{1} << 60)) return; // v1's "no limit" is ~2^63
    const auto usageText = readSmallFile(dir / (v2 ? "memory.current" : "memory.usage_in_bytes"));
    const auto usage = usageText ? parseNumber(*usageText) : std::nullopt;
    if (!usage) return;
    std::uint64_t used = *usage;
    // Page cache the kernel drops before it kills anything is not counted as used (as
    // MemAvailable counts it as available).
    if (const auto stat = readSmallFile(dir / "memory.stat")) {
        const auto inactive = statField(*stat, v2 ? "inactive_file" : "total_inactive_file");
        if (inactive && *inactive <= used) used -= *inactive;
    }
    const std::uint64_t headroom = *limit > used ? *limit - used : 0;
    if (!best || headroom < best->headroom)
        best = CgroupReading{*limit, used, headroom, limitFile.string(), v2 ? "v2" : "v1"};
}

} // namespace

std::optional<MemoryInfo> parseMeminfo(const std::string& text) {
    std::optional<std::uint64_t> total, available;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (auto v = meminfoField(line, "MemTotal")) total = v;
        if (auto v = meminfoField(line, "MemAvailable")) available = v;
    }
    if (!total || !available) return std::nullopt;
    MemoryInfo info;
    info.totalBytes = *total;
    info.availableBytes = *available;
    info.meminfoAvailableBytes = *available;
    return info;
}

std::optional<MemoryInfo> readMemoryInfo(const fs::path& root) {
    std::ifstream in(root / "proc/meminfo");
    if (!in) return std::nullopt;
    std::ostringstream text;
    text << in.rdbuf();
    std::optional<MemoryInfo> info = parseMeminfo(text.str());
    if (!info) return info;

    // /proc/self/cgroup: "0::/path" (v2) and "N:memory:/path" or "N:...,memory,...:/path" (v1).
    const auto cgroups = readSmallFile(root / "proc/self/cgroup");
    if (!cgroups) return info;
    std::optional<CgroupReading> best;
    const fs::path cg = root / "sys/fs/cgroup";
    std::istringstream lines(*cgroups);
    std::string line;
    while (std::getline(lines, line)) {
        const auto a = line.find(':');
        const auto b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) continue;
        const std::string controllers = line.substr(a + 1, b - a - 1);
        const std::string rel = line.substr(b + 1);
        if (line.substr(0, a) == "0" && controllers.empty()) {
            // v2: unified at sys/fs/cgroup, or at sys/fs/cgroup/unified in a hybrid layout.
            for (const fs::path& mount : {cg, cg / "unified"})
                for (const fs::path& dir : cgroupLevels(mount, rel)) considerLevel(dir, true, best);
        } else {
            bool memory = false;
            std::istringstream names(controllers);
            for (std::string n; std::getline(names, n, ',');) memory = memory || n == "memory";
            if (memory)
                for (const fs::path& dir : cgroupLevels(cg / "memory", rel))
                    considerLevel(dir, false, best);
        }
    }
    if (best && best->headroom < info->availableBytes) {
        info->availableBytes = best->headroom;
        info->cgroupLimitBytes = best->limit;
        info->boundBy = "cgroup " + best->version + " " + best->file + " (limit " +
                        megabytes(best->limit) + ", usage " + megabytes(best->usage) + ")";
    }
    return info;
}

} // namespace k3
