#pragma once

#include <QMutex>
#include <QObject>
#include <QPointer>
#include <QString>
#include <QThread>
#include <QVector>
#include <QWaitCondition>

#include <deque>
#include <functional>

#include "chat/ConversationSettings.h"
#include "chat/ConversationStore.h"
#include "worker/EngineWorker.h"

// Writes the open conversation's files on its own thread, so the GUI thread never waits
// for a disk (a transcript is written with fsync and the folder's fsync: tens of ms on a
// laptop's disk, seconds on a busy one) while an answer streams. Jobs run in the order
// they were queued; a save of a conversation queued right behind another save of it
// replaces that one (while an answer streams only the newest text is written). The
// store's claim on the conversation is taken by the first save of a new one, here.
//
// The GUI thread calls flush() before it touches a conversation's files itself (open,
// rename, delete, duplicate, list): what was queued is then on disk, and nothing queued
// earlier can land afterwards (a deleted conversation is never written back). The
// destructor writes everything still queued (quitting loses nothing).
class TranscriptWriter : public QObject {
    Q_OBJECT
public:
    // `store` must outlive the writer.
    explicit TranscriptWriter(ConversationStore* store, QObject* parent = nullptr);
    ~TranscriptWriter() override;

    // ConversationStore::save(id, turns) on the writer's thread (`id` not empty: a new
    // conversation's comes from ConversationStore::newId()).
    void saveTranscript(const QString& id, const QVector<ChatTurn>& turns);
    // ConversationStore::saveSettings(id, settings) on the writer's thread.
    void saveSettings(const QString& id, const ConversationSettings& settings);
    // ConversationStore::release() after what is queued (a new chat: the next save claims).
    void release();
    // Calls `done` on `context`'s thread (queued; not when `context` is gone by then) once
    // everything queued before it is written or has failed: an answer is announced as
    // finished once it is on disk, without the GUI thread waiting for it.
    void whenWritten(QObject* context, std::function<void()> done);
    // Returns once everything queued is written (blocks: only before the GUI thread
    // itself reads, moves or claims a conversation's files, or at quit).
    void flush();
    // Nothing queued and nothing being written.
    bool isIdle() const;

signals:
    // Emitted on the writer's thread (connect queued or auto): a transcript is on disk;
    // `summary` is its entry for the list (title and date), so the GUI reads nothing.
    void written(const ConversationStore::Summary& summary);
    // A job for `id` failed; `message` names the file (ConversationStore's exception).
    void failed(const QString& id, const QString& message);

private:
    struct Job {
        enum Kind { Transcript, Settings, Release, Notify } kind;
        QString id;
        QVector<ChatTurn> turns;
        ConversationSettings settings;
        QPointer<QObject> context; // Notify: whom `done` is for (read on the GUI thread)
        std::function<void()> done;
    };
    void enqueue(Job job);
    void run(); // the thread's loop

    ConversationStore* m_store;
    QThread* m_thread;
    mutable QMutex m_mutex;
    QWaitCondition m_wake;    // a job was queued, or the writer stops
    QWaitCondition m_drained; // the queue ran empty
    std::deque<Job> m_jobs;
    bool m_busy = false; // a job taken from the queue is being written
    bool m_stopping = false;
};
