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
        ReadingRestoredRole,    // int: prompt positions loaded from disk instead of read
        ReadingAgainRole,       // bool: the conversation's earlier turns are read again
        InvalidRole,            // why the answer is not the model's; empty when valid
        ModelRole,              // the model that answered; empty when not recorded
        StoppedRole,            // the answer was cut before the model ended it
        VersionRole,            // QPoint(shown version from 1, versions); (1, 1): only one
        ImagesRole,             // QStringList: a user message's images (their saved copies)
    };

    explicit ConversationModel(QObject* parent = nullptr);

    int rowCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;
    // A message with text is "editable": the view opens it in a read-only editor where
    // its text can be selected (MessageDelegate::createEditor); setData changes nothing.
    Qt::ItemFlags flags(const QModelIndex& index) const override;

    // `images`: a user message's attached images (ChatTurn::images).
    int appendMessage(const QString& role, const QString& content, const QStringList& images = {});
    // Starts an empty assistant message that tokens will stream into; `model` answers it
    // (kept with whatever is saved of it, a partial answer too).
    int beginAssistantMessage(const QString& model = {});
    void appendToLast(const QString& thinkingDelta, const QString& responseDelta);
    // The streaming message's prompt reading: `done` of `total` positions after
    // `seconds`; the first token (appendToLast) or finishLast clears it.
    // `held`: positions the engine held before (0 with earlier answers: the whole
    // conversation is read again, and the bubble says so).
    // fraction: the share read with the current chunk's layers (-1: done / total).
    // secondsLeft: the worker's estimate (EngineWorker::readingSecondsLeft); -1: from
    // the share read so far.
    void setReading(int done, int total, double seconds, int restored = 0, int held = -1,
                    double fraction = -1, double secondsLeft = -1);
    // invalidReason: not empty when the answer is not the model's (an expert failed to
    // load, a NaN appeared); it is kept with the message and saved with it.
    // model: who answered (a folder's or a server's model name), saved with the answer.
    // stopped: cut before the model ended it; figures: saved with it (tokens 0: none).
    // toolCalls: the functions the answer calls, saved with it.
    void finishLast(const QString& stats, const QString& invalidReason = {},
                    const QString& model = {}, bool stopped = false,
                    const k3::AnswerFigures& figures = {},
                    const std::vector<k3::ChatToolCall>& toolCalls = {});
    // Opens the last message, an assistant's answer cut short, for tokens to stream into
    // again (Continue): it is no longer marked stopped. False when the last is not one.
    bool resumeLast();
    // The message tokens stream into is still open.
    bool lastIsStreaming() const;
    // Drops the last message; when it has other versions, the latest of them is shown.
    void removeLast();
    // Keeps rows `row`..end as a version of that position and puts a new message there
    // (an edited question, or with beginAssistantVersion a regenerated answer), shown
    // as the last version.
    int appendVersion(int row, const QString& role, const QString& content,
                      const QStringList& images = {});
    int beginAssistantVersion(int row, const QString& model = {});
    // Shows version `index` (from 0) of message `row` and what followed it; the branch
    // shown before is kept. False when there is no such version.
    bool switchVersion(int row, int index);
    // Drops message `row` and everything after it (editing an earlier message).
    void removeFrom(int row);
    void toggleThinking(int row);
    // Expands (or collapses) every thinking block, now and for messages added later.
    void setThinkingExpandedByDefault(bool expanded);
    bool thinkingExpandedByDefault() const { return m_expandThinking; }
    void clear();
    // A leading system turn becomes the system prompt.
    void setTurns(const QVector<ChatTurn>& turns);

    // The conversation's system prompt, sent (and saved) as its first, system turn. Not
    // chosen: a new conversation, which takes the Settings default when it starts.
    void setSystemPrompt(const QString& prompt);
    const QString& systemPrompt() const { return m_systemPrompt; }
    bool systemPromptChosen() const { return m_systemPromptChosen; }

    // The conversation as the engine should see it (streaming message excluded): the
    // system prompt first when there is one, then the shown branch, each message with its
    // other versions.
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
        int readRestored = 0;   // positions loaded from the state cache instead of read
        bool readAgain = false; // nothing was held: the earlier turns are read again
        double readSecondsLeft = -1;
        std::vector<std::vector<ChatTurn>> otherVersions;
        int versionIndex = 0;
        QStringList images;
    };
    static Entry entryFor(const ChatTurn& turn, bool expandThinking);
    static ChatTurn turnFor(const Entry& e);
    // Rows `row`..end as turns (the first without its versions).
    std::vector<ChatTurn> branchFrom(int row) const;
    // Every version of position `row` (the shown one too, at its index); removes the rows.
    std::vector<std::vector<ChatTurn>> takeVersions(int row);
    // Shows `branch` from `row` on (appended), with `versions` as its other versions.
    void showBranch(std::vector<ChatTurn> branch, std::vector<std::vector<ChatTurn>> others,
                    int index);
    void changed(int row);
    QVector<Entry> m_entries;
    bool m_expandThinking = false;
    QString m_systemPrompt;
    bool m_systemPromptChosen = false;
};
