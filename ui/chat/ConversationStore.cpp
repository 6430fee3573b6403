#include "chat/ConversationStore.h"

#include <QDir>
#include <QFileInfo>
#include <QUuid>

#include <k3/chat.hpp>

namespace {

std::vector<k3::ChatMessage> toMessages(const QVector<ChatTurn>& turns) {
    std::vector<k3::ChatMessage> out;
    for (const ChatTurn& t : turns) {
        k3::ChatMessage m;
        m.role = k3::parseChatRole(t.role.toStdString()).value_or(k3::ChatRole::User);
        m.content = t.content.toStdString();
        m.reasoningContent = t.reasoning.toStdString();
        m.name = t.name.toStdString();
        m.invalid = t.invalid.toStdString();
        if (m.role == k3::ChatRole::Assistant) {
            m.model = t.model.toStdString();
            m.stopped = t.stopped;
            m.figures = t.figures;
        }
        out.push_back(std::move(m));
    }
    return out;
}

} // namespace

ConversationStore::ConversationStore(QString directory) : m_directory(std::move(directory)) {}

ConversationStore::~ConversationStore() = default;

void ConversationStore::claim(const QString& id) {
    if (id == m_claimedId && m_lock) return;
    QDir().mkpath(m_directory);
    auto lock = std::make_unique<k3::OutputLock>(pathFor(id).toStdString()); // may throw
    m_lock = std::move(lock);
    m_claimedId = id;
}

void ConversationStore::release() {
    m_lock.reset();
    m_claimedId.clear();
}

QString ConversationStore::pathFor(const QString& id) const {
    return m_directory + QLatin1Char('/') + id + QStringLiteral(".jsonl");
}

QString ConversationStore::titleFor(const QVector<ChatTurn>& turns) {
    for (const ChatTurn& t : turns)
        if (t.role == QLatin1String("user")) {
            QString title = t.content.simplified();
            if (title.size() > 48) title = title.left(47) + QStringLiteral("…");
            return title;
        }
    return QObject::tr("New chat");
}

QVector<ConversationStore::Summary> ConversationStore::list() const {
    QVector<Summary> out;
    const QFileInfoList files =
        QDir(m_directory).entryInfoList({QStringLiteral("*.jsonl")}, QDir::Files, QDir::Time);
    for (const QFileInfo& f : files) {
        Summary s;
        s.id = f.completeBaseName();
        s.modified = f.lastModified();
        try {
            s.title = titleFor(load(s.id));
        } catch (const std::exception&) {
            s.title = QObject::tr("%1 (unreadable)").arg(f.fileName());
        }
        out.push_back(s);
    }
    return out;
}

QVector<ChatTurn> ConversationStore::toTurns(const std::vector<k3::ChatMessage>& messages) {
    QVector<ChatTurn> turns;
    for (const k3::ChatMessage& m : messages)
        turns.push_back({QString::fromUtf8(k3::chatRoleName(m.role).data(),
                                           qsizetype(k3::chatRoleName(m.role).size())),
                         QString::fromStdString(m.content),
                         QString::fromStdString(m.reasoningContent), QString::fromStdString(m.name),
                         QString::fromStdString(m.invalid), QString::fromStdString(m.model),
                         m.stopped, m.figures});
    return turns;
}

QVector<ChatTurn> ConversationStore::load(const QString& id) const {
    return toTurns(k3::readTranscript(pathFor(id).toStdString()));
}

QString ConversationStore::save(const QString& id, const QVector<ChatTurn>& turns) {
    QDir().mkpath(m_directory);
    const QString useId =
        id.isEmpty()
            ? QDateTime::currentDateTimeUtc().toString(QStringLiteral("yyyyMMdd-HHmmss-")) +
                  QUuid::createUuid().toString(QUuid::Id128).left(8)
            : id;
    claim(useId);
    k3::writeTranscript(pathFor(useId).toStdString(), toMessages(turns));
    return useId;
}

bool ConversationStore::remove(const QString& id) {
    if (id == m_claimedId) release();
    return QFile::remove(pathFor(id));
}
