#pragma once

#include <QList>

class MainWindow;
class QAction;
class QDockWidget;

// The main window's menu bar (File, Edit, View, Model, Help). The actions call the
// window's public slots; the window keeps the Regenerate action to retitle it.
class MainMenus {
public:
    // `docks`: the panels whose toggle actions the View menu lists.
    MainMenus(MainWindow* window, const QList<QDockWidget*>& docks);

    QAction* regenerateAction() const { return m_regenerate; }
    QAction* continueAction() const { return m_continue; }

private:
    void createFileMenu();
    void createEditMenu();
    void createFindActions(class QMenu* edit);
    void createViewMenu(const QList<QDockWidget*>& docks);
    void createModelMenu();

    MainWindow* m_window;
    QAction* m_regenerate = nullptr;
    QAction* m_continue = nullptr; // enabled while the last answer is a cut one
};
