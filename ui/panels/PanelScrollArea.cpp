#include "panels/PanelScrollArea.h"

#include <QEvent>
#include <QPainter>

namespace {
constexpr int kFocusFrame = 2; // the ring around the viewport the focus frame is drawn in
}

PanelScrollArea::PanelScrollArea(QWidget* panel, const QString& accessibleName, QWidget* parent)
    : QScrollArea(parent) {
    setWidget(panel);
    setWidgetResizable(true);
    setFrameShape(QFrame::NoFrame);
    setFocusPolicy(Qt::StrongFocus);
    setAccessibleName(accessibleName);
    setViewportMargins(kFocusFrame, kFocusFrame, kFocusFrame, kFocusFrame);
}

bool PanelScrollArea::event(QEvent* event) {
    const bool handled = QScrollArea::event(event);
    if (event->type() == QEvent::Paint && hasFocus()) {
        QPainter painter(this);
        painter.setPen(QPen(palette().color(QPalette::Highlight), kFocusFrame));
        painter.drawRect(rect().adjusted(1, 1, -1, -1));
    }
    return handled;
}

void PanelScrollArea::focusInEvent(QFocusEvent* event) {
    QScrollArea::focusInEvent(event);
    update();
}

void PanelScrollArea::focusOutEvent(QFocusEvent* event) {
    QScrollArea::focusOutEvent(event);
    update();
}
