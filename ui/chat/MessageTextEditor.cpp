#include "chat/MessageTextEditor.h"

#include "chat/MessageDelegate.h"
#include "chat/SafeTextDocument.h"

#include <QTextCursor>

#include <algorithm>

MessageTextEditor::MessageTextEditor(QWidget* parent, const QFont& font, const QPalette& palette)
    : QTextEdit(parent) {
    setObjectName(QStringLiteral("messageTextEditor"));
    setAccessibleName(tr("Message text"));
    setAccessibleDescription(tr("Read-only: select text, Ctrl+C copies it, Esc closes."));
    setReadOnly(true);
    setTextInteractionFlags(Qt::TextSelectableByMouse | Qt::TextSelectableByKeyboard);
    setFrameShape(QFrame::NoFrame);
    setFont(font);
    setPalette(palette);
}

void MessageTextEditor::showContent(const QString& content) {
    if (property("k3Content").isValid() && property("k3Content").toString() == content)
        return; // unchanged: keep the selection
    const int anchor = textCursor().anchor();
    const int position = textCursor().position();
    // The same safe document the view draws: no resource is ever loaded. The editor
    // deletes the document it had (its child).
    auto* doc = new SafeTextDocument(this);
    MessageDelegate::buildBody(*doc, content, font(), palette());
    setDocument(doc);
    setProperty("k3Content", content);
    // A streaming answer grows under the editor: the selection stays where it was.
    const int end = doc->characterCount() - 1;
    QTextCursor after(doc);
    after.setPosition(std::clamp(anchor, 0, end));
    after.setPosition(std::clamp(position, 0, end), QTextCursor::KeepAnchor);
    setTextCursor(after);
}
