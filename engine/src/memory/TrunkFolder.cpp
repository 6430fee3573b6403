#include "k3/pack.hpp"

#include <string>
#include <system_error>

namespace k3 {

std::filesystem::path freshTrunkFolder(const std::filesystem::path& modelDir) {
    std::error_code ec;
    std::filesystem::path candidate = modelDir / "trunk";
    for (int n = 2; std::filesystem::exists(candidate, ec) || ec; ++n)
        candidate = modelDir / ("trunk-" + std::to_string(n));
    return candidate;
}

} // namespace k3
