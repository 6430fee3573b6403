#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/Pcre2Regex.hpp"

#include "k3/tokenizer.hpp"

#include <pcre2.h>

namespace k3::detail {

namespace {

std::string pcre2Message(int code) {
    PCRE2_UCHAR buffer[256];
    if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0)
        return "error " + std::to_string(code);
    return reinterpret_cast<const char*>(buffer);
}

// Per-call match state; the JIT stack grows on demand so long runs cannot overflow it.
struct MatchState {
    pcre2_match_data* data = nullptr;
    pcre2_match_context* context = nullptr;
    pcre2_jit_stack* stack = nullptr;
    MatchState() {
        data = pcre2_match_data_create(1, nullptr);
        context = pcre2_match_context_create(nullptr);
        stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
        if (!data || !context || !stack) throw TokenizerError("tokenizer: out of memory for PCRE2");
        pcre2_jit_stack_assign(context, nullptr, stack);
    }
    ~MatchState() {
        pcre2_jit_stack_free(stack);
        pcre2_match_context_free(context);
        pcre2_match_data_free(data);
    }
    MatchState(const MatchState&) = delete;
    MatchState& operator=(const MatchState&) = delete;
};

} // namespace

struct Pcre2Regex::Code {
    pcre2_code* re = nullptr;
    ~Code() { pcre2_code_free(re); }
};

Pcre2Regex::Pcre2Regex(const std::string& pattern) : code_(std::make_unique<Code>()) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_->re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (!code_->re)
        throw TokenizerError("tokenizer: cannot compile pattern at offset " +
                             std::to_string(offset) + ": " + pcre2Message(error));
    // Without JIT (an unsupported CPU) the interpreter gives the same matches, only slower.
    pcre2_jit_compile(code_->re, PCRE2_JIT_COMPLETE);
}

Pcre2Regex::~Pcre2Regex() = default;

void Pcre2Regex::forEachMatch(std::string_view text,
                              const std::function<void(std::size_t, std::size_t)>& onMatch) const {
    MatchState state;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    std::size_t at = 0;
    while (at < text.size()) {
        const int rc = pcre2_match(code_->re, subject, text.size(), at, PCRE2_NO_UTF_CHECK,
                                   state.data, state.context);
        if (rc == PCRE2_ERROR_NOMATCH) return;
        if (rc < 0) throw TokenizerError("tokenizer: pattern match failed: " + pcre2Message(rc));
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
        const std::size_t begin = ov[0];
        std::size_t end = ov[1];
        if (end > begin) {
            onMatch(begin, end);
        } else {
            // No Kimi alternative matches empty; step one character to be safe regardless.
            end = begin + 1;
            while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80)
                ++end;
        }
        at = end;
    }
}

const std::string& kimiPattern() {
    // tiktoken's regex (Rust regex + fancy-regex) differs from PCRE2 in three ways that matter:
    //  - `&&` (class intersection) does not exist in PCRE2 before 10.45. The general
    //    categories partition the code points, so (Lu|Lt|Lm|Lo|M) minus Han is the negated
    //    class of everything else, and a single class keeps long runs linear and stack-free.
    //  - \p{Han} is the Han SCRIPT in Rust but Script_Extensions in PCRE2 >= 10.40 (which
    //    would swallow 、。「」 into Han runs): spell it \p{sc=Han}.
    //  - \s is Unicode White_Space in Rust; PCRE2's UCP \s also takes U+180E. Spell it out.
    // Rust's tables are Unicode 16; CJK ideographs added since Unicode 14 (the oldest PCRE2 we
    // build with) are listed explicitly so Han text splits the same on every distribution.
    // Other letters and digits new since Unicode 14 follow the system PCRE2's tables.
    static const std::string pattern = [] {
        const std::string newHan = R"(\x{2B739}\x{2EBF0}-\x{2EE5D}\x{31350}-\x{323AF})";
        const std::string han = R"(\p{sc=Han})" + newHan;
        const std::string ws =
            R"(\t\n\x{0B}\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
        const std::string notLetterNumber = R"([^\r\n\p{L}\p{N})" + newHan + "]";
        const std::string upperish = R"([^\p{Ll}\p{N}\p{P}\p{S}\p{Z}\p{C})" + han + "]";
        const std::string lowerish = R"([^\p{Lu}\p{Lt}\p{N}\p{P}\p{S}\p{Z}\p{C})" + han + "]";
        const std::string contraction = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)?)";
        return "[" + han + "]+" +                                                            //
               "|" + notLetterNumber + "?" + upperish + "*" + lowerish + "+" + contraction + //
               "|" + notLetterNumber + "?" + upperish + "+" + lowerish + "*" + contraction + //
               R"(|\p{N}{1,3})" +                                                            //
               "| ?[^" + ws + R"(\p{L}\p{N})" + newHan + R"(]+[\r\n]*)" +                    //
               "|[" + ws + R"(]*[\r\n]+)" +                                                  //
               "|[" + ws + "]+(?![^" + ws + "])" +                                           //
               "|[" + ws + "]+";
    }();
    return pattern;
}

} // namespace k3::detail
