#pragma once
// The draft trunk for speculative decoding (`k3 pack --draft`): a quantised copy of the
// dense trunk that proposes tokens cheaply; the exact model decides, so a draft changes
// the speed, never the tokens. Format (docs/architecture.md, "Draft trunk"):
//   DRAFT_DIR/config.json       the model's config.json, byte for byte
//   DRAFT_DIR/model.safetensors every non-routed-expert tensor of the checkpoint; each
//                               2-D projection NAME (not the embeddings, not a router)
//                               as MXFP4: NAME_packed (U8 [rows, ceil(cols/2)]) and
//                               NAME_scale (U8 [rows, ceil(cols/32)], E8M0), quantised by
//                               k3::quantizeMxfp4Row; the rest as stored
//   DRAFT_DIR/draft.json        {"format": "k3-draft", "version": 1, "quantization":
//                               "mxfp4", "source": the checkpoint's identity (as trunk.json)}
// The routed experts are not copied: the draft runs the ones the exact model holds in
// memory (Model::loadDraft).

#include "k3/pack.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>

namespace k3 {

inline constexpr int kDraftFormatVersion = 1;

struct DraftPackResult {
    std::uint64_t fileBytes = 0;   // model.safetensors
    std::uint64_t sourceBytes = 0; // the checkpoint's bytes of the same tensors
    int tensors = 0;
    int quantised = 0; // projections stored as MXFP4
    double seconds = 0;
};

// True for a tensor the draft stores as MXFP4.
bool isDraftQuantised(std::string_view name, const TensorInfo& info);

// Writes the draft of modelDir into draftDir (created if needed; model.safetensors is
// written as .partial and renamed, draft.json last). Throws PackError naming the file.
DraftPackResult packDraft(const std::filesystem::path& modelDir,
                          const std::filesystem::path& draftDir, const PackObserver& observer = {},
                          const std::atomic<bool>* cancel = nullptr);

// Refuses (StaleTrunkError naming the difference, PackError for an unreadable or foreign
// draft.json) a draft packed from another checkpoint or in another format.
void checkDraft(const std::filesystem::path& draftDir, const std::filesystem::path& modelDir);

} // namespace k3
