#include "api/ImageParts.hpp"
#include "k3/api.hpp"
#include "tokenizer/Base64.hpp"

namespace k3::api::detail {

std::string imagePart(const Json& part, const std::string& field, ChatMessage& m) {
    if (m.role != ChatRole::User) throw bad(field, "images are accepted in user messages only");
    const auto it = part.find("image_url");
    if (it == part.end() || it->is_null()) throw bad(field + ".image_url", "required");
    // {"url": "..."} as OpenAI documents it; a bare string as some clients send.
    const Json* url = &*it;
    std::string urlField = field + ".image_url";
    if (it->is_object()) {
        const auto u = it->find("url");
        if (u == it->end()) throw bad(urlField + ".url", "required");
        url = &*u;
        urlField += ".url";
    }
    if (!url->is_string()) throw wrongType(urlField, "a string", *url);
    const std::string& text = url->get_ref<const std::string&>();
    if (text.rfind("http://", 0) == 0 || text.rfind("https://", 0) == 0)
        throw bad(urlField, "k3 serve does not fetch images: send the image inline as a "
                            "data:image/...;base64 URL");
    const std::size_t comma = text.find(',');
    if (text.rfind("data:", 0) != 0 || comma == std::string::npos ||
        text.substr(0, comma).find(";base64") == std::string::npos)
        throw bad(urlField, "not a data:image/...;base64,... URL");
    const auto bytes = k3::detail::decodeBase64(std::string_view(text).substr(comma + 1));
    if (!bytes) throw bad(urlField, "the data URL's base64 is not valid");
    try {
        const DecodedImage image = decodeImage(
            std::as_bytes(std::span<const char>(bytes->data(), bytes->size())), urlField);
        m.images.push_back({std::make_shared<const PreparedImage>(prepareImage(image))});
    } catch (const ImageError& e) {
        throw ApiError(400, e.what(), "invalid_request_error", urlField);
    }
    return std::string(kImagePlaceholder);
}

} // namespace k3::api::detail
