#pragma once

#include <QStringList>
#include <QWidget>

#include "wizard/AsyncTask.h"

class QLabel;
class QLineEdit;
class QPushButton;
class TokenStore;

// What the app needs to chat with an OpenAI-compatible server (vLLM, SGLang, `k3
// serve`): its URL, the model name and an API key. The key lives in the system keychain
// (TokenStore), never in the settings file. Test lists the server's /v1/models on a
// worker thread and says what came back. Used by the wizard and the Model menu alike.
class RemoteServerForm : public QWidget {
    Q_OBJECT
public:
    explicit RemoteServerForm(QWidget* parent = nullptr);

    QString url() const;
    QString model() const;
    QString apiKey() const;
    void setUrl(const QString& url);
    void setModel(const QString& model);
    void setApiKey(const QString& key);
    // Stores the key in the keychain (or memory for this run) when it changed.
    void saveApiKey();

    void test();
    // From Test until its result is shown (the worker may be done before the GUI hears).
    bool isTesting() const { return m_testing; }
    QString resultText() const;
    QStringList testedModels() const { return m_models; }
    TokenStore* keyStore() const { return m_keyStore; }

signals:
    void changed();
    void testFinished(bool ok);

private:
    struct TestResult {
        QStringList models;
        QString error;
    };
    void showResult(const TestResult& result);

    QLineEdit* m_url;
    QLineEdit* m_model;
    QLineEdit* m_key;
    QPushButton* m_test;
    QLabel* m_result;
    QLabel* m_keyNote;
    TokenStore* m_keyStore;
    QStringList m_models;
    // The server's model list; the form may close while the server is still silent: the
    // list stops at once.
    AsyncTask<TestResult> m_modelList{this, [this](const TestResult& r) { showResult(r); }};
    bool m_testing = false;
};
