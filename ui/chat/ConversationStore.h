#pragma once

#include <QDateTime>
#include <QString>
#include <QVector>

#include "worker/EngineWorker.h"

// Conversations on disk: one JSONL transcript per conversation ({role, content,
// reasoning_content} per line, the public engine's format), written atomically so a
// crash leaves the last complete state. Small enough to run on the GUI thread.
class ConversationStore {
public:
    struct Summary {
        QString id;    // file name without .jsonl
        QString title; // the first user message, shortened
        QDateTime modified;
    };

    explicit ConversationStore(QString directory);

    const QString& directory() const { return m_directory; }
    // Newest first.
    QVector<Summary> list() const;
    // Throws std::runtime_error naming the file and line when a transcript is invalid.
    QVector<ChatTurn> load(const QString& id) const;
    // Writes the whole conversation; returns the id (a new one when `id` is empty).
    QString save(const QString& id, const QVector<ChatTurn>& turns);
    bool remove(const QString& id);

    static QString titleFor(const QVector<ChatTurn>& turns);

private:
    QString pathFor(const QString& id) const;
    QString m_directory;
};
