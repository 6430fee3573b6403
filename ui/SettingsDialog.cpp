#include "SettingsDialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QThread>
#include <QVBoxLayout>

#include <limits>

namespace {
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
} // namespace

SettingsDialog::SettingsDialog(QWidget* parent)
    : QDialog(parent), m_sampling(new QComboBox), m_temperature(new QDoubleSpinBox),
      m_topP(new QDoubleSpinBox), m_fixedSeed(new QCheckBox(tr("Fixed seed"))),
      m_seed(new QSpinBox), m_thinking(new QCheckBox(tr("Think before answering"))),
      m_speculation(new QCheckBox(tr("Speculative decoding"))), m_maxTokens(new QSpinBox),
      m_effort(new QComboBox), m_theme(new QComboBox), m_modelDir(new QLineEdit),
      m_trunkDir(new QLineEdit), m_threads(new QSpinBox), m_contextLength(new QSpinBox),
      m_systemPrompt(new QPlainTextEdit) {
    setObjectName(QStringLiteral("settingsDialog"));
    setWindowTitle(tr("Settings"));

    m_sampling->setObjectName(QStringLiteral("samplingMode"));
    m_sampling->setAccessibleName(tr("Sampling"));
    m_sampling->addItem(tr("Greedy: always the most likely token"), true);
    m_sampling->addItem(tr("Sample with temperature and top-p"), false);
    m_temperature->setObjectName(QStringLiteral("temperature"));
    m_temperature->setAccessibleName(tr("Temperature"));
    m_temperature->setRange(0.01, 2.0);
    m_temperature->setSingleStep(0.05);
    m_temperature->setDecimals(2);
    m_topP->setObjectName(QStringLiteral("topP"));
    m_topP->setAccessibleName(tr("Top-p"));
    m_topP->setRange(0.01, 1.0);
    m_topP->setSingleStep(0.05);
    m_topP->setDecimals(2);
    m_fixedSeed->setObjectName(QStringLiteral("fixedSeed"));
    m_fixedSeed->setAccessibleName(tr("Use a fixed seed"));
    m_fixedSeed->setToolTip(tr("The same seed and prompt give the same answer; without it "
                               "every message draws a new seed."));
    m_seed->setObjectName(QStringLiteral("seed"));
    m_seed->setAccessibleName(tr("Seed"));
    m_seed->setRange(0, std::numeric_limits<int>::max());
    m_thinking->setObjectName(QStringLiteral("thinkingDefault"));
    m_thinking->setAccessibleName(tr("Think before answering by default"));
    m_effort->setObjectName(QStringLiteral("effortDefault"));
    m_effort->setAccessibleName(tr("Default thinking effort"));
    m_effort->addItems(AppSettings::efforts());
    m_theme->setObjectName(QStringLiteral("theme"));
    m_theme->setAccessibleName(tr("Theme"));
    m_theme->addItem(tr("Follow the system"), QStringLiteral("system"));
    m_theme->addItem(tr("Light"), QStringLiteral("light"));
    m_theme->addItem(tr("Dark"), QStringLiteral("dark"));
    m_modelDir->setObjectName(QStringLiteral("modelDir"));
    m_modelDir->setAccessibleName(tr("Model folder"));
    m_trunkDir->setObjectName(QStringLiteral("trunkDir"));
    m_trunkDir->setAccessibleName(tr("Trunk folder"));
    m_trunkDir->setPlaceholderText(tr("none: every weight stays in memory"));
    m_threads->setObjectName(QStringLiteral("threads"));
    m_threads->setAccessibleName(tr("Engine threads"));
    m_threads->setRange(0, 1024);
    m_threads->setSpecialValueText(tr("all cores (%1)").arg(QThread::idealThreadCount()));
    m_maxTokens->setObjectName(QStringLiteral("maxTokens"));
    m_maxTokens->setAccessibleName(tr("Longest answer in tokens"));
    m_maxTokens->setRange(1, 32768);
    m_maxTokens->setSuffix(tr(" tokens"));
    m_contextLength->setObjectName(QStringLiteral("contextLength"));
    m_contextLength->setAccessibleName(tr("Context length in tokens"));
    m_contextLength->setRange(1, 1 << 24); // as AppSettings reads it back
    m_contextLength->setSingleStep(1024);
    m_contextLength->setSuffix(tr(" tokens"));
    m_contextLength->setToolTip(tr("The longest conversation the model holds (its KV cache). "
                                   "Applied when the model is loaded next: OK reloads it."));
    m_systemPrompt->setObjectName(QStringLiteral("systemPromptDefault"));
    m_systemPrompt->setAccessibleName(tr("Default system prompt for new conversations"));
    m_systemPrompt->setPlaceholderText(tr("none"));
    m_systemPrompt->setTabChangesFocus(true);
    m_systemPrompt->setFixedHeight(m_systemPrompt->fontMetrics().lineSpacing() * 3 + 12);
    m_speculation->setObjectName(QStringLiteral("speculation"));
    m_speculation->setAccessibleName(tr("Speculative decoding"));
    m_speculation->setToolTip(
        tr("When the answer repeats text from the conversation, check several guessed tokens "
           "in one pass over the weights. Greedy answers are exactly the same, sampled ones "
           "are drawn from exactly the same distribution; they only come faster."));

    auto* sampling = new QGroupBox(tr("Sampling"));
    auto* samplingForm = new QFormLayout(sampling);
    samplingForm->addRow(tr("Mode:"), m_sampling);
    samplingForm->addRow(tr("Temperature:"), m_temperature);
    samplingForm->addRow(tr("Top-p:"), m_topP);
    auto* seedRow = new QHBoxLayout;
    seedRow->addWidget(m_fixedSeed);
    seedRow->addWidget(m_seed, 1);
    samplingForm->addRow(tr("Seed:"), seedRow);

    auto* thinking = new QGroupBox(tr("Thinking (default for new messages)"));
    auto* thinkingForm = new QFormLayout(thinking);
    thinkingForm->addRow(m_thinking);
    thinkingForm->addRow(tr("Effort:"), m_effort);
    thinkingForm->addRow(tr("Longest answer:"), m_maxTokens);
    thinkingForm->addRow(tr("System prompt:"), m_systemPrompt);

    auto* general = new QGroupBox(tr("Appearance, model and engine"));
    auto* generalForm = new QFormLayout(general);
    generalForm->addRow(tr("Theme:"), m_theme);
    generalForm->addRow(tr("Model folder:"),
                        folderRow(m_modelDir, tr("Model folder"), QStringLiteral("browseModel")));
    generalForm->addRow(tr("Trunk folder:"),
                        folderRow(m_trunkDir, tr("Trunk folder"), QStringLiteral("browseTrunk")));
    generalForm->addRow(tr("Threads:"), m_threads);
    auto* contextNote = new QLabel(tr("applied at the next load"));
    contextNote->setObjectName(QStringLiteral("contextLengthNote"));
    auto* contextRow = new QHBoxLayout;
    contextRow->addWidget(m_contextLength, 1);
    contextRow->addWidget(contextNote);
    generalForm->addRow(tr("Context length:"), contextRow);
    generalForm->addRow(m_speculation);

    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel |
                                         QDialogButtonBox::RestoreDefaults);
    buttons->button(QDialogButtonBox::RestoreDefaults)
        ->setAccessibleName(tr("Restore the default settings"));
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(sampling);
    layout->addWidget(thinking);
    layout->addWidget(general);
    layout->addWidget(buttons);

    connect(buttons, &QDialogButtonBox::accepted, this, &SettingsDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &SettingsDialog::reject);
    connect(buttons->button(QDialogButtonBox::RestoreDefaults), &QPushButton::clicked, this,
            [this] {
                // The folders are where the model is, not a preference: they stay.
                AppSettings defaults;
                defaults.launch = m_launch;
                defaults.launch.threads = k3::LaunchConfig{}.threads;
                defaults.launch.contextLength = k3::LaunchConfig{}.contextLength;
                defaults.launch.modelDir = m_modelDir->text().toStdString();
                defaults.launch.trunkDir = m_trunkDir->text().toStdString();
                setValues(defaults);
            });
    connect(m_sampling, &QComboBox::currentIndexChanged, this, &SettingsDialog::updateEnabled);
    connect(m_fixedSeed, &QCheckBox::toggled, this, &SettingsDialog::updateEnabled);
    connect(m_thinking, &QCheckBox::toggled, this, &SettingsDialog::updateEnabled);
    setValues(AppSettings::load());
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
    // The budget and chunk are the wizard's: kept as they were.
    a.launch = m_launch;
    a.launch.modelDir = m_modelDir->text().trimmed().toStdString();
    a.launch.trunkDir = m_trunkDir->text().trimmed().toStdString();
    a.launch.threads = m_threads->value();
    a.launch.contextLength = m_contextLength->value();
    a.speculation = m_speculation->isChecked();
    a.maxTokens = m_maxTokens->value();
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
    m_modelDir->setText(QString::fromStdString(a.launch.modelDir.string()));
    m_trunkDir->setText(QString::fromStdString(a.launch.trunkDir.string()));
    m_threads->setValue(a.launch.threads);
    m_contextLength->setValue(a.launch.contextLength);
    m_speculation->setChecked(a.speculation);
    m_maxTokens->setValue(a.maxTokens);
    m_systemPrompt->setPlainText(a.systemPrompt);
    updateEnabled();
}

void SettingsDialog::updateEnabled() {
    const bool sample = !m_sampling->currentData().toBool();
    m_temperature->setEnabled(sample);
    m_topP->setEnabled(sample);
    m_fixedSeed->setEnabled(sample);
    m_seed->setEnabled(sample && m_fixedSeed->isChecked());
    m_effort->setEnabled(m_thinking->isChecked());
}

void SettingsDialog::accept() {
    values().save();
    QDialog::accept();
}
