#include "wizard/MemoryPage.h"

#include <QButtonGroup>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QVBoxLayout>
#include <QtConcurrent>

#include <algorithm>
#include <set>

#include <k3/config.hpp>
#include <k3/pack.hpp>
#include <k3/presets.hpp>
#include <k3/safetensors.hpp>
#include <k3/system.hpp>
#include <k3/trunk.hpp>

#include "panels/MemoryPlanPanel.h"

namespace {
constexpr int kAutoId = 0;
int customId() {
    return int(k3::presets().size()) + 1;
}
QString bytesText(std::uint64_t bytes) {
    return QString::fromStdString(k3::formatBytes(bytes));
}
} // namespace

MemoryPage::MemoryPage(QWidget* parent)
    : QWizardPage(parent), m_presets(new QButtonGroup(this)), m_trunkGB(new QDoubleSpinBox),
      m_cacheGB(new QDoubleSpinBox), m_panel(new MemoryPlanPanel), m_summary(new QLabel),
      m_warning(new QLabel) {
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

    for (QDoubleSpinBox* spin : {m_trunkGB, m_cacheGB}) {
        spin->setRange(0, 4096);
        spin->setDecimals(2);
        spin->setSingleStep(0.5);
        spin->setSuffix(tr(" GB"));
    }
    m_trunkGB->setObjectName(QStringLiteral("trunkGB"));
    m_trunkGB->setAccessibleName(tr("Trunk budget in GB"));
    m_cacheGB->setObjectName(QStringLiteral("cacheGB"));
    m_cacheGB->setAccessibleName(tr("Expert cache budget in GB"));
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

    auto* layout = new QVBoxLayout(this);
    layout->addLayout(buttons);
    layout->addLayout(form);
    layout->addWidget(m_panel, 1);
    layout->addWidget(m_summary);
    layout->addWidget(m_warning);

    connect(m_presets, &QButtonGroup::idClicked, this, &MemoryPage::presetClicked);
    for (QDoubleSpinBox* spin : {m_trunkGB, m_cacheGB})
        connect(spin, &QDoubleSpinBox::valueChanged, this, [this] {
            m_presets->button(customId())->setChecked(true);
            replan();
        });
    connect(&m_watcher, &QFutureWatcher<Sizes>::finished, this, [this] {
        m_sizes = m_watcher.result();
        replan();
        emit planReady();
    });
}

void MemoryPage::initializePage() {
    const QString model = field(QStringLiteral("modelDir")).toString();
    const QString trunk = field(QStringLiteral("trunkDir")).toString();
    if (model != m_modelDir || trunk != m_trunkDir || !m_sizes.ok) setModel(model, trunk);
}

bool MemoryPage::isComplete() const {
    return m_sizes.ok && m_planError.isEmpty();
}

void MemoryPage::setModel(const QString& modelDir, const QString& trunkDir) {
    m_modelDir = modelDir;
    m_trunkDir = trunkDir;
    m_sizes = Sizes{};
    m_summary->setText(tr("Reading the checkpoint's sizes…"));
    m_warning->hide();
    emit completeChanged();
    m_watcher.setFuture(
        QtConcurrent::run([modelDir, trunkDir] { return readSizes(modelDir, trunkDir, 4096); }));
}

void MemoryPage::setAvailableBytes(quint64 bytes) {
    m_available = bytes;
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

MemoryPage::Sizes MemoryPage::readSizes(const QString& modelDir, const QString& trunkDir,
                                        int contextLength) {
    Sizes s;
    try {
        const std::filesystem::path dir = modelDir.toStdString();
        const k3::ModelConfig c = k3::readModelConfig(dir / "config.json");
        const k3::Checkpoint ckpt = k3::Checkpoint::open(dir);
        const int layers = c.numHiddenLayers;
        k3::PlanInputs& in = s.inputs;
        in.layerBytes.assign(std::size_t(layers), 0);
        std::uint64_t expertBytes = 0;
        std::set<int> moeLayers;
        const std::string prefix = "language_model.model.layers.";
        for (const auto& [name, t] : ckpt.tensors()) {
            if (name.rfind(prefix, 0) != 0) continue;
            const int L = std::atoi(name.c_str() + prefix.size());
            if (L < 0 || L >= layers) continue;
            if (k3::isRoutedExpertTensor(name)) {
                expertBytes += t.nbytes;
                moeLayers.insert(L);
            } else {
                in.layerBytes[std::size_t(L)] += t.nbytes;
            }
        }
        in.streamed = !trunkDir.isEmpty();
        if (in.streamed) {
            const k3::TrunkIndex index = k3::openTrunkIndex(trunkDir.toStdString(), dir);
            in.trunkDecodeBytes = k3::trunkDecodeBufferBytes(index); // a compressed trunk
            for (int L = 0; L < layers && L < int(index.layers.size()); ++L)
                in.layerBytes[std::size_t(L)] = index.layers[std::size_t(L)].bytes;
        }
        for (const char* name :
             {"language_model.model.embed_tokens.weight", "language_model.lm_head.weight",
              "language_model.model.norm.weight",
              "language_model.model.output_attn_res_norm.weight",
              "language_model.model.output_attn_res_proj.weight"})
            if (const k3::TensorInfo* t = ckpt.find(name)) in.modelBytes += t->nbytes;
        // The engine's expert store knows the exact slot; the average expert, aligned, is
        // what the plan needs before anything is opened.
        in.expertCount = std::uint64_t(moeLayers.size()) * std::uint64_t(std::max(0, c.numExperts));
        if (in.streamed && in.expertCount > 0)
            in.expertSlotBytes = k3::alignUp(expertBytes / in.expertCount);
        else
            in.residentExpertBytes = expertBytes;
        in.topK = c.numExpertsPerToken;
        const std::uint64_t P = std::uint64_t(c.kdaNumHeads) * std::uint64_t(c.kdaHeadDim);
        const std::uint64_t kdaState =
            (P * std::uint64_t(c.kdaHeadDim) +
             3 * P * std::uint64_t(std::max(0, c.shortConvKernelSize - 1))) *
            4;
        for (int L = 0; L < layers && L < int(c.layers.size()); ++L) {
            if (c.layers[std::size_t(L)].attention == k3::AttentionKind::Kda)
                in.stateBytes += kdaState;
            else
                in.kvBytesPerPosition += std::uint64_t(c.kvLoraRank + c.qkRopeHeadDim) * 4;
        }
        in.contextLength = contextLength;
        in.bufferBytes = (std::uint64_t(c.vocabSize) + 64ull * std::uint64_t(c.hiddenSize) +
                          8ull * std::max<std::uint64_t>(P, std::uint64_t(c.intermediateSize))) *
                         4;
        s.ok = true;
    } catch (const std::exception& e) {
        s.error = QString::fromStdString(e.what());
    }
    return s;
}

quint64 MemoryPage::trunkBudgetBytes() const {
    return m_plan.trunkBytes();
}
quint64 MemoryPage::cacheBudgetBytes() const {
    return m_plan.cacheBytes();
}
QString MemoryPage::warningText() const {
    return m_warning->text();
}

bool MemoryPage::fits() const {
    return m_sizes.ok && m_planError.isEmpty() &&
           double(m_plan.total()) <= k3::kPlanMaxShareOfAvailable * double(m_available);
}

void MemoryPage::replan() {
    m_planError.clear();
    if (!m_sizes.ok) {
        m_summary->setText(m_sizes.error.isEmpty() ? QString()
                                                   : tr("Cannot plan: %1").arg(m_sizes.error));
        emit completeChanged();
        return;
    }
    k3::MemoryBudget budget;
    if (m_presets->checkedId() == kAutoId) {
        budget.automatic = true;
        budget.source = "auto";
    } else {
        budget.trunkBytes = std::uint64_t(m_trunkGB->value() * 1e9);
        budget.cacheBytes = std::uint64_t(m_cacheGB->value() * 1e9);
        budget.source = m_presets->checkedButton()->text().toStdString();
    }
    try {
        m_plan = k3::planMemory(m_sizes.inputs, budget, m_available);
    } catch (const std::exception& e) {
        m_planError = QString::fromStdString(e.what());
        m_plan = k3::MemoryPlan{};
        m_plan.available = m_available;
    }

    if (m_presets->checkedId() == kAutoId) {
        // Show what auto chose, without switching to "custom".
        const QSignalBlocker a(m_trunkGB), b(m_cacheGB);
        m_trunkGB->setValue(double(m_plan.trunkBytes()) / 1e9);
        m_cacheGB->setValue(double(m_plan.cacheBytes()) / 1e9);
    }

    MemoryFigures f;
    const auto add = [&f](const QString& name, std::uint64_t bytes) {
        if (bytes > 0) f.plan.push_back({name, bytes});
    };
    add(tr("trunk pinned"), m_plan.pinnedBytes);
    add(tr("trunk ring"), std::uint64_t(m_plan.ringSlots) * m_plan.ringSlotBytes);
    add(tr("embeddings + head"), m_plan.modelBytes);
    add(tr("experts resident"), m_plan.residentExpertBytes);
    add(tr("expert cache"), m_plan.cacheBytes());
    add(tr("recurrent state"), m_plan.stateBytes);
    add(tr("KV cache"), m_plan.kvBytes);
    add(tr("buffers"), m_plan.bufferBytes);
    f.availableBytes = m_available;
    f.pinnedLayers = m_plan.pinnedLayers;
    f.totalLayers = m_plan.totalLayers;
    f.trunkStreamed = m_sizes.inputs.streamed;
    f.expertsCached = m_plan.cacheSlots > 0;
    m_panel->setFigures(f);

    m_summary->setText(tr("Total %1 of %2 available; %3/%4 layers pinned.")
                           .arg(bytesText(m_plan.total()), bytesText(m_available))
                           .arg(m_plan.pinnedLayers)
                           .arg(m_plan.totalLayers));
    if (!m_planError.isEmpty()) {
        m_warning->setText(tr("This budget cannot work: %1").arg(m_planError));
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
