#include "k3/session.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace k3 {
namespace {

// splitmix64: a fixed generator, so a seed gives the same tokens on every platform
// (std:: distributions are not specified bit for bit).
std::uint64_t nextRandom(std::uint64_t& state) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

} // namespace

Sampler::Sampler(const SamplingOptions& options) : options_(options), state_(options.seed) {}

TokenId Sampler::sample(std::span<const float> logits) {
    if (options_.temperature <= 0.0f) return TokenId(argmax(logits));
    std::vector<int> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    // Highest first; equal logits keep the lower id first so the order is total.
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return logits[std::size_t(a)] > logits[std::size_t(b)]; });
    const double top = logits[std::size_t(order.front())];
    std::vector<double> p(order.size());
    double sum = 0;
    for (std::size_t i = 0; i < order.size(); ++i) {
        p[i] = std::exp((double(logits[std::size_t(order[i])]) - top) / options_.temperature);
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
    double kept = 0;
    for (std::size_t i = 0; i < keep; ++i) kept += p[i];
    const double u = double(nextRandom(state_) >> 11) * 0x1.0p-53 * kept;
    double acc = 0;
    for (std::size_t i = 0; i < keep; ++i) {
        acc += p[i];
        if (u < acc) return TokenId(order[i]);
    }
    return TokenId(order[keep - 1]);
}

} // namespace k3
