#pragma once

#include <QFutureWatcher>
#include <QWizardPage>

#include <k3/memory_plan.hpp>

class MemoryPlanPanel;
class QButtonGroup;
class QDoubleSpinBox;
class QLabel;

// Wizard page 4: a preset (or auto, or custom trunk/cache GB) and the memory plan it
// gives, drawn against MemAvailable with the 95% line BEFORE anything loads, with a
// warning when it will not fit.
class MemoryPage : public QWizardPage {
    Q_OBJECT
public:
    // The model's sizes as the plan needs them, read off the GUI thread.
    struct Sizes {
        bool ok = false;
        QString error;
        k3::PlanInputs inputs;
    };

    explicit MemoryPage(QWidget* parent = nullptr);

    void initializePage() override;
    bool isComplete() const override;

    // trunkDir empty: no packed trunk, every layer resident.
    void setModel(const QString& modelDir, const QString& trunkDir);
    void setAvailableBytes(quint64 bytes); // tests; default MemAvailable
    // Selects "auto" (id 0), a preset by name, or "custom".
    void selectPreset(const QString& name);
    void setCustomGB(double trunkGB, double cacheGB);

    bool hasPlan() const { return m_sizes.ok; }
    bool fits() const;
    const k3::MemoryPlan& plan() const { return m_plan; }
    quint64 trunkBudgetBytes() const;
    quint64 cacheBudgetBytes() const;
    QString warningText() const;
    MemoryPlanPanel* planPanel() const { return m_panel; }

    static Sizes readSizes(const QString& modelDir, const QString& trunkDir, int contextLength);

signals:
    void planReady();

private:
    void replan();
    void presetClicked(int id);

    QString m_modelDir;
    QString m_trunkDir;
    quint64 m_available = 0;
    QButtonGroup* m_presets;
    QDoubleSpinBox* m_trunkGB;
    QDoubleSpinBox* m_cacheGB;
    MemoryPlanPanel* m_panel;
    QLabel* m_summary;
    QLabel* m_warning;
    Sizes m_sizes;
    k3::MemoryPlan m_plan;
    QString m_planError;
    QFutureWatcher<Sizes> m_watcher;
};
