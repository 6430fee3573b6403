#include "k3/speculation.hpp"

#include <algorithm>

namespace k3 {

namespace {
ProposalFilter& proposalFilter() {
    static ProposalFilter filter;
    return filter;
}
} // namespace

void setProposalFilterForBenchmarks(ProposalFilter filter) {
    proposalFilter() = std::move(filter);
}

const ProposalFilter& proposalFilterForBenchmarks() {
    return proposalFilter();
}

ProposalFilter rejectEveryProposal(std::vector<TokenId> answer, std::size_t promptLength,
                                   int vocab) {
    return [answer = std::move(answer), promptLength, vocab](std::span<const TokenId> context,
                                                             std::vector<TokenId>& proposals) {
        // context: the prompt, the ids so far and the pending one; proposals[0] guesses the
        // id after the pending one.
        const TokenId wrong = (answer.at(context.size() - promptLength) + 1) % vocab;
        if (proposals.empty())
            proposals.push_back(wrong);
        else
            proposals[0] = wrong;
    };
}

std::vector<TokenId> proposePromptLookup(std::span<const TokenId> history, int k, int maxN,
                                         int minN) {
    std::vector<TokenId> out;
    const int len = int(history.size());
    if (k <= 0 || minN < 1) return out;
    for (int n = std::min(maxN, len - 1); n >= minN; --n) {
        const auto tail = history.subspan(std::size_t(len - n));
        // The latest earlier match: the nearest context is the likeliest to repeat.
        for (int start = len - n - 1; start >= 0; --start) {
            if (!std::equal(tail.begin(), tail.end(), history.begin() + start)) continue;
            const int from = start + n;
            for (int i = from; i < len && int(out.size()) < k; ++i)
                out.push_back(history[std::size_t(i)]);
            return out;
        }
    }
    return out;
}

SpeculationWidth::SpeculationWidth(int maxWidth, int start, bool timed)
    : max_(std::max(1, maxWidth)), width_(std::clamp(start, 1, std::max(1, maxWidth))),
      timed_(timed) {}

bool SpeculationWidth::propose() {
    if (timed_ && serialSeconds_ <= 0) return false; // no yardstick yet
    if (cooldown_ > 0) {
        --cooldown_;
        return false;
    }
    return !timed_ || credit_ >= 0;
}

void SpeculationWidth::record(int proposed, int accepted, double secondsPerToken) {
    if (proposed <= 0) return;
    const bool measured = secondsPerToken > 0 && serialSeconds_ > 0;
    const bool slower = measured && secondsPerToken > serialSeconds_;
    if (timed_ && measured) {
        // Saved (lost) against serial steps, in serial steps: the pass committed
        // accepted + 1 tokens (fewer only where the answer ends).
        const double committed = accepted + 1;
        credit_ += committed * (1.0 - secondsPerToken / serialSeconds_) +
                   kLossBudget * committed * secondsPerToken / serialSeconds_;
        credit_ = std::min(credit_, 1.0);
    }
    if (accepted > 0 && !slower) failures_ = 0;
    if (accepted == proposed && !slower) { // every guess held and paid: guess further
        width_ = std::min(max_, width_ * 2);
    } else if (accepted == 0 || slower) { // the pass was nearly wasted, or cost more
        width_ = std::max(1, width_ / 2);
        failures_ = std::min(failures_ + 1, kMaxFailures);
        cooldown_ = 1 << failures_; // 2, 4, ... 256 serial steps
    }
}

void SpeculationWidth::recordSerial(double seconds) {
    if (seconds <= 0) return;
    // A short memory: the disk's speed changes as the page cache warms.
    serialSeconds_ = serialSeconds_ > 0 ? 0.75 * serialSeconds_ + 0.25 * seconds : seconds;
    if (timed_) credit_ = std::min(1.0, credit_ + kLossBudget * seconds / serialSeconds_);
}

} // namespace k3
