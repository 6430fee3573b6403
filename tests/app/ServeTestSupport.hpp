#pragma once
// `k3 serve resources/demo` for the route tests: start it on a free port, stop it with
// SIGTERM, speak raw HTTP/1.1 to it, and run the node scripts of tests/app/serve.
#include <QByteArray>
#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QString>
#include <QStringList>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>

namespace servetest {

inline const QString kDemo = QStringLiteral(K3_SOURCE_DIR "/resources/demo");

struct Server {
    std::unique_ptr<QProcess> process;
    int port = 0;
    QString log; // stderr so far
    QString url() const { return QStringLiteral("http://127.0.0.1:%1/v1").arg(port); }
};

// Started on a free port; ready once its "on http://...:PORT/v1" line is out.
inline Server startServe(const QStringList& extra = {}, const QString& model = kDemo) {
    Server s;
    s.process = std::make_unique<QProcess>();
    s.process->start(QStringLiteral(K3_CLI_PATH),
                     QStringList{"serve", model, "--port", "0"} + extra);
    QByteArray err;
    const QRegularExpression listening(QStringLiteral(R"( on http://\S+:(\d+)/v1)"));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (s.port == 0 && std::chrono::steady_clock::now() < deadline &&
           s.process->state() != QProcess::NotRunning) {
        s.process->waitForReadyRead(100);
        err += s.process->readAllStandardError();
        const auto m = listening.match(QString::fromUtf8(err));
        if (m.hasMatch()) s.port = m.captured(1).toInt();
    }
    s.log = QString::fromUtf8(err);
    return s;
}

// Copies scripts/NAME into the scratch folder (ESM resolves `openai` from the script's
// folder) under a name of its own, then renames it over NAME: tests running side by side
// never see the file missing or half written.
inline bool installScript(const QString& scratch, const QString& scripts, const QString& name) {
    const QString temp = scratch + "/" + name + "." + QString::number(getpid());
    QFile::remove(temp);
    return QFile::copy(scripts + "/" + name, temp) &&
           std::rename(temp.toLocal8Bit().constData(),
                       (scratch + "/" + name).toLocal8Bit().constData()) == 0;
}

// The official openai npm client in `scratch` (installed once) and the test's chat.mjs from
// `scripts`; empty when ready, else the reason the test is skipped.
inline QString prepareOpenAiClient(const QString& scratch, const QString& scripts) {
    if (!QDir().mkpath(scratch)) return QStringLiteral("cannot make ") + scratch;
    if (!QFile::exists(scratch + "/node_modules/openai/package.json")) {
        QProcess npm;
        npm.start(QStringLiteral("npm"),
                  {"install", "--prefix", scratch, "--no-audit", "--no-fund", "openai@4"});
        if (!npm.waitForFinished(300000) || npm.exitCode() != 0)
            return "npm install openai@4 failed (the npm registry is needed): " +
                   QString::fromUtf8(npm.readAllStandardError());
    }
    if (!installScript(scratch, scripts, "chat.mjs"))
        return QStringLiteral("cannot copy chat.mjs into ") + scratch;
    return {};
}

inline int stopServe(Server& s) {
    s.process->terminate();
    if (!s.process->waitForFinished(10000)) {
        s.process->kill();
        s.process->waitForFinished();
        return -1;
    }
    s.log += QString::fromUtf8(s.process->readAllStandardError());
    return s.process->exitStatus() == QProcess::NormalExit ? s.process->exitCode() : -2;
}

struct Answer {
    int status = 0; // 0: no answer
    QByteArray head, body;
    QJsonObject json() const { return QJsonDocument::fromJson(body).object(); }
};

// One request with Connection: close; the whole answer (chunked bodies decoded).
// `headers`: more header lines, each ending in CRLF.
inline Answer exchange(int port, const QByteArray& method, const QByteArray& path,
                       const QByteArray& body = {}, const QByteArray& headers = {}) {
    QByteArray request =
        method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + headers;
    if (method == "POST")
        request +=
            "Content-Type: application/json\r\nContent-Length: " + QByteArray::number(body.size()) +
            "\r\n";
    request += "\r\n" + body;
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(std::uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        close(fd);
        return {};
    }
    send(fd, request.constData(), std::size_t(request.size()), MSG_NOSIGNAL);
    QByteArray received;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        char buf[65536];
        const ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        received.append(buf, n);
    }
    close(fd);
    Answer out;
    const int end = received.indexOf("\r\n\r\n");
    if (!received.startsWith("HTTP/1.1 ") || end < 0) return out;
    out.status = received.mid(9, 3).toInt();
    out.head = received.left(end);
    QByteArray rest = received.mid(end + 4);
    if (!out.head.toLower().contains("transfer-encoding: chunked")) {
        out.body = rest;
        return out;
    }
    while (!rest.isEmpty()) { // size CRLF data CRLF ...
        const int eol = rest.indexOf("\r\n");
        const int size = rest.left(eol).toInt(nullptr, 16);
        if (eol < 0 || size == 0) break;
        out.body += rest.mid(eol + 2, size);
        rest = rest.mid(eol + 2 + size + 2);
    }
    return out;
}

} // namespace servetest
