#pragma once
// The prefix cache on disk: conversation states (docs/state-format.md) keyed by the exact
// ids they hold, so a prompt that starts with ids read before (a new conversation's
// preamble, a conversation the user comes back to, after a restart too) reads only the
// rest. One folder, shared by the app, the CLI and the server; a byte budget with the
// least recently used files removed first.
//
// A file's name says what it holds: "<binding>-<kind>-<positions>-<ids hash>.k3state",
// the binding being a hash of what a state is bound to (model, layers, numerics), so a
// lookup opens only files of this model whose ids, by their hash, start the prompt. The
// loaded ids are then compared with the prompt itself: a hash never decides alone.

#include "k3/tokenizer.hpp"

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace k3::model {

class StateCache {
public:
    // Preamble: the part of a prompt before the first message (kept for every new
    // conversation); Conversation: where a conversation stood when an answer ended
    // (superseded by the next one's).
    enum class Kind { Preamble, Conversation };

    StateCache(std::filesystem::path directory, std::uint64_t budgetBytes, std::string binding);

    const std::filesystem::path& directory() const { return directory_; }
    std::uint64_t budgetBytes() const { return budgetBytes_; }

    // This binding's files whose ids are a prefix of `ids` with more than `longerThan`
    // positions, the longest first.
    std::vector<std::filesystem::path> prefixesOf(std::span<const TokenId> ids,
                                                  std::size_t longerThan) const;
    // The positions of this binding's longest file whose ids (by their hash) start `ids`,
    // none opened; 0 when there is none.
    std::size_t longestPrefixOf(std::span<const TokenId> ids) const;
    bool holds(std::span<const TokenId> ids) const;
    std::filesystem::path pathFor(std::span<const TokenId> ids, Kind kind) const;
    // Marks a file used now (the least recently used go first).
    void touch(const std::filesystem::path& file) const;
    // After `saved` (holding `ids`) was written: this binding's conversation files that
    // hold a strict prefix of `ids` go (the new file serves every prompt they served),
    // then the least recently used files until the folder fits the budget.
    void afterSave(const std::filesystem::path& saved, std::span<const TokenId> ids) const;
    void remove(const std::filesystem::path& file) const;
    // Removes this binding's conversation files whose ids are a prefix of `ids`; returns
    // how many.
    int removeConversationPrefixesOf(std::span<const TokenId> ids) const;
    // This binding's conversation files whose ids are a prefix of `ids`, with their sizes.
    std::vector<std::pair<std::filesystem::path, std::uint64_t>>
    conversationPrefixesOf(std::span<const TokenId> ids) const;

private:
    std::filesystem::path directory_;
    std::uint64_t budgetBytes_;
    std::string binding_;
};

// The binding of states saved for `owner` (empty: `binding` itself), so one owner's
// files are never candidates for another's prompts.
std::string ownedBinding(const std::string& binding, const std::string& owner);

// The hex XXH3-128 of `ids`' bytes: a state file's name part.
std::string hashOfIds(std::span<const TokenId> ids);

} // namespace k3::model
