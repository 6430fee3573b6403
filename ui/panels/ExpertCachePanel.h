#pragma once

#include <QWidget>

#include "worker/EngineWorker.h"

class QLabel;

// The routed-expert cache, leading with what a user can act on: the share of requests
// served from memory (no disk read at all) and what was read from disk instead. The
// engine's "hit" also counts experts its batch read just before use, so it is shown as
// "prefetched", never as a hit. Every line has a tooltip saying what it counts.
class ExpertCachePanel : public QWidget {
    Q_OBJECT
public:
    explicit ExpertCachePanel(QWidget* parent = nullptr);
    void setFigures(const MemoryFigures& figures);
    QString text() const; // the visible lines, joined by newlines

private:
    QLabel* addLine(const char* objectName, const QString& toolTip);
    void showLines(const QStringList& lines);

    QList<QLabel*> m_lines; // progress, served, disk, detail, capacity
};
