#include "AppSettings.h"

#include <QApplication>
#include <QPalette>
#include <QSettings>
#include <QStandardPaths>
#include <QStyle>
#include <QStyleHints>

#include <algorithm>
#include <optional>

#include <k3/launch.hpp>
#include <k3/presets.hpp>
#include <k3/state_cache.hpp>

namespace {
// Keys: every preference, and the whole launch configuration.
const QString kGreedy = QStringLiteral("sampling/greedy");
const QString kTemperature = QStringLiteral("sampling/temperature");
const QString kTopP = QStringLiteral("sampling/topP");
const QString kFixedSeed = QStringLiteral("sampling/fixedSeed");
const QString kSeed = QStringLiteral("sampling/seed");
const QString kThinking = QStringLiteral("thinking/enabled");
const QString kEffort = QStringLiteral("thinking/effort");
const QString kTheme = QStringLiteral("appearance/theme");
const QString kModelDir = QStringLiteral("model/directory");
const QString kTrunkDir = QStringLiteral("model/trunkDir");
const QString kDraftDir = QStringLiteral("model/draftDir"); // absent: prompt lookup
const QString kPinMode = QStringLiteral("launch/pinMode");
const QString kThreads = QStringLiteral("engine/threads");
const QString kPreset = QStringLiteral("launch/preset");
const QString kTrunkBytes = QStringLiteral("launch/trunkBytes"); // absent: the preset's
const QString kCacheBytes = QStringLiteral("launch/cacheBytes");
const QString kPrefillChunk = QStringLiteral("launch/prefillChunk");
const QString kContextLength = QStringLiteral("launch/contextLength");
const QString kMaxSpeculation = QStringLiteral("launch/maxSpeculation");
const QString kStateCache = QStringLiteral("launch/stateCache"); // absent: on
const QString kStateCacheBytes = QStringLiteral("launch/stateCacheBytes");
// Before the launch keys: the wizard's budgets, 0 meaning "the engine's default".
const QString kLegacyTrunkBytes = QStringLiteral("model/trunkBytes");
const QString kLegacyCacheBytes = QStringLiteral("model/cacheBytes");

std::optional<std::uint64_t> bytesValue(const QSettings& s, const QString& key) {
    bool ok = false;
    const qulonglong v = s.value(key).toULongLong(&ok);
    return s.contains(key) && ok ? std::optional<std::uint64_t>(v) : std::nullopt;
}
const QString kSpeculation = QStringLiteral("engine/speculation");
const QString kMaxTokens = QStringLiteral("generation/maxTokens");
const QString kImagePatchLimit = QStringLiteral("images/patchLimit");
const QString kSystemPrompt = QStringLiteral("generation/systemPrompt");
const QString kWindowGeometry = QStringLiteral("mainWindow/geometry");
const QString kWindowSplitter = QStringLiteral("mainWindow/splitter");
const QString kWindowDocks = QStringLiteral("mainWindow/docks");
const QString kOpenConversation = QStringLiteral("mainWindow/conversation");
const QString kPinnedConversations = QStringLiteral("conversations/pinned");

QPalette darkPalette() {
    QPalette p;
    const QColor window(0x2b, 0x2b, 0x2b), base(0x1e, 0x1e, 0x1e), text(0xe6, 0xe6, 0xe6);
    const QColor disabled(0x80, 0x80, 0x80), highlight(0x3d, 0x7a, 0xd6);
    p.setColor(QPalette::Window, window);
    p.setColor(QPalette::WindowText, text);
    p.setColor(QPalette::Base, base);
    p.setColor(QPalette::AlternateBase, window);
    p.setColor(QPalette::ToolTipBase, base);
    p.setColor(QPalette::ToolTipText, text);
    p.setColor(QPalette::PlaceholderText, disabled);
    p.setColor(QPalette::Text, text);
    p.setColor(QPalette::Button, window);
    p.setColor(QPalette::ButtonText, text);
    p.setColor(QPalette::BrightText, Qt::red);
    p.setColor(QPalette::Link, QColor(0x6c, 0xa8, 0xff));
    p.setColor(QPalette::Highlight, highlight);
    p.setColor(QPalette::HighlightedText, Qt::white);
    for (QPalette::ColorRole role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
        p.setColor(QPalette::Disabled, role, disabled);
    return p;
}
} // namespace

QStringList AppSettings::themes() {
    return {QStringLiteral("system"), QStringLiteral("light"), QStringLiteral("dark")};
}

QStringList AppSettings::efforts() {
    // The same choices as the composer's Effort box.
    return {QStringLiteral("max"), QStringLiteral("high"), QStringLiteral("medium"),
            QStringLiteral("low")};
}

AppSettings AppSettings::load() {
    const QSettings s;
    AppSettings a;
    a.greedy = s.value(kGreedy, a.greedy).toBool();
    a.temperature = std::clamp(s.value(kTemperature, a.temperature).toDouble(), 0.01, 2.0);
    a.topP = std::clamp(s.value(kTopP, a.topP).toDouble(), 0.01, 1.0);
    a.fixedSeed = s.value(kFixedSeed, a.fixedSeed).toBool();
    a.seed = std::max(0, s.value(kSeed, a.seed).toInt());
    a.thinking = s.value(kThinking, a.thinking).toBool();
    const QString effort = s.value(kEffort, a.thinkingEffort).toString();
    if (efforts().contains(effort)) a.thinkingEffort = effort;
    const QString theme = s.value(kTheme, a.theme).toString();
    if (themes().contains(theme)) a.theme = theme;
    a.launch = loadLaunch();
    a.speculation = s.value(kSpeculation, a.speculation).toBool();
    a.maxTokens = std::clamp(s.value(kMaxTokens, a.maxTokens).toInt(), 1, 32768);
    a.imagePatchLimit =
        std::clamp(s.value(kImagePatchLimit, a.imagePatchLimit).toInt(), 4, kMaxImagePatchLimit);
    a.systemPrompt = s.value(kSystemPrompt).toString();
    return a;
}

void AppSettings::save() const {
    QSettings s;
    s.setValue(kGreedy, greedy);
    s.setValue(kTemperature, temperature);
    s.setValue(kTopP, topP);
    s.setValue(kFixedSeed, fixedSeed);
    s.setValue(kSeed, seed);
    s.setValue(kThinking, thinking);
    s.setValue(kEffort, thinkingEffort);
    s.setValue(kTheme, theme);
    saveLaunch(launch);
    s.setValue(kSpeculation, speculation);
    s.setValue(kMaxTokens, maxTokens);
    s.setValue(kImagePatchLimit, imagePatchLimit);
    s.setValue(kSystemPrompt, systemPrompt);
}

k3::LaunchConfig AppSettings::loadLaunch() {
    const QSettings s;
    k3::LaunchConfig c;
    c.modelDir = s.value(kModelDir).toString().toStdString();
    c.trunkDir = s.value(kTrunkDir).toString().toStdString();
    // A name the preset table does not know (a hand edit) is dropped, not sent on.
    const std::string preset = s.value(kPreset).toString().toStdString();
    if (k3::findPreset(preset)) c.budget.preset = preset;
    if (s.contains(kPreset)) {
        c.budget.trunkBytes = bytesValue(s, kTrunkBytes);
        c.budget.cacheBytes = bytesValue(s, kCacheBytes);
    } else { // written by an older k3chat
        if (const auto t = bytesValue(s, kLegacyTrunkBytes); t && *t > 0) c.budget.trunkBytes = t;
        if (const auto b = bytesValue(s, kLegacyCacheBytes); b && *b > 0) c.budget.cacheBytes = b;
    }
    for (std::optional<std::uint64_t>* bytes : {&c.budget.trunkBytes, &c.budget.cacheBytes})
        if (*bytes) **bytes = std::min(**bytes, k3::kMaxBudgetBytes);
    // The engine's ranges (validate(LaunchConfig)): a hand-edited value is brought inside.
    const auto number = [&s](const QString& key, int fallback, k3::LaunchRange r) {
        return std::clamp(s.value(key, fallback).toInt(), r.min, r.max);
    };
    c.threads = number(kThreads, c.threads, k3::kThreadsRange);
    c.prefillChunk = number(kPrefillChunk, c.prefillChunk, k3::kPrefillChunkRange);
    c.contextLength = number(kContextLength, c.contextLength, k3::kContextRange);
    c.maxSpeculation = number(kMaxSpeculation, c.maxSpeculation, k3::kSpeculationRange);
    if (const auto mode = k3::pinModeNamed(s.value(kPinMode).toString().toStdString()))
        c.pinMode = *mode;
    c.draftDir = s.value(kDraftDir).toString().toStdString();
    if (s.value(kStateCache, true).toBool()) c.stateCacheDir = stateCacheDirectory().toStdString();
    // 0: the engine's default budget.
    c.stateCacheBytes = std::min<std::uint64_t>(bytesValue(s, kStateCacheBytes).value_or(0),
                                                std::uint64_t(1) << 50);
    return c;
}

k3::LaunchConfig AppSettings::defaultLaunch() {
    k3::LaunchConfig c;
    c.stateCacheDir = stateCacheDirectory().toStdString();
    return c;
}

QString AppSettings::conversationsDirectory() {
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) +
           QStringLiteral("/conversations");
}

QString AppSettings::stateCacheDirectory() {
    return conversationsDirectory() + QStringLiteral("/states");
}

void AppSettings::saveLaunch(const k3::LaunchConfig& c) {
    QSettings s;
    s.setValue(kModelDir, QString::fromStdString(c.modelDir.string()));
    s.setValue(kTrunkDir, QString::fromStdString(c.trunkDir.string()));
    if (c.draftDir.empty())
        s.remove(kDraftDir);
    else
        s.setValue(kDraftDir, QString::fromStdString(c.draftDir.string()));
    s.setValue(kPinMode, QString::fromLatin1(k3::pinModeName(c.pinMode)));
    s.setValue(kPreset, QString::fromStdString(c.budget.preset));
    const auto setBytes = [&s](const QString& key, const std::optional<std::uint64_t>& v) {
        if (v)
            s.setValue(key, qulonglong(*v));
        else
            s.remove(key);
    };
    setBytes(kTrunkBytes, c.budget.trunkBytes);
    setBytes(kCacheBytes, c.budget.cacheBytes);
    s.remove(kLegacyTrunkBytes);
    s.remove(kLegacyCacheBytes);
    s.setValue(kThreads, c.threads);
    s.setValue(kPrefillChunk, c.prefillChunk);
    s.setValue(kContextLength, c.contextLength);
    s.setValue(kStateCache, !c.stateCacheDir.empty());
    s.setValue(kStateCacheBytes, qulonglong(c.stateCacheBytes));
    s.setValue(kMaxSpeculation, c.maxSpeculation);
}

AppSettings::Window AppSettings::loadWindow() {
    const QSettings s;
    return {s.value(kWindowGeometry).toByteArray(), s.value(kWindowSplitter).toByteArray(),
            s.value(kWindowDocks).toByteArray(), s.value(kOpenConversation).toString()};
}

void AppSettings::saveWindow(const Window& window) {
    QSettings s;
    s.setValue(kWindowGeometry, window.geometry);
    s.setValue(kWindowSplitter, window.splitter);
    s.setValue(kWindowDocks, window.docks);
    s.setValue(kOpenConversation, window.conversationId);
}

QStringList AppSettings::pinnedConversations() {
    return QSettings().value(kPinnedConversations).toStringList();
}

void AppSettings::setPinnedConversations(const QStringList& ids) {
    QSettings().setValue(kPinnedConversations, ids);
}

GenerationSettings AppSettings::generationSettings(quint64 randomSeed) const {
    GenerationSettings g;
    g.thinking = thinking;
    g.thinkingEffort = thinkingEffort;
    g.temperature = greedy ? 0.0f : float(temperature);
    g.topP = greedy ? 1.0f : float(topP);
    g.seed = fixedSeed ? quint64(seed) : randomSeed;
    g.threads = launch.threads;
    g.speculation = speculation;
    g.maxTokens = maxTokens;
    g.imagePatchLimit = imagePatchLimit;
    return g;
}

void AppSettings::applyTheme(const QString& theme) {
    // The palette the platform gave us, kept for "system".
    static const QPalette platform = QApplication::palette();
    if (theme == QLatin1String("dark"))
        QApplication::setPalette(darkPalette());
    else if (theme == QLatin1String("light"))
        QApplication::setPalette(QApplication::style()->standardPalette());
    else
        QApplication::setPalette(platform);
#if QT_VERSION >= QT_VERSION_CHECK(6, 8, 0)
    QGuiApplication::styleHints()->setColorScheme(
        theme == QLatin1String("dark")    ? Qt::ColorScheme::Dark
        : theme == QLatin1String("light") ? Qt::ColorScheme::Light
                                          : Qt::ColorScheme::Unknown);
#endif
}
