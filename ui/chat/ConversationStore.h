#pragma once

#include <QDateTime>
#include <QString>
#include <QVector>

#include <memory>
#include <vector>

#include "worker/EngineWorker.h"

namespace k3 {
struct ChatMessage;
class OutputLock;
} // namespace k3

// Conversations on disk: one JSONL transcript per conversation ({role, content,
// reasoning_content} per line, the public engine's format, with a tool's name and an
// invalid answer's reason kept), written atomically so a crash leaves the last complete
// state. Small enough to run on the GUI thread. The conversation being written is
// claimed (an advisory lock, k3::OutputLock): a second k3chat, or `k3 --chat --history`
// on the same file, is refused with a message instead of silently overwriting it.
class ConversationStore {
public:
    struct Summary {
        QString id;    // file name without .jsonl
        QString title; // the first user message, shortened
        QDateTime modified;
    };

    explicit ConversationStore(QString directory);
    ~ConversationStore();
    ConversationStore(const ConversationStore&) = delete;
    ConversationStore& operator=(const ConversationStore&) = delete;

    const QString& directory() const { return m_directory; }
    // Newest first.
    QVector<Summary> list() const;
    // Throws std::runtime_error naming the file and line when a transcript is invalid.
    QVector<ChatTurn> load(const QString& id) const;
    // Writes the whole conversation; returns the id (a new one when `id` is empty).
    // Claims it first (claim()): throws std::runtime_error naming the file when another
    // session holds it, and then writes nothing.
    QString save(const QString& id, const QVector<ChatTurn>& turns);
    bool remove(const QString& id);

    // Locks conversation `id` for this store until another one is claimed, release() or
    // the store goes away. Throws std::runtime_error naming the file and the other
    // session's pid when another session holds it; the previous claim is then kept.
    void claim(const QString& id);
    void release();
    const QString& claimedId() const { return m_claimedId; }

    static QString titleFor(const QVector<ChatTurn>& turns);
    // Every field of every message (role, content, reasoning, name, invalid, model,
    // stopped, figures).
    static QVector<ChatTurn> toTurns(const std::vector<k3::ChatMessage>& messages);

    QString pathFor(const QString& id) const;

private:
    QString m_directory;
    QString m_claimedId;
    std::unique_ptr<k3::OutputLock> m_lock;
};
