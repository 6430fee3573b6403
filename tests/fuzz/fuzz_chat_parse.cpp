// The model-output channel parser. The input's first byte picks the start state, the
// second how text is cut; the rest is model output in which the XTML marker spellings
// stand for special tokens. The parser promises: never throw, the same result however
// the text is cut into pieces, and deltas that add up to the channels.
#include "FuzzSupport.hpp"

#include <k3/chat.hpp>

#include <array>
#include <string>
#include <vector>

namespace {

using k3::ChatOutputParser;
using k3::ChatSegment;

constexpr std::array<std::string_view, 5> kMarkers = {
    k3::chatmarker::openMark, k3::chatmarker::closeMark, k3::chatmarker::sepMark,
    k3::chatmarker::endOfMessage, k3::chatmarker::eos};

std::vector<ChatSegment> split(std::string_view text) {
    std::vector<ChatSegment> out;
    std::string pending;
    std::size_t i = 0;
    while (i < text.size()) {
        bool matched = false;
        for (std::string_view m : kMarkers) {
            if (text.substr(i, m.size()) == m) {
                if (!pending.empty()) out.push_back({ChatSegment::Kind::Text, std::move(pending)});
                pending.clear();
                out.push_back({ChatSegment::Kind::Special, std::string(m)});
                i += m.size();
                matched = true;
                break;
            }
        }
        if (!matched) pending.push_back(text[i++]);
    }
    if (!pending.empty()) out.push_back({ChatSegment::Kind::Text, std::move(pending)});
    return out;
}

struct Run {
    ChatOutputParser parser;
    std::string thinking, response;
    bool sawEnd = false;

    explicit Run(ChatOutputParser::Start s) : parser(s) {}
    void add(const k3::ChatParseDelta& d) {
        thinking += d.thinking;
        response += d.response;
        sawEnd = sawEnd || d.endOfTurn;
    }
    void check() const {
        k3fuzz::check(thinking == parser.thinking(), "think deltas do not add up");
        k3fuzz::check(response == parser.response(), "response deltas do not add up");
        k3fuzz::check(sawEnd == parser.endOfTurn(), "endOfTurn delta disagrees");
    }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 2) return 0;
    const auto start = static_cast<ChatOutputParser::Start>(data[0] % 3);
    std::uint32_t rng = data[1] | 1u;
    const std::vector<ChatSegment> segments = split(k3fuzz::asText(data + 2, size - 2));

    Run whole(start), cut(start);
    for (const ChatSegment& s : segments) whole.add(whole.parser.feed(s));
    for (const ChatSegment& s : segments) {
        if (s.kind == ChatSegment::Kind::Special) {
            cut.add(cut.parser.feedSpecial(s.text));
            continue;
        }
        std::string_view rest = s.text;
        while (!rest.empty()) {
            rng = rng * 1103515245u + 12345u;
            const std::size_t n = 1 + (rng >> 16) % 7;
            cut.add(cut.parser.feedText(rest.substr(0, n)));
            rest.remove_prefix(std::min(n, rest.size()));
        }
    }
    whole.add(whole.parser.finish());
    cut.add(cut.parser.finish());
    whole.check();
    cut.check();
    k3fuzz::check(whole.parser.thinking() == cut.parser.thinking(), "thinking depends on the cut");
    k3fuzz::check(whole.parser.response() == cut.parser.response(), "response depends on the cut");
    k3fuzz::check(whole.parser.otherChannels() == cut.parser.otherChannels(),
                  "other channels depend on the cut");
    k3fuzz::check(whole.parser.endMarker() == cut.parser.endMarker(),
                  "end marker depends on the cut");
    k3fuzz::check(whole.parser.problems() == cut.parser.problems(), "problems depend on the cut");
    return 0;
}
