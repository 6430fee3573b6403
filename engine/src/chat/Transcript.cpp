// JSONL transcripts, compatible with the public engine's --history files.
#include "k3/chat.hpp"
#include "k3/fault_injection.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace k3 {

namespace {

std::string lineError(const std::string& source, std::size_t line, const std::string& what) {
    return source + ":" + std::to_string(line) + ": " + what;
}

// A string field that may be absent; null counts as absent.
std::optional<std::string> stringField(const nlohmann::json& obj, const char* key,
                                       const std::string& source, std::size_t line) {
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

std::string errnoText() {
    return std::strerror(errno);
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

        nlohmann::json obj;
        try {
            obj = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
            throw ChatError(
                lineError(sourceName, lineNumber, std::string("not valid JSON: ") + e.what()));
        }
        if (!obj.is_object())
            throw ChatError(
                lineError(sourceName, lineNumber,
                          "expected a JSON object, got " + std::string(obj.type_name())));
        for (const auto& item : obj.items()) {
            const std::string& key = item.key();
            if (key == "role" || key == "content" || key == "reasoning_content" || key == "name")
                continue;
            if (key == "tool_calls" || key == "tools")
                throw ChatError(lineError(sourceName, lineNumber,
                                          "field \"" + key +
                                              "\" is not supported (tool calls "
                                              "and tool declarations)"));
            throw ChatError(lineError(sourceName, lineNumber, "unknown field \"" + key + "\""));
        }

        const auto role = stringField(obj, "role", sourceName, lineNumber);
        if (!role) throw ChatError(lineError(sourceName, lineNumber, "missing field \"role\""));
        const auto parsedRole = parseChatRole(*role);
        if (!parsedRole)
            throw ChatError(lineError(sourceName, lineNumber,
                                      "field \"role\" has unknown value \"" + *role +
                                          "\" (expected system, user, assistant or tool)"));
        ChatMessage m;
        m.role = *parsedRole;
        const auto content = stringField(obj, "content", sourceName, lineNumber);
        if (!content)
            throw ChatError(lineError(sourceName, lineNumber, "missing field \"content\""));
        m.content = *content;
        if (auto reasoning = stringField(obj, "reasoning_content", sourceName, lineNumber)) {
            if (m.role != ChatRole::Assistant && !reasoning->empty())
                throw ChatError(lineError(sourceName, lineNumber,
                                          "field \"reasoning_content\" is only allowed on "
                                          "assistant messages, not " +
                                              *role));
            m.reasoningContent = std::move(*reasoning);
        }
        if (auto name = stringField(obj, "name", sourceName, lineNumber)) m.name = std::move(*name);
        if (m.role == ChatRole::Tool && m.name.empty())
            throw ChatError(
                lineError(sourceName, lineNumber,
                          "field \"name\" (the tool's name) is required for role tool"));
        messages.push_back(std::move(m));
    }
    return messages;
}

std::vector<ChatMessage> readTranscript(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ChatError("cannot open transcript " + path.string() + ": " + errnoText());
    std::ostringstream buffer;
    buffer << in.rdbuf();
    if (in.bad()) throw ChatError("cannot read transcript " + path.string());
    return parseTranscript(buffer.str(), path.string());
}

std::string formatTranscript(const std::vector<ChatMessage>& messages) {
    std::string out;
    for (const ChatMessage& m : messages) {
        nlohmann::ordered_json obj;
        obj["role"] = std::string(chatRoleName(m.role));
        if (!m.name.empty()) obj["name"] = m.name;
        obj["content"] = m.content;
        if (m.role == ChatRole::Assistant) obj["reasoning_content"] = m.reasoningContent;
        // A generation cut mid-character leaves invalid UTF-8; the transcript must still save.
        out += obj.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
        out += '\n';
    }
    return out;
}

namespace {

void writeAtomically(const std::filesystem::path& path, std::string_view data, IoKind kind) {
    const std::filesystem::path dir =
        path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    std::string tmpl = (dir / ("." + path.filename().string() + ".tmp.XXXXXX")).string();
    const int fd = ::mkstemp(tmpl.data());
    if (fd < 0)
        throw ChatError("cannot write " + path.string() + ": creating a temporary file in " +
                        dir.string() + " failed: " + errnoText());
    auto fail = [&](const std::string& step) {
        const std::string why = errnoText();
        ::close(fd);
        ::unlink(tmpl.c_str());
        throw ChatError("cannot write " + path.string() + ": " + step + " failed: " + why);
    };
    std::size_t done = 0;
    std::optional<IoFault> fault = faultFor(kind, path.string(), true);
    while (done < data.size() || fault) {
        ssize_t n = -1;
        if (fault) { // the test hook: fail as a full (ENOSPC) or failing (EIO) disk would
            errno = *fault == IoFault::NoSpace ? ENOSPC : EIO;
            fault.reset();
        } else {
            n = ::write(fd, data.data() + done, data.size() - done);
        }
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail("writing " + tmpl);
        done += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0) fail("fsync of " + tmpl);
    if (::close(fd) != 0) {
        const std::string why = errnoText();
        ::unlink(tmpl.c_str());
        throw ChatError("cannot write " + path.string() + ": closing " + tmpl + " failed: " + why);
    }
    if (::rename(tmpl.c_str(), path.c_str()) != 0) {
        const std::string why = errnoText();
        ::unlink(tmpl.c_str());
        throw ChatError("cannot write " + path.string() + ": rename failed: " + why);
    }
    // The rename is durable only once the directory entry is on disk.
    const int dirFd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (dirFd >= 0) {
        ::fsync(dirFd);
        ::close(dirFd);
    }
}

} // namespace

void writeFileAtomically(const std::filesystem::path& path, std::string_view data) {
    writeAtomically(path, data, IoKind::File);
}

void writeTranscript(const std::filesystem::path& path, const std::vector<ChatMessage>& messages) {
    writeAtomically(path, formatTranscript(messages), IoKind::Transcript);
}

} // namespace k3
