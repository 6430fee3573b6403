#include "wizard/PackPage.h"

#include <QCheckBox>
#include <QCoreApplication>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QVBoxLayout>

#include <filesystem>
#include <limits>

#include <k3/launch.hpp>
#include <k3/memory_plan.hpp>
#include <k3/pack.hpp>
#include <k3/system.hpp>

PackPage::PackPage(QWidget* parent)
    : QWizardPage(parent), m_trunk(new QLineEdit), m_pack(new QPushButton(tr("Pack"))),
      m_cancelButton(new QPushButton(tr("Cancel"))), m_bar(new QProgressBar), m_status(new QLabel),
      m_skip(new QCheckBox(tr("Skip (keep every weight in memory)"))),
      m_compress(new QCheckBox(tr("Compress losslessly (the same output, fewer bytes read per "
                                  "token)"))),
      m_replace(new QCheckBox(tr("Replace the trunk in this folder"))) {
    setTitle(tr("Pack the trunk"));
    setSubTitle(tr("Every layer's attention, norms, router and shared experts are rewritten once "
                   "into one file, so each layer comes back in a single read."));
    m_trunk->setObjectName(QStringLiteral("trunkFolder"));
    m_trunk->setAccessibleName(tr("Trunk folder"));
    m_bar->setObjectName(QStringLiteral("packProgress"));
    m_bar->setRange(0, 1);
    m_bar->setValue(0);
    m_bar->setFormat(QString());
    m_status->setObjectName(QStringLiteral("packStatus"));
    m_status->setWordWrap(true);
    m_status->setTextFormat(Qt::PlainText);
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_cancelButton->setEnabled(false);
    m_compress->setObjectName(QStringLiteral("packCompress"));
    m_replace->setObjectName(QStringLiteral("replaceTrunk"));
    m_replace->hide();
    m_compress->setChecked(compressionPaysByDefault());
    m_compress->setToolTip(
        compressionPaysByDefault()
            ? tr("Each layer is stored in blocks whose BF16 high bytes are coded; this CPU "
                 "decodes them faster than the disk reads the bytes saved.")
            : tr("This CPU has no AVX2: the portable decode is slower than the disk time it "
                 "saves, so packing raw is faster here."));

    auto* browse = new QPushButton(tr("Browse…"));
    auto* row = new QHBoxLayout;
    row->addWidget(new QLabel(tr("Trunk folder:")));
    row->addWidget(m_trunk, 1);
    row->addWidget(browse);
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_pack);
    buttons->addWidget(m_cancelButton);
    buttons->addStretch(1);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(row);
    layout->addLayout(buttons);
    layout->addWidget(m_compress);
    layout->addWidget(m_bar);
    layout->addWidget(m_status);
    layout->addWidget(m_replace);
    layout->addStretch(1);
    layout->addWidget(m_skip);

    connect(browse, &QPushButton::clicked, this, [this] {
        const QString dir =
            QFileDialog::getExistingDirectory(this, tr("Trunk folder"), m_trunk->text());
        if (!dir.isEmpty()) setTrunkDir(dir);
    });
    connect(m_trunk, &QLineEdit::editingFinished, this, &PackPage::refreshExisting);
    connect(m_pack, &QPushButton::clicked, this, &PackPage::startPacking);
    connect(m_cancelButton, &QPushButton::clicked, this, &PackPage::cancelPacking);
    connect(m_skip, &QCheckBox::toggled, this, [this] {
        updatePackButton();
        emit completeChanged();
    });
    connect(m_replace, &QCheckBox::toggled, this, &PackPage::updatePackButton);
    registerField(QStringLiteral("trunkDir"), this, "trunkDir");
}

PackPage::~PackPage() {
    m_packing.cancel(); // the worker keeps its own references and stops promptly
}

void PackPage::initializePage() {
    const QString dir = field(QStringLiteral("modelDir")).toString();
    if (!dir.isEmpty() && dir != m_modelDir) setModelDir(dir);
}

bool PackPage::isComplete() const {
    return !isPacking() && (m_skip->isChecked() || (!m_checking && m_packed));
}

void PackPage::setModelDir(const QString& dir) {
    m_modelDir = dir;
    m_trunk->setText(dir + QStringLiteral("/trunk"));
    refreshExisting();
}

void PackPage::setTrunkDir(const QString& dir) {
    m_trunk->setText(dir);
    refreshExisting();
}

QString PackPage::trunkDir() const {
    return m_skip->isChecked() ? QString() : m_trunk->text();
}
bool PackPage::compress() const {
    return m_compress->isChecked();
}
void PackPage::setCompress(bool compress) {
    m_compress->setChecked(compress);
}
bool PackPage::compressionPaysByDefault() {
    return k3::kernelPathAvailable(k3::KernelPath::Avx2);
}
bool PackPage::skipped() const {
    return m_skip->isChecked();
}
void PackPage::setSkipped(bool skip) {
    m_skip->setChecked(skip);
}
QString PackPage::statusText() const {
    return m_status->text();
}
QString PackPage::progressText() const {
    return m_bar->text();
}

PackPage::FolderState PackPage::inspectFolder(const QString& trunkDir, const QString& modelDir) {
    FolderState state;
    if (modelDir.isEmpty()) return state;
    try {
        // Everything resident: the plan's pinned layers and model tensors are what a pack
        // writes (before alignment).
        k3::LaunchConfig c;
        c.modelDir = modelDir.toStdString();
        const k3::MemoryPlan plan = k3::planLaunch(c, std::numeric_limits<std::uint64_t>::max());
        state.packBytes = plan.pinnedBytes + plan.modelBytes;
    } catch (const std::exception&) {
        // Packing says what is wrong with the checkpoint, naming the file.
    }
    if (trunkDir.isEmpty() ||
        !std::filesystem::exists(std::filesystem::path(trunkDir.toStdString()) / "trunk.json"))
        return state;
    try {
        k3::openTrunkIndex(trunkDir.toStdString(), modelDir.toStdString());
        state.kind = FolderState::Kind::Current;
    } catch (const std::exception& e) {
        state.kind = FolderState::Kind::OtherTrunk;
        state.reason = QString::fromStdString(e.what());
    }
    return state;
}

void PackPage::refreshExisting() {
    if (isPacking()) return;
    m_packed = false;
    m_otherTrunk = false;
    m_replace->hide();
    m_replace->setChecked(false);
    m_status->setStyleSheet(QString());
    m_checking = !m_modelDir.isEmpty() && !m_trunk->text().isEmpty();
    m_status->setText(m_checking ? tr("Looking at the trunk folder…") : QString());
    if (m_checking)
        m_folderCheck.start(
            [trunk = m_trunk->text(), model = m_modelDir] { return inspectFolder(trunk, model); });
    updatePackButton();
    emit completeChanged();
}

void PackPage::showFolderState(const FolderState& state) {
    m_checking = false;
    m_packed = state.kind == FolderState::Kind::Current;
    m_otherTrunk = state.kind == FolderState::Kind::OtherTrunk;
    if (m_packed) {
        m_status->setText(tr("A current trunk is already packed there."));
    } else if (m_otherTrunk) {
        // On the real model that is a 100 GB trunk another model may still use: never
        // replaced without asking.
        m_status->setText(tr("This folder already holds a trunk that is not this checkpoint's: "
                             "%1\nChoose another folder, or tick the box to replace it.")
                              .arg(state.reason));
        m_status->setStyleSheet(QStringLiteral("color: #c0392b;"));
        m_replace->show();
    } else if (state.packBytes > 0) {
        m_status->setText(tr("Packing writes about %1 here (less when compressed) and reads as "
                             "much from the checkpoint.")
                              .arg(QString::fromStdString(k3::formatBytes(state.packBytes))));
    } else {
        m_status->clear();
    }
    updatePackButton();
    emit completeChanged();
}

void PackPage::updatePackButton() {
    m_pack->setEnabled(!m_skip->isChecked() && !isPacking() && !m_checking &&
                       (!m_otherTrunk || m_replace->isChecked()));
}

void PackPage::startPacking() {
    if (isPacking() || m_checking || (m_otherTrunk && !m_replace->isChecked())) return;
    m_packed = false;
    m_running = true;
    m_pack->setEnabled(false);
    m_cancelButton->setEnabled(true);
    m_status->setStyleSheet(QString());
    m_status->setText(tr("Packing…"));
    m_bar->setRange(0, 1);
    m_bar->setValue(0);
    emit completeChanged();
    const std::string model = m_modelDir.toStdString();
    const std::string trunk = m_trunk->text().toStdString();
    k3::PackOptions options;
    options.compress = m_compress->isChecked();
    QPointer<PackPage> self(this);
    m_packing.start([model, trunk, self, options](const std::atomic<bool>* cancel) {
        Outcome out;
        const auto observer = [self](const k3::PackProgress& p) {
            QMetaObject::invokeMethod(
                QCoreApplication::instance(),
                [self, p] {
                    // A late update after the result changes nothing.
                    if (self && self->isPacking()) self->showProgress(p);
                },
                Qt::QueuedConnection);
        };
        // A folder this pack made is taken away again when the pack fails or is cancelled
        // (the engine removes its files, not the folder).
        std::error_code ec;
        const bool folderExisted = std::filesystem::exists(trunk, ec);
        try {
            if (model.empty()) throw k3::PackError("no checkpoint folder chosen (page 2)");
            const k3::PackResult r = k3::packTrunk(model, trunk, observer, cancel, options);
            out.ok = true;
            out.message = tr("Packed %1 layers into %2 (%3) in %4 s.")
                              .arg(r.layers)
                              .arg(QString::fromStdString(trunk),
                                   QString::fromStdString(k3::formatBytes(r.fileBytes)))
                              .arg(r.seconds, 0, 'f', 1);
            if (options.compress && r.layerBytes > 0)
                out.message +=
                    QLatin1Char(' ') +
                    tr("Compressed: the layers take %1 of their size.")
                        .arg(double(r.layerStoredBytes) / double(r.layerBytes), 0, 'f', 3);
        } catch (const std::exception& e) {
            out.message = QString::fromStdString(e.what());
            if (!folderExisted && std::filesystem::is_empty(trunk, ec))
                std::filesystem::remove(trunk, ec);
        }
        return out;
    });
}

void PackPage::cancelPacking() {
    m_packing.cancel();
    m_cancelButton->setEnabled(false);
    m_status->setText(tr("Cancelling…"));
}

void PackPage::showProgress(const k3::PackProgress& p) {
    m_bar->setRange(0, 1000);
    const double share =
        p.bytesTotal ? std::min(1.0, double(p.bytesDone) / double(p.bytesTotal)) : 0.0;
    m_bar->setValue(int(1000 * share));
    // The time left at the pace so far: a 10 GB trunk packs for minutes, so say how many.
    QString left = tr("time left unknown");
    if (p.recordsTotal > 0 && p.recordsDone >= p.recordsTotal)
        left = tr("done");
    else if (p.bytesDone > 0 && p.seconds > 0 && p.bytesDone < p.bytesTotal)
        left = tr("about %1 left")
                   .arg(roughDuration(p.seconds * double(p.bytesTotal - p.bytesDone) /
                                      double(p.bytesDone)));
    m_bar->setFormat(tr("%1% · record %2/%3 · %4 of %5 · %6 MB/s · %7")
                         .arg(int(100 * share))
                         .arg(p.recordsDone)
                         .arg(p.recordsTotal)
                         .arg(QString::fromStdString(k3::formatBytes(p.bytesDone)),
                              QString::fromStdString(k3::formatBytes(p.bytesTotal)))
                         .arg(p.mbPerSecond, 0, 'f', 0)
                         .arg(left));
}

QString PackPage::roughDuration(double seconds) {
    const qint64 s = qint64(seconds + 0.5);
    if (s >= 3600) return tr("%1 h %2 min").arg(s / 3600).arg((s % 3600) / 60);
    if (s >= 60) return tr("%1 min").arg((s + 30) / 60);
    return tr("%1 s").arg(s);
}

void PackPage::packDone(const Outcome& outcome) {
    m_running = false;
    if (outcome.ok) {
        m_otherTrunk = false;
        m_replace->hide();
    }
    updatePackButton();
    m_cancelButton->setEnabled(false);
    if (!outcome.ok) { // not frozen where it stopped
        m_bar->setRange(0, 1);
        m_bar->setValue(0);
        m_bar->setFormat(QString());
    }
    m_packed = outcome.ok;
    m_status->setText(outcome.ok ? outcome.message : tr("Not packed: %1").arg(outcome.message));
    m_status->setStyleSheet(outcome.ok ? QString() : QStringLiteral("color: #c0392b;"));
    emit completeChanged();
    emit packingFinished(outcome.ok);
}
