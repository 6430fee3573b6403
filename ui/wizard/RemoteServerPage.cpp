#include "wizard/RemoteServerPage.h"

#include "wizard/RemoteServerForm.h"

#include <QLabel>
#include <QSettings>
#include <QVBoxLayout>

RemoteServerPage::RemoteServerPage(QWidget* parent)
    : QWizardPage(parent), m_form(new RemoteServerForm) {
    setObjectName(QStringLiteral("remoteServerPage"));
    setTitle(tr("Use a server"));
    setSubTitle(tr("Chat with Kimi K3 served by vLLM, SGLang or `k3 serve` on another "
                   "computer, through its OpenAI-compatible API."));
    const QSettings settings;
    m_form->setUrl(settings.value(QStringLiteral("remote/url")).toString());
    m_form->setModel(settings.value(QStringLiteral("remote/model")).toString());
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_form);
    layout->addStretch(1);
    connect(m_form, &RemoteServerForm::changed, this, &QWizardPage::completeChanged);
}

bool RemoteServerPage::isComplete() const {
    return !m_form->url().isEmpty() && !m_form->model().isEmpty();
}
