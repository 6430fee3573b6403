#pragma once
// What this process has used of the machine's memory.

#include <cstdint>

namespace k3 {

// The largest resident set this process has had, in bytes (0 when unknown): the one
// source of the figure, for the session's memory report (MemoryReport::peakRssBytes) and
// the CLI's run report alike. getrusage on Linux, task_info on macOS, the peak working
// set on Windows (engine/src/platform).
std::uint64_t peakResidentBytes();

} // namespace k3
