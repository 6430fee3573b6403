#pragma once

#include <QTextDocument>

// The document every conversation view lays out: model text decides what it holds, so
// it never loads a resource. A Markdown image `![](path)` in an answer or an imported
// conversation must not make the app open that path: a FIFO would block the GUI thread
// for good, /dev/zero would read until memory runs out, and a local picture would be
// shown. loadResource() answers nothing for every type and URL (Qt then draws its small
// placeholder), and replaceImages() turns each image into its alt text before the
// document is ever laid out.
class SafeTextDocument : public QTextDocument {
    Q_OBJECT
public:
    explicit SafeTextDocument(QObject* parent = nullptr);

    // How often the document asked for a resource (each was answered with nothing).
    int resourceRequests() const { return m_requests; }

    // Replaces every image of `doc` with the text "[image: ALT]" ("[image]" without alt
    // text), in italics. Returns how many images it replaced.
    static int replaceImages(QTextDocument& doc);

protected:
    QVariant loadResource(int type, const QUrl& name) override;

private:
    int m_requests = 0;
};
