#pragma once
// A compiled, JIT-ed PCRE2 pattern (8-bit, UTF, UCP) and a loop over its matches.
// The compiled code is immutable and shared between threads; match state is per call.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace k3::detail {

class Pcre2Regex {
public:
    explicit Pcre2Regex(const std::string& pattern);
    ~Pcre2Regex();
    Pcre2Regex(const Pcre2Regex&) = delete;
    Pcre2Regex& operator=(const Pcre2Regex&) = delete;

    // Calls onMatch(begin, end) for every non-overlapping match, left to right, like Rust's
    // find_iter. `text` must be valid UTF-8 (the caller checks; PCRE2 does not re-check).
    void forEachMatch(std::string_view text,
                      const std::function<void(std::size_t, std::size_t)>& onMatch) const;

private:
    struct Code;
    std::unique_ptr<Code> code_;
};

// The Kimi pre-tokenizer pattern, written for PCRE2 (see Pcre2Regex.cpp for why each part
// is spelled as it is).
const std::string& kimiPattern();

} // namespace k3::detail
