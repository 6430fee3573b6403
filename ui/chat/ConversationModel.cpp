#include "chat/ConversationModel.h"

#include <QPoint>
#include <QPointF>
#include <QStringList>

#include <algorithm>

ConversationModel::ConversationModel(QObject* parent) : QAbstractListModel(parent) {}

int ConversationModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : int(m_entries.size());
}

Qt::ItemFlags ConversationModel::flags(const QModelIndex& index) const {
    Qt::ItemFlags f = QAbstractListModel::flags(index);
    if (index.isValid() && index.row() < m_entries.size() &&
        !m_entries.at(index.row()).content.isEmpty())
        f |= Qt::ItemIsEditable;
    return f;
}

QVariant ConversationModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= m_entries.size()) return {};
    const Entry& e = m_entries.at(index.row());
    switch (role) {
    case Qt::DisplayRole:
    case ContentRole:
        return e.content;
    case RoleNameRole:
        return e.role;
    case ReasoningRole:
        return e.reasoning;
    case ThinkingExpandedRole:
        return e.thinkingExpanded;
    case StreamingRole:
        return e.streaming;
    case ThinkingSecondsRole:
        // While thinking streams, the count runs live.
        if (e.streaming && !e.answerStarted && e.thinkingClock.isValid())
            return e.thinkingClock.elapsed() / 1000.0;
        return e.thinkingSeconds;
    case StatsRole:
        return e.stats;
    case InvalidRole:
        return e.invalid;
    case ModelRole:
        return e.model;
    case StoppedRole:
        return e.stopped;
    case VersionRole:
        return QPoint(e.versionIndex + 1, int(e.otherVersions.size()) + 1);
    case ImagesRole:
        return e.images;
    case ReadingRole:
        return e.streaming && (e.readTotal > 0 || e.readRestored > 0)
                   ? QVariant(QPointF(e.readDone, e.readTotal))
                   : QVariant();
    case ReadingSecondsLeftRole:
        return e.readSecondsLeft;
    case ReadingRestoredRole:
        return e.readRestored;
    case ReadingAgainRole:
        return e.readAgain;
    default:
        return {};
    }
}

int ConversationModel::appendMessage(const QString& role, const QString& content,
                                     const QStringList& images) {
    const int row = int(m_entries.size());
    beginInsertRows({}, row, row);
    Entry e;
    e.role = role;
    e.content = content;
    e.images = images;
    e.thinkingExpanded = m_expandThinking;
    m_entries.push_back(std::move(e));
    endInsertRows();
    return row;
}

int ConversationModel::beginAssistantMessage(const QString& model) {
    const int row = appendMessage(QStringLiteral("assistant"), QString());
    m_entries[row].streaming = true;
    m_entries[row].model = model;
    changed(row);
    return row;
}

void ConversationModel::setReading(int done, int total, double seconds, int restored, int held,
                                   double fraction, double secondsLeft) {
    if (m_entries.isEmpty() || !m_entries.last().streaming) return;
    Entry& e = m_entries.last();
    e.readRestored = restored;
    e.readAgain = false;
    if (held == 0)
        for (qsizetype i = 0; i + 1 < m_entries.size() && !e.readAgain; ++i)
            e.readAgain = m_entries[i].role == QLatin1String("assistant");
    e.readDone = done;
    e.readTotal = total;
    // The rest at the rate measured so far (chunks and layers cost about the same per
    // position); the layers of a chunk count, so a one-chunk prompt has an estimate early.
    const double share = total > 0 ? std::max(double(done) / total, fraction) : 0;
    e.readSecondsLeft = secondsLeft >= 0                        ? secondsLeft
                        : share > 0 && share < 1 && seconds > 0 ? seconds * (1 - share) / share
                                                                : -1;
    changed(int(m_entries.size()) - 1);
}

void ConversationModel::appendToLast(const QString& thinkingDelta, const QString& responseDelta) {
    if (m_entries.isEmpty()) return;
    Entry& e = m_entries.last();
    e.readTotal = 0; // the prompt is read: tokens stream now
    e.readRestored = 0;
    if (!thinkingDelta.isEmpty()) {
        if (!e.thinkingClock.isValid()) e.thinkingClock.start();
        e.reasoning += thinkingDelta;
    }
    if (!responseDelta.isEmpty()) {
        if (!e.answerStarted && e.thinkingClock.isValid())
            e.thinkingSeconds = e.thinkingClock.elapsed() / 1000.0;
        e.answerStarted = true;
        e.content += responseDelta;
    }
    changed(int(m_entries.size()) - 1);
}

void ConversationModel::finishLast(const QString& stats, const QString& invalidReason,
                                   const QString& model, bool stopped,
                                   const k3::AnswerFigures& figures,
                                   const std::vector<k3::ChatToolCall>& toolCalls) {
    if (m_entries.isEmpty()) return;
    Entry& e = m_entries.last();
    e.toolCalls = toolCalls;
    e.invalid = invalidReason;
    e.model = model;
    e.stopped = stopped;
    e.figures = figures;
    if (e.thinkingClock.isValid() && !e.answerStarted)
        e.thinkingSeconds = e.thinkingClock.elapsed() / 1000.0;
    e.streaming = false;
    e.readTotal = 0;
    e.stats = stats;
    changed(int(m_entries.size()) - 1);
}

bool ConversationModel::resumeLast() {
    if (m_entries.isEmpty()) return false;
    Entry& e = m_entries.last();
    if (e.role != QLatin1String("assistant") || !e.stopped || e.streaming || !e.toolCalls.empty())
        return false;
    e.stopped = false;
    e.streaming = true;
    e.stats.clear();
    changed(int(m_entries.size()) - 1);
    return true;
}

bool ConversationModel::lastIsStreaming() const {
    return !m_entries.isEmpty() && m_entries.last().streaming;
}

void ConversationModel::removeLast() {
    if (m_entries.isEmpty()) return;
    const int row = int(m_entries.size()) - 1;
    std::vector<std::vector<ChatTurn>> others = std::move(m_entries[row].otherVersions);
    const int index = std::min(m_entries[row].versionIndex, int(others.size()) - 1);
    beginRemoveRows({}, row, row);
    m_entries.removeLast();
    endRemoveRows();
    if (others.empty()) return;
    // A new version that never got a word: the one shown before it comes back.
    std::vector<ChatTurn> branch = std::move(others[std::size_t(index)]);
    others.erase(others.begin() + index);
    showBranch(std::move(branch), std::move(others), index);
}

std::vector<ChatTurn> ConversationModel::branchFrom(int row) const {
    std::vector<ChatTurn> branch;
    for (int i = row; i < m_entries.size(); ++i) branch.push_back(turnFor(m_entries[i]));
    if (!branch.empty()) {
        branch.front().otherVersions.clear();
        branch.front().versionIndex = 0;
    }
    return branch;
}

std::vector<std::vector<ChatTurn>> ConversationModel::takeVersions(int row) {
    std::vector<std::vector<ChatTurn>> versions = m_entries[row].otherVersions;
    const int index = std::clamp(m_entries[row].versionIndex, 0, int(versions.size()));
    versions.insert(versions.begin() + index, branchFrom(row));
    beginRemoveRows({}, row, int(m_entries.size()) - 1);
    m_entries.resize(row);
    endRemoveRows();
    return versions;
}

void ConversationModel::showBranch(std::vector<ChatTurn> branch,
                                   std::vector<std::vector<ChatTurn>> others, int index) {
    if (branch.empty()) return;
    branch.front().otherVersions = std::move(others);
    branch.front().versionIndex = index;
    const int row = int(m_entries.size());
    beginInsertRows({}, row, row + int(branch.size()) - 1);
    for (const ChatTurn& t : branch) m_entries.push_back(entryFor(t, m_expandThinking));
    endInsertRows();
}

int ConversationModel::appendVersion(int row, const QString& role, const QString& content,
                                     const QStringList& images) {
    if (row < 0 || row >= m_entries.size()) return appendMessage(role, content, images);
    std::vector<std::vector<ChatTurn>> versions = takeVersions(row);
    const int added = appendMessage(role, content, images);
    m_entries[added].versionIndex = int(versions.size());
    m_entries[added].otherVersions = std::move(versions);
    changed(added);
    return added;
}

int ConversationModel::beginAssistantVersion(int row, const QString& model) {
    const int added = appendVersion(row, QStringLiteral("assistant"), QString());
    m_entries[added].streaming = true;
    m_entries[added].model = model;
    changed(added);
    return added;
}

bool ConversationModel::switchVersion(int row, int index) {
    if (row < 0 || row >= m_entries.size() || lastIsStreaming()) return false;
    const Entry& e = m_entries.at(row);
    if (index < 0 || index > int(e.otherVersions.size())) return false;
    if (index == e.versionIndex) return true;
    std::vector<std::vector<ChatTurn>> versions = takeVersions(row);
    std::vector<ChatTurn> shown = std::move(versions[std::size_t(index)]);
    versions.erase(versions.begin() + index);
    showBranch(std::move(shown), std::move(versions), index);
    return true;
}

void ConversationModel::removeFrom(int row) {
    if (row < 0 || row >= m_entries.size()) return;
    beginRemoveRows({}, row, int(m_entries.size()) - 1);
    m_entries.resize(row);
    endRemoveRows();
}

void ConversationModel::setThinkingExpandedByDefault(bool expanded) {
    m_expandThinking = expanded;
    for (Entry& e : m_entries) e.thinkingExpanded = expanded;
    if (!m_entries.isEmpty()) emit dataChanged(index(0), index(int(m_entries.size()) - 1));
}

void ConversationModel::toggleThinking(int row) {
    if (row < 0 || row >= m_entries.size()) return;
    m_entries[row].thinkingExpanded = !m_entries[row].thinkingExpanded;
    changed(row);
}

void ConversationModel::clear() {
    beginResetModel();
    m_entries.clear();
    m_systemPrompt.clear();
    m_systemPromptChosen = false;
    endResetModel();
}

void ConversationModel::setSystemPrompt(const QString& prompt) {
    m_systemPrompt = prompt;
    m_systemPromptChosen = true;
}

ConversationModel::Entry ConversationModel::entryFor(const ChatTurn& t, bool expandThinking) {
    Entry e;
    e.role = t.role;
    e.content = t.content;
    e.reasoning = t.reasoning;
    e.name = t.name;
    e.invalid = t.invalid;
    e.model = t.model;
    e.stopped = t.stopped;
    e.figures = t.figures;
    e.toolCalls = t.toolCalls;
    e.toolCallId = t.toolCallId;
    e.otherVersions = t.otherVersions;
    e.versionIndex = std::clamp(t.versionIndex, 0, int(t.otherVersions.size()));
    e.images = t.images;
    // A reopened answer shows its saved figures and whether it was cut; an invalid one
    // still says what it is, and one from another model says which.
    QStringList stats;
    if (t.figures.tokens > 0) stats << figuresText(t.figures);
    if (t.stopped) stats << tr("stopped");
    if (!t.toolCalls.empty()) stats << toolCallsText(t.toolCalls);
    if (!t.invalid.isEmpty())
        stats << tr("RUN INVALID: %1").arg(t.invalid);
    else if (!t.model.isEmpty())
        stats << tr("answered by %1").arg(t.model);
    e.stats = stats.join(QStringLiteral(" · "));
    e.thinkingExpanded = expandThinking;
    return e;
}

ChatTurn ConversationModel::turnFor(const Entry& e) {
    ChatTurn t{e.role,  e.content, e.reasoning, e.name,      e.invalid,
               e.model, e.stopped, e.figures,   e.toolCalls, e.toolCallId};
    t.otherVersions = e.otherVersions;
    t.versionIndex = e.versionIndex;
    t.images = e.images;
    return t;
}

void ConversationModel::setTurns(const QVector<ChatTurn>& turns) {
    beginResetModel();
    m_entries.clear();
    // An opened conversation keeps the prompt it had: none when it began without one.
    m_systemPromptChosen = true;
    m_systemPrompt.clear();
    qsizetype first = 0;
    if (!turns.isEmpty() && turns.first().role == QLatin1String("system") &&
        turns.first().otherVersions.empty()) {
        m_systemPrompt = turns.first().content;
        first = 1;
    }
    for (qsizetype i = first; i < turns.size(); ++i)
        m_entries.push_back(entryFor(turns[i], m_expandThinking));
    endResetModel();
}

QVector<ChatTurn> ConversationModel::turns() const {
    QVector<ChatTurn> out;
    if (!m_systemPrompt.isEmpty()) {
        ChatTurn system;
        system.role = QStringLiteral("system");
        system.content = m_systemPrompt;
        out.push_back(std::move(system));
    }
    for (const Entry& e : m_entries)
        if (!e.streaming) out.push_back(turnFor(e));
    return out;
}

QVector<ChatTurn>
ConversationModel::turnsWithPartialAnswer(const k3::AnswerFigures& figures) const {
    QVector<ChatTurn> out = turns();
    if (!lastIsStreaming()) return out;
    const Entry& e = m_entries.last();
    if (e.content.isEmpty() && e.reasoning.isEmpty()) {
        // Nothing arrived yet: the question alone is saved, and can be answered later; a
        // regenerated answer's earlier versions are saved as they were, the latest shown.
        if (e.otherVersions.empty()) return out;
        const int index = std::min(e.versionIndex, int(e.otherVersions.size()) - 1);
        std::vector<std::vector<ChatTurn>> others = e.otherVersions;
        std::vector<ChatTurn> branch = std::move(others[std::size_t(index)]);
        others.erase(others.begin() + index);
        branch.front().otherVersions = std::move(others);
        branch.front().versionIndex = index;
        for (ChatTurn& t : branch) out.push_back(std::move(t));
        return out;
    }
    ChatTurn partial = turnFor(e);
    partial.stopped = true;
    partial.figures = figures;
    out.push_back(std::move(partial));
    return out;
}

QString ConversationModel::toolCallsText(const std::vector<k3::ChatToolCall>& calls) {
    if (calls.empty()) return {};
    QStringList names;
    for (const k3::ChatToolCall& call : calls) names << QString::fromStdString(call.name);
    return tr("calls %1").arg(names.join(QStringLiteral(", ")));
}

QString ConversationModel::figuresText(const k3::AnswerFigures& f) {
    if (f.tokens <= 0) return {};
    return (f.tokens == 1 ? tr("1 token") : tr("%1 tokens").arg(f.tokens)) +
           tr(" · %1 tok/s").arg(f.tokensPerSecond, 0, 'f', 1) +
           tr(" · first token %1 s").arg(f.firstTokenSeconds, 0, 'f', 2);
}

void ConversationModel::changed(int row) {
    const QModelIndex i = index(row);
    emit dataChanged(i, i);
}
