#include "chat/ConversationListWidget.h"

#include <QEvent>
#include <QPainter>

namespace {
constexpr int kFocusFrame = 2; // the ring around the rows the frame is drawn in
}

ConversationListWidget::ConversationListWidget(QWidget* parent) : QListWidget(parent) {
    setFrameShape(QFrame::NoFrame); // the ring is the frame
    setViewportMargins(kFocusFrame, kFocusFrame, kFocusFrame, kFocusFrame);
}

bool ConversationListWidget::event(QEvent* event) {
    const bool handled = QListWidget::event(event);
    // The rows are the viewport's; the ring around them is this widget's own paint: the
    // highlight with the keyboard, else a thin line where the style's frame was.
    if (event->type() == QEvent::Paint) {
        QPainter painter(this);
        if (hasFocus()) {
            painter.setPen(QPen(palette().color(QPalette::Highlight), kFocusFrame));
            painter.drawRect(rect().adjusted(1, 1, -1, -1));
        } else {
            painter.setPen(palette().color(QPalette::Mid));
            painter.drawRect(rect().adjusted(0, 0, -1, -1));
        }
    }
    return handled;
}

void ConversationListWidget::focusInEvent(QFocusEvent* event) {
    QListWidget::focusInEvent(event);
    update();
}

void ConversationListWidget::focusOutEvent(QFocusEvent* event) {
    QListWidget::focusOutEvent(event);
    update();
}
