#include "chat/TranscriptWriter.h"

#include <QMetaObject>
#include <QMutexLocker>

#include <stdexcept>

TranscriptWriter::TranscriptWriter(ConversationStore* store, QObject* parent)
    : QObject(parent), m_store(store), m_thread(QThread::create([this] { run(); })) {
    m_thread->setObjectName(QStringLiteral("k3chat transcript writer"));
    m_thread->start();
}

TranscriptWriter::~TranscriptWriter() {
    {
        QMutexLocker lock(&m_mutex);
        m_stopping = true; // the loop writes what is queued first
        m_wake.wakeAll();
    }
    m_thread->wait();
    delete m_thread;
}

void TranscriptWriter::saveTranscript(const QString& id, const QVector<ChatTurn>& turns) {
    enqueue({Job::Transcript, id, turns, {}, {}, {}});
}

void TranscriptWriter::saveSettings(const QString& id, const ConversationSettings& settings) {
    enqueue({Job::Settings, id, {}, settings, {}, {}});
}

void TranscriptWriter::release() {
    enqueue({Job::Release, {}, {}, {}, {}, {}});
}

void TranscriptWriter::whenWritten(QObject* context, std::function<void()> done) {
    enqueue({Job::Notify, {}, {}, {}, context, std::move(done)});
}

void TranscriptWriter::enqueue(Job job) {
    QMutexLocker lock(&m_mutex);
    // Only the job right behind: a save never overtakes a release or a settings write
    // queued after an older save of the same conversation.
    if (job.kind == Job::Transcript && !m_jobs.empty() && m_jobs.back().kind == Job::Transcript &&
        m_jobs.back().id == job.id) {
        m_jobs.back().turns = std::move(job.turns);
        return;
    }
    m_jobs.push_back(std::move(job));
    m_wake.wakeOne();
}

void TranscriptWriter::flush() {
    QMutexLocker lock(&m_mutex);
    while (!m_jobs.empty() || m_busy) m_drained.wait(&m_mutex);
}

bool TranscriptWriter::isIdle() const {
    QMutexLocker lock(&m_mutex);
    return m_jobs.empty() && !m_busy;
}

void TranscriptWriter::run() {
    QMutexLocker lock(&m_mutex);
    for (;;) {
        while (m_jobs.empty() && !m_stopping) m_wake.wait(&m_mutex);
        if (m_jobs.empty()) return; // stopping, everything written
        Job job = std::move(m_jobs.front());
        m_jobs.pop_front();
        m_busy = true;
        lock.unlock();
        try {
            switch (job.kind) {
            case Job::Transcript:
                m_store->save(job.id, job.turns);
                emit written(m_store->summary(job.id, job.turns));
                break;
            case Job::Settings:
                m_store->saveSettings(job.id, job.settings);
                break;
            case Job::Release:
                m_store->release();
                break;
            case Job::Notify:
                // Posted to the writer's own object (the GUI thread's), behind the signals
                // emitted before it; the context is looked at there, where it lives.
                QMetaObject::invokeMethod(
                    this,
                    [context = job.context, done = std::move(job.done)] {
                        if (context) done();
                    },
                    Qt::QueuedConnection);
                break;
            }
        } catch (const std::exception& e) {
            emit failed(job.id, QString::fromUtf8(e.what()));
        }
        lock.relock();
        m_busy = false;
        if (m_jobs.empty()) m_drained.wakeAll();
    }
}
