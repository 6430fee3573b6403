#pragma once

#include <QDialog>

#include <optional>

#include "AppSettings.h"

class QCheckBox;
class QComboBox;
class QDialogButtonBox;
class QDoubleSpinBox;
class QGroupBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;

// Edit > Preferences (Ctrl+,): sampling, thinking defaults, theme, and the whole launch
// configuration (model and trunk folders, threads, context, prefill chunk, speculation
// width, memory preset and budgets). OK saves to QSettings; MainWindow applies what
// changed: a changed launch reloads the model, sampling and threads apply to the next
// message.
class SettingsDialog : public QDialog {
    Q_OBJECT
public:
    explicit SettingsDialog(QWidget* parent = nullptr);

    AppSettings values() const;
    void setValues(const AppSettings& values);

    void accept() override;

private:
    // One group box each; every widget is created and named in its group's function.
    QGroupBox* createSamplingGroup();
    QGroupBox* createThinkingGroup();
    QGroupBox* createModelGroup();
    QGroupBox* createMemoryGroup();
    QGroupBox* createAppearanceGroup();
    QDialogButtonBox* createButtons();
    void restoreDefaults();
    void updateEnabled();
    void updateBudgetSummary();
    // The state folder's size, or removes every state in it first; both off the GUI thread.
    void showStateCacheUsage(bool clearFirst);
    k3::LaunchBudget budget() const;

    QComboBox* m_sampling = nullptr;
    QDoubleSpinBox* m_temperature = nullptr;
    QDoubleSpinBox* m_topP = nullptr;
    QCheckBox* m_fixedSeed = nullptr;
    QSpinBox* m_seed = nullptr;
    QCheckBox* m_thinking = nullptr;
    QComboBox* m_effort = nullptr;
    QSpinBox* m_maxTokens = nullptr;
    QSpinBox* m_imagePatchLimit = nullptr;
    QPlainTextEdit* m_systemPrompt = nullptr;
    QLineEdit* m_modelDir = nullptr;
    QLineEdit* m_trunkDir = nullptr;
    QLineEdit* m_draftDir = nullptr; // empty: prompt lookup proposes
    QSpinBox* m_threads = nullptr;
    QSpinBox* m_contextLength = nullptr;
    QSpinBox* m_prefillChunk = nullptr;
    QCheckBox* m_speculation = nullptr;
    QSpinBox* m_maxSpeculation = nullptr;
    QComboBox* m_preset = nullptr;
    QComboBox* m_pinMode = nullptr;
    QCheckBox* m_trunkSet = nullptr; // off: the preset's trunk (no preset: every layer)
    QDoubleSpinBox* m_trunkGB = nullptr;
    QCheckBox* m_cacheSet = nullptr; // off: the preset's cache (no preset: experts resident)
    QDoubleSpinBox* m_cacheGB = nullptr;
    QLabel* m_budgetSummary = nullptr;
    QCheckBox* m_stateCache = nullptr; // keep conversation states on disk
    QDoubleSpinBox* m_stateCacheGB = nullptr;
    QLabel* m_stateCacheUsage = nullptr; // "3 states, 1.20 GB" (read off the GUI thread)
    QPushButton* m_freeStates = nullptr;
    QComboBox* m_theme = nullptr;
    k3::LaunchConfig m_launch; // what setValues got: sizes shown rounded are kept exact
};
