#include "wizard/SystemCheckPage.h"

#include <QDir>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QProgressBar>
#include <QPushButton>
#include <QStyle>
#include <QVBoxLayout>

SystemCheckPage::SystemCheckPage(QWidget* parent)
    : QWizardPage(parent), m_modelDir(QDir::homePath() + QStringLiteral("/k3model")),
      m_status(new QLabel), m_busy(new QProgressBar), m_checks(new QListWidget),
      m_recommendation(new QLabel), m_rerun(new QPushButton(tr("Check again"))),
      m_demo(new QPushButton(tr("Try the small demo model now"))),
      m_server(new QPushButton(tr("Use a server…"))) {
    setTitle(tr("Check this computer"));
    setSubTitle(tr("CPU, memory, free disk space and disk speed decide how fast Kimi K3 runs "
                   "here. The answer is the same whatever the result; memory only buys speed."));
    m_busy->setObjectName(QStringLiteral("doctorBusy"));
    m_busy->setRange(0, 0); // no end known: the bar moves while the doctor works
    m_busy->setTextVisible(false);
    m_busy->setAccessibleName(tr("Checking this computer"));
    m_busy->hide();
    m_checks->setObjectName(QStringLiteral("doctorChecks"));
    m_checks->setSelectionMode(QAbstractItemView::NoSelection);
    m_checks->setWordWrap(true);
    m_recommendation->setObjectName(QStringLiteral("doctorRecommendation"));
    m_recommendation->setWordWrap(true);
    m_recommendation->setTextFormat(Qt::PlainText);
    m_recommendation->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_demo->setObjectName(QStringLiteral("demoButton"));
    m_server->setObjectName(QStringLiteral("useServerButton"));
    m_server->setToolTip(tr("Chat with Kimi K3 served elsewhere (vLLM, SGLang, k3 serve)"));

    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_demo);
    buttons->addWidget(m_server);
    buttons->addStretch(1);
    buttons->addWidget(m_rerun);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_status);
    layout->addWidget(m_busy);
    layout->addWidget(m_checks, 1);
    layout->addWidget(m_recommendation);
    layout->addLayout(buttons);

    connect(m_rerun, &QPushButton::clicked, this, &SystemCheckPage::runChecks);
    connect(m_demo, &QPushButton::clicked, this, &SystemCheckPage::demoRequested);
    connect(m_server, &QPushButton::clicked, this, &SystemCheckPage::serverRequested);
}

void SystemCheckPage::initializePage() {
    if (!m_report && !m_doctor.isRunning()) runChecks();
}

bool SystemCheckPage::isComplete() const {
    return m_report && m_report->canRun();
}

void SystemCheckPage::runChecks() {
    if (m_doctor.isRunning()) return;
    m_report.reset();
    m_checks->clear();
    m_recommendation->clear();
    m_rerun->setEnabled(false);
    m_status->setText(tr("Checking this computer… (the disk is measured for a few seconds)"));
    m_busy->show();
    emit completeChanged();

    k3::DoctorOptions options;
    options.modelDir = m_modelDir.toStdString();
    options.disk.maxSecondsPerDepth = m_diskSeconds;
    m_doctor.start([options] { return k3::runDoctor(options); });
}

void SystemCheckPage::showReport(const k3::DoctorReport& report) {
    m_report = report;
    m_rerun->setEnabled(true);
    m_busy->hide();
    m_status->setText(tr("Checks finished."));
    for (const k3::DoctorCheck& check : report.checks) {
        QStyle::StandardPixmap icon = QStyle::SP_DialogApplyButton;
        if (check.status == k3::CheckStatus::Warning) icon = QStyle::SP_MessageBoxWarning;
        if (check.status == k3::CheckStatus::Fail) icon = QStyle::SP_MessageBoxCritical;
        auto* item = new QListWidgetItem(style()->standardIcon(icon),
                                         QString::fromStdString(check.verdict), m_checks);
        item->setData(Qt::UserRole, QString::fromUtf8(k3::toString(check.status)));
        item->setData(Qt::UserRole + 1, QString::fromStdString(check.name));
    }
    if (report.canRun())
        m_recommendation->setText(
            tr("Recommendation: preset \"%1\". Next on the command line: %2")
                .arg(QString::fromUtf8(report.recommendedPreset->name.data(),
                                       qsizetype(report.recommendedPreset->name.size())),
                     QString::fromStdString(report.nextCommand)));
    else if (!report.checkpointError.empty()) // the folder, not the computer, is the problem
        m_recommendation->setText(
            tr("The checkpoint at %1 cannot be read: see the failed check above.")
                .arg(QString::fromStdString(report.modelDir.string())));
    else
        m_recommendation->setText(
            tr("This computer cannot run Kimi K3 as it is: see the failed checks above."));
    emit completeChanged();
    emit checksFinished();
}
