#pragma once
// The field readers the request parsers share (chat completions, completions, messages):
// each refusal is a 400 naming the field as the client wrote it.
#include "k3/api.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace k3::api::detail {

// Ordered: tool-call arguments given as an object keep their key order.
using Json = nlohmann::ordered_json;

ApiError bad(const std::string& field, const std::string& what);
const char* typeName(const Json& v);
ApiError wrongType(const std::string& field, const char* expected, const Json& v);
std::string stringField(const Json& v, const std::string& field);
bool has(const Json& obj, const char* key);               // present and not null
int positiveInt(const Json& v, const std::string& field); // 1..1000000, 5.0 as 5
double number(const Json& v, const std::string& field, double lo, double hi);
// One string or up to `most`, none empty.
void stopSequences(const Json& stop, std::vector<std::string>& out,
                   const std::string& field = "stop", std::size_t most = 4);
void logitBias(const Json& v, std::vector<std::pair<TokenId, float>>& out);
// A JSON object, not nested too deep, without a key given twice.
Json parseBody(std::string_view body);

} // namespace k3::api::detail
