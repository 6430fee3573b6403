#pragma once

#include "Setting.h"
#include "worker/EngineWorker.h"

#include <QByteArray>
#include <QStringList>
#include <QVariantMap>
#include <QtGlobal>

#include <limits>

#include <k3/launch.hpp>
#include <k3/vision.hpp>

// Every setting k3chat keeps, declared once: key, type, default and range. Read and
// written through Settings (Settings.h); the keys are those every earlier k3chat wrote,
// so a user's saved settings load unchanged. Launch options take the engine's ranges
// (k3/launch.hpp), the same the CLI and validate(LaunchConfig) use.
namespace SettingsTable {
inline const k3::LaunchConfig kEngineDefaults{};

// Sampling and thinking (Settings dialog; read again for every message).
inline const Setting<bool> greedy{QStringLiteral("sampling/greedy"), true};
inline const Setting<double> temperature{QStringLiteral("sampling/temperature"), 0.7, 0.01, 2.0};
inline const Setting<double> topP{QStringLiteral("sampling/topP"), 0.95, 0.01, 1.0};
inline const Setting<bool> fixedSeed{QStringLiteral("sampling/fixedSeed"), false};
inline const Setting<int> seed{QStringLiteral("sampling/seed"), 42, 0,
                               std::numeric_limits<int>::max()};
inline const Setting<bool> thinking{QStringLiteral("thinking/enabled"), true};
inline const Setting<QString> thinkingEffort{QStringLiteral("thinking/effort"),
                                             QStringLiteral("max"),
                                             {},
                                             {},
                                             // The same choices as the composer's Effort box.
                                             {QStringLiteral("max"), QStringLiteral("high"),
                                              QStringLiteral("medium"), QStringLiteral("low")}};
// Think per model (model key -> bool), the composer's last choice for each.
inline const Setting<QVariantMap> thinkingPerModel{QStringLiteral("thinking/perModel")};
inline const Setting<QString> theme{
    QStringLiteral("appearance/theme"),
    QStringLiteral("system"),
    {},
    {},
    {QStringLiteral("system"), QStringLiteral("light"), QStringLiteral("dark")}};
inline const Setting<bool> speculation{QStringLiteral("engine/speculation"), true};
inline const Setting<int> maxTokens{QStringLiteral("generation/maxTokens"), 512, 1, 32768};
// Largest image in 14-px patches; the release's k3::kOfficialPatchLimit is the most.
inline const Setting<int> imagePatchLimit{QStringLiteral("images/patchLimit"),
                                          GenerationSettings::kDefaultImagePatchLimit, 4,
                                          k3::kOfficialPatchLimit};
// The system prompt a new conversation starts with (empty: none).
inline const Setting<QString> systemPrompt{QStringLiteral("generation/systemPrompt")};

// The launch configuration the wizard, Settings and the next start share.
inline const Setting<QString> modelDirectory{QStringLiteral("model/directory")};
inline const Setting<QString> trunkDirectory{QStringLiteral("model/trunkDir")};
inline const Setting<QString> draftDirectory{QStringLiteral("model/draftDir")}; // absent: lookup
inline const Setting<QString> pinMode{QStringLiteral("launch/pinMode")};        // k3::pinModeNamed
inline const Setting<QString> preset{QStringLiteral("launch/preset")};          // k3::findPreset
inline const Setting<qulonglong> trunkBytes{QStringLiteral("launch/trunkBytes"), 0, 0,
                                            k3::kMaxBudgetBytes}; // absent: the preset's
inline const Setting<qulonglong> cacheBytes{QStringLiteral("launch/cacheBytes"), 0, 0,
                                            k3::kMaxBudgetBytes};
// Written before the launch keys existed: the wizard's budgets, 0 meaning the default.
inline const Setting<qulonglong> legacyTrunkBytes{QStringLiteral("model/trunkBytes"), 0, 0,
                                                  k3::kMaxBudgetBytes};
inline const Setting<qulonglong> legacyCacheBytes{QStringLiteral("model/cacheBytes"), 0, 0,
                                                  k3::kMaxBudgetBytes};
inline const Setting<int> threads{QStringLiteral("engine/threads"), kEngineDefaults.threads,
                                  k3::kThreadsRange.min, k3::kThreadsRange.max};
inline const Setting<int> prefillChunk{QStringLiteral("launch/prefillChunk"),
                                       kEngineDefaults.prefillChunk, k3::kPrefillChunkRange.min,
                                       k3::kPrefillChunkRange.max};
inline const Setting<int> contextLength{QStringLiteral("launch/contextLength"),
                                        kEngineDefaults.contextLength, k3::kContextRange.min,
                                        k3::kContextRange.max};
inline const Setting<int> maxSpeculation{QStringLiteral("launch/maxSpeculation"),
                                         kEngineDefaults.maxSpeculation, k3::kSpeculationRange.min,
                                         k3::kSpeculationRange.max};
inline const Setting<bool> stateCache{QStringLiteral("launch/stateCache"), true};
// 0: the engine's default budget.
inline const Setting<qulonglong> stateCacheBytes{QStringLiteral("launch/stateCacheBytes"), 0, 0,
                                                 qulonglong(1) << 50};
// "local" or "remote": what the next start opens.
inline const Setting<QString> modelSource{QStringLiteral("model/source")};
// The server: the URL and model only; the key stays in the keychain.
inline const Setting<QString> remoteUrl{QStringLiteral("remote/url")};
inline const Setting<QString> remoteModel{QStringLiteral("remote/model")};
inline const Setting<bool> firstRunDone{QStringLiteral("setup/firstRunDone"), false};

// An unfinished checkpoint download the wizard offers to resume (never the token).
inline const Setting<QString> pendingEndpoint{QStringLiteral("download/pending/endpoint")};
inline const Setting<QString> pendingRepo{QStringLiteral("download/pending/repo")};
inline const Setting<QString> pendingRevision{QStringLiteral("download/pending/revision")};
inline const Setting<QString> pendingDestination{QStringLiteral("download/pending/destination")};

// The main window as it was left, restored at the next start.
inline const Setting<QByteArray> windowGeometry{QStringLiteral("mainWindow/geometry")};
inline const Setting<QByteArray> windowSplitter{QStringLiteral("mainWindow/splitter")};
inline const Setting<QByteArray> windowDocks{QStringLiteral("mainWindow/docks")};
inline const Setting<QString> openConversation{QStringLiteral("mainWindow/conversation")};
inline const Setting<QStringList> pinnedConversations{QStringLiteral("conversations/pinned")};
inline const Setting<bool> keepThinkingExpanded{QStringLiteral("chat/keepThinkingExpanded"), false};
inline const Setting<bool> askBeforeQuittingMidAnswer{
    QStringLiteral("chat/askBeforeQuittingMidAnswer"), true};
} // namespace SettingsTable
