// Regenerates tests/fixtures/tokenizer/ from the real tiktoken (the Rust crate compiled to
// WASM, npm package "tiktoken"). Run from this folder: `npm ci && node gen_fixtures.mjs`.
//
// The vocabulary is a REAL large byte-level BPE (cl100k_base, shipped inside the npm package)
// written in the checkpoint's tiktoken.model form, plus a tokenizer_config.json with the 256
// K3 special tokens appended after the ranks. The oracle is constructed from those very files
// with the Kimi pre-tokenizer pattern, so the C++ tokenizer and the oracle read the same bytes.
//
// Regex dialect: tiktoken uses fancy-regex on top of Rust's regex crate, so `&&` is class
// intersection, \p{Han} is the Han SCRIPT (not Script_Extensions), \s is Unicode White_Space
// and the property tables are Unicode 16. probeDialect() below prints the facts the C++ side
// relies on, so a tiktoken upgrade that changes them is noticed here.

import { Tiktoken } from "tiktoken";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../../..");
const outDir = path.join(repo, "tests/fixtures/tokenizer");

import { KIMI_PAT } from "./kimi_pat.mjs";
export { KIMI_PAT };

// ---- vocabulary --------------------------------------------------------------------------

// The npm package stores ranks compactly: "! <start>" sets the next rank, then one base64
// token per word, ranks counting up.
function parseCompactRanks(text) {
    const words = text.split(/\s+/).filter((w) => w.length > 0);
    const out = [];
    let rank = 0;
    for (let i = 0; i < words.length; i++) {
        if (words[i] === "!") {
            rank = Number(words[++i]);
            continue;
        }
        out.push([words[i], rank++]);
    }
    out.sort((a, b) => a[1] - b[1]);
    out.forEach(([, r], i) => {
        if (r !== i) throw new Error(`ranks are not contiguous at ${i} (found ${r})`);
    });
    return out;
}

const SPECIAL_NAMES = new Map([
    [0, "[BOS]"],
    [1, "[EOS]"],
    [2, "<|end_of_msg|>"],
    [3, "<|open|>"],
    [4, "<|close|>"],
    [5, "<|sep|>"],
    [9, "[EOT]"],
    [18, "<|media_begin|>"],
    [19, "<|media_content|>"],
    [20, "<|media_end|>"],
    [21, "<|media_pad|>"],
    [254, "[UNK]"],
    [255, "[PAD]"],
]);

function buildVocabulary() {
    const encPath = path.join(here, "node_modules/tiktoken/encoders/cl100k_base.json");
    const ranks = parseCompactRanks(JSON.parse(fs.readFileSync(encPath, "utf8")).bpe_ranks);
    const modelText = ranks.map(([b64, r]) => `${b64} ${r}\n`).join("");
    const numBase = ranks.length;
    const specials = {};
    const decoder = {};
    for (let i = 0; i < 256; i++) {
        const id = numBase + i;
        const content = SPECIAL_NAMES.get(i) ?? `<|reserved_token_${id}|>`;
        specials[content] = id;
        decoder[String(id)] = {
            content,
            lstrip: false,
            normalized: false,
            rstrip: false,
            single_word: false,
            special: true,
        };
    }
    const config = {
        added_tokens_decoder: decoder,
        bos_token: "[BOS]",
        eos_token: "[EOS]",
        pad_token: "[PAD]",
        unk_token: "[UNK]",
        model_max_length: 1048576,
        tokenizer_class: "TikTokenTokenizer",
    };
    return { modelText, numBase, specials, config };
}

// ---- cases ---------------------------------------------------------------------------------

const hex = (bytes) => Buffer.from(bytes).toString("hex");

function adversarialCases() {
    const c = [];
    const add = (name, text) => c.push({ name, text });
    add("empty", "");
    add("ascii sentence", "Hello, world! This is a test.");
    add("han only", "我们今天去北京");
    add("han with ascii", "中文English混合text");
    add("han punctuation", "你好，世界！这是「测试」。");
    add("han ext B", "𠀀𠀁𪚥");
    add("han ext H (Unicode 15)", "\u{31350}\u{31351}\u{323AF}");
    add("han ext I (Unicode 15.1)", "\u{2EBF0}\u{2EE5D}字");
    add("han iteration mark", "人々時々");
    add("han ideographic zero", "二〇二四年");
    add("japanese", "日本語のテキストです。カタカナとひらがな");
    add("japanese long vowel", "コーヒーとケーキ");
    add("halfwidth katakana", "ｶﾀｶﾅ ﾃｽﾄ");
    add("korean", "안녕하세요 세계");
    add("korean jamo", "\u1100\u1161\u11A8 한글");
    add("cyrillic", "Привет, мир! Как дела?");
    add("cyrillic caps", "МОСКВА Москва");
    add("greek", "Καλημέρα κόσμε ΑΒΓ");
    add("arabic", "مرحبا بالعالم ١٢٣");
    add("arabic harakat", "بِسْمِ اللَّهِ");
    add("hebrew", "שלום עולם");
    add("devanagari", "नमस्ते दुनिया");
    add("thai", "สวัสดีชาวโลก");
    add("combining acute", "e\u0301e\u0301 cafe\u0301");
    add("combining stack", "Z\u0351\u036B\u0343\u036A\u0302\u036B\u033D\u034F\u0334");
    add("combining mark alone", "\u0301\u0302 x");
    add("precomposed latin", "Ça va? Ärger Öl über straße");
    add("titlecase digraph", "ǅemal ǈubljana ǋ");
    add("emoji", "I love 🍕 and 🎉!");
    add("emoji zwj family", "👨‍👩‍👧‍👦 family");
    add("emoji flags", "🇫🇷🇩🇪🇯🇵");
    add("emoji skin tone", "👍🏽 👋🏿");
    add("emoji keycap", "1️⃣ #️⃣");
    add("digits run", "1234567890123");
    add("digits mixed", "3.14159 1,000,000 v2.0.1");
    add("arabic-indic digits", "٠١٢٣٤٥٦٧٨٩");
    add("fullwidth digits", "１２３４５");
    add("roman numeral Nl", "Ⅻ ⅻ ↂ");
    add("superscript No", "x² + y³ = ½");
    add("contractions lower", "it's we're they've I'm you'll he'd don't");
    add("contractions upper", "IT'S WE'RE THEY'VE I'M YOU'LL HE'D DON'T");
    add("contractions mixed", "It'S We'Re They'vE you'Ll");
    add("contraction long s", "it'ſ IT'ſ");
    add("contraction alone", "'s 'LL 're");
    add("curly apostrophe", "it’s don’t");
    add("crlf", "line one\r\nline two\r\n\r\nline four");
    add("lone cr", "a\rb\r\rc");
    add("tabs", "\tindented\t\ttwice\t");
    add("trailing spaces", "trailing spaces   ");
    add("leading spaces", "    leading");
    add("long whitespace run", " ".repeat(100) + "x" + " ".repeat(57));
    add("mixed whitespace", " \t \n \t\n\n  \r\n \u000B\f x");
    add("unicode spaces", "a\u00A0b\u2003c\u3000d\u202Fe\u205Ff");
    add("nel and line separator", "a\u0085b\u2028c\u2029d");
    add("mongolian vowel separator", "a\u180Eb \u180E c");
    add("zero width chars", "a\u200Bb\u200Cc\u200Dd\uFEFFe");
    add("control chars", "a\u0000b\u0001c\u001Fd\u007F");
    add("python code", 'def f(x):\n    return x**2 + 1  # square\n\nprint(f(3))\n');
    add("cpp code", "int main() {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v[0] != 0 ? 0 : 1;\n}\n");
    add("json", '{"name": "Kimi", "ids": [1, 22, 333, 4444], "ok": true, "nested": {"k": null}}');
    add("url and email", "https://example.com/path?q=1&r=two#frag mail me@example.org");
    add("markdown", "# Title\n\n- item **bold** _it_\n- `code`\n\n```cpp\nint x;\n```\n");
    add("punctuation run", "!!!??? ... --- *** ((([[[{{{");
    add("punctuation then newlines", "end.\n\n\nnext");
    add("mixed scripts", "Hello мир 世界 عالم 🌍 123 こんにちは");
    add("latin then han no space", "abc中文def");
    add("literal special tokens are text", "user typed <|open|> and [EOS] and <|sep|>");
    add("repeated a 8000", "a".repeat(8000));
    add("repeated a 10000", "a".repeat(10000));
    add("repeated e-acute 2000", "é".repeat(2000));
    add("repeated han 3000", "中".repeat(3000));
    add("repeated space then word", " ".repeat(1000) + "word");
    add("repeated uppercase 3000", "A".repeat(3000));
    add("repeated digits 3001", "7".repeat(3001));
    add("repeated newlines", "\n".repeat(500));
    // Long single pieces with many different merges (the bucketed path of the merge).
    let seed = 12345;
    const rnd = (n) => ((seed = (seed * 1103515245 + 12345) % 2147483648), seed % n);
    const b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    add("long base64 blob", Array.from({ length: 3000 }, () => b64[rnd(64)]).join(""));
    add("long lowercase word", Array.from({ length: 2000 }, () => "etaoinshrdlu"[rnd(12)]).join(""));
    add("long han run", Array.from({ length: 800 }, () => String.fromCodePoint(0x4e00 + rnd(2000))).join(""));
    add("long cyrillic word", Array.from({ length: 1000 }, () => "абвгдежзиклмнопрст"[rnd(18)]).join(""));
    return c;
}

function specialCases() {
    return [
        ["chat message", "<|open|>message role=\"user\"<|sep|>Hi there<|close|>message<|sep|><|end_of_msg|>"],
        ["bos eos", "[BOS]text[EOS]"],
        ["adjacent specials", "<|open|><|sep|><|close|>"],
        ["special inside word", "abc<|sep|>def"],
        ["reserved token", "x<|reserved_token_100262|>y"],
        ["space before special", "hello <|open|> world"],
        ["broken special", "<|ope|> <|open| <|open|>"],
    ].map(([name, text]) => ({ name, text, special: true }));
}

// Invalid UTF-8 cannot reach tiktoken's JS API (it takes a JS string). The engine takes
// bytes and replaces invalid sequences exactly as TextDecoder does (WHATWG, U+FFFD per
// maximal subpart), so the oracle is tiktoken on TextDecoder's output.
function invalidUtf8Cases() {
    return [
        ["lone continuation", [0x61, 0x80, 0x62]],
        ["truncated 3-byte at end", [0x61, 0xe4, 0xb8]],
        ["truncated 4-byte in middle", [0xf0, 0x9f, 0x98, 0x20, 0x78]],
        ["overlong slash", [0xc0, 0xaf, 0x2f]],
        ["overlong 3-byte", [0xe0, 0x80, 0xaf]],
        ["utf-16 surrogate", [0x61, 0xed, 0xa0, 0x80, 0x62]],
        ["above U+10FFFF", [0xf4, 0x90, 0x80, 0x80]],
        ["invalid lead bytes", [0xff, 0xfe, 0xf8, 0x41]],
        ["mixed valid and invalid", [0xe4, 0xb8, 0xad, 0xe6, 0x96, 0x87, 0x80, 0xe4, 0xb8]],
    ].map(([name, bytes]) => ({ name, bytes_hex: hex(bytes) }));
}

// ---- repository files ------------------------------------------------------------------------

// Files as committed at HEAD (not the working tree), so a regeneration is reproducible.
function repoFiles() {
    const git = (...args) => execFileSync("git", args, { cwd: repo, maxBuffer: 1 << 28 });
    const commit = git("rev-parse", "HEAD").toString("utf8").trim();
    const list = git("ls-tree", "-r", "-z", "--name-only", "HEAD").toString("utf8");
    const files = [];
    for (const rel of list.split("\0").filter((p) => p.length > 0)) {
        if (rel.startsWith("tests/fixtures/tokenizer/")) continue; // our own output
        const bytes = git("cat-file", "blob", `HEAD:${rel}`);
        if (bytes.includes(0)) continue;
        let text;
        try {
            text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
        } catch {
            continue; // not text
        }
        files.push({ path: rel, text });
    }
    return { commit, files };
}

// ---- main ------------------------------------------------------------------------------------

function probeDialect(modelText) {
    const hits = (pat, s) => {
        const e = new Tiktoken(modelText, {}, pat);
        const n = e.encode_ordinary(s).length;
        e.free();
        return n > 0;
    };
    const facts = {
        "\\p{Han} is the script (U+3001 not included)": !hits("\\p{Han}", "\u3001"),
        "\\p{Han} includes Ext H (Unicode 15)": hits("\\p{Han}", "\u{31350}"),
        "\\s includes U+0085": hits("\\s", "\u0085"),
        "\\s excludes U+180E": !hits("\\s", "\u180E"),
        "(?i) 's matches 'ſ": hits("(?i:'s)", "'\u017F"),
    };
    for (const [k, v] of Object.entries(facts)) console.log(`dialect: ${k}: ${v}`);
    if (!Object.values(facts).every(Boolean))
        throw new Error("tiktoken's regex dialect changed: revisit engine/src/tokenizer/");
}

function main() {
    const { modelText, numBase, specials, config } = buildVocabulary();
    probeDialect(modelText);
    const enc = new Tiktoken(modelText, specials, KIMI_PAT);
    const ids = (a) => Array.from(a);

    const cases = [];
    for (const c of adversarialCases()) cases.push({ ...c, ids: ids(enc.encode_ordinary(c.text)) });
    for (const c of specialCases()) cases.push({ ...c, ids: ids(enc.encode(c.text, "all")) });
    for (const c of invalidUtf8Cases()) {
        const text = new TextDecoder().decode(Buffer.from(c.bytes_hex, "hex"));
        cases.push({ ...c, ids: ids(enc.encode_ordinary(text)) });
    }
    const repoAtHead = repoFiles();
    const files = repoAtHead.files.map((f) => ({ ...f, ids: ids(enc.encode_ordinary(f.text)) }));
    enc.free();

    fs.mkdirSync(outDir, { recursive: true });
    fs.writeFileSync(path.join(outDir, "tiktoken.model"), modelText);
    fs.writeFileSync(path.join(outDir, "tokenizer_config.json"), JSON.stringify(config, null, 1) + "\n");
    const version = JSON.parse(fs.readFileSync(path.join(here, "node_modules/tiktoken/package.json"))).version;
    const meta = { oracle: `npm tiktoken ${version}`, vocabulary: "cl100k_base", num_base_tokens: numBase, pat_str: KIMI_PAT };
    fs.writeFileSync(path.join(outDir, "cases.json"), JSON.stringify({ ...meta, cases }) + "\n");
    fs.writeFileSync(path.join(outDir, "files.json"),
        JSON.stringify({ ...meta, commit: repoAtHead.commit, files }) + "\n");
    const tokens = files.reduce((n, f) => n + f.ids.length, 0);
    console.log(`wrote ${cases.length} cases and ${files.length} files (${tokens} ids) to ${outDir}`);
}

main();
