// Encode speed of the tokenizer on the fixture vocabulary (cl100k_base ranks + K3 added
// tokens): megabyte runs of one character (the case a quadratic merge cannot survive) and
// ordinary mixed text. Usage: bench_tokenizer [TOKENIZER_DIR]
#include <k3/tokenizer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

namespace {

double seconds(std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double>(d).count();
}

void run(const k3::Tokenizer& tok, const char* label, const std::string& text) {
    const std::clock_t c0 = std::clock();
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok.encode(text);
    const auto t1 = std::chrono::steady_clock::now();
    const double cpu = double(std::clock() - c0) / CLOCKS_PER_SEC;
    const std::string back = tok.decode(ids);
    const auto t2 = std::chrono::steady_clock::now();
    // CPU time next to wall time: on a shared machine the wall clock alone misleads.
    std::printf("%-22s %8zu bytes -> %7zu ids  encode %6.3f s wall %6.3f s cpu (%5.1f MB/s)  "
                "decode %6.3f s  %s\n",
                label, text.size(), ids.size(), seconds(t1 - t0), cpu,
                text.size() / 1e6 / std::max(seconds(t1 - t0), 1e-9), seconds(t2 - t1),
                back == text ? "round trip ok" : "ROUND TRIP FAILED");
}

std::string repeat(const std::string& unit, std::size_t bytes) {
    std::string s;
    while (s.size() < bytes) s += unit;
    return s;
}

} // namespace

int main(int argc, char** argv) {
    const std::string dir = argc > 1 ? argv[1] : K3_SOURCE_DIR "/tests/fixtures/tokenizer";
    const auto t0 = std::chrono::steady_clock::now();
    const auto tok = k3::Tokenizer::fromDirectory(dir);
    std::printf("loaded %zu ranks + %zu added tokens in %.3f s\n", tok.numRanks(),
                tok.addedTokens().size(), seconds(std::chrono::steady_clock::now() - t0));
    const std::size_t mb = 1000000;
    run(tok, "1 MB of 'a'", repeat("a", mb));
    run(tok, "1 MB of 'é'", repeat("é", mb));
    run(tok, "1 MB of '中'", repeat("中", mb));
    run(tok, "1 MB of '😀'", repeat("😀", mb));
    run(tok, "1 MB of 'A'", repeat("A", mb));
    run(tok, "1 MB of spaces", repeat(" ", mb));
    run(tok, "1 MB of spaces + x", repeat(" ", mb) + "x");
    run(tok, "1 MB of digits", repeat("7", mb));
    run(tok, "1 MB of '!'", repeat("!", mb));
    run(tok, "1 MB of 'ab '", repeat("ab ", mb));
    run(tok, "1 MB mixed text",
        repeat(
            "The quick brown fox, 敏捷的狐狸, быстрая лиса 🦊 jumps over 42 lazy "
            "dogs.\n",
            mb));
    return 0;
}
