#!/usr/bin/env python3
"""Write tiny Kimi K3 checkpoints in the released file format, plus expected.json.

Each checkpoint under tests/fixtures/tiny/<name>/ has exactly the released tensor
names (prefix language_model.model., head language_model.lm_head.weight), dtypes
(trunk BF16; A_log and e_score_correction_bias F32; routed experts MXFP4 as U8
weight_packed [rows, in/2] + U8 weight_scale [rows, in/32]) and layout (several
model-0000N-of-0000M.safetensors shards, model.safetensors.index.json, a nested
config.json with linear_attn_config and quantization_config inside text_config).
Each layer's non-expert tensors form one contiguous run inside one shard; some
layers' experts sit in another shard.

expected.json is computed by k3_reference.py from the files as written (so the BF16
rounding and the MXFP4 quantisation are what the engine sees too).
first_step_logits.f32 holds the raw little-endian float32 logits of the last prompt
position (what `k3 --dump-logits` writes).

Deterministic (fixed seeds, float32 weights rounded once) and idempotent (rewrites
every file it owns, removes its own stale shards).

usage: make_tiny_checkpoints.py [OUT_DIR]   (default: tests/fixtures/tiny)
"""

import glob
import json
import math
import os
import re
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3_reference as ref  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "fixtures", "tiny"))
N_GEN = 8

# ------------------------------------------------------------------------- specs

SPECS = {
    # 6 layers: K K M K K M (0-based 0..5), dense layer 0 is KDA, AttnRes block 2 gives
    # boundaries at 0, 2, 4: three snapshots, the third block still in progress.
    "tiny": {
        "seed": 1234,
        "text": {
            "hidden_size": 64, "num_hidden_layers": 6, "vocab_size": 512,
            "num_attention_heads": 2, "q_lora_rank": 32, "kv_lora_rank": 32,
            "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
            "num_experts": 16, "num_experts_per_token": 4, "num_shared_experts": 1,
            "routed_expert_hidden_size": 32, "moe_intermediate_size": 32,
            "routed_scaling_factor": 1.0, "intermediate_size": 128,
            "attn_res_block_size": 2,
        },
        "kda": {"num_heads": 2, "head_dim": 16, "full_attn_layers": [3, 6]},
        # shard of each run; "L<n>" = layer n's non-expert run, "E<n>" = its experts
        "shards": [["embed", "L0", "L1", "L2"],
                   ["L3", "E3", "L4", "E4", "L5", "E5", "final"],
                   ["E1", "E2"]],
        "prompt": [1, 17, 42, 99, 256, 3, 77, 400, 12, 5],
        "nan_scale_expert": None,
    },
    # 7 layers: M K K M K K M, so the dense layer 0 is MLA; block 3 -> boundaries 0, 3, 6;
    # 2 shared experts, routed_scaling_factor 2.5, and one expert group whose E8M0 scale
    # byte is 255 (NaN by spec: that group decodes to zero).
    "tiny_alt": {
        "seed": 4321,
        "text": {
            "hidden_size": 64, "num_hidden_layers": 7, "vocab_size": 384,
            "num_attention_heads": 4, "q_lora_rank": 16, "kv_lora_rank": 16,
            "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
            "num_experts": 8, "num_experts_per_token": 2, "num_shared_experts": 2,
            "routed_expert_hidden_size": 64, "moe_intermediate_size": 32,
            "routed_scaling_factor": 2.5, "intermediate_size": 96,
            "attn_res_block_size": 3,
        },
        "kda": {"num_heads": 4, "head_dim": 8, "full_attn_layers": [1, 4, 7]},
        "shards": [["embed", "L0", "L1", "E1", "L2", "E2", "L3", "E3"],
                   ["L4", "E4", "L5", "E5", "L6", "E6", "final"]],
        "prompt": [7, 300, 21, 5, 150, 64, 9, 211],
        "nan_scale_expert": (2, 0, "w1", 3, 1),  # layer, expert, matrix, row, group
    },
}

COMMON_TEXT = {
    "model_type": "kimi_linear", "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
    "mla_use_output_gate": True, "mla_use_nope": True, "moe_renormalize": True,
    "latent_moe_use_norm": True, "first_k_dense_replace": 1, "hidden_act": "situ",
    "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
    "moe_router_activation_func": "sigmoid", "num_expert_group": 1, "topk_group": 1,
    "num_nextn_predict_layers": 0, "max_position_embeddings": 4096,
}


def make_config(spec):
    """The nested released shape: language-model keys in text_config, the KDA keys in
    text_config.linear_attn_config, quantization_config inside text_config."""
    text = dict(COMMON_TEXT)
    text.update(spec["text"])
    n = text["num_hidden_layers"]
    full = spec["kda"]["full_attn_layers"]
    text["linear_attn_config"] = {
        "num_heads": spec["kda"]["num_heads"], "head_dim": spec["kda"]["head_dim"],
        "short_conv_kernel_size": 4, "gate_lower_bound": -5.0,
        "kda_layers": [i for i in range(1, n + 1) if i not in full],
        "full_attn_layers": full, "use_full_rank_gate": True,
    }
    text["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized",
        "config_groups": {"group_0": {
            "targets": ["Linear"], "format": "mxfp4-pack-quantized",
            "weights": {"num_bits": 4, "type": "float", "symmetric": True,
                        "strategy": "group", "group_size": 32, "scale_dtype": "uint8",
                        "dynamic": False},
            "input_activations": None}},
        "ignore": ["language_model.lm_head", "re:.*self_attn.*", "re:.*mlp\\..*",
                   "re:.*shared_experts.*", "re:.*block_sparse_moe\\.gate$",
                   "re:.*routed_expert_(down|up)_proj$"],
    }
    v = text["vocab_size"]
    return {
        "architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
        "bos_token_id": v - 4, "eos_token_id": v - 2, "pad_token_id": v - 1,
        "text_config": text,
    }


# ----------------------------------------------------------------------- weights

class WeightMaker:
    """Seeded random weights of a sensible scale, grouped into named runs."""

    def __init__(self, seed):
        self.gen = torch.Generator().manual_seed(seed)

    def randn(self, *shape, std=1.0):
        return (torch.randn(*shape, generator=self.gen) * std).numpy().astype(np.float32)

    def linear(self, out_f, in_f, gain=1.0):
        return self.randn(out_f, in_f, std=gain / math.sqrt(in_f))

    def norm(self, n):
        return (1.0 + self.randn(n, std=0.1)).astype(np.float32)

    def uniform(self, n, lo, hi):
        return (torch.rand(n, generator=self.gen) * (hi - lo) + lo).numpy().astype(np.float32)


def bf16(name, arr):
    return (name, "BF16", list(arr.shape), ref.f32_to_bf16_bits(arr))


def f32(name, arr):
    return (name, "F32", list(arr.shape), arr.astype(np.float32))


def build_runs(cfg_json, spec):
    """Return {run name: [tensor tuples]} in on-disk order within each run."""
    t = cfg_json["text_config"]
    kda = t["linear_attn_config"]
    E, V = t["hidden_size"], t["vocab_size"]
    H, D, K = kda["num_heads"], kda["head_dim"], kda["short_conv_kernel_size"]
    P = H * D
    MH, dn, dr, dv = t["num_attention_heads"], t["qk_nope_head_dim"], t["qk_rope_head_dim"], t["v_head_dim"]
    Lat, I, NE = t["routed_expert_hidden_size"], t["moe_intermediate_size"], t["num_experts"]
    SI = I * t["num_shared_experts"]
    mla = {i - 1 for i in kda["full_attn_layers"]}
    w = WeightMaker(spec["seed"])
    P_ = ref.PREFIX
    runs = {"embed": [bf16(P_ + "embed_tokens.weight", w.randn(V, E))]}
    for L in range(t["num_hidden_layers"]):
        pre = f"{P_}layers.{L}."
        a = pre + "self_attn."
        run = [bf16(pre + "input_layernorm.weight", w.norm(E)),
               bf16(pre + "post_attention_layernorm.weight", w.norm(E)),
               bf16(pre + "self_attention_res_norm.weight", w.norm(E)),
               bf16(pre + "self_attention_res_proj.weight", w.randn(1, E, std=0.15)),
               bf16(pre + "mlp_res_norm.weight", w.norm(E)),
               bf16(pre + "mlp_res_proj.weight", w.randn(1, E, std=0.15))]
        if L in mla:
            run += [bf16(a + "q_a_proj.weight", w.linear(t["q_lora_rank"], E)),
                    bf16(a + "q_a_layernorm.weight", w.norm(t["q_lora_rank"])),
                    bf16(a + "q_b_proj.weight", w.linear(MH * (dn + dr), t["q_lora_rank"], 2.0)),
                    bf16(a + "kv_a_proj_with_mqa.weight", w.linear(t["kv_lora_rank"] + dr, E, 2.0)),
                    bf16(a + "kv_a_layernorm.weight", w.norm(t["kv_lora_rank"])),
                    bf16(a + "kv_b_proj.weight", w.linear(MH * (dn + dv), t["kv_lora_rank"], 2.0)),
                    bf16(a + "o_proj.weight", w.linear(E, MH * dv)),
                    bf16(a + "g_proj.weight", w.linear(MH * dv, E))]
        else:
            a_log = np.zeros(D, dtype=np.float32)  # shipped head_dim long, tail zero
            a_log[:H] = np.log(w.uniform(H, 1.0, 16.0))
            run += [bf16(a + "q_proj.weight", w.linear(P, E)),
                    bf16(a + "k_proj.weight", w.linear(P, E)),
                    bf16(a + "v_proj.weight", w.linear(P, E)),
                    bf16(a + "g_proj.weight", w.linear(P, E)),
                    bf16(a + "o_proj.weight", w.linear(E, P)),
                    bf16(a + "q_conv1d.weight", w.randn(P, 1, K, std=0.5)),
                    bf16(a + "k_conv1d.weight", w.randn(P, 1, K, std=0.5)),
                    bf16(a + "v_conv1d.weight", w.randn(P, 1, K, std=0.5)),
                    bf16(a + "f_a_proj.weight", w.linear(D, E)),
                    bf16(a + "f_b_proj.weight", w.linear(P, D)),
                    bf16(a + "b_proj.weight", w.linear(H, E)),
                    f32(a + "A_log", a_log),
                    bf16(a + "dt_bias", w.randn(P, std=0.5)),
                    bf16(a + "o_norm.weight", w.norm(D))]
        experts = []
        if L < t["first_k_dense_replace"]:
            run += [bf16(pre + "mlp.gate_proj.weight", w.linear(t["intermediate_size"], E)),
                    bf16(pre + "mlp.up_proj.weight", w.linear(t["intermediate_size"], E, 4.0)),
                    bf16(pre + "mlp.down_proj.weight", w.linear(E, t["intermediate_size"]))]
        else:
            m = pre + "block_sparse_moe."
            run += [bf16(m + "gate.weight", w.linear(NE, E)),
                    f32(m + "gate.e_score_correction_bias", w.randn(NE, std=0.05)),
                    bf16(m + "routed_expert_down_proj.weight", w.linear(Lat, E)),
                    bf16(m + "routed_expert_up_proj.weight", w.linear(E, Lat)),
                    bf16(m + "routed_expert_norm.weight", w.norm(Lat)),
                    bf16(m + "shared_experts.gate_proj.weight", w.linear(SI, E)),
                    bf16(m + "shared_experts.up_proj.weight", w.linear(SI, E, 4.0)),
                    bf16(m + "shared_experts.down_proj.weight", w.linear(E, SI))]
            for e in range(NE):
                for wn, (rows, cols, gain) in (("w1", (I, Lat, 1.0)), ("w2", (Lat, I, 1.0)),
                                               ("w3", (I, Lat, 4.0))):
                    packed, scale = ref.mxfp4_encode(w.linear(rows, cols, gain))
                    bad = spec["nan_scale_expert"]
                    if bad and (L, e, wn) == bad[:3]:
                        scale[bad[3], bad[4]] = 255
                    base = f"{m}experts.{e}.{wn}."
                    experts += [(base + "weight_packed", "U8", list(packed.shape), packed),
                                (base + "weight_scale", "U8", list(scale.shape), scale)]
        runs[f"L{L}"] = run
        if experts:
            runs[f"E{L}"] = experts
    runs["final"] = [bf16(P_ + "norm.weight", w.norm(E)),
                     bf16(P_ + "output_attn_res_norm.weight", w.norm(E)),
                     bf16(P_ + "output_attn_res_proj.weight", w.randn(1, E, std=0.15)),
                     bf16(ref.HEAD_NAME, w.linear(V, E, 3.0))]
    return runs


def write_checkpoint(out_dir, cfg_json, runs, shard_plan):
    os.makedirs(out_dir, exist_ok=True)
    for stale in glob.glob(os.path.join(out_dir, "model-*.safetensors")):
        os.remove(stale)
    planned = [r for s in shard_plan for r in s]
    if sorted(planned) != sorted(runs):
        raise SystemExit(f"shard plan covers {sorted(planned)}, runs are {sorted(runs)}")
    weight_map, total = {}, 0
    m = len(shard_plan)
    for i, run_names in enumerate(shard_plan):
        fname = f"model-{i + 1:05d}-of-{m:05d}.safetensors"
        tensors = [t for r in run_names for t in runs[r]]
        total += ref.write_safetensors(os.path.join(out_dir, fname), tensors)
        for t in tensors:
            weight_map[t[0]] = fname
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")
    dump_json(os.path.join(out_dir, "config.json"), cfg_json)


def verify_layout(out_dir):
    """Each layer's non-expert tensors: one shard, one gap-free byte run (what a trunk
    packer relies on). Expert tensors may live anywhere."""
    with open(os.path.join(out_dir, "model.safetensors.index.json")) as f:
        wmap = json.load(f)["weight_map"]
    headers = {}
    for shard in set(wmap.values()):
        with open(os.path.join(out_dir, shard), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            headers[shard] = json.loads(f.read(n))
    layers = {}
    for name, shard in wmap.items():
        m = re.match(re.escape(ref.PREFIX) + r"layers\.(\d+)\.", name)
        if m and ".experts." not in name:
            layers.setdefault(int(m.group(1)), []).append((shard, name))
    for L, items in sorted(layers.items()):
        shards = {s for s, _ in items}
        if len(shards) != 1:
            raise SystemExit(f"layer {L}: non-expert tensors span shards {sorted(shards)}")
        hdr = headers[shards.pop()]
        spans = sorted(hdr[n]["data_offsets"] for _, n in items)
        for (_, end), (start, _) in zip(spans, spans[1:]):
            if end != start:
                raise SystemExit(f"layer {L}: non-expert run has a gap at byte {end}")


# ---------------------------------------------------------------------- expected

def top2_margin(logits):
    v = torch.topk(logits, 2, dim=-1).values
    return float((v[..., 0] - v[..., 1]).min())


def check_flat_config_reads_the_same(cfg_json, cfg):
    """The flat shape (every key at the top level) must read exactly like the nested one."""
    flat = {k: v for k, v in cfg_json.items() if k != "text_config"}
    flat.update({k: v for k, v in cfg_json["text_config"].items() if k != "linear_attn_config"})
    flat.update(cfg_json["text_config"]["linear_attn_config"])
    if vars(ref.K3Config(flat)) != vars(cfg):
        raise SystemExit("flat config reads differently from the nested one")


def dump_json(path, obj):
    """indent=2, but lists of numbers stay on one line (readable diffs, small files)."""
    text = json.dumps(obj, indent=2)
    text = re.sub(r"\[\s*([-0-9.e+,\s]+?)\s*\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    with open(path, "w") as f:
        f.write(text + "\n")


def compute_expected(out_dir, name, spec):
    model = ref.K3Model.load(out_dir)
    cfg = model.cfg
    with open(os.path.join(out_dir, "config.json")) as f:
        check_flat_config_reads_the_same(json.load(f), cfg)
    prompt = spec["prompt"]
    tf = model.forward_full(prompt)
    first = tf[-1]
    full_gen = ref.greedy_full(model, prompt, N_GEN)
    inc_gen = ref.greedy_incremental(model, prompt, N_GEN)
    if full_gen != inc_gen:
        raise SystemExit(f"{name}: full-sequence {full_gen} != incremental {inc_gen}")
    full_ids = prompt + full_gen
    traces = {L: [] for L, lw in enumerate(model.layers) if "moe" in lw}
    for L, tr in traces.items():
        model.layers[L]["moe"]["trace"] = tr
    tf_all = model.forward_full(full_ids)
    for L in traces:
        model.layers[L]["moe"]["trace"] = None
    # incremental logits for every position, fed one token at a time
    sess = model.session()
    inc_all = torch.cat([sess.step([t]) for t in full_ids])
    inc_diff = float((inc_all - tf_all).abs().max())
    if not torch.equal(tf_all[:-1].argmax(-1)[len(prompt) - 1:], torch.tensor(full_gen)):
        raise SystemExit(f"{name}: teacher forcing over full_ids disagrees with greedy")
    eos = json.load(open(os.path.join(out_dir, "config.json")))["eos_token_id"]
    if eos in full_gen:
        raise SystemExit(f"{name}: greedy continuation hits eos {eos}; pick another seed/prompt")
    if len(set(full_gen)) < 3:
        raise SystemExit(f"{name}: degenerate continuation {full_gen}")
    with open(os.path.join(out_dir, "first_step_logits.f32"), "wb") as f:
        f.write(first.numpy().astype("<f4").tobytes())
    layer_map = "".join("M" if cfg.is_mla(L) else "K" for L in range(cfg.num_hidden_layers))
    fl = first.double()
    return {
        "checkpoint": name,
        "generator": "tests/reference/make_tiny_checkpoints.py (k3_reference.py)",
        "layer_map": layer_map,
        "dense_layers": list(range(cfg.first_k_dense_replace)),
        "attn_res_boundaries": [L for L in range(cfg.num_hidden_layers)
                                if L % cfg.attn_res_block_size == 0],
        "prompt_ids": prompt,
        "teacher_forcing": {
            "argmax": [int(v) for v in tf.argmax(-1)],
            "last_logits_first8": [float(v) for v in first[:8]],
        },
        "greedy": {
            "n": N_GEN,
            "full_sequence": full_gen,
            "incremental": inc_gen,
        },
        "full_ids": full_ids,
        "full_ids_teacher_forcing_argmax": [int(v) for v in tf_all.argmax(-1)],
        "first_step_logits": {
            "file": "first_step_logits.f32",
            "count": int(first.numel()),
            "sum": float(fl.sum()),
            "sum_abs": float(fl.abs().sum()),
            "max": float(first.max()),
            "min": float(first.min()),
            "argmax": int(first.argmax()),
            "l2": float(fl.pow(2).sum().sqrt()),
        },
        "routing_full_ids": {
            "note": "per MoE layer: for each position of full_ids, the selected experts in "
                    "descending order of the BIASED score (the teacher-forced pass)",
            "layers": {str(L): tr[0].tolist() for L, tr in traces.items()},
        },
        "min_top2_logit_margin": top2_margin(tf_all),
        "incremental_vs_full_max_abs_logit_diff": inc_diff,
        "note": "logits in float32 from k3_reference.py (float64-accumulated dot products); "
                "argmax/greedy ids are exact, floats should match to ~1e-4 relative.",
    }


def main():
    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    out_root = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    for name, spec in SPECS.items():
        out_dir = os.path.join(out_root, name)
        cfg_json = make_config(spec)
        runs = build_runs(cfg_json, spec)
        write_checkpoint(out_dir, cfg_json, runs, spec["shards"])
        verify_layout(out_dir)
        exp = compute_expected(out_dir, name, spec)
        dump_json(os.path.join(out_dir, "expected.json"), exp)
        size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(out_dir, "*")))
        print(f"{name}: {exp['layer_map']} boundaries {exp['attn_res_boundaries']} "
              f"{size} bytes; greedy {exp['greedy']['full_sequence']} (full == incremental); "
              f"min top2 margin {exp['min_top2_logit_margin']:.4f}; "
              f"inc-vs-full max |dlogit| {exp['incremental_vs_full_max_abs_logit_diff']:.2e}")


if __name__ == "__main__":
    main()
