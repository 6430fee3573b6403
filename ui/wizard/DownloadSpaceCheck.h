#pragma once

#include <QObject>
#include <QString>

#include <functional>
#include <optional>

#include <k3/hub.hpp>

class CheckpointSize;
class QLabel;
class QTimer;

// The download page's space check: the target's free space and the checkpoint's size
// against it, shown before Start (two labels the page lays out), and the reason a
// download that cannot fit is refused. The size is asked of the hub once after a burst
// of typing, only while a download is the page's choice.
class DownloadSpaceCheck : public QObject {
    Q_OBJECT
public:
    struct Page {
        // The download as the page's fields describe it now (destination: the target).
        std::function<k3::DownloadOptions()> options;
        // A download is chosen (not an existing folder): the size line is shown.
        std::function<bool()> downloadChosen;
        // A download runs: the hub is not asked for the size meanwhile.
        std::function<bool()> downloading;
    };

    DownloadSpaceCheck(Page page, QObject* parent);

    QLabel* freeSpaceLabel() const { return m_freeSpace; }
    QLabel* sizeCheckLabel() const { return m_sizeCheck; }
    CheckpointSize* checkpointSize() const { return m_size; }

    // Tests: the free space planned against instead of the disk's.
    void setFreeBytesForTests(quint64 bytes);
    const std::optional<quint64>& freeBytesForTests() const { return m_freeBytesForTests; }
    // The target's free space (the nearest existing ancestor's); empty when unknown.
    std::optional<quint64> freeBytes() const;
    // Empty when the checkpoint fits or its size is not known yet; else why it does not.
    QString doesNotFitText() const;

    // The target changed (or the disk may have): free space and size check again.
    void updateFreeSpace();
    void updateSizeCheck();
    // One size request after a burst of changes (400 ms after the last).
    void scheduleSizeRequest();

private:
    // Where the needed size comes from ("from the hub's file list", the official size).
    QString sourceText() const;
    void requestSize();
    QString target() const;

    Page m_page;
    QLabel* m_freeSpace;
    QLabel* m_sizeCheck;
    CheckpointSize* m_size;
    QTimer* m_delay;
    std::optional<quint64> m_freeBytesForTests;
};
