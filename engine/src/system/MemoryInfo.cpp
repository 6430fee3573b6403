#include "k3/system.hpp"

#include <charconv>
#include <fstream>
#include <sstream>
#include <string_view>

namespace k3 {
namespace {

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
    return MemoryInfo{*total, *available};
}

std::optional<MemoryInfo> readMemoryInfo() {
    std::ifstream in("/proc/meminfo");
    if (!in) return std::nullopt;
    std::ostringstream text;
    text << in.rdbuf();
    return parseMeminfo(text.str());
}

} // namespace k3
