#include "chat/ConversationStore.h"

#include "chat/MarkdownDocumentWriter.h"

#include <QCryptographicHash>
#include <QDir>
#include <QFileInfo>
#include <QImageReader>
#include <QUuid>

#include <k3/chat.hpp>

#include <stdexcept>

namespace {

// Every word somewhere in the title or in one message's text (what the view shows).
bool holdsEveryWord(const QString& title, const QVector<ChatTurn>& turns,
                    const QStringList& words) {
    for (const QString& word : words) {
        bool found = title.contains(word, Qt::CaseInsensitive);
        for (qsizetype i = 0; !found && i < turns.size(); ++i)
            found = turns[i].content.contains(word, Qt::CaseInsensitive);
        if (!found) return false;
    }
    return true;
}

[[noreturn]] void fail(const QString& message) {
    throw std::runtime_error(message.toStdString());
}

// A rename keeps the file's date, so a restored conversation sorts where it was.
void moveFile(const QString& from, const QString& to) {
    if (QFileInfo::exists(to)) fail(QObject::tr("%1: not moved to %2, which exists").arg(from, to));
    QFile file(from);
    if (!file.rename(to))
        fail(QObject::tr("%1: could not be moved to %2 (%3)").arg(from, to, file.errorString()));
}

// A message as a transcript in `directory` holds it: its images' files relative to the
// transcript's folder, its other versions' likewise.
void relativeImages(k3::ChatMessage& m, const QDir& directory) {
    for (k3::ChatImage& image : m.images) {
        const QString file = QString::fromStdString(image.file);
        QString name = directory.relativeFilePath(file);
        // Kept elsewhere (an imported transcript's image): named as the copy
        // importImages() made in images/, never by a path out of the folder.
        if (name.startsWith(QLatin1String("..")) || QDir::isAbsolutePath(name))
            name = QStringLiteral("images/") + QFileInfo(file).fileName();
        image.file = name.toStdString();
    }
    for (std::vector<k3::ChatMessage>& branch : m.otherVersions)
        for (k3::ChatMessage& other : branch) relativeImages(other, directory);
}

template <typename Turns>
std::vector<k3::ChatMessage> toMessages(const Turns& turns, const QDir& directory) {
    std::vector<k3::ChatMessage> out;
    for (const ChatTurn& t : turns) relativeImages(out.emplace_back(toChatMessage(t)), directory);
    return out;
}

// The turn's images as absolute paths, the transcript's folder being `directory`.
void absoluteImages(ChatTurn& t, const QString& directory) {
    for (QString& file : t.images) file = QDir::cleanPath(QDir(directory).absoluteFilePath(file));
    for (std::vector<ChatTurn>& branch : t.otherVersions)
        for (ChatTurn& other : branch) absoluteImages(other, directory);
}

} // namespace

void ConversationStore::makePrivateFolder(const QString& path) {
    // Every folder this call creates, and the folder itself, is the user's only: the
    // conversations hold what was said, and mkpath would leave them 0755 under umask 022.
    QStringList created;
    for (QString p = QDir::cleanPath(QDir(path).absolutePath()); !QFileInfo::exists(p);) {
        created.push_back(p);
        const QString parent = QFileInfo(p).absolutePath();
        if (parent == p) break;
        p = parent;
    }
    if (!QDir().mkpath(path)) fail(QObject::tr("%1: the folder could not be created").arg(path));
    if (!created.contains(QDir::cleanPath(QDir(path).absolutePath())))
        created.push_back(path); // made by an older k3chat, perhaps 0755
    for (const QString& folder : created)
        if (!QFile::setPermissions(folder, QFileDevice::ReadOwner | QFileDevice::WriteOwner |
                                               QFileDevice::ExeOwner))
            fail(QObject::tr("%1: could not be made private (mode 0700)").arg(folder));
}

ConversationStore::ConversationStore(QString directory) : m_directory(std::move(directory)) {}

void ConversationStore::purgeLeftoverTrash() {
    // The undo of a delete lasts while the app runs; a copy left by a crash or a kill
    // during those seconds would otherwise keep the conversation's text for good.
    QDir trash(trashDirectory());
    if (!trash.exists()) return;
    QStringList patterns{QStringLiteral("*.jsonl")};
    for (const QString& suffix : sidecarSuffixes()) patterns << QLatin1Char('*') + suffix;
    const QFileInfoList files = trash.entryInfoList(patterns, QDir::Files | QDir::Hidden);
    QStringList images;
    for (const QFileInfo& f : files) {
        try {
            if (f.suffix() == QLatin1String("jsonl")) images << imagesOf(f.filePath());
        } catch (const std::exception&) { // unreadable: its images stay
        }
        QFile::remove(f.filePath());
    }
    removeUnusedImages(images);
}

namespace {
void collectImages(const std::vector<k3::ChatMessage>& messages, const QDir& directory,
                   QStringList& out) {
    for (const k3::ChatMessage& m : messages) {
        for (const k3::ChatImage& image : m.images)
            out << QDir::cleanPath(directory.absoluteFilePath(QString::fromStdString(image.file)));
        for (const std::vector<k3::ChatMessage>& branch : m.otherVersions)
            collectImages(branch, directory, out);
    }
}
} // namespace

QStringList ConversationStore::imagesOf(const QString& path) const {
    QStringList out;
    // A trashed transcript is unchanged: its images are relative to the store's folder.
    collectImages(k3::readTranscript(path.toStdString()), QDir(m_directory), out);
    return out;
}

void ConversationStore::removeUnusedImages(const QStringList& candidates) const {
    const QString images = QDir::cleanPath(m_directory + QStringLiteral("/images"));
    QStringList unused;
    for (const QString& file : candidates)
        if (QFileInfo(file).absolutePath() == images && !unused.contains(file)) unused << file;
    if (unused.isEmpty()) return;
    QFileInfoList transcripts =
        QDir(m_directory).entryInfoList({QStringLiteral("*.jsonl")}, QDir::Files);
    transcripts += QDir(trashDirectory()).entryInfoList({QStringLiteral("*.jsonl")}, QDir::Files);
    for (const QFileInfo& f : transcripts) {
        try {
            for (const QString& used : imagesOf(f.filePath())) unused.removeAll(used);
        } catch (const std::exception&) {
            // Unreadable: keep every image its bytes name, as a reader might need it.
            QFile file(f.filePath());
            const QByteArray bytes = file.open(QIODevice::ReadOnly) ? file.readAll() : QByteArray();
            if (bytes.isEmpty()) return;
            for (qsizetype i = unused.size() - 1; i >= 0; --i)
                if (bytes.contains(QFileInfo(unused[i]).fileName().toUtf8())) unused.removeAt(i);
        }
        if (unused.isEmpty()) return;
    }
    for (const QString& file : unused) QFile::remove(file);
}

ConversationStore::~ConversationStore() = default;

void ConversationStore::claim(const QString& id) {
    const std::lock_guard guard(m_claimMutex);
    if (id == m_claimedId && m_lock) return;
    makePrivateFolder(m_directory);
    auto lock = std::make_unique<k3::OutputLock>(pathFor(id).toStdString()); // may throw
    m_lock = std::move(lock);
    m_claimedId = id;
}

void ConversationStore::release() {
    const std::lock_guard guard(m_claimMutex);
    m_lock.reset();
    m_claimedId.clear();
}

QString ConversationStore::claimedId() const {
    const std::lock_guard guard(m_claimMutex);
    return m_claimedId;
}

QString ConversationStore::pathFor(const QString& id) const {
    return m_directory + QLatin1Char('/') + id + QStringLiteral(".jsonl");
}

QString ConversationStore::imagesTitle(const QStringList& images) {
    if (images.size() > 1) return QObject::tr("%n images", nullptr, int(images.size()));
    // Only the header is read (the list's titles come from a worker thread).
    const QSize size = QImageReader(images.front()).size();
    if (!size.isValid()) return QObject::tr("Image");
    return QObject::tr("Image %1×%2").arg(size.width()).arg(size.height());
}

QString ConversationStore::titleFor(const QVector<ChatTurn>& turns) {
    for (const ChatTurn& t : turns)
        if (t.role == QLatin1String("user")) {
            // The words a reader sees, not the Markdown that makes them ("**bold**").
            QString title = MarkdownDocumentWriter::plainText(t.content).simplified();
            if (title.isEmpty() && !t.images.isEmpty()) return imagesTitle(t.images);
            if (title.size() > 48) title = title.left(47) + QStringLiteral("…");
            return title;
        }
    return QObject::tr("New chat");
}

const QStringList& ConversationStore::sidecarSuffixes() {
    static const QStringList suffixes{QStringLiteral(".title"), QStringLiteral(".settings")};
    return suffixes;
}

void ConversationStore::saveSettings(const QString& id, const ConversationSettings& settings) {
    const QString path = m_directory + QLatin1Char('/') + id + QStringLiteral(".settings");
    if (settings.isEmpty()) {
        if (QFileInfo::exists(path) && !QFile::remove(path))
            fail(QObject::tr("%1: could not be removed").arg(path));
        return;
    }
    makePrivateFolder(m_directory);
    k3::writeFileAtomically(path.toStdString(), settings.toJson().toStdString());
}

ConversationSettings ConversationStore::loadSettings(const QString& id) const {
    QFile file(m_directory + QLatin1Char('/') + id + QStringLiteral(".settings"));
    if (!file.open(QIODevice::ReadOnly)) return {};
    return ConversationSettings::fromJson(file.read(65536)); // a few fields, not a document
}

QString ConversationStore::titlePath(const QString& directory, const QString& id) {
    return directory + QLatin1Char('/') + id + QStringLiteral(".title");
}

QString ConversationStore::readTitle(const QString& directory, const QString& id) {
    QFile file(titlePath(directory, id));
    if (!file.open(QIODevice::ReadOnly)) return {};
    return QString::fromUtf8(file.read(4096)).simplified(); // a title, not a document
}

QVector<ConversationStore::Summary> ConversationStore::listDirectory(const QString& directory,
                                                                     const QString& query) {
    const QStringList words = query.simplified().split(QLatin1Char(' '), Qt::SkipEmptyParts);
    QVector<Summary> out;
    const QFileInfoList files =
        QDir(directory).entryInfoList({QStringLiteral("*.jsonl")}, QDir::Files, QDir::Time);
    for (const QFileInfo& f : files) {
        Summary s{f.completeBaseName(), readTitle(directory, f.completeBaseName()),
                  f.lastModified()};
        QVector<ChatTurn> turns;
        // A stored title spares reading the transcript, unless its text is searched.
        if (s.title.isEmpty() || !words.isEmpty()) {
            try {
                turns = toTurns(k3::readTranscript(f.filePath().toStdString()), directory);
                if (s.title.isEmpty()) s.title = titleFor(turns);
            } catch (const std::exception&) {
                if (s.title.isEmpty()) s.title = QObject::tr("%1 (unreadable)").arg(f.fileName());
            }
        }
        if (words.isEmpty() || holdsEveryWord(s.title, turns, words)) out.push_back(s);
    }
    return out;
}

ConversationStore::Summary ConversationStore::summary(const QString& id) const {
    Summary s{id, storedTitle(id), QFileInfo(pathFor(id)).lastModified()};
    if (s.title.isEmpty()) {
        try {
            s.title = titleFor(load(id));
        } catch (const std::exception&) {
            s.title = QObject::tr("%1 (unreadable)").arg(QFileInfo(pathFor(id)).fileName());
        }
    }
    return s;
}

ConversationStore::Summary ConversationStore::summary(const QString& id,
                                                      const QVector<ChatTurn>& turns) const {
    Summary s{id, storedTitle(id), QFileInfo(pathFor(id)).lastModified()};
    if (s.title.isEmpty()) s.title = titleFor(turns);
    return s;
}

QVector<ChatTurn> ConversationStore::toTurns(const std::vector<k3::ChatMessage>& messages,
                                             const QString& directory) {
    QVector<ChatTurn> turns;
    for (const k3::ChatMessage& m : messages)
        absoluteImages(turns.emplace_back(toChatTurn(m)), directory);
    return turns;
}

QVector<ChatTurn> ConversationStore::load(const QString& id) const {
    return toTurns(k3::readTranscript(pathFor(id).toStdString()), m_directory);
}

QString ConversationStore::newId() {
    return QDateTime::currentDateTimeUtc().toString(QStringLiteral("yyyyMMdd-HHmmss-")) +
           QUuid::createUuid().toString(QUuid::Id128).left(8);
}

QString ConversationStore::save(const QString& id, const QVector<ChatTurn>& turns) {
    makePrivateFolder(m_directory);
    const QString useId = id.isEmpty() ? newId() : id;
    claim(useId);
    k3::writeTranscript(pathFor(useId).toStdString(), toMessages(turns, QDir(m_directory)));
    return useId;
}

QString ConversationStore::duplicate(const QString& id) {
    // Read and written whole, as a save is: the copy is a valid transcript or nothing.
    const QVector<ChatTurn> turns = load(id);
    const QString title = storedTitle(id).isEmpty() ? titleFor(turns) : storedTitle(id);
    const QString copy = newId();
    makePrivateFolder(m_directory);
    k3::writeTranscript(pathFor(copy).toStdString(), toMessages(turns, QDir(m_directory)));
    setTitle(copy, QObject::tr("%1 (copy)").arg(title));
    saveSettings(copy, loadSettings(id)); // the copy answers as the original does
    return copy;
}

QString ConversationStore::storeImage(const QString& directory, const QByteArray& bytes,
                                      const QString& suffix) {
    const QString folder = directory + QStringLiteral("/images");
    makePrivateFolder(folder);
    // Named by its content: the same image attached twice is one file, and a file once
    // written never changes (the engine thread keeps what it prepared from it).
    const QString path =
        folder + QLatin1Char('/') +
        QString::fromLatin1(QCryptographicHash::hash(bytes, QCryptographicHash::Sha256).toHex()) +
        QLatin1Char('.') + suffix;
    if (!QFileInfo::exists(path))
        k3::writeFileAtomically(path.toStdString(),
                                std::string_view(bytes.constData(), std::size_t(bytes.size())));
    return path;
}

void ConversationStore::importImages(const std::vector<ChatTurn>& turns) const {
    const QDir images(m_directory + QStringLiteral("/images"));
    for (const ChatTurn& t : turns) {
        for (const QString& file : t.images) {
            const QString copy = images.filePath(QFileInfo(file).fileName());
            if (QFileInfo(file).absolutePath() == images.absolutePath() ||
                QFileInfo::exists(copy) || !QFileInfo::exists(file))
                continue; // in place, copied before, or missing (shown as missing)
            makePrivateFolder(images.path());
            if (!QFile::copy(file, copy))
                fail(QObject::tr("%1: could not be copied to %2").arg(file, copy));
        }
        for (const std::vector<ChatTurn>& branch : t.otherVersions) importImages(branch);
    }
}

bool ConversationStore::remove(const QString& id) {
    if (id == claimedId()) release();
    for (const QString& suffix : sidecarSuffixes())
        QFile::remove(m_directory + QLatin1Char('/') + id + suffix);
    QStringList images;
    try {
        images = imagesOf(pathFor(id));
    } catch (const std::exception&) { // unreadable: its images stay
    }
    const bool removed = QFile::remove(pathFor(id));
    if (removed) removeUnusedImages(images);
    return removed;
}

void ConversationStore::setTitle(const QString& id, const QString& title) {
    const QString path = titlePathFor(id);
    const QString clean = title.simplified();
    if (clean.isEmpty()) {
        if (QFileInfo::exists(path) && !QFile::remove(path))
            fail(QObject::tr("%1: could not be removed").arg(path));
        return;
    }
    makePrivateFolder(m_directory);
    k3::writeFileAtomically(path.toStdString(), clean.toStdString()); // throws naming it
}

void ConversationStore::trash(const QString& id) {
    const bool wasClaimed = id == claimedId();
    if (wasClaimed) release(); // a second lock by this process would refuse itself
    try {
        // Held while moving: a session writing it now is told, not robbed of its file.
        const k3::OutputLock lock(pathFor(id).toStdString());
        const QString trashedPath = trashDirectory() + QLatin1Char('/') + id;
        if (!QFileInfo::exists(pathFor(id)))
            fail(QObject::tr("%1: no such conversation").arg(pathFor(id)));
        makePrivateFolder(trashDirectory());
        // A copy of the same conversation left by a crash during an earlier undo period.
        QFile::remove(trashedPath + QStringLiteral(".jsonl"));
        for (const QString& suffix : sidecarSuffixes()) QFile::remove(trashedPath + suffix);
        QStringList moved; // the files beside it, put back if the transcript cannot move
        for (const QString& suffix : sidecarSuffixes()) {
            const QString beside = m_directory + QLatin1Char('/') + id + suffix;
            if (!QFileInfo::exists(beside)) continue;
            moveFile(beside, trashedPath + suffix);
            moved << suffix;
        }
        try {
            moveFile(pathFor(id), trashedPath + QStringLiteral(".jsonl"));
        } catch (const std::exception&) {
            for (const QString& suffix : moved)
                QFile::rename(trashedPath + suffix, m_directory + QLatin1Char('/') + id + suffix);
            throw;
        }
    } catch (const std::exception&) {
        if (wasClaimed) {
            try {
                claim(id);
            } catch (const std::exception&) { // another session took it meanwhile
            }
        }
        throw;
    }
}

void ConversationStore::restore(const QString& id) {
    const QString trashedPath = trashDirectory() + QLatin1Char('/') + id;
    const QString transcript = trashedPath + QStringLiteral(".jsonl");
    if (!QFileInfo::exists(transcript))
        fail(QObject::tr("%1: not in the trash (deleted for good already)").arg(transcript));
    moveFile(transcript, pathFor(id));
    for (const QString& suffix : sidecarSuffixes())
        if (QFileInfo::exists(trashedPath + suffix))
            moveFile(trashedPath + suffix, m_directory + QLatin1Char('/') + id + suffix);
}

void ConversationStore::purge(const QString& id) {
    const QString trashedPath = trashDirectory() + QLatin1Char('/') + id;
    QStringList images;
    try {
        images = imagesOf(trashedPath + QStringLiteral(".jsonl"));
    } catch (const std::exception&) { // missing or unreadable: its images stay
    }
    QFile::remove(trashedPath + QStringLiteral(".jsonl"));
    for (const QString& suffix : sidecarSuffixes()) QFile::remove(trashedPath + suffix);
    removeUnusedImages(images);
}
