// A prompt's images: the official HF path's expansion of each <|media_pad|> into the
// image's projector rows (vision.md section 5), done before the prefill so the rows
// stream through the same chunks as the text around them.
#include "model/SessionImpl.hpp"

namespace k3::model {

namespace {

// config.json's media_placeholder_token_id, else the tokenizer's <|media_pad|>.
TokenId mediaPadId(const Session::Impl& s, const VisionConfig& config) {
    if (config.mediaPadId >= 0) return config.mediaPadId;
    if (s.tokenizer)
        if (const auto id = s.tokenizer->tokenId(kMediaPadToken)) return *id;
    throw ModelError(s.modelDir.string() +
                     ": the media pad id is unknown (no media_placeholder_token_id in "
                     "config.json and no <|media_pad|> in the tokenizer)");
}

} // namespace

std::vector<TokenId> expandImages(Session::Impl& s, std::span<const TokenId> prompt,
                                  std::span<const PreparedImage> images, PromptRows& rows) {
    if (!s.vision) {
        s.vision = VisionTower::loadFromDirectory(s.modelDir);
        if (!s.vision)
            throw ImageError(s.modelDir.string() +
                             " is a text-only checkpoint (config.json has no vision_config): "
                             "it cannot read images");
        ++s.visionMemory.loads;
        s.visionMemory.peakBytes = std::max(s.visionMemory.peakBytes, s.vision->weightBytes());
    }
    const VisionConfig& config = s.vision->config();
    if (config.textHidden != s.model.config().hiddenSize)
        throw ModelError("the vision projector writes rows of " +
                         std::to_string(config.textHidden) +
                         " (text_hidden_size); the language model's hidden size is " +
                         std::to_string(s.model.config().hiddenSize));
    const TokenId pad = mediaPadId(s, config);
    const auto pads = std::size_t(std::count(prompt.begin(), prompt.end(), pad));
    if (pads != images.size())
        throw ModelError("the prompt holds " + std::to_string(pads) + " <|media_pad|> (id " +
                         std::to_string(pad) + ") for " + std::to_string(images.size()) +
                         " image(s): give one imagePrompt() per image");
    std::vector<TokenId> expanded;
    rows.positions.clear();
    std::size_t image = 0;
    for (const TokenId id : prompt) {
        if (id != pad) {
            expanded.push_back(id);
            continue;
        }
        for (int k = 0; k < images[image].plan.tokens(); ++k) {
            rows.positions.push_back(int(expanded.size()));
            expanded.push_back(pad);
        }
        ++image;
    }
    // Transient (the plan cannot hold the tower next to the full chunk): the prefill
    // gets its memory, even when the images failed; the next image prompt reads it again.
    const auto release = [&s] {
        if (s.model.memoryPlan().visionResident) return;
        s.vision.reset();
        ++s.visionMemory.releases;
    };
    try {
        rows.rows = s.vision->encode(images);
    } catch (...) {
        release();
        throw;
    }
    release();
    return expanded;
}

} // namespace k3::model
