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
// response_format: ChatRequest::answerGrammar and the render's response format.
void responseFormat(const Json& doc, ChatRequest& r);
// ChatRequest::requiredCall, after tools, tool_choice and the legacy fields were read.
void requiredCall(const Json& doc, ChatRequest& r);

// temperature (0..2), top_p (above 0, at most 1) and seed, into `r`'s members of those
// names: the sampling fields chat and text completions share.
template <typename Request> void samplingFields(const Json& doc, Request& r) {
    if (has(doc, "temperature")) r.temperature = number(doc["temperature"], "temperature", 0, 2);
    if (has(doc, "top_p")) {
        r.topP = number(doc["top_p"], "top_p", 0, 1);
        if (*r.topP <= 0) throw bad("top_p", "must be above 0 (1 keeps every token)");
    }
    if (has(doc, "seed")) {
        if (!doc["seed"].is_number_integer()) throw wrongType("seed", "an integer", doc["seed"]);
        r.seed = doc["seed"].is_number_unsigned() ? doc["seed"].get<std::uint64_t>()
                                                  : std::uint64_t(doc["seed"].get<std::int64_t>());
    }
}

// The fields chat and text completions share: logit_bias, presence_penalty,
// frequency_penalty, stream and stream_options.include_usage, into `r`'s members of those
// names.
template <typename Request> void penaltiesAndStreaming(const Json& doc, Request& r) {
    if (has(doc, "logit_bias")) logitBias(doc["logit_bias"], r.logitBias);
    if (has(doc, "presence_penalty"))
        r.presencePenalty = number(doc["presence_penalty"], "presence_penalty", -2, 2);
    if (has(doc, "frequency_penalty"))
        r.frequencyPenalty = number(doc["frequency_penalty"], "frequency_penalty", -2, 2);
    if (has(doc, "stream")) {
        if (!doc["stream"].is_boolean()) throw wrongType("stream", "a boolean", doc["stream"]);
        r.stream = doc["stream"].get<bool>();
    }
    if (has(doc, "stream_options")) {
        const Json& so = doc["stream_options"];
        if (!so.is_object()) throw wrongType("stream_options", "an object", so);
        if (!r.stream) throw bad("stream_options", "only allowed with stream: true");
        if (has(so, "include_usage")) {
            if (!so["include_usage"].is_boolean())
                throw wrongType("stream_options.include_usage", "a boolean", so["include_usage"]);
            r.includeUsage = so["include_usage"].get<bool>();
        }
    }
}

} // namespace k3::api::detail
