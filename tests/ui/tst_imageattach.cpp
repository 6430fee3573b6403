// Issue 33, the app's part: images attached (button, paste, drop), shown, sent, saved
// with the conversation as copies and read again after a restart. The tiny vision model
// (tests/fixtures/vision/k3_tiny_vl) with its reference case "one": photo_83x67.jpg and
// "What is in this picture?", no system prompt, Think off: 45 prompt ids, the image's
// pad expanded to its 9 rows, 54 positions (vision_expected.json).
#include <QApplication>
#include <QClipboard>
#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>
#include <QToolButton>
#include <QUrl>

#include "AppSettings.h"
#include "MainWindow.h"
#include "ModelLoader.h"
#include "QueuedSpy.h"
#include "chat/ChatController.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationStore.h"
#include "chat/ConversationView.h"
#include "chat/ImageAttacher.h"
#include "chat/MessageComposer.h"
#include "chat/MessageDelegate.h"
#include "chat/ThumbnailCache.h"
#include "worker/EngineController.h"

#include "FakeOpenAiServer.hpp"

#include <k3/vision.hpp>

#include <nlohmann/json.hpp>

namespace {

const QString kVision = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/vision/");
const QString kModel = kVision + QStringLiteral("k3_tiny_vl");
const QString kPhoto = kVision + QStringLiteral("images/photo_83x67.jpg");
const QString kQuestion = QStringLiteral("What is in this picture?");

bool loadInto(MainWindow& window, const QString& dir) {
    QSignalSpy ready(&window, &MainWindow::modelReady);
    k3::LaunchConfig config;
    config.modelDir = dir.toStdString();
    window.loader()->loadModel(config);
    return ready.wait(60000);
}

QByteArray fileBytes(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// Where the store keeps a copy of `bytes`: images/SHA-256.SUFFIX.
QString copyPath(const MainWindow& window, const QByteArray& bytes, const QString& suffix) {
    return window.store()->directory() + QStringLiteral("/images/") +
           QString::fromLatin1(
               QCryptographicHash::hash(bytes, QCryptographicHash::Sha256).toHex()) +
           QLatin1Char('.') + suffix;
}

// The n-th answer's summary: the worker's queued call can land just after the window's.
template <typename Spy> GenerationSummary nthSummary(Spy& spy, int n) {
    if (!QTest::qWaitFor([&] { return spy.count() >= n; }, 10000)) return {};
    return spy.at(n - 1).at(0).template value<GenerationSummary>();
}

QPlainTextEdit* editorOf(const MainWindow& window) {
    return window.composer()->findChild<QPlainTextEdit*>(QStringLiteral("composerEditor"));
}

} // namespace

class TestImageAttach : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() {
        QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
        QCoreApplication::setApplicationName(QStringLiteral("tst_imageattach"));
        QStandardPaths::setTestModeEnabled(true); // never the user's settings or chats
        QDir(AppSettings::conversationsDirectory()).removeRecursively();
    }

    void init() {
        QSettings().clear();
        QSettings().setValue(QStringLiteral("setup/firstRunDone"), true);
        AppSettings settings = AppSettings::load();
        settings.greedy = true; // the reference's greedy ids: the same answer every time
        settings.maxTokens = 8;
        settings.thinking = false;
        settings.systemPrompt.clear();
        settings.save();
    }

    // Attach, send, restart, reopen: the image is shown again and the answer's prompt
    // holds its 9 rows (54 positions, as the reference's), read from the saved copy.
    void attachSendAndReopenAfterARestart() {
        QString id, firstAnswer, copy;
        const QByteArray photo = fileBytes(kPhoto);
        QVERIFY(!photo.isEmpty());
        {
            MainWindow window;
            QVERIFY(loadInto(window, kModel));
            MessageComposer* composer = window.composer();
            QTRY_VERIFY(composer->imagesAvailable());
            composer->setThinking(false);
            composer->chooseImageFiles({kPhoto});
            QTRY_COMPARE(composer->attachments().size(), 1);
            const ImageAttachment a = composer->attachments().first();
            copy = copyPath(window, photo, QStringLiteral("jpg"));
            QCOMPARE(a.file, copy);
            QCOMPARE(fileBytes(copy), photo); // a copy, not a reference
            QCOMPARE(a.name, QStringLiteral("photo_83x67.jpg"));
            QCOMPARE(a.size, QSize(83, 67));
            QCOMPARE(a.positions, 9);
            QCOMPARE(a.thumbnail.size(), QSize(83, 67).scaled(96, 96, Qt::KeepAspectRatio));
            QCOMPARE(composer->findChildren<QWidget*>(QStringLiteral("attachment")).size(), 1);

            QueuedSpy summaries(window.engine()->worker(), &EngineWorker::generationFinished);
            QSignalSpy finished(&window, &MainWindow::answerFinished);
            window.chat()->send(kQuestion);
            QVERIFY(composer->attachments().isEmpty());
            QVERIFY(finished.wait(60000));
            const GenerationSummary s = nthSummary(summaries, 1);
            QCOMPARE(s.promptTokens, 54);
            QCOMPARE(s.prefillPositions, 54);
            QCOMPARE(s.reusedPositions, 0); // a prompt with an image is read whole
            QCOMPARE(s.generatedTokens, 8);
            ConversationModel* m = window.conversationView()->conversation();
            QCOMPARE(m->rowCount(), 2);
            QCOMPARE(m->index(0).data(ConversationModel::ContentRole).toString(), kQuestion);
            QCOMPARE(m->index(0).data(ConversationModel::ImagesRole).toStringList(),
                     QStringList{copy});
            firstAnswer = m->index(1).data(ConversationModel::ContentRole).toString();
            QVERIFY(!firstAnswer.isEmpty());
            id = window.currentConversationId();
            const QByteArray transcript = fileBytes(window.store()->pathFor(id));
            const QByteArray line =
                QByteArray("{\"role\":\"user\",\"content\":\"<|kimi_image_placeholder|>What is "
                           "in this picture?\",\"images\":[{\"file\":\"images/") +
                QFileInfo(copy).fileName().toUtf8() + QByteArray("\"}]}\n");
            QVERIFY2(transcript.contains(line), transcript.constData());
        }
        // A new window over the same folder: the conversation, its image and its answer.
        MainWindow window;
        QVERIFY(loadInto(window, kModel));
        window.openConversation(id);
        ConversationModel* m = window.conversationView()->conversation();
        QCOMPARE(m->rowCount(), 2);
        QCOMPARE(m->index(0).data(ConversationModel::ContentRole).toString(), kQuestion);
        QCOMPARE(m->index(0).data(ConversationModel::ImagesRole).toStringList(), QStringList{copy});
        ThumbnailCache* thumbnails = window.conversationView()->messageDelegate()->thumbnails();
        QTRY_VERIFY(!thumbnails->thumbnail(copy).isNull());
        QCOMPARE(thumbnails->thumbnail(copy).size(),
                 QSize(83, 67).scaled(96, 96, Qt::KeepAspectRatio));
        QCOMPARE(thumbnails->problem(copy), QString());
        // The answer again, from the saved copy: the same 54 positions, the same answer.
        QueuedSpy summaries(window.engine()->worker(), &EngineWorker::generationFinished);
        QSignalSpy finished(&window, &MainWindow::answerFinished);
        window.composer()->setThinking(false);
        window.chat()->regenerate();
        QVERIFY(finished.wait(60000));
        const GenerationSummary s = nthSummary(summaries, 1);
        QCOMPARE(s.promptTokens, 54);
        QCOMPARE(s.reusedPositions, 0);
        QCOMPARE(m->index(1).data(ConversationModel::ContentRole).toString(), firstAnswer);
        QVERIFY(window.store()->remove(id));
    }

    // The Settings' cap (images/patchLimit) is the one the attachment is counted at and
    // the engine thread prepares the image at. At 4 patches 83x67 (5x4 whole patches) is
    // scaled by sqrt(4/20) to 37x29 and padded to 56x56: 4 rows instead of 9, so the
    // prompt the worker reads is 49 positions, not the 54 of the default cap.
    void patchLimitReachesThePrompt() {
        QCOMPARE(k3::planImage(83, 67, 4).tokens(), 4);
        QCOMPARE(k3::planImage(83, 67, AppSettings::kDefaultImagePatchLimit).tokens(), 9);
        AppSettings settings = AppSettings::load();
        settings.imagePatchLimit = 4;
        settings.save();
        MainWindow window;
        QVERIFY(loadInto(window, kModel));
        MessageComposer* composer = window.composer();
        QTRY_VERIFY(composer->imagesAvailable());
        composer->setThinking(false);
        composer->chooseImageFiles({kPhoto});
        QTRY_COMPARE(composer->attachments().size(), 1);
        QCOMPARE(composer->attachments()[0].positions, 4);
        QCOMPARE(composer->imageCostShown(),
                 QStringLiteral("this image will cost 4 prompt positions"));

        QueuedSpy applied(window.engine()->worker(), &EngineWorker::settingsApplied);
        QueuedSpy summaries(window.engine()->worker(), &EngineWorker::generationFinished);
        QSignalSpy finished(&window, &MainWindow::answerFinished);
        window.chat()->send(kQuestion);
        QVERIFY(finished.wait(60000));
        QTRY_COMPARE(applied.count(), 1);
        QCOMPARE(applied.at(0).at(0).value<GenerationSettings>().imagePatchLimit, 4);
        const GenerationSummary s = nthSummary(summaries, 1);
        QCOMPARE(s.promptTokens, 49);
        QCOMPARE(s.prefillPositions, 49);

        // The cap raised again before the next Send: an image attached now, and one
        // attached before the change, are counted at it (9 rows each).
        settings.imagePatchLimit = AppSettings::kDefaultImagePatchLimit;
        settings.save();
        composer->chooseImageFiles({kPhoto});
        QTRY_COMPARE(composer->attachments().size(), 1);
        QCOMPARE(composer->attachments()[0].positions, 9);
        settings.imagePatchLimit = 4;
        settings.save();
        window.chat()->setImagePatchLimit(4); // what MainWindow does when Settings close
        QCOMPARE(composer->attachments()[0].positions, 4);
        QVERIFY(composer->imageCostShown().startsWith(
            QStringLiteral("this image will cost 4 prompt positions")));
        QVERIFY(window.store()->remove(window.currentConversationId()));
    }

    // Ctrl+V of an image and a drop of a file attach them; a file that is not an image is
    // refused with the engine's reason; a thumbnail's button removes it.
    void pasteDropAndRefusal() {
        MainWindow window;
        QVERIFY(loadInto(window, kModel));
        MessageComposer* composer = window.composer();
        QTRY_VERIFY(composer->imagesAvailable());
        QPlainTextEdit* editor = editorOf(window);
        QVERIFY(editor);

        // Paste: pixels, kept as a PNG. 40x30 is read whole and padded to 56x56: 4 rows.
        QImage pixels(40, 30, QImage::Format_RGB32);
        pixels.fill(QColor(200, 30, 60));
        auto* clip = new QMimeData;
        clip->setImageData(pixels);
        QApplication::clipboard()->setMimeData(clip);
        editor->setFocus();
        QTest::keyClick(editor, Qt::Key_V, Qt::ControlModifier);
        QTRY_COMPARE(composer->attachments().size(), 1);
        QCOMPARE(composer->attachments()[0].name, QStringLiteral("pasted image"));
        QCOMPARE(composer->attachments()[0].size, QSize(40, 30));
        QCOMPARE(composer->attachments()[0].positions, 4);
        QVERIFY(composer->attachments()[0].file.endsWith(QStringLiteral(".png")));
        QCOMPARE(editor->toPlainText(), QString()); // no text was pasted

        // Drop: a file from a file manager.
        const auto drop = [editor](const QString& file) {
            QMimeData mime;
            mime.setUrls({QUrl::fromLocalFile(file)});
            // What a drag over the text box delivers: enter, move, then the drop.
            QDragEnterEvent enter(QPoint(5, 5), Qt::CopyAction, &mime, Qt::LeftButton,
                                  Qt::NoModifier);
            QApplication::sendEvent(editor->viewport(), &enter);
            QDragMoveEvent move(QPoint(6, 6), Qt::CopyAction, &mime, Qt::LeftButton,
                                Qt::NoModifier);
            QApplication::sendEvent(editor->viewport(), &move);
            QDropEvent event(QPointF(6, 6), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
            QApplication::sendEvent(editor->viewport(), &event);
        };
        drop(kVision + QStringLiteral("images/rgba_50x37.png"));
        QTRY_COMPARE(composer->attachments().size(), 2);
        QCOMPARE(composer->attachments()[1].name, QStringLiteral("rgba_50x37.png"));
        QCOMPARE(composer->attachments()[1].positions, 4); // 50x37 padded to 56x56
        QCOMPARE(composer->attachErrorText(), QString());

        // Not an image: said in the composer, nothing attached, nothing inserted.
        drop(kVision + QStringLiteral("preprocess.json"));
        QTRY_VERIFY(!composer->attachErrorText().isEmpty());
        QCOMPARE(composer->attachErrorText(),
                 QStringLiteral("Not attached: preprocess.json: not a PNG, JPEG or WebP image "
                                "(its first bytes match none of them)"));
        QCOMPARE(composer->attachments().size(), 2);
        QCOMPARE(editor->toPlainText(), QString());

        // The first thumbnail's remove button.
        const QList<QToolButton*> removes =
            composer->findChildren<QToolButton*>(QStringLiteral("removeAttachment"));
        QCOMPARE(removes.size(), 2);
        removes.first()->click();
        QCOMPARE(composer->attachments().size(), 1);
        QCOMPARE(composer->attachments()[0].name, QStringLiteral("rgba_50x37.png"));
    }

    // A server is offered images (it answers for its model) and sent each as an OpenAI
    // image_url part: a data URL of the saved copy's bytes, before the text.
    void serverIsSentTheImageAsADataUrl() {
        FakeOpenAiServer server;
        MainWindow window;
        QSignalSpy ready(&window, &MainWindow::modelReady);
        window.loader()->connectRemote(QString::fromStdString(server.url()),
                                       QStringLiteral("k3-think"), QString());
        QVERIFY(ready.wait(10000));
        MessageComposer* composer = window.composer();
        QTRY_VERIFY(composer->isReady() && composer->imagesAvailable());
        composer->chooseImageFiles({kPhoto});
        QTRY_COMPARE(composer->attachments().size(), 1);
        QCOMPARE(composer->imageCostShown(), QString()); // the server's cap, not ours
        QSignalSpy finished(&window, &MainWindow::answerFinished);
        window.chat()->send(kQuestion);
        QVERIFY(finished.wait(10000));
        const nlohmann::json body = nlohmann::json::parse(server.lastBody());
        QCOMPARE(body["messages"].size(), std::size_t(1));
        const nlohmann::json& content = body["messages"][0]["content"];
        QCOMPARE(content.size(), std::size_t(2));
        QCOMPARE(content[0]["type"].get<std::string>(), std::string("image_url"));
        QCOMPARE(content[0]["image_url"]["url"].get<std::string>(),
                 "data:image/jpeg;base64," + fileBytes(kPhoto).toBase64().toStdString());
        QCOMPARE(content[1]["type"].get<std::string>(), std::string("text"));
        QCOMPARE(content[1]["text"].get<std::string>(), kQuestion.toStdString());
        QCOMPARE(window.conversationView()
                     ->conversation()
                     ->index(1)
                     .data(ConversationModel::ContentRole)
                     .toString(),
                 QStringLiteral("Hello, wörld!"));
        QVERIFY(window.store()->remove(window.currentConversationId()));
    }

    // An imported transcript's images are copied in beside the conversations (its own
    // folder's images/), and the imported conversation refers to the copies.
    void importedConversationKeepsItsImages() {
        QTemporaryDir elsewhere;
        QVERIFY(QDir(elsewhere.path()).mkdir(QStringLiteral("images")));
        QVERIFY(QFile::copy(kPhoto, elsewhere.filePath(QStringLiteral("images/cat.jpg"))));
        const QString file = elsewhere.filePath(QStringLiteral("chat.jsonl"));
        QFile transcript(file);
        QVERIFY(transcript.open(QIODevice::WriteOnly));
        transcript.write("{\"role\":\"user\",\"content\":\"<|kimi_image_placeholder|>What is "
                         "this?\",\"images\":[{\"file\":\"images/cat.jpg\"}]}\n");
        transcript.close();
        MainWindow window;
        QVERIFY(window.importConversation(file));
        const QString copy = window.store()->directory() + QStringLiteral("/images/cat.jpg");
        QCOMPARE(fileBytes(copy), fileBytes(kPhoto));
        ConversationModel* m = window.conversationView()->conversation();
        QCOMPARE(m->index(0).data(ConversationModel::ImagesRole).toStringList(), QStringList{copy});
        QVERIFY(fileBytes(window.store()->pathFor(window.currentConversationId()))
                    .contains("\"images\":[{\"file\":\"images/cat.jpg\"}]"));
        QVERIFY(window.store()->remove(window.currentConversationId()));
    }

    // A text-only model: the button is disabled and says why; drops stay text.
    void textOnlyModelOffersNoImages() {
        MainWindow window;
        QVERIFY(loadInto(window, QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a")));
        MessageComposer* composer = window.composer();
        auto* attach = composer->findChild<QToolButton*>(QStringLiteral("attachButton"));
        QVERIFY(attach);
        // Disabled before the model's facts arrive too ("Load a model first"): wait for
        // the text-only reason itself (ctest --repeat until-fail saw the earlier state).
        QTRY_COMPARE(
            attach->toolTip(),
            QStringLiteral("k3_tiny_a reads text only: its checkpoint has no vision tower"));
        QVERIFY(!attach->isEnabled());
        QVERIFY(!composer->imagesAvailable());
        composer->chooseImageFiles({kPhoto});
        QCOMPARE(window.chat()->imageAttacher()->pending(), 0);
        QVERIFY(composer->attachments().isEmpty());
    }

    // A transcript naming an image file that is gone: everything else opens, the
    // thumbnail's place says "missing", and answering says which file.
    void missingImageIsSaidAndNothingElseIsLost() {
        MainWindow window;
        QVERIFY(loadInto(window, kModel));
        const QString id = QStringLiteral("20260101-000000-gone0001");
        ConversationStore::makePrivateFolder(window.store()->directory());
        QFile transcript(window.store()->pathFor(id));
        QVERIFY(transcript.open(QIODevice::WriteOnly));
        transcript.write(
            "{\"role\":\"user\",\"content\":\"<|kimi_image_placeholder|>What is this?\","
            "\"images\":[{\"file\":\"images/gone.png\"}]}\n"
            "{\"role\":\"assistant\",\"content\":\"A cat.\",\"reasoning_content\":\"\"}\n");
        transcript.close();
        window.openConversation(id);
        ConversationModel* m = window.conversationView()->conversation();
        QCOMPARE(m->rowCount(), 2);
        QCOMPARE(m->index(0).data(ConversationModel::ContentRole).toString(),
                 QStringLiteral("What is this?"));
        QCOMPARE(m->index(1).data(ConversationModel::ContentRole).toString(),
                 QStringLiteral("A cat."));
        const QString gone = window.store()->directory() + QStringLiteral("/images/gone.png");
        QCOMPARE(m->index(0).data(ConversationModel::ImagesRole).toStringList(), QStringList{gone});
        ThumbnailCache* thumbnails = window.conversationView()->messageDelegate()->thumbnails();
        (void)thumbnails->thumbnail(gone);
        QTRY_COMPARE(thumbnails->problem(gone), QStringLiteral("missing"));

        QSignalSpy failed(window.chat(), &ChatController::answerFailed);
        window.chat()->regenerate();
        QVERIFY(failed.wait(30000));
        const QString message = failed.last().at(0).toString();
        QVERIFY2(
            message.startsWith(QStringLiteral("An image of this conversation cannot be read: ")) &&
                message.contains(gone),
            qPrintable(message));
        // The answer that was there is still there, and still on disk.
        QCOMPARE(m->rowCount(), 2);
        QCOMPARE(m->index(1).data(ConversationModel::ContentRole).toString(),
                 QStringLiteral("A cat."));
        QVERIFY(fileBytes(window.store()->pathFor(id)).contains("A cat."));
        QVERIFY(window.store()->remove(id));
    }
};

QTEST_MAIN(TestImageAttach)
#include "tst_imageattach.moc"
