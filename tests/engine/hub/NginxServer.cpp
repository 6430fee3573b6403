#include "NginxServer.hpp"

#include <QDir>
#include <QFile>
#include <QStandardPaths>
#include <QThread>

#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace {

int freePort() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t length = sizeof addr;
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0)
        port = ntohs(addr.sin_port);
    ::close(fd);
    return port;
}

bool canConnect(int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    return ok;
}

// GET `path` over HTTP/1.0 (nginx closes after its answer), read to the end; false when
// nginx could not be reached. The socket time-out is a hang guard only.
bool getOnce(int port, const QByteArray& path) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    const timeval guard{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof guard);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &guard, sizeof guard);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    const QByteArray request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    ok = ok && ::send(fd, request.constData(), size_t(request.size()), MSG_NOSIGNAL) ==
                   ssize_t(request.size());
    char buffer[4096];
    ssize_t got = 0;
    while (ok && (got = ::recv(fd, buffer, sizeof buffer, 0)) > 0) {
    }
    ::close(fd);
    return ok && got == 0;
}

const QString kMarker = QStringLiteral("/__k3_log_marker/");

} // namespace

NginxServer::~NginxServer() {
    stop();
}

QString NginxServer::findNginx() {
    QString path = QStandardPaths::findExecutable(QStringLiteral("nginx"));
    if (path.isEmpty())
        path = QStandardPaths::findExecutable(
            QStringLiteral("nginx"), {QStringLiteral("/usr/sbin"),
                                      QStringLiteral("/usr/local/sbin"), QStringLiteral("/sbin")});
    return path;
}

QString NginxServer::start(const QString& dir, const QString& serverBody) {
    QString nginx = findNginx();
    if (nginx.isEmpty())
        return QStringLiteral("nginx is not installed: the download tests need a real HTTP "
                              "server (apt-get install -y nginx)");
    dir_ = dir;
    QDir().mkpath(dir + QStringLiteral("/tmp"));
    // As root, nginx workers switch to "nobody" unless told otherwise, and nobody
    // cannot read a private temporary folder.
    QString user;
    if (::geteuid() == 0) {
        passwd* pw = ::getpwuid(::geteuid());
        group* gr = ::getgrgid(::getegid());
        if (pw && gr)
            user =
                QStringLiteral("user %1 %2;\n")
                    .arg(QString::fromLocal8Bit(pw->pw_name), QString::fromLocal8Bit(gr->gr_name));
    }
    QString lastError;
    for (int tries = 0; tries < 5; ++tries) {
        port_ = freePort();
        QString body = serverBody;
        body.replace(QStringLiteral("@PORT@"), QString::number(port_));
        body.replace(QStringLiteral("@ROOT@"), dir + QStringLiteral("/www"));
        QString t = dir + QStringLiteral("/tmp");
        QString conf =
            QStringLiteral("daemon off;\nmaster_process on;\nworker_processes 1;\n") + user +
            QStringLiteral("pid %1/nginx.pid;\nerror_log %1/error.log info;\n"
                           "events { worker_connections 64; }\n"
                           "http {\n"
                           "  log_format hub '$request_uri $status \"$http_range\"';\n"
                           "  access_log %1/access.log hub;\n"
                           "  client_body_temp_path %2/body;\n  proxy_temp_path %2/proxy;\n"
                           "  fastcgi_temp_path %2/fastcgi;\n  uwsgi_temp_path %2/uwsgi;\n"
                           "  scgi_temp_path %2/scgi;\n"
                           "  default_type application/octet-stream;\n"
                           "  server {\n    listen 127.0.0.1:%3;\n    root %1/www;\n%4\n  }\n}\n")
                .arg(dir, t, QString::number(port_), body);
        QFile file(dir + QStringLiteral("/nginx.conf"));
        if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate))
            return QStringLiteral("cannot write %1").arg(file.fileName());
        file.write(conf.toUtf8());
        file.close();
        process_.setProcessChannelMode(QProcess::MergedChannels);
        // A test that crashes must not leave a server behind.
        process_.setChildProcessModifier([] { ::prctl(PR_SET_PDEATHSIG, SIGTERM); });
        process_.start(nginx,
                       {QStringLiteral("-p"), dir + QStringLiteral("/"), QStringLiteral("-e"),
                        dir + QStringLiteral("/error.log"), QStringLiteral("-c"), file.fileName()});
        if (!process_.waitForStarted(5000)) return QStringLiteral("cannot start ") + nginx;
        // Polled with a deadline: nginx says nothing when it listens.
        for (int i = 0; i < 100; ++i) {
            if (canConnect(port_)) return {};
            if (process_.state() == QProcess::NotRunning) break;
            QThread::msleep(50);
        }
        process_.kill();
        process_.waitForFinished(2000);
        QFile log(dir + QStringLiteral("/error.log"));
        log.open(QIODevice::ReadOnly);
        lastError = QStringLiteral("nginx did not start: ") +
                    QString::fromLocal8Bit(process_.readAll() + log.readAll());
    }
    return lastError;
}

void NginxServer::stop() {
    if (process_.state() == QProcess::NotRunning) return;
    process_.terminate(); // SIGTERM: fast shutdown of master and worker
    if (!process_.waitForFinished(5000)) {
        process_.kill();
        process_.waitForFinished(2000);
    }
}

QStringList NginxServer::accessLog() const {
    QFile file(dir_ + QStringLiteral("/access.log"));
    if (!file.open(QIODevice::ReadOnly)) return {};
    QStringList lines;
    for (const QString& line :
         QString::fromUtf8(file.readAll()).split(QLatin1Char('\n'), Qt::SkipEmptyParts))
        if (!line.startsWith(kMarker)) lines << line;
    return lines;
}

QStringList NginxServer::settledAccessLog() const {
    // One worker serves the connections in turn and logs a request as it ends, so once a
    // request made now is in the log, every request that ended before it is too.
    const QString marker = kMarker + QString::number(++markers_) + QLatin1Char(' ');
    if (!getOnce(port_, marker.trimmed().toLatin1())) return accessLog();
    const auto logged = [&] {
        QFile file(dir_ + QStringLiteral("/access.log"));
        if (!file.open(QIODevice::ReadOnly)) return false;
        const QString log = QLatin1Char('\n') + QString::fromUtf8(file.readAll());
        return log.contains(QLatin1Char('\n') + marker);
    };
    // nginx logs a request before it closes the connection, so the line is there now; the
    // loop (a deadline, the file says nothing when it grows) only guards that assumption.
    for (int i = 0; i < 1000 && !logged(); ++i) QThread::msleep(5);
    return accessLog();
}
