// The Settings dialog: values round-trip through QSettings, bad stored values are
// clamped, every control has an accessible name, and what is saved reaches the engine
// worker with the next message (greedy vs seeded sampling, the thread count).

#include <QAbstractSpinBox>
#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>

#include "QueuedSpy.h"
#include <QSpinBox>
#include <QStandardPaths>
#include <QTest>
#include <QThread>

#include <omp.h>

#include "AppSettings.h"
#include "MainWindow.h"
#include "SettingsDialog.h"
#include "chat/ConversationStore.h"
#include "chat/MessageComposer.h"
#include "worker/EngineController.h"

namespace {
const QString kTinyModel = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a");

template <typename T> T* child(QObject* parent, const char* name) {
    T* widget = parent->findChild<T*>(QString::fromLatin1(name));
    if (!widget) qFatal("no child named %s", name);
    return widget;
}

void clickOk(SettingsDialog* dialog) {
    child<QDialogButtonBox>(dialog, "")->button(QDialogButtonBox::Ok)->click();
}
} // namespace

class TestSettingsDialog : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void init() { QSettings().clear(); }
    void valuesRoundTripThroughQSettings();
    void badStoredValuesAreClamped();
    void everyControlHasAnAccessibleName();
    void savedSettingsReachTheWorkerWithTheNextMessage();
};

void TestSettingsDialog::initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_settingsdialog"));
    QStandardPaths::setTestModeEnabled(true);
}

void TestSettingsDialog::valuesRoundTripThroughQSettings() {
    // Defaults: greedy, every core, the system theme.
    const AppSettings defaults = AppSettings::load();
    QVERIFY(defaults.greedy);
    QCOMPARE(defaults.launch.threads, 0);
    QVERIFY(defaults.speculation); // on by default: greedy answers only gain from it
    QVERIFY(defaults.generationSettings(99).speculation);
    QCOMPARE(defaults.theme, QStringLiteral("system"));
    QCOMPARE(defaults.generationSettings(99).temperature, 0.0f);

    SettingsDialog dialog;
    QCOMPARE(dialog.values(), defaults);
    QVERIFY(!child<QDoubleSpinBox>(&dialog, "temperature")->isEnabled()); // greedy
    QVERIFY(child<QCheckBox>(&dialog, "speculation")->isEnabled());
    child<QCheckBox>(&dialog, "speculation")->setChecked(false);
    child<QComboBox>(&dialog, "samplingMode")->setCurrentIndex(1);
    QVERIFY(child<QCheckBox>(&dialog, "speculation")->isEnabled()); // exact when sampling too
    QVERIFY(child<QDoubleSpinBox>(&dialog, "temperature")->isEnabled());
    child<QDoubleSpinBox>(&dialog, "temperature")->setValue(0.8);
    child<QDoubleSpinBox>(&dialog, "topP")->setValue(0.9);
    QVERIFY(!child<QSpinBox>(&dialog, "seed")->isEnabled());
    child<QCheckBox>(&dialog, "fixedSeed")->setChecked(true);
    QVERIFY(child<QSpinBox>(&dialog, "seed")->isEnabled());
    child<QSpinBox>(&dialog, "seed")->setValue(1234);
    child<QCheckBox>(&dialog, "thinkingDefault")->setChecked(false);
    QVERIFY(!child<QComboBox>(&dialog, "effortDefault")->isEnabled());
    child<QComboBox>(&dialog, "effortDefault")->setCurrentText(QStringLiteral("low"));
    child<QComboBox>(&dialog, "theme")->setCurrentIndex(2);
    child<QLineEdit>(&dialog, "modelDir")->setText(QStringLiteral("/models/k3"));
    child<QLineEdit>(&dialog, "trunkDir")->setText(QStringLiteral("/models/k3/trunk"));
    child<QSpinBox>(&dialog, "threads")->setValue(3);
    QCOMPARE(child<QSpinBox>(&dialog, "maxTokens")->value(), 512);
    child<QSpinBox>(&dialog, "maxTokens")->setValue(2000);
    QCOMPARE(child<QSpinBox>(&dialog, "contextLength")->value(), 4096);
    child<QSpinBox>(&dialog, "contextLength")->setValue(8192);
    QCOMPARE(child<QPlainTextEdit>(&dialog, "systemPromptDefault")->toPlainText(), QString());
    child<QPlainTextEdit>(&dialog, "systemPromptDefault")
        ->setPlainText(QStringLiteral("Answer in French.\nBe brief."));
    dialog.accept();

    QSettings settings;
    QCOMPARE(settings.value("sampling/greedy").toBool(), false);
    QCOMPARE(settings.value("sampling/temperature").toDouble(), 0.8);
    QCOMPARE(settings.value("sampling/topP").toDouble(), 0.9);
    QCOMPARE(settings.value("sampling/fixedSeed").toBool(), true);
    QCOMPARE(settings.value("sampling/seed").toInt(), 1234);
    QCOMPARE(settings.value("thinking/enabled").toBool(), false);
    QCOMPARE(settings.value("thinking/effort").toString(), QStringLiteral("low"));
    QCOMPARE(settings.value("appearance/theme").toString(), QStringLiteral("dark"));
    QCOMPARE(settings.value("model/directory").toString(), QStringLiteral("/models/k3"));
    QCOMPARE(settings.value("model/trunkDir").toString(), QStringLiteral("/models/k3/trunk"));
    QCOMPARE(settings.value("engine/threads").toInt(), 3);
    QCOMPARE(settings.value("engine/speculation").toBool(), false);
    QCOMPARE(settings.value("generation/maxTokens").toInt(), 2000);
    QCOMPARE(settings.value("launch/contextLength").toInt(), 8192);
    QCOMPARE(settings.value("generation/systemPrompt").toString(),
             QStringLiteral("Answer in French.\nBe brief."));

    AppSettings expected;
    expected.greedy = false;
    expected.temperature = 0.8;
    expected.topP = 0.9;
    expected.fixedSeed = true;
    expected.seed = 1234;
    expected.thinking = false;
    expected.thinkingEffort = QStringLiteral("low");
    expected.theme = QStringLiteral("dark");
    expected.launch.modelDir = "/models/k3";
    expected.launch.trunkDir = "/models/k3/trunk";
    expected.launch.threads = 3;
    expected.speculation = false;
    expected.maxTokens = 2000;
    expected.launch.contextLength = 8192;
    expected.systemPrompt = QStringLiteral("Answer in French.\nBe brief.");
    QCOMPARE(AppSettings::load(), expected);
    SettingsDialog again;
    QCOMPARE(again.values(), expected);
    const GenerationSettings g = expected.generationSettings(99);
    QCOMPARE(g.temperature, 0.8f);
    QCOMPARE(g.topP, 0.9f);
    QCOMPARE(g.seed, quint64(1234));
    QCOMPARE(g.threads, 3);
    QVERIFY(!g.speculation);
    QCOMPARE(g.maxTokens, 2000);
    expected.fixedSeed = false;
    QCOMPARE(expected.generationSettings(99).seed, quint64(99)); // a new seed per message

    // Restore Defaults resets the preferences but keeps the folders.
    child<QDialogButtonBox>(&again, "")->button(QDialogButtonBox::RestoreDefaults)->click();
    AppSettings restored;
    restored.launch.modelDir = "/models/k3";
    restored.launch.trunkDir = "/models/k3/trunk";
    QCOMPARE(again.values(), restored);
}

void TestSettingsDialog::badStoredValuesAreClamped() {
    QSettings settings;
    settings.setValue("sampling/temperature", 99.0);
    settings.setValue("sampling/topP", -1);
    settings.setValue("sampling/seed", -5);
    settings.setValue("thinking/effort", "extreme");
    settings.setValue("appearance/theme", "purple");
    settings.setValue("engine/threads", "many");
    const AppSettings a = AppSettings::load();
    QCOMPARE(a.temperature, 2.0);
    QCOMPARE(a.topP, 0.01);
    QCOMPARE(a.seed, 0);
    QCOMPARE(a.thinkingEffort, QStringLiteral("max"));
    QCOMPARE(a.theme, QStringLiteral("system"));
    QCOMPARE(a.launch.threads, 0);
}

void TestSettingsDialog::everyControlHasAnAccessibleName() {
    SettingsDialog dialog;
    int controls = 0;
    for (QWidget* w : dialog.findChildren<QWidget*>()) {
        // The line edit inside a spin or combo box belongs to its owner's name.
        if (qobject_cast<QAbstractSpinBox*>(w->parentWidget()) ||
            qobject_cast<QComboBox*>(w->parentWidget()))
            continue;
        if (auto* button = qobject_cast<QAbstractButton*>(w)) {
            ++controls;
            QVERIFY2(!button->accessibleName().isEmpty() || !button->text().isEmpty(),
                     qPrintable(button->objectName()));
        } else if (qobject_cast<QComboBox*>(w) || qobject_cast<QAbstractSpinBox*>(w) ||
                   qobject_cast<QLineEdit*>(w) || qobject_cast<QPlainTextEdit*>(w)) {
            ++controls;
            QVERIFY2(!w->accessibleName().isEmpty(), qPrintable(w->objectName()));
        }
    }
    // 15 settings (the context length and the default system prompt among them), 2 Browse,
    // OK, Cancel, Restore Defaults
    QCOMPARE(controls, 20);
}

void TestSettingsDialog::savedSettingsReachTheWorkerWithTheNextMessage() {
    MainWindow window;
    window.show();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    QSignalSpy ready(&window, &MainWindow::modelReady);
    QueuedSpy applied(window.engine()->worker(), &EngineWorker::settingsApplied);
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    const auto openSettings = [&window]() -> SettingsDialog* {
        window.activateWindow(); // the shortcut needs the window active again after a dialog
        if (!QTest::qWaitForWindowActive(&window)) return nullptr;
        QTest::keySequence(&window, QKeySequence(Qt::CTRL | Qt::Key_Comma));
        auto* dialog = window.findChild<SettingsDialog*>();
        return dialog && dialog->isVisible() ? dialog : nullptr;
    };
    const auto ask = [&](const QString& text) {
        QVERIFY(applied.isEmpty());
        window.sendMessage(text);
        // Emitted on the engine thread, possibly before a wait() could start: poll.
        QTRY_VERIFY_WITH_TIMEOUT(!applied.isEmpty(), 30000);
        window.stopGeneration(); // the settings are what matters here, not the answer
        QVERIFY(finished.wait(30000));
    };

    // A model folder chosen in Settings is loaded; greedy on one thread.
    SettingsDialog* dialog = openSettings();
    QVERIFY(dialog);
    child<QLineEdit>(dialog, "modelDir")->setText(kTinyModel);
    child<QSpinBox>(dialog, "threads")->setValue(1);
    child<QCheckBox>(dialog, "thinkingDefault")->setChecked(false);
    child<QComboBox>(dialog, "effortDefault")->setCurrentText(QStringLiteral("medium"));
    child<QComboBox>(dialog, "theme")->setCurrentIndex(2); // dark
    clickOk(dialog);
    QVERIFY(ready.wait(30000));
    QVERIFY(!window.composer()->thinking());
    QCOMPARE(window.composer()->thinkingEffort(), QStringLiteral("medium"));
    QVERIFY(QApplication::palette().color(QPalette::Window).lightness() < 100);
    ask(QStringLiteral("What is MXFP4?"));
    GenerationSettings seen = applied.takeFirst().at(0).value<GenerationSettings>();
    QCOMPARE(seen.temperature, 0.0f);
    QCOMPARE(seen.topP, 1.0f);
    QCOMPARE(seen.threads, 1);
    QVERIFY(!seen.thinking);

    // Seeded sampling on two threads applies to the very next message.
    QTRY_VERIFY(!window.findChild<SettingsDialog*>()); // the first dialog is gone
    dialog = openSettings();
    QVERIFY(dialog);
    child<QComboBox>(dialog, "samplingMode")->setCurrentIndex(1);
    child<QDoubleSpinBox>(dialog, "temperature")->setValue(0.8);
    child<QDoubleSpinBox>(dialog, "topP")->setValue(0.9);
    child<QCheckBox>(dialog, "fixedSeed")->setChecked(true);
    child<QSpinBox>(dialog, "seed")->setValue(1234);
    child<QSpinBox>(dialog, "threads")->setValue(2);
    child<QComboBox>(dialog, "theme")->setCurrentIndex(0); // back to the system palette
    clickOk(dialog);
    QCOMPARE(ready.count(), 1); // same model folder: no reload
    ask(QStringLiteral("And MXFP8?"));
    seen = applied.takeFirst().at(0).value<GenerationSettings>();
    QCOMPARE(seen.temperature, 0.8f);
    QCOMPARE(seen.topP, 0.9f);
    QCOMPARE(seen.seed, quint64(1234));
    QCOMPARE(seen.threads, 2);
    // 0 threads: back to the engine thread's default.
    QSettings().setValue("engine/threads", 0);
    ask(QStringLiteral("And NVFP4?"));
    seen = applied.takeFirst().at(0).value<GenerationSettings>();
    int fresh = 0; // what any new thread starts with (OMP_NUM_THREADS, else the cores)
    QThread* probe = QThread::create([&fresh] { fresh = omp_get_max_threads(); });
    probe->start();
    probe->wait();
    delete probe;
    QVERIFY(fresh >= 1);
    QCOMPARE(seen.threads, fresh);
    window.store()->remove(window.currentConversationId());
}

QTEST_MAIN(TestSettingsDialog)
#include "tst_settingsdialog.moc"
