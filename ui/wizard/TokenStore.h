#pragma once

#include <QObject>
#include <QString>

// A secret entered once: the Hugging Face access token, or a server's API key (each
// under its own keychain entry). It lives in the system keychain
// (QtKeychain: Secret Service, KWallet, macOS Keychain, Windows Credential Store) when
// one is reachable; otherwise it stays in this process's memory for this run only and
// the status text says so. It is never written to QSettings and never logged.
//
// Every call returns at once: keychain jobs are asynchronous and report through the
// signals, so the UI never waits on D-Bus or an unlock prompt.
class TokenStore : public QObject {
    Q_OBJECT
public:
    enum class Where {
        Unknown,    // nothing asked yet, or a job is still running
        Keychain,   // the system keychain answered
        MemoryOnly, // no keychain (none reachable, or this build has no QtKeychain)
    };
    Q_ENUM(Where)

    explicit TokenStore(QObject* parent = nullptr, QString key = keyName());
    ~TokenStore() override;

    // Reads the stored token; emits loaded() (the token may be empty).
    void load();
    // Stores the token (empty: forgets it); emits stored(). The in-memory copy is
    // updated at once, so token() returns it even before the keychain answers.
    void store(const QString& token);

    QString token() const;
    Where where() const { return m_where; }
    bool isBusy() const { return m_busy; }
    // One sentence for the wizard: where the token is kept and why.
    QString statusText() const { return m_status; }

    // Seconds a keychain job may take before the store gives up on it (a locked
    // keychain waiting for a password prompt counts as unreachable).
    void setTimeoutMs(int ms) { m_timeoutMs = ms; }

    static QString serviceName();
    static QString keyName();       // the Hugging Face token
    static QString serverKeyName(); // the API key of an OpenAI-compatible server
    const QString& key() const { return m_key; }

signals:
    void loaded(const QString& token);
    void stored();
    void statusChanged(const QString& text);

private:
    void finishLoad(int request, int error, const QString& errorText, const QString& token);
    void finishStore(int request, int error, const QString& errorText);
    void fallBack(const QString& why);
    void setStatus(Where where, const QString& text);

    QString m_key;
    Where m_where = Where::Unknown;
    QString m_status;
    bool m_busy = false;
    int m_request = 0; // the answer to an older or timed-out request is ignored
    int m_timeoutMs = 15000;
};
