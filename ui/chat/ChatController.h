#pragma once

#include <QElapsedTimer>
#include <QObject>
#include <QString>
#include <QTimer>
#include <QVector>

#include <k3/chat.hpp>

#include "chat/ConversationSettings.h"
#include "chat/ConversationStore.h"
#include "worker/EngineWorker.h"

struct ChatTurn;
class ConversationModel;
class EngineController;
class ImageAttacher;
class MessageComposer;
class TranscriptWriter;

// The open conversation's answers: send, regenerate (or answer a question left without
// one), edit-and-resend, stop, and saving. Nothing written is lost: the conversation is
// saved after every question, when an answer ends however it ends (done, Stop, an error,
// stopAndKeep() on quitting or switching), and every few seconds while one streams, the
// partial answer marked stopped so a crash leaves it marked too. Saves are queued on the
// TranscriptWriter's thread: the GUI thread never waits for the disk while an answer
// streams.
class ChatController : public QObject {
    Q_OBJECT
public:
    // `writer` (writing into `store`) must outlive the controller.
    ChatController(EngineController* engine, ConversationModel* conversation,
                   MessageComposer* composer, ConversationStore* store, TranscriptWriter* writer,
                   QObject* parent = nullptr);

    TranscriptWriter* writer() const { return m_writer; }
    // The conversation shown; empty for a new one (its first save names it, before it is
    // written: ConversationStore::newId()).
    const QString& conversationId() const { return m_conversationId; }
    void setConversationId(const QString& id) { m_conversationId = id; }
    // An answer is streaming into the open conversation.
    bool isAnswering() const { return m_answering; }
    bool isEditing() const { return m_editRow >= 0; }
    // How often a streaming answer is saved, in ms (0: after every token).
    void setPartialSaveInterval(int ms) { m_partialSaveMs = ms; }
    int partialSaveInterval() const { return m_partialSaveMs; }

    // The model now answering. `key` names it in the settings (its folder, or the server
    // and model); without a think channel, Think is unticked and disabled for it.
    void setModel(const QString& key, bool hasThinkChannel);
    // Think as the open conversation used it, else as chosen last for this model, else the
    // Settings default (SettingsTable::thinking).
    void applyThinkingPreference();
    static bool rememberedThinking(const QString& modelKey, bool fallback);

    // The conversation's system prompt; for a new one not started yet, the Settings default.
    QString systemPrompt() const;
    // The open conversation's own sampling, Think and longest answer (saved beside it).
    const ConversationSettings& conversationSettings() const { return m_settings; }
    // What the next answer is generated with: Settings, this conversation's own values on
    // top, Think and its effort as the composer shows them.
    GenerationSettings nextGenerationSettings(quint64 seed) const;

    ImageAttacher* imageAttacher() const { return m_attacher; }
    // The cap in patches the next images are counted at, attached or being read
    // (AppSettings::imagePatchLimit; MainWindow passes a changed one on).
    void setImagePatchLimit(int patches);

    // The stats line under a finished answer.
    static QString statsLine(const GenerationSummary& summary, const k3::AnswerFigures& figures,
                             bool stopped, const QString& invalid);

public slots:
    void send(const QString& text);
    // Generates the last answer again; a conversation ending with a question gets its answer.
    void regenerate();
    // Puts the last user message back in the composer; sending it then replaces that
    // message and everything after it.
    void editLastMessage();
    // Puts user message `row` back in the composer; sending it then makes a new version
    // of it (a new branch from there; what followed is kept as the other version).
    void editMessage(int row);
    void cancelEdit();
    // Continues the last answer where it was cut (Stop, quitting, a crash): the prompt
    // ends with the answer so far and no new turn; from the state the engine holds, or
    // the one on disk, nothing is read again. Refused while answering.
    void continueAnswer();
    // The last message is an answer cut short that Continue can carry on.
    bool canContinue() const;
    // Asks the engine to stop; the answer so far is kept, marked stopped, when it ends.
    void stop();
    // Stops and keeps the answer so far now (marked stopped, saved): for quitting and for
    // leaving the conversation. Late tokens of that answer are then ignored.
    void stopAndKeep();
    // The open conversation was deleted: its answer stops and nothing of it is written
    // again (a save now would bring the deleted transcript back).
    void abandonAnswer();
    // Writes the conversation (with the streaming answer so far, marked stopped).
    void save();
    // Shows version `index` (from 0) of message `row` (a regenerated answer, an edited
    // question) and saves; the next message continues from it. Refused while answering.
    bool showVersion(int row, int index);
    // Used from the next answer on, and saved with the conversation.
    void setSystemPrompt(const QString& prompt);
    // Used from the next answer on and saved beside the conversation (a new one: at its
    // first save). Think, when set, is shown in the composer.
    void setConversationSettings(const ConversationSettings& settings);
    // A conversation opened (or a new one): its settings as saved, nothing written.
    void showConversationSettings(const ConversationSettings& settings);
    // Asks the engine (off the GUI thread) what the message in the composer would read
    // before its first token, shortly after the last change: the composer says it when it
    // is more than a few seconds (issue 37 point 1).
    void measureNextMessage();

signals:
    // The answer is in the conversation and on disk (emitted once the writer wrote its
    // save); `summary` is the worker's, so the window can finish its panels before it says
    // the answer is done.
    void answerFinished(const GenerationSummary& summary);
    // Any save written (partial or whole answer): the list shows its title, date and place
    // (`summary` comes from the writer: the GUI thread reads nothing for it).
    void conversationSaved(const ConversationStore::Summary& summary);
    // What the chat is doing ("generating 12 · 85.1 tok/s", "ready", why it stopped).
    void status(const QString& text);
    // The system prompt of the open conversation (or the default a new one starts with)
    // may read otherwise now.
    void systemPromptChanged();
    void saveFailed(const QString& message);
    // The engine failed mid-answer; what had arrived is kept (marked stopped) and on disk.
    void answerFailed(const QString& message);

private:
    // Answers the conversation; versionOfRow >= 0: as a new version of that answer.
    // continuing: the last answer goes on (resumed in the model) instead of a new one.
    void startAnswer(int versionOfRow, bool continuing = false);
    void onToken(int index, const QString& thinking, const QString& response, double seconds);
    void onFinished(const GenerationSummary& summary);
    void onFailed(const QString& message);
    // Ends the streaming message as cut, or drops it when nothing arrived.
    void keepPartialAnswer(const QString& why);
    k3::AnswerFigures figuresSoFar() const;
    void rememberThinking(bool on);
    void askReadingPositions();

    EngineController* m_engine;
    ConversationModel* m_conversation;
    MessageComposer* m_composer;
    TranscriptWriter* m_writer; // every save of the open conversation, off the GUI thread
    ImageAttacher* m_attacher;  // attached images, read and copied beside the conversations
    QString m_conversationId;
    ConversationSettings m_settings;
    QString m_modelKey;
    QString m_answeringModel; // the loaded model's name, saved with each answer
    bool m_answering = false; // false again once kept: late results are then ignored
    int m_editRow = -1;       // the user message being edited; -1 when not editing
    int m_partialSaveMs = 3000;
    int m_tokens = 0;
    double m_tokenSeconds = 0;      // the engine's time per token, summed
    double m_firstTokenSeconds = 0; // from the request to the first token
    QElapsedTimer m_answerClock;
    QElapsedTimer m_sinceSave;
    QTimer m_readingDelay; // typing asks once it pauses, not at every key
};
