#!/usr/bin/env python3
"""Splits a `perf record -g` profile of bench_prefill into kernel x caller CPU seconds.

    perf script -i FILE -F tid,time,ip,sym | perf_by_kernel.py HZ

Samples up to the last one under k3::Model::load are the load and are left out. Each
remaining sample counts 1/HZ CPU seconds for (leaf symbol, innermost k3::model caller).
"""
import collections
import re
import sys

hz = float(sys.argv[1])
samples = []  # (time, [symbols leaf first])
cur = None
for line in sys.stdin:
    line = line.rstrip("\n")
    if not line.strip():
        if cur:
            samples.append(cur)
        cur = None
        continue
    if cur is None:
        m = re.match(r"\s*(\d+)\s+([\d.]+):", line)
        cur = (float(m.group(2)), []) if m else None
        continue
    parts = line.strip().split(None, 1)
    cur[1].append(parts[1] if len(parts) > 1 else "?")
if cur:
    samples.append(cur)

load_end = max((t for t, s in samples if any("Model::load" in x for x in s)), default=0.0)
run = [(t, s) for t, s in samples if t > load_end]


def leaf(stack):
    sym = stack[0] if stack else "?"
    if "libgomp" in sym or sym.startswith("[unknown]") or re.match(r"^[0-9a-f]+$", sym.split()[0]):
        return "OpenMP runtime (wait/spin, unresolved)"
    sym = re.sub(r"\(.*$", "", sym).strip()
    sym = re.sub(r"<.*>", "<>", sym)
    return sym


def caller(stack):
    for s in stack:
        m = re.search(r"k3::model::(?:\(anonymous namespace\)::)?(\w+)", s)
        if m:
            return m.group(1)
        m = re.search(r"k3::(\w+Forward|forward\w*)", s)
        if m:
            return m.group(1)
    return "-"


by_leaf = collections.Counter(leaf(s) for _, s in run)
by_pair = collections.Counter((leaf(s), caller(s)) for _, s in run)
span = (run[-1][0] - run[0][0]) if run else 0.0
total = len(run) / hz
print(f"after load: {len(run)} samples = {total:.2f} CPU s over {span:.2f} s wall")
print("\n| leaf symbol | CPU s | share |\n|---|---|---|")
for k, n in by_leaf.most_common(20):
    print(f"| {k} | {n / hz:.2f} | {100.0 * n / len(run):.1f}% |")
print("\n| leaf symbol | caller | CPU s | share |\n|---|---|---|---|")
for (k, c), n in by_pair.most_common(30):
    print(f"| {k} | {c} | {n / hz:.2f} | {100.0 * n / len(run):.1f}% |")
