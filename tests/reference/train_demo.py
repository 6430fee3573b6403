#!/usr/bin/env python3
"""Train the bundled demo model (resources/demo/) and export it in the released format.

A small K3-architecture model (same tensor graph and names as the release) is trained
with torch on CPU on demo_corpus.py rendered in the official chat format (thinking off;
loss on the assistant turn, which ends with [EOS]). The last QAT_FRACTION of the steps
see the trunk rounded to BF16 and the routed experts quantised to MXFP4 (straight-through
estimator), so the exported checkpoint behaves like the trained one. expected.json is
then computed by k3_reference.py FROM THE EXPORTED FILES, never from training weights.

Deterministic: fixed seed, fixed step count, 2 threads, deterministic algorithms.
usage: train_demo.py [OUT_DIR]   (default: resources/demo)
"""

import glob
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
import k3_checkpoint as ck  # noqa: E402
import k3_reference as ref  # noqa: E402

DEFAULT_OUT = os.path.join(ck.REPO, "resources", "demo")
SEED = 20251129
STEPS = int(os.environ.get("K3_DEMO_STEPS", "900"))
BATCH = 24
LR = 3e-3
QAT_FRACTION = 0.3
MERGES = 1024
TEXT = {
    "hidden_size": 128, "num_hidden_layers": 6,
    "num_attention_heads": 4, "q_lora_rank": 64, "kv_lora_rank": 64,
    "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
    "num_experts": 8, "num_experts_per_token": 2, "num_shared_experts": 1,
    "routed_expert_hidden_size": 64, "moe_intermediate_size": 128,
    "intermediate_size": 256, "attn_res_block_size": 3,
}
KDA = {"num_heads": 4, "head_dim": 32, "full_attn_layers": [3, 6]}
DEMO_PROMPTS = ["What is k3chat?", "Hello!", "How do I pick a preset?", "What is MXFP4?"]
MAX_GEN = 48


# ------------------------------------------------------------ differentiable forward

class Fq:
    """Fake quantisation (straight-through) once QAT starts."""
    on = False


def fq_bf16(w):
    return w + (w.to(torch.bfloat16).float() - w).detach() if Fq.on else w


E2M1_MAGS = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def fq_mxfp4(w):
    if not Fq.on:
        return w
    rows, n = w.shape
    ng = -(-n // 32)
    g = F.pad(w.detach(), (0, ng * 32 - n)).reshape(rows, ng, 32)
    amax = g.abs().amax(-1, keepdim=True)
    _, e = torch.frexp(amax)
    scale = torch.where(amax > 0, torch.pow(2.0, (e - 3).float()), torch.ones_like(amax))
    s = g / scale
    idx = (s.abs().unsqueeze(-1) - E2M1_MAGS).abs().argmin(-1)
    q = (E2M1_MAGS[idx] * torch.sign(s) * scale).reshape(rows, ng * 32)[:, :n]
    return w + (q - w).detach()


def rms(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def situ_glu_mlp(x, wg, wu, wd):
    g, u = x @ wg.T, x @ wu.T
    return (4.0 * torch.tanh(g / 4.0) * torch.sigmoid(g) * 25.0 * torch.tanh(u / 25.0)) @ wd.T


def short_conv(x, w):
    C, K = w.shape[0], w.shape[-1]
    T = x.shape[1]
    xp = F.pad(x, (0, 0, K - 1, 0))
    w = w.reshape(C, K)
    y = sum(xp[:, j:j + T] * w[:, j] for j in range(K))
    return y * torch.sigmoid(y)


def l2n(x):
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


class Net:
    def __init__(self, cfg_json, params):
        self.t = cfg_json["text_config"]
        self.p = params
        self.mla = {i - 1 for i in self.t["linear_attn_config"]["full_attn_layers"]}

    def w(self, name):
        v = self.p[name]
        if name.endswith(("A_log", "e_score_correction_bias")):
            return v
        return fq_bf16(v)

    def kda(self, x, a):
        H, D = self.t["linear_attn_config"]["num_heads"], self.t["linear_attn_config"]["head_dim"]
        B, T, _ = x.shape
        q = l2n(short_conv(x @ self.w(a + "q_proj.weight").T, self.w(a + "q_conv1d.weight")).reshape(B, T, H, D))
        k = l2n(short_conv(x @ self.w(a + "k_proj.weight").T, self.w(a + "k_conv1d.weight")).reshape(B, T, H, D))
        v = short_conv(x @ self.w(a + "v_proj.weight").T, self.w(a + "v_conv1d.weight")).reshape(B, T, H, D)
        beta = torch.sigmoid(x @ self.w(a + "b_proj.weight").T)
        z = (x @ self.w(a + "f_a_proj.weight").T) @ self.w(a + "f_b_proj.weight").T
        u = (z + self.w(a + "dt_bias")).reshape(B, T, H, D)
        A = torch.exp(self.w(a + "A_log")[:H]).reshape(H, 1)
        alpha = torch.exp(-5.0 * torch.sigmoid(A * u))
        S = x.new_zeros(B, H, D, D)
        outs = []
        qs = q * D ** -0.5
        for t in range(T):
            S = S * alpha[:, t].unsqueeze(-1)
            kt = k[:, t]
            ut = torch.einsum("bhk,bhkv->bhv", kt, S)
            S = S + beta[:, t].reshape(B, H, 1, 1) * kt.unsqueeze(-1) * (v[:, t] - ut).unsqueeze(2)
            outs.append(torch.einsum("bhk,bhkv->bhv", qs[:, t], S))
        o = rms(torch.stack(outs, 1), self.w(a + "o_norm.weight"))
        o = o.reshape(B, T, H * D) * torch.sigmoid(x @ self.w(a + "g_proj.weight").T)
        return o @ self.w(a + "o_proj.weight").T

    def mla_attn(self, x, a):
        t = self.t
        H, dn, dr, dv = t["num_attention_heads"], t["qk_nope_head_dim"], t["qk_rope_head_dim"], t["v_head_dim"]
        B, T, _ = x.shape
        q = (rms(x @ self.w(a + "q_a_proj.weight").T, self.w(a + "q_a_layernorm.weight"))
             @ self.w(a + "q_b_proj.weight").T).reshape(B, T, H, dn + dr)
        kv = x @ self.w(a + "kv_a_proj_with_mqa.weight").T
        lat = rms(kv[..., :t["kv_lora_rank"]], self.w(a + "kv_a_layernorm.weight"))
        rope = kv[..., t["kv_lora_rank"]:]
        kvb = (lat @ self.w(a + "kv_b_proj.weight").T).reshape(B, T, H, dn + dv)
        sc = (torch.einsum("bthd,bshd->bhts", q[..., :dn], kvb[..., :dn])
              + torch.einsum("bthd,bsd->bhts", q[..., dn:], rope)) * (dn + dr) ** -0.5
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        sc = sc.masked_fill(mask, float("-inf"))
        o = torch.einsum("bhts,bshd->bthd", torch.softmax(sc, -1), kvb[..., dn:]).reshape(B, T, H * dv)
        o = o * torch.sigmoid(x @ self.w(a + "g_proj.weight").T)
        return o @ self.w(a + "o_proj.weight").T

    def moe(self, x, m):
        t = self.t
        scores = torch.sigmoid(x @ self.w(m + "gate.weight").T)
        choice = scores + self.p[m + "gate.e_score_correction_bias"]
        idx = torch.topk(choice.detach(), t["num_experts_per_token"], dim=-1).indices
        wts = torch.gather(scores, -1, idx)
        wts = wts / wts.sum(-1, keepdim=True) * t["routed_scaling_factor"]
        W = torch.zeros_like(scores).scatter(-1, idx, wts)
        z = x @ self.w(m + "routed_expert_down_proj.weight").T
        acc = 0
        for e in range(t["num_experts"]):
            b = f"{m}experts.{e}."
            he = situ_glu_mlp(z, fq_mxfp4(self.p[b + "w1"]), fq_mxfp4(self.p[b + "w3"]), fq_mxfp4(self.p[b + "w2"]))
            acc = acc + W[..., e:e + 1] * he
        y = rms(acc, self.w(m + "routed_expert_norm.weight")) @ self.w(m + "routed_expert_up_proj.weight").T
        s = m + "shared_experts."
        return y + situ_glu_mlp(x, self.w(s + "gate_proj.weight"), self.w(s + "up_proj.weight"),
                                self.w(s + "down_proj.weight"))

    @staticmethod
    def attn_res(srcs, proj, norm):
        src = torch.stack(srcs)
        logits = (rms(src, norm) * proj.reshape(-1)).sum(-1)
        return (torch.softmax(logits, 0).unsqueeze(-1) * src).sum(0)

    def forward(self, ids):
        P = ref.PREFIX
        h = self.w(P + "embed_tokens.weight")[ids]
        blocks = []
        for L in range(self.t["num_hidden_layers"]):
            pre = f"{P}layers.{L}."
            partial, x = h, h
            if blocks:
                x = self.attn_res(blocks + [partial], self.w(pre + "self_attention_res_proj.weight"),
                                  self.w(pre + "self_attention_res_norm.weight"))
            if L % self.t["attn_res_block_size"] == 0:
                blocks = blocks + [partial]
                partial = None
            xn = rms(x, self.w(pre + "input_layernorm.weight"))
            att = self.mla_attn(xn, pre + "self_attn.") if L in self.mla else self.kda(xn, pre + "self_attn.")
            partial = att if partial is None else partial + att
            x = self.attn_res(blocks + [partial], self.w(pre + "mlp_res_proj.weight"),
                              self.w(pre + "mlp_res_norm.weight"))
            xn = rms(x, self.w(pre + "post_attention_layernorm.weight"))
            if L < self.t["first_k_dense_replace"]:
                mlp = situ_glu_mlp(xn, self.w(pre + "mlp.gate_proj.weight"), self.w(pre + "mlp.up_proj.weight"),
                                   self.w(pre + "mlp.down_proj.weight"))
            else:
                mlp = self.moe(xn, pre + "block_sparse_moe.")
            h = partial + mlp
        h = self.attn_res(blocks + [h], self.w(P + "output_attn_res_proj.weight"),
                          self.w(P + "output_attn_res_norm.weight"))
        return rms(h, self.w(P + "norm.weight")) @ self.w(ref.HEAD_NAME).T


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


def train(cfg_json, tok):
    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    params = init_params(cfg_json)
    net = Net(cfg_json, params)
    data = make_data(tok)
    pad = tok.specials["[PAD]"]
    opt = torch.optim.AdamW([p for p in params.values() if p.requires_grad], lr=LR,
                            betas=(0.9, 0.98), weight_decay=0.01)
    order = []
    t0 = time.time()
    for step in range(STEPS):
        Fq.on = step >= int(STEPS * (1 - QAT_FRACTION))
        if len(order) < BATCH:
            order += rng.sample(range(len(data)), len(data))
        batch, order = [data[i] for i in order[:BATCH]], order[BATCH:]
        T = max(len(f) for _, f in batch)
        ids = torch.full((BATCH, T), pad, dtype=torch.long)
        tgt = torch.full((BATCH, T), -100, dtype=torch.long)
        for b, (p_ids, f_ids) in enumerate(batch):
            ids[b, :len(f_ids)] = torch.tensor(f_ids)
            tgt[b, len(p_ids) - 1:len(f_ids) - 1] = torch.tensor(f_ids[len(p_ids):])
        lr = LR * min(1.0, (step + 1) / 50) * 0.5 * (1 + math.cos(math.pi * step / STEPS))
        for g in opt.param_groups:
            g["lr"] = lr
        logits = net.forward(ids)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in params.values() if p.requires_grad], 1.0)
        opt.step()
        if step % 50 == 0 or step == STEPS - 1:
            print(f"step {step:4d} loss {loss.item():.4f} lr {lr:.2e} qat {Fq.on} "
                  f"{time.time() - t0:.0f}s", flush=True)
    return {k: v.detach().numpy().astype(np.float32) for k, v in params.items()}


# --------------------------------------------------------------------------- export

def main():
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    out_dir = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    tok = ck.train_tokenizer(MERGES)
    cfg_json = ck.make_config(TEXT, KDA, tok)
    weights = train(cfg_json, tok)
    torch.set_grad_enabled(False)
    runs = ck.build_runs(cfg_json, lambda name, shape, init: weights[name])
    plan = ck.shard_plan_auto(runs, 2)
    for stale in glob.glob(os.path.join(out_dir, "*")):
        os.remove(stale)
    ck.write_checkpoint(out_dir, cfg_json, runs, plan, tok)
    ck.verify_layout(out_dir)
    ck.verify_roundtrip(out_dir, runs, tok)
    stop = {tok.specials["[EOS]"], tok.specials["<|end_of_msg|>"]}
    model = ref.K3Model.load(out_dir)
    answers = []
    for q in DEMO_PROMPTS:
        text = ck.render_chat([{"role": "user", "content": q}])
        ids = tok.encode(text)
        gen = ck.greedy_incremental_stop(model, ids, MAX_GEN, stop)
        body = [i for i in gen if i not in stop]
        answers.append({"question": q, "prompt_text": text, "prompt_ids": ids, "greedy_ids": gen,
                        "ends_with_eos": bool(gen) and gen[-1] == tok.specials["[EOS]"],
                        "decoded": tok.decode(gen), "answer_text":
                            tok.decode(body).split("<|close|>")[0]})
        print(f"Q: {q!r}\nA: {answers[-1]['decoded']!r}", flush=True)
    first = answers[0]
    exp = ck.compute_expected(out_dir, first["prompt_ids"], MAX_GEN, stop, extra={
        "checkpoint": "k3-demo", "prompt_text": first["prompt_text"], "thinking": False,
        "prompts": answers, "training": {"seed": SEED, "steps": STEPS, "batch": BATCH,
                                         "lr": LR, "qat_fraction": QAT_FRACTION,
                                         "corpus_pairs": len(demo_corpus.pairs())}})
    ck.dump_json(os.path.join(out_dir, "expected.json"), exp)
    size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(out_dir, "*")))
    print(f"demo: {exp['layer_map']} vocab {tok.vocab_size}, {len(plan)} shards, {size} bytes")


if __name__ == "__main__":
    main()
