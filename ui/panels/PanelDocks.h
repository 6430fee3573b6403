#pragma once

#include <QList>

class EngineWorker;
class QDockWidget;
class QMainWindow;
class TokenTimingPanel;

// The engine panels docked on the right of the main window (memory plan, expert cache,
// disk I/O, per-token timing), each in a scroll area and fed by the engine worker.
class PanelDocks {
public:
    // Adds the four docks to `window` and returns them in View menu order.
    static QList<QDockWidget*> create(QMainWindow* window, EngineWorker* worker,
                                      TokenTimingPanel* timing);
};
