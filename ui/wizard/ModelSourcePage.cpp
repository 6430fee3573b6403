#include "wizard/ModelSourcePage.h"

#include <QDir>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QRadioButton>
#include <QTreeWidget>
#include <QUrl>
#include <QVBoxLayout>

#include <filesystem>

#include <k3/config.hpp>
#include <k3/launch.hpp>
#include <k3/memory_plan.hpp>
#include <k3/safetensors.hpp>

#include "ModelLoader.h"
#include "wizard/CheckpointSize.h"
#include "wizard/DownloadSpaceCheck.h"
#include "wizard/HubDownloadBridge.h"
#include "wizard/TokenStore.h"

namespace {
QString bytesText(std::uint64_t bytes) {
    return QString::fromStdString(k3::formatBytes(bytes));
}

QString durationText(double seconds) {
    if (seconds < 0) return QObject::tr("unknown");
    const qint64 s = qint64(seconds + 0.5);
    if (s >= 3600) return QObject::tr("%1 h %2 min").arg(s / 3600).arg((s % 3600) / 60);
    if (s >= 60) return QObject::tr("%1 min %2 s").arg(s / 60).arg(s % 60);
    return QObject::tr("%1 s").arg(s);
}

enum Column { Name, Size, State, Progress };

// Nothing reached the disk: no file finished and no .partial holds a byte.
bool fetchedNothing(const k3::DownloadResult& result) {
    return result.bytesOnDisk == 0 && result.bytesTransferred == 0;
}

// What a user can act on, instead of curl's words: the host that could not be reached,
// the token or the licence for 401/403, the sizes for a full disk.
// `again`: what the Start button says now ("Start", "Retry"), so the text and the button
// agree.
QString friendlyError(const k3::DownloadResult& result, const QString& endpoint,
                      const QString& repo, const QString& again) {
    const QString host = QUrl(endpoint).host().isEmpty() ? endpoint : QUrl(endpoint).host();
    const QString detail = QString::fromStdString(result.error);
    switch (result.errorKind) {
    case k3::HubErrorKind::Network:
        if (fetchedNothing(result))
            return QObject::tr("Could not reach %1: check the network (and a proxy, if you "
                               "use one), then %2.")
                .arg(host, again);
        return QObject::tr("The connection to %1 broke: %2 continues from the bytes on "
                           "disk. (%3)")
            .arg(host, again, detail);
    case k3::HubErrorKind::Unauthorized:
        return QObject::tr("%1 needs a valid access token (401): paste a token with read "
                           "access (%1/settings/tokens) into Token, then %2.")
            .arg(host, again);
    case k3::HubErrorKind::Forbidden:
        return QObject::tr("%1 refused access to %2 (403): open %3/%2 while signed in, accept "
                           "the licence, and use a token of that account, then %4.")
            .arg(host, repo, endpoint, again);
    case k3::HubErrorKind::NotFound:
        return QObject::tr("%1 has no %2 at that revision (404): check the repository and the "
                           "revision.")
            .arg(host, repo);
    default:
        return detail.isEmpty() ? QString::fromStdString(result.summary()) : detail;
    }
}
} // namespace

ModelSourcePage::ModelSourcePage(QWidget* parent)
    : QWizardPage(parent), m_haveIt(new QRadioButton(tr("I already have it"))),
      m_downloadMode(new QRadioButton(tr("Download"))), m_haveItBox(new QWidget),
      m_downloadBox(new QWidget), m_folder(new QLineEdit), m_verdict(new QLabel),
      m_endpoint(new QLineEdit), m_repo(new QLineEdit(QString::fromUtf8(k3::kDefaultHubRepo))),
      m_revision(new QLineEdit(revisionDisplay(QString::fromUtf8(k3::kDefaultHubRevision)))),
      m_target(new QLineEdit(QDir::homePath() + QStringLiteral("/k3model"))),
      m_token(new QLineEdit), m_start(new QPushButton(tr("Start"))),
      m_pause(new QPushButton(tr("Pause"))), m_files(new QTreeWidget), m_overall(new QProgressBar),
      m_speed(new QLabel), m_downloadStatus(new QLabel), m_verification(new QLabel),
      m_tokenNote(new QLabel), m_resumeBox(new QWidget), m_resumeLabel(new QLabel),
      m_resumeButton(new QPushButton(tr("Resume download"))), m_tokenStore(new TokenStore(this)),
      m_space(new DownloadSpaceCheck({[this] { return downloadOptions(); },
                                      [this] { return m_downloadMode->isChecked(); },
                                      [this] { return m_downloading; }},
                                     this)),
      m_pending(PendingDownload::load()) {
    setTitle(tr("Get the model"));
    setSubTitle(tr("Point to a checkpoint folder you already have, or download it from the hub."));
    setUpFields();
    QPushButton* forget = buildResumeBox();
    QPushButton* browse = buildHaveItBox();
    QPushButton* targetBrowse = buildDownloadBox();
    auto* demo = new QPushButton(tr("Use the bundled demo model"));
    demo->setObjectName(QStringLiteral("useDemoButton"));
    demo->setEnabled(!ModelLoader::demoModelDirectory().isEmpty());
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_resumeBox);
    layout->addWidget(m_haveIt);
    layout->addWidget(m_haveItBox);
    layout->addWidget(m_downloadMode);
    layout->addWidget(m_downloadBox, 1);
    layout->addWidget(demo, 0, Qt::AlignLeft);

    connectControls(browse, targetBrowse, forget, demo);
    updateMode();
    m_space->updateFreeSpace();
    registerField(QStringLiteral("modelDir"), this, "modelDir", SIGNAL(modelDirChanged(QString)));
}

void ModelSourcePage::setUpFields() {
    m_haveIt->setChecked(true);
    m_folder->setObjectName(QStringLiteral("modelFolder"));
    m_folder->setAccessibleName(tr("Checkpoint folder"));
    m_verdict->setObjectName(QStringLiteral("folderVerdict"));
    m_verdict->setWordWrap(true);
    m_verdict->setTextFormat(Qt::PlainText);
    m_verdict->setTextInteractionFlags(Qt::TextSelectableByMouse);
    // Room for the verdict and the config summary: the download box takes the stretch.
    m_verdict->setMinimumHeight(3 * m_verdict->fontMetrics().lineSpacing());
    // Plain words: what an empty field means, not the variables behind it (issue 37).
    m_endpoint->setPlaceholderText(tr("empty: the Hugging Face hub (%1), or the mirror this "
                                      "computer is set up to use")
                                       .arg(QString::fromUtf8(k3::kDefaultHubEndpoint)));
    m_endpoint->setAccessibleName(tr("Hub endpoint"));
    m_repo->setAccessibleName(tr("Repository"));
    m_revision->setAccessibleName(tr("Revision"));
    m_revision->setObjectName(QStringLiteral("hubRevision"));
    m_revision->setToolTip(tr("A branch, a tag or a commit. \"%1\" is the commit this version "
                              "of k3chat was checked against.")
                               .arg(revisionDisplay(QString::fromUtf8(k3::kDefaultHubRevision))));
    m_target->setAccessibleName(tr("Download target folder"));
    m_token->setObjectName(QStringLiteral("hubToken"));
    m_token->setEchoMode(QLineEdit::Password);
    m_token->setAccessibleName(tr("Hub access token"));
    m_token->setPlaceholderText(
        tr("only for a private or gated repository; empty: the token this computer has"));
    m_start->setObjectName(QStringLiteral("startDownloadButton"));
    m_pause->setObjectName(QStringLiteral("pauseDownloadButton"));
    m_pause->setEnabled(false);
    m_speed->setObjectName(QStringLiteral("downloadSpeed"));
    m_speed->setAccessibleName(tr("Download speed and time left"));
    m_files->setObjectName(QStringLiteral("downloadFiles"));
    m_files->setHeaderLabels({tr("File"), tr("Size"), tr("State"), tr("Progress")});
    m_files->setRootIsDecorated(false);
    m_files->header()->setSectionResizeMode(Name, QHeaderView::Stretch);
    m_overall->setObjectName(QStringLiteral("downloadOverall"));
    m_overall->setRange(0, 1000);
    m_overall->setValue(0);
    m_downloadStatus->setObjectName(QStringLiteral("downloadStatus"));
    m_downloadStatus->setWordWrap(true);
    m_downloadStatus->setTextFormat(Qt::PlainText);
    m_downloadStatus->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_verification->setObjectName(QStringLiteral("downloadVerification"));
    m_verification->setAccessibleName(tr("Verification"));
    m_verification->setWordWrap(true);
    m_verification->setTextFormat(Qt::PlainText);
    m_tokenNote->setObjectName(QStringLiteral("tokenStatus"));
    m_tokenNote->setWordWrap(true);
    m_tokenNote->setTextFormat(Qt::PlainText);
    m_tokenNote->setText(tr("Looking for a stored token in the system keychain…"));
    m_resumeBox->setObjectName(QStringLiteral("resumeBox"));
    m_resumeLabel->setWordWrap(true);
    m_resumeLabel->setTextFormat(Qt::PlainText);
    m_resumeButton->setObjectName(QStringLiteral("resumeDownloadButton"));
}

QPushButton* ModelSourcePage::buildResumeBox() {
    auto* forget = new QPushButton(tr("Forget it"));
    forget->setObjectName(QStringLiteral("forgetDownloadButton"));
    forget->setToolTip(tr("Stop offering this download; the files on disk stay as they are."));
    auto* resumeLayout = new QHBoxLayout(m_resumeBox);
    resumeLayout->setContentsMargins(0, 0, 0, 0);
    resumeLayout->addWidget(m_resumeLabel, 1);
    resumeLayout->addWidget(m_resumeButton);
    resumeLayout->addWidget(forget);
    if (m_pending)
        m_resumeLabel->setText(
            tr("An unfinished download of %1 (revision %2) into %3 can be resumed; the bytes "
               "already on disk are kept.")
                .arg(m_pending->repo, revisionDisplay(m_pending->revision),
                     m_pending->destination));
    m_resumeBox->setVisible(m_pending.has_value());

    return forget;
}

QPushButton* ModelSourcePage::buildHaveItBox() {
    auto* browse = new QPushButton(tr("Browse…"));
    auto* folderRow = new QHBoxLayout;
    folderRow->addWidget(m_folder, 1);
    folderRow->addWidget(browse);
    auto* haveLayout = new QVBoxLayout(m_haveItBox);
    haveLayout->setContentsMargins(20, 0, 0, 0);
    haveLayout->addLayout(folderRow);
    haveLayout->addWidget(m_verdict);
    return browse;
}

QPushButton* ModelSourcePage::buildDownloadBox() {
    auto* targetBrowse = new QPushButton(tr("Browse…"));
    auto* targetRow = new QHBoxLayout;
    targetRow->addWidget(m_target, 1);
    targetRow->addWidget(targetBrowse);
    auto* form = new QFormLayout;
    form->addRow(tr("Hub endpoint:"), m_endpoint);
    form->addRow(tr("Repository:"), m_repo);
    form->addRow(tr("Revision:"), m_revision);
    form->addRow(tr("Target folder:"), targetRow);
    form->addRow(QString(), m_space->freeSpaceLabel());
    form->addRow(QString(), m_space->sizeCheckLabel());
    form->addRow(tr("Token:"), m_token);
    form->addRow(QString(), m_tokenNote);
    auto* controls = new QHBoxLayout;
    controls->addWidget(m_start);
    controls->addWidget(m_pause);
    controls->addWidget(m_speed, 1);
    auto* downloadLayout = new QVBoxLayout(m_downloadBox);
    downloadLayout->setContentsMargins(20, 0, 0, 0);
    downloadLayout->addLayout(form);
    downloadLayout->addLayout(controls);
    downloadLayout->addWidget(m_files, 1);
    downloadLayout->addWidget(m_overall);
    downloadLayout->addWidget(m_downloadStatus);
    downloadLayout->addWidget(m_verification);
    return targetBrowse;
}

void ModelSourcePage::connectControls(QPushButton* browse, QPushButton* targetBrowse,
                                      QPushButton* forget, QPushButton* demo) {
    connect(m_haveIt, &QRadioButton::toggled, this, &ModelSourcePage::updateMode);
    connect(browse, &QPushButton::clicked, this, [this] {
        const QString dir =
            QFileDialog::getExistingDirectory(this, tr("Checkpoint folder"), m_folder->text());
        if (!dir.isEmpty()) chooseFolder(dir);
    });
    connect(m_folder, &QLineEdit::editingFinished, this, [this] {
        if (m_folder->text() != m_validDir) chooseFolder(m_folder->text());
    });
    connect(targetBrowse, &QPushButton::clicked, this, [this] {
        const QString dir =
            QFileDialog::getExistingDirectory(this, tr("Download into"), m_target->text());
        if (!dir.isEmpty()) setDownloadTarget(dir);
    });
    connect(m_target, &QLineEdit::textChanged, m_space, &DownloadSpaceCheck::updateFreeSpace);
    for (QLineEdit* field : {m_endpoint, m_repo, m_revision, m_target})
        connect(field, &QLineEdit::textChanged, m_space, &DownloadSpaceCheck::scheduleSizeRequest);
    connect(m_downloadMode, &QRadioButton::toggled, m_space,
            &DownloadSpaceCheck::scheduleSizeRequest);
    connect(demo, &QPushButton::clicked, this, [this] {
        m_haveIt->setChecked(true);
        chooseFolder(ModelLoader::demoModelDirectory());
    });
    connect(m_start, &QPushButton::clicked, this, &ModelSourcePage::startDownload);
    connect(m_pause, &QPushButton::clicked, this, &ModelSourcePage::pauseDownload);
    connect(m_resumeButton, &QPushButton::clicked, this, &ModelSourcePage::resumePending);
    connect(forget, &QPushButton::clicked, this, &ModelSourcePage::forgetPending);
    connect(m_tokenStore, &TokenStore::statusChanged, m_tokenNote, &QLabel::setText);
    connect(m_tokenStore, &TokenStore::loaded, this, [this](const QString& token) {
        if (m_token->text().isEmpty()) m_token->setText(token);
    });
    m_tokenStore->load();
}

ModelSourcePage::~ModelSourcePage() {
    // The worker keeps its own references; it stops promptly and leaves .partial files.
    m_download.cancel();
}

bool ModelSourcePage::isComplete() const {
    return !m_validDir.isEmpty() && !m_downloading;
}

QString ModelSourcePage::verdictText() const {
    return m_verdict->text();
}
QString ModelSourcePage::downloadStatusText() const {
    return m_downloadStatus->text();
}

void ModelSourcePage::updateMode() {
    m_haveItBox->setEnabled(m_haveIt->isChecked());
    m_downloadBox->setEnabled(!m_haveIt->isChecked());
}

ModelSourcePage::Verdict ModelSourcePage::checkFolder(const QString& dir) {
    Verdict v;
    v.dir = dir;
    try {
        // The engine's own pre-load checks: what the wizard accepts, a load can open.
        k3::LaunchConfig launch;
        launch.modelDir = dir.toStdString();
        const std::vector<std::string> problems = k3::checkLaunch(launch);
        if (!problems.empty()) {
            QStringList lines;
            for (const std::string& p : problems) lines << QString::fromStdString(p);
            v.message = lines.join(QLatin1Char('\n'));
            return v;
        }
        const k3::ModelConfig config = k3::readModelConfig(launch.modelDir / "config.json");
        const k3::Checkpoint ckpt = k3::Checkpoint::open(launch.modelDir);
        v.ok = true;
        v.message =
            tr("Valid checkpoint: %1 tensors in %2 shard file(s), %3, tokenizer files present.\n%4")
                .arg(ckpt.tensorCount())
                .arg(ckpt.shardPaths().size())
                .arg(bytesText(ckpt.totalTensorBytes()), QString::fromStdString(config.summary()));
    } catch (const std::exception& e) {
        v.message = QString::fromStdString(e.what());
    }
    return v;
}

void ModelSourcePage::chooseFolder(const QString& dir) {
    m_folder->setText(dir);
    if (!m_validDir.isEmpty()) {
        m_validDir.clear();
        emit modelDirChanged(m_validDir);
    }
    m_verdict->setStyleSheet(QString());
    m_validating = true;
    m_verdict->setText(tr("Checking %1…").arg(dir));
    emit completeChanged();
    m_validation.start([dir] { return checkFolder(dir); });
}

void ModelSourcePage::showVerdict(const Verdict& verdict) {
    if (verdict.dir != m_folder->text()) return; // the user has moved on
    m_validating = false;
    m_verdict->setText(verdict.ok ? verdict.message : tr("Not usable: %1").arg(verdict.message));
    m_verdict->setStyleSheet(verdict.ok ? QString() : QStringLiteral("color: #c0392b;"));
    m_validDir = verdict.ok ? verdict.dir : QString();
    emit modelDirChanged(m_validDir);
    emit completeChanged();
    emit validationFinished(verdict.ok);
}

void ModelSourcePage::setEndpoint(const QString& endpoint) {
    m_endpoint->setText(endpoint);
}

void ModelSourcePage::setRepository(const QString& repo, const QString& revision) {
    m_repo->setText(repo);
    m_revision->setText(revisionDisplay(revision));
}

QString ModelSourcePage::revisionDisplay(const QString& revision) {
    if (revision == QLatin1String(k3::kDefaultHubRevision))
        return tr("main (%1)").arg(revision.left(7));
    return revision;
}

QString ModelSourcePage::revision() const {
    const QString typed = m_revision->text().trimmed();
    // The pinned commit as shown ("main (f831ab6)") is that commit, in full.
    return typed == revisionDisplay(QString::fromUtf8(k3::kDefaultHubRevision))
               ? QString::fromUtf8(k3::kDefaultHubRevision)
               : typed;
}

QString ModelSourcePage::speedText() const {
    return m_speed->text();
}

QString ModelSourcePage::verificationText() const {
    return m_verification->text();
}

QString ModelSourcePage::resumeText() const {
    return m_pending ? m_resumeLabel->text() : QString();
}

QProgressBar* ModelSourcePage::fileBar(const QString& name) const {
    QTreeWidgetItem* row = m_rows.value(name);
    return row ? qobject_cast<QProgressBar*>(m_files->itemWidget(row, Progress)) : nullptr;
}

void ModelSourcePage::resumePending() {
    if (!m_pending || m_downloading) return;
    const PendingDownload p = *m_pending;
    m_pending.reset();
    m_resumeBox->hide();
    m_endpoint->setText(p.endpoint);
    setRepository(p.repo, p.revision);
    setDownloadTarget(p.destination);
    startDownload();
}

void ModelSourcePage::forgetPending() {
    m_pending.reset();
    m_resumeBox->hide();
    PendingDownload::clear();
}

void ModelSourcePage::setDownloadTarget(const QString& dir) {
    m_target->setText(dir);
}

k3::DownloadOptions ModelSourcePage::downloadOptions() const {
    k3::DownloadOptions options;
    options.endpoint = m_endpoint->text().trimmed().toStdString();
    options.repo = m_repo->text().trimmed().toStdString();
    options.revision = revision().toStdString();
    options.token = m_token->text().toStdString();
    options.destination = m_target->text().toStdString();
    return options;
}

QString ModelSourcePage::freeSpaceText() const {
    return m_space->freeSpaceLabel()->text();
}

QString ModelSourcePage::sizeCheckText() const {
    return m_space->sizeCheckLabel()->text();
}

CheckpointSize* ModelSourcePage::checkpointSize() const {
    return m_space->checkpointSize();
}

void ModelSourcePage::setFreeBytesForTests(quint64 bytes) {
    m_space->setFreeBytesForTests(bytes);
}

void ModelSourcePage::startDownload() {
    if (m_downloading) return;
    m_space->updateFreeSpace();
    // Refused before anything is created or fetched: the size was known before Start.
    // The size line above already says by how much (and stays red): said once, not twice.
    if (const QString tooBig = m_space->doesNotFitText(); !tooBig.isEmpty()) {
        m_downloadStatus->setText(tr("Not started: there is not enough free space (see above)."));
        m_downloadStatus->setStyleSheet(QStringLiteral("color: #c0392b;"));
        return;
    }
    m_downloading = true;
    m_downloadMode->setChecked(true);
    k3::DownloadOptions options = downloadOptions();
    options.freeBytesForTests = m_space->freeBytesForTests();
    // Entered once: kept in the keychain (or this run's memory), never in QSettings.
    if (m_token->text() != m_tokenStore->token()) m_tokenStore->store(m_token->text());
    // Remembered before the first byte so quitting at any point can be resumed.
    PendingDownload{m_endpoint->text().trimmed(), m_repo->text().trimmed(), revision(),
                    QDir(m_target->text()).absolutePath()}
        .save();
    m_verifying.clear();
    m_verification->clear();
    m_start->setEnabled(false);
    m_pause->setEnabled(true);
    m_downloadStatus->setStyleSheet(QString());
    m_downloadStatus->setText(tr("Asking the hub for the file list…"));
    emit completeChanged();
    auto bridge = std::make_shared<HubDownloadBridge>(this);
    m_download.start([options, bridge](const std::atomic<bool>* cancel) {
        return k3::downloadCheckpoint(options, bridge.get(), cancel);
    });
}

void ModelSourcePage::pauseDownload() {
    m_download.cancel();
    m_pause->setEnabled(false);
    m_downloadStatus->setText(tr("Pausing… (Start resumes from the partial files)"));
}

void ModelSourcePage::downloadDone(const k3::DownloadResult& result) {
    m_downloading = false;
    m_lastResult = result;
    // Nothing on disk is nothing to resume: the next start offers no "Resume download".
    const bool nothing = !result.ok && fetchedNothing(result);
    if (result.ok || nothing) PendingDownload::clear();
    showVerification(result);
    m_start->setEnabled(true);
    m_start->setText(result.ok                                         ? tr("Start")
                     : nothing                                         ? tr("Start")
                     : result.errorKind == k3::HubErrorKind::Cancelled ? tr("Resume")
                                                                       : tr("Retry"));
    m_pause->setEnabled(false);
    QString text = QString::fromStdString(result.summary());
    const QString endpoint = m_endpoint->text().trimmed().isEmpty()
                                 ? QString::fromStdString(k3::resolveEndpoint({}))
                                 : m_endpoint->text().trimmed();
    if (!result.ok && result.errorKind == k3::HubErrorKind::Cancelled)
        text = nothing ? tr("Stopped before any byte was fetched.")
                       : tr("Paused. Start again to resume. %1").arg(text);
    else if (!result.ok)
        text = tr("Download failed: %1")
                   .arg(friendlyError(result, endpoint, m_repo->text().trimmed(), m_start->text()));
    m_downloadStatus->setText(text);
    m_downloadStatus->setStyleSheet(result.ok || result.errorKind == k3::HubErrorKind::Cancelled
                                        ? QString()
                                        : QStringLiteral("color: #c0392b;"));
    emit completeChanged();
    emit downloadFinished(result.ok);
    if (result.ok)
        chooseFolder(m_target->text());
    else
        m_space->scheduleSizeRequest(); // what is still needed, now that some of it is on disk
}

void ModelSourcePage::showVerification(const k3::DownloadResult& result) {
    m_verification->setStyleSheet(QString());
    if (result.files.empty()) { // no file list: nothing was compared, so nothing is said
        m_verification->clear();
        return;
    }
    if (!result.ok && result.errorKind == k3::HubErrorKind::Cancelled) {
        m_verification->setText(tr("Verification: continues when the download resumes."));
        return;
    }
    int sized = 0, hashed = 0, withHash = 0;
    for (const k3::FileResult& f : result.files) {
        const bool done = f.state == k3::FileState::Done;
        if (done && f.actualSize == f.expectedSize) ++sized;
        if (f.expectedSha256.empty()) continue;
        ++withHash;
        if (done && f.actualSha256 == f.expectedSha256) ++hashed;
    }
    m_verification->setText(
        tr("Verification: %1/%2 file sizes and %3/%4 sha256 sums match the hub.")
            .arg(sized)
            .arg(result.files.size())
            .arg(hashed)
            .arg(withHash));
    m_verification->setStyleSheet(sized == int(result.files.size()) && hashed == withHash
                                      ? QString()
                                      : QStringLiteral("color: #c0392b;"));
}

QTreeWidgetItem* ModelSourcePage::rowFor(const QString& name) {
    QTreeWidgetItem*& row = m_rows[name];
    if (!row) {
        row = new QTreeWidgetItem(m_files);
        row->setText(Name, name);
        auto* bar = new QProgressBar;
        bar->setRange(0, 1000);
        bar->setValue(0);
        m_files->setItemWidget(row, Progress, bar);
    }
    return row;
}

void ModelSourcePage::showFileList(const std::vector<k3::HubFile>& files) {
    m_files->clear();
    m_rows.clear();
    for (const k3::HubFile& f : files) {
        QTreeWidgetItem* row = rowFor(QString::fromStdString(f.name));
        row->setText(Size, bytesText(f.size));
        row->setText(State, QString::fromUtf8(k3::fileStateName(k3::FileState::Queued)));
    }
    std::uint64_t total = 0;
    for (const k3::HubFile& f : files) total += f.size;
    // Said before the first byte, so a disk too small is seen at once.
    m_downloadStatus->setText(tr("%n file(s), %1 in all; %2", nullptr, int(files.size()))
                                  .arg(bytesText(total), freeSpaceText()));
}

void ModelSourcePage::showFileProgress(const k3::FileProgress& progress) {
    const QString name = QString::fromStdString(progress.name);
    QTreeWidgetItem* row = rowFor(name);
    if (progress.state == k3::FileState::Verifying) {
        m_verification->setText(tr("Verifying %1 (size and sha256)…").arg(name));
        if (!m_verifying.contains(name)) {
            m_verifying.insert(name);
            emit verificationStarted(name);
        }
    }
    row->setText(Size, bytesText(progress.bytesTotal));
    row->setText(State, QString::fromUtf8(k3::fileStateName(progress.state)));
    if (auto* bar = qobject_cast<QProgressBar*>(m_files->itemWidget(row, Progress)))
        bar->setValue(progress.bytesTotal
                          ? int(1000.0 * double(progress.bytesDone) / double(progress.bytesTotal))
                          : (progress.state == k3::FileState::Done ? 1000 : 0));
}

void ModelSourcePage::showOverallProgress(const k3::OverallProgress& p) {
    m_overall->setValue(p.bytesTotal ? int(1000.0 * double(p.bytesDone) / double(p.bytesTotal))
                                     : 0);
    m_overall->setFormat(tr("%1 / %2").arg(bytesText(p.bytesDone), bytesText(p.bytesTotal)));
    m_speed->setText(
        tr("files %1/%2 · %3/s · ETA %4")
            .arg(p.filesDone)
            .arg(p.filesTotal)
            .arg(bytesText(std::uint64_t(p.bytesPerSecond)), durationText(p.etaSeconds)));
}

void ModelSourcePage::showLogLine(const QString& line) {
    m_downloadStatus->setText(line);
}
