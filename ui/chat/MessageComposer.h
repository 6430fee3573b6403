#pragma once

#include <QWidget>

class QPlainTextEdit;
class QPushButton;

// The input box under the conversation: Enter sends, Shift+Enter adds a new line.
// Sending stays disabled until a model is ready to answer.
class MessageComposer : public QWidget {
    Q_OBJECT
public:
    explicit MessageComposer(QWidget* parent = nullptr);

    QString text() const;
    void clear();
    void setReady(bool ready);
    bool isReady() const { return m_ready; }

signals:
    void sendRequested(const QString& text);

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void trySend();
    void updateSendButton();

    QPlainTextEdit* m_editor;
    QPushButton* m_sendButton;
    bool m_ready = false;
};
