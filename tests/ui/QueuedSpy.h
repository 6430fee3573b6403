#pragma once
// A QSignalSpy for signals emitted on another thread (the engine worker's): the calls
// are recorded on the test's thread through a queued connection. A QSignalSpy connects
// directly, so it would append on the engine thread while the test reads here (a data
// race ThreadSanitizer reports).

#include <QCoreApplication>
#include <QList>
#include <QMetaObject>
#include <QObject>
#include <QTest>
#include <QVariant>

#include <type_traits>

template <typename... Args>
class QueuedSpy : public QObject {
public:
    template <typename Sender>
    QueuedSpy(const Sender* sender, void (Sender::*signal)(Args...)) {
        connect(
            sender, signal, this,
            [this](Args... args) {
                m_calls.append(QVariantList{QVariant::fromValue(std::decay_t<Args>(args))...});
            },
            Qt::QueuedConnection);
    }

    int count() const { return int(m_calls.size()); }
    int size() const { return count(); }
    bool isEmpty() const { return m_calls.isEmpty(); }
    const QVariantList& at(int i) const { return m_calls.at(i); }
    const QVariantList& first() const { return m_calls.first(); }
    const QVariantList& last() const { return m_calls.last(); }
    QVariantList takeFirst() { return m_calls.takeFirst(); }
    // Like QSignalSpy::wait: true when a new call arrives within ms.
    bool wait(int ms = 5000) {
        const int before = count();
        return QTest::qWaitFor([&] { return count() > before; }, ms);
    }

private:
    QList<QVariantList> m_calls;
};

// Returns once `worker`'s thread has run everything queued to it before this call (a
// blocking call queued behind it), and what that sent back to this thread has been
// delivered. "Nothing was queued" is then a check, not a wait that hopes to be long enough.
inline void flushWorkerThread(QObject* worker) {
    QMetaObject::invokeMethod(worker, [] {}, Qt::BlockingQueuedConnection);
    QCoreApplication::sendPostedEvents();
}
