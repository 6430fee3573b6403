#pragma once
// The automaton behind k3/constraint.hpp: a grammar of nodes over symbols (bytes and the
// template's markers), matched by a set of threads, each a stack of frames. Choices
// (anyOf, enum, which key comes next) fork threads at the symbol that enters them; threads
// that cannot take a symbol die, equal ones merge. Every frame knows the fewest symbols
// that complete it, so a token can be refused when the answer could no longer end within
// the tokens left.
#include "k3/constraint.hpp"
#include "k3/tokenizer.hpp"

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace k3::grammar {

// 0..255: a byte of ordinary text; then the markers; kEnd only ends a match in tests.
using Symbol = int;
enum : Symbol { kOpen = 256, kClose, kSep, kEndOfMessage, kEos, kEnd, kSymbolCount };

// Deeper stacks are refused (a free JSON value nesting without end).
inline constexpr std::size_t kMaxFrames = 96;
// Whitespace between two JSON tokens, at most (a model looping on spaces cannot stall).
inline constexpr int kMaxWhitespace = 20;
// Every number the grammar admits is a finite double, so every client's parser reads it
// (Qt's refuses an overflow, JavaScript's gives Infinity): at most 16 + 16 digits and a
// two-digit exponent, |x| < 1e16 * 1e99. A three-digit one let a sampled answer end in
// 856E816.
inline constexpr int kMaxIntegerDigits = 16;
inline constexpr int kMaxFractionDigits = 16;
inline constexpr int kMaxExponentDigits = 2;
inline constexpr int kUnbounded = 1 << 28;

struct Node {
    enum class Kind : std::uint8_t {
        Literal,  // `literal`, symbol by symbol
        Seq,      // `children` in order
        Alt,      // one of `children` (forked at the symbol that enters it)
        FreeText, // ordinary bytes until a marker (which it leaves to what follows)
        Padded,   // whitespace, children[0] (a JSON value), whitespace
        Object,
        Array,
        String,
        Number,
        Integer,
    };
    Kind kind = Kind::Literal;
    std::vector<Symbol> literal;
    std::vector<const Node*> children; // Seq, Alt, Padded; Object: property values
    // Object: keys[i] is the Literal "\"name\"" of children[i]; `required` has bit i for
    // a required key; `additional` is the value of any other key (free keys are generated
    // only when there are no properties; nullptr: none).
    std::vector<const Node*> keys;
    std::uint64_t required = 0;
    const Node* additional = nullptr;
    // Array
    const Node* items = nullptr;
    int minItems = 0, maxItems = kUnbounded;
    // String (code points)
    int minLength = 0, maxLength = kUnbounded;
    int minSymbols = -1; // the fewest symbols of a complete instance
    // Literal of the turn's shape (bindVocabulary): the fewest tokens that spell the
    // literal from each position (markers one each, text as the vocabulary allows).
    std::vector<int> tokensFrom;
};

struct Grammar {
    std::deque<Node> nodes; // owns every node; pointers stay valid
    const Node* root = nullptr;
    const Node* anyValue = nullptr;
    Node& add(Node::Kind kind) {
        nodes.emplace_back();
        nodes.back().kind = kind;
        return nodes.back();
    }
};

// The JSON value nodes for any value (and its object, array, string, number, literals).
const Node* addAnyValue(Grammar& g);
// The budget counts tokens: a symbol is at most one token (every byte and marker is
// one), a Literal of the turn's shape its fewest tokens.
// Fills Node::minSymbols for every node (children first, cycles through `additional`
// and `items` of free values are cut there: they never need an instance).
void computeMinSymbols(Grammar& g);

struct Frame {
    const Node* node = nullptr;
    std::int32_t phase = 0; // Literal: position; Seq: index; the JSON kinds: their phase
    std::int32_t count = 0; // Seq: child entered (1); whitespace run; digits; characters
    std::int32_t item = 0;  // Object: the key being given (-1 free); Array: items given;
                            // String: bytes still to come in a UTF-8 or \u sequence;
                            // a key Literal: its property index
    std::uint64_t used = 0; // Object: keys given; String: the next UTF-8 byte's range
    auto operator<=>(const Frame&) const = default;
};

using Thread = std::vector<Frame>;

// The threads after `symbol` (none: it is refused). Threads that are complete (empty
// stack) refuse everything.
void step(const std::vector<Thread>& threads, Symbol symbol, std::vector<Thread>& out);
// The fewest symbols that complete the best of `threads` (kUnbounded: none can).
int minRemaining(const std::vector<Thread>& threads);
// A thread at the start of `root`.
Thread startAt(const Node* root);
// Whether `text` (bytes) is a complete instance of `grammar` (tests, the fuzz target).
bool matches(const Grammar& grammar, std::string_view text);

// The live state of one generation under an OutputConstraint.
class ConstraintState {
public:
    // `thinkFirst`: the generation prompt opened the think channel.
    ConstraintState(const OutputConstraint& constraint, bool thinkFirst);
    // `id` keeps the turn completable within `tokensLeftAfter` more tokens.
    bool allows(TokenId id, int tokensLeftAfter) const;
    // Every such id, ascending. Empty when none fits (then allowedIgnoringBudget()).
    std::vector<TokenId> allowed(int tokensLeftAfter) const;
    std::vector<TokenId> allowedIgnoringBudget() const { return allowed(kUnbounded); }
    // Commits `id` (one allowed() gave).
    void advance(TokenId id);
    int minRemaining() const { return grammar::minRemaining(threads_); }
    bool dead() const { return threads_.empty(); }

private:
    bool take(std::span<const Symbol> symbols, std::vector<Thread>& threads) const;
    // The plain tokens allowed when every thread is inside string text or free text;
    // false (nothing added) when some thread is elsewhere.
    bool allowedPlain(int tokensLeftAfter, std::vector<TokenId>& out) const;
    const OutputConstraint::Impl& c_;
    std::vector<Thread> threads_;
};

} // namespace k3::grammar

namespace k3 {

namespace grammar {
// What a constraint needs of the tokenizer's vocabulary, the same for every request:
// built once per vocabulary (vocabularyOf) and shared read-only.
struct Vocabulary {
    // Each id's symbols: an ordinary token's bytes, a marker's one symbol, nothing for
    // the other added tokens (never allowed).
    std::vector<std::vector<Symbol>> symbols;
    // The byte trie of the ordinary tokens: node 0 is the root; a node's children are
    // [firstChild, firstChild + childCount), sorted by byte.
    struct TrieNode {
        std::uint32_t firstChild = 0;
        std::uint32_t childCount = 0;
        TokenId token = -1; // the ordinary token spelled by the path to here
        std::uint8_t byte = 0;
    };
    std::vector<TrieNode> trie;
    // Most tokens are plain text inside a JSON string: valid UTF-8 without '"', '\\' or
    // control characters. plainChars[id] is such a token's code points (-1: not plain);
    // `plainIds` lists them; `otherTrie` holds the ordinary tokens that are not. In a
    // string (or the think channel) the plain ones are judged by arithmetic and only the
    // others are walked.
    std::vector<int> plainChars;
    std::vector<TokenId> plainIds;
    std::vector<TrieNode> otherTrie;
    std::vector<TokenId> markerIds; // ids whose symbols are a marker
};

// The tables of `tokenizer`'s vocabulary: built at the first request and reused while a
// tokenizer with the same tokens is asked for (a few vocabularies are kept). Throws
// ChatError when it lacks a marker.
std::shared_ptr<const Vocabulary> vocabularyOf(const Tokenizer& tokenizer);
// How many times vocabularyOf built the tables (tests: a second request builds nothing).
std::uint64_t vocabularyBuilds();
} // namespace grammar

struct OutputConstraint::Impl {
    grammar::Grammar grammar;
    std::vector<std::shared_ptr<const grammar::Grammar>> parts; // the JSON grammars used
    const grammar::Node* thinkFirstRoot = nullptr;
    const grammar::Node* answerFirstRoot = nullptr;
    std::shared_ptr<const grammar::Vocabulary> vocab;
    bool toolCall = false; // made by OutputConstraint::toolCall
};

namespace grammar {
// Binds the vocabulary's tables (vocabularyOf) and the grammar's literal token counts
// and minSymbols.
void bindVocabulary(OutputConstraint::Impl& c, const Tokenizer& tokenizer);
} // namespace grammar

} // namespace k3
