#pragma once

#include <QByteArray>
#include <QString>
#include <QStringList>

#include "SettingsTable.h"
#include "worker/EngineWorker.h"

#include <k3/launch.hpp>
#include <k3/vision.hpp>

// The preferences the Settings dialog edits, kept in the settings table (SettingsTable.h,
// through Settings). MainWindow reads them again for every message, so a change applies
// to the next one. Values read back are clamped to the table's ranges: a hand-edited
// settings file never breaks a message.
class AppSettings {
public:
    bool greedy = SettingsTable::greedy.fallback; // always the most likely token (temperature 0)
    double temperature = SettingsTable::temperature.fallback; // when sampling
    double topP = SettingsTable::topP.fallback;
    bool fixedSeed = SettingsTable::fixedSeed.fallback; // false: a new seed for every message
    int seed = SettingsTable::seed.fallback;
    bool thinking = SettingsTable::thinking.fallback; // the composer's Think box at start
    QString thinkingEffort = SettingsTable::thinkingEffort.fallback;
    QString theme = SettingsTable::theme.fallback; // system, light, dark
    // The model and how it opens: folders, budget, threads (OpenMP; 0: every core),
    // prefill chunk, context. The wizard, Settings and the next start share it.
    k3::LaunchConfig launch = defaultLaunch();
    bool speculation = SettingsTable::speculation
                           .fallback; // verify guesses of repeated text in one pass (same answers)
    int maxTokens = SettingsTable::maxTokens.fallback; // the longest answer, in tokens
    // Largest image in 14-px patches, a quarter of them prompt positions. 4,096 (1,024
    // positions, about 900x900 read as is) keeps a photo's reading to minutes on a laptop
    // streaming the trunk; the release's 65,536 (16,384 positions) is the most.
    static constexpr int kDefaultImagePatchLimit = GenerationSettings::kDefaultImagePatchLimit;
    static constexpr int kMaxImagePatchLimit = k3::kOfficialPatchLimit;
    int imagePatchLimit = kDefaultImagePatchLimit;
    // The system prompt a new conversation starts with (empty: none); each conversation
    // keeps its own in its transcript.
    QString systemPrompt;

    static AppSettings load();
    void save() const;
    // Only the launch configuration (its keys are in SettingsTable.h).
    static k3::LaunchConfig loadLaunch();
    // A launch with nothing set: the engine's defaults, conversation states kept on disk.
    static k3::LaunchConfig defaultLaunch();
    // Where the conversations' transcripts are, and beside them ("states") what the engine
    // keeps of each so a follow-up reads only itself (LaunchConfig::stateCacheDir).
    static QString conversationsDirectory();
    static QString stateCacheDirectory();
    static void saveLaunch(const k3::LaunchConfig& launch);
    bool operator==(const AppSettings&) const = default;

    // The main window as it was left, restored at the next start.
    struct Window {
        QByteArray geometry;    // QWidget::saveGeometry
        QByteArray splitter;    // the sidebar's width
        QByteArray docks;       // QMainWindow::saveState
        QString conversationId; // the conversation open; empty: a new chat
    };
    static Window loadWindow();
    static void saveWindow(const Window& window);

    // The conversations pinned to the top of the list, by id.
    static QStringList pinnedConversations();
    static void setPinnedConversations(const QStringList& ids);

    // The options for one message. randomSeed is used when the seed is not fixed.
    GenerationSettings generationSettings(quint64 randomSeed) const;

    static QStringList themes();
    static QStringList efforts();
    // Applies a theme to the whole application: "system" restores the platform palette.
    static void applyTheme(const QString& theme);
};
