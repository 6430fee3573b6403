#include "wizard/TokenStore.h"

#include <QHash>
#include <QTimer>

#ifdef K3_HAVE_QTKEYCHAIN
#include <qt6keychain/keychain.h>
#endif

namespace {
// "For this run only": one copy per secret per process, shared by every window in it.
QString& memorySecret(const QString& key) {
    static QHash<QString, QString> secrets;
    return secrets[key];
}

enum Outcome { Ok, NotFound, Failed };

#ifdef K3_HAVE_QTKEYCHAIN
// QtKeychain often says only "Unknown error": name the kind of failure as well.
QString describe(const QKeychain::Job* job) {
    QString kind;
    switch (job->error()) {
    case QKeychain::NoBackendAvailable:
        kind = TokenStore::tr("no keychain service (GNOME Keyring, KWallet) is running");
        break;
    case QKeychain::AccessDenied:
    case QKeychain::AccessDeniedByUser:
        kind = TokenStore::tr("access to the keychain was denied");
        break;
    case QKeychain::NotImplemented:
        kind = TokenStore::tr("this platform has no supported keychain");
        break;
    default:
        kind = TokenStore::tr("the keychain service did not answer over D-Bus");
        break;
    }
    const QString detail = job->errorString();
    return detail.isEmpty() || detail == QLatin1String("Unknown error")
               ? kind
               : kind + QStringLiteral(": ") + detail;
}
#endif
} // namespace

TokenStore::TokenStore(QObject* parent, QString key) : QObject(parent), m_key(std::move(key)) {}

// A running keychain job holds no pointer to the store: its lambdas use `this` as the
// connection context, so they are dropped when the store goes away.
TokenStore::~TokenStore() = default;

QString TokenStore::serviceName() {
    return QStringLiteral("k3chat");
}

QString TokenStore::keyName() {
    return QStringLiteral("huggingface-token");
}

QString TokenStore::serverKeyName() {
    return QStringLiteral("server-api-key");
}

QString TokenStore::token() const {
    return memorySecret(m_key);
}

void TokenStore::setStatus(Where where, const QString& text) {
    m_where = where;
    if (m_status == text) return;
    m_status = text;
    emit statusChanged(text);
}

void TokenStore::fallBack(const QString& why) {
    setStatus(Where::MemoryOnly,
              tr("No system keychain is reachable (%1): the token is kept in memory for this "
                 "run only and must be entered again next time.")
                  .arg(why.isEmpty() ? tr("no reason given") : why));
}

void TokenStore::load() {
    const int request = ++m_request;
    m_busy = true;
#ifdef K3_HAVE_QTKEYCHAIN
    auto* job = new QKeychain::ReadPasswordJob(serviceName());
    job->setAutoDelete(true);
    job->setInsecureFallback(false); // a plaintext copy in QSettings is exactly what we avoid
    job->setKey(m_key);
    connect(job, &QKeychain::Job::finished, this, [this, request](QKeychain::Job* done) {
        const QKeychain::Error error = done->error();
        const int outcome = error == QKeychain::NoError         ? Ok
                            : error == QKeychain::EntryNotFound ? NotFound
                                                                : Failed;
        finishLoad(request, outcome, describe(done),
                   outcome == Ok ? static_cast<QKeychain::ReadPasswordJob*>(done)->textData()
                                 : QString());
    });
    job->start();
    QTimer::singleShot(m_timeoutMs, this, [this, request] {
        finishLoad(request, Failed,
                   tr("the keychain did not answer within %1 s").arg(m_timeoutMs / 1000), {});
    });
#else
    QTimer::singleShot(0, this, [this, request] {
        finishLoad(request, Failed, tr("this build of k3chat has no QtKeychain support"), {});
    });
#endif
}

void TokenStore::finishLoad(int request, int outcome, const QString& errorText,
                            const QString& token) {
    if (request != m_request || !m_busy) return;
    m_busy = false;
    if (outcome == Ok) {
        memorySecret(m_key) = token;
        setStatus(Where::Keychain, tr("The token is stored in the system keychain."));
    } else if (outcome == NotFound) {
        setStatus(Where::Keychain,
                  tr("No token stored yet; a token entered here is saved in the system keychain."));
    } else {
        fallBack(errorText);
    }
    emit loaded(memorySecret(m_key));
}

void TokenStore::store(const QString& token) {
    memorySecret(m_key) = token;
    const int request = ++m_request;
    m_busy = true;
#ifdef K3_HAVE_QTKEYCHAIN
    if (m_where != Where::MemoryOnly) {
        QKeychain::Job* job = nullptr;
        if (token.isEmpty()) {
            job = new QKeychain::DeletePasswordJob(serviceName());
        } else {
            auto* write = new QKeychain::WritePasswordJob(serviceName());
            write->setTextData(token);
            job = write;
        }
        job->setAutoDelete(true);
        job->setInsecureFallback(false);
        job->setKey(m_key);
        connect(job, &QKeychain::Job::finished, this, [this, request](QKeychain::Job* done) {
            const QKeychain::Error error = done->error();
            finishStore(request,
                        error == QKeychain::NoError         ? Ok
                        : error == QKeychain::EntryNotFound ? NotFound
                                                            : Failed,
                        describe(done));
        });
        job->start();
        QTimer::singleShot(m_timeoutMs, this, [this, request] {
            finishStore(request, Failed,
                        tr("the keychain did not answer within %1 s").arg(m_timeoutMs / 1000));
        });
        return;
    }
#endif
    // Already known to have no keychain: asking again would only wait for the timeout.
    QTimer::singleShot(0, this, [this, request] {
        finishStore(request, Failed,
                    m_status.isEmpty() ? tr("this build of k3chat has no QtKeychain support")
                                       : QString());
    });
}

void TokenStore::finishStore(int request, int outcome, const QString& errorText) {
    if (request != m_request || !m_busy) return;
    m_busy = false;
    if (outcome == Ok || (outcome == NotFound && memorySecret(m_key).isEmpty()))
        setStatus(Where::Keychain, memorySecret(m_key).isEmpty()
                                       ? tr("No token is stored in the system keychain.")
                                       : tr("The token is saved in the system keychain."));
    else if (!errorText.isEmpty() || m_where != Where::MemoryOnly)
        fallBack(errorText);
    emit stored();
}
