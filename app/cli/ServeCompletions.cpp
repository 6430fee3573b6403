// POST /v1/completions: the prompt continued as plain text (no chat template), through
// Session::generateIds, until the model's end-of-text or end-of-message marker, a stop
// string or max_tokens (16 by default, as OpenAI's).
#include "ServeServer.hpp"

#include <algorithm>

namespace k3cli::serve {

namespace {

// Gives each token of generateIds its text (generateIds reports ids only) and leaves the
// markers that end the text out of it.
class TextObserver : public k3::SessionObserver {
public:
    TextObserver(const k3::Tokenizer& tok, const std::vector<k3::TokenId>& stopIds,
                 ReplyObserver& next)
        : decoder_(tok), stopIds_(stopIds), next_(next) {}
    void onToken(const k3::TokenEvent& ev) override {
        if (std::find(stopIds_.begin(), stopIds_.end(), ev.id) != stopIds_.end()) return;
        k3::TokenEvent out = ev;
        out.responseDelta = decoder_.push(ev.id);
        next_.onToken(out);
    }
    void finish() {
        k3::TokenEvent tail;
        tail.responseDelta = decoder_.flush();
        if (!tail.responseDelta.empty()) next_.onToken(tail);
    }

private:
    k3::StreamDecoder decoder_;
    const std::vector<k3::TokenId>& stopIds_;
    ReplyObserver& next_;
};

std::vector<k3::TokenId> endOfTextIds(const k3::Tokenizer& tok, const k3::ModelConfig& config) {
    std::vector<k3::TokenId> ids;
    for (const char* marker : {"[EOS]", "<|end_of_msg|>"})
        if (const auto id = tok.tokenId(marker)) ids.push_back(*id);
    if (config.eosTokenId) ids.push_back(k3::TokenId(*config.eosTokenId));
    return ids;
}

} // namespace

// Over 80 lines: the request, then the four parts of its answer (Generation's fields).
void Server::completions(const httplib::Request& req, httplib::Response& res) {
    namespace api = k3::api;
    if (refusedBeforeParsing(req, res)) return;
    api::CompletionRequest request;
    k3::GenerateOptions options;
    std::vector<k3::TokenId> prompt;
    const k3::Tokenizer& tok = session_->tokenizer();
    try {
        request = api::parseCompletionRequest(req.body);
        prompt = request.promptIds.empty() ? tok.encode(request.prompt) : request.promptIds;
        for (std::size_t i = 0; i < prompt.size(); ++i)
            if (prompt[i] >= session_->config().vocabSize)
                throw api::ApiError(400, "prompt[" + std::to_string(i) + "]: not a token id",
                                    "invalid_request_error", "prompt");
        if (prompt.empty()) throw api::ApiError(400, "prompt: encodes to no tokens");
        checkPromptFits(prompt.size(), "prompt");
        checkLogitBias(request.logitBias);
        options = sampling(request.temperature, request.topP, request.seed, 0);
        options.maxTokens = request.maxTokens.value_or(16);
        options.logprobs = request.logprobs;
        options.logitBias = request.logitBias;
        options.presencePenalty = float(request.presencePenalty);
        options.frequencyPenalty = float(request.frequencyPenalty);
        options.stopIds = endOfTextIds(tok, session_->config());
    } catch (const api::ApiError& e) {
        return sendError(res, e);
    }
    auto base = std::make_shared<api::TextCompletion>();
    base->id = newId("cmpl-");
    base->model = modelId_;
    base->created = std::time(nullptr);
    auto heldText = std::make_shared<std::string>(); // an incomplete UTF-8 character
    auto offset = std::make_shared<std::size_t>(0);
    const bool withLogprobs = request.logprobs >= 0;
    auto usageOf = [](const k3::GenerateResult& r) {
        const int ended = r.endOfTurn ? 1 : 0; // the end marker is generated, not text
        return api::Usage{r.promptTokens, int(r.ids.size()) - ended, r.reusedPositions};
    };
    auto reasonOf = [](const k3::GenerateResult& r, const ReplyObserver& o) {
        return r.endOfTurn || o.stoppedByString() ? "stop" : "length";
    };
    Generation g;
    g.stream = request.stream;
    g.stops = request.stop;
    g.run = [prompt, options](k3::Session& s, ReplyObserver& o, const std::atomic<bool>* cancel) {
        TextObserver text(s.tokenizer(), options.stopIds, o);
        k3::GenerateResult r = s.generateIds(prompt, options, &text, cancel);
        text.finish();
        return r;
    };
    g.start = [] { return std::string(); };
    g.delta = [this, base, heldText, offset, withLogprobs](
                  const k3::TokenEvent* ev, const std::string&, const std::string& content) {
        api::TextCompletion c = *base;
        c.text = api::takeCompleteUtf8(*heldText, content);
        if (withLogprobs && ev && ev->logprobs) {
            c.logprobsJson =
                api::legacyLogprobsJson({tokenLogprob(ev->id, *ev->logprobs)}, *offset);
            *offset += tokenText(ev->id).size();
        }
        if (c.text.empty() && c.logprobsJson.empty()) return std::string();
        return "data: " + api::textCompletionJson(c) + "\n\n";
    };
    g.finish = [base, heldText, usageOf, reasonOf, includeUsage = request.includeUsage](
                   const k3::GenerateResult& r, const ReplyObserver& o) {
        api::TextCompletion c = *base;
        c.text = std::exchange(*heldText, {});
        c.finishReason = reasonOf(r, o);
        std::string out = "data: " + api::textCompletionJson(c) + "\n\n";
        if (includeUsage) {
            api::TextCompletion u = *base;
            u.usageOnly = true;
            u.usage = usageOf(r);
            out += "data: " + api::textCompletionJson(u) + "\n\n";
        }
        return out + api::ChunkWriter::done();
    };
    g.errorEvent = [](const api::ApiError& e) { return "data: " + api::errorJson(e) + "\n\n"; };
    g.body = [this, base, usageOf, reasonOf, withLogprobs](const k3::GenerateResult& r,
                                                           const ReplyObserver& o) {
        api::TextCompletion c = *base;
        c.text = o.content();
        c.finishReason = reasonOf(r, o);
        c.usage = usageOf(r);
        if (withLogprobs) {
            std::vector<api::TokenLogprob> list;
            for (const auto& [id, lp] : o.logprobs()) list.push_back(tokenLogprob(id, lp));
            c.logprobsJson = api::legacyLogprobsJson(list, 0);
        }
        return api::textCompletionJson(c);
    };
    answer(req, res, std::move(g));
}

} // namespace k3cli::serve
