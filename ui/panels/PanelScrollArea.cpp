#include "panels/PanelScrollArea.h"

#include <QEvent>
#include <QPainter>
#include <QScrollBar>

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
    // Only the height gives way: a panel narrower than it needs would scroll sideways.
    setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    setMinimumWidth(panel->minimumSizeHint().expandedTo(panel->minimumSize()).width() +
                    2 * kFocusFrame + verticalScrollBar()->sizeHint().width());
}

QSize PanelScrollArea::sizeHint() const {
    const QSize frame(2 * kFocusFrame, 2 * kFocusFrame);
    return widget() ? widget()->sizeHint().expandedTo(widget()->minimumSizeHint()) + frame
                    : QScrollArea::sizeHint();
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
