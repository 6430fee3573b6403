#include "chat/ImageAttacher.h"

#include "chat/ConversationStore.h"

#include <QBuffer>
#include <QFileInfo>
#include <QFutureWatcher>
#include <QImageReader>
#include <QtConcurrent>

#include <k3/read_file.hpp>
#include <k3/vision.hpp>

#include <algorithm>
#include <span>
#include <variant>

namespace {

using Outcome = std::variant<ImageAttachment, QString>; // the attachment, or why not

// The engine's decoded pixels as a QImage: a thumbnail where Qt has no reader for the
// format (WebP without the image-formats plugin).
QImage fromDecoded(const k3::DecodedImage& d) {
    static constexpr QImage::Format formats[] = {QImage::Format_Invalid, QImage::Format_Grayscale8,
                                                 QImage::Format_Invalid, QImage::Format_RGB888,
                                                 QImage::Format_RGBA8888};
    if (d.channels == 2) { // LA: the grey shown, alpha dropped (a thumbnail)
        QImage grey(d.width, d.height, QImage::Format_Grayscale8);
        for (int y = 0; y < d.height; ++y)
            for (int x = 0; x < d.width; ++x)
                grey.scanLine(y)[x] = d.pixels[(std::size_t(y) * d.width + x) * 2];
        return grey;
    }
    const QImage view(d.pixels.data(), d.width, d.height, d.width * d.channels,
                      formats[d.channels]);
    return view.copy();
}

// `decoded`: the engine's pixels when already decoded (decoded again otherwise).
QImage thumbnailOf(const QByteArray& bytes, const k3::DecodedImage* decoded) {
    QBuffer buffer;
    buffer.setData(bytes);
    buffer.open(QIODevice::ReadOnly);
    QImageReader reader(&buffer);
    const QSize side(ImageAttacher::kThumbnailSide, ImageAttacher::kThumbnailSide);
    if (reader.canRead()) {
        reader.setScaledSize(reader.size().scaled(side, Qt::KeepAspectRatio));
        QImage image = reader.read();
        if (!image.isNull()) return image;
    }
    if (decoded)
        return fromDecoded(*decoded).scaled(side, Qt::KeepAspectRatio, Qt::SmoothTransformation);
    return fromDecoded(k3::decodeImage(
                           std::as_bytes(std::span(bytes.constData(), std::size_t(bytes.size()))),
                           "thumbnail"))
        .scaled(side, Qt::KeepAspectRatio, Qt::SmoothTransformation);
}

} // namespace

QImage ImageAttacher::thumbnail(const QByteArray& bytes) {
    try {
        return thumbnailOf(bytes, nullptr);
    } catch (const std::exception&) {
        return {};
    }
}

ImageAttacher::ImageAttacher(QString conversationsDirectory, QObject* parent)
    : QObject(parent), m_directory(std::move(conversationsDirectory)) {
    qRegisterMetaType<ImageAttachment>();
}

ImageAttachment ImageAttacher::prepare(const QString& directory, const QString& name,
                                       const QByteArray& bytes, int patchLimit) {
    // The engine's decoder decides: what it refuses, the model could not read.
    const k3::DecodedImage decoded = k3::decodeImage(
        std::as_bytes(std::span(bytes.constData(), std::size_t(bytes.size()))), name.toStdString());
    ImageAttachment a;
    a.name = name;
    a.size = QSize(decoded.width, decoded.height);
    a.positions = k3::planImage(decoded.width, decoded.height,
                                std::clamp(patchLimit, 1, k3::kOfficialPatchLimit))
                      .tokens();
    a.thumbnail = thumbnailOf(bytes, &decoded);
    const QString suffix = decoded.format == "PNG"    ? QStringLiteral("png")
                           : decoded.format == "JPEG" ? QStringLiteral("jpg")
                                                      : QStringLiteral("webp");
    a.file = ConversationStore::storeImage(directory, bytes, suffix);
    return a;
}

void ImageAttacher::attachFile(const QString& path) {
    const QString directory = m_directory;
    const int limit = m_patchLimit;
    run([directory, path, limit] {
        const std::string bytes =
            k3::readRegularFile(path.toStdString(), k3::kMaxImageFileBytes, "image");
        return prepare(directory, QFileInfo(path).fileName(),
                       QByteArray(bytes.data(), qsizetype(bytes.size())), limit);
    });
}

void ImageAttacher::attachImage(const QImage& image) {
    const QString directory = m_directory;
    const int limit = m_patchLimit;
    run([directory, image, limit] {
        QByteArray png;
        QBuffer buffer(&png);
        buffer.open(QIODevice::WriteOnly);
        if (image.isNull() || !image.save(&buffer, "PNG"))
            throw std::runtime_error(tr("the pasted image could not be read").toStdString());
        return prepare(directory, tr("pasted image"), png, limit);
    });
}

void ImageAttacher::run(std::function<ImageAttachment()> work) {
    ++m_pending;
    // Parented to this object: destroyed with it, so no result reaches a gone composer.
    auto* watcher = new QFutureWatcher<Outcome>(this);
    connect(watcher, &QFutureWatcher<Outcome>::finished, this, [this, watcher] {
        const Outcome outcome = watcher->result();
        watcher->deleteLater();
        --m_pending;
        if (const auto* a = std::get_if<ImageAttachment>(&outcome))
            emit attached(*a);
        else
            emit failed(std::get<QString>(outcome));
    });
    watcher->setFuture(QtConcurrent::run([work = std::move(work)]() -> Outcome {
        try {
            return work();
        } catch (const std::exception& e) {
            return QString::fromUtf8(e.what());
        }
    }));
}
