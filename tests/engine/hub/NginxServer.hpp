#pragma once
// A real nginx for the download tests: started by the test on 127.0.0.1 with a free
// port, configuration, pid, logs and temp paths all inside one temporary folder.

#include <QProcess>
#include <QString>
#include <QStringList>

class NginxServer {
public:
    ~NginxServer();
    // Finds nginx (PATH, /usr/sbin, /sbin); empty when it is not installed.
    static QString findNginx();
    // Writes DIR/nginx.conf from serverBlock (the "server { ... }" body, where the
    // tokens @PORT@ and @ROOT@ are replaced) and starts nginx. Returns an error text,
    // empty on success.
    QString start(const QString& dir, const QString& serverBody);
    void stop();
    int port() const { return port_; }
    QString baseUrl() const { return QStringLiteral("http://127.0.0.1:%1").arg(port_); }
    // Lines of DIR/access.log: "REQUEST_URI STATUS RANGE_HEADER".
    QStringList accessLog() const;
    // The access log with every request that ended before this call: nginx writes a
    // request's line after its response has gone out, so a client can be done first (the
    // Debian 13 chroot read 10 of 11 lines). A marker request is made and the log read
    // once its line is there (marker lines are never returned). A request the client cut
    // is logged only once nginx notices, at its next write.
    QStringList settledAccessLog() const;

private:
    mutable int markers_ = 0;
    QProcess process_;
    QString dir_;
    int port_ = 0;
};
