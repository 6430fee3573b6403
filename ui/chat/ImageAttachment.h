#pragma once

#include <QImage>
#include <QMetaType>
#include <QSize>
#include <QString>

// An image attached to the message being written: its copy beside the conversations
// (what the transcript refers to and the engine reads), and what the composer shows.
struct ImageAttachment {
    QString file;      // the saved copy (ConversationStore::storeImage), absolute
    QString name;      // what the user attached: the file's name, or "pasted image"
    QImage thumbnail;  // at most ImageAttacher::kThumbnailSide on its longer side
    QSize size;        // the original's pixels
    int positions = 0; // prompt positions it costs (k3::ImagePlan::tokens())
};
Q_DECLARE_METATYPE(ImageAttachment)
