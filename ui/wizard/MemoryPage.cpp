#include "wizard/MemoryPage.h"

#include "GigabyteSpinBox.h"

#include <QButtonGroup>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QStyle>
#include <QVBoxLayout>

#include <cmath>

#include <k3/presets.hpp>
#include <k3/system.hpp>

#include "panels/MemoryPlanPanel.h"

namespace {
constexpr int kAutoId = 0;
int customId() {
    return int(k3::presets().size()) + 1;
}
QString bytesText(std::uint64_t bytes) {
    return QString::fromStdString(k3::formatBytes(bytes));
}

// Runs on a pool thread: reads config.json, the headers and trunk.json, no weight (but
// the trunk's tensors of a shard changed since the trunk last saw it, once).
MemoryPage::Planned planOffThread(k3::LaunchConfig config, bool automatic, quint64 available) {
    MemoryPage::Planned p;
    try {
        if (automatic) config.budget = k3::automaticBudget(config, available);
        p.plan = k3::planLaunch(config, available);
    } catch (const k3::MemoryRefusal& e) {
        p.error = QString::fromStdString(e.what());
        p.plan.available = available;
        if (e.reason() == k3::MemoryRefusal::Reason::TrunkTooSmall)
            p.minTrunkBytes = e.minTrunkBytes();
    } catch (const std::exception& e) {
        p.error = QString::fromStdString(e.what());
        p.plan.available = available;
    }
    p.config = std::move(config);
    return p;
}
} // namespace

MemoryPage::MemoryPage(QWidget* parent)
    : QWizardPage(parent), m_presets(new QButtonGroup(this)), m_trunkGB(new GigabyteSpinBox),
      m_cacheGB(new GigabyteSpinBox), m_panel(new MemoryPlanPanel), m_summary(new QLabel),
      m_warning(new QLabel), m_useMinimum(new QPushButton) {
    setTitle(tr("Choose memory"));
    setSubTitle(tr("Memory only buys speed: the answer is the same with any preset. The plan "
                   "below is every byte the run will hold, before anything loads."));
    if (const auto mem = k3::readMemoryInfo()) m_available = mem->availableBytes;

    auto* buttons = new QHBoxLayout;
    const auto addButton = [&](const QString& label, int id, const QString& tip) {
        auto* b = new QPushButton(label);
        b->setCheckable(true);
        b->setToolTip(tip);
        m_presets->addButton(b, id);
        buttons->addWidget(b);
    };
    addButton(tr("auto"), kAutoId,
              tr("Fill what is available: the trunk first, the rest to the cache"));
    int id = 1;
    for (const k3::Preset& p : k3::presets())
        addButton(QString::fromUtf8(p.name.data(), qsizetype(p.name.size())), id++,
                  QString::fromUtf8(p.summary.data(), qsizetype(p.summary.size())));
    addButton(tr("custom"), customId(), tr("Your own trunk and cache sizes"));
    m_presets->setExclusive(true);
    m_presets->button(kAutoId)->setChecked(true);
    buttons->addStretch(1);

    m_trunkGB->setObjectName(QStringLiteral("trunkGB"));
    m_trunkGB->setAccessibleName(tr("Trunk budget in GB"));
    m_cacheGB->setObjectName(QStringLiteral("cacheGB"));
    m_cacheGB->setAccessibleName(tr("Expert cache budget in GB"));
    // 0 means something for each box; said in words instead of "0.00 GB".
    m_cacheGB->setSpecialValueText(tr("none: every expert in memory"));
    auto* form = new QFormLayout;
    form->addRow(tr("Trunk (pinned layers + ring):"), m_trunkGB);
    form->addRow(tr("Expert cache:"), m_cacheGB);
    m_summary->setObjectName(QStringLiteral("planSummary"));
    m_summary->setWordWrap(true);
    m_summary->setTextFormat(Qt::PlainText);
    m_warning->setObjectName(QStringLiteral("planWarning"));
    m_warning->setWordWrap(true);
    m_warning->setTextFormat(Qt::PlainText);
    m_warning->setStyleSheet(QStringLiteral("color: #c0392b; font-weight: bold;"));
    m_warning->hide();
    m_useMinimum->setObjectName(QStringLiteral("useMinimumTrunk"));
    m_useMinimum->hide();
    connect(m_useMinimum, &QPushButton::clicked, this, [this] {
        // Rounded up to the box's two decimals, so the value set is never below the minimum.
        m_trunkGB->setValue(std::ceil(double(m_minTrunkBytes) / 1e7) / 100);
    });

    auto* layout = new QVBoxLayout(this);
    layout->addLayout(buttons);
    layout->addLayout(form);
    layout->addWidget(m_panel, 1);
    layout->addWidget(m_summary);
    layout->addWidget(m_warning);
    layout->addWidget(m_useMinimum, 0, Qt::AlignLeft);
    markPresetsThatDoNotFit();

    connect(m_presets, &QButtonGroup::idClicked, this, &MemoryPage::presetClicked);
    for (QDoubleSpinBox* spin : {m_trunkGB, m_cacheGB})
        connect(spin, &QDoubleSpinBox::valueChanged, this, [this] {
            m_presets->button(customId())->setChecked(true);
            replan();
        });
}

void MemoryPage::showPlanned(const Planned& p) {
    m_planned = true;
    m_pending = false;
    m_config = p.config;
    m_plan = p.plan;
    m_error = p.error;
    m_minTrunkBytes = p.minTrunkBytes;
    showPlan();
    emit planReady();
}

void MemoryPage::initializePage() {
    const QString model = field(QStringLiteral("modelDir")).toString();
    const QString trunk = field(QStringLiteral("trunkDir")).toString();
    if (model != m_modelDir || trunk != m_trunkDir || !hasPlan()) setModel(model, trunk);
}

bool MemoryPage::isComplete() const {
    return hasPlan() && !isPlanning();
}

void MemoryPage::setBaseConfig(const k3::LaunchConfig& base) {
    m_base = base;
    if (!m_modelDir.isEmpty()) replan();
}

void MemoryPage::setModel(const QString& modelDir, const QString& trunkDir) {
    m_modelDir = modelDir;
    m_trunkDir = trunkDir;
    m_planned = false;
    m_summary->setText(tr("Reading the checkpoint's sizes…"));
    m_warning->hide();
    // Without a packed trunk the trunk comes from the checkpoint, all of it in memory:
    // no trunk budget applies (the demo showed "0.00 GB" for its 3 MB).
    const bool packed = !trunkDir.isEmpty();
    m_trunkGB->setEnabled(packed);
    m_trunkGB->setSpecialValueText(packed ? tr("one layer at a time") : tr("all in memory"));
    m_trunkGB->setToolTip(packed ? QString()
                                 : tr("Without a packed trunk every layer stays in memory. Pack "
                                      "the trunk (the previous page) to choose how much of it."));
    replan();
}

void MemoryPage::setAvailableBytes(quint64 bytes) {
    m_available = bytes;
    markPresetsThatDoNotFit();
    showPlan(); // the warning follows at once; the plan itself follows off the thread
    replan();
}

void MemoryPage::selectPreset(const QString& name) {
    for (QAbstractButton* b : m_presets->buttons())
        if (b->text() == name) {
            b->setChecked(true);
            presetClicked(m_presets->id(b));
            return;
        }
}

void MemoryPage::setCustomGB(double trunkGB, double cacheGB) {
    m_trunkGB->setValue(trunkGB);
    m_cacheGB->setValue(cacheGB);
}

void MemoryPage::presetClicked(int id) {
    if (id == customId()) return replan();
    if (id != kAutoId) {
        const k3::Preset& p = k3::presets()[std::size_t(id - 1)];
        // Setting both spin boxes must not flip the choice to "custom".
        const QSignalBlocker a(m_trunkGB), b(m_cacheGB);
        m_trunkGB->setValue(p.trunkGB);
        m_cacheGB->setValue(p.cacheGB);
    }
    m_presets->button(id)->setChecked(true);
    replan();
}

QString MemoryPage::warningText() const {
    return m_warning->isHidden() ? QString() : m_warning->text();
}

QString MemoryPage::summaryText() const {
    return m_summary->isHidden() ? QString() : m_summary->text();
}

QAbstractButton* MemoryPage::presetButton(const QString& name) const {
    for (QAbstractButton* b : m_presets->buttons())
        if (b->text() == name) return b;
    return nullptr;
}

// A preset whose trunk and cache alone pass the memory this computer has (max's 110 GB on
// a 24 GB machine) is marked before it is chosen; the plan still says the whole figure.
void MemoryPage::markPresetsThatDoNotFit() {
    int id = 1;
    for (const k3::Preset& p : k3::presets()) {
        QAbstractButton* b = m_presets->button(id++);
        const double needs = (p.trunkGB + p.cacheGB) * 1e9;
        const QString summary = QString::fromUtf8(p.summary.data(), qsizetype(p.summary.size()));
        const bool tooBig =
            m_available > 0 && needs > k3::kPlanMaxShareOfAvailable * double(m_available);
        b->setIcon(tooBig ? style()->standardIcon(QStyle::SP_MessageBoxWarning) : QIcon());
        b->setToolTip(
            tooBig ? tr("More than this computer can hold: %1 for the trunk and the "
                        "cache alone, %2 available.\n%3")
                         .arg(bytesText(std::uint64_t(needs)), bytesText(m_available), summary)
                   : summary);
        b->setProperty("tooBig", tooBig);
    }
}

bool MemoryPage::fits() const {
    return hasPlan() &&
           double(m_plan.total()) <= k3::kPlanMaxShareOfAvailable * double(m_available);
}

k3::LaunchConfig MemoryPage::requestedConfig() const {
    k3::LaunchConfig c = m_base;
    c.modelDir = m_modelDir.toStdString();
    c.trunkDir = m_trunkDir.toStdString();
    const int id = m_presets->checkedId();
    if (id == customId())
        c.budget = k3::LaunchBudget::ofBytes(std::uint64_t(std::llround(m_trunkGB->value() * 1e9)),
                                             std::uint64_t(std::llround(m_cacheGB->value() * 1e9)));
    else if (id != kAutoId)
        c.budget = k3::LaunchBudget::ofPreset(std::string(k3::presets()[std::size_t(id - 1)].name));
    return c;
}

void MemoryPage::replan() {
    if (m_modelDir.isEmpty()) return;
    const bool automatic = m_presets->checkedId() == kAutoId;
    m_pending = true;
    m_planning.start([config = requestedConfig(), automatic, available = m_available] {
        return planOffThread(config, automatic, available);
    });
    emit completeChanged();
}

void MemoryPage::showPlan() {
    if (!m_planned) return;
    if (m_presets->checkedId() == kAutoId && m_error.isEmpty()) {
        // Show what auto chose, without switching to "custom".
        const QSignalBlocker a(m_trunkGB), b(m_cacheGB);
        m_trunkGB->setValue(m_trunkDir.isEmpty() ? 0.0 : double(m_plan.trunkBytes()) / 1e9);
        m_cacheGB->setValue(double(m_plan.cacheBytes()) / 1e9);
    }
    MemoryFigures f = MemoryFigures::fromPlan(m_plan);
    f.availableBytes = m_available;
    f.trunkStreamed = !m_trunkDir.isEmpty();
    f.expertsCached = m_plan.cacheSlots > 0;
    m_panel->setFigures(f);

    // The plan's figures are the panel's (one total); this line says what they mean.
    m_summary->setText(
        m_plan.pinnedLayers >= m_plan.totalLayers || m_trunkDir.isEmpty()
            ? tr("Every weight of the trunk stays in memory: nothing is read from disk while "
                 "it answers, except the experts the cache does not hold.")
            : tr("%1 of %2 layers stay in memory; the others are read from disk for every "
                 "token, one at a time.")
                  .arg(m_plan.pinnedLayers)
                  .arg(m_plan.totalLayers));
    m_summary->setVisible(m_error.isEmpty());
    m_useMinimum->hide();
    if (m_minTrunkBytes > 0 && !m_error.isEmpty()) {
        // One plain sentence and the way out, instead of the planner's words twice.
        m_warning->setText(tr("The trunk budget is too small: this checkpoint needs at least %1 "
                              "to read its layers from disk.")
                               .arg(bytesText(m_minTrunkBytes)));
        m_useMinimum->setText(tr("Use %1").arg(bytesText(m_minTrunkBytes)));
        m_useMinimum->show();
        m_warning->show();
    } else if (!m_error.isEmpty()) {
        m_warning->setText(tr("This budget cannot work: %1").arg(m_error));
        m_warning->show();
    } else if (!fits()) {
        m_warning->setText(
            tr("This plan will not fit: %1 planned, above 95% of the %2 available. Choose a "
               "smaller preset or lower the trunk/cache sizes.")
                .arg(bytesText(m_plan.total()), bytesText(m_available)));
        m_warning->show();
    } else {
        m_warning->clear();
        m_warning->hide();
    }
    emit completeChanged();
}
