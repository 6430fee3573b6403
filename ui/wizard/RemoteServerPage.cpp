#include "wizard/RemoteServerPage.h"

#include "Settings.h"
#include "SettingsTable.h"
#include "wizard/RemoteServerForm.h"

#include <QLabel>
#include <QVBoxLayout>

RemoteServerPage::RemoteServerPage(QWidget* parent)
    : QWizardPage(parent), m_form(new RemoteServerForm) {
    setObjectName(QStringLiteral("remoteServerPage"));
    setTitle(tr("Use a server"));
    setSubTitle(tr("Chat with Kimi K3 served by vLLM, SGLang or `k3 serve` on another "
                   "computer, through its OpenAI-compatible API."));
    m_form->setUrl(Settings::value(SettingsTable::remoteUrl));
    m_form->setModel(Settings::value(SettingsTable::remoteModel));
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_form);
    layout->addStretch(1);
    connect(m_form, &RemoteServerForm::changed, this, &QWizardPage::completeChanged);
}

bool RemoteServerPage::isComplete() const {
    return !m_form->url().isEmpty() && !m_form->model().isEmpty();
}
