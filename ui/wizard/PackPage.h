#pragma once

#include <QWizardPage>

#include "wizard/AsyncTask.h"

#include <atomic>
#include <memory>

#include <k3/pack.hpp>

class QCheckBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;

// Wizard page 3: packs the trunk (every layer's non-expert tensors) into one file off
// the GUI thread, with a bar over the records and MB/s; cancellable and restartable.
// A bad checkpoint is refused with the engine's reason. Small models may skip packing.
class PackPage : public QWizardPage {
    Q_OBJECT
    Q_PROPERTY(QString trunkDir READ trunkDir)
public:
    // What one packing run ended with.
    struct Outcome {
        bool ok = false;
        QString message;
    };
    // What the trunk folder holds, found off the GUI thread (it reads trunk.json and the
    // checkpoint's headers, and after a shard changed the trunk's tensors in it).
    struct FolderState {
        enum class Kind { NoTrunk, Current, OtherTrunk } kind = Kind::NoTrunk;
        QString reason; // OtherTrunk: why it is not this checkpoint's current trunk
        // What a pack writes (the trunk's layers and model tensors, raw), from the
        // checkpoint's headers; 0 when they cannot be read.
        quint64 packBytes = 0;
    };
    static FolderState inspectFolder(const QString& trunkDir, const QString& modelDir);

    explicit PackPage(QWidget* parent = nullptr);
    ~PackPage() override;

    void initializePage() override;
    bool isComplete() const override;

    void setModelDir(const QString& dir);
    QString modelDir() const { return m_modelDir; }
    void setTrunkDir(const QString& dir);
    // Empty when packing is skipped (every weight stays in memory).
    QString trunkDir() const;
    bool skipped() const;
    void setSkipped(bool skip);
    // Lossless compression of the layers (k3 pack --compress): on by default where the
    // AVX2 decode runs (it outpaces the disk it saves); the portable decode does not.
    bool compress() const;
    void setCompress(bool compress);
    static bool compressionPaysByDefault();

    void startPacking();
    void cancelPacking();
    bool isPacking() const { return m_running; }
    bool isChecking() const { return m_checking; }
    // Shown when the folder holds a trunk that is not this checkpoint's: Pack replaces
    // it only once this is ticked.
    QCheckBox* replaceCheckBox() const { return m_replace; }
    QPushButton* packButton() const { return m_pack; }
    QString statusText() const;
    QString progressText() const;
    // One progress event as the bar shows it: percent, records, bytes, speed, time left.
    void showProgress(const k3::PackProgress& progress);
    // "3 min", "1 h 5 min", "40 s".
    static QString roughDuration(double seconds);

signals:
    void packingFinished(bool ok);

private:
    void packDone(const Outcome& outcome);
    void refreshExisting();
    void showFolderState(const FolderState& state);
    void updatePackButton();

    QString m_modelDir;
    QLineEdit* m_trunk;
    QPushButton* m_pack;
    QPushButton* m_cancelButton;
    QProgressBar* m_bar;
    QLabel* m_status;
    QCheckBox* m_skip;
    QCheckBox* m_compress;
    QCheckBox* m_replace;
    bool m_packed = false;
    bool m_checking = false;
    bool m_otherTrunk = false;
    // A newer check replaces the running one: only the latest folder's state arrives.
    AsyncTask<FolderState> m_folderCheck{
        this, [this](const FolderState& state) { showFolderState(state); }};
    bool m_running = false; // until packDone: the future finishes before its queued updates arrive
    // Cancelled by the Cancel button and when the page goes away.
    AsyncTask<Outcome> m_packing{this, [this](const Outcome& outcome) { packDone(outcome); }};
};
