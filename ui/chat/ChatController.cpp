#include "chat/ChatController.h"

#include "AppSettings.h"
#include "Settings.h"
#include "SettingsTable.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationStore.h"
#include "chat/ImageAttacher.h"
#include "chat/MessageComposer.h"
#include "chat/TranscriptWriter.h"
#include "worker/EngineController.h"

#include <QRandomGenerator>
#include <QStringList>
#include <QVariantMap>

ChatController::ChatController(EngineController* engine, ConversationModel* conversation,
                               MessageComposer* composer, ConversationStore* store,
                               TranscriptWriter* writer, QObject* parent)
    : QObject(parent), m_engine(engine), m_conversation(conversation), m_composer(composer),
      m_writer(writer), m_attacher(new ImageAttacher(store->directory(), this)) {
    // What the writer reports arrives queued on the GUI thread: the list's entry, and a
    // failed save said where every save failure is (the status bar).
    connect(m_writer, &TranscriptWriter::written, this, &ChatController::conversationSaved,
            Qt::QueuedConnection);
    connect(
        m_writer, &TranscriptWriter::failed, this,
        [this](const QString&, const QString& message) { emit saveFailed(message); },
        Qt::QueuedConnection);
    EngineWorker* worker = m_engine->worker();
    connect(worker, &EngineWorker::tokenGenerated, this, &ChatController::onToken);
    connect(worker, &EngineWorker::generationFinished, this, &ChatController::onFinished);
    connect(worker, &EngineWorker::generationFailed, this, &ChatController::onFailed);
    // Who answers, as the worker names it in a finished answer's summary: an answer kept
    // before it finishes (quit, a switch of chats, a periodic save) is saved with it too.
    connect(worker, &EngineWorker::modelLoaded, this,
            [this](const ModelInfo& info) { m_answeringModel = info.modelName; });
    connect(m_composer, &MessageComposer::thinkingChosen, this, &ChatController::rememberThinking);
    // Images: offered for a model that reads them; read and kept off the GUI thread.
    connect(worker, &EngineWorker::modelLoaded, this, [this](const ModelInfo& info) {
        m_composer->setImagesAvailable(
            info.vision,
            tr("%1 reads text only: its checkpoint has no vision tower").arg(info.modelName));
        m_composer->setImageCostKnown(!info.remote);
    });
    // Their cost is counted at the cap the engine thread will prepare them at (the
    // settings' of the next message), read again for each attachment as for each message.
    setImagePatchLimit(AppSettings::load().imagePatchLimit);
    connect(m_composer, &MessageComposer::imageFilesChosen, m_attacher,
            [this](const QStringList& paths) {
                setImagePatchLimit(AppSettings::load().imagePatchLimit);
                for (const QString& path : paths) m_attacher->attachFile(path);
            });
    connect(m_composer, &MessageComposer::imagePasted, m_attacher, [this](const QImage& image) {
        setImagePatchLimit(AppSettings::load().imagePatchLimit);
        m_attacher->attachImage(image);
    });
    connect(m_attacher, &ImageAttacher::attached, m_composer, &MessageComposer::addAttachment);
    connect(m_attacher, &ImageAttacher::failed, m_composer, &MessageComposer::showAttachError);
    // What Think costs, said beside the switch (issue 37 point 1: "Hello" was 253 prompt
    // positions with Think and 87 without, and nothing said so). Asked again after a
    // load, an effort change and each answer (the rate it quotes is the last message's).
    const auto askThinkingCost = [this] {
        m_engine->measureThinkingCost(m_composer->thinkingEffort());
    };
    connect(worker, &EngineWorker::modelLoaded, this, askThinkingCost);
    connect(worker, &EngineWorker::generationFinished, this, askThinkingCost);
    connect(m_composer, &MessageComposer::thinkingEffortChanged, this, askThinkingCost);
    connect(worker, &EngineWorker::thinkingCost, m_composer, &MessageComposer::setThinkingCost);
    connect(worker, &EngineWorker::readingCost, m_composer, &MessageComposer::setReadingCost);
    // What the next message reads: asked when the text, the conversation, the model, Think
    // or its effort change, and after each answer (the state and the rate changed).
    m_readingDelay.setSingleShot(true);
    m_readingDelay.setInterval(300);
    connect(&m_readingDelay, &QTimer::timeout, this, &ChatController::askReadingPositions);
    connect(m_composer, &MessageComposer::textChanged, this, &ChatController::measureNextMessage);
    connect(m_composer, &MessageComposer::thinkingEffortChanged, this,
            &ChatController::measureNextMessage);
    connect(m_composer, &MessageComposer::thinkingChosen, this,
            &ChatController::measureNextMessage);
    connect(worker, &EngineWorker::modelLoaded, this, &ChatController::measureNextMessage);
    connect(worker, &EngineWorker::generationFinished, this, &ChatController::measureNextMessage);
    connect(m_conversation, &QAbstractItemModel::modelReset, this,
            &ChatController::measureNextMessage);
    connect(worker, &EngineWorker::readingPositions, m_composer,
            &MessageComposer::setReadingPositions);
}

void ChatController::setImagePatchLimit(int patches) {
    m_attacher->setPatchLimit(patches);
    m_composer->setImagePatchLimit(patches);
}

void ChatController::measureNextMessage() {
    m_readingDelay.start();
}

void ChatController::askReadingPositions() {
    // While answering the engine is busy and the state changes: asked again at the end.
    if (m_answering || m_engine->isBusy() || !m_composer->isReady() || m_editRow >= 0) return;
    QVector<ChatTurn> history = m_conversation->turns();
    if (!m_conversation->systemPromptChosen() && !AppSettings::load().systemPrompt.isEmpty()) {
        ChatTurn system; // what send() gives a new conversation
        system.role = QStringLiteral("system");
        system.content = AppSettings::load().systemPrompt;
        history.prepend(system);
    }
    ChatTurn message;
    message.role = QStringLiteral("user");
    message.content = m_composer->text();
    for (const ImageAttachment& a : m_composer->attachments()) message.images << a.file;
    history.push_back(message);
    m_engine->measureReading(history, nextGenerationSettings(0));
}

void ChatController::setModel(const QString& key, bool hasThinkChannel) {
    m_modelKey = key;
    m_composer->setThinkingAvailable(hasThinkChannel);
    applyThinkingPreference();
}

bool ChatController::rememberedThinking(const QString& modelKey, bool fallback) {
    return Settings::value(SettingsTable::thinkingPerModel).value(modelKey, fallback).toBool();
}

void ChatController::applyThinkingPreference() {
    // setThinking() leaves Think unticked for a model without a think channel. The open
    // conversation's own choice comes first (a model loading after it reopened).
    m_composer->setThinking(
        m_settings.thinking.value_or(rememberedThinking(m_modelKey, AppSettings::load().thinking)));
}

void ChatController::rememberThinking(bool on) {
    if (m_modelKey.isEmpty()) return;
    QVariantMap chosen = Settings::value(SettingsTable::thinkingPerModel);
    chosen.insert(m_modelKey, on);
    Settings::setValue(SettingsTable::thinkingPerModel, chosen);
}

void ChatController::send(const QString& text) {
    if (m_engine->isBusy()) return;
    if (!m_conversation->systemPromptChosen()) {
        m_conversation->setSystemPrompt(AppSettings::load().systemPrompt);
        emit systemPromptChanged(); // the chat's own now, no longer the default
    }
    QStringList images; // the copies kept when they were attached
    for (const ImageAttachment& a : m_composer->attachments()) images << a.file;
    m_composer->clearAttachments();
    if (m_editRow >= 0) {
        // The edited question is a new version of the old one, which is kept with
        // everything that followed it (its images too, unless others are attached).
        if (images.isEmpty())
            images =
                m_conversation->index(m_editRow).data(ConversationModel::ImagesRole).toStringList();
        m_conversation->appendVersion(m_editRow, QStringLiteral("user"), text, images);
        m_editRow = -1;
        m_composer->setEditing(false);
    } else {
        m_conversation->appendMessage(QStringLiteral("user"), text, images);
    }
    save(); // the question is on disk before the answer starts
    startAnswer(-1);
}

void ChatController::regenerate() {
    const int rows = m_conversation->rowCount();
    if (m_engine->isBusy() || !m_composer->isReady() || rows == 0) return;
    const QString lastRole =
        m_conversation->index(rows - 1).data(ConversationModel::RoleNameRole).toString();
    if (lastRole != QLatin1String("assistant") && lastRole != QLatin1String("user"))
        return; // a system or tool message last: nothing to answer
    // The answer written before stays, as an earlier version of the new one.
    startAnswer(lastRole == QLatin1String("assistant") ? rows - 1 : -1);
}

bool ChatController::showVersion(int row, int index) {
    if (m_answering || m_engine->isBusy() || !m_conversation->switchVersion(row, index))
        return false;
    save(); // the shown version is what the next message continues from, and reopens
    return true;
}

void ChatController::setSystemPrompt(const QString& prompt) {
    m_conversation->setSystemPrompt(prompt);
    if (m_conversation->rowCount() > 0 && !m_answering) save();
    emit systemPromptChanged();
}

void ChatController::setConversationSettings(const ConversationSettings& settings) {
    showConversationSettings(settings);
    if (m_conversationId.isEmpty()) return; // written with the conversation's first save
    m_writer->saveSettings(m_conversationId, m_settings); // a failure comes back as saveFailed
}

void ChatController::showConversationSettings(const ConversationSettings& settings) {
    m_settings = settings;
    if (m_settings.thinking) m_composer->setThinking(*m_settings.thinking);
    emit systemPromptChanged();
}

GenerationSettings ChatController::nextGenerationSettings(quint64 seed) const {
    GenerationSettings settings = AppSettings::load().generationSettings(seed);
    m_settings.applyTo(settings);
    settings.thinking = m_composer->thinking();
    settings.thinkingEffort = m_composer->thinkingEffort();
    return settings;
}

QString ChatController::systemPrompt() const {
    return m_conversation->systemPromptChosen() ? m_conversation->systemPrompt()
                                                : AppSettings::load().systemPrompt;
}

bool ChatController::canContinue() const {
    const int rows = m_conversation->rowCount();
    if (rows == 0 || m_answering) return false;
    const QModelIndex last = m_conversation->index(rows - 1);
    return last.data(ConversationModel::RoleNameRole).toString() == QLatin1String("assistant") &&
           last.data(ConversationModel::StoppedRole).toBool();
}

void ChatController::continueAnswer() {
    if (m_engine->isBusy() || !m_composer->isReady() || !canContinue()) return;
    cancelEdit();
    startAnswer(-1, true);
}

void ChatController::startAnswer(int versionOfRow, bool continuing) {
    // The answer so far is the history's last message, taken before it streams again.
    const QVector<ChatTurn> continued = continuing ? m_conversation->turns() : QVector<ChatTurn>();
    if (continuing)
        m_conversation->resumeLast();
    else if (versionOfRow >= 0)
        m_conversation->beginAssistantVersion(versionOfRow, m_answeringModel);
    else
        m_conversation->beginAssistantMessage(m_answeringModel);
    // The streaming message (and the versions it keeps aside) are not part of it.
    const QVector<ChatTurn> history = continuing ? continued : m_conversation->turns();
    m_answering = true;
    m_tokens = 0;
    m_tokenSeconds = 0;
    m_firstTokenSeconds = 0;
    m_answerClock.start();
    m_sinceSave.start();
    // Read again for every message: a change in Settings applies to the next one, except
    // where this conversation has its own.
    GenerationSettings settings = nextGenerationSettings(QRandomGenerator::global()->generate64());
    settings.continueAnswer = continuing;
    // Think as this conversation last used it, restored when it is reopened.
    if (m_composer->isThinkingAvailable() && m_settings.thinking != settings.thinking) {
        m_settings.thinking = settings.thinking;
        if (!m_conversationId.isEmpty()) setConversationSettings(m_settings);
    }
    m_composer->setGenerating(true);
    m_engine->generate(history, settings);
}

void ChatController::editLastMessage() {
    int row = m_conversation->rowCount() - 1;
    while (row >= 0 &&
           m_conversation->index(row).data(ConversationModel::RoleNameRole).toString() !=
               QLatin1String("user"))
        --row;
    editMessage(row);
}

void ChatController::editMessage(int row) {
    const QModelIndex index = m_conversation->index(row);
    if (m_engine->isBusy() || !index.isValid() ||
        index.data(ConversationModel::RoleNameRole).toString() != QLatin1String("user"))
        return;
    m_editRow = row;
    m_composer->setText(index.data(ConversationModel::ContentRole).toString());
    bool earlier = false; // another question follows it: a new branch, not a replacement
    for (int r = row + 1; r < m_conversation->rowCount() && !earlier; ++r)
        earlier = m_conversation->index(r).data(ConversationModel::RoleNameRole).toString() ==
                  QLatin1String("user");
    m_composer->setEditing(true, earlier);
    m_composer->setFocus();
}

void ChatController::cancelEdit() {
    if (m_editRow < 0) return;
    m_editRow = -1;
    m_composer->setEditing(false);
    m_composer->clear();
}

void ChatController::stop() {
    if (m_engine->isBusy()) m_engine->stop();
}

void ChatController::stopAndKeep() {
    cancelEdit();
    if (!m_answering) return;
    m_engine->stop();
    keepPartialAnswer(tr("stopped"));
    save();
    // The composer stays in its Stop state until the engine reports the end (within a
    // token), so no new question is queued behind the old answer.
}

void ChatController::abandonAnswer() {
    cancelEdit();
    if (!m_answering) return;
    m_engine->stop();
    m_answering = false; // late tokens and the end are then ignored, nothing is saved
}

k3::AnswerFigures ChatController::figuresSoFar() const {
    k3::AnswerFigures f;
    f.tokens = m_tokens;
    f.tokensPerSecond = m_tokenSeconds > 0 ? m_tokens / m_tokenSeconds : 0;
    f.firstTokenSeconds = m_firstTokenSeconds;
    return f;
}

void ChatController::keepPartialAnswer(const QString& why) {
    m_answering = false;
    if (!m_conversation->lastIsStreaming()) return;
    const QModelIndex last = m_conversation->index(m_conversation->rowCount() - 1);
    if (last.data(ConversationModel::ContentRole).toString().isEmpty() &&
        last.data(ConversationModel::ReasoningRole).toString().isEmpty()) {
        // Nothing arrived: the question stays last, to be answered later (regenerate()).
        m_conversation->removeLast();
        return;
    }
    const k3::AnswerFigures figures = figuresSoFar();
    QString stats = ConversationModel::figuresText(figures);
    stats += (stats.isEmpty() ? QString() : QStringLiteral(" · ")) + why;
    m_conversation->finishLast(stats, {}, m_answeringModel, true, figures);
}

void ChatController::save() {
    const QVector<ChatTurn> turns = m_conversation->turnsWithPartialAnswer(figuresSoFar());
    if (turns.isEmpty()) return;
    // Named here, without the disk; the writer claims and writes it (a failure comes back
    // as saveFailed, a success as conversationSaved).
    const bool first = m_conversationId.isEmpty();
    if (first) m_conversationId = ConversationStore::newId();
    m_writer->saveTranscript(m_conversationId, turns);
    if (first && !m_settings.isEmpty()) m_writer->saveSettings(m_conversationId, m_settings);
}

void ChatController::onToken(int index, const QString& thinking, const QString& response,
                             double seconds) {
    if (!m_answering) return; // an answer already kept (stopAndKeep)
    m_conversation->appendToLast(thinking, response);
    m_tokens = index + 1;
    if (index == 0) m_firstTokenSeconds = m_answerClock.elapsed() / 1000.0;
    m_tokenSeconds += seconds;
    emit status(tr("generating %1 · %2 tok/s")
                    .arg(m_tokens)
                    .arg(figuresSoFar().tokensPerSecond, 0, 'f', 1));
    // Crash-safe: a long answer is on disk (marked stopped) every few seconds.
    if (m_sinceSave.elapsed() >= m_partialSaveMs) {
        save();
        m_sinceSave.restart();
    }
}

QString ChatController::statsLine(const GenerationSummary& s, const k3::AnswerFigures& figures,
                                  bool stopped, const QString& invalid) {
    QStringList parts;
    parts << (figures.tokens > 0 ? ConversationModel::figuresText(figures)
                                 : tr("%1 tokens").arg(s.generatedTokens));
    parts << tr("prompt %1 s").arg(s.prefillSeconds, 0, 'f', 2);
    // What a follow-up cost: only the positions the state did not hold are read.
    if (s.reusedPositions > 0 && s.restoredPositions > 0)
        parts << tr("%1 new prompt tokens read, %2 restored from disk")
                     .arg(s.prefillPositions)
                     .arg(s.restoredPositions);
    else if (s.reusedPositions > 0)
        parts << tr("%1 new prompt tokens read, %2 reused")
                     .arg(s.prefillPositions)
                     .arg(s.reusedPositions);
    if (s.tokenLimit > 0)
        parts << tr("stopped at the %1-token limit").arg(s.tokenLimit);
    else if (stopped && s.interruption.isEmpty())
        parts << tr("stopped");
    if (!s.toolCalls.empty()) parts << ConversationModel::toolCallsText(s.toolCalls);
    if (!s.interruption.isEmpty()) parts << tr("interrupted: %1").arg(s.interruption);
    if (!invalid.isEmpty()) parts << tr("RUN INVALID (%1)").arg(invalid);
    return parts.join(QStringLiteral(" · "));
}

void ChatController::onFinished(const GenerationSummary& s) {
    if (!m_answering) { // kept already by stopAndKeep()
        m_composer->setGenerating(false);
        return;
    }
    m_answering = false;
    k3::AnswerFigures figures = figuresSoFar();
    if (s.generatedTokens > 0) {
        figures.tokens = s.generatedTokens;
        if (s.decodeSeconds > 0) figures.tokensPerSecond = s.generatedTokens / s.decodeSeconds;
    }
    const bool stopped = s.cancelled || !s.interruption.isEmpty();
    QString invalid;
    if (!s.valid)
        invalid = s.invalidReason.isEmpty() ? tr("an expert failed to load or a NaN appeared")
                                            : s.invalidReason;
    const QModelIndex last = m_conversation->index(m_conversation->rowCount() - 1);
    if (stopped && last.data(ConversationModel::ContentRole).toString().isEmpty() &&
        last.data(ConversationModel::ReasoningRole).toString().isEmpty())
        m_conversation->removeLast(); // stopped before a token: the question can be answered
    else // saved with the answer, so the conversation says it when reopened; cut at the
         // token limit, it is as unfinished as after Stop, and marked so
        m_conversation->finishLast(statsLine(s, figures, stopped, invalid), invalid, s.model,
                                   stopped || s.tokenLimit > 0, figures, s.toolCalls);
    m_composer->setGenerating(false);
    save();
    // A broken stream keeps what arrived; the status says why it stopped.
    if (!s.interruption.isEmpty())
        emit status(s.interruption);
    else if (s.tokenLimit > 0)
        emit status(tr("ready · the answer stopped at the %1-token limit (Longest answer, in "
                       "Settings)")
                        .arg(s.tokenLimit));
    else
        emit status(tr("ready"));
    // Said once the answer is on disk (the writer's queue reaches this point), so whoever
    // waits on it may read the transcript; the GUI thread does not wait for it.
    m_writer->whenWritten(this, [this, s] { emit answerFinished(s); });
}

void ChatController::onFailed(const QString& message) {
    m_composer->setGenerating(false);
    if (!m_answering) return; // kept already by stopAndKeep()
    keepPartialAnswer(tr("stopped: the answer failed"));
    save();
    m_writer->whenWritten(this, [this, message] { emit answerFailed(message); });
}
