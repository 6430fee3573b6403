#pragma once

#include <QDialog>

#include "AppSettings.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLineEdit;
class QPlainTextEdit;
class QSpinBox;

// Edit > Preferences (Ctrl+,): sampling, thinking defaults, theme, model and trunk
// folders, engine threads. OK saves to QSettings; MainWindow applies what changed and
// reads sampling and threads again for the next message.
class SettingsDialog : public QDialog {
    Q_OBJECT
public:
    explicit SettingsDialog(QWidget* parent = nullptr);

    AppSettings values() const;
    void setValues(const AppSettings& values);

    void accept() override;

private:
    void updateEnabled();

    QComboBox* m_sampling;
    QDoubleSpinBox* m_temperature;
    QDoubleSpinBox* m_topP;
    QCheckBox* m_fixedSeed;
    QSpinBox* m_seed;
    QCheckBox* m_thinking;
    QCheckBox* m_speculation;
    QSpinBox* m_maxTokens;
    QComboBox* m_effort;
    QComboBox* m_theme;
    QLineEdit* m_modelDir;
    QLineEdit* m_trunkDir;
    QSpinBox* m_threads;
    QSpinBox* m_contextLength;
    QPlainTextEdit* m_systemPrompt;
    k3::LaunchConfig m_launch; // what setValues got: the fields this dialog does not show
};
