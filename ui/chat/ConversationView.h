#pragma once

#include <QListView>

class ConversationModel;
class MessageDelegate;

// The message list of the current conversation, drawn by MessageDelegate from
// ConversationModel so long conversations stay fast. When empty, the view says how
// to begin instead of showing a blank area.
class ConversationView : public QListView {
    Q_OBJECT
public:
    explicit ConversationView(QWidget* parent = nullptr);

    ConversationModel* conversation() const { return m_messages; }
    int messageCount() const;
    QString placeholderText() const;
    void setPlaceholderText(const QString& text);

protected:
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;

private:
    ConversationModel* m_messages;
    MessageDelegate* m_delegate;
    QString m_placeholder;
};
