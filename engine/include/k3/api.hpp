#pragma once
// The OpenAI chat-completions protocol as data, no sockets: a request body becomes a
// conversation and options for Session::chat, and what the session produced becomes a
// chat.completion, or chat.completion.chunk server-sent events. `k3 serve` puts this on
// an HTTP server; anything else speaking the protocol can reuse it.
//
// Invariants (tests/engine/api/tst_api):
// - Every refusal of a request names the field and what was wrong with it
//   ("messages[1].role: unknown role \"bot\" ..."), as a 400 ApiError.
// - Streamed deltas never split a UTF-8 character: an incomplete sequence is held back
//   until it completes (or the stream finishes), so each event is valid UTF-8 JSON.
// - Deltas concatenate to the non-streamed message: reasoning_content (the think
//   channel) first, then content, then tool_calls in one chunk before the finish chunk.
// - A stop string is never sent, not even its start: text that may begin one is held
//   back until it can no longer match.

#include "k3/chat.hpp"
#include "k3/constraint.hpp"
#include "k3/error.hpp"
#include "k3/tokenizer.hpp"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace k3::api {

// An OpenAI-style refusal: the HTTP status and the error object's fields.
class ApiError : public Error {
public:
    ApiError(int status, const std::string& message, std::string type = "invalid_request_error",
             std::string param = {}, std::string code = {});
    int status() const { return status_; }
    const std::string& type() const { return type_; }
    const std::string& param() const { return param_; } // the field, when one is at fault
    const std::string& code() const { return code_; }

private:
    int status_;
    std::string type_, param_, code_;
};

// {"error":{"message":...,"type":...,"param":...|null,"code":...|null}}
std::string errorJson(const ApiError& error);

struct ChatRequest {
    std::string model;
    std::vector<ChatMessage> messages;
    // thinking (Moonshot's {"type":"enabled"|"disabled"}), reasoning_effort, tools and
    // tool_choice; always ends in the generation prompt.
    ChatRenderOptions render;
    std::optional<int> maxTokens; // max_completion_tokens, else max_tokens
    std::optional<double> temperature;
    std::optional<double> topP;
    std::optional<std::uint64_t> seed;
    std::vector<std::string> stop;
    bool stream = false;
    bool includeUsage = false; // stream_options.include_usage
    // logprobs: true asks for each token's log-probability; top_logprobs (0..20) the
    // alternatives. -1: not asked.
    int topLogprobs = -1;
    // logit_bias (token id -> -100..100; the ids are checked against the vocabulary by
    // the server), presence_penalty, frequency_penalty (-2..2).
    std::vector<std::pair<TokenId, float>> logitBias;
    double presencePenalty = 0;
    double frequencyPenalty = 0;
    // response_format json_object or json_schema: the answer's grammar (the schema
    // compiled while parsing, its refusals named response_format.json_schema.schema.*).
    std::optional<JsonGrammar> answerGrammar;
    // tool_choice "required" or a named function (function_call too): the functions the
    // call may be to, with their parameters' grammars (refusals named
    // tools[i].function.parameters.*). Empty: no call is required.
    std::vector<ToolCallTarget> requiredCall;
};

// What the request's answer must be (a required tool call first, then response_format),
// bound to the model's tokenizer; null when nothing constrains it.
std::shared_ptr<const OutputConstraint> answerConstraint(const ChatRequest& request,
                                                         const Tokenizer& tokenizer);

// Parses a POST /v1/chat/completions body. Throws ApiError (400) naming the field.
// Tool-call arguments render as the template renders what it is given: a string (what
// OpenAI clients send) verbatim in a json block, an object as argument tags.
ChatRequest parseChatRequest(std::string_view body);

// One generated token's log-probability in OpenAI's shape: its bytes (as text, invalid
// UTF-8 replaced, and as the bytes array) and its top alternatives.
struct TokenLogprob {
    std::string token;
    float logprob = 0;
    std::vector<std::pair<std::string, float>> top;
};
// {"token","logprob","bytes","top_logprobs":[{"token","logprob","bytes"}]}
std::string tokenLogprobJson(const TokenLogprob& lp);

struct Usage {
    int promptTokens = 0;
    int completionTokens = 0;
    int cachedTokens = 0; // prompt positions reused from the previous request's state
};

// "tool_calls" when the reply calls tools, "stop" at the end of the turn or a stop
// string, "length" at the token limit or the context length.
std::string finishReason(const ChatMessage& reply, bool endOfTurn, bool stoppedByString);

struct Completion {
    std::string id; // "chatcmpl-..."
    std::string model;
    std::int64_t created = 0; // Unix seconds
    ChatMessage message;
    std::string finishReason;
    Usage usage;
    // Asked for: choices[0].logprobs = {"content": [...]}, every generated token.
    std::optional<std::vector<TokenLogprob>> logprobs;
};

// The tool call ids of a completion: "call_<index>_<completion id suffix>".
std::string toolCallId(std::string_view completionId, std::size_t index);

// The chat.completion object: message.content (null when empty and tools are called),
// message.reasoning_content (when the think channel holds text), message.tool_calls.
std::string completionJson(const Completion& completion);

// The server-sent events of one streamed completion, each "data: {...}\n\n".
class ChunkWriter {
public:
    ChunkWriter(std::string id, std::string model, std::int64_t created);
    // The first chunk: delta {"role":"assistant","content":""}.
    std::string start();
    // reasoning_content and content deltas, whole UTF-8 characters only; "" when there
    // is nothing whole to send yet.
    // With `logprobs` (the token's entry), a chunk is sent even without text.
    std::string delta(std::string_view reasoning, std::string_view content,
                      const TokenLogprob* logprobs = nullptr);
    // Whatever was held back, the tool calls (one chunk), then the finish chunk.
    std::string finish(const std::vector<ChatToolCall>& calls, std::string_view reason);
    // choices [] with usage (stream_options.include_usage), after the finish chunk.
    std::string usage(const Usage& usage);
    static std::string done() { return "data: [DONE]\n\n"; }

private:
    std::string chunk(const std::string& choicesAndUsage);
    std::string id_, model_;
    std::int64_t created_;
    std::string head_; // "data: {"id":...,"model":..., "
    std::string heldReasoning_, heldContent_;
};

// Splits `text` at the end of its last complete UTF-8 character: returns the complete
// part and leaves a trailing incomplete sequence (at most 3 bytes) in `held`, which is
// prepended first. Malformed bytes are passed on (they never complete).
std::string takeCompleteUtf8(std::string& held, std::string_view text);

// The `stop` strings over the content channel.
class StopFilter {
public:
    explicit StopFilter(std::vector<std::string> stops);
    // Content safe to send now. At a match, the text before it; stopped() turns true and
    // later calls return "".
    std::string feed(std::string_view text);
    // The end of the stream: what was held back (when nothing matched).
    std::string flush();
    bool stopped() const { return stopped_; }

private:
    std::vector<std::string> stops_;
    std::string held_;
    bool stopped_ = false;
};

// POST /v1/completions (text completion): the prompt is continued as plain text.
struct CompletionRequest {
    std::string model;
    std::string prompt;                // a string (or an array holding one)
    std::vector<TokenId> promptIds;    // or token ids (an array of integers)
    std::optional<int> maxTokens;      // OpenAI's default is 16
    std::optional<double> temperature; // as chat completions
    std::optional<double> topP;
    std::optional<std::uint64_t> seed;
    std::vector<std::string> stop;
    bool stream = false;
    bool includeUsage = false;
    int logprobs = -1; // legacy logprobs: N alternatives (0..20); -1 not asked
    std::vector<std::pair<TokenId, float>> logitBias;
    double presencePenalty = 0;
    double frequencyPenalty = 0;
};
// Throws ApiError (400) naming the field; echo, suffix, best_of > 1 and n > 1 are refused.
CompletionRequest parseCompletionRequest(std::string_view body);

// A text completion's token log-probabilities, the legacy shape:
// {"tokens","token_logprobs","top_logprobs":[{token: logprob}],"text_offset"}.
std::string legacyLogprobsJson(const std::vector<TokenLogprob>& tokens, std::size_t textOffset);

struct TextCompletion {
    std::string id; // "cmpl-..."
    std::string model;
    std::int64_t created = 0;
    std::string text;
    std::string finishReason; // "stop" or "length"; empty in a streamed chunk
    std::optional<Usage> usage;
    std::string logprobsJson; // legacyLogprobsJson, or empty for null
    bool usageOnly = false;   // the streamed usage chunk: choices []
};
// The text_completion object (also each streamed chunk's).
std::string textCompletionJson(const TextCompletion& c);

// GET /v1/models: one model.
std::string modelsJson(std::string_view id, std::int64_t created);

} // namespace k3::api
