#!/usr/bin/env python3
"""Soak benchmark for `k3 serve` under hostile clients (issue 35): printed figures, not a
timed test.

For --seconds (default 60): --slow connections (default 40) each send a request line and
then one header line every 1-2 s (reconnecting when the server closes them), one
connection floods 8,000-byte header lines without end (reconnecting likewise), and 4 real
clients alternate GET /health and a 4-token chat, each on a new connection. Printed: the
real clients' p50/p99/max latency per request kind and how many failed (no answer within
10 s), what the slow and flood connections got, the server's peak RSS (VmHWM) and whether
it crashed (it must exit 0 on SIGTERM).

    tests/bench/bench_serve_soak.py --k3 build/dev/app/k3 [--model resources/demo]
        [--seconds 60] [--slow 40]
"""

import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

CHAT = json.dumps({
    "messages": [{"role": "user", "content": "Hello!"}],
    "max_tokens": 4,
    "thinking": {"type": "disabled"},
})


def start_server(k3, model):
    proc = subprocess.Popen([k3, "serve", model, "--port", "0"], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)
    listening = re.compile(r"on http://\S+:(\d+)/v1")
    deadline = time.time() + 30
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        m = listening.search(line)
        if m:
            # Keep draining the log so the server never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, int(m.group(1))
    proc.kill()
    sys.exit("k3 serve did not start")


def peak_rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.latency = {"health": [], "chat": []}
        self.failed = {"health": 0, "chat": 0}
        self.statuses = {}  # what slow and flood connections were answered

    def seen(self, kind, status):
        with self.lock:
            key = f"{kind} {status}"
            self.statuses[key] = self.statuses.get(key, 0) + 1


def answer_status(sock):
    """The status of whatever the server sent before closing, or 'closed'."""
    try:
        sock.settimeout(2)
        data = sock.recv(4096)
    except OSError:
        return "reset"
    m = re.match(rb"HTTP/1\.[01] (\d{3})", data)
    return m.group(1).decode() if m else "closed"


def slow_client(port, stop, stats, index):
    while not stop.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            n = 0
            while not stop.is_set():
                stop.wait(random.uniform(1.0, 2.0))
                s.sendall(b"X-Drip-%d-%d: 1\r\n" % (index, n))
                n += 1
        except OSError:
            pass
        try:
            stats.seen("slow", answer_status(s))
            s.close()
        except (OSError, UnboundLocalError):
            stats.seen("slow", "refused")
            stop.wait(0.5)


def flood_client(port, stop, stats):
    line = b"X-Fill: " + b"a" * 7990 + b"\r\n"
    while not stop.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            while not stop.is_set():
                s.sendall(line * 8)
        except OSError:
            pass
        try:
            stats.seen("flood", answer_status(s))
            s.close()
        except (OSError, UnboundLocalError):
            stats.seen("flood", "refused")
            stop.wait(0.5)


def real_client(port, stop, stats):
    while not stop.is_set():
        for kind in ("health", "chat"):
            start = time.monotonic()
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                if kind == "health":
                    c.request("GET", "/health")
                else:
                    c.request("POST", "/v1/chat/completions", CHAT,
                              {"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                c.close()
                ok = r.status == 200
            except OSError:
                ok = False
            elapsed = time.monotonic() - start
            with stats.lock:
                if ok:
                    stats.latency[kind].append(elapsed)
                else:
                    stats.failed[kind] += 1
            stop.wait(0.1)


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k3", required=True)
    ap.add_argument("--model", default=os.path.join(os.path.dirname(__file__), "../../resources/demo"))
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--slow", type=int, default=40)
    args = ap.parse_args()

    proc, port = start_server(args.k3, args.model)
    stats = Stats()
    stop = threading.Event()
    threads = [threading.Thread(target=slow_client, args=(port, stop, stats, i), daemon=True)
               for i in range(args.slow)]
    threads.append(threading.Thread(target=flood_client, args=(port, stop, stats), daemon=True))
    for t in threads:
        t.start()
    time.sleep(2.5)  # every slow client connected and dripping before the real ones start
    real = [threading.Thread(target=real_client, args=(port, stop, stats), daemon=True)
            for _ in range(4)]
    for t in real:
        t.start()
    stop.wait(args.seconds)
    stop.set()
    for t in real:
        t.join(15)
    peak = peak_rss_kb(proc.pid)
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = "hung on SIGTERM"
    crashed = code != 0

    print(f"k3 serve soak: {args.seconds:.0f} s, {args.slow} slow clients (a header line "
          f"every 1-2 s), 1 header flood, 4 real clients")
    for kind in ("health", "chat"):
        v = stats.latency[kind]
        print(f"  {kind:6}: {len(v)} answered, {stats.failed[kind]} failed; "
              f"p50 {percentile(v, 50) * 1000:.1f} ms, p99 {percentile(v, 99) * 1000:.1f} ms, "
              f"max {max(v, default=float('nan')) * 1000:.1f} ms")
    print("  hostile connections ended with: " +
          ", ".join(f"{k}: {n}" for k, n in sorted(stats.statuses.items())))
    print(f"  server peak RSS {peak / 1024:.1f} MB; exit on SIGTERM: {code}; "
          f"crashes: {1 if crashed else 0}")
    return 1 if crashed or stats.failed["health"] or stats.failed["chat"] else 0


if __name__ == "__main__":
    sys.exit(main())
