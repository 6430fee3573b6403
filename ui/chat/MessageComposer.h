#pragma once

#include <QVector>
#include <QWidget>

#include "chat/ImageAttachment.h"

class ComposerTextEdit;
class QCheckBox;
class QComboBox;
class QHBoxLayout;
class QLabel;
class QPlainTextEdit;
class QPushButton;
class QToolButton;

// The input box under the conversation: Enter sends, Shift+Enter adds a new line.
// While an answer streams the Send button becomes Stop. Sending stays disabled until
// a model is ready to answer; typed text is never lost.
class MessageComposer : public QWidget {
    Q_OBJECT
public:
    explicit MessageComposer(QWidget* parent = nullptr);

    QString text() const;
    void setText(const QString& text);
    void clear();
    // Editing mode: the box holds an earlier message; sending replaces it (MainWindow).
    // earlier: the message edited is not the last one (sending starts a new branch there).
    void setEditing(bool editing, bool earlier = false);
    bool isEditing() const { return m_editing; }
    void setReady(bool ready);
    bool isReady() const { return m_ready; }
    void setGenerating(bool generating);
    bool isGenerating() const { return m_generating; }

    bool thinking() const;
    // Ignored while thinking is unavailable: nothing ticks Think for such a model.
    void setThinking(bool on);
    // false for a model without a think channel: Think is unticked and disabled.
    void setThinkingAvailable(bool available);
    bool isThinkingAvailable() const { return m_thinkingAvailable; }
    QString thinkingEffort() const;
    void setThinkingEffort(const QString& effort); // one of the combo box's levels

    // What Think adds to a new conversation's prompt, beside the switch: "+166 prompt
    // positions · about 2 min" (seconds < 0: the rate is not known yet). positions < 0
    // hides it (a server, no tokenizer).
    void setThinkingCost(int positions, double seconds);
    QString thinkingCostText() const;
    // What reading any message costs before its first token at this budget (one pass over
    // the streamed layers; -1: not known). Said at the right of the options row when it
    // is more than a few seconds, so the cost is known before Send.
    void setReadingCost(double seconds);
    QString readingCostText() const;
    // What the message being typed will read before its first token, said in place of the
    // above when it takes more than a few seconds (a conversation whose saved state is
    // gone, a long paste): "this message will read 260 positions (about 2 min at your
    // budget)". positions < 0 or seconds < 0: not known, the general cost is said.
    void setReadingPositions(int positions, double seconds);
    static QString readingPositionsText(int positions, double seconds);
    // Shorter than this, a cost is not worth a word.
    static constexpr double kCostShownSeconds = 5;
    // What the attached images add to the prompt, under their thumbnails: "this image will
    // cost 1024 prompt positions, about 40 s at your budget" (secondsPerPosition: the
    // last message's rate at this budget, -1: not known, and the time is not said).
    static QString imageCostText(int images, int positions, double secondsPerPosition);
    QString imageCostShown() const;
    // The cap images are prepared at (AppSettings::imagePatchLimit): the attachments'
    // positions are counted again at it from their sizes (k3::planImage, arithmetic only),
    // so a cap changed after attaching is the one the cost says. 0: as each was counted.
    void setImagePatchLimit(int patches);
    int imagePatchLimit() const { return m_imagePatchLimit; }
    // false for a server: it prepares images at its own cap, so their cost is not said.
    void setImageCostKnown(bool known);

    // Images: offered only for a model that reads them (a vision tower, or a server);
    // otherwise the attach button is disabled and its tooltip says `whyNot`.
    void setImagesAvailable(bool available, const QString& whyNot = {});
    bool imagesAvailable() const { return m_imagesAvailable; }
    // What the attach button's file dialog does: asks for these files to be attached.
    void chooseImageFiles(const QStringList& paths);
    // An image read and kept (ImageAttacher): shown as a removable thumbnail until sent.
    void addAttachment(const ImageAttachment& attachment);
    void removeAttachment(int index);
    const QVector<ImageAttachment>& attachments() const { return m_attachments; }
    void clearAttachments();
    // Why an image was not attached, shown until the next attachment or message.
    void showAttachError(const QString& message);
    QString attachErrorText() const;

signals:
    void sendRequested(const QString& text);
    void stopRequested();
    // Up in an empty box: the user wants to edit their last message.
    void editLastRequested();
    // The text of the message being typed changed (typed, pasted, cleared).
    void textChanged();
    // The user ticked or unticked Think (not emitted for setThinking()).
    void thinkingChosen(bool on);
    void thinkingEffortChanged(const QString& effort);
    // Files chosen, dropped or pasted, and pasted pixels: to be read (ImageAttacher).
    void imageFilesChosen(const QStringList& paths);
    void imagePasted(const QImage& image);

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void trySend();
    void updateSendButton();
    void openImageDialog();
    void showAttachments();
    void countPositions(ImageAttachment& attachment) const;
    void showReadingCost();

    QPlainTextEdit* m_editor;
    QPushButton* m_sendButton;
    QCheckBox* m_think;
    QComboBox* m_effort;
    QLabel* m_editingLabel;
    QLabel* m_thinkCost;
    QLabel* m_readingCost;
    QString m_generalCost;        // setReadingCost's text; empty when not worth a word
    QString m_messageCost;        // setReadingPositions's; said first when set
    ComposerTextEdit* m_textEdit; // m_editor, for its image signals
    QToolButton* m_attachButton;
    QWidget* m_attachmentStrip;
    QHBoxLayout* m_attachmentLayout;
    QLabel* m_attachError;
    QLabel* m_imageCost;
    double m_secondsPerPosition = -1; // setThinkingCost's rate
    int m_imagePatchLimit = 0;
    bool m_imageCostKnown = true;
    QVector<ImageAttachment> m_attachments;
    bool m_imagesAvailable = false;
    bool m_editing = false;
    bool m_ready = false;
    bool m_generating = false;
    bool m_thinkingAvailable = true;
};
