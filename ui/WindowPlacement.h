#pragma once

class QWidget;

// Where top-level windows go on the screen.
class WindowPlacement {
public:
    // Keeps the whole of `window` (not shown yet), title bar included, inside its screen's
    // available area: smaller if needed, and moved only as far as needed when it has a
    // place of its own (a restored geometry). A maximised or full-screen one is left.
    static void fitToScreen(QWidget* window);
};
