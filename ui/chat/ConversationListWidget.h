#pragma once

#include <QListWidget>

// The sidebar's list: a visible focus frame (the palette's highlight, as the docks' panels
// have) while it has the keyboard, so Tab shows where the arrow keys will act. The style
// drew none: the selected row looked the same with and without focus.
class ConversationListWidget : public QListWidget {
    Q_OBJECT
public:
    explicit ConversationListWidget(QWidget* parent = nullptr);

protected:
    bool event(QEvent* event) override;
    void focusInEvent(QFocusEvent* event) override;
    void focusOutEvent(QFocusEvent* event) override;
};
