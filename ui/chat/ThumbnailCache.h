#pragma once

#include <QHash>
#include <QImage>
#include <QObject>
#include <QString>

// Thumbnails of the images in the conversation (their saved copies), read on a pool
// thread: the view asks while painting and never waits; `loaded` says when to repaint.
class ThumbnailCache : public QObject {
    Q_OBJECT
public:
    explicit ThumbnailCache(QObject* parent = nullptr);

    // The thumbnail of `file`; a null image while it is read (the first ask starts it)
    // or when it cannot be (problem() then says why).
    QImage thumbnail(const QString& file);
    // Why `file` has no thumbnail ("missing", the reader's reason); empty otherwise.
    QString problem(const QString& file) const { return m_entries.value(file).problem; }

signals:
    void loaded(const QString& file);

private:
    struct Entry {
        QImage image;
        QString problem;
    };
    QHash<QString, Entry> m_entries; // present: asked (read or being read)
};
