#!/usr/bin/env python3
"""Plain-PyTorch reference of Kimi K3's image input: preprocessing, the MoonViT tower
and the PatchMergerMLPV2 projector, and the language model fed projected rows in place
of <|media_pad|>.

Written from /work/shared/reference/vision.md (sections 3-6); nothing is copied from
any port. Preprocessing is Pillow itself (Image.open, Image.resize BICUBIC, convert);
pillow_resample.py checks, bit for bit, the description of Pillow's resampling that the
C++ preprocessing implements.

Numerics follow the engine's contract (k3_reference.py), not the official bf16 run:
activations are float32 and every dot product is accumulated in float64 and rounded
once. Two bf16 roundings of the official path are kept because the model was trained
with them at the input: the pixels are rounded to bf16 before the patch embedding (the
official code casts them to the tower dtype). Transcendentals (cos, sin, exp, tanh, erf)
are evaluated in float64 and rounded once to float32 (correctly rounded, as the
engine's math functions are).

Order of the tower (vision.md section 4): patch embedding (a [C, 588] product of each
patch in (c, ky, kx) order), + the learned position grid (bilinearly interpolated,
align_corners False, when the image grid differs), then per block
  x += wo(attention(rope(wqkv(rmsnorm0(x)))))    block-diagonal per image, scale 1/sqrt(d)
  x += fc1(gelu_tanh(fc0(rmsnorm1(x))))
then final_layernorm (an RMSNorm), the 2x2 merge (row-major sub-patches, concatenated)
and the projector: proj.2(gelu_erf(proj.0(x))) then post_norm (RMSNorm eps 1e-5).
"""

import math
import os

import numpy as np
import torch
import torch.nn.functional as F

import k3_reference as ref

PATCH = 14
MERGE = 2
SIDE_LIMIT = 512  # patches on one side (patch_limit_on_one_side)
OFFICIAL_PATCH_LIMIT = 65536  # in_patch_limit of the release
CHESS_SQUARE, CHESS_WHITE, CHESS_GRAY = 8, 255, 180
# The 55 tower RMSNorms are nn.RMSNorm(eps=None): finfo(float32).eps in current torch.
TOWER_EPS = float(np.finfo(np.float32).eps)
PROJECTOR_EPS = 1e-5
ROPE_THETA = 10000.0

MEDIA_BEGIN, MEDIA_CONTENT, MEDIA_END, MEDIA_PAD = (
    "<|media_begin|>", "<|media_content|>", "<|media_end|>", "<|media_pad|>")


# ----------------------------------------------------------------- preprocessing

def navit_size(W, H, patch_limit=OFFICIAL_PATCH_LIMIT):
    """(new_w, new_h, pad_w, pad_h): scale never above 1, in Python doubles (section 6)."""
    s1 = math.sqrt(patch_limit / (max(1, W // PATCH) * max(1, H // PATCH)))
    s2 = SIDE_LIMIT * PATCH / W
    s3 = SIDE_LIMIT * PATCH / H
    scale = min(1.0, s1, s2, s3)
    new_w = min(max(1, int(W * scale)), SIDE_LIMIT * PATCH)
    new_h = min(max(1, int(H * scale)), SIDE_LIMIT * PATCH)
    step = PATCH * MERGE
    return new_w, new_h, (step - new_w % step) % step, (step - new_h % step) % step


def has_alpha(img):
    return "A" in img.getbands() or "transparency" in img.info


def chessboard(w, h):
    y, x = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    gray = ((y // CHESS_SQUARE + x // CHESS_SQUARE) % 2) == 1
    return np.where(gray, CHESS_GRAY, CHESS_WHITE).astype(np.float32)[..., None]


def preprocess(img, patch_limit=OFFICIAL_PATCH_LIMIT):
    """PIL image (as decoded, no EXIF transpose) -> (canvas uint8 [Hp, Wp, 3], info).
    Resize in the native mode (Pillow resizes P and 1 NEAREST, RGBA/LA premultiplied),
    then alpha over the chessboard (float32, truncated), then zero padding right/bottom."""
    from PIL import Image
    W, H = img.size
    new_w, new_h, pad_w, pad_h = navit_size(W, H, patch_limit)
    if (new_w, new_h) != (W, H):
        img = img.resize((new_w, new_h), Image.BICUBIC)
    if has_alpha(img):
        rgba = np.asarray(img.convert("RGBA")).astype(np.float32)
        alpha = rgba[..., 3:4] / np.float32(255)
        rgb = (alpha * rgba[..., :3] + (np.float32(1) - alpha) * chessboard(new_w, new_h)).astype(np.uint8)
    else:
        rgb = np.asarray(img.convert("RGB"))
    canvas = np.zeros((new_h + pad_h, new_w + pad_w, 3), dtype=np.uint8)
    canvas[:new_h, :new_w] = rgb
    grid = (1, (new_h + pad_h) // PATCH, (new_w + pad_w) // PATCH)
    return canvas, {"size": [W, H], "resized": [new_w, new_h], "padded": [new_w + pad_w, new_h + pad_h],
                    "grid_thw": list(grid), "tokens": grid[1] * grid[2] // (MERGE * MERGE)}


def normalize(canvas):
    """((x / 255.0) as float32 - 0.5) * 2: the division in float64, the rest in float32."""
    return ((canvas.astype(np.float64) / 255.0).astype(np.float32) - np.float32(0.5)) * np.float32(2.0)


def patchify(pixels):
    """[H, W, 3] -> [gh*gw, 3, 14, 14]: patches row-major, each CHW."""
    H, W, C = pixels.shape
    gh, gw = H // PATCH, W // PATCH
    p = pixels.reshape(gh, PATCH, gw, PATCH, C).transpose(0, 2, 4, 1, 3)
    return np.ascontiguousarray(p.reshape(gh * gw, C, PATCH, PATCH))


def image_prompt(W, H):
    """One <|media_pad|> per image; the model expands it to the image's rows."""
    return f"{MEDIA_BEGIN}image {W}x{H}{MEDIA_CONTENT}{MEDIA_PAD}{MEDIA_END}"


# ----------------------------------------------------------------------- config

class VisionConfig:
    def __init__(self, raw):
        v = raw["vision_config"]
        self.hidden = v["vt_hidden_size"]
        self.qkv = v["qkv_hidden_size"]
        self.heads = v["vt_num_attention_heads"]
        self.head_dim = self.qkv // self.heads
        self.inter = v["vt_intermediate_size"]
        self.layers = v["vt_num_hidden_layers"]
        self.pos_h = v["init_pos_emb_height"]
        self.pos_w = v["init_pos_emb_width"]
        self.text_hidden = v["text_hidden_size"]
        self.projector_eps = v.get("projector_ln_eps", PROJECTOR_EPS)
        if v.get("pos_emb_interpolation_mode", "bilinear") != "bilinear":
            raise ValueError("only bilinear position-embedding interpolation is implemented")
        if self.head_dim % 4 or self.qkv % self.heads:
            raise ValueError("head_dim must be a multiple of 4")


VT = "vision_tower."
MP = "mm_projector."


def vision_tensor_plan(raw):
    """(name, shape, init) of the 2 + 6 L + 1 + 3 tensors, in checkpoint order."""
    c = VisionConfig(raw)
    C = c.hidden
    yield VT + "patch_embed.proj.weight", [C, 3, PATCH, PATCH], ("linear", 1.0)
    yield VT + "patch_embed.pos_emb.weight", [c.pos_h, c.pos_w, C], ("randn", 0.5)
    for i in range(c.layers):
        b = f"{VT}encoder.blocks.{i}."
        yield b + "norm0.weight", [C], ("norm",)
        yield b + "wqkv.weight", [3 * c.qkv, C], ("linear", 1.0)
        yield b + "wo.weight", [C, c.qkv], ("linear", 1.0)
        yield b + "norm1.weight", [C], ("norm",)
        yield b + "mlp.fc0.weight", [c.inter, C], ("linear", 1.5)
        yield b + "mlp.fc1.weight", [C, c.inter], ("linear", 1.0)
    yield VT + "encoder.final_layernorm.weight", [C], ("norm",)
    yield MP + "proj.0.weight", [4 * C, 4 * C], ("linear", 1.5)
    yield MP + "proj.2.weight", [c.text_hidden, 4 * C], ("linear", 1.0)
    yield MP + "post_norm.weight", [c.text_hidden], ("norm",)


# -------------------------------------------------------------------- the tower

def to_bf16(x):
    return x.to(torch.bfloat16).float()


def gelu_tanh(x):
    d = x.double()
    return (0.5 * d * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (d + 0.044715 * d * d * d)))).float()


def gelu_erf(x):
    d = x.double()
    return (0.5 * d * (1.0 + torch.erf(d / math.sqrt(2.0)))).float()


def bilinear_axis(n_in, n_out):
    """Source rows and weights of PyTorch's bilinear, align_corners False: src = (d + 0.5)
    * (in / out) - 0.5 in float32, clamped below at 0 (the clamp checked against torch in
    check_bilinear), i1 = i0 + 1 except at the last row."""
    scale = torch.tensor(n_in, dtype=torch.float32) / torch.tensor(n_out, dtype=torch.float32)
    src = scale * (torch.arange(n_out, dtype=torch.float32) + 0.5) - 0.5
    src = torch.clamp(src, min=0.0)
    i0 = src.long()
    i1 = torch.where(i0 < n_in - 1, i0 + 1, i0)
    l1 = src - i0.float()
    return i0, i1, 1.0 - l1, l1


def bilinear(grid, h, w):
    """grid [H, W, C] -> [h, w, C] in a stated order: a0 (b0 g00 + b1 g01) + a1 (b0 g10 + b1 g11).
    torch's own kernels differ from each other in the last bit (its channels-last and
    contiguous paths disagree), so the reference fixes one order."""
    y0, y1, a0, a1 = bilinear_axis(grid.shape[0], h)
    x0, x1, b0, b1 = bilinear_axis(grid.shape[1], w)
    a0, a1, b0, b1 = a0[:, None, None], a1[:, None, None], b0[None, :, None], b1[None, :, None]
    r0, r1 = grid[y0], grid[y1]
    return a0 * (b0 * r0[:, x0] + b1 * r0[:, x1]) + a1 * (b0 * r1[:, x0] + b1 * r1[:, x1])


def check_bilinear(trials=60):
    """The stated order against F.interpolate: a last-bit difference only (a wrong clamp
    or index would show at the scale of the values). Returns the worst |diff| / max|x|."""
    gen = torch.Generator().manual_seed(5)
    worst = 0.0
    for t in range(trials):
        H, W = (int(v) for v in torch.randint(1, 12, (2,), generator=gen))
        h, w = (int(v) for v in torch.randint(1, 30, (2,), generator=gen))
        g = torch.randn(H, W, 4, generator=gen)
        want = F.interpolate(g.permute(2, 0, 1)[None].contiguous(), size=(h, w), mode="bilinear",
                             align_corners=False)[0].permute(1, 2, 0)
        worst = max(worst, float((want - bilinear(g, h, w)).abs().max() / g.abs().max()))
    # Each order rounds 7 times at magnitudes <= max|x| (half an ulp each): 7 ulp apart at most.
    if worst > 7 * 2.0 ** -23:
        raise SystemExit(f"bilinear differs from F.interpolate by {worst:.3g} of max |x|")
    return worst


def pos_embedding(weight, h, w):
    """[h*w, C]: the learned grid as is at its own size, else bilinear (no antialias)."""
    if (h, w) == tuple(weight.shape[:2]):
        return weight.reshape(h * w, -1)
    return bilinear(weight, h, w).reshape(h * w, -1)


def rope_cos_sin(h, w, head_dim):
    """cos, sin [h*w, head_dim/2]: pair 2i turns by x * freq_i, pair 2i+1 by y * freq_i
    (x = column, y = row: width first), freq_i = 10000^(-4i/head_dim) rounded to float32."""
    n = head_dim // 4
    freqs = torch.tensor([1.0 / ROPE_THETA ** (4.0 * i / head_dim) for i in range(n)],
                         dtype=torch.float64).float()
    pos = torch.arange(h * w)
    xs, ys = (pos % w).float(), (pos // w).float()
    ax, ay = torch.outer(xs, freqs), torch.outer(ys, freqs)  # float32 products
    ang = torch.stack([ax, ay], dim=-1).reshape(h * w, 2 * n)
    return torch.cos(ang.double()).float(), torch.sin(ang.double()).float()


def apply_rope(x, cos, sin):
    """x [L, heads, d]; adjacent pairs (2j, 2j+1) rotated as a complex number."""
    a, b = x[..., 0::2], x[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    out = torch.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def attention(q, k, v, scale_div):
    """One image, all heads: q,k,v [L, heads, d]. Scores in float64 rounded once, divided
    by sqrt(d) in float32; softmax with float32 exps summed in float64; p.v in float64."""
    s = torch.einsum("qhd,khd->hqk", q.double(), k.double()).float() / scale_div
    e = torch.exp((s - s.max(dim=-1, keepdim=True).values).double()).float()
    p = (e.double() / e.double().sum(dim=-1, keepdim=True)).float()
    return torch.einsum("hqk,khd->qhd", p.double(), v.double()).float()


class VisionTower:
    def __init__(self, raw_config, tensors, tower_eps=TOWER_EPS):
        self.c = VisionConfig(raw_config)
        self.eps = tower_eps
        self.t = {n: tensors[n] for n, _, _ in vision_tensor_plan(raw_config)}

    def tower(self, pixel_values, grids):
        """pixel_values float32 [L, 3, 14, 14]; grids [(1, h, w)] -> rows [L, C]."""
        c, T = self.c, self.t
        x = to_bf16(torch.as_tensor(pixel_values)).reshape(-1, 3 * PATCH * PATCH)
        x = ref.linear(x, T[VT + "patch_embed.proj.weight"].reshape(c.hidden, -1))
        spans, start = [], 0
        for (_, h, w) in grids:
            spans.append((start, h, w))
            start += h * w
        if start != x.shape[0]:
            raise ValueError(f"grids cover {start} patches, pixel_values has {x.shape[0]}")
        pos = torch.cat([pos_embedding(T[VT + "patch_embed.pos_emb.weight"], h, w) for _, h, w in spans])
        x = x + pos
        ropes = [rope_cos_sin(h, w, c.head_dim) for _, h, w in spans]
        scale_div = torch.tensor(math.sqrt(c.head_dim), dtype=torch.float32)
        for i in range(c.layers):
            b = f"{VT}encoder.blocks.{i}."
            qkv = ref.linear(ref.rms_norm(x, T[b + "norm0.weight"], self.eps), T[b + "wqkv.weight"])
            qkv = qkv.reshape(-1, 3, c.heads, c.head_dim)
            att = torch.empty(x.shape[0], c.heads, c.head_dim)
            for (s0, h, w), (cos, sin) in zip(spans, ropes):
                q = apply_rope(qkv[s0:s0 + h * w, 0], cos, sin)
                k = apply_rope(qkv[s0:s0 + h * w, 1], cos, sin)
                att[s0:s0 + h * w] = attention(q, k, qkv[s0:s0 + h * w, 2], scale_div)
            x = x + ref.linear(att.reshape(-1, c.qkv), T[b + "wo.weight"])
            hmid = gelu_tanh(ref.linear(ref.rms_norm(x, T[b + "norm1.weight"], self.eps), T[b + "mlp.fc0.weight"]))
            x = x + ref.linear(hmid, T[b + "mlp.fc1.weight"])
        return ref.rms_norm(x, T[VT + "encoder.final_layernorm.weight"], self.eps), spans

    def merge(self, rows, spans):
        """sd2_tpool for t = 1: [(h/2)(w/2), 4C], sub-patches (0,0),(0,1),(1,0),(1,1)."""
        out = []
        for s0, h, w in spans:
            g = rows[s0:s0 + h * w].reshape(h // 2, 2, w // 2, 2, -1).permute(0, 2, 1, 3, 4)
            out.append(g.reshape((h // 2) * (w // 2), -1))
        return torch.cat(out)

    def project(self, merged):
        T = self.t
        y = ref.linear(gelu_erf(ref.linear(merged, T[MP + "proj.0.weight"])), T[MP + "proj.2.weight"])
        return ref.rms_norm(y, T[MP + "post_norm.weight"], self.c.projector_eps)

    def forward(self, pixel_values, grids):
        rows, spans = self.tower(pixel_values, grids)
        merged = self.merge(rows, spans)
        return rows, merged, self.project(merged)


# ----------------------------------------------------- the language model with images

def forward_embedded(model, ids, pad_id, image_rows):
    """Logits [T, vocab] of `ids` (every pad already expanded), the pad positions fed
    `image_rows` (in order) instead of the pad's embedding."""
    cfg = model.cfg
    with torch.no_grad():
        h = model.embed[torch.as_tensor(ids, dtype=torch.long)].clone()
        where = [i for i, t in enumerate(ids) if t == pad_id]
        if len(where) != image_rows.shape[0]:
            raise ValueError(f"{len(where)} pad positions for {image_rows.shape[0]} image rows")
        h[where] = image_rows
        blocks, states = [], [None] * len(model.layers)
        for L, lw in enumerate(model.layers):
            h, blocks, states[L] = ref.decoder_layer(h, blocks, lw, cfg, L, states[L])
        h = ref.attn_res(torch.stack(blocks + [h]), model.out_res_proj, model.out_res_norm, cfg.rms_norm_eps)
        return ref.linear(ref.rms_norm(h, model.norm, cfg.rms_norm_eps), model.lm_head)


def expand_pads(ids, pad_id, counts):
    out, k = [], 0
    for t in ids:
        if t == pad_id:
            out.extend([pad_id] * counts[k])
            k += 1
        else:
            out.append(t)
    if k != len(counts):
        raise ValueError(f"{k} pads in the prompt for {len(counts)} images")
    return out


def load_image(path):
    from PIL import Image
    img = Image.open(path)
    img.load()
    return img


if __name__ == "__main__":
    import sys
    from PIL import Image
    for p in sys.argv[1:]:
        canvas, info = preprocess(load_image(p))
        print(os.path.basename(p), info)
