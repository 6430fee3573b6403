#pragma once
// Exact speculative decoding: proposals are cheap guesses of the next tokens; the exact
// model verifies the pending token and k proposals in ONE chunked forward (the trunk read
// once) and keeps the longest prefix equal to its own argmax, then its own next token.
// So the ids are serial greedy decode's, whatever is proposed; a good guess only saves
// trunk passes.

#include "k3/tokenizer.hpp"

#include <span>
#include <vector>

namespace k3 {

// Prompt lookup (n-gram): finds the most recent earlier occurrence of the history's last
// n tokens (n from maxN down to minN, the longest match wins) and proposes up to k of the
// tokens that followed it. No model, no memory: text that repeats the conversation
// (quoting, code edits, lists) is where it pays.
std::vector<TokenId> proposePromptLookup(std::span<const TokenId> history, int k, int maxN = 4,
                                         int minN = 2);

// The adaptive width ("--spec auto"): grows while whole proposals are accepted, shrinks
// when the first proposed token is rejected, between 1 and maxWidth. Where proposals keep
// failing (text the model does not repeat although the conversation does), it also
// stops proposing for 2, 4, ... 64 serial steps after each failed pass, so such text
// decodes within a few percent of serial decode. A pass also fails when it was measured
// slower per committed token than serial steps (a draft whose own forward costs more
// than the trunk pass it saves): the width follows seconds, not only acceptance. The
// session times its steps for greedy --spec auto only; a fixed width, and sampling
// (whose random draws follow the proposals, and a seed must reproduce), go by acceptance.
class SpeculationWidth {
public:
    explicit SpeculationWidth(int maxWidth = 16, int start = 4);
    int width() const { return width_; }
    // False while cooling down after rejections; each call is one decode step.
    bool propose();
    // A speculative step: `proposed` guesses, `accepted` kept; `secondsPerToken` is the
    // whole step (proposing and verifying) over the tokens it committed (0: not timed).
    void record(int proposed, int accepted, double secondsPerToken = 0);
    // A serial step's seconds (the yardstick for record's secondsPerToken).
    void recordSerial(double seconds);
    double serialSeconds() const { return serialSeconds_; }

private:
    int max_;
    int width_;
    int failures_ = 0;         // failed passes in a row
    int cooldown_ = 0;         // steps left without proposals
    double serialSeconds_ = 0; // moving average of serial steps (0: none measured yet)
};

} // namespace k3
