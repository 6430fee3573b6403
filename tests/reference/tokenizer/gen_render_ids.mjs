// The chat template renders (tests/fixtures/chat/renders.json, made by python3-jinja2
// from the official template) encoded by the real tiktoken with special tokens allowed,
// over the committed tokenizer fixture (cl100k_base ranks + the K3 special tokens).
// The C++ side must give the same ids from its segment encoding. Renders whose message
// text itself contains a special-token string are skipped: there the oracle would turn
// user text into a special token, which the engine rightly refuses to do.
// Usage: node gen_render_ids.mjs   (after npm ci)
import { Tiktoken } from "tiktoken";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { KIMI_PAT } from "./kimi_pat.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../../..");
const tokDir = path.join(root, "tests/fixtures/tokenizer");
const modelText = fs.readFileSync(path.join(tokDir, "tiktoken.model"), "utf8");
const config = JSON.parse(fs.readFileSync(path.join(tokDir, "tokenizer_config.json"), "utf8"));
const specials = {};
for (const [id, t] of Object.entries(config.added_tokens_decoder)) specials[t.content] = Number(id);
const renders = JSON.parse(fs.readFileSync(path.join(root, "tests/fixtures/chat/renders.json"), "utf8"));

const enc = new Tiktoken(modelText, specials, KIMI_PAT);
const names = Object.keys(specials);
const out = [];
let skipped = 0;
for (const c of renders.cases) {
    if (typeof c.expected !== "string") continue; // an expected refusal
    const texts = c.messages.flatMap((m) => [m.content ?? "", m.reasoning_content ?? "", m.name ?? ""]);
    if (texts.some((t) => names.some((n) => String(t).includes(n)))) {
        ++skipped;
        continue;
    }
    out.push({ name: c.name, ids: Array.from(enc.encode(c.expected, "all")) });
}
enc.free();
const version = JSON.parse(fs.readFileSync(path.join(here, "node_modules/tiktoken/package.json"))).version;
fs.writeFileSync(path.join(root, "tests/fixtures/chat/render_ids.json"),
    JSON.stringify({ oracle: `npm tiktoken ${version}`, vocabulary: "tests/fixtures/tokenizer", cases: out }) + "\n");
console.log(`wrote ids for ${out.length} renders (${skipped} with special strings in message text skipped)`);
