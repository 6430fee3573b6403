// k3chat: the desktop app.
#include "MainWindow.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QScreen>
#include <QTimer>

#include <k3/version.hpp>

int main(int argc, char** argv) {
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("k3chat"));
    QApplication::setOrganizationName(QStringLiteral("k3chat"));
    QApplication::setApplicationVersion(QString::fromUtf8(k3::kVersion));
    QApplication::setDesktopFileName(QStringLiteral("io.github.k3chat.k3chat"));

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Chat with Kimi K3 on this computer."));
    parser.addHelpOption();
    parser.addVersionOption();
    QCommandLineOption quitAfter(QStringLiteral("quit-after"),
                                 QStringLiteral("Close the window after <ms> milliseconds "
                                                "(for tests and screenshots)."),
                                 QStringLiteral("ms"));
    QCommandLineOption screenshot(QStringLiteral("screenshot"),
                                  QStringLiteral("Save a picture of the window to <file> "
                                                 "just before --quit-after closes it."),
                                  QStringLiteral("file"));
    parser.addOption(quitAfter);
    parser.addOption(screenshot);
    parser.process(app);

    MainWindow window;
    window.show();

    if (parser.isSet(quitAfter)) {
        bool ok = false;
        const int ms = parser.value(quitAfter).toInt(&ok);
        if (!ok || ms < 0) {
            qCritical("k3chat: --quit-after needs a number of milliseconds, got \"%s\"",
                      qPrintable(parser.value(quitAfter)));
            return 2;
        }
        const QString shotPath = parser.value(screenshot);
        QTimer::singleShot(ms, &window, [&window, shotPath] {
            if (!shotPath.isEmpty() && !window.grab().save(shotPath)) {
                qCritical("k3chat: could not write screenshot %s", qPrintable(shotPath));
                QApplication::exit(1);
                return;
            }
            window.close();
        });
    }
    return QApplication::exec();
}
