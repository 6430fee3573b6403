#pragma once

#include <QString>
#include <QStringList>

#include <k3/chat.hpp>

#include <vector>

// One chat turn as the UI sends it to the engine and the store saves it: every field a
// transcript holds, so a conversation read and written back is the same file.
struct ChatTurn {
    QString role; // "system", "user", "assistant", "tool"
    QString content;
    QString reasoning;
    QString name;                // the speaker's name; a tool message's tool (required for "tool")
    QString invalid;             // assistant: why the answer is not the model's; empty when valid
    QString model{};             // assistant: the model that answered; empty when not recorded
    bool stopped{};              // assistant: cut before the model ended it (Stop, quit, error)
    k3::AnswerFigures figures{}; // assistant: tokens, speed, first-token time; 0: none
    std::vector<k3::ChatToolCall> toolCalls{}; // assistant: the functions it called
    QString toolCallId{};                      // tool: the call this result answers
    // The other versions of this message (regenerated, edited), each with what followed
    // it; this one is version versionIndex (from 0). Never sent to the engine.
    std::vector<std::vector<ChatTurn>> otherVersions{};
    int versionIndex{};
    // user: the images of the message (absolute paths of the copies the conversation
    // keeps, ConversationStore::storeImage), shown before the text and read before it.
    QStringList images{};
};

// The one conversion between the UI's turn and the engine's message (the engine's
// transcript writer and reader, the session and a server all take k3::ChatMessage):
// every field, the role as k3::parseChatRole reads it (an unknown role is the user's), a
// user message's images as the template's placeholders before its text plus their files
// as the turn names them, and the other versions with their messages. Where the files
// live (absolute, or relative to a transcript's folder) is the caller's business.
k3::ChatMessage toChatMessage(const ChatTurn& turn, bool withOtherVersions = true);
// The inverse: the images' placeholders leave the text, the files stay as named.
ChatTurn toChatTurn(const k3::ChatMessage& message);
