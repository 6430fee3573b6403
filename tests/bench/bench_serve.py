#!/usr/bin/env python3
"""k3 serve against the k3 CLI: time to first token and tokens/s, same model and prompt.

Each run starts a fresh process (the model loaded, no conversation state), so neither
side reuses a prefix: the CLI is `k3 MODEL --chat` fed the prompt on stdin (clock from
the line written to the first answer byte on stdout), the server `k3 serve MODEL`
streaming over HTTP to a thin client (clock from the request, on a connection already
open, to the first delta). The client reads the events as they arrive and parses only
the last (usage): a JSON-parsing client such as the openai npm package costs CPU that,
on a 2-core machine, is taken from the generation and would be charged to the server.
Both sample the same tokens (same seed: k3 serve samples as k3 --chat does). Prints the
medians side by side with the ratio server/CLI.

Usage: bench_serve.py [--k3 build/dev/app/k3] [--model resources/demo] [--runs 5]
                      [--tokens 1000]
"""
import argparse
import http.client
import json
import os
import re
import select
import statistics
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
PROMPT = "Hello!"
SEED = 3  # thinking on, temperature 2: a long answer (1063 tokens on the demo)


def wait_for(stream, pattern, timeout=30):
    """Reads `stream` (a pipe) until `pattern` matches; returns the match."""
    buf = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([stream], [], [], 0.1)
        if ready:
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            m = re.search(pattern, buf)
            if m:
                return m
    raise SystemExit("timed out waiting for %r; got %r" % (pattern, buf[-500:]))


def cli_run(k3, model, tokens):
    p = subprocess.Popen([k3, model, "--chat", "--temperature", "2", "--seed", str(SEED),
                          "--max-tokens", str(tokens)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(p.stderr, rb"/help for commands")
    t0 = time.monotonic()
    p.stdin.write((PROMPT + "\n").encode())
    p.stdin.flush()
    select.select([p.stdout], [], [])
    first = time.monotonic()
    m = wait_for(p.stderr, rb"\[reused \d+ of (\d+) positions, (\d+) tokens", timeout=300)
    end = time.monotonic()
    p.stdin.close()
    p.wait()
    n = int(m.group(2))
    return {"ttft": first - t0, "tokens": n, "tokensPerSecond": (n - 1) / (end - first)}


def serve_run(k3, model, tokens):
    p = subprocess.Popen([k3, "serve", model, "--port", "0"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    port = int(wait_for(p.stderr, rb"on http://127\.0\.0\.1:(\d+)/v1").group(1))
    body = json.dumps({"model": "demo", "messages": [{"role": "user", "content": PROMPT}],
                       "temperature": 2, "seed": SEED, "max_tokens": tokens, "stream": True,
                       "stream_options": {"include_usage": True}})
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", "/health")  # the connection is open before the clock starts
    conn.getresponse().read()
    t0 = time.monotonic()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    first = None
    last = b""
    for line in resp:
        if first is None and (b'"reasoning_content":"' in line or
                              (b'"content":"' in line and b'"content":""' not in line)):
            first = time.monotonic()
        if line.startswith(b"data: {"):
            last = line
    end = time.monotonic()
    conn.close()
    p.terminate()
    p.wait()
    n = json.loads(last[6:])["usage"]["completion_tokens"]
    return {"ttft": first - t0, "tokens": n, "tokensPerSecond": (n - 1) / (end - first)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k3", default=os.path.join(REPO, "build", "dev", "app", "k3"))
    ap.add_argument("--model", default=os.path.join(REPO, "resources", "demo"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=1000)
    args = ap.parse_args()

    cli, srv = [], []
    for _ in range(args.runs):  # interleaved, so drift in machine load hits both
        cli.append(cli_run(args.k3, args.model, args.tokens))
        srv.append(serve_run(args.k3, args.model, args.tokens))
    if {r["tokens"] for r in cli} != {r["tokens"] for r in srv}:
        raise SystemExit("the CLI and the server generated different token counts: %s %s" %
                         ([r["tokens"] for r in cli], [r["tokens"] for r in srv]))

    def med(rows, key):
        return statistics.median(r[key] for r in rows)

    print("k3 serve vs k3 --chat: %s, prompt %r, seed %d, %d tokens, median of %d fresh runs each; "
          "OMP_NUM_THREADS=%s, load %.1f" % (os.path.basename(os.path.normpath(args.model)), PROMPT,
                                             SEED, cli[0]["tokens"], args.runs,
                                             os.environ.get("OMP_NUM_THREADS", "unset"),
                                             os.getloadavg()[0]))
    print("%-22s %12s %12s %8s" % ("", "k3 --chat", "k3 serve", "ratio"))
    for key, label, unit in (("ttft", "time to first token", "ms"), ("tokensPerSecond", "tokens/s", "")):
        c, s = med(cli, key), med(srv, key)
        scale = 1000 if unit == "ms" else 1
        print("%-22s %10.1f%2s %10.1f%2s %8.3f" % (label, c * scale, unit, s * scale, unit, s / c))


if __name__ == "__main__":
    main()
