#include "chat/ThumbnailCache.h"

#include "chat/ImageAttacher.h"

#include <QFile>
#include <QFileInfo>
#include <QFutureWatcher>
#include <QtConcurrent>

#include <k3/vision.hpp>

ThumbnailCache::ThumbnailCache(QObject* parent) : QObject(parent) {}

QImage ThumbnailCache::thumbnail(const QString& file) {
    if (const auto it = m_entries.constFind(file); it != m_entries.constEnd()) return it->image;
    m_entries.insert(file, {});
    using Result = std::pair<QImage, QString>;
    // Parented to the cache: no result reaches a cache that is gone.
    auto* watcher = new QFutureWatcher<Result>(this);
    connect(watcher, &QFutureWatcher<Result>::finished, this, [this, watcher, file] {
        const Result r = watcher->result();
        watcher->deleteLater();
        m_entries[file] = {r.first, r.second};
        emit loaded(file);
    });
    watcher->setFuture(QtConcurrent::run([file]() -> Result {
        QFile in(file);
        if (!QFileInfo::exists(file)) return {QImage(), tr("missing")};
        if (QFileInfo(file).size() > qint64(k3::kMaxImageFileBytes) ||
            !in.open(QIODevice::ReadOnly))
            return {QImage(), tr("unreadable")};
        const QImage image = ImageAttacher::thumbnail(in.readAll());
        return {image, image.isNull() ? tr("not an image") : QString()};
    }));
    return {};
}
