#pragma once
// The Kimi K3 chat format (XTML): rendering a conversation exactly as the official
// Jinja template does, parsing the model's streamed output back into channels, and
// JSONL transcripts.
//
// Invariants (each tied to a test in tests/engine/chat/):
// - renderChat() is byte-identical to Kimi-K3.jinja rendered by Python jinja2 for
//   every conversation it accepts (tst_chat_render, fixtures from
//   tests/reference/chat/render_fixtures.py and tool_fixtures.py), tool declarations,
//   tool_choice, response_format and assistant tool calls included. What it cannot
//   reproduce exactly (images) it cannot even express, and a tool message whose name
//   cannot be resolved is refused as the template refuses it.
// - parseToolCalls() reads back exactly what the renderer writes for argument-form
//   calls: render(parse(x)) == x (tst_chat_render::toolCallsRoundTrip).
// - Reasoning of EARLIER assistant turns is rendered again whenever thinking is on;
//   thinking=false drops every think channel, never the stored reasoning.
// - Special markers come only from the template, never from message text: encode
//   renderChatSegments() so a user typing "<|open|>" stays ordinary text.
// - ChatOutputParser gives the same result however the stream is cut into pieces
//   (tst_chat_parse), and never throws on malformed output: it reports it.
// - writeTranscript() replaces the file atomically: a failed or interrupted write
//   leaves the previous file intact (tst_transcript).
// - Every text file k3 and k3chat write (run report, transcripts, the app's
//   conversations and exports) goes through writeFileAtomically(): only regular files
//   are replaced; a symlink's target is replaced, never the link; devices, FIFOs and
//   directories are refused; an existing file keeps its permissions
//   (tst_transcript::outputRule*).

#include "k3/error.hpp"
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "k3/tokenizer.hpp"
#include "k3/vision.hpp"

#include <memory>

namespace k3 {

// Every refusal in this area: bad options, unsupported messages, unreadable transcripts.
class ChatError : public Error {
public:
    explicit ChatError(const std::string& message) : Error(ErrorKind::Chat, message) {}
};

// The special-token markers of XTML, as the tokenizer's added tokens spell them.
namespace chatmarker {
inline constexpr std::string_view openMark = "<|open|>";
inline constexpr std::string_view closeMark = "<|close|>";
inline constexpr std::string_view sepMark = "<|sep|>";
inline constexpr std::string_view endOfMessage = "<|end_of_msg|>";
inline constexpr std::string_view eos = "[EOS]";
} // namespace chatmarker

enum class ChatRole { System, User, Assistant, Tool };

// "system", "user", "assistant", "tool".
std::string_view chatRoleName(ChatRole role);
// Nothing for any other name.
std::optional<ChatRole> parseChatRole(std::string_view name);

// One function call of an assistant message (OpenAI's tool_calls entry).
struct ChatToolCall {
    std::string id; // matches a tool message's toolCallId; empty = none (never rendered)
    std::string name;
    // A JSON object as text. Rendered as one argument tag per key, in the text's key
    // order (the template's mapping form); when it is not a JSON object, or
    // argumentsAsJsonBlock is set, verbatim in a json block (the string form).
    std::string arguments = "{}";
    bool argumentsAsJsonBlock = false;

    bool operator==(const ChatToolCall&) const = default;
};

// An image of a user message, preprocessed (k3/vision.hpp); shared, since conversations
// are copied whole. Equal when the pixels the model reads are equal.
struct ChatImage {
    std::shared_ptr<const PreparedImage> image;
    // Where the image's bytes are kept: a transcript's "images" entry (relative to the
    // transcript's folder as read and written), or a path a front end gives. A remote
    // backend sends this file; empty for an image that came without one (a data URL).
    // An image read from a transcript has a file and no pixels until a front end
    // prepares it (rendering refuses an image without pixels).
    std::string file = {};
    // Pixels equal, or (without pixels on either side) the same file.
    bool operator==(const ChatImage& other) const;
};
// Where a user message's image goes in its content, as in the official template: each
// placeholder becomes the next image's imagePrompt(). Not a special token: text a user
// types stays text unless the message carries images.
inline constexpr std::string_view kImagePlaceholder = "<|kimi_image_placeholder|>";

// How an answer was generated, as the app shows it under the answer.
struct AnswerFigures {
    int tokens = 0;               // generated tokens; 0: not recorded
    double tokensPerSecond = 0;   // generation speed, after the first token
    double firstTokenSeconds = 0; // from the request to the first token (prompt included)
    bool operator==(const AnswerFigures&) const = default;
};

struct ChatMessage {
    ChatRole role = ChatRole::User;
    std::string content;
    // Assistant only: the think channel. Empty (or whitespace only) renders an empty
    // think channel, as the template does.
    std::string reasoningContent;
    // Optional speaker name (the template's name="..." attribute; empty = none). For a
    // Tool message this is the tool's name and is required.
    std::string name;
    // Assistant only: why this answer is not the model's (a routed expert could not be
    // loaded, a NaN reached the logits); empty for a valid answer. Saved in transcripts
    // as "invalid" so a reopened conversation still says so. Never rendered to the model.
    std::string invalid;
    // Assistant only: the model that answered (a server's model name; empty when not
    // recorded, as in transcripts written before it was). Saved as "model"; never rendered.
    std::string model{}; // {}: brace inits of the five older fields need not name it
    // Assistant only: the calls it made (rendered in a tools channel after the response).
    std::vector<ChatToolCall> toolCalls = {};
    // Tool only: the call this result answers (the template orders results by call).
    std::string toolCallId = {};
    // Assistant only: the answer was cut before the model ended it (Stop, quitting, an
    // error, or a crash after a periodic save). Saved as "stopped": true; never rendered.
    bool stopped = false;
    // Assistant only: how fast it was written; tokens 0 when not recorded. Saved as
    // "figures": {"tokens", "tokens_per_second", "first_token_seconds"}; never rendered.
    AnswerFigures figures = {};
    // The other versions of this message (a regenerated answer, an edited question), each
    // with the conversation that followed it; this message is version versionIndex (from
    // 0) among them. Saved as "versions": {"index", "others"}; never rendered, so a
    // reader that only continues the shown branch (k3 --chat --history) may ignore it.
    std::vector<std::vector<ChatMessage>> otherVersions = {};
    int versionIndex = 0;
    // User only: the images of the message, one per kImagePlaceholder in `content`, in
    // order (rendered as each image's prompt). Saved as "images": [{"file": F}, ...], the
    // files kept beside the transcript; read back without pixels (ChatImage::file).
    std::vector<ChatImage> images = {};

    bool operator==(const ChatMessage&) const = default;
};

struct ChatRenderOptions {
    bool thinking = true;
    // "low", "medium", "high" or "max" (the template's default); nothing renders no
    // thinking-effort message. Ignored (not even checked) when thinking is off.
    std::optional<std::string> thinkingEffort = std::string("max");
    // Ends with an open assistant message and its first channel (think, or response
    // when thinking is off), ready for generation.
    bool addGenerationPrompt = true;
    // The tool declarations, a JSON array (OpenAI's `tools`), rendered first with keys
    // sorted as the template's json_sorted does; empty renders none.
    std::string toolsJson;
    // "required" or "none" add the template's tool-choice message; anything else adds
    // nothing (as in the template).
    std::string toolChoice;
    // response_format's type: "json_object" or "json_schema" add the template's
    // response-format message (the latter with responseSchemaJson, a JSON schema, as
    // json_sorted writes it); anything else adds nothing. It only asks: the answer is held
    // to it by GenerateOptions::constraint.
    std::string responseFormat;
    std::string responseSchemaJson;
    // "think" or "response": the last message is the assistant's and is continued, not
    // closed: its open channel is the one given (think: only its reasoning is rendered),
    // and addGenerationPrompt is not used. Not in the template; the render is the closed
    // one cut before the channel's closing tag.
    std::string continueChannel;
};

struct ChatSegment {
    enum class Kind { Text, Special };
    Kind kind = Kind::Text;
    std::string text; // ordinary text, or the marker itself ("<|open|>")

    bool operator==(const ChatSegment&) const = default;
};

// The render as alternating runs: adjacent text is merged into one Text segment, so
// encoding each Text segment on its own equals encoding the text between specials.
// Throws ChatError for an unsupported thinking effort or a tool message without a name.
std::vector<ChatSegment> renderChatSegments(const std::vector<ChatMessage>& messages,
                                            const ChatRenderOptions& options = {});

// The same render as one string (segments concatenated).
std::string renderChat(const std::vector<ChatMessage>& messages,
                       const ChatRenderOptions& options = {});

// Token ids for a render: each Special segment becomes its added-token id and each Text
// segment is encoded as ordinary text, so markers typed in a message stay text. (Never
// use Tokenizer::encodeWithSpecial(renderChat(...)) for prompts holding user text.)
// Throws ChatError when the tokenizer lacks one of the markers.
std::vector<TokenId> encodeChatSegments(const Tokenizer& tokenizer,
                                        const std::vector<ChatSegment>& segments);

// What one fed piece added to each channel.
struct ChatParseDelta {
    std::string thinking;
    std::string response;
    bool endOfTurn = false; // this piece ended the turn
};

// Splits streamed assistant output into the think and response channels. Feed the
// decoded pieces in order: ordinary text with feedText(), special tokens with
// feedSpecial() (their marker, e.g. "<|close|>" or "[EOS]"). The turn ends at [EOS] or
// <|end_of_msg|>. Malformed output (a missing close, an unexpected marker, text outside
// any channel) never throws: it is recorded in problems() and parsing carries on.
class ChatOutputParser {
public:
    enum class Start {
        Think,    // the generation prompt opened the think channel (thinking on)
        Response, // it opened the response channel directly (thinking off)
        Message,  // inside the assistant message, no channel open yet
    };
    enum class Channel { None, Think, Response, Other };

    explicit ChatOutputParser(Start start = Start::Think);
    // The start that matches the generation prompt renderChat() produced.
    static ChatOutputParser forOptions(const ChatRenderOptions& options);

    ChatParseDelta feedText(std::string_view text);
    ChatParseDelta feedSpecial(std::string_view marker);
    ChatParseDelta feed(const ChatSegment& piece);
    // The stream stopped (token limit, cancel): records whatever was left unfinished.
    // Returns the text it released into a channel (stray text or an unfinished tag held
    // back until now), so deltas still add up to thinking() and response().
    // Feeding after finish() is recorded as a problem and ignored.
    ChatParseDelta finish();

    const std::string& thinking() const { return thinking_; }
    const std::string& response() const { return response_; }
    // Raw text of channels this parser does not interpret (e.g. "tools"), markers kept.
    const std::string& otherChannels() const { return other_; }
    bool endOfTurn() const { return mode_ == Mode::Done && !endMarker_.empty(); }
    bool finished() const { return mode_ == Mode::Done; }
    // "[EOS]" or "<|end_of_msg|>" once the turn ended; empty before.
    const std::string& endMarker() const { return endMarker_; }
    // The channel text currently goes to (for a live "Thinking…" indicator).
    Channel channel() const;
    // Human-readable descriptions of everything malformed, in the order seen.
    const std::vector<std::string>& problems() const { return problems_; }

private:
    enum class Mode { Channel, Message, OpenHeader, CloseHeader, AfterMessage, Done };

    void appendToChannel(std::string_view text, ChatParseDelta& delta);
    void flushStray(ChatParseDelta& delta);
    void showStray(ChatParseDelta& delta);
    void finishHeader(ChatParseDelta& delta);
    void abandonHeader(std::string_view why, ChatParseDelta& delta);
    void endTurn(std::string_view marker, ChatParseDelta& delta);
    void problem(std::string text);

    Mode mode_ = Mode::Channel;
    Channel channel_ = Channel::Think;
    std::string otherTag_;            // tag name of the open Other channel
    int otherDepth_ = 0;              // nested <|open|> inside an Other channel
    std::string header_;              // text between <|open|>/<|close|> and <|sep|>
    Channel closing_ = Channel::None; // the channel a CloseHeader closes
    std::string stray_; // text seen outside any channel; judged (blank or not) at the next marker
    std::size_t strayShown_ = 0; // bytes of stray_ already given out as response
    std::string thinking_;
    std::string response_;
    std::string other_;
    std::string endMarker_;
    bool fedAfterEnd_ = false;
    std::vector<std::string> problems_;
};

// Generated ids -> the assistant's reply, exactly as a session reads its own output:
// each id decoded (an incomplete UTF-8 sequence held back for the next id) and parsed
// into channels, special tokens fed as markers; at the end, the tool calls of its tools
// channel. The session (so k3 serve, k3 --chat and the app) gets every answer and its
// OpenAI tool_calls from this (tst_api::generatedToolCallsBecomeToolCalls feeds it the
// template's own tool-call turns).
class ReplyReader {
public:
    ReplyReader(const Tokenizer& tokenizer, const ChatRenderOptions& options);
    // What this id added to each channel; endOfTurn when it ended the turn.
    ChatParseDelta push(TokenId id);
    // The turn ended (or the parser gave up): nothing more belongs to this reply.
    bool done() const { return parser_.finished(); }
    bool endOfTurn() const { return parser_.endOfTurn(); }
    // The stream stopped before the turn ended: the decoder's held-back bytes and what the
    // parser held until now, so the deltas add up to the reply. Call once, at the end.
    ChatParseDelta finish();
    // Role assistant: content, reasoning_content and the tool calls. `problems` gets the
    // parser's, then those of malformed calls.
    ChatMessage reply(std::vector<std::string>& problems);

private:
    const Tokenizer* tokenizer_;
    ChatOutputParser parser_;
    StreamDecoder decoder_;
};

// The tool calls in the raw text of the model's uninterpreted channels
// (ChatOutputParser::otherChannels()): every call tag of a tools channel, arguments
// turned back into a JSON object text (typed by each argument's type attribute; a json
// block kept verbatim). Malformed calls are skipped and described in `problems`.
std::vector<ChatToolCall> parseToolCalls(std::string_view otherChannels,
                                         std::vector<std::string>* problems = nullptr);

// Transcripts: one JSON object per line, {"role","content","reasoning_content"} plus an
// optional "name" (the tool's name on role "tool"; it or "tool_call_id" is required
// there) and, on assistant lines, an optional "invalid" (the reason the answer is not the
// model's), "model" (who answered) and "tool_calls" (OpenAI's entries: id, type
// "function", function.name and function.arguments: an object for the argument-tag form,
// a string for the json-block form). Any line may hold "versions": {"index": k, "others":
// [[message, ...], ...]}, the other versions of that message with what followed each (the
// lines are the shown branch). A user line may hold "images": [{"file": F}, ...], one per
// <|kimi_image_placeholder|> of its content, each F a file relative to the transcript's
// folder (no absolute path, no ".."), read back as ChatImage::file without pixels.
// Transcripts without the newer fields read as they always
// did. Blank lines are skipped. Unknown roles and fields are refused, with the source,
// line number and field in the message.
std::vector<ChatMessage> parseTranscript(std::string_view text,
                                         const std::string& sourceName = "transcript");
// Refuses anything but a regular file before reading it (a FIFO never blocks, a device
// is never read) and a file over kMaxTranscriptBytes.
std::vector<ChatMessage> readTranscript(const std::filesystem::path& path);
inline constexpr std::uint64_t kMaxTranscriptBytes = 256ull << 20;
// A user line's "images" at most (each one a file the transcript reader checks).
inline constexpr std::size_t kMaxImagesPerMessage = 64;
// One line per message, keys in the order role, name, tool_call_id, content,
// reasoning_content, tool_calls, invalid, model, stopped, figures (reasoning_content on
// assistant lines only, the others only when set). A call's argument-form text is stored
// as the JSON object it holds (compact, keys in its order); invalid UTF-8 becomes U+FFFD.
std::string formatTranscript(const std::vector<ChatMessage>& messages);
// writeFileAtomically() of formatTranscript().
void writeTranscript(const std::filesystem::path& path, const std::vector<ChatMessage>& messages);

// The one rule for every text file k3 and k3chat write. The file actually replaced:
// `path` itself, or where its symlinks lead (followed up to 40 links, relative links
// from the link's folder), so a link stays a link and its target gets the new content.
// Throws ChatError naming `path` when that is a directory, a device, a FIFO or a socket
// (never replaced or written into), or a read-only file (no write permission bit, or
// no write access for this user).
std::filesystem::path resolveOutputFile(const std::filesystem::path& path);
// Writes a temporary file in the resolved file's folder, fsyncs it, renames it over the
// resolved file and fsyncs the folder, so a failed or interrupted write leaves the old
// file intact. An existing file keeps its permission bits (and owner and group, where
// this process may set them); a new file is mode 0600 (transcripts hold private
// conversations). Throws ChatError naming `path`; the old file is then untouched.
void writeFileAtomically(const std::filesystem::path& path, std::string_view data);
// The same with the file's bytes given in pieces, written in order without joining them
// (a saved session state is hundreds of MB on the real model).
void writeFileAtomically(const std::filesystem::path& path,
                         std::span<const std::string_view> pieces);
// Removes the temporary files a writeFileAtomically(path) that was killed left beside
// `path` (no symlinks followed); for a writer that owns the file, e.g. `k3 pack`.
void removeAtomicWriteLeftovers(const std::filesystem::path& path);

// An advisory lock (flock) held by the one session that writes a file over and over (a
// chat history, an open conversation in the app): a second session asking for the same
// file, through any symlink, gets a ChatError naming the file and the holder's pid
// instead of silently overwriting the first one's turns. The lock is a hidden file
// beside the resolved file (".NAME.lock"), removed when the lock is released.
class OutputLock {
public:
    // Throws ChatError when another session holds the lock, or `path` is refused by
    // resolveOutputFile().
    explicit OutputLock(const std::filesystem::path& path);
    ~OutputLock();
    OutputLock(const OutputLock&) = delete;
    OutputLock& operator=(const OutputLock&) = delete;

    // The resolved file this lock covers.
    const std::filesystem::path& file() const { return file_; }
    const std::filesystem::path& lockFile() const { return lockFile_; }

private:
    std::filesystem::path file_;
    std::filesystem::path lockFile_;
    int fd_ = -1;
};

} // namespace k3
