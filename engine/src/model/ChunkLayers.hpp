#pragma once
// The layer computations over a chunk of T consecutive positions. Every weight product
// is one matmat over the chunk (each column has exactly the bits of a one-position
// matvec); the recurrent parts (ShortConv, the KDA delta rule, MLA's growing cache)
// advance position by position inside the chunk, so position t sees exactly the state
// that t single-position calls would have left. Activations are [T][width], row-major.

#include "k3/config.hpp"
#include "k3/expert_cache.hpp"
#include "model/ModelWeights.hpp"

#include <vector>

namespace k3::model {

// What one layer carries from position to position.
struct LayerState {
    // KDA: recurrent state [heads][dk][dv] and ShortConv history [channels][kernel-1].
    std::vector<float> S, qConv, kConv, vConv;
    // MLA: the whole per-position cache is the normed latent plus the unrotated rope.
    std::vector<float> latent, rope;
};

// What a KDA layer needs to return to any position inside the last chunk without its
// weights: the state before the chunk and, per position, the delta rule's inputs and
// the raw ShortConv inputs. Replaying them is the same arithmetic in the same order, so
// the state after the replay has exactly the bits of a forward that stopped there.
struct KdaReplay {
    std::vector<float> S, qConv, kConv, vConv; // before the chunk
    std::vector<float> raw;                    // [T][3][P]: q, k, v before the conv
    std::vector<float> k, v, alpha;            // [T][P], as the delta rule took them
    std::vector<float> beta;                   // [T][heads], after the sigmoid
    int positions = 0;
};

// out[T][hidden] = KDA attention of xn[T][hidden]; updates the state through all T.
// `replay` (may be null) records what rollbackKda needs.
void kdaChunk(float* out, const float* xn, int T, const KdaWeights& w, LayerState& s,
              const ModelConfig& c, float eps, KdaReplay* replay = nullptr);

// Returns the layer's KDA state to what it was after `keep` positions of the recorded
// chunk (0 <= keep <= replay.positions).
void rollbackKda(LayerState& s, const KdaReplay& replay, int keep, const ModelConfig& c);

// out[T][hidden] = MLA attention; position t of the chunk is absolute position
// `first + t` and attends over the cache up to and including itself.
void mlaChunk(float* out, const float* xn, int T, const MlaWeights& w, LayerState& s,
              const ModelConfig& c, float eps, int first);

// out[T][hidden] = down(situGlu(gate x, up x)): the dense MLP and the shared experts.
void gluChunk(float* out, const float* x, int T, const Matrix& gate, const Matrix& up,
              const Matrix& down, const ModelConfig& c);

// Where routed experts come from: the layer's own binding, a resident per-layer set,
// or the expert cache.
struct ExpertSource {
    const std::vector<ExpertWeightsStored>* resident = nullptr;
    ExpertCache* cache = nullptr;
    const CheckpointExpertStore* store = nullptr;
    int layer = 0;
    bool skipRouted = false; // a draft without in-memory experts: the shared experts only
};

// The latent MoE over a chunk, in three steps so that a caller can tile its positions:
// moeRoute per tile (routing and the routed input), moeExperts once over the chunk,
// moeCombine per tile (each position's sum, the up projection and the shared experts).
// The chunk's routed experts are the UNION over its positions: each unique expert is
// fetched once (disk-offset order, in waves of at most the cache's slot count) and run
// once on every position routed to it, over at most `tile` positions at a time; each
// position then adds its experts' outputs in its own selection order, as the
// one-position layer does. A failed read drops the expert for every position that chose it.
//
// What must outlive a tile, per position: its routing, its routed input z and its
// experts' outputs. The expert that runs last for a position writes its output over
// that position's z (read for the last time by that expert), so a position holds topK
// latent rows in all.
struct MoeChunk {
    struct Use {
        int expert, position, slot;
    };
    int positions = 0;
    std::vector<int> idx;      // [T][topK] each position's experts, in selection order
    std::vector<float> wt;     // [T][topK] their weights
    std::vector<float> z;      // [T][latent] routed input, then the last expert's output
    std::vector<float> eo;     // [T][topK - 1][latent] the other experts' outputs
    std::vector<int> last;     // [T] the slot whose expert runs last
    std::vector<char> present; // [T][topK] 0: the expert was dropped
    std::vector<Use> uses;     // [T * topK] sorted by expert
    // A router score was NaN or infinite: the experts it chose are not the model's (the
    // run is invalid, as a non-finite logit makes it).
    bool nonFiniteScores = false;
};

// Sizes `m` for a chunk of T positions (capacity is kept from layer to layer).
void moeBegin(MoeChunk& m, int T, const ModelConfig& c);

// Routes positions [first, first + n) of the chunk; xn[n][hidden] is their normed input.
void moeRoute(MoeChunk& m, const float* xn, int first, int n, const MoeWeightsStored& w,
              const ModelConfig& c);

// Runs the union of the chunk's experts, each over at most `tile` positions at a time.
void moeExperts(MoeChunk& m, const MoeWeightsStored& w, const ModelConfig& c,
                const ExpertSource& src, int tile);

// out[n][hidden] for positions [first, first + n): the routed sum (after moeExperts) and
// the shared experts of xn[n][hidden]. Returns the dropped (position, expert) pairs.
int moeCombine(float* out, const float* xn, int first, int n, const MoeChunk& m,
               const MoeWeightsStored& w, const ModelConfig& c, float eps, const ExpertSource& src);

} // namespace k3::model
