#pragma once

#include <QWidget>

#include "worker/EngineWorker.h"

class QLabel;

// Disk I/O: bytes read from the trunk and for experts, the rate while reading, and the
// share of wall-clock time spent waiting on the disk.
class DiskIoPanel : public QWidget {
    Q_OBJECT
public:
    explicit DiskIoPanel(QWidget* parent = nullptr);
    void setFigures(const MemoryFigures& figures);
    QString text() const;

private:
    QLabel* m_label;
};
