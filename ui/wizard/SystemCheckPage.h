#pragma once

#include <QWizardPage>

#include "wizard/AsyncTask.h"

#include <k3/doctor.hpp>

class QLabel;
class QListWidget;
class QProgressBar;
class QPushButton;

// Wizard page 1: runs the system doctor off the GUI thread (it measures the disk for a
// few seconds) and shows each check with a clear verdict and the recommended preset.
class SystemCheckPage : public QWizardPage {
    Q_OBJECT
public:
    explicit SystemCheckPage(QWidget* parent = nullptr);

    void initializePage() override;
    bool isComplete() const override;

    // Where the checkpoint will live; the doctor measures free space and speed there.
    void setModelDir(const QString& dir) { m_modelDir = dir; }
    bool isRunning() const { return m_doctor.isRunning(); }
    const std::optional<k3::DoctorReport>& report() const { return m_report; }
    QListWidget* checkList() const { return m_checks; }
    // A busy bar while the checks run (the disk is measured for several seconds).
    QProgressBar* busyBar() const { return m_busy; }

    // Seconds of disk reading per queue depth (short in tests).
    void setDiskSeconds(double seconds) { m_diskSeconds = seconds; }

signals:
    void demoRequested();
    void serverRequested(); // "Use a server": the model runs elsewhere
    void checksFinished();

private:
    void runChecks();
    void showReport(const k3::DoctorReport& report);

    QString m_modelDir;
    double m_diskSeconds = 3.0;
    QLabel* m_status;
    QProgressBar* m_busy;
    QListWidget* m_checks;
    QLabel* m_recommendation;
    QPushButton* m_rerun;
    QPushButton* m_demo;
    QPushButton* m_server;
    // The doctor blocks for seconds (disk measurement): never on the GUI thread.
    AsyncTask<k3::DoctorReport> m_doctor{
        this, [this](const k3::DoctorReport& report) { showReport(report); }};
    std::optional<k3::DoctorReport> m_report;
};
