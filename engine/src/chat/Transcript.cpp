// JSONL transcripts, compatible with the public engine's --history files.
#include "k3/chat.hpp"
#include "k3/fault_injection.hpp"
#include "k3/json_duplicates.hpp"
#include "k3/json_limits.hpp"
#include "platform/Platform.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace k3 {

namespace {

// Ordered: tool-call arguments read back keep their key order (the order they render in).
using Json = nlohmann::ordered_json;

std::string lineError(const std::string& source, std::size_t line, const std::string& what) {
    return source + ":" + std::to_string(line) + ": " + what;
}

// A string field that may be absent; null counts as absent.
std::optional<std::string> stringField(const Json& obj, const char* key, const std::string& source,
                                       std::size_t line) {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::nullopt;
    if (it->is_array() && std::string_view(key) == "content")
        throw ChatError(lineError(source, line,
                                  "field \"content\" is a list of parts; multimodal content "
                                  "(images) is not supported, only a string"));
    if (!it->is_string())
        throw ChatError(lineError(source, line,
                                  std::string("field \"") + key + "\" must be a string, not " +
                                      it->type_name()));
    return it->get<std::string>();
}

// "stopped" and "figures": assistant only, both optional (older transcripts lack them).
void readAnswerState(const Json& obj, ChatMessage& m, const std::string& source, std::size_t line) {
    const bool assistant = m.role == ChatRole::Assistant;
    if (const auto it = obj.find("stopped"); it != obj.end() && !it->is_null()) {
        if (!it->is_boolean())
            throw ChatError(lineError(source, line,
                                      std::string("field \"stopped\" must be a boolean, not ") +
                                          it->type_name()));
        if (!assistant && it->get<bool>())
            throw ChatError(
                lineError(source, line, "field \"stopped\" is only allowed on assistant messages"));
        m.stopped = it->get<bool>();
    }
    const auto it = obj.find("figures");
    if (it == obj.end() || it->is_null()) return;
    if (!assistant)
        throw ChatError(
            lineError(source, line, "field \"figures\" is only allowed on assistant messages"));
    if (!it->is_object())
        throw ChatError(lineError(source, line, "field \"figures\" must be an object"));
    const auto number = [&](const char* key) {
        const auto f = it->find(key);
        if (f == it->end() || f->is_null()) return 0.0;
        if (!f->is_number() || f->get<double>() < 0 || !std::isfinite(f->get<double>()))
            throw ChatError(lineError(source, line,
                                      std::string("field \"figures.") + key +
                                          "\" must be a number of at least 0"));
        return f->get<double>();
    };
    const double tokens = number("tokens");
    if (tokens > double(INT_MAX) || tokens != double(int(tokens)))
        throw ChatError(lineError(source, line, "field \"figures.tokens\" must be a whole number"));
    m.figures.tokens = int(tokens);
    m.figures.tokensPerSecond = number("tokens_per_second");
    m.figures.firstTokenSeconds = number("first_token_seconds");
}

// "tool_calls" (assistant) and "tool_call_id" (tool), as OpenAI's messages spell them.
// Transcripts written before tool calls were saved have neither and read as before.
void readToolFields(const Json& obj, ChatMessage& m, const std::string& source, std::size_t line) {
    if (auto id = stringField(obj, "tool_call_id", source, line)) {
        if (m.role != ChatRole::Tool)
            throw ChatError(
                lineError(source, line, "field \"tool_call_id\" is only allowed on tool messages"));
        m.toolCallId = std::move(*id);
    }
    const auto calls = obj.find("tool_calls");
    if (calls == obj.end() || calls->is_null()) return;
    if (m.role != ChatRole::Assistant)
        throw ChatError(
            lineError(source, line, "field \"tool_calls\" is only allowed on assistant messages"));
    if (!calls->is_array())
        throw ChatError(lineError(source, line,
                                  std::string("field \"tool_calls\" must be an array, not ") +
                                      calls->type_name()));
    for (std::size_t i = 0; i < calls->size(); ++i) {
        const Json& c = (*calls)[i];
        const std::string field = "tool_calls[" + std::to_string(i) + "]";
        const auto wrong = [&](const std::string& key, const std::string& what) {
            return ChatError(lineError(source, line, "field \"" + field + key + "\" " + what));
        };
        if (!c.is_object()) throw wrong("", std::string("must be an object, not ") + c.type_name());
        ChatToolCall call;
        for (const auto& item : c.items())
            if (item.key() != "id" && item.key() != "type" && item.key() != "function")
                throw wrong("." + item.key(), "is unknown (id, type, function)");
        if (const auto id = c.find("id"); id != c.end() && !id->is_null()) {
            if (!id->is_string()) throw wrong(".id", "must be a string");
            call.id = id->get<std::string>();
        }
        if (const auto type = c.find("type"); type != c.end() && !type->is_null())
            if (!type->is_string() || type->get<std::string>() != "function")
                throw wrong(".type", "must be \"function\"");
        const auto fn = c.find("function");
        if (fn == c.end() || !fn->is_object()) throw wrong(".function", "is required, an object");
        const auto name = fn->find("name");
        if (name == fn->end() || !name->is_string() || name->get<std::string>().empty())
            throw wrong(".function.name", "is required, a non-empty string");
        call.name = name->get<std::string>();
        // As in a request: an object renders as argument tags, a string verbatim in a json
        // block (the template's two forms); formatTranscript() writes each back that way.
        const auto args = fn->find("arguments");
        if (args == fn->end() || args->is_null()) {
            call.arguments = "{}";
        } else if (args->is_object()) {
            call.arguments = args->dump(-1, ' ', false, Json::error_handler_t::replace);
        } else if (args->is_string()) {
            call.arguments = args->get<std::string>();
            call.argumentsAsJsonBlock = true;
        } else {
            throw wrong(".function.arguments",
                        std::string("must be an object or a string, not ") + args->type_name());
        }
        m.toolCalls.push_back(std::move(call));
    }
}

Json toolCallsJson(const std::vector<ChatToolCall>& calls) {
    Json list = Json::array();
    for (const ChatToolCall& call : calls) {
        Json c;
        if (!call.id.empty()) c["id"] = call.id;
        c["type"] = "function";
        Json arguments = call.arguments;
        if (!call.argumentsAsJsonBlock) {
            // The mapping form is stored as the object it is; text that is no JSON object
            // renders as a json block anyway, so it is stored as the string form.
            Json parsed = jsonTooDeepAt(call.arguments)
                              ? Json(Json::value_t::discarded)
                              : Json::parse(call.arguments, nullptr, false);
            if (parsed.is_object()) arguments = std::move(parsed);
        }
        c["function"] = {{"name", call.name}, {"arguments", std::move(arguments)}};
        list.push_back(std::move(c));
    }
    return list;
}

ChatMessage parseMessage(const Json& obj, const std::string& source, std::size_t line);

// The placeholders of a user message's content: each is the next image's place.
std::size_t placeholderCount(std::string_view content) {
    std::size_t n = 0;
    for (std::size_t at = content.find(kImagePlaceholder); at != std::string_view::npos;
         at = content.find(kImagePlaceholder, at + kImagePlaceholder.size()))
        ++n;
    return n;
}

// "images": [{"file": "images/NAME"}, ...] on a user line: the copies kept beside the
// transcript, relative to its folder and never outside it, one per placeholder.
void readImages(const Json& obj, ChatMessage& m, const std::string& source, std::size_t line) {
    const auto it = obj.find("images");
    if (it == obj.end() || it->is_null()) return;
    if (m.role != ChatRole::User)
        throw ChatError(
            lineError(source, line, "field \"images\" is only allowed on user messages"));
    if (!it->is_array())
        throw ChatError(
            lineError(source, line,
                      std::string("field \"images\" must be an array, not ") + it->type_name()));
    if (it->size() > kMaxImagesPerMessage)
        throw ChatError(lineError(source, line,
                                  "field \"images\" holds " + std::to_string(it->size()) +
                                      " images, over the " + std::to_string(kMaxImagesPerMessage) +
                                      " a message may have"));
    for (std::size_t i = 0; i < it->size(); ++i) {
        const Json& entry = (*it)[i];
        const std::string field = "images[" + std::to_string(i) + "].file";
        const auto file = entry.is_object() ? entry.find("file") : entry.end();
        if (!entry.is_object() || file == entry.end() || !file->is_string() ||
            file->get<std::string>().empty())
            throw ChatError(
                lineError(source, line, "field \"" + field + "\" is required, a non-empty string"));
        const std::filesystem::path path(file->get<std::string>());
        bool outside = path.is_absolute() || path.has_root_name();
        for (const auto& part : path) outside = outside || part == "..";
        if (outside)
            throw ChatError(lineError(source, line,
                                      "field \"" + field +
                                          "\" must name a file inside the "
                                          "transcript's folder, not \"" +
                                          file->get<std::string>() + "\""));
        m.images.push_back(ChatImage{nullptr, file->get<std::string>()});
    }
    if (placeholderCount(m.content) != m.images.size())
        throw ChatError(lineError(source, line,
                                  "field \"images\" names " + std::to_string(m.images.size()) +
                                      " image(s) for " +
                                      std::to_string(placeholderCount(m.content)) + " " +
                                      std::string(kImagePlaceholder) + " in the content"));
}

// "versions": {"index": k, "others": [[message, ...], ...]}, optional on any message.
void readVersions(const Json& obj, ChatMessage& m, const std::string& source, std::size_t line) {
    const auto it = obj.find("versions");
    if (it == obj.end() || it->is_null()) return;
    const auto others = it->is_object() ? it->find("others") : it->end();
    if (others == it->end() || !others->is_array())
        throw ChatError(lineError(source, line,
                                  "field \"versions\" must be an object with an array "
                                  "\"others\""));
    for (const auto& branch : *others) {
        if (!branch.is_array() || branch.empty())
            throw ChatError(lineError(source, line,
                                      "field \"versions.others\" must hold non-empty arrays "
                                      "of messages"));
        std::vector<ChatMessage> messages;
        for (const auto& message : branch) {
            if (!message.is_object())
                throw ChatError(lineError(source, line,
                                          "field \"versions.others\" holds a " +
                                              std::string(message.type_name()) +
                                              ", not a message object"));
            messages.push_back(parseMessage(message, source, line));
        }
        m.otherVersions.push_back(std::move(messages));
    }
    const auto index = it->find("index");
    if (index == it->end() || !index->is_number_integer() || index->get<long long>() < 0 ||
        index->get<long long>() > (long long)m.otherVersions.size())
        throw ChatError(lineError(source, line,
                                  "field \"versions.index\" must be a whole number from 0 to " +
                                      std::to_string(m.otherVersions.size())));
    m.versionIndex = index->get<int>();
}

ChatMessage parseMessage(const Json& obj, const std::string& source, std::size_t line) {
    for (const auto& item : obj.items()) {
        const std::string& key = item.key();
        if (key == "role" || key == "content" || key == "reasoning_content" || key == "name" ||
            key == "invalid" || key == "model" || key == "stopped" || key == "figures" ||
            key == "versions" || key == "tool_calls" || key == "tool_call_id" || key == "images")
            continue;
        if (key == "tools")
            throw ChatError(lineError(source, line,
                                      "field \"tools\" is not supported (tool declarations "
                                      "belong to a request, not to a message)"));
        throw ChatError(lineError(source, line, "unknown field \"" + key + "\""));
    }

    const auto role = stringField(obj, "role", source, line);
    if (!role) throw ChatError(lineError(source, line, "missing field \"role\""));
    const auto parsedRole = parseChatRole(*role);
    if (!parsedRole)
        throw ChatError(lineError(source, line,
                                  "field \"role\" has unknown value \"" + *role +
                                      "\" (expected system, user, assistant or tool)"));
    ChatMessage m;
    m.role = *parsedRole;
    const auto content = stringField(obj, "content", source, line);
    if (!content) throw ChatError(lineError(source, line, "missing field \"content\""));
    m.content = *content;
    if (auto reasoning = stringField(obj, "reasoning_content", source, line)) {
        if (m.role != ChatRole::Assistant && !reasoning->empty())
            throw ChatError(lineError(source, line,
                                      "field \"reasoning_content\" is only allowed on "
                                      "assistant messages, not " +
                                          *role));
        m.reasoningContent = std::move(*reasoning);
    }
    if (auto name = stringField(obj, "name", source, line)) m.name = std::move(*name);
    if (auto invalid = stringField(obj, "invalid", source, line)) {
        if (m.role != ChatRole::Assistant && !invalid->empty())
            throw ChatError(lineError(source, line,
                                      "field \"invalid\" is only allowed on assistant "
                                      "messages, not " +
                                          *role));
        m.invalid = std::move(*invalid);
    }
    if (auto model = stringField(obj, "model", source, line)) {
        if (m.role != ChatRole::Assistant && !model->empty())
            throw ChatError(lineError(source, line,
                                      "field \"model\" is only allowed on assistant "
                                      "messages, not " +
                                          *role));
        m.model = std::move(*model);
    }
    readAnswerState(obj, m, source, line);
    readToolFields(obj, m, source, line);
    readVersions(obj, m, source, line);
    readImages(obj, m, source, line);
    // The renderer finds the tool's name from the call a tool_call_id names.
    if (m.role == ChatRole::Tool && m.name.empty() && m.toolCallId.empty())
        throw ChatError(lineError(source, line,
                                  "field \"name\" (the tool's name) or \"tool_call_id\" "
                                  "(the call answered) is required for role tool"));
    return m;
}

std::string errnoText() {
    return std::strerror(errno);
}

using platform::FileInfo;
using platform::FileType;

// "a directory", "a FIFO", ... for messages.
std::string fileTypeName(FileType type) {
    switch (type) {
    case FileType::Directory:
        return "a directory";
    case FileType::CharDevice:
        return "a character device";
    case FileType::BlockDevice:
        return "a block device";
    case FileType::Fifo:
        return "a FIFO (named pipe)";
    case FileType::Socket:
        return "a socket";
    case FileType::Symlink:
        return "a symbolic link";
    case FileType::Regular:
        return "a regular file";
    default:
        return "not a regular file";
    }
}

} // namespace

std::vector<ChatMessage> parseTranscript(std::string_view text, const std::string& sourceName) {
    std::vector<ChatMessage> messages;
    std::size_t lineNumber = 0;
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(pos, end - pos);
        pos = end + 1;
        ++lineNumber;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.find_first_not_of(" \t") == std::string_view::npos) continue;

        if (const auto deep = jsonDepthProblem(line))
            throw ChatError(lineError(sourceName, lineNumber, *deep));
        Json obj;
        try {
            obj = parseJsonWithoutDuplicateKeys<Json>(line);
        } catch (const DuplicateJsonKey& e) {
            throw ChatError(lineError(sourceName, lineNumber, e.what()));
        } catch (const Json::exception& e) {
            throw ChatError(
                lineError(sourceName, lineNumber, std::string("not valid JSON: ") + e.what()));
        }
        if (!obj.is_object())
            throw ChatError(
                lineError(sourceName, lineNumber,
                          "expected a JSON object, got " + std::string(obj.type_name())));
        messages.push_back(parseMessage(obj, sourceName, lineNumber));
    }
    return messages;
}

std::vector<ChatMessage> readTranscript(const std::filesystem::path& path) {
    // NoWaitOnOpen: opening a FIFO must not wait for a writer; it is refused just below.
    platform::File file =
        platform::File::open(path, platform::open::Read | platform::open::NoWaitOnOpen);
    if (!file.valid())
        throw ChatError("cannot open transcript " + path.string() + ": " + errnoText());
    FileInfo st;
    if (!file.info(st))
        throw ChatError("cannot read transcript " + path.string() + ": " + errnoText());
    if (st.type != FileType::Regular)
        throw ChatError("cannot read transcript " + path.string() + ": it is " +
                        fileTypeName(st.type) + ", not a regular file");
    if (st.size > kMaxTranscriptBytes) {
        throw ChatError("cannot read transcript " + path.string() + ": it is " +
                        std::to_string(st.size) + " bytes, over the " +
                        std::to_string(kMaxTranscriptBytes >> 20) + " MB a transcript may have");
    }
    std::string text;
    char buffer[65536];
    for (;;) {
        const std::int64_t n = file.read(buffer, sizeof buffer);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n < 0) throw ChatError("cannot read transcript " + path.string() + ": " + errnoText());
        if (n == 0) break;
        text.append(buffer, std::size_t(n));
        if (text.size() > kMaxTranscriptBytes) { // it grew while being read
            throw ChatError("cannot read transcript " + path.string() + ": over the " +
                            std::to_string(kMaxTranscriptBytes >> 20) +
                            " MB a transcript may have");
        }
    }
    file.close();
    return parseTranscript(text, path.string());
}

namespace {

nlohmann::ordered_json messageJson(const ChatMessage& m) {
    nlohmann::ordered_json obj;
    obj["role"] = std::string(chatRoleName(m.role));
    if (!m.name.empty()) obj["name"] = m.name;
    if (!m.toolCallId.empty() && m.role == ChatRole::Tool) obj["tool_call_id"] = m.toolCallId;
    obj["content"] = m.content;
    if (m.role == ChatRole::Assistant) obj["reasoning_content"] = m.reasoningContent;
    if (!m.toolCalls.empty() && m.role == ChatRole::Assistant)
        obj["tool_calls"] = toolCallsJson(m.toolCalls);
    if (!m.images.empty() && m.role == ChatRole::User) {
        nlohmann::ordered_json images = nlohmann::ordered_json::array();
        for (const ChatImage& image : m.images) {
            // A transcript keeps the image itself (a copy beside it), never only pixels.
            if (image.file.empty())
                throw ChatError("transcript: an image of a user message has no saved file");
            images.push_back({{"file", image.file}});
        }
        obj["images"] = std::move(images);
    }
    if (!m.invalid.empty()) obj["invalid"] = m.invalid;
    if (!m.model.empty() && m.role == ChatRole::Assistant) obj["model"] = m.model;
    if (m.stopped && m.role == ChatRole::Assistant) obj["stopped"] = true;
    if (m.figures.tokens > 0 && m.role == ChatRole::Assistant)
        obj["figures"] = {{"tokens", m.figures.tokens},
                          {"tokens_per_second", m.figures.tokensPerSecond},
                          {"first_token_seconds", m.figures.firstTokenSeconds}};
    if (!m.otherVersions.empty()) {
        nlohmann::ordered_json others = nlohmann::ordered_json::array();
        for (const std::vector<ChatMessage>& branch : m.otherVersions) {
            nlohmann::ordered_json messages = nlohmann::ordered_json::array();
            for (const ChatMessage& other : branch) messages.push_back(messageJson(other));
            others.push_back(std::move(messages));
        }
        obj["versions"] = {{"index", m.versionIndex}, {"others", std::move(others)}};
    }
    return obj;
}

} // namespace

std::string formatTranscript(const std::vector<ChatMessage>& messages) {
    std::string out;
    for (const ChatMessage& m : messages) {
        // A generation cut mid-character leaves invalid UTF-8; the transcript must still save.
        out +=
            messageJson(m).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
        out += '\n';
    }
    return out;
}

namespace {

// What the kernel's protected_symlinks does for opens, for our writes too (it does not
// cover rename): in a world-writable sticky folder (/tmp), a link is followed only when
// it belongs to this user or to the folder's owner. Another user's link there may point
// at any file this user (root) can write.
void refuseForeignLinkInSharedFolder(const std::filesystem::path& path,
                                     const std::filesystem::path& link, const FileInfo& st) {
    const std::filesystem::path folder = link.has_parent_path() ? link.parent_path() : ".";
    FileInfo dir;
    if (!platform::fileInfo(folder, dir)) return; // the readlink below reports the problem
    constexpr std::uint32_t sticky = 01000, othersMayWrite = 0002;
    const bool shared = (dir.permissions & sticky) && (dir.permissions & othersMayWrite);
    if (!shared || st.owner == platform::effectiveUserId() || st.owner == dir.owner) return;
    throw ChatError("cannot write " + path.string() + ": " + link.string() +
                    " is a symbolic link owned by another user (uid " + std::to_string(st.owner) +
                    ") in the shared folder " + folder.string() +
                    " (world-writable, sticky); k3 does not follow such links (as the kernel's "
                    "protected_symlinks); remove it or choose another file");
}

// Follows `path` through its symlinks. Nothing at the end: the path a new file gets.
std::filesystem::path followLinks(const std::filesystem::path& path, FileInfo& st, bool& exists) {
    std::filesystem::path p = path;
    for (int hops = 0;; ++hops) {
        if (!platform::fileInfo(p, st, false)) {
            if (errno == ENOENT) {
                exists = false;
                return p;
            }
            throw ChatError("cannot write " + path.string() + ": " + p.string() + ": " +
                            errnoText());
        }
        if (st.type != FileType::Symlink) {
            exists = true;
            return p;
        }
        refuseForeignLinkInSharedFolder(path, p, st);
        if (hops == 40)
            throw ChatError("cannot write " + path.string() +
                            ": more than 40 symbolic links (a loop?)");
        std::filesystem::path next;
        if (!platform::readLink(p, next))
            throw ChatError("cannot write " + path.string() + ": reading the link " + p.string() +
                            " failed: " + errnoText());
        p = next.is_absolute() ? next : p.parent_path() / next;
    }
}

// resolveOutputFile()'s refusals of an existing file (st: the stat of target).
void refuseUnwritable(const std::filesystem::path& path, const std::filesystem::path& target,
                      const FileInfo& st) {
    const std::string shown =
        path.string() + (target == path ? std::string() : " (a link to " + target.string() + ")");
    if (st.type != FileType::Regular)
        throw ChatError("cannot write " + shown + ": it is " + fileTypeName(st.type) +
                        "; k3 writes only regular files" +
                        (st.type == FileType::Directory ? "; give a file name" : std::string()));
    if ((st.permissions & 0222) == 0 || !platform::canWrite(target)) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", unsigned(st.permissions & 07777));
        throw ChatError("cannot write " + shown + ": the file is read-only (mode " + mode +
                        "); make it writable or choose another file");
    }
}

std::filesystem::path folderOf(const std::filesystem::path& file) {
    return file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
}

// The temporary file's name beside `target`, less mkstemp's six characters.
std::string temporaryPrefix(const std::filesystem::path& target) {
    return "." + target.filename().string() + ".tmp.";
}

void writeAtomically(const std::filesystem::path& path, std::span<const std::string_view> pieces,
                     IoKind kind) {
    FileInfo old;
    bool exists = false;
    const std::filesystem::path target = followLinks(path, old, exists);
    if (exists) refuseUnwritable(path, target, old);
    const std::filesystem::path dir = folderOf(target);
    std::filesystem::path tmpl = dir / (temporaryPrefix(target) + "XXXXXX");
    platform::File file = platform::File::createTemporary(tmpl);
    if (!file.valid())
        throw ChatError("cannot write " + path.string() + ": creating a temporary file in " +
                        dir.string() + " failed: " + errnoText());
    auto fail = [&](const std::string& step) {
        const std::string why = errnoText();
        file.close();
        platform::removeFile(tmpl);
        throw ChatError("cannot write " + path.string() + ": " + step + " failed: " + why);
    };
    if (exists) {
        // The replacement keeps what the old file had: owner and group where allowed (as
        // root, or a group this user is in), then the permission bits.
        if (!file.setOwner(old.owner, old.group))
            (void)file.setOwner(platform::effectiveUserId(), old.group);
        if (!file.setPermissions(old.permissions)) fail("setting the mode of " + tmpl.string());
    }
    std::optional<IoFault> fault = faultFor(kind, path.string(), true);
    for (std::string_view data : pieces) {
        std::size_t done = 0;
        while (done < data.size() || fault) {
            std::int64_t n = -1;
            if (fault) { // the test hook: fail as a full (ENOSPC) or failing (EIO) disk would
                errno = *fault == IoFault::NoSpace ? ENOSPC : EIO;
                fault.reset();
            } else {
                n = file.write(data.data() + done, data.size() - done);
            }
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) fail("writing " + tmpl.string());
            done += static_cast<std::size_t>(n);
        }
    }
    if (!file.syncToDisk()) fail("fsync of " + tmpl.string());
    if (!file.close()) {
        const std::string why = errnoText();
        platform::removeFile(tmpl);
        throw ChatError("cannot write " + path.string() + ": closing " + tmpl.string() +
                        " failed: " + why);
    }
    // The target, never the link: the link keeps pointing at the new content. Durable:
    // the folder's entry is synced too.
    if (!platform::replaceFile(tmpl, target)) {
        const std::string why = errnoText();
        platform::removeFile(tmpl);
        throw ChatError("cannot write " + path.string() + ": rename failed: " + why);
    }
}

} // namespace

std::filesystem::path resolveOutputFile(const std::filesystem::path& path) {
    if (path.empty()) throw ChatError("cannot write an empty file name");
    FileInfo st;
    bool exists = false;
    const std::filesystem::path target = followLinks(path, st, exists);
    if (!exists) {
        FileInfo dirSt;
        const std::filesystem::path dir = folderOf(target);
        if (!platform::fileInfo(dir, dirSt))
            throw ChatError("cannot write " + path.string() + ": the folder " + dir.string() +
                            ": " + errnoText());
        if (dirSt.type != FileType::Directory)
            throw ChatError("cannot write " + path.string() + ": " + dir.string() +
                            " is not a folder");
        return target;
    }
    refuseUnwritable(path, target, st);
    return target;
}

void writeFileAtomically(const std::filesystem::path& path, std::string_view data) {
    writeAtomically(path, std::span(&data, 1), IoKind::File);
}

void writeFileAtomically(const std::filesystem::path& path,
                         std::span<const std::string_view> pieces) {
    writeAtomically(path, pieces, IoKind::File);
}

void removeAtomicWriteLeftovers(const std::filesystem::path& path) {
    const std::string prefix = temporaryPrefix(path);
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(folderOf(path), ec)) {
        const std::string name = entry.path().filename().string();
        if (name.size() == prefix.size() + 6 && name.compare(0, prefix.size(), prefix) == 0 &&
            entry.is_regular_file(ec))
            std::filesystem::remove(entry.path(), ec);
    }
}

void writeTranscript(const std::filesystem::path& path, const std::vector<ChatMessage>& messages) {
    const std::string text = formatTranscript(messages);
    const std::string_view data = text;
    writeAtomically(path, std::span(&data, 1), IoKind::Transcript);
}

OutputLock::OutputLock(const std::filesystem::path& path) : file_(resolveOutputFile(path)) {
    // The lock is named after the file, so it covers one inode only while that inode has
    // one name: through a second hard link a second session would take another lock, and
    // every save (a rename) would split the two names into two conversations.
    FileInfo st;
    if (platform::fileInfo(file_, st) && st.links > 1)
        throw ChatError("cannot use " + path.string() + ": it has " + std::to_string(st.links) +
                        " hard links; each save replaces the file, so its other names would "
                        "keep the old conversation and a session through another name would "
                        "not see this one; use a copy (cp) or remove the other links");
    lockFile_ = folderOf(file_) / ("." + file_.filename().string() + ".lock");
    platform::File lock;
    for (int attempt = 0;; ++attempt) {
        lock = platform::File::open(
            lockFile_,
            platform::open::ReadWrite | platform::open::Create | platform::open::NoFollow, 0600);
        if (!lock.valid())
            throw ChatError("cannot lock " + path.string() + ": creating " + lockFile_.string() +
                            " failed: " + errnoText());
        if (!lock.lockExclusiveNoWait()) {
            const int error = errno;
            std::string holder;
            char pid[32] = {};
            if (lock.readAt(pid, sizeof pid - 1, 0) > 0) holder = pid;
            while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' '))
                holder.pop_back();
            lock.close();
            if (error != EWOULDBLOCK)
                throw ChatError("cannot lock " + path.string() + ": " + std::strerror(error));
            throw ChatError(path.string() + " is in use by another session" +
                            (holder.empty() ? std::string() : " (pid " + holder + ")") +
                            ": two sessions writing one conversation would overwrite each "
                            "other's turns; close the other one or choose another file");
        }
        // A holder that was releasing may have removed the lock file between our open and
        // flock: then we hold a lock on a file nobody else will see. Start again.
        FileInfo held, named;
        if (lock.info(held) && platform::fileInfo(lockFile_, named) &&
            held.device == named.device && held.inode == named.inode)
            break;
        lock.close();
        if (attempt == 10)
            throw ChatError("cannot lock " + path.string() + ": " + lockFile_.string() +
                            " keeps changing");
    }
    const std::string pid = std::to_string(platform::processId()) + "\n";
    if (lock.truncate(0)) (void)lock.writeAt(pid.data(), pid.size(), 0);
    // An int holds a Windows HANDLE too: 64-bit Windows keeps handles 32-bit significant
    // (so 32- and 64-bit processes can share them), and -1 stays -1.
    fd_ = static_cast<int>(lock.releaseNative());
}

OutputLock::~OutputLock() {
    if (fd_ == -1) return;
    platform::File lock = platform::File::adoptNative(fd_);
    // Removed while still locked, so nobody can lock the name we are about to drop.
    platform::removeFile(lockFile_);
    lock.close();
}

} // namespace k3
