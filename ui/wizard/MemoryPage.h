#pragma once

#include <QWizardPage>

#include "wizard/AsyncTask.h"

#include <k3/launch.hpp>
#include <k3/memory_plan.hpp>

class MemoryPlanPanel;
class QButtonGroup;
class QDoubleSpinBox;
class QLabel;
class QPushButton;
class QAbstractButton;

// Wizard page 4: a preset (or auto, or custom trunk/cache GB) and the memory plan it
// gives, drawn against MemAvailable with the 95% line BEFORE anything loads, with a
// warning when it will not fit. The plan is the engine's own (k3::planLaunch, the
// planning a Session runs when it opens the same configuration), computed off the GUI
// thread on every change.
class MemoryPage : public QWizardPage {
    Q_OBJECT
public:
    // One planning's answer: the configuration (auto resolved to sizes) and its plan.
    struct Planned {
        k3::LaunchConfig config;
        k3::MemoryPlan plan;
        QString error; // empty: planned
        // The trunk budget that works when the one asked for holds no ring slot (0: that
        // is not why the plan failed).
        quint64 minTrunkBytes = 0;
    };

    explicit MemoryPage(QWidget* parent = nullptr);

    void initializePage() override;
    bool isComplete() const override;

    // Threads, chunk and context come from here (the saved configuration); the folders
    // and the budget from the wizard.
    void setBaseConfig(const k3::LaunchConfig& base);
    const k3::LaunchConfig& baseConfig() const { return m_base; }
    // trunkDir empty: no packed trunk, the trunk from the checkpoint.
    void setModel(const QString& modelDir, const QString& trunkDir);
    void setAvailableBytes(quint64 bytes); // tests; default MemAvailable
    // Selects "auto" (id 0), a preset by name, or "custom".
    void selectPreset(const QString& name);
    void setCustomGB(double trunkGB, double cacheGB);

    bool hasPlan() const { return m_planned && m_error.isEmpty(); }
    bool isPlanning() const { return m_pending; }
    bool fits() const;
    const k3::MemoryPlan& plan() const { return m_plan; }
    // What Finish hands on: exactly the configuration the plan shown was made for.
    const k3::LaunchConfig& launchConfig() const { return m_config; }
    QString warningText() const;
    QString summaryText() const;
    // The button under a trunk budget too small for one layer: sets that minimum.
    QPushButton* useMinimumButton() const { return m_useMinimum; }
    QAbstractButton* presetButton(const QString& name) const;
    MemoryPlanPanel* planPanel() const { return m_panel; }

signals:
    void planReady();

private:
    void replan();
    void showPlan();
    void showPlanned(const Planned& p); // a planning answered
    void presetClicked(int id);
    void markPresetsThatDoNotFit();
    k3::LaunchConfig requestedConfig() const;

    k3::LaunchConfig m_base;
    QString m_modelDir;
    QString m_trunkDir;
    quint64 m_available = 0;
    QButtonGroup* m_presets;
    QDoubleSpinBox* m_trunkGB;
    QDoubleSpinBox* m_cacheGB;
    MemoryPlanPanel* m_panel;
    QLabel* m_summary;
    QLabel* m_warning;
    QPushButton* m_useMinimum;
    bool m_planned = false; // a planning has answered for the current model
    bool m_pending = false; // a planning is under way
    k3::LaunchConfig m_config;
    k3::MemoryPlan m_plan;
    QString m_error;
    quint64 m_minTrunkBytes = 0;
    // A newer request replaces the running one, so only the latest plan arrives.
    AsyncTask<Planned> m_planning{this, [this](const Planned& p) { showPlanned(p); }};
};
