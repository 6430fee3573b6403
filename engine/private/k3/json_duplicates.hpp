#pragma once
// Duplicate keys in JSON read from outside (requests, config.json, transcripts). nlohmann
// keeps the last of two equal keys, another reader may keep the first: the same text
// would mean two things, so it is refused, naming the key.

#include <nlohmann/json.hpp>

#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace k3 {

class DuplicateJsonKey : public std::runtime_error {
public:
    explicit DuplicateJsonKey(std::string key)
        : std::runtime_error("key \"" + key + "\" appears twice in one object"),
          key_(std::move(key)) {}
    const std::string& key() const { return key_; }

private:
    std::string key_;
};

// Json::parse(text), which throws what it throws, and DuplicateJsonKey for an object that
// names a key twice. Check the depth first (json_limits.hpp): the parser recurses.
template <class Json> Json parseJsonWithoutDuplicateKeys(std::string_view text) {
    std::vector<std::set<std::string>> open; // the keys of each object being read
    const typename Json::parser_callback_t check = [&open](int, typename Json::parse_event_t event,
                                                           Json& parsed) {
        using Event = typename Json::parse_event_t;
        if (event == Event::object_start) {
            open.emplace_back();
        } else if (event == Event::key) {
            std::string key = parsed.template get<std::string>();
            if (!open.empty() && !open.back().insert(key).second)
                throw DuplicateJsonKey(std::move(key));
        } else if (event == Event::object_end && !open.empty()) {
            open.pop_back();
        }
        return true;
    };
    return Json::parse(text, check);
}

} // namespace k3
