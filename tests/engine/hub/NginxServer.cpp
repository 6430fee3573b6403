#include "NginxServer.hpp"

#include <QElapsedTimer>
#include <QThread>

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
    return QString::fromUtf8(file.readAll()).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
}

QStringList NginxServer::settledAccessLog() const {
    QStringList last = accessLog();
    QElapsedTimer quiet, total;
    quiet.start();
    total.start();
    while (quiet.elapsed() < 300 && total.elapsed() < 3000) {
        QThread::msleep(20);
        QStringList now = accessLog();
        if (now != last) {
            last = std::move(now);
            quiet.restart();
        }
    }
    return last;
}
