#pragma once
// logit_bias and the presence and frequency penalties over one answer's tokens, applied
// to a copy of the logits the sampler is then given (Decoder in Session.cpp).
#include "k3/session.hpp"

#include <span>
#include <unordered_map>
#include <vector>

namespace k3::model {

class LogitAdjuster {
public:
    explicit LogitAdjuster(const GenerateOptions& options);
    bool active() const { return active_; }
    // `logits` itself when nothing is asked; else the adjusted copy (valid until the next
    // call).
    std::span<const float> apply(std::span<const float> logits);
    // A token generated (+1) or taken back (-1: a proposal counted while verifying).
    void count(TokenId id, int delta = 1);

private:
    const GenerateOptions& options_;
    bool active_ = false;
    std::unordered_map<TokenId, int> counts_;
    std::vector<float> adjusted_;
};

} // namespace k3::model
