#include "AppSettings.h"

#include "Settings.h"
#include "SettingsTable.h"

#include <QApplication>
#include <QPalette>
#include <QStandardPaths>
#include <QStyle>
#include <QStyleHints>

#include <algorithm>
#include <optional>

#include <k3/launch.hpp>
#include <k3/presets.hpp>
#include <k3/state_cache.hpp>

namespace {
namespace T = SettingsTable;

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
    return T::theme.choices;
}

QStringList AppSettings::efforts() {
    return T::thinkingEffort.choices;
}

AppSettings AppSettings::load() {
    AppSettings a;
    a.greedy = Settings::value(T::greedy);
    a.temperature = Settings::value(T::temperature);
    a.topP = Settings::value(T::topP);
    a.fixedSeed = Settings::value(T::fixedSeed);
    a.seed = Settings::value(T::seed);
    a.thinking = Settings::value(T::thinking);
    a.thinkingEffort = Settings::value(T::thinkingEffort);
    a.theme = Settings::value(T::theme);
    a.launch = loadLaunch();
    a.speculation = Settings::value(T::speculation);
    a.maxTokens = Settings::value(T::maxTokens);
    a.imagePatchLimit = Settings::value(T::imagePatchLimit);
    a.systemPrompt = Settings::value(T::systemPrompt);
    return a;
}

void AppSettings::save() const {
    Settings::setValue(T::greedy, greedy);
    Settings::setValue(T::temperature, temperature);
    Settings::setValue(T::topP, topP);
    Settings::setValue(T::fixedSeed, fixedSeed);
    Settings::setValue(T::seed, seed);
    Settings::setValue(T::thinking, thinking);
    Settings::setValue(T::thinkingEffort, thinkingEffort);
    Settings::setValue(T::theme, theme);
    saveLaunch(launch);
    Settings::setValue(T::speculation, speculation);
    Settings::setValue(T::maxTokens, maxTokens);
    Settings::setValue(T::imagePatchLimit, imagePatchLimit);
    Settings::setValue(T::systemPrompt, systemPrompt);
}

k3::LaunchConfig AppSettings::loadLaunch() {
    k3::LaunchConfig c;
    c.modelDir = Settings::value(T::modelDirectory).toStdString();
    c.trunkDir = Settings::value(T::trunkDirectory).toStdString();
    // A name the preset table does not know (a hand edit) is dropped, not sent on.
    const std::string preset = Settings::value(T::preset).toStdString();
    if (k3::findPreset(preset)) c.budget.preset = preset;
    if (Settings::contains(T::preset.key)) {
        c.budget.trunkBytes = Settings::stored(T::trunkBytes);
        c.budget.cacheBytes = Settings::stored(T::cacheBytes);
    } else { // written by an older k3chat
        if (const auto t = Settings::stored(T::legacyTrunkBytes); t && *t > 0)
            c.budget.trunkBytes = t;
        if (const auto b = Settings::stored(T::legacyCacheBytes); b && *b > 0)
            c.budget.cacheBytes = b;
    }
    // The engine's ranges (validate(LaunchConfig)): a hand-edited value is brought inside.
    c.threads = Settings::value(T::threads);
    c.prefillChunk = Settings::value(T::prefillChunk);
    c.contextLength = Settings::value(T::contextLength);
    c.maxSpeculation = Settings::value(T::maxSpeculation);
    if (const auto mode = k3::pinModeNamed(Settings::value(T::pinMode).toStdString()))
        c.pinMode = *mode;
    c.draftDir = Settings::value(T::draftDirectory).toStdString();
    if (Settings::value(T::stateCache)) c.stateCacheDir = stateCacheDirectory().toStdString();
    c.stateCacheBytes = Settings::stored(T::stateCacheBytes).value_or(0); // 0: the default
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
    Settings::setValue(T::modelDirectory, QString::fromStdString(c.modelDir.string()));
    Settings::setValue(T::trunkDirectory, QString::fromStdString(c.trunkDir.string()));
    if (c.draftDir.empty())
        Settings::remove(T::draftDirectory);
    else
        Settings::setValue(T::draftDirectory, QString::fromStdString(c.draftDir.string()));
    Settings::setValue(T::pinMode, QString::fromLatin1(k3::pinModeName(c.pinMode)));
    Settings::setValue(T::preset, QString::fromStdString(c.budget.preset));
    const auto setBytes = [](const Setting<qulonglong>& setting,
                             const std::optional<std::uint64_t>& v) {
        if (v)
            Settings::setValue(setting, qulonglong(*v));
        else
            Settings::remove(setting);
    };
    setBytes(T::trunkBytes, c.budget.trunkBytes);
    setBytes(T::cacheBytes, c.budget.cacheBytes);
    Settings::remove(T::legacyTrunkBytes);
    Settings::remove(T::legacyCacheBytes);
    Settings::setValue(T::threads, c.threads);
    Settings::setValue(T::prefillChunk, c.prefillChunk);
    Settings::setValue(T::contextLength, c.contextLength);
    Settings::setValue(T::stateCache, !c.stateCacheDir.empty());
    Settings::setValue(T::stateCacheBytes, qulonglong(c.stateCacheBytes));
    Settings::setValue(T::maxSpeculation, c.maxSpeculation);
}

AppSettings::Window AppSettings::loadWindow() {
    return {Settings::value(T::windowGeometry), Settings::value(T::windowSplitter),
            Settings::value(T::windowDocks), Settings::value(T::openConversation)};
}

void AppSettings::saveWindow(const Window& window) {
    Settings::setValue(T::windowGeometry, window.geometry);
    Settings::setValue(T::windowSplitter, window.splitter);
    Settings::setValue(T::windowDocks, window.docks);
    Settings::setValue(T::openConversation, window.conversationId);
}

QStringList AppSettings::pinnedConversations() {
    return Settings::value(T::pinnedConversations);
}

void AppSettings::setPinnedConversations(const QStringList& ids) {
    Settings::setValue(T::pinnedConversations, ids);
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
