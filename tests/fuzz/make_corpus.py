#!/usr/bin/env python3
"""Writes the seed corpora in corpus/<target>/ from the project's fixtures and the
peer fixtures (small copies; large files are cut to a few entries, still valid).
Run once from the source tree: python3 tests/fuzz/make_corpus.py [TRUNK_JSON]"""
import json, os, shutil, struct, sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
fx = os.path.join(root, "tests", "fixtures")
peer = os.path.join(fx, "peer")


def out(target, name, data):
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def read(*p):
    with open(os.path.join(*p), "rb") as f:
        return f.read()


def safetensors(tensors):
    """tensors: list of (name, dtype, shape, bytes) -> a whole .safetensors file."""
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


# safetensors: the peer's adversarial shards and a few made here.
for f in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
    out("fuzz_safetensors_header", "peer-" + f, read(peer, "st", f))
out("fuzz_safetensors_header", "mixed.safetensors",
    safetensors([("a.weight", "F32", [2, 3], bytes(24)), ("b", "BF16", [4], bytes(8)),
                 ("c", "U8", [2, 2], bytes(4)), ("s", "F16", [], bytes(2))]))
out("fuzz_safetensors_header", "empty.safetensors", safetensors([]))

# config.json: the tiny models, the release layout, and the peer's refusals.
out("fuzz_model_config", "tiny_a.json", read(fx, "models", "k3_tiny_a", "config.json"))
out("fuzz_model_config", "tiny_b.json", read(fx, "models", "k3_tiny_b", "config.json"))
out("fuzz_model_config", "kimi-k3.json", read(fx, "config", "kimi-k3-config.json"))
for f in sorted(os.listdir(os.path.join(peer, "cfg"))):
    out("fuzz_model_config", "peer-" + f, read(peer, "cfg", f))

# model.safetensors.index.json: the tiny models' index cut to 24 tensors.
for m in ("k3_tiny_a", "k3_tiny_b"):
    idx = json.loads(read(fx, "models", m, "model.safetensors.index.json"))
    names = sorted(idx["weight_map"])
    keep = names[:8] + [n for n in names if ".layers.1." in n][:8] + names[-8:]
    idx["weight_map"] = {n: idx["weight_map"][n] for n in keep}
    out("fuzz_shard_index", m + "-cut.json", json.dumps(idx, indent=1))

# trunk.json: packed from k3_tiny_a by `k3 pack` (path given on the command line).
if len(sys.argv) > 1:
    t = json.loads(read(sys.argv[1]))
    # Two layers and the model-level records: small, and still a consistent trunk. Its
    # index_xxh3 no longer matches after the cut: the target re-seals each input too.
    t["source"]["num_layers"] = 2
    t["records"] = [r for r in t["records"] if r["layer"] < 2]
    out("fuzz_trunk_json", "tiny_a-2layers.json", json.dumps(t, indent=1))
    print("trunk.bin bytes:", t["file_bytes"])

# tiktoken.model and tokenizer_config.json of the tiny models.
out("fuzz_tiktoken_model", "tiny_a.model", read(fx, "models", "k3_tiny_a", "tiktoken.model"))
out("fuzz_tiktoken_model", "tiny_b.model", read(fx, "models", "k3_tiny_b", "tiktoken.model"))
cfg = json.loads(read(fx, "models", "k3_tiny_a", "tokenizer_config.json"))
added = cfg["added_tokens_decoder"]
small = {"added_tokens_decoder": {k: added[k] for k in sorted(added, key=int)[:12]}}
out("fuzz_tokenizer_config", "tiny_a-first12.json", json.dumps(small, indent=1))
out("fuzz_tokenizer_config", "plain.json",
    '{"added_tokens_decoder": {"640": {"content": "[BOS]"}, "700": {"content": "<|x|>", "special": false}}}')

# Transcripts.
out("fuzz_transcript", "four-roles.jsonl",
    '{"role":"system","content":"You are a helpful assistant."}\n'
    '{"role":"user","content":"Explain cache locality."}\n'
    '{"role":"assistant","content":"\\u2026 ok","reasoning_content":"  The user asks.\\n"}\n'
    '{"role":"tool","name":"clock","content":"r"}\n')
out("fuzz_transcript", "crlf-blank.jsonl", '{"role":"user","content":"hi"}\r\n\r\n  \n{"role":"user","name":"bob","content":""}')

# Model output: byte 0 = start state, byte 1 = how the text is cut.
out("fuzz_chat_parse", "think-response.txt",
    "\x00\x05reasoning<|close|>think<|sep|><|open|>response<|sep|>Hello<|close|>response<|sep|><|end_of_msg|>")
out("fuzz_chat_parse", "response-eos.txt", "\x01\x09Just the answer.[EOS]")
out("fuzz_chat_parse", "message-tools.txt",
    "\x02\x03<|open|>tools<|sep|><|open|>call tool=\"x\"<|sep|>{}<|close|>call<|sep|><|close|>tools<|sep|>stray<|open|>response<|sep|>x")

# Hub model API answers.
sha = "0123456789abcdef" * 4
out("fuzz_hub_listing", "listing.json", json.dumps({
    "id": "moonshotai/Kimi-K3", "sha": "f831ab66814297da540d832a5235f8e904f29d06",
    "siblings": [{"rfilename": "config.json", "size": 2254},
                 {"rfilename": "model-00001-of-00003.safetensors", "size": 776904,
                  "lfs": {"sha256": sha, "size": 776904}},
                 {"rfilename": "sub/tiktoken.model", "size": 6654}]}))
out("fuzz_hub_listing", "no-siblings.json", '{"id":"x","siblings":[]}')

# Chat request bodies: byte 0 = where the rest goes (0: the body; 1, 2, 3: nested
# (byte >> 2) * 32 levels deep as tool parameters, arguments object, arguments string).
user = {"role": "user", "content": "x"}
out("fuzz_chat_request", "plain.json", "\x00" + json.dumps(
    {"messages": [{"role": "user", "content": "Hi"}], "temperature": 0.5, "max_tokens": 8}))
out("fuzz_chat_request", "tools.json", "\x00" + json.dumps(
    {"messages": [user], "tool_choice": "auto", "tools": [{"type": "function", "function": {
        "name": "get", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]}))
out("fuzz_chat_request", "tool-call.json", "\x00" + json.dumps({"messages": [
    user, {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get", "arguments": '{"q": [1, {"r": null}]}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "ok"}]}))
out("fuzz_chat_request", "number-overflow.json",
    '\x00{"messages":[{"role":"user","content":"x"}],"temperature":1e400}')
out("fuzz_chat_request", "deep-parameters.json", b'\x05{"type":"object"}')  # 32 levels
out("fuzz_chat_request", "deep-arguments.json", b"\xfe1")  # 2016 levels
out("fuzz_chat_request", "deep-arguments-string.json", b'\x7f{"b":2}')  # 992 levels

# k3 serve's chunked bodies: the first byte picks where the input is split.
out("fuzz_chunked_body", "one_chunk", b"\x05" + b"5\r\nhello\r\n0\r\n\r\n")
out("fuzz_chunked_body", "extension_trailer", b"\x09" + b"3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n")
out("fuzz_chunked_body", "no_crlf", b"\x02" + b"5\r\nhelloXX0\r\n\r\n")
