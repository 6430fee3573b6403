#include "wizard/SetupWizard.h"

#include "MainWindow.h"
#include "wizard/MemoryPage.h"
#include "wizard/ModelSourcePage.h"
#include "wizard/PackPage.h"
#include "wizard/SystemCheckPage.h"

SetupWizard::SetupWizard(QWidget* parent)
    : QWizard(parent), m_systemCheck(new SystemCheckPage), m_modelSource(new ModelSourcePage),
      m_pack(new PackPage), m_memory(new MemoryPage) {
    setObjectName(QStringLiteral("setupWizard"));
    setWindowTitle(tr("Set up k3chat"));
    setWizardStyle(QWizard::ModernStyle);
    setOption(QWizard::NoBackButtonOnStartPage);
    setPage(SystemCheck, m_systemCheck);
    setPage(ModelSource, m_modelSource);
    setPage(Pack, m_pack);
    setPage(Memory, m_memory);
    resize(800, 600);
    // The demo needs no download, packing or plan: a new user chats within a minute.
    connect(m_systemCheck, &SystemCheckPage::demoRequested, this, [this] {
        const QString demo = MainWindow::demoModelDirectory();
        if (demo.isEmpty()) return;
        emit setupFinished(demo, QString(), 0, 0);
        QWizard::accept();
    });
}

void SetupWizard::accept() {
    emit setupFinished(m_modelSource->modelDir(), m_pack->trunkDir(), m_memory->trunkBudgetBytes(),
                       m_memory->cacheBudgetBytes());
    QWizard::accept();
}
