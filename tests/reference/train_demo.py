#!/usr/bin/env python3
"""Train the bundled demo model (resources/demo/) and export it in the released format.

A small K3-architecture model (same tensor graph and names as the release) is trained
with torch on CPU on demo_corpus.py rendered in the official chat format (thinking off;
loss on the assistant turn, which ends with [EOS]), through demo_net.py's fast batched
float32 forward (checked against k3_reference.py before training). The last
QAT_FRACTION of the steps see the trunk rounded to BF16 and the routed experts
quantised to MXFP4 (straight-through estimator), so the exported checkpoint behaves
like the trained one. expected.json is computed by k3_reference.py FROM THE EXPORTED
FILES, never from training weights.

Deterministic: fixed seed, fixed step count, one thread (see README: on a shared
2-core machine a second torch thread makes the small element-wise ops slower).

usage: train_demo.py [--expected-only] [OUT_DIR]   (default: resources/demo)
  --expected-only   recompute expected.json and first_step_logits.f32 from the
                    committed files (no training; what regenerate.sh always runs)
"""

import glob
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_corpus  # noqa: E402
import demo_net  # noqa: E402
import k3_bpe  # noqa: E402
import k3_checkpoint as ck  # noqa: E402
import k3_reference as ref  # noqa: E402

DEFAULT_OUT = os.path.join(ck.REPO, "resources", "demo")
SEED = 20251129
STEPS = int(os.environ.get("K3_DEMO_STEPS", "200"))
BATCH = 24
LR = 3e-3
WARMUP = 30
QAT_FRACTION = 0.25
MERGES = 1024
TEXT = {
    "hidden_size": 128, "num_hidden_layers": 4,
    "num_attention_heads": 4, "q_lora_rank": 64, "kv_lora_rank": 64,
    "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
    "num_experts": 4, "num_experts_per_token": 2, "num_shared_experts": 1,
    "routed_expert_hidden_size": 64, "moe_intermediate_size": 64,
    "intermediate_size": 256, "attn_res_block_size": 2,
}
KDA = {"num_heads": 4, "head_dim": 32, "full_attn_layers": [2, 4]}   # KMKM
DEMO_PROMPTS = ["What is k3chat?", "Hello!", "How do I pick a preset?", "What is MXFP4?"]
GATE_PROMPT = 0        # the prompt whose greedy run is expected.json's top-level gate
MAX_GEN = 48
EVAL_EVERY = 100


# ---------------------------------------------------------------------------- train

def init_params(cfg_json):
    gen = torch.Generator().manual_seed(SEED)
    params = {}
    for _, name, shape, kind, init in ck.tensor_plan(cfg_json):
        if init[0] == "linear":
            v = torch.randn(*shape, generator=gen) / math.sqrt(shape[-1])
        elif init[0] == "norm":
            v = torch.ones(*shape)
        elif name.endswith("_res_proj.weight"):
            v = torch.zeros(*shape)
        elif init[0] == "alog":
            v = torch.zeros(*shape)
            v[:init[1]] = torch.log(torch.linspace(1.0, 16.0, init[1]))
        elif name.endswith("e_score_correction_bias") or name.endswith("dt_bias"):
            v = torch.zeros(*shape)
        elif name.endswith("conv1d.weight"):
            v = torch.randn(*shape, generator=gen) * 0.3
        else:
            v = torch.randn(*shape, generator=gen) * init[1]
        params[name] = v.float().requires_grad_(not name.endswith("e_score_correction_bias"))
    return params


def make_data(tok):
    data = []
    for q, a in demo_corpus.pairs():
        prompt, full = ck.conversation(q, a)
        p_ids, f_ids = tok.encode(prompt), tok.encode(full)
        if f_ids[:len(p_ids)] != p_ids:
            raise SystemExit(f"prompt ids are not a prefix of the conversation ids for {q!r}")
        data.append((p_ids, f_ids))
    return data


def net_greedy(net, ids, n, stop):
    """Greedy with the training forward (recomputes the whole sequence per token)."""
    ids = list(ids)
    out = []
    with torch.no_grad():
        for _ in range(n):
            out.append(int(net.forward(torch.tensor([ids + out]))[0, -1].argmax()))
            if out[-1] in stop:
                break
    return out


def train(cfg_json, tok):
    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    params = init_params(cfg_json)
    net = demo_net.Net(cfg_json, params)
    data = make_data(tok)
    pad = tok.specials["[PAD]"]
    stop = {tok.specials["[EOS]"], tok.specials["<|end_of_msg|>"]}
    prompts = [tok.encode(ck.render_chat([{"role": "user", "content": q}])) for q in DEMO_PROMPTS]
    trainable = [p for p in params.values() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=LR, betas=(0.9, 0.98), weight_decay=0.01)
    order = []
    t0 = time.time()
    for step in range(STEPS):
        demo_net.Fq.on = step >= int(STEPS * (1 - QAT_FRACTION))
        if len(order) < BATCH:
            order += rng.sample(range(len(data)), len(data))
        batch, order = [data[i] for i in order[:BATCH]], order[BATCH:]
        T = max(len(f) for _, f in batch) - 1
        ids = torch.full((BATCH, T), pad, dtype=torch.long)
        tgt = torch.full((BATCH, T), -100, dtype=torch.long)
        for b, (p_ids, f_ids) in enumerate(batch):
            ids[b, :len(f_ids) - 1] = torch.tensor(f_ids[:-1])
            tgt[b, len(p_ids) - 1:len(f_ids) - 1] = torch.tensor(f_ids[len(p_ids):])
        lr = LR * min(1.0, (step + 1) / WARMUP) * 0.5 * (1 + math.cos(math.pi * step / STEPS))
        for g in opt.param_groups:
            g["lr"] = lr
        logits = net.forward(ids)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        if step % 20 == 0 or step == STEPS - 1:
            print(f"step {step:4d} loss {loss.item():.4f} lr {lr:.2e} qat {demo_net.Fq.on} "
                  f"{time.time() - t0:.0f}s", flush=True)
        if (step + 1) % EVAL_EVERY == 0 or step == STEPS - 1:
            for q, p in zip(DEMO_PROMPTS, prompts):
                print(f"  {q!r} -> {tok.decode(net_greedy(net, p, MAX_GEN, stop))!r}", flush=True)
    print(f"trained {STEPS} steps in {time.time() - t0:.0f}s, last loss {loss.item():.4f}", flush=True)
    return {k: v.detach().numpy().astype(np.float32) for k, v in params.items()}, loss.item(), time.time() - t0


# --------------------------------------------------------------------------- export

def export(out_dir, cfg_json, tok, weights):
    runs = ck.build_runs(cfg_json, lambda name, shape, init: weights[name])
    plan = ck.shard_plan_auto(runs, 2)
    for stale in glob.glob(os.path.join(out_dir, "*")):
        if os.path.basename(stale) != "README.md":   # hand-written, kept
            os.remove(stale)
    ck.write_checkpoint(out_dir, cfg_json, runs, plan, tok)
    # Trained with thinking off: the template's defaults say so, and k3chat unticks Think
    # from this file (not from the folder's path, so a copy of the demo does the same).
    tok_cfg_path = os.path.join(out_dir, "tokenizer_config.json")
    with open(tok_cfg_path) as f:
        tok_cfg = json.load(f)
    tok_cfg["chat_template_kwargs"] = {"thinking": False}
    with open(tok_cfg_path, "w") as f:
        json.dump(tok_cfg, f, indent=1)
        f.write("\n")
    ck.verify_layout(out_dir)
    ck.verify_roundtrip(out_dir, runs, tok)


def write_expected(out_dir, training=None):
    """expected.json + first_step_logits.f32 from the files in out_dir (k3_reference)."""
    tok = k3_bpe.Tokenizer.read(out_dir)
    stop = {tok.specials["[EOS]"], tok.specials["<|end_of_msg|>"]}
    model = ref.K3Model.load(out_dir)
    answers = []
    for q in DEMO_PROMPTS:
        text = ck.render_chat([{"role": "user", "content": q}])
        ids = tok.encode(text)
        if tok.decode(ids) != text:
            raise SystemExit(f"prompt {q!r} does not round-trip through the tokenizer")
        gen = ck.greedy_incremental_stop(model, ids, MAX_GEN, stop)
        body = [i for i in gen if i not in stop]
        answers.append({"question": q, "prompt_text": text, "prompt_ids": ids, "greedy_ids": gen,
                        "ends_with_eos": bool(gen) and gen[-1] == tok.specials["[EOS]"],
                        "decoded": tok.decode(gen),
                        "answer_text": tok.decode(body).split("<|close|>")[0]})
        print(f"Q: {q!r}\nA: {answers[-1]['decoded']!r}", flush=True)
    gate = answers[GATE_PROMPT]
    extra = {"checkpoint": "k3-demo", "prompt_text": gate["prompt_text"], "thinking": False,
             "eos_id": tok.specials["[EOS]"], "prompts": answers}
    if training:
        extra["training"] = training
    exp = ck.compute_expected(out_dir, gate["prompt_ids"], MAX_GEN, stop, extra=extra)
    ck.dump_json(os.path.join(out_dir, "expected.json"), exp)
    size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(out_dir, "*")))
    print(f"demo: {exp['layer_map']} vocab {tok.vocab_size}, {size} bytes; gate margin "
          f"{exp['min_top2_logit_margin']:.4f} (greedy part {exp['min_top2_logit_margin_greedy']:.4f})")
    return exp


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    args = sys.argv[1:]
    expected_only = "--expected-only" in args
    args = [a for a in args if a != "--expected-only"]
    out_dir = args[0] if args else DEFAULT_OUT
    if expected_only:
        import json
        with open(os.path.join(out_dir, "expected.json")) as f:
            training = json.load(f).get("training")
        write_expected(out_dir, training)
        return
    tok = ck.train_tokenizer(MERGES)
    cfg_json = ck.make_config(TEXT, KDA, tok)
    worst = demo_net.check(cfg_json, tok)
    print(f"training forward vs k3_reference on a random model: worst |diff|/(1+|logit|) {worst:.2e}")
    if worst > 1e-3:
        raise SystemExit("the training forward does not compute the reference's function")
    weights, last_loss, seconds = train(cfg_json, tok)
    torch.set_grad_enabled(False)
    export(out_dir, cfg_json, tok, weights)
    write_expected(out_dir, {"seed": SEED, "steps": STEPS, "batch": BATCH, "lr": LR,
                             "qat_fraction": QAT_FRACTION, "final_loss": round(last_loss, 4),
                             "corpus_pairs": len(demo_corpus.pairs())})


if __name__ == "__main__":
    main()
