#!/usr/bin/env python3
"""Write the image-input fixtures: tests/fixtures/vision/

  images/             small test images (PNG RGB/RGBA/P with tRNS/L/LA/RGB with a colour key,
                      JPEG colour and grey, lossy WebP, 1x1), made here with Pillow
  preprocess.json     per (image, patch limit): sizes, grid, tokens and the padded uint8
                      RGB canvas (canvas/*.rgb) Pillow gives: what the C++ must match bit for bit
  k3_tiny_vl/         a tiny K3 checkpoint WITH a vision tower and projector in the released
                      names (vision_tower.*, mm_projector.*, in their own shard) and
                      vision_config; vision_expected.json + *.f32: tower rows, merged rows,
                      projector rows for one and two images, and the language model's logits
                      with the images' rows at the <|media_pad|> positions

Deterministic; run from anywhere with Debian's python3 (python3-torch, python3-pil).
usage: make_vision_fixtures.py
"""

import glob
import json
import os
import sys

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3_checkpoint as ck  # noqa: E402
import k3_reference as ref  # noqa: E402
import k3_vision as vis  # noqa: E402

OUT = os.path.join(ck.REPO, "tests", "fixtures", "vision")
IMAGES = os.path.join(OUT, "images")

# The language model of k3_tiny_bf16's shape, MXFP4 experts (as released).
TEXT = {
    "hidden_size": 32, "num_hidden_layers": 3,
    "num_attention_heads": 2, "q_lora_rank": 16, "kv_lora_rank": 16,
    "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
    "num_experts": 4, "num_experts_per_token": 2, "num_shared_experts": 1,
    "routed_expert_hidden_size": 24, "moe_intermediate_size": 20,
    "intermediate_size": 48, "attn_res_block_size": 2,
}
KDA = {"num_heads": 2, "head_dim": 16, "full_attn_layers": [2]}
# The release's vision_config keys with tiny values: the attention width (48 = 3 x 16)
# differs from the hidden size (32), as K3's 1536 vs 1024; the learned position grid is
# NOT square (6 high, 5 wide) so every image's grid is interpolated.
VISION = {
    "_attn_implementation": "flash_attention_2", "activation_func": "gelu_pytorch_tanh",
    "attn_bias": False, "init_pos_emb_height": 6, "init_pos_emb_width": 5,
    "init_pos_emb_time": 4, "linear_bias": False, "merge_kernel_size": [2, 2],
    "merge_type": "sd2_tpool", "mlp_type": "mlp2", "mm_hidden_size": 32,
    "mm_projector_type": "patchmergerv2", "norm_type": "rmsnorm",
    "patch_embed_proj_bias": False, "patch_size": 14,
    "pos_emb_interpolation_mode": "bilinear", "pos_emb_type": "divided_fixed",
    "projector_hidden_act": "gelu", "projector_ln_eps": 1e-05, "qkv_hidden_size": 48,
    "text_hidden_size": 32, "vt_hidden_size": 32, "vt_intermediate_size": 64,
    "vt_num_attention_heads": 3, "vt_num_hidden_layers": 2,
}


# --------------------------------------------------------------------- test images

def smooth(rng, h, w, c):
    """Gradients plus noise: content a resize must really filter."""
    y, x = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    base = np.stack([255 * x, 255 * y, 255 * (1 - x) * y, 128 + 100 * np.sin(9 * x * y)][:c], -1)
    return np.clip(base + rng.normal(0, 30, (h, w, c)), 0, 255).astype(np.uint8)


def make_images():
    os.makedirs(IMAGES, exist_ok=True)
    rng = np.random.default_rng(33)
    made = {}

    def save(name, img, **kw):
        img.save(os.path.join(IMAGES, name), **kw)
        made[name] = img

    save("rgb_97x61.png", Image.fromarray(smooth(rng, 61, 97, 3), "RGB"))
    rgba = smooth(rng, 37, 50, 4)
    rgba[:, :10, 3] = 0                       # fully transparent strip: colour hidden
    rgba[:, 10:14, 3] = 128                   # half
    rgba[:12, :, 3] = 255
    rgba[:, :10, :3] = [250, 0, 250]          # must not bleed through the resize
    save("rgba_50x37.png", Image.fromarray(rgba, "RGBA"))
    pal = Image.fromarray((rng.integers(0, 16, (33, 45)) * 16).astype(np.uint8), "L").convert("P")
    pal.putpalette([int(v) for v in rng.integers(0, 256, 768)])
    save("palette_45x33.png", pal, transparency=bytes([0, 128] + [255] * 254))
    save("grey_40x90.png", Image.fromarray(smooth(rng, 90, 40, 1)[..., 0], "L"))
    la = smooth(rng, 29, 31, 2)
    la[::3, :, 1] = 0
    save("la_31x29.png", Image.fromarray(la, "LA"))
    key = smooth(rng, 20, 30, 3)
    key[5:9, 5:20] = [10, 20, 30]
    save("rgbkey_30x20.png", Image.fromarray(key, "RGB"), transparency=(10, 20, 30))
    save("photo_83x67.jpg", Image.fromarray(smooth(rng, 67, 83, 3), "RGB"), quality=90)
    save("grey_35x30.jpg", Image.fromarray(smooth(rng, 30, 35, 1)[..., 0], "L"), quality=85)
    save("photo_60x44.webp", Image.fromarray(smooth(rng, 44, 60, 3), "RGB"), quality=80)
    save("rgb_1x1.png", Image.fromarray(np.array([[[200, 100, 50]]], np.uint8), "RGB"))
    # 100000 x 100: the float detail of the size plan (7167 wide, not 7168); stripes so
    # the 14x downscale has something to filter.
    wide = np.zeros((100, 100000, 3), np.uint8)
    wide[:, :, 0] = (np.arange(100000) * 7 % 256)[None, :]
    wide[::2, :, 1] = 255
    save("wide_100000x100.png", Image.fromarray(wide, "RGB"), optimize=True)
    return sorted(made)


# The resize cases: (image, patch limit). Limits below the image's patch count force a
# bicubic (or, for P, nearest) downscale; 65536 is the release's (no resize, padding only).
PRE_CASES = [
    ("rgb_97x61.png", 65536), ("rgb_97x61.png", 12), ("rgb_97x61.png", 5),
    ("rgba_50x37.png", 65536), ("rgba_50x37.png", 4),
    ("palette_45x33.png", 65536), ("palette_45x33.png", 3),
    ("grey_40x90.png", 7), ("la_31x29.png", 2), ("rgbkey_30x20.png", 1),
    ("photo_83x67.jpg", 65536), ("photo_83x67.jpg", 9), ("grey_35x30.jpg", 65536),
    ("photo_60x44.webp", 6), ("rgb_1x1.png", 65536), ("wide_100000x100.png", 65536),
]
# Canvases larger than this are recorded by their FNV-1a 64 hash only (the wide image's
# is 7168 x 28 x 3 = 602 KB).
MAX_CANVAS_FILE = 65536


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def preprocess_fixtures():
    cases = []
    os.makedirs(os.path.join(OUT, "canvas"), exist_ok=True)
    for stale in glob.glob(os.path.join(OUT, "canvas", "*")):
        os.remove(stale)
    for name, limit in PRE_CASES:
        canvas, info = vis.preprocess(vis.load_image(os.path.join(IMAGES, name)), limit)
        case = {"image": name, "patch_limit": limit, **info}
        if canvas.nbytes <= MAX_CANVAS_FILE:
            case["canvas"] = f"canvas/{os.path.splitext(name)[0]}_{limit}.rgb"
            canvas.tofile(os.path.join(OUT, case["canvas"]))
        else:
            case["canvas_fnv1a64"] = f"{fnv1a64(canvas.tobytes()):016x}"
        cases.append({**case,
                      "mode": vis.load_image(os.path.join(IMAGES, name)).mode})
    ck.dump_json(os.path.join(OUT, "preprocess.json"), {
        "generator": "tests/reference/make_vision_fixtures.py",
        "pillow": Image.__version__, "cases": cases})
    return cases


# ------------------------------------------------------------------ the checkpoint

def vision_runs(cfg_json, seed):
    source = ck.RandomSource(seed)
    out = []
    for name, shape, init in vis.vision_tensor_plan(cfg_json):
        w = np.asarray(source(name, shape, init), dtype=np.float32)
        out.append((name, "BF16", shape, ref.f32_to_bf16_bits(w)))
    return out


def build_checkpoint(out_dir):
    tok = ck.train_tokenizer(200)
    cfg_json = ck.make_config(TEXT, KDA, tok, quantized=True)
    cfg_json["vision_config"] = dict(VISION)
    cfg_json["media_placeholder_token_id"] = tok.specials["<|media_pad|>"]
    runs = ck.build_runs(cfg_json, ck.RandomSource(777))
    plan = ck.shard_plan_auto(runs, 2) + [["vision"]]  # the tower and projector: shard 3
    runs["vision"] = vision_runs(cfg_json, 778)
    ck.write_checkpoint(out_dir, cfg_json, runs, plan, tok)
    ck.verify_layout(out_dir)
    ck.verify_roundtrip(out_dir, runs, tok)
    return cfg_json, tok


def write_f32(path, t):
    np.ascontiguousarray(t.numpy(), dtype="<f4").tofile(path)


def batch(names_limits):
    pixels, grids, infos = [], [], []
    for name, limit in names_limits:
        canvas, info = vis.preprocess(vis.load_image(os.path.join(IMAGES, name)), limit)
        pixels.append(vis.patchify(vis.normalize(canvas)))
        grids.append(tuple(info["grid_thw"]))
        infos.append(info)
    return np.concatenate(pixels), grids, infos


# (name, images with their patch limits, user text): one image, then two in one batch
# (block-diagonal attention, one grid up- and one down-interpolated).
TOWER_CASES = [
    ("one", [("photo_83x67.jpg", 65536)], "What is in this picture?"),
    ("two", [("rgb_97x61.png", 65536), ("rgba_50x37.png", 4)], "Compare the two images."),
]
N_GEN = 8


def tower_fixtures(out_dir, cfg_json, tok):
    tensors = ref.load_checkpoint_tensors(out_dir)
    tower = vis.VisionTower(cfg_json, tensors)
    model = ref.K3Model(ref.K3Config(cfg_json), tensors)
    pad = tok.specials["<|media_pad|>"]
    cases = []
    for stale in glob.glob(os.path.join(out_dir, "vision_*.f32")):
        os.remove(stale)
    for name, images, text in TOWER_CASES:
        pixels, grids, infos = batch(images)
        with torch.no_grad():
            rows, merged, projected = tower.forward(pixels, grids)
        prompts = [vis.image_prompt(*info["size"]) for info in infos]
        content = [{"type": "image"} for _ in images] + [{"type": "text", "text": text}]
        prompt_text = ck.render_chat([{"role": "user", "content": content}], thinking=False,
                                     image_prompts=prompts)
        ids = tok.encode(prompt_text)
        if tok.decode(ids) != prompt_text or ids.count(pad) != len(images):
            raise SystemExit(f"{name}: the prompt does not round-trip with one pad per image")
        counts = [info["tokens"] for info in infos]
        full = vis.expand_pads(ids, pad, counts)
        logits = vis.forward_embedded(model, full, pad, projected)
        greedy, seq = [], list(full)
        for _ in range(N_GEN):  # recomputed from scratch each step: the plain definition
            nxt = int(torch.argmax(vis.forward_embedded(model, seq, pad, projected)[-1] if seq != full
                                   else logits[-1]))
            greedy.append(nxt)
            seq.append(nxt)
        files = {}
        for key, t in (("pixel_values", torch.from_numpy(pixels)), ("tower_rows", rows),
                       ("merged_rows", merged), ("projector_rows", projected),
                       ("last_logits", logits[-1])):
            files[key] = f"vision_{name}_{key}.f32"
            write_f32(os.path.join(out_dir, files[key]), t)
        top2 = torch.topk(logits, 2, dim=-1).values
        cases.append({
            "name": name, "images": [{"image": n, "patch_limit": l, **info}
                                     for (n, l), info in zip(images, infos)],
            "prompt_text": prompt_text, "prompt_ids": ids, "expanded_length": len(full),
            "image_rows": counts, "files": files,
            "teacher_forcing_argmax": [int(a) for a in torch.argmax(logits, dim=-1)],
            "greedy": greedy,
            "min_top2_logit_margin": float((top2[:, 0] - top2[:, 1]).min()),
            "max_abs": {"tower_rows": float(rows.abs().max()),
                        "projector_rows": float(projected.abs().max())},
        })
        print(f"{name}: grids {grids}, {len(full)} positions ({sum(counts)} image rows), "
              f"greedy {greedy}, min top2 margin {cases[-1]['min_top2_logit_margin']:.4f}")
    ck.dump_json(os.path.join(out_dir, "vision_expected.json"), {
        "generator": "tests/reference/make_vision_fixtures.py",
        "torch": torch.__version__, "tower_rms_eps": vis.TOWER_EPS,
        "media_pad_id": pad, "bilinear_vs_torch_worst": vis.check_bilinear(),
        "cases": cases})


def main():
    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    names = make_images()
    cases = preprocess_fixtures()
    print(f"{len(names)} images, {len(cases)} preprocessing cases")
    out_dir = os.path.join(OUT, "k3_tiny_vl")
    cfg_json, tok = build_checkpoint(out_dir)
    tower_fixtures(out_dir, cfg_json, tok)


if __name__ == "__main__":
    main()
