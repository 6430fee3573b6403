#pragma once

#include <QScrollArea>

// Holds a dock's panel. The scroll area lets the dock shrink below the panel's own
// height (so the window fits 800x600 with every dock open) and is a Tab stop with a
// visible focus frame, so the keyboard reaches the panel and scrolls it with the arrows.
class PanelScrollArea : public QScrollArea {
    Q_OBJECT
public:
    PanelScrollArea(QWidget* panel, const QString& accessibleName, QWidget* parent = nullptr);

    // The panel's own size, so the docks open as wide and tall as their panels want;
    // the minimum stays the scroll area's small one.
    QSize sizeHint() const override;

protected:
    bool event(QEvent* event) override;
    void focusInEvent(QFocusEvent* event) override;
    void focusOutEvent(QFocusEvent* event) override;
};
