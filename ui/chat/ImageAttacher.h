#pragma once

#include <QByteArray>
#include <QImage>
#include <QObject>
#include <QString>

#include <functional>

#include "chat/ImageAttachment.h"

// Turns a file the user chose or dropped, or pixels pasted, into an attachment on a pool
// thread: reads the file (the engine's rule for whole files, k3::kMaxImageFileBytes at
// most), checks it with the engine's decoder (what the model will read; its message says
// what is wrong), draws the thumbnail with QImageReader, and keeps a copy beside the
// conversations (ConversationStore::storeImage). The GUI thread never waits and never
// touches the disk; results arrive as signals, only while this object lives.
class ImageAttacher : public QObject {
    Q_OBJECT
public:
    static constexpr int kThumbnailSide = 96;

    explicit ImageAttacher(QString conversationsDirectory, QObject* parent = nullptr);

    void attachFile(const QString& path);
    // Pasted or dropped pixels, kept as a PNG.
    void attachImage(const QImage& image);
    // Attachments still being read.
    int pending() const { return m_pending; }
    // The cap the next attachments' positions are counted at (AppSettings::imagePatchLimit).
    void setPatchLimit(int patches) { m_patchLimit = patches; }

    // The work of one attachment, on the calling thread: `bytes` are the file's, `name`
    // names it in messages, `patchLimit` is the cap its positions are counted at. Throws
    // std::exception saying what is wrong with the image.
    static ImageAttachment prepare(const QString& conversationsDirectory, const QString& name,
                                   const QByteArray& bytes, int patchLimit);

    // A thumbnail of an image file's bytes (QImageReader, else the engine's decoder); a
    // null image when neither reads them.
    static QImage thumbnail(const QByteArray& bytes);

signals:
    void attached(const ImageAttachment& attachment);
    // "NAME: what is wrong" (not an image, too large, unreadable).
    void failed(const QString& message);

private:
    void run(std::function<ImageAttachment()> work);

    QString m_directory;
    int m_pending = 0;
    int m_patchLimit = 65536; // k3::kOfficialPatchLimit until setPatchLimit
};
