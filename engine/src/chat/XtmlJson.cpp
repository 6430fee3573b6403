#include "chat/XtmlJson.hpp"
#include "k3/json_limits.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

namespace k3::xtml {

Json parseJson(std::string_view text) {
    // Too deep for the recursive walks below: refused as if it were no JSON.
    if (jsonTooDeepAt(text)) return Json(Json::value_t::discarded);
    return Json::parse(text, nullptr, false);
}

namespace {

// A scalar as json.dumps writes it; invalid UTF-8 becomes U+FFFD rather than throwing.
std::string scalar(const Json& value) {
    return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string lowerAscii(const std::string& s) {
    std::string out = s;
    for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

} // namespace

std::string pythonJson(const Json& value) {
    if (value.is_object()) {
        std::string out = "{";
        bool first = true;
        for (const auto& [key, item] : value.items()) {
            if (!first) out += ", ";
            first = false;
            out += scalar(Json(key)) + ": " + pythonJson(item);
        }
        return out + "}";
    }
    if (value.is_array()) {
        std::string out = "[";
        for (std::size_t i = 0; i < value.size(); ++i) {
            if (i) out += ", ";
            out += pythonJson(value[i]);
        }
        return out + "]";
    }
    return scalar(value);
}

std::string sortedJson(const Json& value) {
    if (value.is_object()) {
        std::vector<std::pair<std::string, const Json*>> items;
        for (const auto& [key, item] : value.items()) items.emplace_back(key, &item);
        // dictsort(case_sensitive=False) sorts on key.lower(); sorted() is stable.
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
            return lowerAscii(a.first) < lowerAscii(b.first);
        });
        std::string out = "{";
        for (std::size_t i = 0; i < items.size(); ++i) {
            if (i) out += ",";
            out += scalar(Json(items[i].first)) + ":" + sortedJson(*items[i].second);
        }
        return out + "}";
    }
    if (value.is_array()) {
        std::string out = "[";
        for (std::size_t i = 0; i < value.size(); ++i) {
            if (i) out += ",";
            out += sortedJson(value[i]);
        }
        return out + "]";
    }
    return scalar(value);
}

std::string_view xtmlType(const Json& value) {
    if (value.is_boolean()) return "boolean";
    if (value.is_null()) return "null";
    if (value.is_number()) return "number";
    if (value.is_string()) return "string";
    if (value.is_object()) return "object";
    return "array";
}

} // namespace k3::xtml
