#pragma once
// The JSON helpers the routes that read a request body field by field share (the
// Messages and Responses APIs, the routes' own bodies): one serialisation, one shape of
// refusal naming the field.
#include <k3/api.hpp>

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <string>
#include <string_view>

namespace k3cli::serve::json {

using Json = nlohmann::ordered_json;

// Compact, invalid UTF-8 replaced (model text may hold a cut character).
inline std::string dump(const Json& v) {
    return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// A 400 naming `field`: "field: what".
inline k3::api::ApiError bad(const std::string& field, const std::string& what) {
    return k3::api::ApiError(400, field + ": " + what, "invalid_request_error", field);
}

// obj[key], present and not null, else a 400 naming field.key.
inline const Json& need(const Json& obj, const char* key, const std::string& field) {
    if (!obj.contains(key) || obj[key].is_null()) throw bad(field + "." + key, "required");
    return obj[key];
}

// A string, else a 400 naming `field`.
inline std::string text(const Json& v, const std::string& field) {
    if (!v.is_string()) throw bad(field, "expected a string");
    return v.get<std::string>();
}

// The request body as a JSON object, else a 400 saying what it is not.
inline Json objectBody(const std::string& body) {
    Json doc = Json::parse(body, nullptr, false);
    if (doc.is_discarded()) throw k3::api::ApiError(400, "the request body is not valid JSON");
    if (!doc.is_object()) throw k3::api::ApiError(400, "the request body must be a JSON object");
    return doc;
}

// A string, or an array of `parts` (named so in the refusal) whose "type" is one of
// `types` (the refusal lists them), their "text" joined.
inline std::string partsText(const Json& v, const std::string& field, const char* parts,
                             std::initializer_list<std::string_view> types) {
    if (v.is_string()) return v.get<std::string>();
    if (!v.is_array()) throw bad(field, std::string("expected a string or an array of ") + parts);
    std::string out;
    for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string at = field + "[" + std::to_string(i) + "]";
        if (!v[i].is_object()) throw bad(at, "expected an object");
        const std::string type = text(need(v[i], "type", at), at + ".type");
        bool known = false;
        std::string list;
        for (std::string_view t : types) {
            known = known || type == t;
            list += (list.empty() ? "" : types.size() == 2 ? " and " : ", ") + std::string(t);
        }
        if (!known)
            throw bad(at + ".type", "\"" + type + "\" is not supported (" + list + " only)");
        out += text(need(v[i], "text", at), at + ".text");
    }
    return out;
}

} // namespace k3cli::serve::json
