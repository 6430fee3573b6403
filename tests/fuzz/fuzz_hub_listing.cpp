// The hub's model API answer (file list with sizes and LFS sha256): every accepted name
// must stay inside the destination folder and every sha256 must be 64 lowercase hex.
#include "FuzzSupport.hpp"

#include <k3/hub.hpp>

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    try {
        for (const k3::HubFile& f : k3::parseFileList(std::string(k3fuzz::asText(data, size)))) {
            k3fuzz::check(k3::isSafeFileName(f.name), "an unsafe file name was accepted");
            k3fuzz::check(f.sha256.empty() || f.sha256.size() == 64, "sha256 is not 64 hex digits");
            for (char c : f.sha256)
                k3fuzz::check((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'),
                              "sha256 is not lowercase hex");
        }
    } catch (const k3::HubError& e) {
        k3fuzz::check(e.hubKind() == k3::HubErrorKind::BadListing,
                      "a listing error of another kind");
    }
    return 0;
}
