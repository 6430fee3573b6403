#include "wizard/SetupWizard.h"

#include "wizard/SystemCheckPage.h"

SetupWizard::SetupWizard(QWidget* parent)
    : QWizard(parent), m_systemCheck(new SystemCheckPage) {
    setObjectName(QStringLiteral("setupWizard"));
    setWindowTitle(tr("Set up k3chat"));
    setWizardStyle(QWizard::ModernStyle);
    setOption(QWizard::NoBackButtonOnStartPage);
    setPage(SystemCheck, m_systemCheck);
    resize(760, 520);
}
