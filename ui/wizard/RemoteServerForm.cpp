#include "wizard/RemoteServerForm.h"

#include "wizard/TokenStore.h"

#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>

#include <k3/remote.hpp>

RemoteServerForm::RemoteServerForm(QWidget* parent)
    : QWidget(parent), m_url(new QLineEdit), m_model(new QLineEdit), m_key(new QLineEdit),
      m_test(new QPushButton(tr("Test"))), m_result(new QLabel), m_keyNote(new QLabel),
      m_keyStore(new TokenStore(this, TokenStore::serverKeyName())) {
    setObjectName(QStringLiteral("remoteServerForm"));
    m_url->setObjectName(QStringLiteral("serverUrlEdit"));
    m_url->setPlaceholderText(QStringLiteral("http://gpu-node:8000/v1"));
    m_model->setObjectName(QStringLiteral("serverModelEdit"));
    m_model->setPlaceholderText(tr("as the server names it, e.g. moonshotai/Kimi-K3"));
    m_key->setObjectName(QStringLiteral("serverKeyEdit"));
    m_key->setEchoMode(QLineEdit::Password);
    m_key->setPlaceholderText(tr("empty when the server needs none"));
    m_test->setObjectName(QStringLiteral("serverTestButton"));
    m_result->setObjectName(QStringLiteral("serverTestResult"));
    m_result->setTextFormat(Qt::PlainText); // the server's words are shown, never rendered
    m_result->setWordWrap(true);
    m_result->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_keyNote->setWordWrap(true);
    m_keyNote->setTextFormat(Qt::PlainText);

    auto* form = new QFormLayout(this);
    form->addRow(tr("Server &URL:"), m_url);
    form->addRow(tr("&Model:"), m_model);
    form->addRow(tr("API &key:"), m_key);
    form->addRow(QString(), m_keyNote);
    auto* testRow = new QHBoxLayout;
    testRow->addWidget(m_test);
    testRow->addWidget(m_result, 1);
    form->addRow(QString(), testRow);

    for (QLineEdit* edit : {m_url, m_model, m_key})
        connect(edit, &QLineEdit::textChanged, this, &RemoteServerForm::changed);
    connect(m_test, &QPushButton::clicked, this, &RemoteServerForm::test);
    connect(m_keyStore, &TokenStore::statusChanged, m_keyNote, &QLabel::setText);
    connect(m_keyStore, &TokenStore::loaded, this, [this](const QString& key) {
        if (m_key->text().isEmpty()) m_key->setText(key);
    });
    m_keyStore->load();
}

QString RemoteServerForm::url() const {
    return m_url->text().trimmed();
}
QString RemoteServerForm::model() const {
    return m_model->text().trimmed();
}
QString RemoteServerForm::apiKey() const {
    return m_key->text();
}
void RemoteServerForm::setUrl(const QString& url) {
    m_url->setText(url);
}
void RemoteServerForm::setModel(const QString& model) {
    m_model->setText(model);
}
void RemoteServerForm::setApiKey(const QString& key) {
    m_key->setText(key);
}

void RemoteServerForm::saveApiKey() {
    if (m_key->text() != m_keyStore->token()) m_keyStore->store(m_key->text());
}

QString RemoteServerForm::resultText() const {
    return m_result->text();
}

void RemoteServerForm::test() {
    if (m_testing) return;
    k3::RemoteOptions options;
    options.baseUrl = url().toStdString();
    // Listing models needs no model name; the client insists on one, so any will do.
    options.model = model().isEmpty() ? std::string("-") : model().toStdString();
    options.apiKey = apiKey().toStdString();
    m_testing = true;
    m_test->setEnabled(false);
    m_result->setText(tr("Asking %1 for its models…").arg(url()));
    // By value only: the form may close while the server is still silent.
    m_modelList.start([options](const std::atomic<bool>* cancel) -> TestResult {
        TestResult r;
        try {
            for (const std::string& id : k3::RemoteClient(options).listModels(cancel))
                r.models << QString::fromStdString(id);
        } catch (const std::exception& e) {
            r.error = QString::fromUtf8(e.what());
        }
        return r;
    });
}

void RemoteServerForm::showResult(const TestResult& result) {
    m_testing = false;
    m_test->setEnabled(true);
    m_models = result.models;
    if (!result.error.isEmpty()) {
        m_result->setText(tr("Failed: %1").arg(result.error));
        emit testFinished(false);
        return;
    }
    QString text = tr("The server answers with %n model(s): %1", nullptr, int(m_models.size()))
                       .arg(m_models.join(QStringLiteral(", ")));
    if (model().isEmpty() && !m_models.isEmpty())
        m_model->setText(m_models.first()); // the usual case: a server with one model
    else if (!model().isEmpty() && !m_models.contains(model()))
        text += tr("\nIt does not offer \"%1\": pick one of these.").arg(model());
    m_result->setText(text);
    emit testFinished(true);
}
