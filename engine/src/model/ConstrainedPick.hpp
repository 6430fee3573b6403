#pragma once
// The sampler's pick under an OutputConstraint (Decoder in Session.cpp): kept when the
// constraint allows it, else drawn again by the same sampler among the allowed tokens
// only (greedy: the allowed token with the highest logit). So a constraint that admits
// the plain answer changes no id, and with top_p 1 a sampled token has exactly the
// plain distribution conditioned on the constraint.
#include "k3/grammar.hpp"
#include "k3/session.hpp"

#include <span>

namespace k3::model {

class ConstrainedPick {
public:
    ConstrainedPick(const OutputConstraint& constraint, const ChatRenderOptions& render);
    // `pick` (the sampler's choice from `logits`) or its replacement; `tokensLeftAfter`:
    // how many more tokens the answer may take after this one.
    TokenId pick(Sampler& sampler, std::span<const float> logits, TokenId pick,
                 int tokensLeftAfter) const;
    void commit(TokenId id) { state_.advance(id); }

private:
    grammar::ConstraintState state_;
};

} // namespace k3::model
