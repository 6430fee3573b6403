#include "wizard/SetupWizard.h"

#include "MainWindow.h"
#include "wizard/MemoryPage.h"
#include "wizard/ModelSourcePage.h"
#include "wizard/PackPage.h"
#include "wizard/RemoteServerForm.h"
#include "wizard/RemoteServerPage.h"
#include "wizard/SystemCheckPage.h"

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
    resize(800, 600);
    // The demo needs no download, packing or plan: a new user chats within a minute.
    connect(m_systemCheck, &SystemCheckPage::demoRequested, this, [this] {
        const QString demo = MainWindow::demoModelDirectory();
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
