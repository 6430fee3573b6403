#include "MainMenus.h"

#include "MainWindow.h"
#include "ModelLoader.h"
#include "Settings.h"
#include "SettingsTable.h"
#include "chat/ChatController.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationView.h"
#include "chat/FindBar.h"

#include <QAction>
#include <QDockWidget>
#include <QMenu>
#include <QMenuBar>

MainMenus::MainMenus(MainWindow* window, const QList<QDockWidget*>& docks) : m_window(window) {
    createFileMenu();
    createEditMenu();
    createViewMenu(docks);
    createModelMenu();
    QMenu* help = m_window->menuBar()->addMenu(MainWindow::tr("&Help"));
    help->addAction(MainWindow::tr("&About k3chat"), m_window, &MainWindow::showAbout);
}

void MainMenus::createFileMenu() {
    QMenu* file = m_window->menuBar()->addMenu(MainWindow::tr("&File"));
    QAction* newChatAction =
        file->addAction(MainWindow::tr("&New chat"), m_window, &MainWindow::newChat);
    newChatAction->setShortcut(QKeySequence::New);
    newChatAction->setObjectName(QStringLiteral("newChatAction"));
    QAction* exportAction = file->addAction(MainWindow::tr("&Export conversation as Markdown…"),
                                            m_window, &MainWindow::exportConversation);
    exportAction->setObjectName(QStringLiteral("exportAction"));
    QAction* importAction = file->addAction(MainWindow::tr("&Import conversation…"), m_window,
                                            &MainWindow::chooseConversationToImport);
    importAction->setObjectName(QStringLiteral("importAction"));
    importAction->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
    file->addSeparator();
    QAction* quit = file->addAction(MainWindow::tr("&Quit"), m_window, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);
}

void MainMenus::createEditMenu() {
    QMenu* edit = m_window->menuBar()->addMenu(MainWindow::tr("&Edit"));
    ChatController* chat = m_window->chat();
    m_regenerate = edit->addAction(MainWindow::tr("&Regenerate the last answer"), chat,
                                   &ChatController::regenerate);
    m_regenerate->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
    m_regenerate->setObjectName(QStringLiteral("regenerateAction"));
    // An answer cut by Stop, quitting or a crash goes on from where it stopped.
    m_continue = edit->addAction(MainWindow::tr("&Continue the cut answer"), chat,
                                 &ChatController::continueAnswer);
    m_continue->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_R));
    m_continue->setObjectName(QStringLiteral("continueAnswerAction"));
    m_continue->setEnabled(false);
    // Up only works in the empty composer, so it is shown here but not bound globally.
    QAction* editLast = edit->addAction(MainWindow::tr("&Edit the last message") +
                                            QStringLiteral("\t") + MainWindow::tr("Up"),
                                        chat, &ChatController::editLastMessage);
    editLast->setObjectName(QStringLiteral("editLastAction"));
    // The system prompt and the conversation's own sampling and longest answer.
    QAction* conversation = edit->addAction(MainWindow::tr("S&ystem prompt and sampling…"),
                                            m_window, &MainWindow::showSystemPrompt);
    conversation->setObjectName(QStringLiteral("systemPromptAction"));
    conversation->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_Y));
    edit->addSeparator();
    edit->addAction(m_window->conversationView()->copyMessageAction());
    edit->addSeparator();
    createFindActions(edit);
    edit->addSeparator();
    QAction* preferences =
        edit->addAction(MainWindow::tr("&Preferences…"), m_window, &MainWindow::showSettings);
    preferences->setObjectName(QStringLiteral("preferencesAction"));
    preferences->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Comma));
    preferences->setMenuRole(QAction::PreferencesRole);
}

void MainMenus::createFindActions(QMenu* edit) {
    MainWindow* window = m_window;
    QAction* find = edit->addAction(MainWindow::tr("&Find in conversation…"), window->findBar(),
                                    &FindBar::open);
    find->setObjectName(QStringLiteral("findAction"));
    find->setShortcut(QKeySequence::Find);
    QAction* findNext = edit->addAction(MainWindow::tr("Find &next"), window, [window] {
        if (window->findBar()->text().isEmpty())
            window->findBar()->open();
        else
            window->conversationView()->findNext();
    });
    findNext->setObjectName(QStringLiteral("findNextAction"));
    findNext->setShortcut(QKeySequence(Qt::Key_F3));
    QAction* findPrevious = edit->addAction(MainWindow::tr("Find &previous"), window, [window] {
        if (window->findBar()->text().isEmpty())
            window->findBar()->open();
        else
            window->conversationView()->findPrevious();
    });
    findPrevious->setObjectName(QStringLiteral("findPreviousAction"));
    findPrevious->setShortcut(QKeySequence(Qt::SHIFT | Qt::Key_F3));
}

void MainMenus::createViewMenu(const QList<QDockWidget*>& docks) {
    QMenu* view = m_window->menuBar()->addMenu(MainWindow::tr("&View"));
    for (QDockWidget* dock : docks) view->addAction(dock->toggleViewAction());
    view->addSeparator();
    QAction* keepThinking = view->addAction(MainWindow::tr("&Keep thinking expanded"));
    keepThinking->setObjectName(QStringLiteral("keepThinkingExpandedAction"));
    keepThinking->setCheckable(true);
    keepThinking->setChecked(Settings::value(SettingsTable::keepThinkingExpanded));
    // The action writes the setting; the conversation follows the setting's change signal.
    ConversationModel* conversation = m_window->conversationView()->conversation();
    conversation->setThinkingExpandedByDefault(keepThinking->isChecked());
    QObject::connect(keepThinking, &QAction::toggled, keepThinking,
                     [](bool on) { Settings::setValue(SettingsTable::keepThinkingExpanded, on); });
    QObject::connect(Settings::instance(), &Settings::changed, conversation,
                     [conversation](const QString& key) {
                         if (key == SettingsTable::keepThinkingExpanded.key)
                             conversation->setThinkingExpandedByDefault(
                                 Settings::value(SettingsTable::keepThinkingExpanded));
                     });
}

void MainMenus::createModelMenu() {
    QMenu* model = m_window->menuBar()->addMenu(MainWindow::tr("&Model"));
    QAction* open = model->addAction(MainWindow::tr("&Open model folder…"), m_window,
                                     &MainWindow::openModelFolder);
    open->setShortcut(QKeySequence::Open);
    QAction* demo = model->addAction(MainWindow::tr("Load the &demo model"), m_window->loader(),
                                     &ModelLoader::loadDemoModel);
    demo->setObjectName(QStringLiteral("loadDemoAction"));
    QAction* server = model->addAction(MainWindow::tr("Use a &server…"), m_window,
                                       &MainWindow::showRemoteServerDialog);
    server->setObjectName(QStringLiteral("useServerAction"));
    model->addSeparator();
    QAction* setup =
        model->addAction(MainWindow::tr("&Setup wizard…"), m_window, &MainWindow::showSetupWizard);
    setup->setObjectName(QStringLiteral("setupWizardAction"));
}
