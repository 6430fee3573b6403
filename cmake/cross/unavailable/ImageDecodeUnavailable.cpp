// Stands in for engine/src/vision/ImageDecode.cpp in cross builds without libpng,
// libjpeg and libwebp (K3_CROSS_IMAGES=OFF: Debian builds none of them for MinGW). The
// text model runs; every image is refused with a message saying why.
#include "k3/vision.hpp"
#include "platform/Platform.hpp"

namespace k3 {

namespace {

[[noreturn]] void refuse(const std::string& name) {
    throw ImageError(name + ": image input is not in this build of k3 (a Windows cross build made "
                            "without libpng, libjpeg and libwebp: K3_CROSS_IMAGES=OFF)");
}

} // namespace

DecodedImage decodeImage(std::span<const std::byte>, const std::string& name) {
    refuse(name);
}

DecodedImage readImageFile(const std::filesystem::path& path) {
    refuse(platform::utf8Path(path));
}

} // namespace k3
