#include "chat/SafeTextDocument.h"

#include <QTextBlock>
#include <QTextCursor>
#include <QTextImageFormat>

#include <algorithm>
#include <vector>

SafeTextDocument::SafeTextDocument(QObject* parent) : QTextDocument(parent) {}

QVariant SafeTextDocument::loadResource(int, const QUrl&) {
    ++m_requests;
    return {}; // never QTextDocument::loadResource(): that reads local files
}

int SafeTextDocument::replaceImages(QTextDocument& doc) {
    struct Image {
        int position;
        int length;
        QString alt;
    };
    std::vector<Image> images;
    for (QTextBlock block = doc.begin(); block.isValid(); block = block.next())
        for (auto it = block.begin(); !it.atEnd(); ++it) {
            const QTextFragment fragment = it.fragment();
            if (!fragment.isValid() || !fragment.charFormat().isImageFormat()) continue;
            const QTextImageFormat image = fragment.charFormat().toImageFormat();
            images.push_back({fragment.position(), fragment.length(),
                              image.property(QTextFormat::ImageAltText).toString()});
        }
    // From the end, so the positions still to be replaced stay valid.
    std::sort(images.begin(), images.end(),
              [](const Image& a, const Image& b) { return a.position > b.position; });
    for (const Image& image : images) {
        QTextCursor cursor(&doc);
        cursor.setPosition(image.position);
        cursor.setPosition(image.position + image.length, QTextCursor::KeepAnchor);
        QTextCharFormat text; // a plain character format: no image, no link
        text.setFontItalic(true);
        const QString alt = image.alt.simplified();
        cursor.insertText(
            alt.isEmpty() ? QObject::tr("[image]") : QObject::tr("[image: %1]").arg(alt), text);
    }
    return int(images.size());
}
