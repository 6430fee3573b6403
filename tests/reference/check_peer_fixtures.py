#!/usr/bin/env python3
"""Run k3_reference.py against every peer fixture (the independent oracle).

Reads tests/fixtures/peer/ops/MANIFEST.json (the checked-in peer fixtures) (order, tolerance, tiny config) and
every ops/*.json plus mxfp4.json, runs the matching reference function on the
fixture's own inputs and weights, prints one PASS/FAIL line per checked output with
the max abs / max rel error, and exits 1 if anything fails. The tolerance comes from
the MANIFEST and is never changed here: a FAIL means the reference is wrong.

usage: check_peer_fixtures.py [PEER_FIXTURES_DIR]
"""

import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3_reference as ref  # noqa: E402

PEER = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "peer")
OPS = os.path.join(PEER, "ops")

with open(os.path.join(OPS, "MANIFEST.json")) as _f:
    MANIFEST = json.load(_f)
ATOL = MANIFEST["tolerance"]["fp32_abs"]
RTOL = MANIFEST["tolerance"]["fp32_rel"]
RESULTS = []


def T(fx, key):
    """A fixture tensor {"shape", "data"} as float32 torch."""
    v = fx[key]
    return torch.tensor(np.asarray(v["data"], dtype=np.float32).reshape(v["shape"]))


def load(name):
    with open(os.path.join(OPS, name + ".json")) as f:
        return json.load(f)


def compare(label, got, want, exact=False, note=""):
    got = np.asarray(got, dtype=np.float64).reshape(-1)
    want = np.asarray(want, dtype=np.float64).reshape(-1)
    if got.shape != want.shape:
        RESULTS.append((label, False))
        print(f"FAIL  {label:<22} shape {got.shape} != expected {want.shape}")
        return
    diff = np.abs(got - want)
    big = np.abs(want) > ATOL  # relative error is meaningless next to an exact zero
    rel = (diff[big] / np.abs(want[big])).max() if big.any() else 0.0
    if exact:
        ok, worst = bool(np.all(diff == 0)), "exact"
    else:
        ratio = (diff / (ATOL + RTOL * np.abs(want))).max()
        ok, worst = bool(ratio <= 1.0), f"worst={ratio:.2f}x tol"
    RESULTS.append((label, ok))
    print(f"{'PASS' if ok else 'FAIL'}  {label:<18} n={got.size:<6} {worst:<15} "
          f"max_abs={diff.max():.2e} max_rel={rel:.2e}{'  ' + note if note else ''}")


def manifest_config(**overrides):
    """The tiny config from MANIFEST.json, read through the reference's own config
    reader (flat shape), with a fixture's own scalars applied on top."""
    cfg = ref.K3Config(MANIFEST["config"])
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


# ---------------------------------------------------------------------------- ops

def check_rmsnorm():
    fx = load("rmsnorm")
    compare("rmsnorm", ref.rms_norm(T(fx, "in"), T(fx, "weight"), fx["eps"]), T(fx, "out"))


def check_situ_glu():
    fx = load("situ_glu")
    x = T(fx, "in")
    n = x.shape[-1] // 2
    out = ref.situ_glu(x[:, :n], x[:, n:], fx["beta"], fx["linear_beta"])
    bound = float(out.abs().max())
    compare("situ_glu", out, T(fx, "out"),
            note=f"max|out|={bound:.3f} <= beta*linear_beta={fx['beta'] * fx['linear_beta']:g}")


def check_shortconv():
    fx = load("shortconv")
    y, st = ref.short_conv(T(fx, "in")[0], T(fx, "weight"))
    compare("shortconv", y, T(fx, "out")[0])
    compare("shortconv_state", st, T(fx, "state_after")[0])
    y2, _ = ref.short_conv(T(fx, "in_next")[0], T(fx, "weight"), st)
    compare("shortconv_next", y2, T(fx, "out_next")[0])


def check_kda_decay():
    fx = load("kda_decay")
    H = fx["A_log"]["shape"][0]
    z = T(fx, "z")
    D = z.shape[-1] // H
    g, alpha = ref.kda_decay(z, T(fx, "A_log"), T(fx, "dt_bias"), H, D, fx["lower_bound"])
    compare("kda_decay_g", g, T(fx, "g"))
    compare("kda_decay_alpha", alpha, T(fx, "alpha"))


def check_kda_recurrence(name, label):
    fx = load(name)
    Tn, H = fx["T"], fx["H"]
    q, k, v, a = (T(fx, n).reshape(Tn, H, -1) for n in ("q", "k", "v", "alpha"))
    o, S = ref.kda_recurrence(q, k, v, a, T(fx, "beta").reshape(Tn, H), fx["q_scale"])
    compare(label + "_out", o, T(fx, "out"))
    compare(label + "_state", S, T(fx, "state_out"))


def kda_params(fx, prefix=""):
    keys = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "g": "g_proj", "o": "o_proj",
            "f_a": "f_a", "f_b": "f_b", "b": "b_proj", "q_conv": "q_conv", "k_conv": "k_conv",
            "v_conv": "v_conv", "A_log": "A_log", "dt_bias": "dt_bias", "o_norm": "o_norm"}
    if prefix:  # layer fixtures use the checkpoint-like names
        keys = {"q": "q_proj_weight", "k": "k_proj_weight", "v": "v_proj_weight",
                "g": "g_proj_weight", "o": "o_proj_weight", "f_a": "f_a_proj_weight",
                "f_b": "f_b_proj_weight", "b": "b_proj_weight", "q_conv": "q_conv1d_weight",
                "k_conv": "k_conv1d_weight", "v_conv": "v_conv1d_weight", "A_log": "A_log",
                "dt_bias": "dt_bias", "o_norm": "o_norm_weight"}
    return {k: T(fx, prefix + v) for k, v in keys.items()}


def check_kda_layer(name, label):
    fx = load(name)
    cfg = manifest_config(kda_num_heads=fx["H"], kda_head_dim=fx["d_k"],
                          short_conv_kernel_size=fx["conv_k"], gate_lower_bound=fx["lower_bound"],
                          rms_norm_eps=fx["rms_eps"])
    out, st = ref.kda_attention(T(fx, "in")[0], kda_params(fx), cfg)
    compare(label + "_out", out, T(fx, "out")[0])
    compare(label + "_state", st["S"], T(fx, "state_out")[0])


def check_router():
    fx = load("router")
    idx, w = ref.route(T(fx, "in"), T(fx, "gate_weight"), T(fx, "bias"), fx["top_k"], True, 1.0)
    want_idx = T(fx, "topk_idx").long()
    want_w = T(fx, "topk_weight")
    same_sets = all(set(idx[r].tolist()) == set(want_idx[r].tolist()) for r in range(idx.shape[0]))
    RESULTS.append(("router_idx", same_sets))
    # without the bias the selection must differ on the rows the fixture says it does
    idx0, _ = ref.route(T(fx, "in"), T(fx, "gate_weight"), None, fx["top_k"], True, 1.0)
    changed = sum(set(idx0[r].tolist()) != set(idx[r].tolist()) for r in range(idx.shape[0]))
    print(f"{'PASS' if same_sets else 'FAIL'}  {'router_idx':<18} rows={idx.shape[0]} index sets "
          f"{'match' if same_sets else 'DIFFER'}; bias changed {changed} rows "
          f"(fixture says {fx['rows_where_bias_changed_selection']})")
    # align our weights to the fixture's index order before comparing
    aligned = torch.stack([torch.stack([w[r][idx[r].tolist().index(int(e))] if int(e) in idx[r].tolist()
                                        else torch.tensor(float("nan")) for e in want_idx[r]])
                           for r in range(idx.shape[0])])
    compare("router_weight", aligned, want_w)


def check_attnres():
    fx = load("attnres")
    src = torch.cat([T(fx, "block_residual").permute(1, 0, 2), T(fx, "prefix_sum").unsqueeze(0)])
    if src.shape[0] != fx["n_sources"]:
        raise SystemExit(f"attnres: built {src.shape[0]} sources, fixture says {fx['n_sources']}")
    compare("attnres", ref.attn_res(src, T(fx, "proj_weight"), T(fx, "norm_weight"), fx["eps"]),
            T(fx, "out"))


def mla_params(fx, prefix=""):
    keys = {"q_a": "q_a_proj_weight", "q_a_norm": "q_a_layernorm_weight", "q_b": "q_b_proj_weight",
            "kv_a": "kv_a_proj_with_mqa_weight", "kv_a_norm": "kv_a_layernorm_weight",
            "kv_b": "kv_b_proj_weight", "o": "o_proj_weight", "g": "g_proj_weight"}
    return {k: T(fx, prefix + v) for k, v in keys.items()}


def check_mla():
    fx = load("mla")
    cfg = manifest_config(num_attention_heads=fx["n_heads"], qk_nope_head_dim=fx["qk_nope"],
                          qk_rope_head_dim=fx["qk_rope"], kv_lora_rank=fx["kv_lora"],
                          q_lora_rank=fx["q_lora"], v_head_dim=fx["v_head"], rms_norm_eps=fx["rms_eps"])
    scale = (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim) ** -0.5
    if abs(scale - fx["scale"]) > 1e-7:
        raise SystemExit(f"mla: fixture scale {fx['scale']} is not (nope+rope)^-0.5 = {scale}")
    out, cache = ref.mla_attention(T(fx, "in")[0], mla_params(fx), cfg)
    compare("mla", out, T(fx, "out")[0], note=f"scale=(nope+rope)^-0.5={scale:.6f}")
    compare("mla_kv_latent", cache["latent"], T(fx, "kv_latent")[0])
    compare("mla_k_rope", cache["rope"], T(fx, "k_rope")[0])
    # incremental: one position at a time through the cache must give the same output
    x, inc, outs = T(fx, "in")[0], None, []
    for t in range(x.shape[0]):
        o, inc = ref.mla_attention(x[t:t + 1], mla_params(fx), cfg, inc)
        outs.append(o)
    compare("mla_incremental", torch.cat(outs), T(fx, "out")[0])


def moe_params(fx, prefix, n_experts):
    p = lambda n: T(fx, prefix + n)  # noqa: E731
    return {
        "gate": p("gate_weight"), "bias": p("e_score_correction_bias"),
        "down": p("down_weight"), "up": p("up_weight"), "norm": p("norm_weight"),
        "experts": [(p(f"experts_{e}_w1_weight"), p(f"experts_{e}_w3_weight"),
                     p(f"experts_{e}_w2_weight")) for e in range(n_experts)],
        "shared": (p("shared_w1_weight"), p("shared_w3_weight"), p("shared_w2_weight")),
    }


def check_moe():
    fx = load("moe")
    cfg = manifest_config(num_experts=fx["n_experts"], num_experts_per_token=fx["top_k"],
                          num_shared_experts=fx["n_shared"], routed_scaling_factor=fx["routed_scale"],
                          moe_renormalize=bool(fx["renorm"]), latent_moe_use_norm=bool(fx["latent_norm"]),
                          rms_norm_eps=fx["rms_eps"], situ_beta=fx["situ_b1"],
                          situ_linear_beta=fx["situ_b2"])
    out = ref.latent_moe(T(fx, "in")[0], moe_params(fx, "", fx["n_experts"]), cfg)
    compare("moe", out, T(fx, "out")[0])


def layer_weights(fx, cfg, is_mla):
    p = lambda n: T(fx, n)  # noqa: E731
    lw = {"input_norm": p("input_layernorm_weight"), "post_norm": p("post_attention_layernorm_weight"),
          "attn_res_norm": p("self_attention_res_norm_weight"),
          "attn_res_proj": p("self_attention_res_proj_weight"),
          "mlp_res_norm": p("mlp_res_norm_weight"), "mlp_res_proj": p("mlp_res_proj_weight"),
          "moe": moe_params(fx, "mlp_", cfg.num_experts)}
    if is_mla:
        lw["mla"] = mla_params(fx, "self_attn_")
    else:
        lw["kda"] = kda_params(fx, "self_attn_")
    return lw


def check_layer(name):
    fx = load(name)
    cfg = manifest_config(attn_res_block_size=fx["attn_res_block_size"], rms_norm_eps=fx["rms_eps"])
    lw = layer_weights(fx, cfg, fx["is_mla"])
    br = T(fx, "block_residual_in")  # [T, nb, E]
    blocks = [br[:, b] for b in range(br.shape[1])]
    h, blocks, _ = ref.decoder_layer(T(fx, "in")[0], blocks, lw, cfg, fx["layer_idx"])
    compare(name, h, T(fx, "out")[0],
            note=f"layer {fx['layer_idx']} ({'MLA' if fx['is_mla'] else 'KDA'}), blocks "
                 f"{br.shape[1]} -> {len(blocks)}")
    compare(name + "_blocks", torch.stack(blocks, dim=1), T(fx, "block_residual_out"))


def check_mxfp4():
    with open(os.path.join(PEER, "mxfp4.json")) as f:
        fx = json.load(f)
    packed = np.asarray(fx["packed"]["data"], dtype=np.uint8).reshape(fx["packed"]["shape"])
    scales = np.asarray(fx["scales"]["data"], dtype=np.uint8).reshape(fx["scales"]["shape"])
    got = ref.mxfp4_decode(packed, scales, fx["group_size"])
    want = np.asarray(fx["expected"]["data"], dtype=np.float32).reshape(fx["expected"]["shape"])
    swapped = np.asarray(fx["expected_swapped_nibbles"]["first64"], dtype=np.float32)
    differs = not np.array_equal(got.numpy().reshape(-1)[:64], swapped)
    compare("mxfp4", got, want, exact=True,
            note=f"{fx['rows']} rows x {fx['logical_width']} of {fx['source']}; "
                 f"swapped-nibble decode {'differs' if differs else 'MATCHES (wrong order!)'}")
    if not differs:
        RESULTS.append(("mxfp4_nibble_order", False))
    # encode(decode(x)) must round-trip on real bytes (the generator relies on it)
    p2, s2 = ref.mxfp4_encode(got.numpy())
    rt = ref.mxfp4_decode(p2, s2)
    compare("mxfp4_roundtrip", rt, want, exact=True, note="fixture generator's encoder")


def check_config_refusals():
    """cfg/*.json: configs a correct reader must refuse (not part of ops/, but cheap)."""
    cfg_dir = os.path.join(PEER, "cfg")
    if not os.path.isdir(cfg_dir):
        return
    for fname in sorted(os.listdir(cfg_dir)):
        with open(os.path.join(cfg_dir, fname)) as f:
            raw = json.load(f)
        try:
            ref.K3Config(raw)
            ok, why = False, "ACCEPTED (must be refused)"
        except ValueError as e:
            ok, why = True, f"refused: {e}"
        RESULTS.append(("cfg/" + fname, ok))
        print(f"{'PASS' if ok else 'FAIL'}  {'cfg/' + fname[:-5]:<18} {why}")


CHECKS = {
    "rmsnorm": [check_rmsnorm],
    "situ_glu": [check_situ_glu],
    "shortconv": [check_shortconv],
    "kda_decay": [check_kda_decay],
    "kda_step": [lambda: check_kda_recurrence("kda_recur1", "kda_recur1"),
                 lambda: check_kda_layer("kda_layer1", "kda_layer1")],
    "kda_seq": [lambda: check_kda_recurrence("kda_recur8", "kda_recur8"),
                lambda: check_kda_layer("kda_layer8", "kda_layer8")],
    "router": [check_router],
    "attnres": [check_attnres],
    "mla": [check_mla],
    "layer_kda": [lambda: check_layer("layer_kda")],
    "layer_mla": [lambda: check_layer("layer_mla")],
}


def main():
    torch.set_grad_enabled(False)
    print(f"peer fixtures: {PEER}")
    print(f"tolerance (MANIFEST): fp32_abs {ATOL:g}, fp32_rel {RTOL:g}; "
          f"pass when |got-want| <= abs + rel*|want|")
    for step in MANIFEST["order"]:
        for fn in CHECKS[step]:
            fn()
        if step == "router":
            check_moe()  # moe.json is not in the MANIFEST order; it needs the router
    check_mxfp4()
    check_config_refusals()
    covered = {f[:-5] for f in os.listdir(OPS) if f.endswith(".json")} - {"MANIFEST"}
    used = {"rmsnorm", "situ_glu", "shortconv", "kda_decay", "kda_recur1", "kda_recur8",
            "kda_layer1", "kda_layer8", "router", "attnres", "mla", "moe", "layer_kda", "layer_mla"}
    if covered - used:
        print(f"FAIL  unchecked fixtures: {sorted(covered - used)}")
        RESULTS.append(("coverage", False))
    failed = [n for n, ok in RESULTS if not ok]
    print(f"{len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
