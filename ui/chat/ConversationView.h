#pragma once

#include <QListView>

class QStandardItemModel;

// The message list of the current conversation. Messages are rows of a model drawn
// by the view, so long conversations stay fast; when there are none the view says
// how to begin instead of showing a blank area.
class ConversationView : public QListView {
    Q_OBJECT
public:
    explicit ConversationView(QWidget* parent = nullptr);

    int messageCount() const;
    QString placeholderText() const;
    void setPlaceholderText(const QString& text);

protected:
    void paintEvent(QPaintEvent* event) override;

private:
    QStandardItemModel* m_messages;
    QString m_placeholder;
};
