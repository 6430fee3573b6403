#pragma once

#include <QObject>
#include <QString>

#include "wizard/AsyncTask.h"

#include <optional>

#include <k3/hub.hpp>

// How much a hub checkpoint needs on disk, known before its download starts: the sum of
// the hub's file listing when the hub answers, else the official Kimi K3 checkpoint's
// published size when the default repository and revision are asked for, else unknown.
// The listing is fetched off the GUI thread; only the newest request's answer is kept.
class CheckpointSize : public QObject {
    Q_OBJECT
public:
    // The pinned revision's files as public engines list them (1.56 TB).
    static constexpr quint64 kOfficialBytes = 1'560'936'091'448ull;

    explicit CheckpointSize(QObject* parent = nullptr);

    // Asks the hub that `options` name (endpoint, repo, revision, token); the bytes that
    // options.destination already holds (finished files, .partial) are not needed again.
    void request(const k3::DownloadOptions& options);
    bool isPending() const { return m_pending; }
    std::optional<quint64> totalBytes() const { return m_answer.total; }
    std::optional<quint64> neededBytes() const { return m_answer.needed; }
    // False: the size is the official checkpoint's, the hub did not answer.
    bool fromListing() const { return m_answer.fromListing; }
    // 401 or 403: the hub answered, refusing the listing (a token is missing or lacks
    // access); 0 otherwise.
    int refusedWith() const { return m_answer.refusedWith; }

    // "1.56 TB", "412.00 MB": the units the downloader's own messages use.
    static QString sizeText(quint64 bytes);

signals:
    void changed();

private:
    struct Answer {
        std::optional<quint64> total, needed;
        bool fromListing = false;
        int refusedWith = 0;
    };
    static Answer compute(const k3::DownloadOptions& options);

    void answered(const Answer& answer);

    Answer m_answer;
    bool m_pending = false;
    // A newer request replaces the running one: answers to older requests are dropped.
    AsyncTask<Answer> m_listing{this, [this](const Answer& a) { answered(a); }};
};
