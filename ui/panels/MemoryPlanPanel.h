#pragma once

#include <QWidget>

#include "worker/EngineWorker.h"

class QLabel;

// The memory plan: every component as a segment of one stacked bar against the memory
// available, with a red line at 95% (where the engine refuses), and one row per part.
class MemoryPlanPanel : public QWidget {
    Q_OBJECT
public:
    explicit MemoryPlanPanel(QWidget* parent = nullptr);

    void setFigures(const MemoryFigures& figures);
    const MemoryFigures& figures() const { return m_figures; }
    // The text under the bar, plain (the label shows it with a colour key per part).
    QString detailsText() const;

protected:
    void paintEvent(QPaintEvent* event) override;

private:
    QStringList detailRows() const;
    MemoryFigures m_figures;
    QLabel* m_details;
};
