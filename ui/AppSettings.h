#pragma once

#include <QString>
#include <QStringList>

#include "worker/EngineWorker.h"

// The preferences the Settings dialog edits, stored in QSettings. MainWindow reads them
// again for every message, so a change applies to the next one. Values read back are
// clamped to their valid ranges: a hand-edited settings file never breaks a message.
class AppSettings {
public:
    bool greedy = true;       // always the most likely token (temperature 0)
    double temperature = 0.7; // when sampling
    double topP = 0.95;
    bool fixedSeed = false; // false: a new seed for every message
    int seed = 42;
    bool thinking = true; // the composer's Think box at start
    QString thinkingEffort = QStringLiteral("max");
    QString theme = QStringLiteral("system"); // system, light, dark
    QString modelDir;                         // the key MainWindow remembers the last model by
    QString trunkDir;                         // empty: every weight resident
    int threads = 0;                          // OpenMP threads; 0: the default (every core)
    bool speculation = true; // verify guesses of repeated text in one pass (same answers)
    int maxTokens = 512;     // the longest answer, in tokens

    static AppSettings load();
    void save() const;
    bool operator==(const AppSettings&) const = default;

    // The options for one message. randomSeed is used when the seed is not fixed.
    GenerationSettings generationSettings(quint64 randomSeed) const;

    static QStringList themes();
    static QStringList efforts();
    // Applies a theme to the whole application: "system" restores the platform palette.
    static void applyTheme(const QString& theme);
};
