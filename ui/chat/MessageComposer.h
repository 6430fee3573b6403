#pragma once

#include <QWidget>

class QCheckBox;
class QComboBox;
class QPlainTextEdit;
class QPushButton;

// The input box under the conversation: Enter sends, Shift+Enter adds a new line.
// While an answer streams the Send button becomes Stop. Sending stays disabled until
// a model is ready to answer; typed text is never lost.
class MessageComposer : public QWidget {
    Q_OBJECT
public:
    explicit MessageComposer(QWidget* parent = nullptr);

    QString text() const;
    void clear();
    void setReady(bool ready);
    bool isReady() const { return m_ready; }
    void setGenerating(bool generating);
    bool isGenerating() const { return m_generating; }

    bool thinking() const;
    void setThinking(bool on);
    QString thinkingEffort() const;

signals:
    void sendRequested(const QString& text);
    void stopRequested();

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void trySend();
    void updateSendButton();

    QPlainTextEdit* m_editor;
    QPushButton* m_sendButton;
    QCheckBox* m_think;
    QComboBox* m_effort;
    bool m_ready = false;
    bool m_generating = false;
};
