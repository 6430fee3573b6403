#include "MainWindow.h"

#include "AboutDialog.h"
#include "chat/ConversationView.h"
#include "chat/MessageComposer.h"
#include "wizard/SetupWizard.h"

#include <QApplication>
#include <QCloseEvent>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMenuBar>
#include <QPushButton>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QVBoxLayout>

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), m_splitter(new QSplitter(Qt::Horizontal, this)),
      m_conversationList(new QListWidget), m_search(new QLineEdit),
      m_conversation(new ConversationView), m_composer(new MessageComposer) {
    setWindowTitle(tr("k3chat"));
    setWindowIcon(QIcon(QStringLiteral(":/k3chat/icons/k3chat.svg")));

    auto* sidebar = new QWidget;
    auto* sideLayout = new QVBoxLayout(sidebar);
    auto* newChatButton = new QPushButton(tr("New chat"));
    newChatButton->setObjectName(QStringLiteral("newChatButton"));
    m_search->setObjectName(QStringLiteral("conversationSearch"));
    m_search->setPlaceholderText(tr("Search conversations"));
    m_search->setClearButtonEnabled(true);
    m_conversationList->setObjectName(QStringLiteral("conversationList"));
    sideLayout->addWidget(newChatButton);
    sideLayout->addWidget(m_search);
    sideLayout->addWidget(m_conversationList, 1);
    connect(newChatButton, &QPushButton::clicked, this, &MainWindow::newChat);

    auto* center = new QWidget;
    auto* centerLayout = new QVBoxLayout(center);
    centerLayout->addWidget(m_conversation, 1);
    centerLayout->addWidget(m_composer);

    m_splitter->setObjectName(QStringLiteral("mainSplitter"));
    m_splitter->addWidget(sidebar);
    m_splitter->addWidget(center);
    m_splitter->setStretchFactor(0, 0);
    m_splitter->setStretchFactor(1, 1);
    m_splitter->setSizes({220, 780});
    setCentralWidget(m_splitter);

    createMenus();
    statusBar()->showMessage(tr("No model loaded"));
    resize(1100, 720);
    restoreState();
    m_composer->setFocus();
}

void MainWindow::createMenus() {
    QMenu* file = menuBar()->addMenu(tr("&File"));
    QAction* newChatAction = file->addAction(tr("&New chat"), this, &MainWindow::newChat);
    newChatAction->setShortcut(QKeySequence::New);
    newChatAction->setObjectName(QStringLiteral("newChatAction"));
    file->addSeparator();
    QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);

    menuBar()->addMenu(tr("&Edit"));
    menuBar()->addMenu(tr("&View"));
    QMenu* model = menuBar()->addMenu(tr("&Model"));
    QAction* setup = model->addAction(tr("&Setup wizard…"), this, &MainWindow::showSetupWizard);
    setup->setObjectName(QStringLiteral("setupWizardAction"));
    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&About k3chat"), this, &MainWindow::showAbout);
}

void MainWindow::newChat() {
    m_composer->clear();
    m_composer->setFocus();
}

void MainWindow::showSetupWizard() {
    auto* wizard = new SetupWizard(this);
    wizard->setAttribute(Qt::WA_DeleteOnClose);
    wizard->open();
}

void MainWindow::showAbout() {
    AboutDialog dialog(this);
    dialog.exec();
}

void MainWindow::restoreState() {
    QSettings settings;
    if (const QByteArray geometry = settings.value("mainWindow/geometry").toByteArray();
        !geometry.isEmpty())
        restoreGeometry(geometry);
    if (const QByteArray split = settings.value("mainWindow/splitter").toByteArray();
        !split.isEmpty())
        m_splitter->restoreState(split);
}

void MainWindow::closeEvent(QCloseEvent* event) {
    QSettings settings;
    settings.setValue("mainWindow/geometry", saveGeometry());
    settings.setValue("mainWindow/splitter", m_splitter->saveState());
    event->accept();
}
