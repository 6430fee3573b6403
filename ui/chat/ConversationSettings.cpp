#include "chat/ConversationSettings.h"

#include "worker/EngineWorker.h"

#include <QJsonDocument>
#include <QJsonObject>

void ConversationSettings::applyTo(GenerationSettings& settings) const {
    if (temperature) settings.temperature = float(*temperature);
    if (topP) settings.topP = float(*topP);
    if (maxTokens) settings.maxTokens = *maxTokens;
}

QByteArray ConversationSettings::toJson() const {
    QJsonObject o;
    if (temperature) o.insert(QStringLiteral("temperature"), *temperature);
    if (topP) o.insert(QStringLiteral("top_p"), *topP);
    if (maxTokens) o.insert(QStringLiteral("max_tokens"), *maxTokens);
    if (thinking) o.insert(QStringLiteral("thinking"), *thinking);
    return QJsonDocument(o).toJson(QJsonDocument::Compact) + '\n';
}

ConversationSettings ConversationSettings::fromJson(const QByteArray& json) {
    ConversationSettings s;
    const QJsonObject o = QJsonDocument::fromJson(json).object();
    const QJsonValue t = o.value(QStringLiteral("temperature"));
    if (t.isDouble() && t.toDouble() >= 0 && t.toDouble() <= 2) s.temperature = t.toDouble();
    const QJsonValue p = o.value(QStringLiteral("top_p"));
    if (p.isDouble() && p.toDouble() > 0 && p.toDouble() <= 1) s.topP = p.toDouble();
    const QJsonValue m = o.value(QStringLiteral("max_tokens"));
    if (m.isDouble() && m.toInt() >= 1) s.maxTokens = m.toInt();
    const QJsonValue k = o.value(QStringLiteral("thinking"));
    if (k.isBool()) s.thinking = k.toBool();
    return s;
}
