#include "model/ConstrainedPick.hpp"

namespace k3::model {

namespace {
// The channel the generation prompt opened, as ChatOutputParser::forOptions reads it.
bool thinkFirst(const ChatRenderOptions& r) {
    return r.continueChannel.empty() ? r.thinking : r.continueChannel == "think";
}
} // namespace

ConstrainedPick::ConstrainedPick(const OutputConstraint& constraint,
                                 const ChatRenderOptions& render)
    : state_(constraint, thinkFirst(render)) {}

TokenId ConstrainedPick::pick(Sampler& sampler, std::span<const float> logits, TokenId pick,
                              int tokensLeftAfter) const {
    if (state_.allows(pick, tokensLeftAfter)) return pick;
    std::vector<TokenId> ids = state_.allowed(tokensLeftAfter);
    // Fewer tokens left than any completion needs: the answer will be cut, but stays
    // on the grammar's path.
    if (ids.empty()) ids = state_.allowedIgnoringBudget();
    if (ids.empty()) return pick; // a dead state: nothing can follow
    std::vector<float> allowedLogits(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) allowedLogits[i] = logits[std::size_t(ids[i])];
    return ids[std::size_t(sampler.sample(allowedLogits))];
}

} // namespace k3::model
