#include "wizard/DownloadSpaceCheck.h"

#include <QDir>
#include <QLabel>
#include <QStorageInfo>
#include <QTimer>

#include <k3/memory_plan.hpp>

#include "wizard/CheckpointSize.h"

DownloadSpaceCheck::DownloadSpaceCheck(Page page, QObject* parent)
    : QObject(parent), m_page(std::move(page)), m_freeSpace(new QLabel), m_sizeCheck(new QLabel),
      m_size(new CheckpointSize(this)), m_delay(new QTimer(this)) {
    m_sizeCheck->setObjectName(QStringLiteral("downloadSizeCheck"));
    m_sizeCheck->setWordWrap(true);
    m_sizeCheck->setTextFormat(Qt::PlainText);
    m_delay->setObjectName(QStringLiteral("sizeRequestDelay")); // tests wait for it to fire
    m_delay->setSingleShot(true);
    m_delay->setInterval(400);
    connect(m_delay, &QTimer::timeout, this, &DownloadSpaceCheck::requestSize);
    connect(m_size, &CheckpointSize::changed, this, &DownloadSpaceCheck::updateSizeCheck);
}

QString DownloadSpaceCheck::target() const {
    return QString::fromStdString(m_page.options().destination.string());
}

void DownloadSpaceCheck::setFreeBytesForTests(quint64 bytes) {
    m_freeBytesForTests = bytes;
    updateFreeSpace();
}

std::optional<quint64> DownloadSpaceCheck::freeBytes() const {
    if (m_freeBytesForTests) return m_freeBytesForTests;
    // The nearest existing ancestor: the target is usually created by the download.
    QDir dir(target());
    while (!dir.exists() && !dir.isRoot() && dir.cdUp()) {
    }
    const QStorageInfo storage(dir);
    if (!storage.isValid()) return std::nullopt;
    return quint64(storage.bytesAvailable());
}

void DownloadSpaceCheck::updateFreeSpace() {
    const std::optional<quint64> free = freeBytes();
    m_freeSpace->setText(
        free ? tr("%1 free there").arg(QString::fromStdString(k3::formatBytes(*free)))
             : tr("free space unknown"));
    updateSizeCheck();
}

void DownloadSpaceCheck::scheduleSizeRequest() {
    m_delay->start();
}

void DownloadSpaceCheck::requestSize() {
    // Only a download asks the hub: choosing a folder never touches the network.
    if (!m_page.downloadChosen() || m_page.downloading()) return;
    m_size->request(m_page.options());
}

QString DownloadSpaceCheck::doesNotFitText() const {
    const std::optional<quint64> needed = m_size->neededBytes();
    const std::optional<quint64> free = freeBytes();
    if (!needed || !free || *needed <= *free) return {};
    const auto size = &CheckpointSize::sizeText;
    return tr("Not enough free space: the checkpoint needs %1 (%2) and the disk at %3 has %4 "
              "free (short by %5). Free some space or choose another folder.")
        .arg(size(*needed), sourceText(), target(), size(*free), size(*needed - *free));
}

QString DownloadSpaceCheck::sourceText() const {
    if (m_size->fromListing()) return tr("from the hub's file list");
    // A 401/403 is an answer: the hub refused, it did not fail to answer.
    if (m_size->refusedWith() != 0)
        return tr("the official checkpoint's size; the hub refused the file list (%1)")
            .arg(m_size->refusedWith());
    return tr("the official checkpoint's size; the hub did not answer");
}

void DownloadSpaceCheck::updateSizeCheck() {
    const auto size = &CheckpointSize::sizeText;
    const QString tooBig = doesNotFitText();
    m_sizeCheck->setStyleSheet(tooBig.isEmpty() ? QString() : QStringLiteral("color: #c0392b;"));
    if (!tooBig.isEmpty()) {
        m_sizeCheck->setText(tooBig);
    } else if (m_size->isPending()) {
        m_sizeCheck->setText(tr("Asking the hub for the checkpoint's size…"));
    } else if (const std::optional<quint64> needed = m_size->neededBytes(); needed) {
        const QString source = sourceText();
        const quint64 total = *m_size->totalBytes();
        m_sizeCheck->setText(
            *needed == total
                ? tr("The checkpoint needs %1 (%2); it fits.").arg(size(total), source)
                : tr("The checkpoint needs %1 more (%2 in all, the rest is already there; %3); "
                     "it fits.")
                      .arg(size(*needed), size(total), source));
    } else {
        const int refused = m_size->refusedWith();
        m_sizeCheck->setText(
            !m_page.downloadChosen() ? QString()
            : refused == 401
                ? tr("The checkpoint's size is not known: the hub asks for a valid access token "
                     "(401). Start checks the space once the token is accepted.")
            : refused == 403
                ? tr("The checkpoint's size is not known: the hub refused access to this "
                     "repository (403). Start checks the space once access is granted.")
                : tr("The checkpoint's size is not known (the hub did not answer); Start checks "
                     "the space once it does."));
    }
}
