// The grammar's threads: one symbol at a time, forking at choices, and the fewest symbols
// that complete each frame (the budget rule of k3/constraint.hpp).
#include "k3/grammar.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>

namespace k3::grammar {

namespace {

using Kind = Node::Kind;

bool isWhitespace(Symbol s) {
    return s == ' ' || s == '\t' || s == '\n' || s == '\r';
}
bool isDigit(Symbol s) {
    return s >= '0' && s <= '9';
}
bool isHexDigit(Symbol s) {
    return isDigit(s) || (s >= 'a' && s <= 'f') || (s >= 'A' && s <= 'F');
}

std::int64_t clampSum(std::int64_t v) {
    return std::min<std::int64_t>(v, kUnbounded);
}

// A frame handler's verdict on one symbol.
enum class Verdict {
    Consumed, // taken; the frame goes on
    Done,     // taken, and it completed the frame
    PassUp,   // the frame was already complete: the symbol belongs to its parent
    Refused,
    Enter,    // a child is entered with the symbol (Outcome::child), the frame waits for it
    EnterKey, // an object's next key: one thread per key it may be
};

struct Outcome {
    Verdict verdict;
    const Node* child = nullptr;
};

Outcome whitespace(Frame& f, Symbol s) {
    if (f.count >= kMaxWhitespace) return {Verdict::Refused};
    ++f.count;
    (void)s;
    return {Verdict::Consumed};
}

void setPhase(Frame& f, int phase) {
    f.phase = phase;
    f.count = 0;
}

bool requiredGiven(const Frame& f) {
    return (f.node->required & ~f.used) == 0;
}

// Another key may follow: an unused property, or any key when free keys are allowed.
bool keyPossible(const Frame& f) {
    const Node& n = *f.node;
    if (n.keys.empty()) return n.additional != nullptr;
    const std::uint64_t all = n.keys.size() >= 64 ? ~0ull : (1ull << n.keys.size()) - 1;
    return (all & ~f.used) != 0;
}

// Object phases: 0 before '{', 1 after it, 2 in a key, 3 after the key, 4 before the
// value, 5 in the value, 6 after the value, 7 after a comma.
Outcome objectStep(Frame& f, Symbol s) {
    switch (f.phase) {
    case 0:
        if (s != '{') return {Verdict::Refused};
        setPhase(f, 1);
        return {Verdict::Consumed};
    case 1:
    case 7:
        if (isWhitespace(s)) return whitespace(f, s);
        if (s == '}' && f.phase == 1 && requiredGiven(f)) return {Verdict::Done};
        if (s != '"' || !keyPossible(f)) return {Verdict::Refused};
        setPhase(f, 2);
        return {Verdict::EnterKey};
    case 3:
        if (isWhitespace(s)) return whitespace(f, s);
        if (s != ':') return {Verdict::Refused};
        setPhase(f, 4);
        return {Verdict::Consumed};
    case 4:
        if (isWhitespace(s)) return whitespace(f, s);
        setPhase(f, 5);
        return {Verdict::Enter,
                f.item >= 0 ? f.node->children[std::size_t(f.item)] : f.node->additional};
    case 6:
        if (isWhitespace(s)) return whitespace(f, s);
        if (s == '}' && requiredGiven(f)) return {Verdict::Done};
        if (s == ',' && keyPossible(f)) {
            setPhase(f, 7);
            return {Verdict::Consumed};
        }
        return {Verdict::Refused};
    default:
        return {Verdict::Refused};
    }
}

// Array phases: 0 before '[', 1 after it, 3 in an item, 4 after an item, 5 after a comma.
Outcome arrayStep(Frame& f, Symbol s) {
    const Node& n = *f.node;
    switch (f.phase) {
    case 0:
        if (s != '[') return {Verdict::Refused};
        setPhase(f, 1);
        return {Verdict::Consumed};
    case 1:
    case 5:
        if (isWhitespace(s)) return whitespace(f, s);
        if (s == ']' && f.phase == 1 && n.minItems == 0) return {Verdict::Done};
        if (s == ']' || f.item >= n.maxItems) return {Verdict::Refused};
        setPhase(f, 3);
        return {Verdict::Enter, n.items};
    case 4:
        if (isWhitespace(s)) return whitespace(f, s);
        if (s == ']' && f.item >= n.minItems) return {Verdict::Done};
        if (s == ',' && f.item < n.maxItems) {
            setPhase(f, 5);
            return {Verdict::Consumed};
        }
        return {Verdict::Refused};
    default:
        return {Verdict::Refused};
    }
}

// A UTF-8 lead byte: how many continuation bytes follow and the first one's range
// (Unicode's table of well-formed sequences: no overlongs, surrogates or > U+10FFFF).
bool utf8Lead(Symbol s, int& more, int& lo, int& hi) {
    lo = 0x80;
    hi = 0xBF;
    if (s >= 0xC2 && s <= 0xDF)
        more = 1;
    else if (s == 0xE0)
        more = 2, lo = 0xA0;
    else if ((s >= 0xE1 && s <= 0xEC) || s == 0xEE || s == 0xEF)
        more = 2;
    else if (s == 0xED)
        more = 2, hi = 0x9F;
    else if (s == 0xF0)
        more = 3, lo = 0x90;
    else if (s >= 0xF1 && s <= 0xF3)
        more = 3;
    else if (s == 0xF4)
        more = 3, hi = 0x8F;
    else
        return false;
    return true;
}

// String phases: 0 before '"', 1 in the text, 2 after '\', 3 in \uXXXX (item: hex digits
// left; used 1 after a first digit d), 4 in a UTF-8 sequence (item: bytes left, used: the
// next byte's range). count: code points begun.
Outcome stringStep(Frame& f, Symbol s) {
    const Node& n = *f.node;
    switch (f.phase) {
    case 0:
        if (s != '"') return {Verdict::Refused};
        f.phase = 1;
        return {Verdict::Consumed};
    case 1: {
        if (s == '"')
            return f.count >= n.minLength ? Outcome{Verdict::Done} : Outcome{Verdict::Refused};
        if (s < 0x20 || s > 0xFF || f.count >= n.maxLength) return {Verdict::Refused};
        if (s == '\\') {
            f.phase = 2;
        } else if (s >= 0x80) {
            int more = 0, lo = 0, hi = 0;
            if (!utf8Lead(s, more, lo, hi)) return {Verdict::Refused};
            f.phase = 4;
            f.item = more;
            f.used = std::uint64_t(lo) << 8 | std::uint64_t(hi);
        }
        ++f.count;
        return {Verdict::Consumed};
    }
    case 2:
        if (s == 'u') {
            f.phase = 3;
            f.item = 4;
            f.used = 0;
            return {Verdict::Consumed};
        }
        if (s != '"' && s != '\\' && s != '/' && s != 'b' && s != 'f' && s != 'n' && s != 'r' &&
            s != 't')
            return {Verdict::Refused};
        f.phase = 1;
        return {Verdict::Consumed};
    case 3:
        if (!isHexDigit(s)) return {Verdict::Refused};
        // \uD800..\uDFFF are halves of a pair: refused, so every escape is one code point.
        if (f.item == 4 && (s == 'd' || s == 'D')) f.used = 1;
        if (f.item == 3 && f.used == 1 && !(s >= '0' && s <= '7')) return {Verdict::Refused};
        if (--f.item == 0) f.phase = 1;
        return {Verdict::Consumed};
    case 4:
        if (s < Symbol(f.used >> 8) || s > Symbol(f.used & 0xFF)) return {Verdict::Refused};
        f.used = 0x80BF;
        if (--f.item == 0) f.phase = 1;
        return {Verdict::Consumed};
    default:
        return {Verdict::Refused};
    }
}

// Number phases: 0 start, 1 after '-', 2 integer digits, 3 a leading 0, 4 after '.',
// 5 fraction digits, 6 after 'e', 7 after the exponent's sign, 8 exponent digits.
// Complete in 2, 3, 5 and 8: the next symbol that is not part of it is passed up.
Outcome numberStep(Frame& f, Symbol s) {
    const bool integer = f.node->kind == Kind::Integer;
    const auto to = [&](int phase, int count) {
        f.phase = phase;
        f.count = count;
        return Outcome{Verdict::Consumed};
    };
    const bool fractionOrExponent = !integer && (s == '.' || s == 'e' || s == 'E');
    switch (f.phase) {
    case 0:
    case 1:
        if (s == '-' && f.phase == 0) return to(1, 0);
        if (s == '0') return to(3, 1);
        if (isDigit(s)) return to(2, 1);
        return {Verdict::Refused};
    case 2:
    case 3:
        if (isDigit(s) && f.phase == 2)
            return f.count < kMaxIntegerDigits ? to(2, f.count + 1) : Outcome{Verdict::Refused};
        if (fractionOrExponent) return to(s == '.' ? 4 : 6, 0);
        return isDigit(s) ? Outcome{Verdict::Refused} : Outcome{Verdict::PassUp};
    case 4:
    case 5:
        if (isDigit(s))
            return f.count < kMaxFractionDigits ? to(5, f.count + 1) : Outcome{Verdict::Refused};
        if (f.phase == 4) return {Verdict::Refused};
        if (s == 'e' || s == 'E') return to(6, 0);
        return {Verdict::PassUp};
    case 6:
        if (s == '+' || s == '-') return to(7, 0);
        [[fallthrough]];
    case 7:
    case 8:
        if (isDigit(s))
            return f.count < kMaxExponentDigits ? to(8, f.count + 1) : Outcome{Verdict::Refused};
        return f.phase == 8 ? Outcome{Verdict::PassUp} : Outcome{Verdict::Refused};
    default:
        return {Verdict::Refused};
    }
}

Outcome frameStep(Frame& f, Symbol s) {
    const Node& n = *f.node;
    switch (n.kind) {
    case Kind::Literal:
        if (f.phase >= int(n.literal.size()) || n.literal[std::size_t(f.phase)] != s)
            return {Verdict::Refused};
        ++f.phase;
        return {f.phase == int(n.literal.size()) ? Verdict::Done : Verdict::Consumed};
    case Kind::FreeText:
        return {s < 256 ? Verdict::Consumed : Verdict::PassUp};
    case Kind::Seq:
        if (f.phase >= int(n.children.size())) return {Verdict::PassUp};
        f.count = 1;
        return {Verdict::Enter, n.children[std::size_t(f.phase)]};
    case Kind::Padded:
        if (isWhitespace(s)) return whitespace(f, s);
        if (f.phase == 2) return {Verdict::PassUp};
        setPhase(f, 1);
        return {Verdict::Enter, n.children[0]};
    case Kind::Object:
        return objectStep(f, s);
    case Kind::Array:
        return arrayStep(f, s);
    case Kind::String:
        return stringStep(f, s);
    case Kind::Number:
    case Kind::Integer:
        return numberStep(f, s);
    case Kind::Alt:
        break; // never on a stack: entering one forks
    }
    return {Verdict::Refused};
}

// The parent of a frame that just completed moves on (a Seq that completes with it
// completes its own parent in turn).
void childDone(Thread& t, const Frame& child) {
    Frame done = child;
    while (!t.empty()) {
        Frame& p = t.back();
        switch (p.node->kind) {
        case Kind::Seq:
            ++p.phase;
            p.count = 0;
            if (p.phase < int(p.node->children.size())) return;
            done = p;
            t.pop_back();
            continue;
        case Kind::Padded:
            setPhase(p, 2);
            return;
        case Kind::Object:
            if (p.phase == 2) {
                p.item = p.node->keys.empty() ? -1 : done.item;
                setPhase(p, 3);
            } else {
                if (p.item >= 0) p.used |= 1ull << p.item;
                setPhase(p, 6);
            }
            return;
        case Kind::Array:
            ++p.item;
            setPhase(p, 4);
            return;
        default:
            return;
        }
    }
}

// A key of an object without properties: any string.
const Node& freeKey() {
    static const Node key = [] {
        Node n;
        n.kind = Kind::String;
        n.minSymbols = 2;
        return n;
    }();
    return key;
}

class Stepper {
public:
    explicit Stepper(std::vector<Thread>& out) : out_(out) {}

    void feed(Thread t, Symbol s) {
        for (;;) {
            if (t.empty()) { // complete: only the end of a test's text is taken
                if (s == kEnd) out_.push_back(std::move(t));
                return;
            }
            const Outcome o = frameStep(t.back(), s);
            switch (o.verdict) {
            case Verdict::Consumed:
                out_.push_back(std::move(t));
                return;
            case Verdict::Done: {
                const Frame f = t.back();
                t.pop_back();
                childDone(t, f);
                out_.push_back(std::move(t));
                return;
            }
            case Verdict::PassUp: {
                const Frame f = t.back();
                t.pop_back();
                childDone(t, f);
                continue;
            }
            case Verdict::Refused:
                return;
            case Verdict::Enter:
                enter(std::move(t), o.child, s, 0);
                return;
            case Verdict::EnterKey:
                enterKey(std::move(t), s);
                return;
            }
        }
    }

private:
    void enter(Thread t, const Node* n, Symbol s, std::int32_t tag) {
        if (n->kind == Kind::Alt) {
            for (std::size_t i = 0; i < n->children.size(); ++i)
                enter(i + 1 < n->children.size() ? t : std::move(t), n->children[i], s, tag);
            return;
        }
        if (t.size() >= kMaxFrames) return;
        Frame f;
        f.node = n;
        f.item = tag;
        t.push_back(f);
        feed(std::move(t), s);
    }

    // One thread per unused property's key literal; a free key is any string.
    void enterKey(Thread t, Symbol s) {
        const Frame& object = t.back();
        const Node& n = *object.node;
        if (n.keys.empty()) return enter(std::move(t), &freeKey(), s, 0);
        for (std::size_t i = 0; i < n.keys.size(); ++i)
            if (!(object.used & (1ull << i))) enter(t, n.keys[i], s, std::int32_t(i));
    }

    std::vector<Thread>& out_;
};

// Symbols the rest of an object needs after a value, given the keys `used`.
std::int64_t missingKeys(const Node& n, std::uint64_t used, int& missing) {
    std::int64_t cost = 0;
    missing = 0;
    for (std::size_t i = 0; i < n.keys.size(); ++i)
        if ((n.required & ~used) & (1ull << i)) {
            cost += n.keys[i]->minSymbols + 1 + n.children[i]->minSymbols;
            ++missing;
        }
    return cost;
}

std::int64_t closeAfterValue(const Node& n, std::uint64_t used) {
    int missing = 0;
    const std::int64_t cost = missingKeys(n, used, missing);
    return missing == 0 ? 1 : cost + missing + 1;
}

std::int64_t objectRemaining(const Frame& f, const Frame* child) {
    const Node& n = *f.node;
    int missing = 0;
    const std::int64_t cost = missingKeys(n, f.used, missing);
    // The key now given (phases 2..5): known from the key's frame while it is typed.
    const bool keyGiven = f.phase >= 2 && f.phase <= 5;
    const int key = !keyGiven || n.keys.empty() ? -1
                    : f.phase == 2              ? (child ? child->item : -1)
                                                : f.item;
    const std::uint64_t usedAfter = key >= 0 ? f.used | (1ull << key) : f.used;
    const std::int64_t value =
        key >= 0 ? n.children[std::size_t(key)]->minSymbols
                 : (n.additional ? n.additional->minSymbols : std::int64_t(kUnbounded));
    switch (f.phase) {
    case 0:
        return n.minSymbols;
    case 1:
        return missing == 0 ? 1 : cost + (missing - 1) + 1;
    case 2:
    case 3:
        return 1 + value + closeAfterValue(n, usedAfter);
    case 4:
        return value + closeAfterValue(n, usedAfter);
    case 5:
        return closeAfterValue(n, usedAfter);
    case 6:
        return closeAfterValue(n, f.used);
    case 7: {
        if (missing > 0) return cost + (missing - 1) + 1;
        if (n.keys.empty())
            return n.additional ? 2 + 1 + std::int64_t(n.additional->minSymbols) + 1 : kUnbounded;
        std::int64_t best = kUnbounded;
        for (std::size_t i = 0; i < n.keys.size(); ++i)
            if (!(f.used & (1ull << i)))
                best = std::min<std::int64_t>(best, n.keys[i]->minSymbols + 1 +
                                                        n.children[i]->minSymbols + 1);
        return best;
    }
    default:
        return kUnbounded;
    }
}

std::int64_t arrayRemaining(const Frame& f) {
    const Node& n = *f.node;
    const std::int64_t item = n.items ? n.items->minSymbols : 0;
    const auto more = [&](std::int64_t given) {
        return std::max<std::int64_t>(0, n.minItems - given) * (1 + item) + 1;
    };
    switch (f.phase) {
    case 0:
        return n.minSymbols;
    case 1:
        return n.minItems == 0 ? 1 : n.minItems * item + (n.minItems - 1) + 1;
    case 3:
        return more(f.item + 1);
    case 4:
        return more(f.item);
    case 5:
        return item + more(f.item + 1);
    default:
        return kUnbounded;
    }
}

std::int64_t frameRemaining(const Frame& f, const Frame* child) {
    const Node& n = *f.node;
    const auto sumFrom = [&](std::size_t i) {
        std::int64_t sum = 0;
        for (; i < n.children.size(); ++i) sum += n.children[i]->minSymbols;
        return sum;
    };
    switch (n.kind) {
    case Kind::Literal:
        return n.tokensFrom.empty() ? std::int64_t(n.literal.size()) - f.phase
                                    : n.tokensFrom[std::size_t(f.phase)];
    case Kind::FreeText:
        return 0;
    case Kind::Seq:
        return sumFrom(std::size_t(f.phase) + std::size_t(f.count));
    case Kind::Padded:
        return f.phase == 0 ? n.children[0]->minSymbols : 0;
    case Kind::Object:
        return objectRemaining(f, child);
    case Kind::Array:
        return arrayRemaining(f);
    case Kind::String: {
        const std::int64_t chars = std::max(0, n.minLength - f.count) + 1;
        if (f.phase == 0) return n.minSymbols;
        if (f.phase == 2) return 1 + chars;
        return (f.phase == 1 ? 0 : f.item) + chars;
    }
    case Kind::Number:
    case Kind::Integer:
        return f.phase == 0 || f.phase == 1 || f.phase == 4 || f.phase == 6 || f.phase == 7;
    case Kind::Alt:
        break;
    }
    return kUnbounded;
}

} // namespace

void step(const std::vector<Thread>& threads, Symbol symbol, std::vector<Thread>& out) {
    out.clear();
    Stepper stepper(out);
    for (const Thread& t : threads) stepper.feed(t, symbol);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
}

int minRemaining(const std::vector<Thread>& threads) {
    std::int64_t best = kUnbounded;
    for (const Thread& t : threads) {
        std::int64_t sum = 0;
        for (std::size_t i = 0; i < t.size(); ++i)
            sum = clampSum(sum + frameRemaining(t[i], i + 1 < t.size() ? &t[i + 1] : nullptr));
        best = std::min(best, sum);
    }
    return int(best);
}

Thread startAt(const Node* root) {
    Frame f;
    f.node = root;
    return Thread{f};
}

bool matches(const Grammar& grammar, std::string_view text) {
    Node padded;
    padded.kind = Kind::Padded;
    padded.children = {grammar.root};
    padded.minSymbols = grammar.root->minSymbols;
    std::vector<Thread> threads{startAt(&padded)}, next;
    for (const char c : text) {
        step(threads, Symbol(static_cast<unsigned char>(c)), next);
        threads.swap(next);
        if (threads.empty()) return false;
    }
    step(threads, kEnd, next);
    return !next.empty();
}

} // namespace k3::grammar
