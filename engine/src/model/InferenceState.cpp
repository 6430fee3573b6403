// InferenceState: reset, snapshots and the bytes it holds.

#include "model/InferenceStateData.hpp"

#include <algorithm>

namespace k3 {

InferenceState::InferenceState(std::unique_ptr<Data> data) : d_(std::move(data)) {}
InferenceState::~InferenceState() = default;
InferenceState::InferenceState(InferenceState&&) noexcept = default;
InferenceState& InferenceState::operator=(InferenceState&&) noexcept = default;
int InferenceState::length() const {
    return d_->length;
}
void InferenceState::reset() {
    // Zeros, not a kept copy of the fresh state: one copy less to hold.
    for (model::LayerState& l : d_->layers) {
        std::fill(l.S.begin(), l.S.end(), 0.0f);
        std::fill(l.qConv.begin(), l.qConv.end(), 0.0f);
        std::fill(l.kConv.begin(), l.kConv.end(), 0.0f);
        std::fill(l.vConv.begin(), l.vConv.end(), 0.0f);
        l.latent.clear();
        l.rope.clear();
    }
    d_->length = 0;
    d_->replay.clear();
    d_->replayFrom = -1;
}
InferenceState InferenceState::clone() const {
    auto d = std::make_unique<Data>(); // the rollback record stays with the live state
    d->layers = d_->layers;
    d->length = d_->length;
    // The MLA cache keeps its room for the whole context (the copy would hold only its
    // positions, and then grow by doubling past what the plan counts).
    for (std::size_t L = 0; L < d->layers.size(); ++L) {
        d->layers[L].latent.reserve(d_->layers[L].latent.capacity());
        d->layers[L].rope.reserve(d_->layers[L].rope.capacity());
    }
    return InferenceState(std::move(d));
}

std::uint64_t InferenceState::cacheBytes() const {
    std::uint64_t n = 0;
    for (const auto& l : d_->layers)
        n += (l.S.size() + l.qConv.size() + l.kConv.size() + l.vConv.size() + l.latent.size() +
              l.rope.size()) *
             sizeof(float);
    return n;
}

std::uint64_t InferenceState::heldBytes() const {
    const auto cap = [](const std::vector<float>& v) { return std::uint64_t(v.capacity()); };
    std::uint64_t n = 0;
    for (const auto& l : d_->layers)
        n += cap(l.S) + cap(l.qConv) + cap(l.kConv) + cap(l.vConv) + cap(l.latent) + cap(l.rope);
    for (const auto& r : d_->replay)
        n += cap(r.S) + cap(r.qConv) + cap(r.kConv) + cap(r.vConv) + cap(r.raw) + cap(r.k) +
             cap(r.v) + cap(r.alpha) + cap(r.beta);
    return n * sizeof(float);
}

} // namespace k3
