#include "model/StateCache.hpp"
#include "k3/state_cache.hpp"

#include "io/Xxh3.hpp"

#include <algorithm>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <system_error>

namespace k3 {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kExtension = ".k3state";

// One file of the folder, as its name describes it.
struct Entry {
    fs::path file;
    std::string binding;
    char kind = 'c';
    std::size_t positions = 0;
    std::string idsHash;
    std::uint64_t bytes = 0;
    fs::file_time_type lastUse;
};

// "<binding>-<p|c>-<positions>-<hash>.k3state"; nullopt for any other name.
std::optional<Entry> parseName(const fs::path& file) {
    const std::string name = file.filename().string();
    if (name.size() <= kExtension.size() || !name.ends_with(kExtension)) return std::nullopt;
    const std::string stem = name.substr(0, name.size() - kExtension.size());
    const std::size_t a = stem.find('-');
    const std::size_t b = a == std::string::npos ? a : stem.find('-', a + 1);
    const std::size_t c = b == std::string::npos ? b : stem.find('-', b + 1);
    if (c == std::string::npos || b != a + 2) return std::nullopt;
    Entry e;
    e.file = file;
    e.binding = stem.substr(0, a);
    e.kind = stem[a + 1];
    if (e.kind != 'p' && e.kind != 'c') return std::nullopt;
    const char* first = stem.data() + b + 1;
    const char* last = stem.data() + c;
    const auto [end, ec] = std::from_chars(first, last, e.positions);
    if (ec != std::errc() || end != last || e.positions == 0) return std::nullopt;
    e.idsHash = stem.substr(c + 1);
    return e;
}

// Every state file of the folder with its size and last use; unreadable entries are
// skipped (another process may be removing them).
std::vector<Entry> listEntries(const fs::path& dir) {
    std::vector<Entry> out;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        std::optional<Entry> e = parseName(it->path());
        if (!e) continue;
        std::error_code fec;
        if (!it->is_regular_file(fec) || fec) continue;
        e->bytes = it->file_size(fec);
        if (fec) continue;
        e->lastUse = it->last_write_time(fec);
        if (fec) continue;
        out.push_back(std::move(*e));
    }
    return out;
}

} // namespace

namespace model {

std::string hashOfIds(std::span<const TokenId> ids) {
    const XXH128_hash_t h = XXH3_128bits(ids.data(), ids.size_bytes());
    char buf[33];
    std::snprintf(buf, sizeof buf, "%016" PRIx64 "%016" PRIx64, std::uint64_t(h.high64),
                  std::uint64_t(h.low64));
    return buf;
}

std::string ownedBinding(const std::string& binding, const std::string& owner) {
    if (owner.empty()) return binding;
    const std::string text = binding + '\n' + owner;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016" PRIx64,
                  std::uint64_t(XXH3_64bits(text.data(), text.size())));
    return buf;
}

StateCache::StateCache(fs::path directory, std::uint64_t budgetBytes, std::string binding)
    : directory_(std::move(directory)), budgetBytes_(budgetBytes), binding_(std::move(binding)) {}

std::vector<fs::path> StateCache::prefixesOf(std::span<const TokenId> ids,
                                             std::size_t longerThan) const {
    std::vector<Entry> entries = listEntries(directory_);
    std::erase_if(entries, [&](const Entry& e) {
        return e.binding != binding_ || e.positions <= longerThan || e.positions > ids.size();
    });
    std::sort(entries.begin(), entries.end(),
              [](const Entry& x, const Entry& y) { return x.positions > y.positions; });
    std::vector<fs::path> out;
    for (const Entry& e : entries)
        if (hashOfIds(ids.first(e.positions)) == e.idsHash) out.push_back(e.file);
    return out;
}

std::size_t StateCache::longestPrefixOf(std::span<const TokenId> ids) const {
    std::size_t longest = 0;
    for (const Entry& e : listEntries(directory_))
        if (e.binding == binding_ && e.positions > longest && e.positions <= ids.size() &&
            hashOfIds(ids.first(e.positions)) == e.idsHash)
            longest = e.positions;
    return longest;
}

bool StateCache::holds(std::span<const TokenId> ids) const {
    std::error_code ec;
    return fs::exists(pathFor(ids, Kind::Preamble), ec) ||
           fs::exists(pathFor(ids, Kind::Conversation), ec);
}

fs::path StateCache::pathFor(std::span<const TokenId> ids, Kind kind) const {
    return directory_ /
           (binding_ + (kind == Kind::Preamble ? "-p-" : "-c-") + std::to_string(ids.size()) + "-" +
            hashOfIds(ids) + std::string(kExtension));
}

void StateCache::touch(const fs::path& file) const {
    std::error_code ec;
    fs::last_write_time(file, fs::file_time_type::clock::now(), ec);
}

void StateCache::remove(const fs::path& file) const {
    std::error_code ec;
    fs::remove(file, ec);
}

int StateCache::removeConversationPrefixesOf(std::span<const TokenId> ids) const {
    int removed = 0;
    for (const Entry& e : listEntries(directory_))
        if (e.binding == binding_ && e.kind == 'c' && e.positions <= ids.size() &&
            hashOfIds(ids.first(e.positions)) == e.idsHash) {
            remove(e.file);
            ++removed;
        }
    return removed;
}

std::vector<std::pair<fs::path, std::uint64_t>>
StateCache::conversationPrefixesOf(std::span<const TokenId> ids) const {
    std::vector<std::pair<fs::path, std::uint64_t>> out;
    for (const Entry& e : listEntries(directory_))
        if (e.binding == binding_ && e.kind == 'c' && e.positions <= ids.size() &&
            hashOfIds(ids.first(e.positions)) == e.idsHash)
            out.emplace_back(e.file, e.bytes);
    return out;
}

void StateCache::afterSave(const fs::path& saved, std::span<const TokenId> ids) const {
    std::vector<Entry> entries = listEntries(directory_);
    std::erase_if(entries, [&](const Entry& e) {
        const bool superseded = e.file != saved && e.binding == binding_ && e.kind == 'c' &&
                                e.positions < ids.size() &&
                                hashOfIds(ids.first(e.positions)) == e.idsHash;
        if (superseded) remove(e.file);
        return superseded;
    });
    std::uint64_t total = 0;
    for (const Entry& e : entries) total += e.bytes;
    std::sort(entries.begin(), entries.end(),
              [](const Entry& x, const Entry& y) { return x.lastUse < y.lastUse; });
    // The one just saved goes last, and only when it alone is over the budget.
    std::stable_partition(entries.begin(), entries.end(),
                          [&](const Entry& e) { return e.file != saved; });
    for (const Entry& e : entries) {
        if (total <= budgetBytes_) break;
        remove(e.file);
        total -= e.bytes;
    }
}

} // namespace model

fs::path defaultStateCacheDirectory() {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    if (xdg != nullptr && *xdg == '/') return fs::path(xdg) / "k3" / "states";
    const char* home = std::getenv("HOME");
    if (home != nullptr && *home != '\0') return fs::path(home) / ".cache" / "k3" / "states";
    return {};
}

StateCacheUsage stateCacheUsage(const fs::path& directory) {
    StateCacheUsage usage;
    for (const Entry& e : listEntries(directory)) {
        ++usage.files;
        usage.bytes += e.bytes;
    }
    return usage;
}

StateCacheUsage clearStateCache(const fs::path& directory) {
    StateCacheUsage removed;
    for (const Entry& e : listEntries(directory)) {
        std::error_code ec;
        if (fs::remove(e.file, ec)) {
            ++removed.files;
            removed.bytes += e.bytes;
        }
    }
    return removed;
}

} // namespace k3
