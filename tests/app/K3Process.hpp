#pragma once
// Runs the k3 executable as a user would: arguments, optional stdin, the exit code and
// both output streams.

#include <QProcess>
#include <QProcessEnvironment>
#include <QString>
#include <QStringList>

struct K3Run {
    int exitCode = -1; // -1: timed out, -2: crashed
    QString out;
    QString err;
};

inline K3Run runProgram(const QString& program, const QStringList& args,
                        const QByteArray& input = {},
                        const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment(),
                        const QString& workDir = {}) {
    QProcess p;
    p.setProcessEnvironment(env);
    if (!workDir.isEmpty()) p.setWorkingDirectory(workDir);
    p.start(program, args);
    if (!p.waitForStarted(10000)) return {-2, {}, QStringLiteral("did not start")};
    if (!input.isEmpty()) p.write(input);
    p.closeWriteChannel();
    if (!p.waitForFinished(25000)) {
        p.kill();
        p.waitForFinished();
        return {-1, QString::fromUtf8(p.readAllStandardOutput()),
                QStringLiteral("timed out; stderr: ") +
                    QString::fromUtf8(p.readAllStandardError())};
    }
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2,
            QString::fromUtf8(p.readAllStandardOutput()),
            QString::fromUtf8(p.readAllStandardError())};
}

inline K3Run runK3(const QStringList& args, const QByteArray& input = {},
                   const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment(),
                   const QString& workDir = {}) {
    return runProgram(QStringLiteral(K3_CLI_PATH), args, input, env, workDir);
}
