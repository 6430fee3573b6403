#pragma once

#include <QByteArray>

#include <optional>

struct GenerationSettings;

// How one conversation answers, where it differs from Settings: sampling, Think and the
// longest answer. Kept beside its transcript (ConversationStore, ID.settings) so a
// reopened conversation answers as it did; an unset field takes the Settings value.
struct ConversationSettings {
    std::optional<double> temperature;
    std::optional<double> topP;
    std::optional<int> maxTokens;
    std::optional<bool> thinking;

    bool isEmpty() const { return !temperature && !topP && !maxTokens && !thinking; }
    // The Settings values with this conversation's on top (Think stays the composer's).
    void applyTo(GenerationSettings& settings) const;
    // {"temperature": 0.3, "top_p": 0.9, "max_tokens": 200, "thinking": false}, unset
    // fields left out.
    QByteArray toJson() const;
    // Unknown keys and values of the wrong type or range are ignored (a hand-edited file
    // never stops a conversation from opening).
    static ConversationSettings fromJson(const QByteArray& json);
    bool operator==(const ConversationSettings&) const = default;
};
