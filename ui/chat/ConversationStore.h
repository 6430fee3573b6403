#pragma once

#include <QByteArray>
#include <QDateTime>
#include <QString>
#include <QStringList>
#include <QVector>

#include <memory>
#include <mutex>
#include <vector>

#include "chat/ConversationSettings.h"
#include "worker/EngineWorker.h"

namespace k3 {
struct ChatMessage;
class OutputLock;
} // namespace k3

// Conversations on disk: one JSONL transcript per conversation ({role, content,
// reasoning_content} per line, the public engine's format, with a tool's name and an
// invalid answer's reason kept), written atomically so a crash leaves the last complete
// state. The open conversation's saves run on TranscriptWriter's thread, everything
// else on the GUI thread (after TranscriptWriter::flush()): the claim below is guarded by
// a mutex, every other member is set once at construction. The conversation being written is
// claimed (an advisory lock, k3::OutputLock): a second k3chat, or `k3 --chat --history`
// on the same file, is refused with a message instead of silently overwriting it.
// A title the user gave is kept beside the transcript (ID.title, plain UTF-8), so the
// transcript stays in the engine's format and files without one still open. Deleted
// conversations go to the trash/ subfolder first, where restore() finds them again.
// Attached images are copied into the images/ subfolder (storeImage, off the GUI thread).
class ConversationStore {
public:
    struct Summary {
        QString id;         // file name without .jsonl
        QString title;      // the stored title, else the first user message, shortened
        QDateTime modified; // the transcript's last write
    };

    explicit ConversationStore(QString directory);
    ~ConversationStore();
    ConversationStore(const ConversationStore&) = delete;
    ConversationStore& operator=(const ConversationStore&) = delete;

    const QString& directory() const { return m_directory; }
    // Newest first.
    QVector<Summary> list() const { return listDirectory(m_directory); }
    // The conversations in `directory`, newest first; with a `query`, only those whose
    // title or message text holds every word of it (case-insensitive). Only reads files,
    // so a worker thread may run it (the sidebar's full-text search).
    static QVector<Summary> listDirectory(const QString& directory, const QString& query = {});
    // One conversation's entry (its title and date after a save or a rename).
    Summary summary(const QString& id) const;
    // The entry of `id` just saved with `turns`: its title from them unless one is stored,
    // without reading the transcript again (what TranscriptWriter reports after a save).
    Summary summary(const QString& id, const QVector<ChatTurn>& turns) const;
    // Throws std::runtime_error naming the file and line when a transcript is invalid.
    QVector<ChatTurn> load(const QString& id) const;
    // A new conversation's id (its date and a random part), chosen without touching the
    // disk: the GUI thread names a conversation before its first save is written.
    static QString newId();
    // Writes the whole conversation; returns the id (a new one when `id` is empty).
    // Claims it first (claim()): throws std::runtime_error naming the file when another
    // session holds it, and then writes nothing.
    QString save(const QString& id, const QVector<ChatTurn>& turns);
    bool remove(const QString& id);
    // A copy of conversation `id` under a new id, titled "TITLE (copy)"; returns the new
    // id. Nothing is claimed (the open conversation keeps its claim). Throws
    // std::runtime_error naming the file that could not be read or written.
    QString duplicate(const QString& id);

    // Stores the user's title for `id` (simplified to one line); an empty title removes
    // it, and the first question is the title again. Throws std::runtime_error naming
    // the file when it cannot be written.
    void setTitle(const QString& id, const QString& title);
    // The stored title; empty when the user never gave one.
    QString storedTitle(const QString& id) const { return readTitle(m_directory, id); }

    // How conversation `id` answers where it differs from Settings (ID.settings, beside
    // the transcript; the system prompt stays the transcript's first turn). Empty
    // settings remove the file. Throws std::runtime_error naming the file when it cannot
    // be written.
    void saveSettings(const QString& id, const ConversationSettings& settings);
    ConversationSettings loadSettings(const QString& id) const;

    // Moves the transcript and its title into trashDirectory(), unchanged (date
    // included). Throws std::runtime_error naming the file when another session holds
    // the conversation or the move fails; nothing is moved then.
    void trash(const QString& id);
    // Brings a trashed conversation back as it was. Throws std::runtime_error naming the
    // file when it is not in the trash or a conversation with its id exists again.
    void restore(const QString& id);
    // Deletes a trashed conversation for good, and the files in images/ that only it
    // used (removeUnusedImages).
    void purge(const QString& id);
    // Deletes everything left in the trash: called at start, so a conversation deleted
    // just before a crash or a kill (inside the undo period) does not stay on disk.
    void purgeLeftoverTrash();
    QString trashDirectory() const { return m_directory + QStringLiteral("/trash"); }

    // Locks conversation `id` for this store until another one is claimed, release() or
    // the store goes away. Throws std::runtime_error naming the file and the other
    // session's pid when another session holds it; the previous claim is then kept.
    void claim(const QString& id);
    void release();
    QString claimedId() const;

    // The first user message's text; a message with only images is "Image 640×480"
    // (its size, from the file's header) or "2 images".
    static QString titleFor(const QVector<ChatTurn>& turns);
    static QString imagesTitle(const QStringList& images);
    // Every field of every message (role, content, reasoning, name, invalid, model,
    // stopped, figures).
    // `directory`: the transcript's folder, which its images' files are relative to.
    static QVector<ChatTurn> toTurns(const std::vector<k3::ChatMessage>& messages,
                                     const QString& directory = {});

    // Keeps a copy of an attached image's file (its bytes, as given) in `directory`'s
    // images/ folder, named by its content (SHA-256) and `suffix` ("png", "jpg", "webp"),
    // written atomically; returns its absolute path. Transcripts refer to it as
    // "images/NAME". Only touches files, so a worker thread runs it. Throws
    // std::runtime_error naming the file that could not be written.
    static QString storeImage(const QString& directory, const QByteArray& bytes,
                              const QString& suffix);

    // Copies the images of `turns` kept outside images/ (an imported transcript's, read
    // with toTurns(messages, its folder)) into images/ under their names, which save()
    // then refers to. Throws std::runtime_error naming a file that could not be copied.
    void importImages(const std::vector<ChatTurn>& turns) const;

    QString pathFor(const QString& id) const;

    // mkpath, then mode 0700 for every folder it made and for `path` itself: the app's
    // conversations and configuration are the user's only. Throws std::runtime_error
    // naming the folder.
    static void makePrivateFolder(const QString& path);
    QString titlePathFor(const QString& id) const { return titlePath(m_directory, id); }

private:
    static QString titlePath(const QString& directory, const QString& id);
    // The files kept beside a transcript, moved, copied and deleted with it.
    static const QStringList& sidecarSuffixes();
    static QString readTitle(const QString& directory, const QString& id);
    // The image files (absolute) transcript `path` refers to, every version included.
    QStringList imagesOf(const QString& path) const;
    // Deletes those of `candidates` that no transcript left (saved or in the trash,
    // which an undo brings back) refers to: a deleted conversation's pictures do not stay.
    void removeUnusedImages(const QStringList& candidates) const;

    const QString m_directory;
    mutable std::mutex m_claimMutex; // guards the two below (writer and GUI threads)
    QString m_claimedId;
    std::unique_ptr<k3::OutputLock> m_lock;
};
