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
    // The access log once it has stopped changing for 300 ms (at most 3 s): nginx writes a
    // request's line after its response has gone out, so a client can be done first (the
    // Debian 13 chroot read 10 of 11 lines).
    QStringList settledAccessLog() const;

private:
    QProcess process_;
    QString dir_;
    int port_ = 0;
};
