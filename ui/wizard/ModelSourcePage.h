#pragma once

#include <QFutureWatcher>
#include <QHash>
#include <QWizardPage>

#include <atomic>
#include <memory>

#include <k3/hub.hpp>

class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QRadioButton;
class QTreeWidget;
class QTreeWidgetItem;
class QWidget;

// Wizard page 2: an existing checkpoint folder (validated off the GUI thread: config
// readable, every shard present) or a download from the hub with per-file rows, an
// overall bar, speed and ETA. Pause cancels; Start again resumes from the .partial files.
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

    // Download controls, public for tests (no network there: an unreachable endpoint).
    void setEndpoint(const QString& endpoint);
    void setDownloadTarget(const QString& dir);
    void startDownload();
    void pauseDownload();
    bool isDownloading() const { return m_downloading; }
    QString downloadStatusText() const;
    QTreeWidget* fileList() const { return m_files; }
    QPushButton* startButton() const { return m_start; }

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

private:
    void updateMode();
    void showVerdict(const Verdict& verdict);
    void downloadDone(const k3::DownloadResult& result);
    void updateFreeSpace();
    QTreeWidgetItem* rowFor(const QString& name);

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
    QLabel* m_freeSpace;
    QLineEdit* m_token;
    QPushButton* m_start;
    QPushButton* m_pause;
    QTreeWidget* m_files;
    QProgressBar* m_overall;
    QLabel* m_speed;
    QLabel* m_downloadStatus;
    QHash<QString, QTreeWidgetItem*> m_rows;

    QString m_validDir;
    bool m_validating = false;
    bool m_downloading = false; // until downloadDone: queued progress may still be in flight
    QFutureWatcher<Verdict> m_validation;
    QFutureWatcher<k3::DownloadResult> m_download;
    // Shared with the worker so a page deleted mid-download leaves nothing dangling.
    std::shared_ptr<std::atomic<bool>> m_cancel;
};
