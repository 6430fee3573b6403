#!/usr/bin/env python3
"""Fast differentiable float32 forward of the K3 tensor graph, for training the demo.

Computes the same function as k3_reference.K3Model.forward_full (checked by check():
logits agree to ~1e-5 on a random model) but batched: [B, T] ids at once, the KDA
recurrence a loop over time for the whole batch, MLA with a causal mask over the full
sequence, and the routed experts computed densely and weighted by the router's top-k
weights (zero for the experts not picked), which is exact for a few tiny experts.

Speed: Debian's torch 1.13 multiplies float32 through the generic reference BLAS
(~1.4 GFLOP/s here) but its oneDNN (mkldnn) inner product runs ~20 GFLOP/s, so every
weight multiply goes through mkldnn_linear in a small autograd Function.
"""

import os
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3_checkpoint as ck  # noqa: E402
import k3_reference as ref  # noqa: E402


def _mk(x2, w):
    return torch._C._nn.mkldnn_linear(x2.contiguous().to_mkldnn(), w.contiguous().to_mkldnn(), None).to_dense()


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        x2 = x.reshape(-1, x.shape[-1])
        ctx.save_for_backward(x2, w)
        ctx.xshape = x.shape
        return _mk(x2, w).reshape(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, g):
        x2, w = ctx.saved_tensors
        g2 = g.reshape(-1, w.shape[0])
        gx = _mk(g2, w.T).reshape(ctx.xshape) if ctx.needs_input_grad[0] else None
        gw = _mk(g2.T, x2.T) if ctx.needs_input_grad[1] else None
        return gx, gw


def lin(x, w):
    """x @ w.T through oneDNN (float32)."""
    return _Linear.apply(x, w)


class Fq:
    """Fake quantisation (straight-through) once QAT starts."""
    on = False


def fq_bf16(w):
    return w + (w.to(torch.bfloat16).float() - w).detach() if Fq.on else w


E2M1_MAGS = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def fq_mxfp4(w):
    """The exporter's MXFP4 rounding (k3_reference.mxfp4_encode: shared exponent
    floor(log2 amax) - 2, nearest E2M1, saturating at 6), straight-through."""
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


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def situ(g, u, beta, lbeta):
    return beta * torch.tanh(g / beta) * torch.sigmoid(g) * (lbeta * torch.tanh(u / lbeta))


def short_conv(x, w):
    """Causal depthwise conv + SiLU over [B, T, C], zero history."""
    C, K = w.shape[0], w.shape[-1]
    T = x.shape[1]
    xp = F.pad(x, (0, 0, K - 1, 0))
    w = w.reshape(C, K)
    y = xp[:, 0:T] * w[:, 0]
    for j in range(1, K):
        y = y + xp[:, j:j + T] * w[:, j]
    return y * torch.sigmoid(y)


def l2n(x):
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


class Net:
    """params: {released tensor name: float32 tensor}; routed experts under their base
    name (`...experts.E.w1`, float, not packed)."""

    def __init__(self, cfg_json, params):
        self.c = ref.K3Config(cfg_json)
        self.p = params
        self.eps = self.c.rms_norm_eps

    def w(self, name):
        v = self.p[name]
        if name.endswith(("A_log", "e_score_correction_bias")):
            return v
        return fq_bf16(v)

    def kda(self, x, a):
        c = self.c
        H, D = c.kda_num_heads, c.kda_head_dim
        B, T, _ = x.shape
        q = l2n(short_conv(lin(x, self.w(a + "q_proj.weight")), self.w(a + "q_conv1d.weight")).reshape(B, T, H, D))
        k = l2n(short_conv(lin(x, self.w(a + "k_proj.weight")), self.w(a + "k_conv1d.weight")).reshape(B, T, H, D))
        v = short_conv(lin(x, self.w(a + "v_proj.weight")), self.w(a + "v_conv1d.weight")).reshape(B, T, H, D)
        beta = torch.sigmoid(lin(x, self.w(a + "b_proj.weight")))
        z = lin(lin(x, self.w(a + "f_a_proj.weight")), self.w(a + "f_b_proj.weight"))
        u = (z + self.w(a + "dt_bias")[:H * D]).reshape(B, T, H, D)
        A = torch.exp(self.w(a + "A_log")[:H]).reshape(H, 1)
        alpha = torch.exp(c.gate_lower_bound * torch.sigmoid(A * u))
        # time-major for the loop: [T, B*H, D(,1)]
        al = alpha.permute(1, 0, 2, 3).reshape(T, B * H, D, 1)
        kt = k.permute(1, 0, 2, 3).reshape(T, B * H, D)
        vt = v.permute(1, 0, 2, 3).reshape(T, B * H, 1, D)
        qt = (q * D ** -0.5).permute(1, 0, 2, 3).reshape(T, B * H, D, 1)
        bt = beta.permute(1, 0, 2).reshape(T, B * H, 1, 1)
        S = x.new_zeros(B * H, D, D)
        outs = []
        for t in range(T):
            S = S * al[t]
            kk = kt[t].unsqueeze(-1)
            # broadcast-and-sum: torch's generic-BLAS bmm is slower for [D,D] blocks
            ut = (kk * S).sum(1, keepdim=True)                       # k^T S  [BH,1,D]
            S = S + (bt[t] * kk) * (vt[t] - ut)
            outs.append((qt[t] * S).sum(1))
        o = torch.stack(outs, 0).reshape(T, B, H, D).permute(1, 0, 2, 3)
        o = rms(o, self.w(a + "o_norm.weight"), self.eps)
        o = o.reshape(B, T, H * D) * torch.sigmoid(lin(x, self.w(a + "g_proj.weight")))
        return lin(o, self.w(a + "o_proj.weight"))

    def mla(self, x, a):
        c = self.c
        H, dn, dr, dv = c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
        B, T, _ = x.shape
        q = lin(rms(lin(x, self.w(a + "q_a_proj.weight")), self.w(a + "q_a_layernorm.weight"), self.eps),
                self.w(a + "q_b_proj.weight")).reshape(B, T, H, dn + dr)
        kv = lin(x, self.w(a + "kv_a_proj_with_mqa.weight"))
        lat = rms(kv[..., :c.kv_lora_rank], self.w(a + "kv_a_layernorm.weight"), self.eps)
        rope = kv[..., c.kv_lora_rank:]
        kvb = lin(lat, self.w(a + "kv_b_proj.weight")).reshape(B, T, H, dn + dv)
        # one matmul per head: [q_nope | q_rope] . [k_nope | shared rope key]
        keys = torch.cat([kvb[..., :dn], rope.unsqueeze(2).expand(B, T, H, dr)], -1)
        sc = torch.matmul(q.transpose(1, 2), keys.permute(0, 2, 3, 1)) * (dn + dr) ** -0.5
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        sc = sc.masked_fill(mask, float("-inf"))
        o = torch.matmul(torch.softmax(sc, -1), kvb[..., dn:].transpose(1, 2))  # [B,H,T,dv]
        o = o.transpose(1, 2).reshape(B, T, H * dv)
        o = o * torch.sigmoid(lin(x, self.w(a + "g_proj.weight")))
        return lin(o, self.w(a + "o_proj.weight"))

    def mlp(self, x, g, u, d):
        c = self.c
        return lin(situ(lin(x, g), lin(x, u), c.situ_beta, c.situ_linear_beta), d)

    def moe(self, x, m):
        c = self.c
        NE, k, I = c.num_experts, c.num_experts_per_token, c.moe_intermediate_size
        scores = torch.sigmoid(lin(x, self.w(m + "gate.weight")))
        choice = scores + self.p[m + "gate.e_score_correction_bias"]
        idx = torch.topk(choice.detach(), k, dim=-1).indices
        wts = torch.gather(scores, -1, idx)
        if c.moe_renormalize:
            wts = wts / wts.sum(-1, keepdim=True)
        W = torch.zeros_like(scores).scatter(-1, idx, wts * c.routed_scaling_factor)
        z = lin(x, self.w(m + "routed_expert_down_proj.weight"))
        ex = [f"{m}experts.{e}." for e in range(NE)]
        w1 = torch.cat([fq_mxfp4(self.p[b + "w1"]) for b in ex], 0)
        w3 = torch.cat([fq_mxfp4(self.p[b + "w3"]) for b in ex], 0)
        w2 = torch.cat([fq_mxfp4(self.p[b + "w2"]) for b in ex], 1)
        h = situ(lin(z, w1), lin(z, w3), c.situ_beta, c.situ_linear_beta)
        h = (h.reshape(*h.shape[:-1], NE, I) * W.unsqueeze(-1)).reshape(h.shape)
        acc = lin(h, w2)
        if c.latent_moe_use_norm:
            acc = rms(acc, self.w(m + "routed_expert_norm.weight"), self.eps)
        y = lin(acc, self.w(m + "routed_expert_up_proj.weight"))
        if c.num_shared_experts > 0:
            s = m + "shared_experts."
            y = y + self.mlp(x, self.w(s + "gate_proj.weight"), self.w(s + "up_proj.weight"),
                             self.w(s + "down_proj.weight"))
        return y

    def attn_res(self, srcs, proj, norm):
        src = torch.stack(srcs)
        logits = (rms(src, norm, self.eps) * proj.reshape(-1)).sum(-1)
        return (torch.softmax(logits, 0).unsqueeze(-1) * src).sum(0)

    def forward(self, ids):
        """ids [B, T] long -> logits [B, T, vocab]."""
        c, P = self.c, ref.PREFIX
        h = self.w(P + "embed_tokens.weight")[ids]
        blocks = []
        for L in range(c.num_hidden_layers):
            pre = f"{P}layers.{L}."
            partial, x = h, h
            if blocks:
                x = self.attn_res(blocks + [partial], self.w(pre + "self_attention_res_proj.weight"),
                                  self.w(pre + "self_attention_res_norm.weight"))
            if L % c.attn_res_block_size == 0:
                blocks = blocks + [partial]
                partial = None
            xn = rms(x, self.w(pre + "input_layernorm.weight"), self.eps)
            att = self.mla(xn, pre + "self_attn.") if c.is_mla(L) else self.kda(xn, pre + "self_attn.")
            partial = att if partial is None else partial + att
            x = self.attn_res(blocks + [partial], self.w(pre + "mlp_res_proj.weight"),
                              self.w(pre + "mlp_res_norm.weight"))
            xn = rms(x, self.w(pre + "post_attention_layernorm.weight"), self.eps)
            if c.is_dense(L):
                mlp = self.mlp(xn, *(self.w(f"{pre}mlp.{n}_proj.weight") for n in ("gate", "up", "down")))
            else:
                mlp = self.moe(xn, pre + "block_sparse_moe.")
            h = partial + mlp
        h = self.attn_res(blocks + [h], self.w(P + "output_attn_res_proj.weight"),
                          self.w(P + "output_attn_res_norm.weight"))
        return lin(rms(h, self.w(P + "norm.weight"), self.eps), self.w(ref.HEAD_NAME))


def params_from_dir(model_dir):
    """The float weights of a checkpoint directory as Net params (experts decoded)."""
    c = ref.K3Config.from_file(os.path.join(model_dir, "config.json"))
    out = {}
    for name, v in ref.load_checkpoint_tensors(model_dir).items():
        if isinstance(v, tuple):
            cols = c.moe_intermediate_size if name.endswith(".w2") else c.routed_expert_hidden_size
            v = ref.mxfp4_decode(v[1], v[2], cols=cols)
        out[name] = v.float()
    return out


def check(cfg_json, tok, seed=7, batch=3, length=19):
    """A random model with cfg_json's shapes: Net.forward == K3Model.forward_full on
    every sequence of a batch. Returns the worst |diff| / (1 + |logit|)."""
    runs = ck.build_runs(cfg_json, ck.RandomSource(seed))
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, tok.vocab_size, (batch, length), generator=gen)
    with tempfile.TemporaryDirectory() as d:
        ck.write_checkpoint(d, cfg_json, runs, [list(runs)], tok)
        model = ref.K3Model.load(d)
        net = Net(cfg_json, params_from_dir(d))
    with torch.no_grad():
        got = net.forward(ids)
    worst = 0.0
    for b in range(batch):
        want = model.forward_full(ids[b].tolist())
        worst = max(worst, float(((got[b] - want).abs() / (1 + want.abs())).max()))
    return worst
