#include "chat/ComposerTextEdit.h"

#include <QMimeData>
#include <QUrl>

ComposerTextEdit::ComposerTextEdit(QWidget* parent) : QPlainTextEdit(parent) {}

QStringList ComposerTextEdit::localFiles(const QMimeData* source) {
    QStringList files;
    if (!source->hasUrls()) return files;
    for (const QUrl& url : source->urls())
        if (url.isLocalFile()) files << url.toLocalFile();
    return files;
}

bool ComposerTextEdit::canInsertFromMimeData(const QMimeData* source) const {
    if (m_acceptsImages && (source->hasImage() || !localFiles(source).isEmpty())) return true;
    return QPlainTextEdit::canInsertFromMimeData(source);
}

void ComposerTextEdit::insertFromMimeData(const QMimeData* source) {
    if (m_acceptsImages) {
        // Files first: a file manager's drag may carry a preview image beside the files.
        // Whether each is an image is the attacher's to say (with the engine's reason).
        if (const QStringList files = localFiles(source); !files.isEmpty())
            return emit filesGiven(files);
        if (source->hasImage()) return emit imagePasted(qvariant_cast<QImage>(source->imageData()));
    }
    QPlainTextEdit::insertFromMimeData(source);
}
