#!/usr/bin/env python3
"""A small byte-level BPE in the Kimi K3 tokenizer's file format (fixtures only).

Files, as released: `tiktoken.model` = one line per rank, `base64(token bytes) rank`
(ranks 0..255 are the single bytes, then the merges in training order), and
`tokenizer_config.json` whose `added_tokens_decoder` maps id -> {content, special}
for the 256 K3 special tokens at ids num_ranks + 0..255, with the real names and
order ([BOS] [EOS] <|end_of_msg|> <|open|> <|close|> <|sep|> ... [UNK] [PAD]; the
other slots are <|reserved_token_ID|>).

Encoding is tiktoken's: split out special tokens (allowed everywhere), cut the text
between them with the Kimi pre-tokenizer, then for each piece either look it up whole
or repeatedly merge the adjacent pair whose concatenation has the LOWEST rank.

Limitation: Python's `re` has no \\p{..} classes and the `regex` module is not a
dependency here, so the pre-tokenizer below is the Kimi pattern specialised to ASCII
(\\p{L} = [A-Za-z], \\p{Lu} = [A-Z], \\p{Ll} = [a-z], \\p{N} = [0-9], Lt/Lm/Lo/M/Han empty,
\\s = ASCII white space). It is exact for ASCII text and refuses anything else, so the
corpus, prompts and answers of every fixture are ASCII.
"""

import base64
import collections
import json
import os
import re

# The K3 special-token slots that have names (index into the 256 after the ranks).
SPECIAL_NAMES = {
    0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>",
    5: "<|sep|>", 9: "[EOT]", 18: "<|media_begin|>", 19: "<|media_content|>",
    20: "<|media_end|>", 21: "<|media_pad|>", 254: "[UNK]", 255: "[PAD]",
}
NUM_SPECIAL = 256

_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
# The 8 alternatives of the Kimi pat_str, in order, restricted to ASCII (see above).
KIMI_PAT_ASCII = re.compile("|".join([
    r"[^\r\nA-Za-z0-9]?[A-Z]*[a-z]+" + _CONTRACTIONS,
    r"[^\r\nA-Za-z0-9]?[A-Z]+[a-z]*" + _CONTRACTIONS,
    r"[0-9]{1,3}",
    r" ?[^\sA-Za-z0-9]+[\r\n]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
]), re.ASCII)


def pretokenize(text):
    if not text.isascii():
        raise ValueError(f"k3_bpe: only ASCII text is supported, got {text[:40]!r}")
    pieces = KIMI_PAT_ASCII.findall(text)
    if "".join(pieces) != text:
        raise AssertionError(f"pre-tokenizer lost text in {text!r}")
    return pieces


def special_names(num_ranks):
    return [SPECIAL_NAMES.get(i, f"<|reserved_token_{num_ranks + i}|>") for i in range(NUM_SPECIAL)]


def train(texts, num_merges):
    """Byte-level BPE: merge the most frequent adjacent pair (ties: the smallest byte
    pair), counting each pre-tokenizer piece with its frequency. Deterministic."""
    words = collections.Counter()
    for t in texts:
        for p in pretokenize(t):
            words[p.encode()] += 1
    seqs = [[bytes([b]) for b in w] for w in words]
    freqs = list(words.values())
    merges = []
    for _ in range(num_merges):
        pairs = collections.Counter()
        for s, f in zip(seqs, freqs):
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += f
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merged = best[0] + best[1]
        merges.append(merged)
        for i, s in enumerate(seqs):
            if len(s) < 2:
                continue
            out, j = [], 0
            while j < len(s):
                if j + 1 < len(s) and s[j] == best[0] and s[j + 1] == best[1]:
                    out.append(merged)
                    j += 2
                else:
                    out.append(s[j])
                    j += 1
            seqs[i] = out
    ranks = [bytes([b]) for b in range(256)]
    seen = set(ranks)
    for m in merges:
        if m not in seen:  # the same bytes can arise from two different pairs
            seen.add(m)
            ranks.append(m)
    return ranks


class Tokenizer:
    def __init__(self, ranks):
        self.ranks = list(ranks)
        self.rank_of = {b: i for i, b in enumerate(self.ranks)}
        if len(self.rank_of) != len(self.ranks):
            raise ValueError("duplicate token bytes in the ranks")
        n = len(self.ranks)
        self.specials = {name: n + i for i, name in enumerate(special_names(n))}
        self.special_of_id = {v: k for k, v in self.specials.items()}
        self._special_re = re.compile("|".join(re.escape(s) for s in
                                               sorted(self.specials, key=len, reverse=True)))

    @property
    def vocab_size(self):
        return len(self.ranks) + NUM_SPECIAL

    def _bpe(self, piece):
        if piece in self.rank_of:
            return [self.rank_of[piece]]
        parts = [piece[i:i + 1] for i in range(len(piece))]
        while len(parts) > 1:
            best, at = None, -1
            for i in range(len(parts) - 1):
                r = self.rank_of.get(parts[i] + parts[i + 1])
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        return [self.rank_of[p] for p in parts]

    def encode_ordinary(self, text):
        return [t for p in pretokenize(text) for t in self._bpe(p.encode())]

    def encode(self, text):
        """Special tokens are recognised anywhere (tiktoken's allowed_special="all")."""
        out, pos = [], 0
        for m in self._special_re.finditer(text):
            out += self.encode_ordinary(text[pos:m.start()])
            out.append(self.specials[m.group(0)])
            pos = m.end()
        return out + self.encode_ordinary(text[pos:])

    def decode(self, ids):
        out = b""
        for i in ids:
            out += self.special_of_id[i].encode() if i in self.special_of_id else self.ranks[i]
        return out.decode("utf-8", errors="replace")

    def write(self, out_dir):
        with open(os.path.join(out_dir, "tiktoken.model"), "w") as f:
            for r, b in enumerate(self.ranks):
                f.write(f"{base64.b64encode(b).decode()} {r}\n")
        decoder = {str(i): {"content": name, "lstrip": False, "normalized": False,
                            "rstrip": False, "single_word": False, "special": True}
                   for name, i in self.specials.items()}
        cfg = {"added_tokens_decoder": decoder, "bos_token": "[BOS]", "eos_token": "[EOS]",
               "pad_token": "[PAD]", "unk_token": "[UNK]", "model_max_length": 1048576,
               "tokenizer_class": "TikTokenTokenizer"}
        with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
            f.write("\n")

    @classmethod
    def read(cls, model_dir):
        """Read the two files back; refuses anything that does not match what write() makes."""
        ranks = []
        with open(os.path.join(model_dir, "tiktoken.model")) as f:
            for i, line in enumerate(f):
                b64, r = line.split()
                if int(r) != i:
                    raise ValueError(f"tiktoken.model line {i + 1}: rank {r} out of order")
                ranks.append(base64.b64decode(b64))
        tok = cls(ranks)
        with open(os.path.join(model_dir, "tokenizer_config.json")) as f:
            dec = json.load(f)["added_tokens_decoder"]
        got = {v["content"]: int(k) for k, v in dec.items()}
        if got != tok.specials:
            raise ValueError("tokenizer_config.json special tokens do not match the ranks")
        return tok
