#include "PanelDocks.h"

#include "DiskIoPanel.h"
#include "ExpertCachePanel.h"
#include "MemoryPlanPanel.h"
#include "PanelScrollArea.h"
#include "TokenTimingPanel.h"
#include "worker/EngineWorker.h"

#include <QCoreApplication>
#include <QDockWidget>
#include <QMainWindow>

QList<QDockWidget*> PanelDocks::create(QMainWindow* window, EngineWorker* worker,
                                       TokenTimingPanel* timing) {
    auto* plan = new MemoryPlanPanel;
    auto* cache = new ExpertCachePanel;
    auto* disk = new DiskIoPanel;
    QList<QDockWidget*> docks;
    const auto dock = [window, &docks](const QString& title, const char* name, QWidget* panel) {
        auto* d = new QDockWidget(title, window);
        d->setObjectName(QString::fromLatin1(name));
        // In a scroll area: the dock can shrink (800x600 fits) and Tab reaches the panel.
        d->setWidget(new PanelScrollArea(panel, title));
        window->addDockWidget(Qt::RightDockWidgetArea, d);
        docks.append(d);
    };
    dock(QCoreApplication::translate("MainWindow", "Memory plan"), "memoryDock", plan);
    dock(QCoreApplication::translate("MainWindow", "Expert cache"), "cacheDock", cache);
    dock(QCoreApplication::translate("MainWindow", "Disk I/O"), "diskDock", disk);
    dock(QCoreApplication::translate("MainWindow", "Per-token timing"), "timingDock", timing);
    QObject::connect(worker, &EngineWorker::memoryUpdated, plan, &MemoryPlanPanel::setFigures);
    QObject::connect(worker, &EngineWorker::memoryUpdated, cache, &ExpertCachePanel::setFigures);
    QObject::connect(worker, &EngineWorker::memoryUpdated, disk, &DiskIoPanel::setFigures);
    return docks;
}
