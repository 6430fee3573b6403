#include <QDirIterator>
#include <QFile>
#include <QImage>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

// Starts the real k3chat executable offscreen, lets it draw its window, and checks it
// exits cleanly; the screenshot proves a window of the expected size was drawn.
class TestK3ChatApp : public QObject {
    Q_OBJECT
private slots:
    void startsAndQuitsCleanly();
    void badQuitAfterIsUsageError();
    void modelAndAskAnswerSaveAndQuit();
    void conversationImportKeepsTheFileAndReportsErrors();
};

void TestK3ChatApp::startsAndQuitsCleanly() {
    QTemporaryDir home;
    QVERIFY(home.isValid());
    const QString shot = home.filePath(QStringLiteral("shot.png"));
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    env.insert(QStringLiteral("XDG_CONFIG_HOME"), home.path()); // no settings from the user
    p.setProcessEnvironment(env);
    p.start(QStringLiteral(K3CHAT_PATH), {"--quit-after", "300", "--screenshot", shot});
    QVERIFY(p.waitForFinished(30000));
    QCOMPARE(p.exitStatus(), QProcess::NormalExit);
    QCOMPARE(p.exitCode(), 0);
    const QImage image(shot);
    QVERIFY(!image.isNull());
    // The default 1100x720, fitted to the offscreen platform's 800x800 screen less a
    // 4-pixel border each side (WindowPlacement::fitToScreen, issue 37 item 4).
    QCOMPARE(image.size(), QSize(792, 720));
}

void TestK3ChatApp::badQuitAfterIsUsageError() {
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    p.setProcessEnvironment(env);
    p.start(QStringLiteral(K3CHAT_PATH), {"--quit-after", "soon"});
    QVERIFY(p.waitForFinished(30000));
    QCOMPARE(p.exitCode(), 2);
    QVERIFY(QString::fromUtf8(p.readAllStandardError()).contains(QStringLiteral("soon")));
}

// `k3chat --model DIR --ask TEXT --screenshot FILE`: loads that folder, sends the
// question, and when the answer ends saves the picture and quits; the conversation is
// on disk with the demo's trained answer.
void TestK3ChatApp::modelAndAskAnswerSaveAndQuit() {
    QTemporaryDir home;
    QVERIFY(home.isValid());
    const QString demo = QStringLiteral(K3_SOURCE_DIR "/resources/demo");
    QFile expectedFile(demo + QStringLiteral("/expected.json"));
    QVERIFY(expectedFile.open(QIODevice::ReadOnly));
    const QJsonObject first = QJsonDocument::fromJson(expectedFile.readAll())
                                  .object()[QStringLiteral("prompts")][0]
                                  .toObject();
    const QString question = first[QStringLiteral("question")].toString();
    const QString answer = first[QStringLiteral("answer_text")].toString();
    QVERIFY(!question.isEmpty() && !answer.isEmpty());

    const QString shot = home.filePath(QStringLiteral("answer.png"));
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    env.insert(QStringLiteral("XDG_CONFIG_HOME"), home.filePath(QStringLiteral("config")));
    env.insert(QStringLiteral("XDG_DATA_HOME"), home.filePath(QStringLiteral("data")));
    p.setProcessEnvironment(env);
    // The 60 s quit timer is only a safety net: the answer ending closes the window.
    p.start(QStringLiteral(K3CHAT_PATH),
            {"--model", demo, "--ask", question, "--screenshot", shot, "--quit-after", "60000"});
    QVERIFY(p.waitForFinished(90000));
    QCOMPARE(p.exitStatus(), QProcess::NormalExit);
    QCOMPARE(p.exitCode(), 0);
    QVERIFY(!QImage(shot).isNull());

    QStringList transcripts;
    QDirIterator it(home.filePath(QStringLiteral("data")), {QStringLiteral("*.jsonl")}, QDir::Files,
                    QDirIterator::Subdirectories);
    while (it.hasNext()) transcripts << it.next();
    QCOMPARE(transcripts.size(), 1);
    QFile transcript(transcripts.first());
    QVERIFY(transcript.open(QIODevice::ReadOnly));
    QStringList roles, contents;
    for (const QByteArray& line : transcript.readAll().split('\n')) {
        if (line.trimmed().isEmpty()) continue;
        const QJsonObject message = QJsonDocument::fromJson(line).object();
        roles << message[QStringLiteral("role")].toString();
        contents << message[QStringLiteral("content")].toString();
    }
    QCOMPARE(roles, QStringList({QStringLiteral("user"), QStringLiteral("assistant")}));
    QCOMPARE(contents.at(0), question);
    QCOMPARE(contents.at(1).trimmed(), answer.trimmed());
}

// `k3chat --conversation FILE` imports a CLI transcript as a new conversation; a bad one
// is reported with its line and left byte for byte as it was.
void TestK3ChatApp::conversationImportKeepsTheFileAndReportsErrors() {
    QTemporaryDir home;
    QVERIFY(home.isValid());
    const QByteArray good = "{\"role\":\"user\",\"content\":\"What is KDA?\"}\n"
                            "{\"role\":\"assistant\",\"content\":\"A linear attention.\","
                            "\"reasoning_content\":\"Recall the layer map.\"}\n";
    const QByteArray bad = good + "{\"role\":\"wizard\",\"content\":\"x\"}\n";
    const auto writeFile = [&](const QString& name, const QByteArray& bytes) {
        QFile f(home.filePath(name));
        if (!f.open(QIODevice::WriteOnly)) return QString();
        f.write(bytes);
        return f.fileName();
    };
    const QString goodPath = writeFile(QStringLiteral("good.jsonl"), good);
    const QString badPath = writeFile(QStringLiteral("bad.jsonl"), bad);
    QVERIFY(!goodPath.isEmpty() && !badPath.isEmpty());
    const auto run = [&](const QString& file, QString* err) {
        QProcess p;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
        env.insert(QStringLiteral("XDG_CONFIG_HOME"), home.filePath(QStringLiteral("config")));
        env.insert(QStringLiteral("XDG_DATA_HOME"), home.filePath(QStringLiteral("data")));
        p.setProcessEnvironment(env);
        p.start(QStringLiteral(K3CHAT_PATH),
                {"--model", QStringLiteral(K3_SOURCE_DIR "/resources/demo"), "--conversation", file,
                 "--quit-after", "500"});
        if (!p.waitForFinished(30000)) return -1;
        *err = QString::fromUtf8(p.readAllStandardError());
        return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;
    };
    const auto storedTranscripts = [&] {
        QStringList found;
        QDirIterator it(home.filePath(QStringLiteral("data")), {QStringLiteral("*.jsonl")},
                        QDir::Files, QDirIterator::Subdirectories);
        while (it.hasNext()) found << it.next();
        return found;
    };

    QString err;
    QCOMPARE(run(badPath, &err), 0);
    QVERIFY2(err.contains(QStringLiteral("bad.jsonl")) && err.contains(QStringLiteral("wizard")),
             qPrintable(err));
    QFile badFile(badPath);
    QVERIFY(badFile.open(QIODevice::ReadOnly));
    QCOMPARE(badFile.readAll(), bad);
    QVERIFY(storedTranscripts().isEmpty());

    QCOMPARE(run(goodPath, &err), 0);
    const QStringList stored = storedTranscripts();
    QCOMPARE(stored.size(), 1);
    QFile imported(stored.first());
    QVERIFY(imported.open(QIODevice::ReadOnly));
    QStringList contents;
    for (const QByteArray& line : imported.readAll().split('\n'))
        if (!line.trimmed().isEmpty())
            contents << QJsonDocument::fromJson(line)
                            .object()[QStringLiteral("reasoning_content")]
                            .toString();
    QCOMPARE(contents, QStringList({QString(), QStringLiteral("Recall the layer map.")}));
}

QTEST_GUILESS_MAIN(TestK3ChatApp)
#include "tst_k3chat_app.moc"
