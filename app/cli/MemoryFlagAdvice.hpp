#pragma once
// The memory flags' part of the CLI's advice (CliSupport.cpp): the engine words a refusal
// of its settings in plain words, and the CLI names the flag that set them.

#include <k3/launch.hpp>

#include <cstdint>
#include <span>
#include <string>

namespace k3cli {

// A refusal of k3::resolveMemoryFlags(flags, availableBytes) in the CLI's words, to
// follow the engine's message, which names the setting ("the automatic preset"): the
// flag that set it, e.g. " (--preset auto; k3 --list-presets shows the presets)". Empty
// when the flags are not refused.
std::string memoryFlagAdvice(std::span<const k3::MemoryFlag> flags, std::uint64_t availableBytes);

} // namespace k3cli
