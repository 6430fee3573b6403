#pragma once

#include <QTextEdit>

// The in-place editor a message opens (double-click, F2): read-only, the same safe
// document the view draws, selectable by mouse and keyboard; Ctrl+C copies the selection.
class MessageTextEditor : public QTextEdit {
    Q_OBJECT
public:
    MessageTextEditor(QWidget* parent, const QFont& font, const QPalette& palette);
    // Shows `content` as the view renders it. The same content again changes nothing, and
    // a streaming answer that grows keeps the selection where it was.
    void showContent(const QString& content);
};
