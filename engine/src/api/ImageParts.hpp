#pragma once
// OpenAI image_url content parts of a user message (issue 33): data: URLs decoded and
// preprocessed here; http(s) URLs refused (k3 serve fetches nothing).

#include "api/RequestFields.hpp"
#include "k3/chat.hpp"

#include <string>

namespace k3::api::detail {

// Adds the part's image to `m.images` and returns the placeholder its prompt takes in
// the content. Throws ApiError (400) naming `field` and what is wrong with the image.
std::string imagePart(const Json& part, const std::string& field, ChatMessage& m);

} // namespace k3::api::detail
