#pragma once

#include <QImage>
#include <QPlainTextEdit>
#include <QStringList>

// The composer's text box. Pasted or dropped images are not text: a clipboard or drag
// holding an image, or local files, is handed on as imagesGiven (files) or imagePasted
// (pixels) instead of being inserted; everything else is pasted as plain text.
class ComposerTextEdit : public QPlainTextEdit {
    Q_OBJECT
public:
    explicit ComposerTextEdit(QWidget* parent = nullptr);
    // Off (no vision tower): images are refused, and a file's path is pasted as text.
    void setAcceptsImages(bool accepts) { m_acceptsImages = accepts; }

signals:
    void filesGiven(const QStringList& paths);
    void imagePasted(const QImage& image);

protected:
    bool canInsertFromMimeData(const QMimeData* source) const override;
    void insertFromMimeData(const QMimeData* source) override;

private:
    static QStringList localFiles(const QMimeData* source);
    bool m_acceptsImages = false;
};
