#pragma once

#include <QHash>
#include <QObject>
#include <QString>
#include <QStringList>
#include <QVector>

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include <k3/backend.hpp>

#include "chat/ChatTurn.h"
#include "worker/LaunchConfigMetaType.h"

struct GenerationSettings {
    bool thinking = false;
    QString thinkingEffort = QStringLiteral("max");
    float temperature = 0.0f;
    float topP = 1.0f;
    quint64 seed = 0;
    int maxTokens = 512;
    int threads = 0;         // OpenMP threads for this message; 0: the default (every core)
    bool speculation = true; // greedy answers verify prompt-lookup guesses (same tokens)
    // The history ends with a stopped answer, continued where it stopped (no new turn).
    bool continueAnswer = false;
    // Largest image in 14-px patches (k3::prepareImage): the app's laptop default, as
    // AppSettings's, not the release's 65,536 (k3 --image-patch-limit's default).
    static constexpr int kDefaultImagePatchLimit = 4096;
    int imagePatchLimit = kDefaultImagePatchLimit;
};

struct GenerationSummary {
    QString content;
    QString reasoning;
    int promptTokens = 0;
    int reusedPositions = 0;
    int restoredPositions = 0; // of the reused ones, loaded from the state cache on disk
    int prefillPositions = 0;  // prompt positions computed: the prompt less the reused ones
    int generatedTokens = 0;
    bool endOfTurn = false;
    bool cancelled = false;
    // The answer was cut at the longest answer allowed (GenerationSettings::maxTokens),
    // before the model ended it: that limit; 0 when it was not.
    int tokenLimit = 0;
    bool valid = true;
    QString invalidReason; // empty when valid
    double prefillSeconds = 0;
    double decodeSeconds = 0;
    QStringList problems;
    QString model;        // who answered: the model folder's name, or the server's model
    QString interruption; // a server's stream broke: why (content holds what arrived)
    std::vector<k3::ChatToolCall> toolCalls; // the calls the answer makes (saved with it)
};

struct ModelInfo {
    bool remote = false;
    QString directory; // the model folder, or the server's URL
    QString modelName; // the folder's name, or the model the server is asked for
    QString summary;
    int layers = 0;
    int vocabSize = 0;
    quint64 weightBytes = 0;
    k3::LaunchConfig launch; // how a local model was opened
    // Images can be sent: a local checkpoint with a vision tower, or a server (which
    // refuses them itself when its model has none).
    bool vision = false;
    // The model writes a think channel (EngineWorker::modelThinks); a server's: true.
    bool thinks = true;
};

// The engine's memory figures as the panels show them (from k3::MemoryReport).
struct MemoryFigures {
    struct Component {
        QString name;
        quint64 bytes = 0;
    };
    QVector<Component> plan; // each planned component, in drawing order
    quint64 availableBytes = 0;
    int pinnedLayers = 0;
    int totalLayers = 0;
    bool trunkStreamed = false;
    bool expertsCached = false;
    quint64 cacheRequests = 0;
    // Served without a disk read: the expert was in memory before its layer asked. The
    // engine's "hits" also count experts the layer's own batch had just read (prefetch).
    quint64 cacheResidentHits = 0;
    quint64 cachePrefetchHits = 0; // read from disk by the layer's batch just before use
    quint64 cacheDiskReads = 0;    // experts read from disk
    double cacheHitRate = 0;
    double cacheResidentHitRate = 0;
    quint64 cacheEvictions = 0;
    int cacheSlots = 0;         // the cache's capacity in experts
    quint64 cacheSlotBytes = 0; // one slot: the expert's size, aligned up
    quint64 trunkBytesRead = 0;
    quint64 expertBytesRead = 0;
    // Seconds with a read in progress (the trunk reader's, the expert reads' in flight):
    // bytes over them is the disk's rate while reading. Not the compute's wait (ioShare).
    double readBusySeconds = 0;
    double wallSeconds = 0;
    double ioShare = 0;
    quint64 peakRssBytes = 0;
    // Set when a server answers: it plans its own memory, so there are no local figures
    // and the panels say "remote: URL".
    QString remoteUrl;
    // While the prompt is read (prefill): positions done of total, seconds so far and the
    // bytes this prefill read. prefillTotal 0: not reading a prompt.
    int prefillDone = 0;
    int prefillTotal = 0;
    double prefillSeconds = 0;
    quint64 prefillBytesRead = 0;
    // The share of the reading done with the current chunk's layers (-1: not known).
    double prefillFraction = -1;
    // The seconds left, as EngineWorker::readingSecondsLeft says (-1: not known yet).
    double prefillSecondsLeft = -1;

    // The plan as the engine computed it (the components above are drawn from it).
    k3::MemoryPlan enginePlan;

    quint64 plannedBytes() const;
    // "reading the prompt 16 of 40 · 1.20 GB read · about 12 s left"; empty when no
    // prompt is being read.
    QString prefillText() const;
    static MemoryFigures from(const k3::MemoryReport& report);
    // The plan's components, layers and available memory; nothing measured yet.
    static MemoryFigures fromPlan(const k3::MemoryPlan& plan);
};

Q_DECLARE_METATYPE(ChatTurn)
Q_DECLARE_METATYPE(MemoryFigures)
Q_DECLARE_METATYPE(GenerationSettings)
Q_DECLARE_METATYPE(GenerationSummary)
Q_DECLARE_METATYPE(ModelInfo)

// Owns the chat backend (a local engine Session, or the client of an OpenAI-compatible
// server) on a worker thread: commands arrive through EngineController's queue, results
// leave as signals. Nothing here ever runs on the GUI thread except requestStop(), which only
// sets an atomic flag the engine polls between tokens (the remote client every 50 ms).
class EngineWorker : public QObject {
    Q_OBJECT
public:
    EngineWorker();
    ~EngineWorker() override;

    // Thread-safe: the current prefill or generation stops within one token.
    void requestStop() { m_cancel.store(true); }

    // Commands, called on the engine thread (EngineController queues them).
    // Opens a local model exactly as `config` describes it (the memory plan enforced).
    void loadModel(const k3::LaunchConfig& config);
    // A server instead of a local model: checks that it answers and offers `model`
    // (GET /v1/models), then chats through it. The key never leaves this object.
    void connectRemote(const QString& url, const QString& model, const QString& apiKey);
    void generate(const QVector<ChatTurn>& history, const GenerationSettings& settings);
    void resetConversation();
    // The conversation in `transcript` (a deleted one, in the trash) leaves no saved state.
    void forgetConversation(const QString& transcript);
    // The saved states of each conversation (ids[i], its transcript transcripts[i]):
    // emits savedStateMeasured for each.
    void measureSavedStates(const QStringList& ids, const QStringList& transcripts);
    // What Think adds to a new conversation's prompt at `effort`: emits thinkingCost.
    void measureThinkingCost(const QString& effort);
    // What sending `history` (the new message last) with `settings` would read before its
    // first token: emits readingPositions.
    void measureReading(const QVector<ChatTurn>& history, const GenerationSettings& settings);

    // Whether the checkpoint in `directory` thinks, from its own files (never its path, so
    // a copy decides as the original): tokenizer_config.json's "chat_template_kwargs"
    // {"thinking": false} (the defaults a template is rendered with, as servers take them)
    // says no; a chat template (chat_template.jinja, or tokenizer_config.json's
    // "chat_template") that never reads `thinking` says no; otherwise yes, as Kimi K3's
    // template does. Reads files: call it on the engine thread.
    static bool modelThinks(const QString& directory);

    // The seconds the prompt `p` still takes to read (-1: not known). Until its first chunk
    // is done the share read says little (the pinned layers come first and cost no reads),
    // so the estimate is `secondsPerPosition` (the last message's rate at this budget) or
    // else the plan's: `chunkSeconds` (one chunk's streamed trunk bytes at the disk rate
    // measured by this session) per chunk of `chunkPositions`. From then on, the rate
    // measured in this prompt.
    static double readingSecondsLeft(const k3::SessionProgress& p, double secondsPerPosition,
                                     double chunkSeconds, int chunkPositions);
    // One chunk's streamed trunk reads at the disk rate this session measured (-1: nothing
    // streams, or no read measured yet).
    static double planChunkSeconds(const k3::MemoryReport& report);
    // The seconds reading `positions` takes at this budget: the last message's rate, else
    // the plan's chunks at the measured disk rate (-1: not known).
    static double readingSeconds(int positions, double secondsPerPosition, double chunkSeconds,
                                 int chunkPositions);

signals:
    void modelLoaded(const ModelInfo& info);
    // previousModelKept: what was loaded before (a model or a server) still answers.
    void loadFailed(const QString& message, bool previousModelKept = false);
    // After each prompt chunk: positions read of this prompt, seconds since it started.
    // restored: positions of the prompt loaded from the state cache on disk (not read).
    // held: positions the state held before (in memory or restored; 0: read from the start).
    // fraction: the share of the reading done, the current chunk's layers counted
    // (k3::SessionProgress::fraction).
    // secondsLeft: readingSecondsLeft's estimate (-1: none yet).
    void prefillProgress(int done, int total, double seconds, int restored = 0, int held = 0,
                         double fraction = -1, double secondsLeft = -1);
    void tokenGenerated(int index, const QString& thinkingDelta, const QString& responseDelta,
                        double seconds);
    // Where the token's time went (the I/O parts are 0 while every weight is resident).
    // fromProposal: the token was an accepted speculative proposal (it shares its
    // verification pass's time with the others that pass committed).
    void tokenTiming(int index, double computeSeconds, double trunkIoSeconds,
                     double expertIoSeconds, bool fromProposal = false);
    // A server's delta instead of tokenTiming: the seconds since the previous delta and
    // the tokens it carried (0: the server did not say; its usage gives the total at the end).
    void deltaTiming(int index, double seconds, int tokens);
    void generationFinished(const GenerationSummary& summary);
    // Before the prompt is read: the settings as the engine gets them (threads: the
    // OpenMP thread count now in force on the engine thread).
    void settingsApplied(const GenerationSettings& settings);
    // After the model loads and after every token: the plan and what it did.
    void memoryUpdated(const MemoryFigures& figures);
    void generationFailed(const QString& message);
    // What the prefix cache keeps of conversation `id`: `files` states, `bytes` on disk.
    void savedStateMeasured(const QString& id, int files, quint64 bytes);
    // forgetConversation removed `files` saved states.
    void statesForgotten(int files);
    // Prompt positions Think adds (-1: not known here, e.g. a server) and the seconds one
    // position took in the last message read (-1: none read yet with this model).
    void thinkingCost(int positions, double secondsPerPosition);
    // What one pass over the prompt costs before the first token at this budget: the last
    // message's seconds per chunk, else planChunkSeconds (-1: not known, or a server).
    void readingCost(double secondsPerChunk);
    // measureReading's answer: the prompt positions not held in memory nor on disk (-1:
    // not known here, e.g. a server) and readingSeconds for them.
    void readingPositions(int positions, double seconds);

private:
    // Opens `config` in place of the current backend; announce: emit modelLoaded.
    void openLocal(const k3::LaunchConfig& config, bool announce = true);

    // The history as the engine reads it; a local model's images decoded and prepared
    // (from the saved copies, here on the engine thread). Throws ImageError naming a file.
    std::vector<k3::ChatMessage> engineMessages(const QVector<ChatTurn>& history,
                                                int imagePatchLimit);

    std::unique_ptr<k3::ChatBackend> m_backend;
    // The last conversation's images by patch limit and file, prepared: the copies are
    // never rewritten (named by their content).
    QHash<QString, std::shared_ptr<const k3::PreparedImage>> m_preparedImages;
    std::optional<k3::LaunchConfig> m_localConfig; // the local model open now, if any
    QString m_modelName;                           // recorded with each answer
    std::atomic<bool> m_cancel{false};
    double m_secondsPerPosition = -1; // the last prompt's reading rate at this budget
    double m_secondsPerChunk = -1;    // and its seconds per chunk
    int m_defaultThreads = 0;         // the engine thread's OpenMP default, read on first use
};
