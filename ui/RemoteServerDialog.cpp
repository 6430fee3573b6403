#include "RemoteServerDialog.h"

#include "Settings.h"
#include "SettingsTable.h"
#include "wizard/RemoteServerForm.h"

#include <QDialogButtonBox>
#include <QMessageBox>
#include <QPushButton>
#include <QVBoxLayout>

RemoteServerDialog::RemoteServerDialog(QWidget* parent)
    : QDialog(parent), m_form(new RemoteServerForm) {
    setObjectName(QStringLiteral("remoteServerDialog"));
    setWindowTitle(tr("Use a server"));
    m_form->setUrl(Settings::value(SettingsTable::remoteUrl));
    m_form->setModel(Settings::value(SettingsTable::remoteModel));
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
    buttons->button(QDialogButtonBox::Ok)->setText(tr("Connect"));
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_form);
    layout->addWidget(buttons);
    resize(560, 0);
}

void RemoteServerDialog::accept() {
    if (m_form->url().isEmpty() || m_form->model().isEmpty()) {
        QMessageBox::warning(this, tr("Use a server"),
                             tr("Enter the server's URL and the model name (Test lists the "
                                "models the server offers)."));
        return;
    }
    m_form->saveApiKey();
    QDialog::accept();
}
