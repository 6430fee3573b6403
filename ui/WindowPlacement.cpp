#include "WindowPlacement.h"

#include <QMargins>
#include <QScreen>
#include <QStyle>
#include <QWidget>

#include <algorithm>

void WindowPlacement::fitToScreen(QWidget* window) {
    if (window->windowState() & (Qt::WindowMaximized | Qt::WindowFullScreen)) return;
    const QRect available = window->screen()->availableGeometry();
    // Before the window is shown its frame is not known: leave room for a title bar and
    // a border (restoreGeometry does the same), so the bottom of the window shows.
    QStyle* style = window->style();
    const int border = style->pixelMetric(QStyle::PM_MdiSubWindowFrameWidth, nullptr, window);
    const int titleBar = style->pixelMetric(QStyle::PM_TitleBarHeight, nullptr, window);
    const QRect inside = available.marginsRemoved(QMargins(border, titleBar, border, border));
    QRect fitted = window->geometry();
    fitted.setSize(fitted.size().boundedTo(inside.size()).expandedTo(window->minimumSize()));
    if (!window->testAttribute(Qt::WA_Moved)) {
        window->resize(fitted.size()); // never placed: the window manager places it
        return;
    }
    fitted.moveLeft(std::clamp(fitted.left(), inside.left(),
                               std::max(inside.left(), inside.right() + 1 - fitted.width())));
    fitted.moveTop(std::clamp(fitted.top(), inside.top(),
                              std::max(inside.top(), inside.bottom() + 1 - fitted.height())));
    window->setGeometry(fitted);
}
