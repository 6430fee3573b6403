#pragma once
// The state a conversation carries (the InferenceState behind its pimpl): per layer the
// KDA recurrent and ShortConv state or the MLA latent cache, and the rollback record of
// the last chunk fed with keepRollback.

#include "k3/model.hpp"
#include "model/ChunkLayers.hpp"

#include <vector>

namespace k3 {

struct InferenceState::Data {
    std::vector<model::LayerState> layers;
    int length = 0;
    // After a forward that kept them: the KDA layers' replay records and the position
    // the chunk started at (-1: nothing to roll back to).
    std::vector<model::KdaReplay> replay;
    int replayFrom = -1;
};

} // namespace k3
