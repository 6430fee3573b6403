#pragma once
// Exact speculative decoding: proposals are cheap guesses of the next tokens; the exact
// model verifies the pending token and k proposals in ONE chunked forward (the trunk read
// once) and keeps the longest prefix equal to its own argmax, then its own next token.
// So the ids are serial greedy decode's, whatever is proposed; a good guess only saves
// trunk passes.

#include "k3/tokenizer.hpp"

#include <functional>
#include <span>
#include <vector>

namespace k3 {

// Prompt lookup (n-gram): finds the most recent earlier occurrence of the history's last
// n tokens (n from maxN down to minN, the longest match wins) and proposes up to k of the
// tokens that followed it. No model, no memory: text that repeats the conversation
// (quoting, code edits, lists) is where it pays.
std::vector<TokenId> proposePromptLookup(std::span<const TokenId> history, int k, int maxN = 4,
                                         int minN = 2);

// Benchmarks only (bench_speculation's worst case, where nothing is accepted): when set,
// it sees each step's proposals after the proposer made them (its cost paid) with the
// conversation they continue (the pending token last), and may change them. Set it
// while no session decodes; an empty function removes it.
using ProposalFilter =
    std::function<void(std::span<const TokenId> context, std::vector<TokenId>& proposals)>;
void setProposalFilterForBenchmarks(ProposalFilter filter);
const ProposalFilter& proposalFilterForBenchmarks();
// The worst case for that hook: makes the first token of every proposal (adding one when
// there is none) differ from `answer`, the serial ids that follow a prompt of
// `promptLength` ids, so nothing is ever accepted.
ProposalFilter rejectEveryProposal(std::vector<TokenId> answer, std::size_t promptLength,
                                   int vocab);

// The adaptive width ("--spec auto"): grows while whole proposals are accepted, shrinks
// when the first proposed token is rejected, between 1 and maxWidth. Where proposals keep
// failing (text the model does not repeat although the conversation does), it also
// stops proposing for 2, 4, ... 256 serial steps after each failed pass, so such text
// decodes within a few percent of serial decode.
// Timed (greedy --spec auto; the session measures its steps): the first step is serial
// (the yardstick), a pass also fails when it was slower per committed token than serial
// steps (a draft whose own forward costs more than the trunk pass it saves), and the
// seconds passes lost against serial steps are held to a budget: every step earns
// kLossBudget of its seconds, every pass adds what it saved or lost, and no proposal is
// made while that credit is below zero. The credit starts at zero, so where nothing is
// accepted the loss stays within kLossBudget of the answer plus one pass (a start of one
// step allowed several failed passes before the first), and is capped at one serial step,
// so a good stretch does not pay for a long bad one. A fixed width, and
// sampling (whose random draws follow the proposals, and a seed must reproduce), go by
// acceptance only.
class SpeculationWidth {
public:
    static constexpr double kLossBudget = 0.01;
    static constexpr int kMaxFailures = 8; // back-off of at most 2^8 steps

    explicit SpeculationWidth(int maxWidth = 16, int start = 4, bool timed = false);
    int width() const { return width_; }
    // False while cooling down after rejections, or (timed) over the loss budget; each
    // call is one decode step.
    bool propose();
    // A speculative step: `proposed` guesses, `accepted` kept; `secondsPerToken` is the
    // whole step (proposing and verifying) over the tokens it committed (0: not timed).
    void record(int proposed, int accepted, double secondsPerToken = 0);
    // A serial step's seconds (the yardstick for record's secondsPerToken).
    void recordSerial(double seconds);
    double serialSeconds() const { return serialSeconds_; }
    // Timed: the loss budget's credit in serial steps (see above).
    double credit() const { return credit_; }

private:
    int max_;
    int width_;
    bool timed_;
    int failures_ = 0;         // failed passes in a row
    int cooldown_ = 0;         // steps left without proposals
    double serialSeconds_ = 0; // moving average of serial steps (0: none measured yet)
    double credit_ = 0;        // timed: serial steps speculation may still lose
};

} // namespace k3
