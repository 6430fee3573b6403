#include "wizard/SetupWizard.h"

#include "ModelLoader.h"
#include "wizard/MemoryPage.h"
#include "wizard/ModelSourcePage.h"
#include "wizard/PackPage.h"
#include "wizard/RemoteServerForm.h"
#include "wizard/RemoteServerPage.h"
#include "wizard/SystemCheckPage.h"

#include <QGuiApplication>
#include <QMoveEvent>
#include <QScreen>

#include <algorithm>

SetupWizard::SetupWizard(QWidget* parent)
    : QWizard(parent), m_systemCheck(new SystemCheckPage), m_modelSource(new ModelSourcePage),
      m_pack(new PackPage), m_memory(new MemoryPage), m_remote(new RemoteServerPage) {
    setObjectName(QStringLiteral("setupWizard"));
    setWindowTitle(tr("Set up k3chat"));
    setWizardStyle(QWizard::ModernStyle);
    setOption(QWizard::NoBackButtonOnStartPage);
    setPage(SystemCheck, m_systemCheck);
    setPage(ModelSource, m_modelSource);
    setPage(Pack, m_pack);
    setPage(Memory, m_memory);
    setPage(RemoteServer, m_remote);
    fixSize();
    // The demo needs no download, packing or plan: a new user chats within a minute.
    connect(m_systemCheck, &SystemCheckPage::demoRequested, this, [this] {
        const QString demo = ModelLoader::demoModelDirectory();
        if (demo.isEmpty()) return;
        k3::LaunchConfig config = m_memory->baseConfig();
        config.modelDir = demo.toStdString();
        config.trunkDir.clear();
        config.budget = k3::LaunchBudget::resident();
        emit setupFinished(config);
        QWizard::accept();
    });
    connect(m_systemCheck, &SystemCheckPage::serverRequested, this, [this] {
        m_useServer = true;
        next();
    });
}

int SetupWizard::nextId() const {
    if (currentId() == SystemCheck) return m_useServer ? RemoteServer : ModelSource;
    if (currentId() == Memory) return -1; // the server page is reached only from page 1
    return QWizard::nextId();
}

void SetupWizard::cleanupPage(int id) {
    if (id == RemoteServer) m_useServer = false; // Back: page 1's Next goes on as usual
    QWizard::cleanupPage(id);
}

void SetupWizard::accept() {
    if (currentId() == RemoteServer) {
        RemoteServerForm* form = m_remote->form();
        form->saveApiKey();
        emit serverChosen(form->url(), form->model(), form->apiKey());
        QWizard::accept();
        return;
    }
    emit setupFinished(m_memory->launchConfig());
    QWizard::accept();
}

void SetupWizard::fixSize() {
    // The largest page decides; the header and the buttons come on top of it.
    const QSize chrome(40, 140);
    QSize hint(0, 0), least(0, 0);
    for (const int id : pageIds()) {
        hint = hint.expandedTo(page(id)->sizeHint());
        least = least.expandedTo(page(id)->minimumSizeHint());
    }
    QSize size = (hint + chrome).expandedTo(QSize(720, 540));
    const QScreen* screen =
        parentWidget() ? parentWidget()->screen() : QGuiApplication::primaryScreen();
    if (screen) {
        // Room to spare on the screen, but never less than every page needs.
        const QSize available = screen->availableSize();
        size = size.boundedTo(available * 0.9).expandedTo(least + chrome).boundedTo(available);
    }
    setFixedSize(size);
}

void SetupWizard::centreOnParent() {
    const QWidget* owner = parentWidget() ? parentWidget()->window() : nullptr;
    if (!owner) return;
    QRect frame = frameGeometry();
    frame.moveCenter(owner->frameGeometry().center());
    // Kept on the screen when the window is near its edge.
    if (const QScreen* screen = owner->screen()) {
        const QRect available = screen->availableGeometry();
        frame.moveLeft(
            std::clamp(frame.left(), available.left(),
                       std::max(available.left(), available.right() - frame.width() + 1)));
        frame.moveTop(
            std::clamp(frame.top(), available.top(),
                       std::max(available.top(), available.bottom() - frame.height() + 1)));
    }
    m_centredAt = frame.topLeft();
    move(frame.topLeft());
}

void SetupWizard::moveEvent(QMoveEvent* event) {
    QWizard::moveEvent(event);
    // A move to anywhere but where it was centred is the user's (or the window manager's
    // answer to them): from then on the wizard stays where it is put.
    if (m_placed && isVisible() && frameGeometry().topLeft() != m_centredAt) m_followOwner = false;
}

bool SetupWizard::eventFilter(QObject* watched, QEvent* event) {
    if (m_followOwner && m_placed && isVisible() &&
        (event->type() == QEvent::Move || event->type() == QEvent::Resize))
        centreOnParent();
    return QWizard::eventFilter(watched, event);
}

void SetupWizard::showEvent(QShowEvent* event) {
    QWizard::showEvent(event);
    if (m_placed) return;
    m_placed = true;
    centreOnParent();
    if (QWidget* owner = parentWidget() ? parentWidget()->window() : nullptr)
        owner->installEventFilter(this);
}
