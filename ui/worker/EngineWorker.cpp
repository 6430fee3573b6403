#include "worker/EngineWorker.h"

#include <QElapsedTimer>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QStringList>
#include <QThread>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <omp.h>

#include <k3/chat.hpp>
#include <k3/launch.hpp>
#include <k3/memory_plan.hpp>
#include <k3/read_file.hpp>
#include <k3/vision.hpp>

namespace {

// Forwards engine callbacks (on this worker thread) as queued signals.
class SignalObserver : public k3::SessionObserver {
public:
    // secondsPerPosition, chunkSeconds, chunkPositions: EngineWorker::readingSecondsLeft's.
    SignalObserver(EngineWorker* worker, const k3::ChatBackend* backend, bool remote,
                   double secondsPerPosition = -1, double chunkSeconds = -1, int chunkPositions = 0)
        : m_worker(worker), m_backend(backend), m_remote(remote),
          m_secondsPerPosition(secondsPerPosition), m_chunkSeconds(chunkSeconds),
          m_chunkPositions(chunkPositions) {}
    void onProgress(const k3::SessionProgress& p) override {
        const double left = EngineWorker::readingSecondsLeft(p, m_secondsPerPosition,
                                                             m_chunkSeconds, m_chunkPositions);
        emit m_worker->prefillProgress(int(p.done), int(p.total), p.seconds, int(p.restored),
                                       int(p.held), p.fraction(), left);
        // The panels move while the prompt is read too: on a streamed trunk that is
        // minutes of disk reads before the first token.
        const std::optional<k3::MemoryReport> report = m_backend->memoryReport();
        if (!report) return;
        MemoryFigures f = MemoryFigures::from(*report);
        f.prefillDone = int(p.done);
        f.prefillTotal = int(p.total);
        f.prefillSeconds = p.seconds;
        f.prefillFraction = p.fraction();
        f.prefillSecondsLeft = left;
        f.prefillBytesRead = p.trunkBytes + p.expertBytes;
        emit m_worker->memoryUpdated(f);
    }
    void onToken(const k3::TokenEvent& e) override {
        emit m_worker->tokenGenerated(e.index, QString::fromStdString(e.thinkingDelta),
                                      QString::fromStdString(e.responseDelta),
                                      e.timing.totalSeconds());
        if (m_remote)
            emit m_worker->deltaTiming(e.index, e.timing.totalSeconds(), e.tokens);
        else
            emit m_worker->tokenTiming(e.index, e.timing.computeSeconds, e.timing.trunkIoSeconds,
                                       e.timing.expertIoSeconds, e.fromProposal);
    }
    void onMemory(const k3::MemoryReport& report) override {
        // The docks are refreshed 4 times a second at most, not once per token (a token
        // can take milliseconds, and each update copies the whole plan); the end of the
        // message gives them the last figures (generate's settle).
        if (m_lastMemory.isValid() && m_lastMemory.elapsed() < 250) return;
        m_lastMemory.start();
        emit m_worker->memoryUpdated(MemoryFigures::from(report));
    }

private:
    EngineWorker* m_worker;
    const k3::ChatBackend* m_backend;
    bool m_remote;
    double m_secondsPerPosition;
    double m_chunkSeconds;
    int m_chunkPositions;
    QElapsedTimer m_lastMemory;
};

} // namespace

quint64 MemoryFigures::plannedBytes() const {
    quint64 total = 0;
    for (const Component& c : plan) total += c.bytes;
    return total;
}

QString MemoryFigures::prefillText() const {
    if (prefillTotal <= 0) return {};
    const QString read = prefillBytesRead >= 1'000'000'000ull
                             ? QObject::tr("%1 GB").arg(double(prefillBytesRead) / 1e9, 0, 'f', 2)
                             : QObject::tr("%1 MB").arg(double(prefillBytesRead) / 1e6, 0, 'f', 1);
    // The share done counts the layers of the chunk being read: a one-chunk prompt (the
    // usual case on the real model) has a share and an estimate from its first layers.
    const double byPositions = double(prefillDone) / double(prefillTotal);
    const double share = std::max(byPositions, prefillFraction);
    QString text = QObject::tr("reading the prompt %1 of %2").arg(prefillDone).arg(prefillTotal);
    if (share > byPositions && share < 1) text += QObject::tr(" (%1%)").arg(int(100 * share));
    text += QObject::tr(" · %1 read").arg(read);
    const double estimate = prefillSecondsLeft >= 0 ? prefillSecondsLeft
                            : share > 0 && share < 1 && prefillSeconds > 0
                                ? prefillSeconds * (1 - share) / share
                                : -1;
    if (estimate >= 0 && share < 1) {
        // The worker's estimate: the plan's or the last message's rate in the first chunk,
        // then the rate measured so far.
        const int left = int(std::ceil(estimate));
        text += left >= 120 ? QObject::tr(" · about %1 min left").arg((left + 30) / 60)
                            : QObject::tr(" · about %1 s left").arg(std::max(1, left));
    }
    return text;
}

MemoryFigures MemoryFigures::fromPlan(const k3::MemoryPlan& p) {
    MemoryFigures f;
    f.enginePlan = p;
    const auto add = [&f](const QString& name, std::uint64_t bytes) {
        if (bytes > 0) f.plan.push_back({name, bytes});
    };
    // Every part MemoryPlan::total() counts, so the panel's total is the plan's.
    add(QObject::tr("trunk pinned"), p.pinnedBytes);
    add(QObject::tr("trunk ring"), std::uint64_t(p.ringSlots) * p.ringSlotBytes);
    add(QObject::tr("trunk decoding"), p.pinDecodeSlotBytes + p.trunkDecodeBytes);
    add(QObject::tr("embeddings + head"), p.modelBytes);
    add(QObject::tr("experts resident"), p.residentExpertBytes);
    add(QObject::tr("expert cache"), p.cacheBytes());
    add(QObject::tr("recurrent state"), p.stateBytes);
    add(QObject::tr("KV cache"), p.kvBytes);
    add(QObject::tr("buffers"), p.bufferBytes);
    add(QObject::tr("draft model"), p.draftBytes);
    add(QObject::tr("vision tower"), p.visionBytes); // 0.89 GB on the real model
    f.availableBytes = p.available;
    f.pinnedLayers = p.pinnedLayers;
    f.totalLayers = p.totalLayers;
    return f;
}

MemoryFigures MemoryFigures::from(const k3::MemoryReport& r) {
    MemoryFigures f = fromPlan(r.plan);
    f.trunkStreamed = r.trunkStreamed;
    f.expertsCached = r.expertsCached;
    f.cacheRequests = r.cache.requests;
    f.cacheResidentHits = r.cache.residentHits;
    f.cachePrefetchHits = r.cache.prefetchHits;
    f.cacheDiskReads = r.cache.diskReads;
    f.cacheHitRate = r.cache.trueHitRate();
    f.cacheResidentHitRate = r.cache.residentHitRate();
    f.cacheEvictions = r.cache.evictions;
    f.cacheSlots = r.cacheSlots;
    f.cacheSlotBytes = r.cacheSlotBytes;
    f.trunkBytesRead = r.trunk.bytesRead;
    f.expertBytesRead = r.cache.bytesRead;
    f.readBusySeconds = r.trunk.ioSeconds + r.cache.ioBusySeconds;
    f.wallSeconds = r.wallSeconds;
    f.ioShare = r.ioShare();
    f.peakRssBytes = r.peakRssBytes;
    return f;
}

EngineWorker::EngineWorker() {
    qRegisterMetaType<ChatTurn>();
    qRegisterMetaType<QVector<ChatTurn>>();
    qRegisterMetaType<GenerationSettings>();
    qRegisterMetaType<GenerationSummary>();
    qRegisterMetaType<ModelInfo>();
    qRegisterMetaType<MemoryFigures>();
    qRegisterMetaType<k3::LaunchConfig>();
}

EngineWorker::~EngineWorker() = default;

namespace {
// What to do about an engine error, in the app's words (the engine's message has the numbers).
QString appAdvice(const std::exception& error) {
    const auto* refusal = dynamic_cast<const k3::MemoryRefusal*>(&error);
    if (refusal == nullptr) return {};
    switch (refusal->reason()) {
    case k3::MemoryRefusal::Reason::TrunkTooSmall:
        return EngineWorker::tr("\n\nChoose a trunk budget of at least %1 (Model > Setup "
                                "wizard…, the memory page).")
            .arg(QString::fromStdString(k3::formatBytes(refusal->minTrunkBytes())));
    case k3::MemoryRefusal::Reason::ContextTooBig:
        return EngineWorker::tr("\n\nSet the context length to %1 positions or fewer, or choose "
                                "a smaller memory budget (Model > Setup wizard…).")
            .arg(refusal->fitPositions());
    case k3::MemoryRefusal::Reason::OverAvailable:
        return EngineWorker::tr("\n\nChoose a smaller memory budget (Model > Setup wizard…, the "
                                "memory page): the answers are the same at every budget, only "
                                "slower. Closing other programs also frees memory.");
    case k3::MemoryRefusal::Reason::Setting:
        break;
    }
    return {};
}
} // namespace

void EngineWorker::loadModel(const k3::LaunchConfig& config) {
    // Everything the load reads is checked first: a folder that cannot open never
    // unloads the model that works.
    try {
        const std::vector<std::string> problems = k3::checkLaunch(config);
        if (!problems.empty()) {
            QStringList lines;
            for (const std::string& p : problems) lines << QString::fromStdString(p);
            emit loadFailed(lines.join(QLatin1Char('\n')), m_backend != nullptr);
            return;
        }
    } catch (const std::exception& e) {
        emit loadFailed(QString::fromUtf8(e.what()), m_backend != nullptr);
        return;
    }
    const std::optional<k3::LaunchConfig> previous = m_localConfig;
    const bool wasRemote = m_backend && !m_localConfig;
    QString failure;
    try {
        openLocal(config);
        return;
    } catch (const std::exception& e) {
        failure = QString::fromUtf8(e.what()) + appAdvice(e);
    }
    // It failed past the checks (memory, a damaged tensor): the model that worked is
    // opened again, so the chat goes on where it was. A server cannot be restored here
    // (its key is not kept), so it is said to be gone.
    bool restored = false;
    if (previous && !wasRemote) {
        try {
            openLocal(*previous, false);
            restored = true;
        } catch (const std::exception& e) {
            failure += tr("\nThe model that was loaded could not be opened again: %1")
                           .arg(QString::fromUtf8(e.what()));
        }
    }
    emit loadFailed(failure, restored);
}

void EngineWorker::openLocal(const k3::LaunchConfig& config, bool announce) {
    m_backend.reset();
    m_localConfig.reset();
    m_secondsPerPosition = -1; // another budget reads at another rate
    m_secondsPerChunk = -1;
    try {
        // The memory dial chosen in the wizard: the same tokens, memory only buys speed.
        m_backend = k3::openLocalBackend(config);
    } catch (...) {
        m_backend.reset();
        throw;
    }
    m_localConfig = config;
    const k3::BackendInfo b = m_backend->info();
    ModelInfo info;
    info.directory = QString::fromStdString(config.modelDir.string());
    info.launch = config;
    info.modelName = QString::fromStdString(b.modelName);
    info.summary = QString::fromStdString(b.summary);
    info.layers = b.layers;
    info.vocabSize = b.vocabSize;
    info.weightBytes = b.weightBytes;
    // Said by config.json's vision_config; the tower itself loads on the first image.
    try {
        const std::filesystem::path configPath = config.modelDir / "config.json";
        info.vision =
            k3::parseVisionConfig(k3::readRegularFile(configPath, k3::kMaxConfigBytes, "config"),
                                  configPath.string())
                .has_value();
    } catch (const std::exception&) {
        info.vision = false; // a tower the engine cannot read is no tower to offer
    }
    m_preparedImages.clear();
    info.thinks = modelThinks(info.directory);
    m_modelName = info.modelName;
    // The plan first: when the window says the model is ready, its panels already
    // show the plan (queued signals arrive in this order).
    emit memoryUpdated(MemoryFigures::from(*m_backend->memoryReport()));
    if (announce) emit modelLoaded(info);
}

double EngineWorker::planChunkSeconds(const k3::MemoryReport& report) {
    const k3::MemoryPlan& plan = report.plan;
    const int streamed = plan.totalLayers - plan.pinnedLayers;
    if (!report.trunkStreamed || streamed <= 0 || report.trunk.ioSeconds <= 0 ||
        report.trunk.bytesRead == 0)
        return -1;
    // The ring slot holds the largest streamed layer: an upper bound of each layer's read.
    const double bytesPerChunk = double(streamed) * double(plan.ringSlotBytes);
    return bytesPerChunk * report.trunk.ioSeconds / double(report.trunk.bytesRead);
}

double EngineWorker::readingSecondsLeft(const k3::SessionProgress& p, double secondsPerPosition,
                                        double chunkSeconds, int chunkPositions) {
    const double share = p.fraction();
    if (p.total <= 0 || share >= 1) return -1;
    const double positionsLeft = double(p.total) * (1 - share);
    if (p.chunks == 0) {
        if (secondsPerPosition > 0) return positionsLeft * secondsPerPosition;
        if (chunkSeconds > 0 && chunkPositions > 0) {
            const double chunks = std::ceil(double(p.total) / double(chunkPositions));
            return std::max(1.0, chunks * chunkSeconds - p.seconds);
        }
    }
    return share > 0 && p.seconds > 0 ? p.seconds * (1 - share) / share : -1;
}

bool EngineWorker::modelThinks(const QString& directory) {
    // Bounded reads: a tokenizer_config.json is tens of kB, a template a few.
    constexpr qint64 kLimit = 8 << 20;
    QFile config(directory + QStringLiteral("/tokenizer_config.json"));
    QJsonObject tokenizer;
    if (config.open(QIODevice::ReadOnly))
        tokenizer = QJsonDocument::fromJson(config.read(kLimit)).object();
    const QJsonValue thinking = tokenizer.value(QStringLiteral("chat_template_kwargs"))
                                    .toObject()
                                    .value(QStringLiteral("thinking"));
    if (thinking.isBool()) return thinking.toBool();
    QString chatTemplate = tokenizer.value(QStringLiteral("chat_template")).toString();
    QFile jinja(directory + QStringLiteral("/chat_template.jinja"));
    if (jinja.open(QIODevice::ReadOnly)) chatTemplate = QString::fromUtf8(jinja.read(kLimit));
    return chatTemplate.isEmpty() || chatTemplate.contains(QLatin1String("thinking"));
}

void EngineWorker::connectRemote(const QString& url, const QString& model, const QString& apiKey) {
    // The model in use stays until the server has answered: a wrong URL, key or model
    // name never costs a local model that works (or the server that was in use).
    m_cancel.store(false);
    const bool kept = m_backend != nullptr;
    try {
        k3::RemoteOptions options;
        options.baseUrl = url.trimmed().toStdString();
        options.model = model.trimmed().toStdString();
        options.apiKey = apiKey.toStdString();
        // Asked now, so a wrong URL, key or model name is said before the first message.
        const k3::RemoteClient client(options);
        const std::vector<std::string> offered = client.listModels(&m_cancel);
        if (std::find(offered.begin(), offered.end(), options.model) == offered.end()) {
            QStringList names;
            for (const std::string& id : offered) names << QString::fromStdString(id);
            emit loadFailed(
                tr("The server at %1 does not offer the model \"%2\"; it offers: %3.")
                    .arg(QString::fromStdString(client.serverUrl()), model,
                         names.isEmpty() ? tr("none") : names.join(QStringLiteral(", "))),
                kept);
            return;
        }
        std::unique_ptr<k3::ChatBackend> remote = k3::openRemoteBackend(options);
        const k3::BackendInfo b = remote->info();
        ModelInfo info;
        info.remote = true;
        info.directory = QString::fromStdString(b.location);
        info.modelName = QString::fromStdString(b.modelName);
        info.summary = QString::fromStdString(b.summary);
        info.vision = true;
        m_backend = std::move(remote);
        m_localConfig.reset();
        m_secondsPerPosition = -1;
        m_secondsPerChunk = -1;
        m_modelName = info.modelName;
        MemoryFigures figures;
        figures.remoteUrl = info.directory;
        emit memoryUpdated(figures);
        emit modelLoaded(info);
    } catch (const std::exception& e) {
        emit loadFailed(QString::fromUtf8(e.what()), kept);
    }
}

void EngineWorker::generate(const QVector<ChatTurn>& history, const GenerationSettings& settings) {
    // A stop pressed before this call started belongs to an earlier turn.
    m_cancel.store(false);
    if (!m_backend) {
        emit generationFailed(tr("No model is loaded."));
        return;
    }
    std::vector<k3::ChatMessage> messages;
    try {
        messages = engineMessages(history, settings.imagePatchLimit);
    } catch (const std::exception& e) {
        emit generationFailed(tr("An image of this conversation cannot be read: %1")
                                  .arg(QString::fromUtf8(e.what())));
        return;
    }
    k3::GenerateOptions options;
    options.render.thinking = settings.thinking;
    options.render.thinkingEffort = settings.thinkingEffort.toStdString();
    // Still thinking when it stopped (no answer text yet): the think channel goes on.
    if (settings.continueAnswer && !history.isEmpty())
        options.render.continueChannel =
            settings.thinking && history.last().content.isEmpty() ? "think" : "response";
    options.sampling.temperature = settings.temperature;
    options.sampling.topP = settings.topP;
    options.sampling.seed = settings.seed;
    options.maxTokens = settings.maxTokens;
    // Adaptive: it proposes only where the text repeats the conversation, so it costs
    // nothing elsewhere; exact for greedy and sampled answers alike.
    options.speculation = settings.speculation ? -1 : 0;
    // The OpenMP thread count is per calling thread: set here, it governs the engine's
    // parallel regions for this message. 0 goes back to what this thread started with.
    if (m_defaultThreads == 0) m_defaultThreads = omp_get_max_threads();
    omp_set_num_threads(settings.threads > 0 ? settings.threads : m_defaultThreads);
    GenerationSettings applied = settings;
    applied.threads = omp_get_max_threads();
    emit settingsApplied(applied);
    // However the message ends (an answer, Stop, an error), the docks are given figures
    // without the prompt's progress before they hear of the end: Esc while a prompt was
    // read left "reading the prompt 64 of 260 · about 113 s left" standing.
    const auto settle = [this] {
        if (const std::optional<k3::MemoryReport> report = m_backend->memoryReport())
            emit memoryUpdated(MemoryFigures::from(*report));
    };
    try {
        double chunkSeconds = -1;
        int chunkPositions = 0;
        if (const std::optional<k3::MemoryReport> report = m_backend->memoryReport()) {
            chunkSeconds = planChunkSeconds(*report);
            chunkPositions = report->plan.chunkPositions;
        }
        SignalObserver observer(this, m_backend.get(), !m_localConfig, m_secondsPerPosition,
                                chunkSeconds, chunkPositions);
        const k3::GenerateResult r = m_backend->chat(messages, options, &observer, &m_cancel);
        GenerationSummary s;
        s.content = QString::fromStdString(r.reply.content);
        s.reasoning = QString::fromStdString(r.reply.reasoningContent);
        s.promptTokens = r.promptTokens;
        s.reusedPositions = r.reusedPositions;
        s.restoredPositions = r.restoredPositions;
        s.prefillPositions = r.prefillPositions;
        s.generatedTokens = r.tokenCount();
        s.model = r.model.empty() ? m_modelName : QString::fromStdString(r.model);
        s.interruption = QString::fromStdString(r.interruption);
        s.toolCalls = r.reply.toolCalls;
        s.endOfTurn = r.endOfTurn;
        s.cancelled = r.cancelled;
        // Neither the model, Stop, the context nor a broken stream ended it: the limit did
        // (a server says "length" for the same case).
        if (!r.endOfTurn && !r.cancelled && !r.contextFull && r.interruption.empty() &&
            r.tokenCount() >= settings.maxTokens)
            s.tokenLimit = settings.maxTokens;
        s.valid = r.valid();
        if (r.nonFinite)
            s.invalidReason = tr("a NaN or Inf reached the logits");
        else if (r.droppedExperts > 0)
            s.invalidReason =
                tr("%n routed expert(s) could not be loaded", nullptr, r.droppedExperts);
        s.prefillSeconds = r.prefillSeconds;
        if (r.prefillPositions > 0)
            m_secondsPerPosition = r.prefillSeconds / double(r.prefillPositions);
        if (r.prefillChunks > 0) m_secondsPerChunk = r.prefillSeconds / double(r.prefillChunks);
        s.decodeSeconds = r.decodeSeconds;
        for (const std::string& p : r.problems) s.problems << QString::fromStdString(p);
        settle();
        emit generationFinished(s);
    } catch (const k3::ContextFull& e) { // refused before anything was computed
        settle();
        emit generationFailed(
            tr("The conversation is %1 tokens and the model was loaded with a context of %2 "
               "tokens. Start a new conversation, or raise Context length in Settings "
               "(applied when the model is loaded next).")
                .arg(e.tokens())
                .arg(e.context()));
    } catch (const std::exception& e) {
        settle();
        emit generationFailed(QString::fromUtf8(e.what()));
    }
}

std::vector<k3::ChatMessage> EngineWorker::engineMessages(const QVector<ChatTurn>& history,
                                                          int imagePatchLimit) {
    std::vector<k3::ChatMessage> messages;
    // Only this conversation's images stay prepared (a 1080p image is about 30 MB).
    QHash<QString, std::shared_ptr<const k3::PreparedImage>> used;
    for (const ChatTurn& turn : history) {
        k3::ChatMessage& m = messages.emplace_back(toChatMessage(turn, false));
        if (!m_localConfig) continue; // a server reads the files itself (RemoteClient)
        for (k3::ChatImage& image : m.images) {
            // Another cap is another expansion: prepared again.
            const QString key = QString::number(imagePatchLimit) + QLatin1Char(':') +
                                QString::fromStdString(image.file);
            std::shared_ptr<const k3::PreparedImage>& prepared = used[key];
            if (!prepared) prepared = m_preparedImages.value(key);
            if (!prepared)
                prepared = std::make_shared<const k3::PreparedImage>(
                    k3::prepareImage(k3::readImageFile(image.file),
                                     std::clamp(imagePatchLimit, 1, k3::kOfficialPatchLimit)));
            image.image = prepared;
        }
    }
    m_preparedImages = std::move(used);
    return messages;
}

void EngineWorker::forgetConversation(const QString& transcript) {
    if (!m_backend) return;
    int removed = 0;
    try {
        removed = m_backend->forgetSavedStates(k3::readTranscript(transcript.toStdString()));
    } catch (const std::exception&) {
        // Purged or unreadable already: its states go with the least recently used.
    }
    emit statesForgotten(removed);
}

void EngineWorker::measureSavedStates(const QStringList& ids, const QStringList& transcripts) {
    if (!m_backend) return;
    for (qsizetype i = 0; i < ids.size() && i < transcripts.size(); ++i) {
        k3::StateCacheUsage usage;
        try {
            usage = m_backend->savedStateUsage(k3::readTranscript(transcripts[i].toStdString()));
        } catch (const std::exception&) {
            // unreadable (being written, removed): none is said
        }
        emit savedStateMeasured(ids[i], usage.files, quint64(usage.bytes));
    }
}

void EngineWorker::measureThinkingCost(const QString& effort) {
    if (!m_backend) return;
    double chunkSeconds = m_secondsPerChunk;
    if (chunkSeconds < 0)
        if (const std::optional<k3::MemoryReport> report = m_backend->memoryReport())
            chunkSeconds = planChunkSeconds(*report);
    emit readingCost(chunkSeconds);
    // A first message's prompt with Think on and off: the difference is the effort
    // message and the think channel (the system prompt and the question cancel out).
    std::vector<k3::ChatMessage> hello(1);
    hello[0].role = k3::ChatRole::User;
    hello[0].content = "Hello";
    k3::ChatRenderOptions on, off;
    on.thinkingEffort = effort.toStdString();
    off.thinking = false;
    try {
        const std::optional<int> with = m_backend->promptPositions(hello, on);
        const std::optional<int> without = m_backend->promptPositions(hello, off);
        if (with && without) return emit thinkingCost(*with - *without, m_secondsPerPosition);
    } catch (const std::exception&) {
        // An effort the template does not know: nothing to say beside the switch.
    }
    emit thinkingCost(-1, -1);
}

double EngineWorker::readingSeconds(int positions, double secondsPerPosition, double chunkSeconds,
                                    int chunkPositions) {
    if (positions <= 0) return 0;
    if (secondsPerPosition > 0) return positions * secondsPerPosition;
    if (chunkSeconds > 0 && chunkPositions > 0)
        return std::ceil(double(positions) / double(chunkPositions)) * chunkSeconds;
    return -1;
}

void EngineWorker::measureReading(const QVector<ChatTurn>& history,
                                  const GenerationSettings& settings) {
    if (!m_backend) return;
    k3::ChatRenderOptions render;
    render.thinking = settings.thinking;
    render.thinkingEffort = settings.thinkingEffort.toStdString();
    std::vector<k3::ChatMessage> messages;
    for (const ChatTurn& turn : history) {
        k3::ChatMessage& m = messages.emplace_back(toChatMessage(turn, false));
        m.images.clear(); // an image counts as its placeholder only
    }
    std::optional<int> positions;
    try {
        positions = m_backend->positionsToRead(messages, render);
    } catch (const std::exception&) {
        // not renderable: the send says why
    }
    if (!positions) return emit readingPositions(-1, -1);
    double chunkSeconds = m_secondsPerChunk;
    int chunkPositions = 0;
    if (const std::optional<k3::MemoryReport> report = m_backend->memoryReport()) {
        if (chunkSeconds < 0) chunkSeconds = planChunkSeconds(*report);
        chunkPositions = report->plan.chunkPositions;
    }
    emit readingPositions(
        *positions, readingSeconds(*positions, m_secondsPerPosition, chunkSeconds, chunkPositions));
}

void EngineWorker::resetConversation() {
    if (m_backend) m_backend->reset();
}
