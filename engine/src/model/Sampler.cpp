#include "k3/session.hpp"
#include "kernels/MathFunctions.hpp"
#include "model/LogitAdjuster.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace k3 {
namespace {

// PCG32 (O'Neill, XSH-RR): a fixed generator, so a seed gives the same tokens on every
// platform (std:: distributions are not specified bit for bit).
constexpr std::uint64_t kPcgMultiplier = 6364136223846793005ull;
// Stream 54, as in the PCG reference demo, so seed 42 reproduces its published outputs.
constexpr std::uint64_t kPcgIncrement = (54ull << 1u) | 1u;

std::uint32_t pcg32(std::uint64_t& state) {
    const std::uint64_t old = state;
    state = old * kPcgMultiplier + kPcgIncrement;
    const auto xorshifted = static_cast<std::uint32_t>(((old >> 18u) ^ old) >> 27u);
    const auto rot = static_cast<std::uint32_t>(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
}

// A uniform double in [0, 1) from two draws (53 bits).
double uniform01(std::uint64_t& state) {
    const std::uint64_t hi = pcg32(state) >> 5; // 27 bits
    const std::uint64_t lo = pcg32(state) >> 6; // 26 bits
    return double((hi << 26) | lo) * 0x1.0p-53;
}

} // namespace

Sampler::Sampler(const SamplingOptions& options) : options_(options), state_(0) {
    // The reference seeding: advance once, add the seed, advance again.
    pcg32(state_);
    state_ += options.seed;
    pcg32(state_);
}

std::uint32_t Sampler::nextRandom32() {
    return pcg32(state_);
}

TokenId Sampler::sample(std::span<const float> logits) {
    if (options_.temperature <= 0.0f) return TokenId(argmax(logits));
    const Kept k = kept(logits);
    const double u = uniform01(state_) * k.mass;
    double acc = 0;
    for (std::size_t i = 0; i < k.ids.size(); ++i) {
        acc += k.weights[i];
        if (u < acc) return TokenId(k.ids[i]);
    }
    return TokenId(k.ids.back());
}

bool Sampler::acceptProposal(std::span<const float> logits, TokenId proposal, TokenId& correction) {
    if (options_.temperature <= 0.0f) { // greedy: the proposal stands iff it is the argmax
        correction = TokenId(argmax(logits));
        return correction == proposal;
    }
    const Kept k = kept(logits);
    double wy = 0; // the proposal's weight; 0 when top-p left it out
    for (std::size_t i = 0; i < k.ids.size(); ++i)
        if (k.ids[i] == proposal) wy = k.weights[i];
    // q is one-hot at the proposal, so min(1, p(y) / q(y)) = p(y).
    if (uniform01(state_) * k.mass < wy) return true;
    // Rejected: the normalised max(0, p - q), which is p without the proposal.
    const double u = uniform01(state_) * (k.mass - wy);
    double acc = 0;
    TokenId last = -1;
    for (std::size_t i = 0; i < k.ids.size(); ++i) {
        if (k.ids[i] == proposal) continue;
        last = TokenId(k.ids[i]);
        acc += k.weights[i];
        if (u < acc) {
            correction = last;
            return false;
        }
    }
    correction = last >= 0 ? last : proposal; // a one-token distribution cannot reject it
    return last < 0;
}

Sampler::Kept Sampler::kept(std::span<const float> logits) const {
    std::vector<int> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    // Highest first; equal logits keep the lower id first so the order is total.
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return logits[std::size_t(a)] > logits[std::size_t(b)]; });
    const double top = logits[std::size_t(order.front())];
    std::vector<double> p(order.size());
    double sum = 0;
    for (std::size_t i = 0; i < order.size(); ++i) {
        p[i] = math::expD((double(logits[std::size_t(order[i])]) - top) / options_.temperature);
        sum += p[i];
    }
    std::size_t keep = order.size();
    double mass = 0;
    for (std::size_t i = 0; i < order.size(); ++i) {
        mass += p[i] / sum;
        if (mass >= options_.topP) {
            keep = i + 1;
            break;
        }
    }
    Kept k;
    k.ids.assign(order.begin(), order.begin() + std::ptrdiff_t(keep));
    k.weights.assign(p.begin(), p.begin() + std::ptrdiff_t(keep));
    for (std::size_t i = 0; i < keep; ++i) k.mass += p[i];
    return k;
}

} // namespace k3

namespace k3 {

TokenLogprobs tokenLogprobs(std::span<const float> logits, TokenId chosen, int top) {
    double maxLogit = -std::numeric_limits<double>::infinity();
    for (const float l : logits) maxLogit = std::max(maxLogit, double(l));
    double sum = 0;
    for (const float l : logits) sum += math::expD(double(l) - maxLogit);
    const double logSum = maxLogit + std::log(sum);
    TokenLogprobs out;
    out.logprob = float(double(logits[std::size_t(chosen)]) - logSum);
    const std::size_t k = std::min(logits.size(), std::size_t(std::max(0, top)));
    std::vector<int> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(k), order.end(),
                      [&](int a, int b) {
                          const float la = logits[std::size_t(a)], lb = logits[std::size_t(b)];
                          return la > lb || (la == lb && a < b);
                      });
    for (std::size_t i = 0; i < k; ++i)
        out.top.emplace_back(TokenId(order[i]),
                             float(double(logits[std::size_t(order[i])]) - logSum));
    return out;
}

namespace model {

LogitAdjuster::LogitAdjuster(const GenerateOptions& options)
    : options_(options), active_(!options.logitBias.empty() || options.presencePenalty != 0 ||
                                 options.frequencyPenalty != 0) {}

std::span<const float> LogitAdjuster::apply(std::span<const float> logits) {
    if (!active_) return logits;
    adjusted_.assign(logits.begin(), logits.end());
    for (const auto& [id, bias] : options_.logitBias)
        if (std::size_t(id) < adjusted_.size()) adjusted_[std::size_t(id)] += bias;
    for (const auto& [id, c] : counts_)
        if (c > 0 && std::size_t(id) < adjusted_.size())
            adjusted_[std::size_t(id)] -=
                float(c) * options_.frequencyPenalty + options_.presencePenalty;
    return adjusted_;
}

void LogitAdjuster::count(TokenId id, int delta) {
    if (active_) counts_[id] += delta;
}

} // namespace model
} // namespace k3
