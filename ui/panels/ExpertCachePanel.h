#pragma once

#include <QWidget>

#include "worker/EngineWorker.h"

class QLabel;

// The routed-expert cache: hit rate, the TRUE resident hit rate (in memory before the
// layer asked, not fetched by its own batch), evictions and requests.
class ExpertCachePanel : public QWidget {
    Q_OBJECT
public:
    explicit ExpertCachePanel(QWidget* parent = nullptr);
    void setFigures(const MemoryFigures& figures);
    QString text() const;

private:
    QLabel* m_label;
};
