#pragma once

#include <QHash>
#include <QSet>
#include <QWizardPage>

#include <atomic>
#include <memory>
#include <optional>

#include <k3/hub.hpp>

#include "wizard/AsyncTask.h"
#include "wizard/PendingDownload.h"

class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QRadioButton;
class QTreeWidget;
class QTreeWidgetItem;
class QWidget;
class TokenStore;
class CheckpointSize;
class DownloadSpaceCheck;

// Wizard page 2: an existing checkpoint folder (validated off the GUI thread: config
// readable, every shard present) or a download from the hub with per-file rows, an
// overall bar, speed and ETA, then a verification line (sizes and sha256). Pause cancels;
// Start again resumes from the .partial files. The download in progress is remembered in
// QSettings (PendingDownload), so a later run offers "Resume download"; the token goes
// to the system keychain through TokenStore.
class ModelSourcePage : public QWizardPage {
    Q_OBJECT
    Q_PROPERTY(QString modelDir READ modelDir NOTIFY modelDirChanged)
public:
    // The outcome of checking one folder.
    struct Verdict {
        QString dir;
        bool ok = false;
        QString message;
    };

    explicit ModelSourcePage(QWidget* parent = nullptr);
    ~ModelSourcePage() override;

    bool isComplete() const override;

    // The validated checkpoint folder, empty until one is.
    QString modelDir() const { return m_validDir; }
    // Shows `dir` in the folder field and validates it off the GUI thread.
    void chooseFolder(const QString& dir);
    QString verdictText() const;
    bool isValidating() const { return m_validating; }

    // Download controls, public for tests (which serve a fake hub from a local nginx).
    void setEndpoint(const QString& endpoint);
    void setRepository(const QString& repo, const QString& revision);
    // The revision asked for: the field's text, with the pinned commit as shown there
    // ("main (f831ab6)") given in full.
    QString revision() const;
    // How a revision is shown: the pinned commit as "main (f831ab6)", others as given.
    static QString revisionDisplay(const QString& revision);
    void setDownloadTarget(const QString& dir);
    // Tests: the free space the download plans against instead of the disk's.
    void setFreeBytesForTests(quint64 bytes);
    QString freeSpaceText() const;
    // The checkpoint's size against the target's free space, shown before Start:
    // "Needs 1.56 TB (…); 2.10 TB free there: it fits." or why it does not fit.
    QString sizeCheckText() const;
    CheckpointSize* checkpointSize() const;
    void startDownload();
    void pauseDownload();
    bool isDownloading() const { return m_downloading; }
    QString downloadStatusText() const;
    QString speedText() const;
    QString verificationText() const;
    QTreeWidget* fileList() const { return m_files; }
    QProgressBar* overallBar() const { return m_overall; }
    QProgressBar* fileBar(const QString& name) const;
    QPushButton* startButton() const { return m_start; }
    QLineEdit* tokenField() const { return m_token; }
    TokenStore* tokenStore() const { return m_tokenStore; }
    // The last finished run (empty before one finishes).
    const k3::DownloadResult& lastResult() const { return m_lastResult; }

    // The unfinished download remembered from an earlier run, if any.
    bool offersResume() const { return m_pending.has_value(); }
    QString resumeText() const;
    QPushButton* resumeButton() const { return m_resumeButton; }
    void resumePending();
    void forgetPending();

    static Verdict checkFolder(const QString& dir);

    // Called on the GUI thread by HubDownloadBridge.
    void showFileList(const std::vector<k3::HubFile>& files);
    void showFileProgress(const k3::FileProgress& progress);
    void showOverallProgress(const k3::OverallProgress& progress);
    void showLogLine(const QString& line);

signals:
    void modelDirChanged(const QString& dir);
    void validationFinished(bool ok);
    void downloadFinished(bool ok);
    // A file entered the sha256 step (first time per run).
    void verificationStarted(const QString& name);

private:
    // The constructor's parts: the widgets' names and texts, then each box of the page.
    void setUpFields();
    QPushButton* buildResumeBox();   // returns its "Forget it" button
    QPushButton* buildHaveItBox();   // returns its Browse button
    QPushButton* buildDownloadBox(); // returns the target folder's Browse button
    void connectControls(QPushButton* browse, QPushButton* targetBrowse, QPushButton* forget,
                         QPushButton* demo);
    void updateMode();
    void showVerdict(const Verdict& verdict);
    void downloadDone(const k3::DownloadResult& result);
    // The download the fields describe (Start and the size check both use it).
    k3::DownloadOptions downloadOptions() const;
    QTreeWidgetItem* rowFor(const QString& name);
    void showVerification(const k3::DownloadResult& result);

    QRadioButton* m_haveIt;
    QRadioButton* m_downloadMode;
    QWidget* m_haveItBox;
    QWidget* m_downloadBox;
    QLineEdit* m_folder;
    QLabel* m_verdict;
    QLineEdit* m_endpoint;
    QLineEdit* m_repo;
    QLineEdit* m_revision;
    QLineEdit* m_target;
    QLineEdit* m_token;
    QPushButton* m_start;
    QPushButton* m_pause;
    QTreeWidget* m_files;
    QProgressBar* m_overall;
    QLabel* m_speed;
    QLabel* m_downloadStatus;
    QLabel* m_verification;
    QLabel* m_tokenNote;
    QWidget* m_resumeBox;
    QLabel* m_resumeLabel;
    QPushButton* m_resumeButton;
    TokenStore* m_tokenStore;
    DownloadSpaceCheck* m_space; // free space and the checkpoint's size, before Start
    QHash<QString, QTreeWidgetItem*> m_rows;
    QSet<QString> m_verifying; // files whose sha256 step was shown this run
    std::optional<PendingDownload> m_pending;
    k3::DownloadResult m_lastResult;

    QString m_validDir;
    bool m_validating = false;
    bool m_downloading = false; // until downloadDone: queued progress may still be in flight
    // Opening a 1.56 TB checkpoint reads every shard header: never on the GUI thread.
    AsyncTask<Verdict> m_validation{this, [this](const Verdict& v) { showVerdict(v); }};
    // Paused by cancel(); a page deleted mid-download stops it and leaves .partial files.
    AsyncTask<k3::DownloadResult> m_download{
        this, [this](const k3::DownloadResult& r) { downloadDone(r); }};
};
