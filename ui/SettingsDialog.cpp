#include "SettingsDialog.h"

#include "GigabyteSpinBox.h"
#include "SettingsTable.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QFutureWatcher>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QThread>
#include <QVBoxLayout>
#include <QtConcurrent>

#include <cmath>
#include <limits>

#include <k3/launch.hpp>
#include <k3/memory_plan.hpp>
#include <k3/presets.hpp>
#include <k3/state_cache.hpp>

namespace {
constexpr double kGB = 1e9; // as the presets count

// A folder field with its Browse button.
QWidget* folderRow(QLineEdit* edit, const QString& title, const QString& buttonName) {
    auto* row = new QWidget;
    auto* layout = new QHBoxLayout(row);
    layout->setContentsMargins(0, 0, 0, 0);
    auto* browse = new QPushButton(SettingsDialog::tr("Browse…"));
    browse->setObjectName(buttonName);
    browse->setAccessibleName(SettingsDialog::tr("Browse for the %1").arg(title.toLower()));
    layout->addWidget(edit, 1);
    layout->addWidget(browse);
    QObject::connect(browse, &QPushButton::clicked, edit, [edit, title] {
        const QString dir = QFileDialog::getExistingDirectory(edit->window(), title, edit->text());
        if (!dir.isEmpty()) edit->setText(dir);
    });
    return row;
}

// A spin box holds what the settings table allows for its entry (the engine's ranges for
// the launch numbers), the range a value read back is clamped to.
template <typename Spin, typename T> void setRangeOf(Spin* spin, const Setting<T>& setting) {
    spin->setRange(*setting.min, *setting.max);
}

template <typename W> W* named(W* widget, const char* objectName, const QString& accessible) {
    widget->setObjectName(QString::fromLatin1(objectName));
    widget->setAccessibleName(accessible);
    return widget;
}

QDoubleSpinBox* gbSpin(const char* objectName, const QString& accessible) {
    auto* spin = named(new GigabyteSpinBox, objectName, accessible);
    spin->setRange(0, 100000);
    spin->setDecimals(3); // 1 MB
    spin->setSingleStep(0.25);
    spin->setSuffix(SettingsDialog::tr(" GB"));
    return spin;
}

// The size a budget box stands for. A size set elsewhere (the wizard's, to the byte) is
// shown rounded to the MB: left as shown, it stays exact, so an untouched budget never
// reads as a change.
std::uint64_t bytesOf(const QDoubleSpinBox* spin, const std::optional<std::uint64_t>& shown) {
    if (shown && std::abs(double(*shown) / kGB - spin->value()) < 5e-4) return *shown;
    return std::uint64_t(std::llround(spin->value() * kGB));
}
} // namespace

SettingsDialog::SettingsDialog(QWidget* parent) : QDialog(parent) {
    setObjectName(QStringLiteral("settingsDialog"));
    setWindowTitle(tr("Settings"));
    auto* layout = new QVBoxLayout(this);
    auto* columns = new QHBoxLayout;
    auto* left = new QVBoxLayout;
    left->addWidget(createSamplingGroup());
    left->addWidget(createThinkingGroup());
    left->addWidget(createAppearanceGroup());
    left->addStretch(1);
    auto* right = new QVBoxLayout;
    right->addWidget(createModelGroup());
    right->addWidget(createMemoryGroup());
    right->addStretch(1);
    columns->addLayout(left);
    columns->addLayout(right);
    layout->addLayout(columns);
    layout->addWidget(createButtons());
    setValues(AppSettings::load());
}

QGroupBox* SettingsDialog::createSamplingGroup() {
    m_sampling = named(new QComboBox, "samplingMode", tr("Sampling"));
    m_sampling->addItem(tr("Greedy: always the most likely token"), true);
    m_sampling->addItem(tr("Sample with temperature and top-p"), false);
    m_temperature = named(new QDoubleSpinBox, "temperature", tr("Temperature"));
    setRangeOf(m_temperature, SettingsTable::temperature);
    m_temperature->setSingleStep(0.05);
    m_temperature->setDecimals(2);
    m_topP = named(new QDoubleSpinBox, "topP", tr("Top-p"));
    setRangeOf(m_topP, SettingsTable::topP);
    m_topP->setSingleStep(0.05);
    m_topP->setDecimals(2);
    m_fixedSeed = named(new QCheckBox(tr("Fixed seed")), "fixedSeed", tr("Use a fixed seed"));
    m_fixedSeed->setToolTip(tr("The same seed and prompt give the same answer; without it "
                               "every message draws a new seed."));
    m_seed = named(new QSpinBox, "seed", tr("Seed"));
    setRangeOf(m_seed, SettingsTable::seed);
    connect(m_sampling, &QComboBox::currentIndexChanged, this, &SettingsDialog::updateEnabled);
    connect(m_fixedSeed, &QCheckBox::toggled, this, &SettingsDialog::updateEnabled);

    auto* group = new QGroupBox(tr("Sampling"));
    auto* form = new QFormLayout(group);
    form->addRow(tr("Mode:"), m_sampling);
    form->addRow(tr("Temperature:"), m_temperature);
    form->addRow(tr("Top-p:"), m_topP);
    auto* seedRow = new QHBoxLayout;
    seedRow->addWidget(m_fixedSeed);
    seedRow->addWidget(m_seed, 1);
    form->addRow(tr("Seed:"), seedRow);
    return group;
}

QGroupBox* SettingsDialog::createThinkingGroup() {
    m_thinking = named(new QCheckBox(tr("Think before answering")), "thinkingDefault",
                       tr("Think before answering by default"));
    m_effort = named(new QComboBox, "effortDefault", tr("Default thinking effort"));
    m_effort->addItems(AppSettings::efforts());
    m_maxTokens = named(new QSpinBox, "maxTokens", tr("Longest answer in tokens"));
    setRangeOf(m_maxTokens, SettingsTable::maxTokens);
    m_maxTokens->setSuffix(tr(" tokens"));
    m_imagePatchLimit =
        named(new QSpinBox, "imagePatchLimit", tr("Largest image in 14-pixel patches"));
    setRangeOf(m_imagePatchLimit, SettingsTable::imagePatchLimit);
    m_imagePatchLimit->setSingleStep(1024);
    m_imagePatchLimit->setSuffix(tr(" patches"));
    m_imagePatchLimit->setToolTip(
        tr("A larger image is scaled down to this many 14x14-pixel patches; every four cost "
           "one prompt position (%1: %2 positions). The release allows %3.")
            .arg(AppSettings::kDefaultImagePatchLimit)
            .arg(AppSettings::kDefaultImagePatchLimit / 4)
            .arg(AppSettings::kMaxImagePatchLimit));
    m_systemPrompt = named(new QPlainTextEdit, "systemPromptDefault",
                           tr("Default system prompt for new conversations"));
    m_systemPrompt->setPlaceholderText(tr("none"));
    m_systemPrompt->setTabChangesFocus(true);
    m_systemPrompt->setFixedHeight(m_systemPrompt->fontMetrics().lineSpacing() * 3 + 12);
    connect(m_thinking, &QCheckBox::toggled, this, &SettingsDialog::updateEnabled);

    auto* group = new QGroupBox(tr("Thinking (default for new messages)"));
    auto* form = new QFormLayout(group);
    form->addRow(m_thinking);
    form->addRow(tr("Effort:"), m_effort);
    form->addRow(tr("Longest answer:"), m_maxTokens);
    form->addRow(tr("Largest image:"), m_imagePatchLimit);
    form->addRow(tr("System prompt:"), m_systemPrompt);
    return group;
}

QGroupBox* SettingsDialog::createAppearanceGroup() {
    m_theme = named(new QComboBox, "theme", tr("Theme"));
    m_theme->addItem(tr("Follow the system"), QStringLiteral("system"));
    m_theme->addItem(tr("Light"), QStringLiteral("light"));
    m_theme->addItem(tr("Dark"), QStringLiteral("dark"));
    auto* group = new QGroupBox(tr("Appearance"));
    auto* form = new QFormLayout(group);
    form->addRow(tr("Theme:"), m_theme);
    return group;
}

QGroupBox* SettingsDialog::createModelGroup() {
    m_modelDir = named(new QLineEdit, "modelDir", tr("Model folder"));
    m_trunkDir = named(new QLineEdit, "trunkDir", tr("Trunk folder"));
    m_trunkDir->setPlaceholderText(tr("none: every weight stays in memory"));
    m_draftDir = named(new QLineEdit, "draftDir", tr("Draft folder"));
    m_draftDir->setPlaceholderText(tr("none: guesses come from the conversation's own text"));
    m_draftDir->setToolTip(tr("A small draft model made with k3 pack --draft guesses the next "
                              "tokens for speculative decoding: the same answers, often faster. "
                              "It stays in memory and counts in the memory plan."));
    m_threads = named(new QSpinBox, "threads", tr("Engine threads"));
    setRangeOf(m_threads, SettingsTable::threads);
    m_threads->setSpecialValueText(tr("all cores (%1)").arg(QThread::idealThreadCount()));
    m_contextLength = named(new QSpinBox, "contextLength", tr("Context length in tokens"));
    setRangeOf(m_contextLength, SettingsTable::contextLength);
    m_contextLength->setSingleStep(1024);
    m_contextLength->setSuffix(tr(" tokens"));
    m_contextLength->setToolTip(tr("The longest conversation the model holds (its KV cache). "
                                   "Applied when the model is loaded next: OK reloads it."));
    m_prefillChunk = named(new QSpinBox, "prefillChunk", tr("Prompt positions per chunk"));
    setRangeOf(m_prefillChunk, SettingsTable::prefillChunk);
    // The plan's: at least kDefaultPrefillChunk, more with an expert cache (one pass reads
    // the trunk once for the whole chunk).
    m_prefillChunk->setSpecialValueText(tr("the plan's"));
    m_prefillChunk->setSuffix(tr(" positions"));
    m_speculation =
        named(new QCheckBox(tr("Speculative decoding")), "speculation", tr("Speculative decoding"));
    m_speculation->setToolTip(
        tr("When the answer repeats text from the conversation, check several guessed tokens "
           "in one pass over the weights. Greedy answers are exactly the same, sampled ones "
           "are drawn from exactly the same distribution; they only come faster."));
    m_maxSpeculation = named(new QSpinBox, "maxSpeculation", tr("Most tokens guessed at once"));
    setRangeOf(m_maxSpeculation, SettingsTable::maxSpeculation);
    m_maxSpeculation->setSuffix(tr(" tokens"));
    m_maxSpeculation->setToolTip(tr("The model holds a copy of its state for each: a wider "
                                    "guess costs memory. Applied when the model is loaded."));
    auto* contextNote = new QLabel(tr("applied at the next load"));
    contextNote->setObjectName(QStringLiteral("contextLengthNote"));

    auto* group = new QGroupBox(tr("Model"));
    auto* form = new QFormLayout(group);
    form->addRow(tr("Model folder:"),
                 folderRow(m_modelDir, tr("Model folder"), QStringLiteral("browseModel")));
    form->addRow(tr("Trunk folder:"),
                 folderRow(m_trunkDir, tr("Trunk folder"), QStringLiteral("browseTrunk")));
    form->addRow(tr("Draft folder:"),
                 folderRow(m_draftDir, tr("Draft folder"), QStringLiteral("browseDraft")));
    form->addRow(tr("Threads:"), m_threads);
    auto* contextRow = new QHBoxLayout;
    contextRow->addWidget(m_contextLength, 1);
    contextRow->addWidget(contextNote);
    form->addRow(tr("Context length:"), contextRow);
    form->addRow(tr("Prefill chunk:"), m_prefillChunk);
    form->addRow(m_speculation);
    form->addRow(tr("Longest guess:"), m_maxSpeculation);
    return group;
}

QGroupBox* SettingsDialog::createMemoryGroup() {
    m_preset = named(new QComboBox, "memoryPreset", tr("Memory preset"));
    m_preset->addItem(tr("none"), QString());
    for (const k3::Preset& p : k3::presets())
        m_preset->addItem(tr("%1: trunk %2 GB, cache %3 GB")
                              .arg(QString::fromUtf8(p.name.data(), qsizetype(p.name.size())))
                              .arg(p.trunkGB)
                              .arg(p.cacheGB),
                          QString::fromUtf8(p.name.data(), qsizetype(p.name.size())));
    m_trunkSet = named(new QCheckBox(tr("Trunk")), "trunkBudgetSet", tr("Set the trunk budget"));
    m_trunkSet->setToolTip(tr("Pinned layers plus the streaming ring; used with a packed "
                              "trunk folder only (0: the smallest ring). Off: the preset's, "
                              "or every layer pinned without a preset."));
    m_trunkGB = gbSpin("trunkBudget", tr("Trunk budget in GB"));
    m_cacheSet = named(new QCheckBox(tr("Expert cache")), "cacheBudgetSet",
                       tr("Set the expert cache budget"));
    m_cacheSet->setToolTip(tr("Routed experts kept in memory, the rest read from disk when "
                              "asked for (0: every expert in memory). Off: the preset's, or "
                              "every expert in memory without a preset."));
    m_cacheGB = gbSpin("cacheBudget", tr("Expert cache budget in GB"));
    m_pinMode = named(new QComboBox, "pinMode", tr("How pinned layers are held"));
    m_pinMode->addItem(tr("measured: compressed where that is faster"),
                       QString::fromLatin1(k3::pinModeName(k3::PinMode::Measured)));
    m_pinMode->addItem(tr("raw: decoded once, at load"),
                       QString::fromLatin1(k3::pinModeName(k3::PinMode::Raw)));
    m_pinMode->addItem(tr("compressed: more layers pinned, decoded at each use"),
                       QString::fromLatin1(k3::pinModeName(k3::PinMode::Compressed)));
    m_pinMode->setToolTip(tr("For a compressed packed trunk only: the same answers in every "
                             "mode, only speed and memory differ."));
    m_budgetSummary = new QLabel;
    m_budgetSummary->setObjectName(QStringLiteral("budgetSummary"));
    for (QCheckBox* box : {m_trunkSet, m_cacheSet})
        connect(box, &QCheckBox::toggled, this, &SettingsDialog::updateEnabled);
    connect(m_preset, &QComboBox::currentIndexChanged, this, &SettingsDialog::updateEnabled);
    for (QDoubleSpinBox* spin : {m_trunkGB, m_cacheGB})
        connect(spin, &QDoubleSpinBox::valueChanged, this, &SettingsDialog::updateBudgetSummary);

    m_stateCache = named(new QCheckBox(tr("Saved states")), "stateCache",
                         tr("Keep conversation states on disk"));
    m_stateCache->setToolTip(
        tr("Keep what the model has read of each conversation on disk, so a follow-up, a "
           "conversation opened again or a new one with the same settings reads only what is "
           "new (the same answers). The least recently used states go first when the "
           "folder is over this size."));
    m_stateCacheGB = gbSpin("stateCacheBudget", tr("Disk space for saved states in GB"));
    m_stateCacheGB->setRange(0.001, 100000);
    m_stateCacheUsage = named(new QLabel, "stateCacheUsage", tr("Saved states on disk"));
    m_freeStates = named(new QPushButton(tr("Free space")), "freeStates",
                         tr("Delete every saved conversation state"));
    m_freeStates->setToolTip(tr("Delete every saved state: conversations stay, their next "
                                "message reads them again."));
    connect(m_stateCache, &QCheckBox::toggled, this, &SettingsDialog::updateEnabled);
    connect(m_freeStates, &QPushButton::clicked, this, [this] { showStateCacheUsage(true); });
    auto* usageRow = new QHBoxLayout;
    usageRow->addWidget(m_stateCacheUsage, 1);
    usageRow->addWidget(m_freeStates);

    auto* group = new QGroupBox(tr("Memory (applied at the next load: OK reloads the model)"));
    auto* form = new QFormLayout(group);
    form->addRow(tr("Preset:"), m_preset);
    form->addRow(m_trunkSet, m_trunkGB);
    form->addRow(m_cacheSet, m_cacheGB);
    form->addRow(tr("In use:"), m_budgetSummary);
    form->addRow(tr("Pinned layers:"), m_pinMode);
    form->addRow(m_stateCache, m_stateCacheGB);
    form->addRow(tr("On disk:"), usageRow);
    showStateCacheUsage(false);
    return group;
}

QDialogButtonBox* SettingsDialog::createButtons() {
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel |
                                         QDialogButtonBox::RestoreDefaults);
    QPushButton* restore = buttons->button(QDialogButtonBox::RestoreDefaults);
    restore->setAccessibleName(tr("Restore the default settings"));
    connect(buttons, &QDialogButtonBox::accepted, this, &SettingsDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &SettingsDialog::reject);
    connect(restore, &QPushButton::clicked, this, &SettingsDialog::restoreDefaults);
    return buttons;
}

void SettingsDialog::restoreDefaults() {
    // The folders and the memory budget are where the model is and what the machine
    // holds, not preferences: they stay.
    const k3::LaunchConfig shown = values().launch; // an untouched budget to the byte
    AppSettings defaults;
    defaults.launch.modelDir = shown.modelDir;
    defaults.launch.trunkDir = shown.trunkDir;
    defaults.launch.draftDir = shown.draftDir;
    defaults.launch.budget = shown.budget;
    setValues(defaults);
}

k3::LaunchBudget SettingsDialog::budget() const {
    k3::LaunchBudget b;
    b.preset = m_preset->currentData().toString().toStdString();
    if (m_trunkSet->isChecked()) b.trunkBytes = bytesOf(m_trunkGB, m_launch.budget.trunkBytes);
    if (m_cacheSet->isChecked()) b.cacheBytes = bytesOf(m_cacheGB, m_launch.budget.cacheBytes);
    b.modelTablesOnDisk = m_launch.budget.modelTablesOnDisk; // not shown: kept as it was
    return b;
}

AppSettings SettingsDialog::values() const {
    AppSettings a;
    a.greedy = m_sampling->currentData().toBool();
    a.temperature = m_temperature->value();
    a.topP = m_topP->value();
    a.fixedSeed = m_fixedSeed->isChecked();
    a.seed = m_seed->value();
    a.thinking = m_thinking->isChecked();
    a.thinkingEffort = m_effort->currentText();
    a.theme = m_theme->currentData().toString();
    a.launch.modelDir = m_modelDir->text().trimmed().toStdString();
    a.launch.trunkDir = m_trunkDir->text().trimmed().toStdString();
    a.launch.draftDir = m_draftDir->text().trimmed().toStdString();
    a.launch.pinMode = k3::pinModeNamed(m_pinMode->currentData().toString().toStdString())
                           .value_or(k3::PinMode::Measured);
    a.launch.budget = budget();
    a.launch.threads = m_threads->value();
    a.launch.prefillChunk = m_prefillChunk->value();
    a.launch.contextLength = m_contextLength->value();
    a.launch.maxSpeculation = m_maxSpeculation->value();
    a.launch.stateCacheDir =
        m_stateCache->isChecked()
            ? std::filesystem::path(AppSettings::stateCacheDirectory().toStdString())
            : std::filesystem::path();
    // 0 stands for the engine's default: kept while the box shows that default.
    const std::uint64_t stateBytes =
        m_launch.stateCacheBytes > 0 ? m_launch.stateCacheBytes : k3::kDefaultStateCacheBytes;
    a.launch.stateCacheBytes = bytesOf(m_stateCacheGB, stateBytes);
    if (m_launch.stateCacheBytes == 0 && a.launch.stateCacheBytes == k3::kDefaultStateCacheBytes)
        a.launch.stateCacheBytes = 0;
    a.speculation = m_speculation->isChecked();
    a.maxTokens = m_maxTokens->value();
    a.imagePatchLimit = m_imagePatchLimit->value();
    a.systemPrompt = m_systemPrompt->toPlainText();
    return a;
}

void SettingsDialog::setValues(const AppSettings& a) {
    m_sampling->setCurrentIndex(a.greedy ? 0 : 1);
    m_temperature->setValue(a.temperature);
    m_topP->setValue(a.topP);
    m_fixedSeed->setChecked(a.fixedSeed);
    m_seed->setValue(a.seed);
    m_thinking->setChecked(a.thinking);
    m_effort->setCurrentText(a.thinkingEffort);
    m_theme->setCurrentIndex(std::max(0, m_theme->findData(a.theme)));
    m_launch = a.launch;
    const k3::LaunchConfig& l = a.launch;
    m_modelDir->setText(QString::fromStdString(l.modelDir.string()));
    m_trunkDir->setText(QString::fromStdString(l.trunkDir.string()));
    m_draftDir->setText(QString::fromStdString(l.draftDir.string()));
    m_pinMode->setCurrentIndex(
        std::max(0, m_pinMode->findData(QString::fromLatin1(k3::pinModeName(l.pinMode)))));
    m_threads->setValue(l.threads);
    m_contextLength->setValue(l.contextLength);
    m_prefillChunk->setValue(l.prefillChunk);
    m_maxSpeculation->setValue(l.maxSpeculation);
    m_stateCache->setChecked(!l.stateCacheDir.empty());
    m_stateCacheGB->setValue(
        double(l.stateCacheBytes > 0 ? l.stateCacheBytes : k3::kDefaultStateCacheBytes) / kGB);
    m_preset->setCurrentIndex(
        std::max(0, m_preset->findData(QString::fromStdString(l.budget.preset))));
    m_trunkSet->setChecked(l.budget.trunkBytes.has_value());
    m_cacheSet->setChecked(l.budget.cacheBytes.has_value());
    if (l.budget.trunkBytes) m_trunkGB->setValue(double(*l.budget.trunkBytes) / kGB);
    if (l.budget.cacheBytes) m_cacheGB->setValue(double(*l.budget.cacheBytes) / kGB);
    m_speculation->setChecked(a.speculation);
    m_maxTokens->setValue(a.maxTokens);
    m_imagePatchLimit->setValue(a.imagePatchLimit);
    m_systemPrompt->setPlainText(a.systemPrompt);
    updateEnabled();
}

void SettingsDialog::showStateCacheUsage(bool clearFirst) {
    m_stateCacheUsage->setText(clearFirst ? tr("deleting…") : tr("counting…"));
    m_freeStates->setEnabled(false);
    auto* watcher = new QFutureWatcher<k3::StateCacheUsage>(this);
    connect(watcher, &QFutureWatcher<k3::StateCacheUsage>::finished, this, [this, watcher] {
        const k3::StateCacheUsage usage = watcher->result();
        watcher->deleteLater();
        m_stateCacheUsage->setText(
            usage.files == 0 ? tr("no saved state")
                             : (usage.files == 1 ? tr("1 saved state, %1")
                                                 : tr("%1 saved states, %2").arg(usage.files))
                                   .arg(QString::fromStdString(k3::formatBytes(usage.bytes))));
        m_freeStates->setEnabled(usage.files > 0);
    });
    const std::filesystem::path dir = AppSettings::stateCacheDirectory().toStdString();
    watcher->setFuture(QtConcurrent::run([dir, clearFirst] {
        if (clearFirst) k3::clearStateCache(dir);
        return k3::stateCacheUsage(dir);
    }));
}

void SettingsDialog::updateEnabled() {
    m_stateCacheGB->setEnabled(m_stateCache->isChecked());
    const bool sample = !m_sampling->currentData().toBool();
    m_temperature->setEnabled(sample);
    m_topP->setEnabled(sample);
    m_fixedSeed->setEnabled(sample);
    m_seed->setEnabled(sample && m_fixedSeed->isChecked());
    m_effort->setEnabled(m_thinking->isChecked());
    // A size not set shows what applies instead: the preset's, else 0.
    const auto preset = k3::findPreset(m_preset->currentData().toString().toStdString());
    m_trunkGB->setEnabled(m_trunkSet->isChecked());
    m_cacheGB->setEnabled(m_cacheSet->isChecked());
    if (!m_trunkSet->isChecked()) m_trunkGB->setValue(preset ? preset->trunkGB : 0);
    if (!m_cacheSet->isChecked()) m_cacheGB->setValue(preset ? preset->cacheGB : 0);
    updateBudgetSummary();
}

void SettingsDialog::updateBudgetSummary() {
    m_budgetSummary->setText(QString::fromStdString(budget().describe()));
}

void SettingsDialog::accept() {
    values().save();
    QDialog::accept();
}
