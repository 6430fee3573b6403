#pragma once

#include <QAbstractListModel>
#include <QElapsedTimer>
#include <QVector>

#include "worker/EngineWorker.h"

// The messages of the open conversation. Model output is stored as plain text and
// only ever rendered as Markdown with raw HTML disabled (MessageDelegate).
class ConversationModel : public QAbstractListModel {
    Q_OBJECT
public:
    enum Roles {
        RoleNameRole = Qt::UserRole + 1, // "user", "assistant", "system"
        ContentRole,
        ReasoningRole,
        ThinkingExpandedRole,
        StreamingRole,
        ThinkingSecondsRole, // -1 while no reasoning was seen
        StatsRole,
        ReadingRole,            // QPointF(done, total) prompt positions while the prompt is read
        ReadingSecondsLeftRole, // the estimate from the measured rate; -1: not known yet
        InvalidRole,            // why the answer is not the model's; empty when valid
        ModelRole,              // the model that answered; empty when not recorded
        StoppedRole,            // the answer was cut before the model ended it
    };

    explicit ConversationModel(QObject* parent = nullptr);

    int rowCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;

    int appendMessage(const QString& role, const QString& content);
    // Starts an empty assistant message that tokens will stream into.
    int beginAssistantMessage();
    void appendToLast(const QString& thinkingDelta, const QString& responseDelta);
    // The streaming message's prompt reading: `done` of `total` positions after
    // `seconds`; the first token (appendToLast) or finishLast clears it.
    void setReading(int done, int total, double seconds);
    // invalidReason: not empty when the answer is not the model's (an expert failed to
    // load, a NaN appeared); it is kept with the message and saved with it.
    // model: who answered (a folder's or a server's model name), saved with the answer.
    // stopped: cut before the model ended it; figures: saved with it (tokens 0: none).
    // toolCalls: the functions the answer calls, saved with it.
    void finishLast(const QString& stats, const QString& invalidReason = {},
                    const QString& model = {}, bool stopped = false,
                    const k3::AnswerFigures& figures = {},
                    const std::vector<k3::ChatToolCall>& toolCalls = {});
    // The message tokens stream into is still open.
    bool lastIsStreaming() const;
    void removeLast();
    // Drops message `row` and everything after it (editing an earlier message).
    void removeFrom(int row);
    void toggleThinking(int row);
    // Expands (or collapses) every thinking block, now and for messages added later.
    void setThinkingExpandedByDefault(bool expanded);
    bool thinkingExpandedByDefault() const { return m_expandThinking; }
    void clear();
    void setTurns(const QVector<ChatTurn>& turns);

    // The conversation as the engine should see it (streaming message excluded).
    QVector<ChatTurn> turns() const;
    // turns() and, when it holds text, the streaming answer so far marked stopped with
    // `figures`: what is saved while an answer streams, so a crash or quit loses nothing.
    QVector<ChatTurn> turnsWithPartialAnswer(const k3::AnswerFigures& figures) const;

    // "12 tokens · 48.5 tok/s · first token 0.25 s" (empty when no tokens are recorded).
    static QString figuresText(const k3::AnswerFigures& figures);
    // "calls get_weather, clock" (empty without calls): the app runs no tools, so an
    // answer that only calls one would otherwise look empty.
    static QString toolCallsText(const std::vector<k3::ChatToolCall>& calls);

private:
    struct Entry {
        QString role;
        QString content;
        QString reasoning;
        QString name;
        QString invalid;
        QString model;
        bool stopped = false;
        k3::AnswerFigures figures;
        std::vector<k3::ChatToolCall> toolCalls;
        QString toolCallId;
        bool thinkingExpanded = false;
        bool streaming = false;
        double thinkingSeconds = -1;
        QString stats;
        QElapsedTimer thinkingClock;
        bool answerStarted = false;
        int readDone = 0, readTotal = 0;
        double readSecondsLeft = -1;
    };
    void changed(int row);
    QVector<Entry> m_entries;
    bool m_expandThinking = false;
};
