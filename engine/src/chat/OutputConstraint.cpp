// The whole assistant turn as a grammar (think channel, then the answer in the template's
// shape), the vocabulary as symbols and a byte trie, and the state a generation walks.
#include "k3/chat.hpp"
#include "k3/constraint.hpp"
#include "k3/grammar.hpp"

#include "chat/TemplateEscape.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <list>
#include <map>
#include <mutex>

namespace k3 {

namespace grammar {
namespace {

using Kind = Node::Kind;

// One piece of a literal: text (its bytes) or a marker symbol.
struct Piece {
    Piece(const char* t) : text(t) {}        // NOLINT: pieces read as a sentence
    Piece(const std::string& t) : text(t) {} // NOLINT
    Piece(Symbol s) : marker(s) {}           // NOLINT
    std::string_view text;
    Symbol marker = -1;
};

const Node* literal(Grammar& g, std::initializer_list<Piece> pieces) {
    Node& n = g.add(Kind::Literal);
    for (const Piece& p : pieces) {
        if (p.marker >= 0) n.literal.push_back(p.marker);
        for (const char c : p.text) n.literal.push_back(Symbol(static_cast<unsigned char>(c)));
    }
    return &n;
}

const Node* padded(Grammar& g, const Node* value) {
    Node& n = g.add(Kind::Padded);
    n.children = {value};
    return &n;
}

// How a turn may end once the answer is written: [EOS], <|end_of_msg|>, or the message
// closed first.
const Node* turnEnd(Grammar& g) {
    Node& n = g.add(Kind::Alt);
    n.children = {literal(g, {kEos}), literal(g, {kEndOfMessage}),
                  literal(g, {kClose, "message", kSep, kEndOfMessage}),
                  literal(g, {kClose, "message", kSep, kEos})};
    return &n;
}

// Both roots: the think channel first (free text, then its close and the answer's open),
// or the answer's channel already open.
void addRoots(Grammar& g, std::vector<const Node*> answer, const Node*& thinkFirst,
              const Node*& answerFirst) {
    Node& direct = g.add(Kind::Seq);
    direct.children = answer;
    answerFirst = &direct;
    Node& think = g.add(Kind::Seq);
    think.children = {&g.add(Kind::FreeText),
                      literal(g, {kClose, "think", kSep, kOpen, "response", kSep})};
    think.children.insert(think.children.end(), answer.begin(), answer.end());
    thinkFirst = &think;
}

} // namespace
} // namespace grammar

namespace grammar {

namespace {

// Node::tokensFrom of a literal, by dynamic programming from its end over the trie.
void countLiteralTokens(const Vocabulary& c, Node& n) {
    const std::vector<Symbol>& s = n.literal;
    n.tokensFrom.assign(s.size() + 1, kUnbounded);
    n.tokensFrom[s.size()] = 0;
    for (std::size_t i = s.size(); i-- > 0;) {
        if (s[i] >= 256) {
            n.tokensFrom[i] = 1 + n.tokensFrom[i + 1];
            continue;
        }
        std::uint32_t at = 0;
        for (std::size_t j = i; j < s.size() && s[j] < 256; ++j) {
            const auto& node = c.trie[at];
            std::uint32_t next = 0;
            for (std::uint32_t k = node.firstChild; k < node.firstChild + node.childCount; ++k)
                if (c.trie[k].byte == s[j]) next = k;
            if (next == 0) break;
            at = next;
            if (c.trie[at].token >= 0)
                n.tokensFrom[i] = std::min(n.tokensFrom[i], 1 + n.tokensFrom[j + 1]);
        }
    }
}

// Code points of `bytes` when they are plain JSON string text (valid UTF-8, complete,
// no '"', '\\' or control character), else -1.
int plainChars(std::string_view bytes) {
    int chars = 0;
    for (std::size_t i = 0; i < bytes.size();) {
        const auto b = static_cast<unsigned char>(bytes[i]);
        if (b < 0x20 || b == '"' || b == '\\') return -1;
        if (b < 0x80) {
            ++i;
        } else {
            int more = 0, lo = 0x80, hi = 0xBF;
            if (b >= 0xC2 && b <= 0xDF)
                more = 1;
            else if (b == 0xE0)
                more = 2, lo = 0xA0;
            else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF)
                more = 2;
            else if (b == 0xED)
                more = 2, hi = 0x9F;
            else if (b == 0xF0)
                more = 3, lo = 0x90;
            else if (b >= 0xF1 && b <= 0xF3)
                more = 3;
            else if (b == 0xF4)
                more = 3, hi = 0x8F;
            else
                return -1;
            if (i + std::size_t(more) >= bytes.size()) return -1; // cut: an incomplete character
            for (int k = 1; k <= more; ++k) {
                const auto cb = static_cast<unsigned char>(bytes[i + std::size_t(k)]);
                if (cb < (k == 1 ? lo : 0x80) || cb > (k == 1 ? hi : 0xBF)) return -1;
            }
            i += std::size_t(more) + 1;
        }
        ++chars;
    }
    return chars;
}

// The byte trie of `ids`: built with maps, then laid out breadth first (a node's
// children adjacent).
std::vector<Vocabulary::TrieNode> buildTrie(const Vocabulary& c, const std::vector<TokenId>& ids) {
    struct Building {
        std::map<std::uint8_t, std::uint32_t> children;
        TokenId token = -1;
    };
    std::vector<Building> nodes(1);
    for (const TokenId id : ids) {
        std::uint32_t at = 0;
        for (const Symbol s : c.symbols[std::size_t(id)]) {
            const auto b = static_cast<std::uint8_t>(s);
            auto it = nodes[at].children.find(b);
            if (it == nodes[at].children.end()) {
                nodes.emplace_back();
                it = nodes[at].children.emplace(b, std::uint32_t(nodes.size() - 1)).first;
            }
            at = it->second;
        }
        nodes[at].token = id;
    }
    std::vector<Vocabulary::TrieNode> trie(1);
    std::vector<std::uint32_t> order{0}; // building index of each laid-out node
    for (std::size_t i = 0; i < order.size(); ++i) {
        const Building& b = nodes[order[i]];
        trie[i].token = b.token;
        trie[i].firstChild = std::uint32_t(order.size());
        trie[i].childCount = std::uint32_t(b.children.size());
        for (const auto& [byte, child] : b.children) {
            order.push_back(child);
            trie.emplace_back();
            trie.back().byte = byte;
        }
    }
    return trie;
}

std::shared_ptr<const Vocabulary> buildVocabulary(const Tokenizer& tok,
                                                  const std::vector<TokenId>& markerIds) {
    auto v = std::make_shared<Vocabulary>();
    Vocabulary& c = *v;
    c.symbols.assign(tok.vocabSize(), {});
    const Symbol markerSymbols[] = {grammar::kOpen, grammar::kClose, grammar::kSep,
                                    grammar::kEndOfMessage, grammar::kEos};
    for (std::size_t i = 0; i < markerIds.size(); ++i) {
        c.symbols[std::size_t(markerIds[i])] = {markerSymbols[i]};
        c.markerIds.push_back(markerIds[i]);
    }
    std::vector<TokenId> all, others;
    c.plainChars.assign(tok.vocabSize(), -1);
    for (std::size_t id = 0; id < tok.numRanks(); ++id) {
        const std::string_view bytes = tok.tokenBytes(TokenId(id));
        if (bytes.empty()) continue;
        for (const char ch : bytes) c.symbols[id].push_back(Symbol(static_cast<unsigned char>(ch)));
        all.push_back(TokenId(id));
        const int chars = plainChars(bytes);
        c.plainChars[id] = chars;
        (chars >= 0 ? c.plainIds : others).push_back(TokenId(id));
    }
    c.trie = buildTrie(c, all);
    c.otherTrie = buildTrie(c, others);
    return v;
}

std::atomic<std::uint64_t> gVocabularyBuilds{0};

} // namespace

std::uint64_t vocabularyBuilds() {
    return gVocabularyBuilds.load();
}

std::shared_ptr<const Vocabulary> vocabularyOf(const Tokenizer& tok) {
    const std::string_view spellings[] = {chatmarker::openMark, chatmarker::closeMark,
                                          chatmarker::sepMark, chatmarker::endOfMessage,
                                          chatmarker::eos};
    std::vector<TokenId> markerIds;
    for (const std::string_view spelling : spellings) {
        const auto id = tok.tokenId(spelling);
        if (!id) throw ChatError("the tokenizer has no " + std::string(spelling) + " marker");
        markerIds.push_back(*id);
    }
    // The key is everything the tables are made of (every token's bytes and the markers'
    // ids), so two tokenizers share tables only when they would build the same ones.
    // FNV-1a over ~1 MB: a millisecond or two, against the build's second.
    std::uint64_t key = 1469598103934665603ull;
    auto mix = [&key](std::string_view bytes) {
        for (const char ch : bytes) key = (key ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
        key = (key ^ 0x100u) * 1099511628211ull; // a token boundary
    };
    mix(std::to_string(tok.vocabSize()) + "/" + std::to_string(tok.numRanks()));
    for (const TokenId id : markerIds) mix(std::to_string(id));
    for (std::size_t id = 0; id < tok.numRanks(); ++id) mix(tok.tokenBytes(TokenId(id)));

    static std::mutex m;
    static std::list<std::pair<std::uint64_t, std::shared_ptr<const Vocabulary>>> cache;
    std::lock_guard lock(m); // one build at a time; the others wait and share it
    for (auto it = cache.begin(); it != cache.end(); ++it)
        if (it->first == key) {
            cache.splice(cache.begin(), cache, it);
            return cache.front().second;
        }
    auto built = buildVocabulary(tok, markerIds);
    ++gVocabularyBuilds;
    cache.emplace_front(key, built);
    if (cache.size() > 2) cache.pop_back(); // a server has one tokenizer; tests a few
    return built;
}

void bindVocabulary(OutputConstraint::Impl& c, const Tokenizer& tok) {
    c.vocab = vocabularyOf(tok);
    for (Node& n : c.grammar.nodes)
        if (n.kind == Node::Kind::Literal) countLiteralTokens(*c.vocab, n);
    computeMinSymbols(c.grammar);
}

} // namespace grammar

OutputConstraint::OutputConstraint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OutputConstraint::~OutputConstraint() = default;

std::shared_ptr<const OutputConstraint> OutputConstraint::jsonAnswer(const JsonGrammar& answer,
                                                                     const Tokenizer& tokenizer) {
    using namespace grammar;
    auto c = std::make_unique<Impl>();
    c->parts.push_back(answer.shared());
    Grammar& g = c->grammar;
    addRoots(g, {padded(g, answer.data().root), literal(g, {kClose, "response", kSep}), turnEnd(g)},
             c->thinkFirstRoot, c->answerFirstRoot);
    bindVocabulary(*c, tokenizer);
    return std::make_shared<const OutputConstraint>(std::move(c));
}

std::shared_ptr<const OutputConstraint>
OutputConstraint::toolCall(const std::vector<ToolCallTarget>& targets, const Tokenizer& tokenizer) {
    using namespace grammar;
    if (targets.empty()) throw ChatError("a required tool call needs at least one tool");
    auto c = std::make_unique<Impl>();
    c->toolCall = true;
    Grammar& g = c->grammar;
    Node& calls = g.add(Node::Kind::Alt);
    for (const ToolCallTarget& t : targets) {
        c->parts.push_back(t.arguments.shared());
        const std::string header =
            "call tool=\"" + chat::escapeTemplateAttribute(t.name) + "\" index=\"1\"";
        Node& call = g.add(Node::Kind::Seq);
        call.children = {literal(g, {kOpen, header, kSep, kOpen, "json type=\"object\"", kSep}),
                         // No whitespace around the object: clients read it as it is.
                         t.arguments.data().root,
                         literal(g, {kClose, "json", kSep, kClose, "call", kSep})};
        calls.children.push_back(&call);
    }
    addRoots(g,
             {literal(g, {kClose, "response", kSep, kOpen, "tools", kSep}), &calls,
              literal(g, {kClose, "tools", kSep}), turnEnd(g)},
             c->thinkFirstRoot, c->answerFirstRoot);
    bindVocabulary(*c, tokenizer);
    return std::make_shared<const OutputConstraint>(std::move(c));
}

void OutputConstraint::finishReply(ChatMessage& reply) const {
    if (!impl_->toolCall) return;
    for (ChatToolCall& call : reply.toolCalls) {
        if (!call.argumentsAsJsonBlock) continue;
        const auto parsed = nlohmann::ordered_json::parse(call.arguments, nullptr, false);
        if (!parsed.is_object()) continue;
        call.arguments = parsed.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        call.argumentsAsJsonBlock = false;
    }
}

namespace grammar {

ConstraintState::ConstraintState(const OutputConstraint& constraint, bool thinkFirst)
    : c_(constraint.impl()), threads_{
                                 startAt(thinkFirst ? c_.thinkFirstRoot : c_.answerFirstRoot)} {}

bool ConstraintState::take(std::span<const Symbol> symbols, std::vector<Thread>& threads) const {
    std::vector<Thread> next;
    for (const Symbol s : symbols) {
        step(threads, s, next);
        threads.swap(next);
        if (threads.empty()) return false;
    }
    return !symbols.empty();
}

bool ConstraintState::allows(TokenId id, int tokensLeftAfter) const {
    if (id < 0 || std::size_t(id) >= c_.vocab->symbols.size()) return false;
    std::vector<Thread> threads = threads_;
    return take(c_.vocab->symbols[std::size_t(id)], threads) &&
           grammar::minRemaining(threads) <= tokensLeftAfter;
}

bool ConstraintState::allowedPlain(int tokensLeftAfter, std::vector<TokenId>& out) const {
    // Per thread: the characters it may still take and the fewest it must.
    struct Room {
        std::int64_t most, fewest, restAfterString;
    };
    std::vector<Room> rooms;
    for (const Thread& t : threads_) {
        if (t.empty()) return false;
        const Frame& top = t.back();
        const std::vector<Thread> one{t};
        if (top.node->kind == Node::Kind::FreeText) {
            rooms.push_back({kUnbounded, 0, grammar::minRemaining(one)});
            continue;
        }
        if (top.node->kind != Node::Kind::String || top.phase != 1) return false;
        const std::int64_t fewest = std::max(0, top.node->minLength - top.count);
        // minRemaining(thread) = fewest + 1 + the frames below: those stay as they are.
        rooms.push_back({std::int64_t(top.node->maxLength) - top.count, fewest,
                         std::int64_t(grammar::minRemaining(one)) - fewest});
    }
    for (const TokenId id : c_.vocab->plainIds) {
        const int chars = c_.vocab->plainChars[std::size_t(id)];
        for (const Room& r : rooms)
            if (chars <= r.most &&
                r.restAfterString + std::max<std::int64_t>(0, r.fewest - chars) <=
                    tokensLeftAfter) {
                out.push_back(id);
                break;
            }
    }
    return true;
}

std::vector<TokenId> ConstraintState::allowed(int tokensLeftAfter) const {
    std::vector<TokenId> out;
    // In string text or free text, plain tokens by arithmetic; only the others walked.
    const bool plainJudged = allowedPlain(tokensLeftAfter, out);
    const auto& trie = plainJudged ? c_.vocab->otherTrie : c_.vocab->trie;
    // Depth first down the trie: a prefix the automaton refuses cuts its whole subtree.
    struct Walk {
        const std::vector<Vocabulary::TrieNode>& trie;
        int left;
        std::vector<TokenId>& out;
        void from(std::uint32_t node, const std::vector<Thread>& threads) const {
            const auto& n = trie[node];
            std::vector<Thread> next;
            for (std::uint32_t i = n.firstChild; i < n.firstChild + n.childCount; ++i) {
                step(threads, Symbol(trie[i].byte), next);
                if (next.empty()) continue;
                if (trie[i].token >= 0 && grammar::minRemaining(next) <= left)
                    out.push_back(trie[i].token);
                from(i, next);
            }
        }
    };
    Walk{trie, tokensLeftAfter, out}.from(0, threads_);
    for (const TokenId id : c_.vocab->markerIds)
        if (allows(id, tokensLeftAfter)) out.push_back(id);
    std::sort(out.begin(), out.end());
    return out;
}

void ConstraintState::advance(TokenId id) {
    if (id < 0 || std::size_t(id) >= c_.vocab->symbols.size() ||
        !take(c_.vocab->symbols[std::size_t(id)], threads_))
        threads_.clear();
}

} // namespace grammar
} // namespace k3
