#!/usr/bin/env python3
"""Write the tiny random-weight Kimi K3 test models in the released file format.

tests/fixtures/models/<name>/ gets config.json, 2+ shards, the index, tiktoken.model,
tokenizer_config.json (a small BPE trained on the demo corpus), expected.json and
first_step_logits.f32. See k3_checkpoint.py for the layout and README.md for the shapes.
expected.json is computed by k3_reference.py from the files AS WRITTEN (BF16-rounded
trunk, MXFP4-quantised experts), never from the float weights.

k3_tiny_f32 and k3_tiny_bf16 have no quantization_config: their routed experts are plain
F32 / BF16 tensors.

Deterministic and idempotent. usage: make_tiny_checkpoints.py [OUT_ROOT] [NAME...]
"""

import glob
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3_checkpoint as ck  # noqa: E402

DEFAULT_OUT = os.path.join(ck.REPO, "tests", "fixtures", "models")
N_GEN = 20

SPECS = {
    # 14 layers, KKKMKKKMKKKKMM: the MLA layers every 4th and the last two (as in the
    # release: 4, 8, ..., 92, 93). AttnRes block 3 -> boundaries 0,3,6,9,12: the final
    # aggregation sees 5 snapshots plus the in-progress block of layers 12-13. Expert
    # in-widths 48 (w1/w3) and 40 (w2) are not multiples of 32: every row's last MXFP4
    # group is partial (16 and 8 elements).
    "k3_tiny_a": {
        "seed": 1234, "merges": 384,
        "text": {
            "hidden_size": 64, "num_hidden_layers": 14,
            "num_attention_heads": 2, "q_lora_rank": 32, "kv_lora_rank": 32,
            "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
            "num_experts": 12, "num_experts_per_token": 4, "num_shared_experts": 1,
            "routed_expert_hidden_size": 48, "moe_intermediate_size": 40,
            "intermediate_size": 96, "attn_res_block_size": 3,
        },
        "kda": {"num_heads": 2, "head_dim": 16, "full_attn_layers": [4, 8, 12, 13, 14]},
        "shards": 3, "experts_elsewhere": ("E1", "E2"),
        "messages": [{"role": "user", "content": "What is MXFP4?"}], "thinking": False,
        "small_scale": None,
    },
    # 9 layers, MKKKMKKKM: dense layer 0 is MLA; block 4 -> boundaries 0,4,8. Different
    # head counts and widths everywhere; latent 27 is ODD (weight_packed has 14 columns,
    # the last high nibble unused; one partial group of 27) and w2's in-width 36 leaves a
    # partial group of 4; 2 shared experts; routed_scaling_factor 2.5; one E8M0 scale
    # byte 0 (the smallest scale, 2^-127: a float subnormal). It was 255 (NaN by spec)
    # until the engine refused NaN scales (issue 22): a checkpoint with one is damaged,
    # its expert dropped, so a fixture cannot carry one. Thinking on (longer prompt).
    "k3_tiny_b": {
        "seed": 4321, "merges": 200,
        "text": {
            "hidden_size": 96, "num_hidden_layers": 9,
            "num_attention_heads": 3, "q_lora_rank": 24, "kv_lora_rank": 40,
            "qk_nope_head_dim": 12, "qk_rope_head_dim": 6, "v_head_dim": 10,
            "num_experts": 6, "num_experts_per_token": 2, "num_shared_experts": 2,
            "routed_expert_hidden_size": 27, "moe_intermediate_size": 36,
            "routed_scaling_factor": 2.5, "intermediate_size": 80,
            "attn_res_block_size": 4,
        },
        "kda": {"num_heads": 3, "head_dim": 24, "full_attn_layers": [1, 5, 9]},
        "shards": 2, "experts_elsewhere": (),
        "messages": [{"role": "system", "content": "You are helpful."},
                     {"role": "user", "content": "Hi"}], "thinking": True,
        # layer 2, expert 0, w1, row 3, group 0
        "small_scale": ("language_model.model.layers.2.block_sparse_moe.experts.0.w1", 3, 0),
    },
    # The released layout WITHOUT quantization_config (issue 22, point 10): the routed
    # experts are plain F32 NAME.weight tensors, read in the dtype the file declares.
    # 5 layers, KMKKM; block 2 -> boundaries 0,2,4; layer 2's experts sit in the last
    # shard (the expert cache reads across shards).
    "k3_tiny_f32": {
        "seed": 2718, "merges": 200, "expert_dtype": "f32",
        "text": {
            "hidden_size": 64, "num_hidden_layers": 5,
            "num_attention_heads": 2, "q_lora_rank": 32, "kv_lora_rank": 24,
            "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
            "num_experts": 6, "num_experts_per_token": 2, "num_shared_experts": 1,
            "routed_expert_hidden_size": 40, "moe_intermediate_size": 36,
            "intermediate_size": 96, "attn_res_block_size": 2,
        },
        "kda": {"num_heads": 2, "head_dim": 16, "full_attn_layers": [2, 5]},
        "shards": 3, "experts_elsewhere": ("E2",),
        "messages": [{"role": "user", "content": "What is k3chat?"}], "thinking": False,
        "small_scale": None,
    },
    # The same without quantization_config, experts in BF16 (the other plain dtype), as
    # small as a model with KDA, MLA, a dense and MoE layers gets: 3 layers, KMK.
    "k3_tiny_bf16": {
        "seed": 3141, "merges": 200, "expert_dtype": "bf16",
        "text": {
            "hidden_size": 32, "num_hidden_layers": 3,
            "num_attention_heads": 2, "q_lora_rank": 16, "kv_lora_rank": 16,
            "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
            "num_experts": 4, "num_experts_per_token": 2, "num_shared_experts": 1,
            "routed_expert_hidden_size": 24, "moe_intermediate_size": 20,
            "intermediate_size": 48, "attn_res_block_size": 2,
        },
        "kda": {"num_heads": 2, "head_dim": 16, "full_attn_layers": [2]},
        "shards": 2, "experts_elsewhere": (),
        "messages": [{"role": "user", "content": "Hi"}], "thinking": False,
        "small_scale": None,
    },
}


def build(name, spec, out_root):
    out_dir = os.path.join(out_root, name)
    tok = ck.train_tokenizer(spec["merges"])
    expert_dtype = spec.get("expert_dtype", "mxfp4")
    cfg_json = ck.make_config(spec["text"], spec["kda"], tok, quantized=expert_dtype == "mxfp4")

    def hook(tname, packed, scale):
        if spec["small_scale"] and tname == spec["small_scale"][0]:
            scale[spec["small_scale"][1], spec["small_scale"][2]] = 0

    runs = ck.build_runs(cfg_json, ck.RandomSource(spec["seed"]), hook, expert_dtype)
    plan = ck.shard_plan_auto(runs, spec["shards"], spec["experts_elsewhere"])
    ck.write_checkpoint(out_dir, cfg_json, runs, plan, tok)
    ck.verify_layout(out_dir)
    ck.verify_roundtrip(out_dir, runs, tok)
    prompt_text = ck.render_chat(spec["messages"], thinking=spec["thinking"])
    prompt = tok.encode(prompt_text)
    if tok.decode(prompt) != prompt_text:
        raise SystemExit(f"{name}: prompt does not round-trip through the tokenizer")
    exp = ck.compute_expected(out_dir, prompt, N_GEN, extra={
        "checkpoint": name, "prompt_text": prompt_text, "thinking": spec["thinking"],
        "shards": [sorted(s) for s in plan]})
    stop = {tok.specials["[EOS]"], tok.specials["<|end_of_msg|>"]}
    if stop & set(exp["greedy"]["incremental"]):
        raise SystemExit(f"{name}: greedy continuation hits an end-of-turn id; pick another seed")
    if len(set(exp["greedy"]["incremental"])) < 4:
        raise SystemExit(f"{name}: degenerate continuation {exp['greedy']['incremental']}")
    ck.dump_json(os.path.join(out_dir, "expected.json"), exp)
    size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(out_dir, "*")))
    print(f"{name}: {exp['layer_map']} boundaries {exp['attn_res_boundaries']} vocab "
          f"{tok.vocab_size}, {len(plan)} shards, {size} bytes; prompt {len(prompt)} ids; greedy "
          f"{exp['greedy']['incremental']} (full == incremental); min top2 margin "
          f"{exp['min_top2_logit_margin']:.4f} (greedy part {exp['min_top2_logit_margin_greedy']:.4f}); "
          f"inc-vs-full max |dlogit| {exp['incremental_vs_full_max_abs_logit_diff']:.2e}")


def main():
    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    args = sys.argv[1:]
    only = [a for a in args if a in SPECS]  # NAME...: build just these
    rest = [a for a in args if a not in SPECS]
    out_root = rest[0] if rest else DEFAULT_OUT
    for name, spec in SPECS.items():
        if not only or name in only:
            build(name, spec, out_root)


if __name__ == "__main__":
    main()
