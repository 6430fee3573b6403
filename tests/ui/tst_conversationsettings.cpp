// Issue 37 point 9: a conversation's own sampling, Think and longest answer are kept
// beside it (ID.settings) and come back when it is reopened; the Settings default system
// prompt is shown in a new chat (and changed there for that chat) instead of being
// applied unseen.
#include <QCoreApplication>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileInfo>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTest>

#include "AppSettings.h"
#include "MainWindow.h"
#include "chat/ChatController.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationSettings.h"
#include "chat/ConversationStore.h"
#include "chat/ConversationView.h"
#include "chat/MessageComposer.h"
#include "chat/SystemPromptBanner.h"
#include "chat/SystemPromptDialog.h"

class TestConversationSettings : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void jsonKeepsOnlyWhatIsSet();
    void newChatShowsTheDefaultSystemPrompt();
    void savedBesideTheConversationAndRestored();
};

void TestConversationSettings::initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_conversationsettings"));
    QStandardPaths::setTestModeEnabled(true);
    QSettings().clear();
    QDir(AppSettings::conversationsDirectory()).removeRecursively();
}

void TestConversationSettings::jsonKeepsOnlyWhatIsSet() {
    ConversationSettings s;
    QVERIFY(s.isEmpty());
    s.temperature = 0.3;
    s.maxTokens = 77;
    s.thinking = false;
    QCOMPARE(s.toJson(),
             QByteArray("{\"max_tokens\":77,\"temperature\":0.3,\"thinking\":false}\n"));
    QCOMPARE(ConversationSettings::fromJson(s.toJson()), s);
    // Out of range or of the wrong type: ignored, never a failure to open.
    const ConversationSettings odd = ConversationSettings::fromJson(
        "{\"temperature\": 9, \"top_p\": 0.9, \"max_tokens\": \"many\", \"thinking\": 1}");
    QVERIFY(!odd.temperature);
    QCOMPARE(*odd.topP, 0.9);
    QVERIFY(!odd.maxTokens);
    QVERIFY(!odd.thinking);
    GenerationSettings g;
    g.temperature = 0.7f;
    g.topP = 1.0f;
    g.maxTokens = 512;
    s.applyTo(g);
    QCOMPARE(g.temperature, 0.3f);
    QCOMPARE(g.topP, 1.0f);
    QCOMPARE(g.maxTokens, 77);
}

void TestConversationSettings::newChatShowsTheDefaultSystemPrompt() {
    AppSettings defaults = AppSettings::load();
    defaults.systemPrompt = QStringLiteral("Answer in one sentence.");
    defaults.save();
    MainWindow window;
    window.resize(900, 600);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    auto* banner = window.findChild<SystemPromptBanner*>(QStringLiteral("systemPromptBanner"));
    QVERIFY(banner);
    QVERIFY(banner->isVisible());
    QCOMPARE(banner->text(), QStringLiteral("This chat starts with the system prompt from "
                                            "Settings: Answer in one sentence."));
    // Changed for this chat from the banner's button: the default stays in Settings.
    QTest::mouseClick(banner->changeButton(), Qt::LeftButton);
    auto* dialog = window.findChild<SystemPromptDialog*>();
    QTRY_VERIFY(dialog && dialog->isVisible());
    QCOMPARE(dialog->editor()->toPlainText(), QStringLiteral("Answer in one sentence."));
    dialog->editor()->setPlainText(QStringLiteral("Answer in French."));
    dialog->accept();
    QCOMPARE(banner->text(), QStringLiteral("System prompt: Answer in French."));
    QCOMPARE(AppSettings::load().systemPrompt, QStringLiteral("Answer in one sentence."));
    // A new chat starts from the default again; no default, no banner.
    window.newChat();
    QCOMPARE(banner->text(), QStringLiteral("This chat starts with the system prompt from "
                                            "Settings: Answer in one sentence."));
    defaults.systemPrompt.clear();
    defaults.save();
    window.newChat();
    QVERIFY(!banner->isVisible());
}

void TestConversationSettings::savedBesideTheConversationAndRestored() {
    QString id;
    {
        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        id = window.store()->save({}, {{QStringLiteral("system"), QStringLiteral("Be brief."), {}},
                                       {QStringLiteral("user"), QStringLiteral("Hello"), {}},
                                       {QStringLiteral("assistant"), QStringLiteral("Hi."), {}}});
        window.store()->release();
        window.openConversation(id);
        auto* banner = window.findChild<SystemPromptBanner*>();
        QCOMPARE(banner->text(), QStringLiteral("System prompt: Be brief."));
        window.showSystemPrompt();
        auto* dialog = window.findChild<SystemPromptDialog*>();
        QVERIFY(dialog);
        auto* temperature =
            dialog->findChild<QDoubleSpinBox*>(QStringLiteral("conversationTemperature"));
        auto* topP = dialog->findChild<QDoubleSpinBox*>(QStringLiteral("conversationTopP"));
        auto* longest = dialog->findChild<QSpinBox*>(QStringLiteral("conversationMaxTokens"));
        QVERIFY(temperature && topP && longest);
        QCOMPARE(temperature->text(), QStringLiteral("as in Settings"));
        temperature->setValue(0.35);
        longest->setValue(64);
        dialog->accept();
    }
    const QString beside =
        AppSettings::conversationsDirectory() + QLatin1Char('/') + id + QStringLiteral(".settings");
    QVERIFY(QFileInfo::exists(beside));
    QFile file(beside);
    QVERIFY(file.open(QIODevice::ReadOnly));
    QCOMPARE(file.readAll(), QByteArray("{\"max_tokens\":64,\"temperature\":0.35}\n"));
    file.close();

    MainWindow again;
    again.show();
    QVERIFY(QTest::qWaitForWindowExposed(&again));
    again.openConversation(id);
    ChatController* chat = again.findChild<ChatController*>();
    QVERIFY(chat);
    QCOMPARE(*chat->conversationSettings().temperature, 0.35);
    QCOMPARE(*chat->conversationSettings().maxTokens, 64);
    const GenerationSettings next = chat->nextGenerationSettings(1);
    QCOMPARE(next.temperature, 0.35f);
    QCOMPARE(next.maxTokens, 64);
    QCOMPARE(next.topP, AppSettings::load().generationSettings(1).topP);
    // Think as the conversation last used it comes back with it.
    ConversationSettings withThink = chat->conversationSettings();
    withThink.thinking = false;
    chat->setConversationSettings(withThink);
    again.newChat();
    QCOMPARE(chat->conversationSettings(), ConversationSettings());
    again.composer()->setThinking(true);
    again.openConversation(id);
    QCOMPARE(again.composer()->thinking(), false);
    // Deleted with the conversation, restored with it.
    again.newChat();
    again.store()->trash(id);
    QVERIFY(!QFileInfo::exists(beside));
    again.store()->restore(id);
    QVERIFY(QFileInfo::exists(beside));
    again.store()->remove(id);
    QVERIFY(!QFileInfo::exists(beside));
}

QTEST_MAIN(TestConversationSettings)
#include "tst_conversationsettings.moc"
