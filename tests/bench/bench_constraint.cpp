// The cost of constrained decoding per token (issue 31): a nested schema's automaton over
// a vocabulary of the real width (160,000 ordinary tokens, made up here: the real
// tokenizer is not in the repository) and over the demo's, against the demo's forward.
// Prints, per step of a random walk through the schema: the check of one token (what a
// step costs when the sampler's pick is allowed) and the full mask (a refused pick).
//
// Usage: bench_constraint [steps]   (run by hand; compare with a real-width forward, e.g.
// bench_prefill's s/position on the synthetic checkpoint in docs/measurements.md)
#include <k3/constraint.hpp>
#include <k3/grammar.hpp>
#include <k3/session.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

const std::string kDemo = K3_SOURCE_DIR "/resources/demo";

const char* kSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":40},
  "tags":{"type":"array","items":{"type":"string","maxLength":12},"maxItems":4},
  "address":{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":"integer"},
    "geo":{"type":"array","items":{"type":"number"},"minItems":2,"maxItems":2}},
    "required":["city","zip"],"additionalProperties":false},
  "kind":{"enum":["person","company",null]},
  "score":{"anyOf":[{"type":"number"},{"type":"null"}]}},
  "required":["name","address","kind"],"additionalProperties":false})";

std::string base64(const std::string& in) {
    static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    std::size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        const unsigned v =
            (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8 | (unsigned char)in[i + 2];
        out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], t[v & 63]};
    }
    if (i + 1 == in.size()) {
        const unsigned v = (unsigned char)in[i] << 16;
        out += {t[v >> 18], t[(v >> 12) & 63], '=', '='};
    } else if (i + 2 == in.size()) {
        const unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8;
        out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], '='};
    }
    return out;
}

// 256 bytes, then words (with and without a leading space), digit runs and punctuation
// runs as a BPE vocabulary holds them, up to `ranks` tokens; the demo's added tokens after.
k3::Tokenizer wideTokenizer(std::size_t ranks) {
    std::set<std::string> seen;
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) {
        tokens.push_back(std::string(1, char(b)));
        seen.insert(tokens.back());
    }
    std::mt19937_64 rng(31);
    const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
    const std::string punct = "{}[]\":,.-_ '\n\t()!?/\\";
    while (tokens.size() < ranks) {
        std::string t;
        const int kind = int(rng() % 10);
        const int n = 1 + int(rng() % (kind < 7 ? 10 : 4));
        if (kind < 7) {
            if (rng() % 2) t += ' ';
            for (int i = 0; i < n; ++i) t += letters[std::min<std::size_t>(rng() % 26, rng() % 26)];
        } else if (kind < 8) {
            for (int i = 0; i < n; ++i) t += char('0' + rng() % 10);
        } else {
            for (int i = 0; i < n + 1; ++i) t += punct[rng() % punct.size()];
        }
        if (seen.insert(t).second) tokens.push_back(t);
    }
    std::string model;
    for (std::size_t i = 0; i < tokens.size(); ++i)
        model += base64(tokens[i]) + " " + std::to_string(i) + "\n";
    std::ifstream in(kDemo + "/tokenizer_config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    nlohmann::json shifted = nlohmann::json::object();
    for (const auto& [id, entry] : config["added_tokens_decoder"].items())
        shifted[std::to_string(std::stoul(id) - 951 + ranks)] = entry;
    config["added_tokens_decoder"] = shifted;
    return k3::Tokenizer::fromText(model, config.dump());
}

struct Figures {
    double buildMs = 0, checkMs = 0, maskMs = 0, maskMaxMs = 0;
    int steps = 0;
    double allowedMean = 0;
};

Figures walk(const k3::Tokenizer& tok, int steps) {
    Figures f;
    auto t0 = Clock::now();
    const auto c = k3::OutputConstraint::jsonAnswer(k3::JsonGrammar::fromSchema(kSchema), tok);
    f.buildMs = msSince(t0);
    k3::grammar::ConstraintState state(*c, false);
    std::mt19937_64 rng(7);
    const int budget = 100000;
    for (int i = 0; i < steps && !state.dead(); ++i) {
        const k3::TokenId probe = k3::TokenId(rng() % tok.vocabSize());
        t0 = Clock::now();
        (void)state.allows(probe, budget - i);
        f.checkMs += msSince(t0);
        t0 = Clock::now();
        const std::vector<k3::TokenId> allowed = state.allowed(budget - i);
        const double ms = msSince(t0);
        f.maskMs += ms;
        f.maskMaxMs = std::max(f.maskMaxMs, ms);
        f.allowedMean += double(allowed.size());
        if (allowed.empty()) break;
        // Prefer closing tokens now and then, so the walk visits every part of the schema.
        k3::TokenId next = allowed[rng() % allowed.size()];
        if (rng() % 3 == 0) next = allowed.front();
        state.advance(next);
        ++f.steps;
        if (state.minRemaining() == 0) break;
    }
    f.checkMs /= std::max(1, f.steps);
    f.maskMs /= std::max(1, f.steps);
    f.allowedMean /= std::max(1, f.steps);
    return f;
}

void print(const char* name, const Figures& f) {
    std::printf("%-22s build %7.1f ms | %4d steps | one-token check %.4f ms | full mask mean "
                "%.3f ms, max %.3f ms (%.0f tokens allowed on average)\n",
                name, f.buildMs, f.steps, f.checkMs, f.maskMs, f.maskMaxMs, f.allowedMean);
}

} // namespace

int main(int argc, char** argv) {
    const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
    const k3::Tokenizer demoTok = k3::Tokenizer::fromDirectory(kDemo);
    const Figures demo = walk(demoTok, steps);
    const std::uint64_t builds = k3::grammar::vocabularyBuilds();
    const k3::Tokenizer wideTok = wideTokenizer(160000);
    const Figures wide = walk(wideTok, steps);
    print("demo vocabulary (951)", demo);
    print("160,000 tokens", wide);
    // The vocabulary's tables are built once per tokenizer: a second request's build is
    // the grammar's alone.
    const auto t0 = Clock::now();
    (void)k3::OutputConstraint::jsonAnswer(k3::JsonGrammar::fromSchema(kSchema), wideTok);
    const double secondMs = msSince(t0);
    std::printf("160,000 tokens, a second request on the same tokenizer: build %.1f ms (the "
                "first: %.1f ms); vocabulary tables built %llu time(s)\n",
                secondMs, wide.buildMs,
                (unsigned long long)(k3::grammar::vocabularyBuilds() - builds));

    k3::LaunchConfig o;
    o.modelDir = kDemo;
    k3::Session s = k3::Session::open(o);
    k3::GenerateOptions g;
    g.render.thinking = false;
    g.maxTokens = 24;
    const k3::GenerateResult r = s.chat({{k3::ChatRole::User, "What is k3chat?"}}, g);
    const double forwardMs = 1000.0 * r.decodeSeconds / std::max<std::size_t>(1, r.ids.size());
    std::printf("demo forward: %.3f ms/token (%zu tokens)\n", forwardMs, r.ids.size());
    std::printf("full mask vs the demo's forward: demo vocabulary %.1f%%\n",
                100.0 * demo.maskMs / forwardMs);
    // A real-width forward: 0.300 s/position one at a time on the 4-layer synthetic
    // checkpoint, everything pinned (docs/measurements.md, issue 16); the full model has
    // 61 layers, so this is a floor.
    const double realForwardMs = 300.0;
    std::printf("160,000 tokens vs a 4-layer real-width forward (%.0f ms, a floor): check "
                "%.4f%%, full mask mean %.2f%%, max %.2f%%\n",
                realForwardMs, 100.0 * wide.checkMs / realForwardMs,
                100.0 * wide.maskMs / realForwardMs, 100.0 * wide.maskMaxMs / realForwardMs);
    return 0;
}
