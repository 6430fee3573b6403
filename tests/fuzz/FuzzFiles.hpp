#pragma once
// Fixed companions of a fuzzed file (e.g. the rank file when the tokenizer config is
// fuzzed), read once from the source tree's fixtures.

#include <fstream>
#include <sstream>
#include <string>

#include "FuzzSupport.hpp"

namespace k3fuzz {

inline std::string fixture(const std::string& relative) {
    std::ifstream in(std::string(K3_SOURCE_DIR) + "/tests/fixtures/" + relative, std::ios::binary);
    if (!in) broken("a fixture the fuzz target needs is missing");
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

} // namespace k3fuzz
