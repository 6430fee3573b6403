#!/usr/bin/env python3
"""Pillow's resampling as the C++ preprocessing implements it (engine/src/vision/
ImageResize.cpp), checked bit for bit against the installed Pillow on random images.

vision.md marks Pillow's kernel details "from memory, verify"; this is the verification.
What it establishes (Pillow 9.4.0, python3-pil on Debian 12):
  * BICUBIC is separable, horizontal pass first, each pass skipped when that size does
    not change; kernel a = -0.5 on [-2, 2], support widened by the downscale factor
    (built-in antialias), centre (x + 0.5) * scale, window [int(c - s + 0.5),
    int(c + s + 0.5)) clipped to the image, weights normalised by their sequential sum
    in double, then fixed point with 22 fraction bits rounded half away from zero; each
    pass accumulates in integers from 2^21 and clips to 0..255 (8-bit between passes).
  * RGBA and LA resize premultiplied: c' = muldiv255(c, a) with muldiv255(a, b) =
    ((a b + 128) >> 8 + a b + 128) >> 8, and back with c = min(255, 255 c' / a) (integer
    division) unless a is 0 or 255.
  * P and 1 resize NEAREST: source index int(x0) with x0 starting at (in / out) * 0.5 and
    ADVANCED by in / out per output pixel (an accumulated double, not a product).
usage: pillow_resample.py   (prints one line per check, exits 1 on a mismatch)
"""

import math
import sys

import numpy as np
from PIL import Image

PRECISION_BITS = 22


def bicubic(x):
    a = -0.5
    x = abs(x)
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    if x < 2.0:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


def coefficients(in_size, out_size):
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = 2.0 * filterscale
    out = []
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(0, int(center - support + 0.5))
        xmax = min(in_size, int(center + support + 0.5)) - xmin
        k = [bicubic((x + xmin - center + 0.5) / filterscale) for x in range(xmax)]
        total = 0.0
        for v in k:
            total += v
        if total != 0.0:
            k = [v / total for v in k]
        out.append((xmin, [int(-0.5 + v * (1 << PRECISION_BITS)) if v < 0
                           else int(0.5 + v * (1 << PRECISION_BITS)) for v in k]))
    return out


def resample_axis(arr, out_size, axis):
    a = np.moveaxis(arr.astype(np.int64), axis, 0)
    out = np.zeros((out_size,) + a.shape[1:], dtype=np.int64)
    for xx, (xmin, k) in enumerate(coefficients(a.shape[0], out_size)):
        acc = np.full(a.shape[1:], 1 << (PRECISION_BITS - 1), dtype=np.int64)
        for x, kv in enumerate(k):
            acc += a[xmin + x] * kv
        out[xx] = np.where(acc >= (1 << PRECISION_BITS << 8), 255, np.where(acc <= 0, 0, acc >> PRECISION_BITS))
    return np.moveaxis(out, 0, axis).astype(np.uint8)


def bicubic_resize(arr, w, h):
    if arr.shape[1] != w:
        arr = resample_axis(arr, w, 1)
    if arr.shape[0] != h:
        arr = resample_axis(arr, h, 0)
    return arr


def muldiv255(a, b):
    t = a * b + 128
    return ((t >> 8) + t) >> 8


def premultiply(arr):
    a = arr.astype(np.int64)
    out = a.copy()
    out[..., :-1] = muldiv255(a[..., :-1], a[..., -1:])
    return out.astype(np.uint8)


def unpremultiply(arr):
    a = arr.astype(np.int64)
    al = a[..., -1:]
    out = a.copy()
    out[..., :-1] = np.where((al == 0) | (al == 255), a[..., :-1],
                             np.minimum(255, (255 * a[..., :-1]) // np.maximum(al, 1)))
    return out.astype(np.uint8)


def nearest_resize(arr, w, h):
    def table(n_in, n_out):
        step, x0, t = float(n_in) / n_out, float(n_in) / n_out * 0.5, []
        for _ in range(n_out):
            t.append(int(x0))
            x0 += step
        return t
    return arr[np.array(table(arr.shape[0], h))][:, np.array(table(arr.shape[1], w))]


def main():
    rng = np.random.default_rng(1)
    failures = 0

    def sizes(n, top):
        for trial in range(n):
            W, H = (int(v) for v in rng.integers(1, top, 2))
            w, h = (int(v) for v in rng.integers(1, top, 2))
            if trial % 3 == 0:
                w, h = max(1, W // 3), max(1, H * 2 // 7)
            yield trial, W, H, w, h

    def report(name, bad, n):
        nonlocal failures
        failures += bad
        print(f"{'PASS' if bad == 0 else 'FAIL'}  {name}: {n - bad} of {n} random resizes bit-exact")

    bad = n = 0
    for trial, W, H, w, h in sizes(80, 160):
        arr = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
        if trial % 2:  # smooth content too, not only noise
            arr = (np.cumsum(arr.astype(int), axis=1) // (1 + np.arange(W))[None, :, None]).astype(np.uint8)
        want = np.asarray(Image.fromarray(arr).resize((w, h), Image.BICUBIC))
        bad += not np.array_equal(want, bicubic_resize(arr, w, h))
        n += 1
    report("RGB/L BICUBIC", bad, n)
    bad = n = 0
    for trial, W, H, w, h in sizes(80, 120):
        C = 4 if trial % 2 == 0 else 2
        arr = rng.integers(0, 256, (H, W, C), dtype=np.uint8)
        if trial % 4 < 2:
            arr[..., -1] = rng.choice([0, 255, 128, 7], (H, W))
        want = np.asarray(Image.fromarray(arr, "RGBA" if C == 4 else "LA").resize((w, h), Image.BICUBIC))
        bad += not np.array_equal(want, unpremultiply(bicubic_resize(premultiply(arr), w, h)))
        n += 1
    report("RGBA/LA BICUBIC (premultiplied)", bad, n)
    bad = n = 0
    for trial, W, H, w, h in sizes(200, 400):
        idx = rng.integers(0, 256, (H, W), dtype=np.uint8)
        im = Image.fromarray(idx, "L").convert("P")
        im.putpalette(list(range(256)) * 3)
        bad += not np.array_equal(np.asarray(im.resize((w, h), Image.BICUBIC)), nearest_resize(idx, w, h))
        n += 1
    report("P: BICUBIC asked, NEAREST done", bad, n)
    print(f"Pillow {Image.__version__}: {failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
