#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <QtConcurrent>

#include <atomic>
#include <memory>
#include <type_traits>
#include <utility>

// A function run on the thread pool whose result is handed to `done` on the receiver's
// (GUI) thread: the wizard pages' blocking work (doctor, folder checks, planning, packing,
// downloads, a server's model list) never runs on the GUI thread. The newest start wins:
// a result of a run started before it is dropped. The task is a member of its receiver,
// so a receiver destroyed first gets nothing; the work keeps what it captured by value.
// Work taking a `const std::atomic<bool>*` gets a flag of its own that cancel() and the
// task's destruction set, so a download or a pack stops when its page goes away.
template <typename Result> class AsyncTask {
public:
    template <typename Done> AsyncTask(QObject* receiver, Done done) {
        QObject::connect(&m_watcher, &QFutureWatcher<Result>::finished, receiver,
                         [this, done = std::move(done)] { done(m_watcher.result()); });
    }
    ~AsyncTask() {
        cancel();
        m_watcher.disconnect();
    }
    AsyncTask(const AsyncTask&) = delete;
    AsyncTask& operator=(const AsyncTask&) = delete;

    template <typename Work> void start(Work work) {
        if constexpr (std::is_invocable_v<Work&, const std::atomic<bool>*>) {
            m_cancel = std::make_shared<std::atomic<bool>>(false);
            m_watcher.setFuture(
                QtConcurrent::run([work = std::move(work), cancel = m_cancel]() mutable {
                    return work(cancel.get());
                }));
        } else {
            m_watcher.setFuture(QtConcurrent::run(std::move(work)));
        }
    }
    // Asks the running work to stop (work that takes the flag); its result still arrives.
    void cancel() { m_cancel->store(true); }
    bool isRunning() const { return m_watcher.isRunning(); }

private:
    QFutureWatcher<Result> m_watcher;
    std::shared_ptr<std::atomic<bool>> m_cancel = std::make_shared<std::atomic<bool>>(false);
};
