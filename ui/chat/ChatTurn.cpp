#include "chat/ChatTurn.h"

namespace {

const QString& imagePlaceholder() {
    static const QString placeholder =
        QString::fromUtf8(k3::kImagePlaceholder.data(), qsizetype(k3::kImagePlaceholder.size()));
    return placeholder;
}

} // namespace

k3::ChatMessage toChatMessage(const ChatTurn& turn, bool withOtherVersions) {
    k3::ChatMessage m;
    m.role = k3::parseChatRole(turn.role.toStdString()).value_or(k3::ChatRole::User);
    m.content = turn.content.toStdString();
    if (m.role == k3::ChatRole::User && !turn.images.isEmpty()) {
        // Each placeholder is the next image's prompt (its markers come from the
        // template, never from the text), and the images come first, as `k3 --image`
        // puts them.
        m.content = imagePlaceholder().repeated(turn.images.size()).toStdString() + m.content;
        for (const QString& file : turn.images) m.images.push_back({nullptr, file.toStdString()});
    }
    m.reasoningContent = turn.reasoning.toStdString();
    m.name = turn.name.toStdString();
    m.invalid = turn.invalid.toStdString();
    m.model = turn.model.toStdString();
    m.stopped = turn.stopped;
    m.figures = turn.figures;
    m.toolCalls = turn.toolCalls;
    m.toolCallId = turn.toolCallId.toStdString();
    if (withOtherVersions) {
        for (const std::vector<ChatTurn>& branch : turn.otherVersions) {
            std::vector<k3::ChatMessage> messages;
            for (const ChatTurn& t : branch) messages.push_back(toChatMessage(t));
            m.otherVersions.push_back(std::move(messages));
        }
    }
    m.versionIndex = turn.versionIndex;
    return m;
}

ChatTurn toChatTurn(const k3::ChatMessage& m) {
    const std::string_view role = k3::chatRoleName(m.role);
    ChatTurn t{QString::fromUtf8(role.data(), qsizetype(role.size())),
               QString::fromStdString(m.content),
               QString::fromStdString(m.reasoningContent),
               QString::fromStdString(m.name),
               QString::fromStdString(m.invalid),
               QString::fromStdString(m.model),
               m.stopped,
               m.figures,
               m.toolCalls,
               QString::fromStdString(m.toolCallId)};
    if (!m.images.empty()) {
        // The placeholders are where the images go, not text the user typed.
        t.content.remove(imagePlaceholder());
        for (const k3::ChatImage& image : m.images) t.images << QString::fromStdString(image.file);
    }
    for (const std::vector<k3::ChatMessage>& branch : m.otherVersions) {
        std::vector<ChatTurn> turns;
        for (const k3::ChatMessage& message : branch) turns.push_back(toChatTurn(message));
        t.otherVersions.push_back(std::move(turns));
    }
    t.versionIndex = m.versionIndex;
    return t;
}
