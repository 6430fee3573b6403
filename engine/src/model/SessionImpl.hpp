#pragma once
// Session's state, shared by Session.cpp (open, prefill, decode, chat) and
// SessionReport.cpp (the memory report).

#include "chat/ChatResume.hpp"
#include "k3/session.hpp"
#include "model/StateCache.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace k3 {

// The image rows a state holds: (position, XXH3-64 of the row's floats), positions
// increasing. Ids alone do not say which image a <|media_pad|> run was: a state is reused
// for a prompt only where these match too.
using MediaKeys = std::vector<std::pair<int, std::uint64_t>>;

struct Session::Impl {
    Model model;
    std::optional<Tokenizer> tokenizer;
    InferenceState state;
    std::vector<TokenId> fed; // ids the state holds, in order
    // The state right after the last prompt: a re-rendered history usually shares the
    // prompt but not the generated tokens' exact ids, and KDA state cannot be rewound.
    std::optional<InferenceState> promptSnapshot;
    std::vector<TokenId> promptSnapshotIds;
    std::vector<float> promptSnapshotLogits; // of its last position (a state file holds them)
    // The image rows `fed` and the snapshot hold (entries past their length are stale).
    MediaKeys fedMedia;
    MediaKeys promptSnapshotMedia;
    // `fed` holds image rows: its ids alone do not say which images they were.
    bool fedHoldsImageRows() const {
        return !fedMedia.empty() && std::size_t(fedMedia.front().first) < fed.size();
    }
    // Stopped answers' places in later prompts (chat/ChatResume.hpp), the latest last:
    // Regenerate and edits go back to conversations before the latest one.
    std::vector<chat::ResumePoint> resume;
    std::vector<float> logits;
    std::filesystem::path modelDir; // what a saved state is bound to (checkpointIdentity)
    // The logits are those of the last id in `fed`, restored from a state file: a prompt
    // equal to `fed` then needs no position recomputed. Cleared by any forward or reset.
    bool logitsRestored = false;
    int chunk = 1;          // positions per prefill chunk
    double wallSeconds = 0; // time spent feeding tokens
    TokenTiming lastTiming; // of the last fed token

    // The draft (LaunchConfig::draftDir) runs `model`'s experts, so it is declared after
    // it (destroyed first). draftSeen: the conversation draftState has caught up with
    // (read, or skipped after a back-off: see proposeWithDraft).
    std::optional<Model> draft;
    std::optional<InferenceState> draftState;
    std::vector<TokenId> draftSeen;
    std::vector<float> draftLogits;
    std::uint64_t draftFileBytes = 0;

    // Image input: the tower, loaded on the first image; kept or released after each
    // image prompt's rows as the plan says (MemoryPlan::visionResident).
    std::optional<VisionTower> vision;
    VisionMemory visionMemory; // MemoryReport::vision, but heldBytes

    // The prefix cache on disk (LaunchConfig::stateCacheDir), when one is used.
    std::optional<model::StateCache> stateCache;
    std::string stateCacheBinding; // stateBinding(), before any owner is added

    Impl(Model m) : model(std::move(m)), state(model.newState()) {
        logits.assign(std::size_t(model.config().vocabSize), 0.0f);
    }
    // Session::saveState / loadState (StateFile.cpp).
    void saveState(const std::filesystem::path& path) const;
    // The same for another state than the live one (the prompt snapshot).
    void saveState(const std::filesystem::path& path, const InferenceState& held,
                   const std::vector<TokenId>& ids, const std::vector<float>& lastLogits) const;
    void loadState(const std::filesystem::path& path);
    // What a state file is bound to (format, numerics, model, layers, vocabulary), as a
    // hash: the prefix cache's file-name part that keeps models apart.
    std::string stateBinding() const;
};

namespace model {

// A prompt's image rows: absolute positions (increasing) and their rows, hidden wide.
struct PromptRows {
    std::vector<int> positions;
    std::vector<float> rows;
};

// Expands the k-th <|media_pad|> of `prompt` to image k's rows (SessionImages.cpp):
// the expanded ids, and the tower's rows at the pad positions. Throws ModelError for a
// text-only checkpoint or a pad count that is not the image count.
std::vector<TokenId> expandImages(Session::Impl& s, std::span<const TokenId> prompt,
                                  std::span<const PreparedImage> images, PromptRows& rows);

} // namespace model

} // namespace k3
