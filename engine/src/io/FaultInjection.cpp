// The fault-injection test hook (k3/fault_injection.hpp).
#include "k3/fault_injection.hpp"

#include <charconv>
#include <mutex>
#include <stdexcept>

namespace k3 {
namespace {

struct FaultState {
    std::mutex mutex;
    FaultRule rule;
    std::uint64_t seen = 0;     // matching operations so far
    std::uint64_t injected = 0; // faults acted out so far
};

FaultState& state() {
    static FaultState s;
    return s;
}

thread_local int tLayer = -1;
thread_local int tExpert = -1;

std::uint64_t parseCount(std::string_view key, std::string_view value) {
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (value.empty() || ec != std::errc() || end != value.data() + value.size())
        throw std::invalid_argument("\"" + std::string(key) + ":" + std::string(value) +
                                    "\" needs a non-negative integer");
    return v;
}

} // namespace

namespace detail {

std::atomic<bool> gFaultArmed{false};

std::optional<IoFault> consultFault(IoKind kind, std::string_view path, bool write) {
    FaultState& s = state();
    std::lock_guard lock(s.mutex);
    if (!gFaultArmed.load(std::memory_order_relaxed)) return std::nullopt;
    const FaultRule& r = s.rule;
    if (r.kind != IoKind::Any && r.kind != kind) return std::nullopt;
    // ENOSPC only fires on writes and a short read only on reads; EIO on either.
    if (r.error == IoFault::NoSpace && !write) return std::nullopt;
    if (r.error == IoFault::ShortRead && write) return std::nullopt;
    if (!r.pathContains.empty() && path.find(r.pathContains) == std::string_view::npos)
        return std::nullopt;
    if (r.layer >= 0 && r.layer != tLayer) return std::nullopt;
    if (r.expert >= 0 && r.expert != tExpert) return std::nullopt;
    if (r.expertFilter && (tLayer < 0 || !r.expertFilter(tLayer, tExpert))) return std::nullopt;
    if (s.seen++ < r.after || s.injected >= r.times) return std::nullopt;
    ++s.injected;
    return r.error;
}

} // namespace detail

const char* ioKindName(IoKind kind) {
    switch (kind) {
    case IoKind::Any:
        return "any";
    case IoKind::Expert:
        return "expert";
    case IoKind::Trunk:
        return "trunk";
    case IoKind::Shard:
        return "shard";
    case IoKind::Pack:
        return "pack";
    case IoKind::Download:
        return "download";
    case IoKind::Transcript:
        return "transcript";
    case IoKind::File:
        return "file";
    }
    return "?";
}

const char* ioFaultName(IoFault fault) {
    switch (fault) {
    case IoFault::Eio:
        return "eio";
    case IoFault::ShortRead:
        return "short";
    case IoFault::NoSpace:
        return "enospc";
    }
    return "?";
}

FaultRule parseFaultRule(std::string_view spec) {
    FaultRule rule;
    bool sawKind = false;
    while (!spec.empty()) {
        const std::size_t comma = spec.find(',');
        const std::string_view item = spec.substr(0, comma);
        spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
        const std::size_t colon = item.find(':');
        if (colon == std::string_view::npos)
            throw std::invalid_argument("\"" + std::string(item) + "\" is not KEY:VALUE");
        const std::string_view key = item.substr(0, colon), value = item.substr(colon + 1);
        if (key == "kind") {
            bool found = false;
            for (IoKind k : {IoKind::Any, IoKind::Expert, IoKind::Trunk, IoKind::Shard,
                             IoKind::Pack, IoKind::Download, IoKind::Transcript, IoKind::File})
                if (value == ioKindName(k)) rule.kind = k, found = true;
            if (!found)
                throw std::invalid_argument(
                    "unknown kind \"" + std::string(value) +
                    "\" (any, expert, trunk, shard, pack, download, transcript, file)");
            sawKind = true;
        } else if (key == "error") {
            if (value == "eio")
                rule.error = IoFault::Eio;
            else if (value == "short")
                rule.error = IoFault::ShortRead;
            else if (value == "enospc")
                rule.error = IoFault::NoSpace;
            else
                throw std::invalid_argument("unknown error \"" + std::string(value) +
                                            "\" (eio, short, enospc)");
        } else if (key == "after") {
            rule.after = parseCount(key, value);
        } else if (key == "times") {
            rule.times = parseCount(key, value);
        } else if (key == "path") {
            rule.pathContains = std::string(value);
        } else if (key == "layer") {
            rule.layer = int(parseCount(key, value));
        } else if (key == "expert") {
            rule.expert = int(parseCount(key, value));
        } else {
            throw std::invalid_argument("unknown key \"" + std::string(key) +
                                        "\" (kind, error, after, times, path, layer, expert)");
        }
    }
    if (!sawKind) throw std::invalid_argument("no kind:... given");
    return rule;
}

std::string describeFaultRule(const FaultRule& r) {
    std::string s = std::string(ioFaultName(r.error)) + " on " + ioKindName(r.kind) + " I/O";
    if (!r.pathContains.empty()) s += " of files containing \"" + r.pathContains + "\"";
    if (r.layer >= 0) s += ", layer " + std::to_string(r.layer);
    if (r.expert >= 0) s += ", expert " + std::to_string(r.expert);
    s += ", after " + std::to_string(r.after) + " operation(s)";
    if (r.times != std::numeric_limits<std::uint64_t>::max())
        s += ", " + std::to_string(r.times) + " time(s)";
    return s;
}

void armFault(FaultRule rule) {
    FaultState& s = state();
    std::lock_guard lock(s.mutex);
    s.rule = std::move(rule);
    s.seen = 0;
    s.injected = 0;
    detail::gFaultArmed.store(true, std::memory_order_relaxed);
}

void disarmFault() {
    FaultState& s = state();
    std::lock_guard lock(s.mutex);
    detail::gFaultArmed.store(false, std::memory_order_relaxed);
    s.rule = {};
}

std::uint64_t faultsInjected() {
    FaultState& s = state();
    std::lock_guard lock(s.mutex);
    return s.injected;
}

FaultExpertScope::FaultExpertScope(int layer, int expert)
    : prevLayer_(tLayer), prevExpert_(tExpert) {
    tLayer = layer;
    tExpert = expert;
}

FaultExpertScope::~FaultExpertScope() {
    tLayer = prevLayer_;
    tExpert = prevExpert_;
}

} // namespace k3
