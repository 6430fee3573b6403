// The Settings dialog: values round-trip through QSettings, bad stored values are
// clamped, every control has an accessible name, and what is saved reaches the engine
// worker with the next message (greedy vs seeded sampling, the thread count). The whole
// launch configuration is edited there: a changed memory budget reloads the model with
// it, an unchanged one does not, and one that fails leaves the working model and setup.

#include <QAbstractSpinBox>
#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>

#include "QueuedSpy.h"
#include <QMessageBox>
#include <QSpinBox>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>

#include <omp.h>

#include "AppSettings.h"
#include "MainWindow.h"
#include "ModelLoader.h"
#include "Settings.h"
#include "SettingsDialog.h"
#include "SettingsTable.h"
#include "chat/ChatController.h"
#include "chat/ConversationStore.h"
#include "chat/MessageComposer.h"
#include "worker/EngineController.h"

#include <k3/pack.hpp>

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
    void tableWritesSignalOnceAndReadsBounded();
    void everyControlHasAnAccessibleName();
    void savedSettingsReachTheWorkerWithTheNextMessage();
    void changedTrunkBudgetIsSavedAndReloads();
    void unchangedLaunchDoesNotReload();
    void launchThatFailsKeepsTheWorkingModel();

private:
    // k3_tiny_a with a packed trunk (in m_tmp) and a wizard-like budget, loaded.
    k3::LaunchConfig loadStreamed(MainWindow& window);
    SettingsDialog* openSettings(MainWindow& window);

    QTemporaryDir m_tmp;
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
    QCOMPARE(child<QLineEdit>(&dialog, "draftDir")->text(), QString()); // prompt lookup
    child<QLineEdit>(&dialog, "draftDir")->setText(QStringLiteral("/models/k3/draft"));
    QCOMPARE(child<QComboBox>(&dialog, "pinMode")->currentData().toString(),
             QStringLiteral("measured"));
    child<QComboBox>(&dialog, "pinMode")->setCurrentIndex(2);
    child<QSpinBox>(&dialog, "threads")->setValue(3);
    QCOMPARE(child<QSpinBox>(&dialog, "maxTokens")->value(), 512);
    child<QSpinBox>(&dialog, "maxTokens")->setValue(2000);
    // Issue 33: the image cap, the laptop default; the release's 65,536 is the top.
    QCOMPARE(child<QSpinBox>(&dialog, "imagePatchLimit")->value(), 4096);
    QCOMPARE(child<QSpinBox>(&dialog, "imagePatchLimit")->maximum(), 65536);
    child<QSpinBox>(&dialog, "imagePatchLimit")->setValue(16384);
    QCOMPARE(child<QSpinBox>(&dialog, "contextLength")->value(), 4096);
    child<QSpinBox>(&dialog, "contextLength")->setValue(8192);
    QCOMPARE(child<QPlainTextEdit>(&dialog, "systemPromptDefault")->toPlainText(), QString());
    child<QPlainTextEdit>(&dialog, "systemPromptDefault")
        ->setPlainText(QStringLiteral("Answer in French.\nBe brief."));
    QCOMPARE(child<QSpinBox>(&dialog, "prefillChunk")->value(), 0);
    child<QSpinBox>(&dialog, "prefillChunk")->setValue(32);
    QCOMPARE(child<QSpinBox>(&dialog, "maxSpeculation")->value(), 16);
    child<QSpinBox>(&dialog, "maxSpeculation")->setValue(8);
    // Memory: the laptop preset with its cache replaced by 2.5 GB.
    QCOMPARE(child<QComboBox>(&dialog, "memoryPreset")->currentIndex(), 0); // none
    QVERIFY(!child<QDoubleSpinBox>(&dialog, "trunkBudget")->isEnabled());
    child<QComboBox>(&dialog, "memoryPreset")->setCurrentIndex(2);         // ultra, laptop, ...
    QCOMPARE(child<QDoubleSpinBox>(&dialog, "trunkBudget")->value(), 3.0); // the preset's
    QCOMPARE(child<QDoubleSpinBox>(&dialog, "cacheBudget")->value(), 1.0);
    child<QCheckBox>(&dialog, "cacheBudgetSet")->setChecked(true);
    QVERIFY(child<QDoubleSpinBox>(&dialog, "cacheBudget")->isEnabled());
    child<QDoubleSpinBox>(&dialog, "cacheBudget")->setValue(2.5);
    QCOMPARE(child<QLabel>(&dialog, "budgetSummary")->text(),
             QStringLiteral("preset laptop, cache 2.50 GB"));
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
    QCOMPARE(settings.value("model/draftDir").toString(), QStringLiteral("/models/k3/draft"));
    QCOMPARE(settings.value("launch/pinMode").toString(), QStringLiteral("compressed"));
    QCOMPARE(settings.value("engine/threads").toInt(), 3);
    QCOMPARE(settings.value("engine/speculation").toBool(), false);
    QCOMPARE(settings.value("generation/maxTokens").toInt(), 2000);
    QCOMPARE(settings.value("images/patchLimit").toInt(), 16384);
    QCOMPARE(settings.value("launch/contextLength").toInt(), 8192);
    QCOMPARE(settings.value("launch/prefillChunk").toInt(), 32);
    QCOMPARE(settings.value("launch/maxSpeculation").toInt(), 8);
    QCOMPARE(settings.value("launch/preset").toString(), QStringLiteral("laptop"));
    QVERIFY(!settings.contains("launch/trunkBytes")); // the preset's
    QCOMPARE(settings.value("launch/cacheBytes").toULongLong(), 2'500'000'000ull);
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
    expected.launch.draftDir = "/models/k3/draft";
    expected.launch.pinMode = k3::PinMode::Compressed;
    expected.launch.threads = 3;
    expected.speculation = false;
    expected.maxTokens = 2000;
    expected.imagePatchLimit = 16384;
    expected.launch.contextLength = 8192;
    expected.launch.prefillChunk = 32;
    expected.launch.maxSpeculation = 8;
    expected.launch.budget.preset = "laptop";
    expected.launch.budget.cacheBytes = 2'500'000'000ull;
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
    QCOMPARE(g.imagePatchLimit, 16384); // what the engine thread prepares images with
    expected.fixedSeed = false;
    QCOMPARE(expected.generationSettings(99).seed, quint64(99)); // a new seed per message

    // Restore Defaults resets the preferences but keeps the folders and the budget.
    child<QDialogButtonBox>(&again, "")->button(QDialogButtonBox::RestoreDefaults)->click();
    AppSettings restored;
    restored.launch.modelDir = "/models/k3";
    restored.launch.trunkDir = "/models/k3/trunk";
    restored.launch.draftDir = "/models/k3/draft";
    restored.launch.budget = expected.launch.budget;
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
    // The engine's ranges (k3::validate): a hand-edited file is brought inside them.
    settings.setValue("launch/contextLength", 1 << 24);
    settings.setValue("launch/prefillChunk", -3);
    settings.setValue("launch/maxSpeculation", 99);
    settings.setValue("launch/pinMode", "sideways");
    settings.setValue("launch/cacheBytes", "18446744073709551615");
    settings.setValue("launch/preset", "");
    settings.setValue("images/patchLimit", 999999);
    const AppSettings a = AppSettings::load();
    QCOMPARE(a.imagePatchLimit, 65536); // the release's, the most the engine reads
    QCOMPARE(a.launch.contextLength, 1 << 20);
    QCOMPARE(a.launch.prefillChunk, 0);
    QCOMPARE(a.launch.maxSpeculation, 32);
    QVERIFY(a.launch.pinMode == k3::PinMode::Measured);
    QCOMPARE(a.launch.budget.cacheBytes, std::optional<std::uint64_t>(k3::kMaxBudgetBytes));
    QVERIFY(k3::validate(a.launch).size() == 1); // only the missing model folder
    SettingsDialog dialog;
    QCOMPARE(child<QSpinBox>(&dialog, "contextLength")->maximum(), k3::kContextRange.max);
    QCOMPARE(child<QSpinBox>(&dialog, "contextLength")->minimum(), k3::kContextRange.min);
    QCOMPARE(a.temperature, 2.0);
    QCOMPARE(a.topP, 0.01);
    QCOMPARE(a.seed, 0);
    QCOMPARE(a.thinkingEffort, QStringLiteral("max"));
    QCOMPARE(a.theme, QStringLiteral("system"));
    QCOMPARE(a.launch.threads, 0);
}

// The settings table (SettingsTable.h through Settings): the key every earlier k3chat
// wrote, the engine's ranges for launch numbers, one changed(key) per real change.
void TestSettingsDialog::tableWritesSignalOnceAndReadsBounded() {
    QSignalSpy changed(Settings::instance(), &Settings::changed);
    Settings::setValue(SettingsTable::maxTokens, 100);
    QCOMPARE(changed.count(), 1);
    QCOMPARE(changed.at(0).at(0).toString(), QStringLiteral("generation/maxTokens"));
    QCOMPARE(QSettings().value("generation/maxTokens").toInt(), 100);
    Settings::setValue(SettingsTable::maxTokens, 100); // the same value: no signal
    QCOMPARE(changed.count(), 1);
    QSettings().setValue("generation/maxTokens", 0); // a hand edit below the range
    QCOMPARE(Settings::value(SettingsTable::maxTokens), 1);
    Settings::remove(SettingsTable::maxTokens);
    QCOMPARE(changed.count(), 2);
    QCOMPARE(Settings::value(SettingsTable::maxTokens), 512);
    QCOMPARE(Settings::stored(SettingsTable::maxTokens), std::nullopt);
    Settings::remove(SettingsTable::maxTokens); // already absent: no signal
    QCOMPARE(changed.count(), 2);
    QCOMPARE(*SettingsTable::contextLength.min, k3::kContextRange.min);
    QCOMPARE(*SettingsTable::contextLength.max, k3::kContextRange.max);
    QCOMPARE(*SettingsTable::prefillChunk.max, k3::kPrefillChunkRange.max);
    QCOMPARE(*SettingsTable::maxSpeculation.max, k3::kSpeculationRange.max);
    QCOMPARE(*SettingsTable::threads.max, k3::kThreadsRange.max);
    // A whole launch saved: one signal per key whose value changed, none when saved again.
    k3::LaunchConfig launch = AppSettings::defaultLaunch();
    launch.contextLength = 2048;
    AppSettings::saveLaunch(launch);
    const qsizetype afterFirstSave = changed.count();
    QVERIFY(afterFirstSave > 2);
    AppSettings::saveLaunch(launch);
    QCOMPARE(changed.count(), afterFirstSave);
    QCOMPARE(AppSettings::loadLaunch().contextLength, 2048);
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
    // 27 settings (the context length, the default system prompt, the prefill chunk, the
    // speculation width, the draft folder, the pin mode, the preset and two budgets with
    // their boxes, the saved states' box and size, the largest image among them), 3
    // Browse, Free space, OK, Cancel, Restore Defaults
    QCOMPARE(controls, 34);
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
        window.chat()->send(text);
        // Emitted on the engine thread, possibly before a wait() could start: poll.
        QTRY_VERIFY_WITH_TIMEOUT(!applied.isEmpty(), 30000);
        window.chat()->stop(); // the settings are what matters here, not the answer
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

k3::LaunchConfig TestSettingsDialog::loadStreamed(MainWindow& window) {
    const QString trunk = m_tmp.filePath(QStringLiteral("trunk"));
    if (!QFileInfo::exists(trunk)) k3::packTrunk(kTinyModel.toStdString(), trunk.toStdString());
    k3::LaunchConfig config;
    config.modelDir = kTinyModel.toStdString();
    config.trunkDir = trunk.toStdString();
    // Sizes to the byte, as the wizard computes them: shown rounded, kept exact.
    config.budget = k3::LaunchBudget::ofBytes(300'123, 50'001);
    window.show();
    QSignalSpy ready(&window, &MainWindow::modelReady);
    window.loader()->loadModel(config);
    if (!ready.wait(30000)) qFatal("the streamed k3_tiny_a did not load");
    return config;
}

SettingsDialog* TestSettingsDialog::openSettings(MainWindow& window) {
    window.showSettings();
    auto* dialog = window.findChild<SettingsDialog*>();
    if (!dialog || !dialog->isVisible()) qFatal("Settings did not open");
    return dialog;
}

// Settings > Memory > Trunk: OK saves the whole launch with the new budget and the
// worker opens exactly that configuration; the status bar says which budget is in use.
void TestSettingsDialog::changedTrunkBudgetIsSavedAndReloads() {
    MainWindow window;
    QueuedSpy loaded(window.engine()->worker(), &EngineWorker::modelLoaded);
    const k3::LaunchConfig before = loadStreamed(window);
    QTRY_COMPARE(loaded.count(), 1);
    QCOMPARE(AppSettings::loadLaunch(), before);

    SettingsDialog* dialog = openSettings(window);
    QVERIFY(child<QCheckBox>(dialog, "trunkBudgetSet")->isChecked());
    QCOMPARE(child<QDoubleSpinBox>(dialog, "trunkBudget")->value(), 0.0); // 300 kB, rounded
    child<QDoubleSpinBox>(dialog, "trunkBudget")->setValue(0.002);        // 2 MB
    QSignalSpy ready(&window, &MainWindow::modelReady);
    clickOk(dialog);

    k3::LaunchConfig expected = before;
    expected.budget.trunkBytes = 2'000'000;
    QCOMPARE(AppSettings::loadLaunch(), expected); // the cache kept to the byte
    QVERIFY(window.engine()->isBusy());            // the load was queued with OK
    QVERIFY(ready.wait(30000));
    QTRY_COMPARE(loaded.count(), 2);
    QCOMPARE(loaded.last().at(0).value<ModelInfo>().launch, expected);
    QCOMPARE(window.launchConfig(), expected);
    QCOMPARE(AppSettings::loadLaunch(), expected);
    const QString status = window.statusBar()->currentMessage();
    QVERIFY2(status.startsWith(QStringLiteral("k3_tiny_a · trunk 2.00 MB / cache 50.00 KB "
                                              "streamed")),
             qPrintable(status));
}

// OK with the launch as it was (the budgets shown rounded, the threads changed: they
// apply to the next message) reloads nothing and saves the same launch.
void TestSettingsDialog::unchangedLaunchDoesNotReload() {
    MainWindow window;
    QueuedSpy loaded(window.engine()->worker(), &EngineWorker::modelLoaded);
    QueuedSpy failed(window.engine()->worker(), &EngineWorker::loadFailed);
    const k3::LaunchConfig before = loadStreamed(window);
    QTRY_COMPARE(loaded.count(), 1);

    SettingsDialog* dialog = openSettings(window);
    child<QComboBox>(dialog, "samplingMode")->setCurrentIndex(1);
    clickOk(dialog);
    QVERIFY(!window.engine()->isBusy()); // nothing was queued
    QCOMPARE(AppSettings::loadLaunch(), before);

    QTRY_VERIFY(!window.findChild<SettingsDialog*>());
    dialog = openSettings(window);
    child<QSpinBox>(dialog, "threads")->setValue(1);
    clickOk(dialog);
    QVERIFY(!window.engine()->isBusy());
    k3::LaunchConfig oneThread = before;
    oneThread.threads = 1;
    QCOMPARE(AppSettings::loadLaunch(), oneThread);
    QCOMPARE(window.launchConfig(), oneThread);

    // Every command queued so far has run on the engine thread and its answer is here: a
    // load queued by OK would show as a second modelLoaded (or a loadFailed).
    flushWorkerThread(window.engine()->worker());
    QCOMPARE(loaded.count(), 1);
    QCOMPARE(failed.count(), 0);
    QVERIFY(window.composer()->isReady());
}

// A launch that cannot open (a model folder that is not there) fails the load: the model
// that worked answers on, and what Settings saved goes back to it so the next start opens
// what works.
void TestSettingsDialog::launchThatFailsKeepsTheWorkingModel() {
    MainWindow window;
    const k3::LaunchConfig before = loadStreamed(window);
    const QString status = window.statusBar()->currentMessage();
    SettingsDialog* dialog = openSettings(window);
    child<QLineEdit>(dialog, "modelDir")->setText(m_tmp.filePath(QStringLiteral("missing")));
    clickOk(dialog);
    QCOMPARE(AppSettings::loadLaunch().modelDir.string(),
             m_tmp.filePath(QStringLiteral("missing")).toStdString()); // saved with OK
    QMessageBox* box = nullptr;
    QTRY_VERIFY_WITH_TIMEOUT(
        (box = window.findChild<QMessageBox*>(QStringLiteral("loadFailedBox"))) != nullptr, 30000);
    QVERIFY2(box->text().endsWith(QStringLiteral("k3_tiny_a is still loaded.")),
             qPrintable(box->text()));
    box->close();
    QCOMPARE(AppSettings::loadLaunch(), before);
    QCOMPARE(window.launchConfig(), before);
    QCOMPARE(window.statusBar()->currentMessage(), status);
    QVERIFY(window.composer()->isReady());
}

QTEST_MAIN(TestSettingsDialog)
#include "tst_settingsdialog.moc"
