#!/usr/bin/env python3
"""Plain-PyTorch reference of the Kimi K3 forward pass (float32 math).

Written from the project's specification: /work/shared/seeds/000_*.txt (sections
2 config, 4 MXFP4, 5 kernels, 6 KDA, 7 MLA, 8 attention residuals, 9 router and
latent MoE, 11 the model-level forward), /work/shared/seeds/002_*.txt (the latent
MoE formulas) and /work/shared/reference/README.md (config keys, tensor names,
dtypes). Nothing here is copied from the seeds' C code.

Two paths give the same logits:
  * forward_full(ids): one pass over the whole sequence, fresh state;
  * IncrementalSession.step(ids): feeds tokens one call at a time, carrying the
    MLA latent cache, the KDA recurrent state and the ShortConv history.

Tensors are plain torch float32; weights are read from safetensors shards with the
small reader below (BF16 widened exactly, U8 expert bytes decoded as MXFP4).
"""

import json
import os
import struct

import numpy as np
import torch

PREFIX = "language_model.model."
HEAD_NAME = "language_model.lm_head.weight"

# --------------------------------------------------------------------------------
# safetensors: a small reader and writer (seed section 1)
# --------------------------------------------------------------------------------

_NP_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U8": np.uint8, "BOOL": np.bool_,
}


def bf16_bits_to_f32(bits):
    """BF16 is the top half of an f32: widening is a 16-bit shift, exact."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """Round-to-nearest-even f32 -> bf16 bit patterns (torch does the rounding)."""
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().view(np.uint16)


def read_safetensors(path):
    """Return {name: (dtype_str, numpy array of the stored elements)}.

    BF16 comes back as its uint16 bit patterns; use tensor_to_f32 to widen."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (hlen,) = struct.unpack("<Q", blob[:8])
    if 8 + hlen > len(blob):
        raise ValueError(f"{path}: header length {hlen} runs past the file")
    header = json.loads(blob[8:8 + hlen].decode("utf-8"))
    data = memoryview(blob)[8 + hlen:]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dt = meta["dtype"]
        if dt not in _NP_DTYPES:
            raise ValueError(f"{path}: tensor {name} has unknown dtype {dt}")
        start, end = meta["data_offsets"]
        if not (0 <= start <= end <= len(data)):
            raise ValueError(f"{path}: tensor {name} offsets {start}..{end} outside data")
        arr = np.frombuffer(data[start:end], dtype=_NP_DTYPES[dt])
        shape = meta["shape"]
        if arr.size != int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"{path}: tensor {name} byte size does not match shape {shape}")
        out[name] = (dt, arr.reshape(shape).copy())
    return out


def tensor_to_f32(dtype, arr):
    if dtype == "BF16":
        return torch.from_numpy(bf16_bits_to_f32(arr))
    return torch.from_numpy(arr.astype(np.float32))


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype_str, shape, numpy array). Order is kept on disk."""
    header, chunks, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, dt, shape, arr in tensors:
        raw = np.ascontiguousarray(arr, dtype=_NP_DTYPES[dt]).tobytes()
        if len(raw) != int(np.prod(shape, dtype=np.int64)) * np.dtype(_NP_DTYPES[dt]).itemsize:
            raise ValueError(f"{name}: data does not match shape {shape}")
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * ((8 - len(hbytes) % 8) % 8)  # data starts 8-aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for c in chunks:
            f.write(c)
    return offset


# --------------------------------------------------------------------------------
# MXFP4 (seed section 4)
# --------------------------------------------------------------------------------

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                 -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)
MXFP4_GROUP = 32


def e8m0_to_f32(scales):
    """2^(s-127); s = 255 is NaN by spec and is mapped to 0 (kills one group only)."""
    s = np.asarray(scales, dtype=np.int32)
    v = np.ldexp(1.0, np.where(s == 255, 0, s) - 127).astype(np.float32)
    v[s == 255] = 0.0
    return v


def mxfp4_decode(packed, scales, group=MXFP4_GROUP, cols=None):
    """packed U8 [rows, ceil(in/2)], scales U8 [rows, ceil(in/group)] -> float32 [rows, in].

    The LOW nibble is the EVEN element, the high nibble the odd one. When the row
    width is not a multiple of the group, the last group is partial (its scale covers
    only the remaining elements); an odd width leaves the last high nibble unused.
    cols (the true width) defaults to 2 * packed columns."""
    packed = np.asarray(packed, dtype=np.uint8)
    rows, half = packed.shape
    n = 2 * half if cols is None else int(cols)
    if not (2 * half - 1 <= n <= 2 * half):
        raise ValueError(f"mxfp4: width {n} does not fit {half} packed bytes per row")
    vals = np.empty((rows, half * 2), dtype=np.float32)
    vals[:, 0::2] = E2M1[packed & 0x0F]
    vals[:, 1::2] = E2M1[packed >> 4]
    s = e8m0_to_f32(scales)
    if s.shape[1] != -(-n // group):
        raise ValueError(f"mxfp4: {s.shape[1]} scale groups do not cover {n} elements")
    return torch.from_numpy(vals[:, :n] * np.repeat(s, group, axis=1)[:, :n])


def mxfp4_encode(w, group=MXFP4_GROUP):
    """float32 [rows, in] -> (packed U8 [rows, ceil(in/2)], scales U8 [rows, ceil(in/group)]).

    OCP MX: shared exponent floor(log2(amax)) - 2 (E2M1's emax), taken exactly with
    frexp, so the largest element lands in [4, 8) and saturates at 6; elements round
    to the nearest E2M1 value, ties to the even code. A partial last group is padded
    with zeros (which change neither its amax nor its codes)."""
    w = np.asarray(w, dtype=np.float32)
    rows, n = w.shape
    ng = -(-n // group)
    pad = np.zeros((rows, ng * group), dtype=np.float32)
    pad[:, :n] = w
    g = pad.reshape(rows, ng, group)
    amax = np.abs(g).max(axis=2)
    _, e = np.frexp(amax)                      # amax = m * 2^e, m in [0.5, 1)
    exp = np.where(amax > 0, e.astype(np.int64) - 1 - 2, -127)
    sbyte = np.clip(exp + 127, 0, 254).astype(np.uint8)
    scaled = (g / e8m0_to_f32(sbyte)[:, :, None]).astype(np.float32)
    mags = E2M1[:8]
    dist = np.abs(np.abs(scaled)[..., None] - mags)
    nearest = dist == dist.min(axis=-1, keepdims=True)   # one code, or two adjacent on a tie
    even = nearest & (np.arange(8) % 2 == 0)
    idx = np.where(even.any(axis=-1), even.argmax(axis=-1), nearest.argmax(axis=-1))
    nib = (idx + np.where(np.signbit(scaled) & (idx > 0), 8, 0)).astype(np.uint8)
    nib = nib.reshape(rows, ng * group)[:, :2 * (-(-n // 2))]
    packed = (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)
    return packed, sbyte


# --------------------------------------------------------------------------------
# config.json (seed section 2): nested release shape or flat shape, nothing guessed
# --------------------------------------------------------------------------------

# field -> accepted key names (the second spellings are the peer fixtures' flat names)
_TEXT_KEYS = {
    "hidden_size": ["hidden_size"], "num_hidden_layers": ["num_hidden_layers"],
    "vocab_size": ["vocab_size"], "rms_norm_eps": ["rms_norm_eps"],
    "num_attention_heads": ["num_attention_heads"], "q_lora_rank": ["q_lora_rank"],
    "kv_lora_rank": ["kv_lora_rank"], "qk_nope_head_dim": ["qk_nope_head_dim"],
    "qk_rope_head_dim": ["qk_rope_head_dim"], "v_head_dim": ["v_head_dim"],
    "mla_use_output_gate": ["mla_use_output_gate"], "num_experts": ["num_experts"],
    "num_experts_per_token": ["num_experts_per_token"],
    "num_shared_experts": ["num_shared_experts"],
    "routed_expert_hidden_size": ["routed_expert_hidden_size"],
    "moe_intermediate_size": ["moe_intermediate_size"],
    "routed_scaling_factor": ["routed_scaling_factor"],
    "moe_renormalize": ["moe_renormalize"], "latent_moe_use_norm": ["latent_moe_use_norm"],
    "first_k_dense_replace": ["first_k_dense_replace"],
    "intermediate_size": ["intermediate_size"],
    "attn_res_block_size": ["attn_res_block_size"],
    "situ_beta": ["activation_situ_beta", "situ_beta"],
    "situ_linear_beta": ["activation_situ_linear_beta", "situ_linear_beta"],
}
_KDA_KEYS = {
    "kda_num_heads": ["num_heads", "kda_num_heads"],
    "kda_head_dim": ["head_dim", "kda_head_dim"],
    "short_conv_kernel_size": ["short_conv_kernel_size"],
    "gate_lower_bound": ["gate_lower_bound"],
}


class K3Config:
    """Every model dimension, read from config.json; an absent field is an error."""

    def __init__(self, raw):
        text = raw.get("text_config", raw)
        kda = text.get("linear_attn_config", text)
        missing = []

        def pick(src, names):
            for n in names:
                if n in src and src[n] is not None:
                    return src[n]
            missing.append(names[0])
            return None

        for field, names in _TEXT_KEYS.items():
            setattr(self, field, pick(text, names))
        for field, names in _KDA_KEYS.items():
            setattr(self, field, pick(kda, names))
        full = kda.get("full_attn_layers", text.get("full_attn_layers"))
        kdal = kda.get("kda_layers", text.get("kda_layers"))
        if full is None:
            missing.append("full_attn_layers")
        if missing:
            raise ValueError("config is missing required field(s): " + ", ".join(missing))
        n = int(self.num_hidden_layers)
        for name, lst in (("full_attn_layers", full), ("kda_layers", kdal or [])):
            for i, v in enumerate(lst):
                if not (1 <= int(v) <= n):
                    raise ValueError(f"{name}[{i}] = {v} is outside 1..{n} (the list is ONE-based)")
        self.mla_layers = sorted(int(v) - 1 for v in full)  # zero-based from here on
        if kdal is not None:
            kda0 = sorted(int(v) - 1 for v in kdal)
            if sorted(kda0 + self.mla_layers) != list(range(n)):
                raise ValueError("kda_layers and full_attn_layers do not partition 1..N")
        k = int(self.num_experts_per_token)
        if not (1 <= k <= int(self.num_experts)):
            raise ValueError(f"num_experts_per_token = {k} is outside 1..{self.num_experts}")
        for f in ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads",
                  "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                  "v_head_dim", "num_experts", "num_experts_per_token", "num_shared_experts",
                  "routed_expert_hidden_size", "moe_intermediate_size",
                  "first_k_dense_replace", "intermediate_size", "attn_res_block_size",
                  "kda_num_heads", "kda_head_dim", "short_conv_kernel_size"):
            setattr(self, f, int(getattr(self, f)))
        for f in ("rms_norm_eps", "routed_scaling_factor", "situ_beta", "situ_linear_beta",
                  "gate_lower_bound"):
            setattr(self, f, float(getattr(self, f)))
        for f in ("mla_use_output_gate", "moe_renormalize", "latent_moe_use_norm"):
            setattr(self, f, bool(getattr(self, f)))

    @classmethod
    def from_file(cls, path):
        with open(path) as f:
            return cls(json.load(f))

    def is_mla(self, layer):
        return layer in self.mla_layers

    def is_dense(self, layer):
        return layer < self.first_k_dense_replace


# --------------------------------------------------------------------------------
# kernels (seed section 5, 9): RMSNorm, SiTU-GLU, router
# --------------------------------------------------------------------------------

# Numerics: every tensor is float32, but every dot product / reduction is accumulated
# in float64 and rounded once to float32 (the engine's contract, seed section 5).
# Plain float32 matmuls drift by a few float32 ulps of the large intermediates and
# fail the peer moe fixture's 1e-5 absolute tolerance on its small outputs.

def linear(x, w):
    """x @ w.T (nn.Linear without bias), float64 accumulation, float32 result."""
    return (x.double() @ w.double().T).float()


def einsum(eq, *ops):
    """torch.einsum with float64 accumulation and a float32 result."""
    return torch.einsum(eq, *(o.double() for o in ops)).float()


def rms_norm(x, weight, eps):
    """x / sqrt(mean(x^2) + eps) * weight, over the last dimension (eps inside sqrt)."""
    ms = x.double().pow(2).mean(dim=-1, keepdim=True)
    inv = torch.rsqrt(ms + eps).float()
    return x * inv * weight


def silu(x):
    return x * torch.sigmoid(x)


def situ_glu(gate, up, beta, linear_beta):
    """a = beta*tanh(g/beta)*sigmoid(g) (sigmoid of the UNCAPPED gate),
    u = linear_beta*tanh(up/linear_beta), out = a*u (bounded by beta*linear_beta)."""
    a = beta * torch.tanh(gate / beta) * torch.sigmoid(gate)
    u = linear_beta * torch.tanh(up / linear_beta)
    return a * u


def glu_mlp(x, w_gate, w_up, w_down, beta, linear_beta):
    """KimiMLP: down(situ_glu(gate(x), up(x))). Used by the dense layer 0, the shared
    experts and (with decoded MXFP4 weights) each routed expert."""
    return linear(situ_glu(linear(x, w_gate), linear(x, w_up), beta, linear_beta), w_down)


def route(x, gate_w, bias, top_k, renormalize, scale):
    """Sigmoid router. The bias picks the experts; the weights come from the UNBIASED
    scores, renormalised over the chosen k, then times routed_scaling_factor.
    Returns (idx [T,k] long, weight [T,k]) with idx in descending biased score."""
    scores = torch.sigmoid(linear(x, gate_w))
    choice = scores + bias if bias is not None else scores
    _, idx = torch.topk(choice, top_k, dim=-1, sorted=True)
    w = torch.gather(scores, -1, idx)
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return idx, w * scale


def latent_moe(x, p, cfg):
    """Stable LatentMoE (seed 002, steps 1-23). x [T,E] -> [T,E].

    p: gate [n,E], bias [n], down [L,E], up [E,L], norm [L] (or None),
       experts: list of (w1 gate [I,L], w3 up [I,L], w2 down [L,I]),
       shared: (gate [SI,E], up [SI,E], down [E,SI]), trace: optional list."""
    idx, wts = route(x, p["gate"], p["bias"], cfg.num_experts_per_token,
                     cfg.moe_renormalize, cfg.routed_scaling_factor)
    if p.get("trace") is not None:  # optional: record the selection (fixture generator)
        p["trace"].append(idx.clone())
    z = linear(x, p["down"])  # latent, from the full-width x
    acc = torch.zeros_like(z)
    for t in range(x.shape[0]):
        for j in range(idx.shape[1]):
            w1, w3, w2 = p["experts"][int(idx[t, j])]
            acc[t] += wts[t, j] * glu_mlp(z[t], w1, w3, w2, cfg.situ_beta, cfg.situ_linear_beta)
    if cfg.latent_moe_use_norm:
        acc = rms_norm(acc, p["norm"], cfg.rms_norm_eps)   # the AGGREGATE, once
    y = linear(acc, p["up"])
    if p.get("shared") is not None:                  # full-width input, unweighted
        sg, su, sd = p["shared"]
        y = y + glu_mlp(x, sg, su, sd, cfg.situ_beta, cfg.situ_linear_beta)
    return y


# --------------------------------------------------------------------------------
# KDA (seed section 6)
# --------------------------------------------------------------------------------

def short_conv(x, weight, state=None):
    """Causal depthwise conv + SiLU. x [T,C], weight [C,1,K] (taps oldest -> newest),
    state [C,K-1] (the previous K-1 inputs, oldest first) or None for zeros.
    Returns (y [T,C], new state [C,K-1])."""
    C, K = weight.shape[0], weight.shape[-1]
    w = weight.reshape(C, K)
    hist = K - 1
    prev = torch.zeros(C, hist) if state is None else state
    seq = torch.cat([prev.T, x], dim=0)              # [hist+T, C]
    T = x.shape[0]
    y = torch.zeros(T, C)
    for j in range(K):
        y = y + seq[j:j + T] * w[:, j]
    new_state = seq[T:].T.contiguous() if hist > 0 else torch.zeros(C, 0)
    return silu(y), new_state


def l2_norm(x, eps=1e-6):
    """x / sqrt(sum(x^2) + eps): a SUM of squares, not a mean."""
    return x * torch.rsqrt(x.double().pow(2).sum(dim=-1, keepdim=True) + eps).float()


def kda_decay(z, A_log, dt_bias, num_heads, head_dim, lower_bound):
    """g = lower_bound * sigmoid(exp(A_log[h]) * (z + dt_bias)), alpha = exp(g).
    A_log is indexed PER HEAD (only the first num_heads values are used).
    z [..., H*D] -> g, alpha [..., H, D]."""
    shp = z.shape[:-1] + (num_heads, head_dim)
    u = (z + dt_bias.reshape(-1)[:num_heads * head_dim]).reshape(shp)
    a = torch.exp(A_log.reshape(-1)[:num_heads]).reshape(num_heads, 1)
    g = lower_bound * torch.sigmoid(a * u)
    return g, torch.exp(g)


def kda_recurrence(q, k, v, alpha, beta, q_scale, state=None):
    """Gated delta rule, one position at a time. q,k [T,H,Dk], v [T,H,Dv],
    alpha [T,H,Dk], beta [T,H], state [H,Dk,Dv] or None.
    S <- diag(alpha) S;  u = S^T k;  S <- S + beta k (v - u)^T;  o = S^T (q*q_scale)."""
    T, H, Dk = q.shape
    Dv = v.shape[-1]
    S = torch.zeros(H, Dk, Dv) if state is None else state.clone()
    out = torch.zeros(T, H, Dv)
    for t in range(T):
        S = S * alpha[t].unsqueeze(-1)
        u = einsum("hk,hkv->hv", k[t], S)
        S = S + beta[t].reshape(H, 1, 1) * k[t].unsqueeze(-1) * (v[t] - u).unsqueeze(1)
        out[t] = einsum("hk,hkv->hv", q[t] * q_scale, S)
    return out, S


def kda_attention(x, p, cfg, state=None):
    """One KDA layer (seed section 6, steps 1-9). x [T,E] (already input-normed).
    p: q,k,v,g [P,E], o [E,P], f_a [D,E], f_b [P,D], b [H,E], q_conv,k_conv,v_conv
       [P,1,K], A_log, dt_bias [P], o_norm [D].
    state: dict(S, q_conv, k_conv, v_conv) or None. Returns (out [T,E], new state)."""
    H, D = cfg.kda_num_heads, cfg.kda_head_dim
    T = x.shape[0]
    st = state or {}
    q, qs = short_conv(linear(x, p["q"]), p["q_conv"], st.get("q_conv"))
    k, ks = short_conv(linear(x, p["k"]), p["k_conv"], st.get("k_conv"))
    v, vs = short_conv(linear(x, p["v"]), p["v_conv"], st.get("v_conv"))
    q = l2_norm(q.reshape(T, H, D))                  # q and k only; v untouched
    k = l2_norm(k.reshape(T, H, D))
    v = v.reshape(T, H, D)
    beta = torch.sigmoid(linear(x, p["b"]))  # [T,H]
    z = linear(linear(x, p["f_a"]), p["f_b"])  # low-rank decay gate [T,P]
    _, alpha = kda_decay(z, p["A_log"], p["dt_bias"], H, D, cfg.gate_lower_bound)
    o, S = kda_recurrence(q, k, v, alpha, beta, D ** -0.5, st.get("S"))
    o = rms_norm(o, p["o_norm"], cfg.rms_norm_eps)   # per head, THEN the gate
    o = o.reshape(T, H * D) * torch.sigmoid(linear(x, p["g"]))
    return linear(o, p["o"]), {"S": S, "q_conv": qs, "k_conv": ks, "v_conv": vs}


# --------------------------------------------------------------------------------
# Gated MLA (seed section 7)
# --------------------------------------------------------------------------------

def mla_compress_kv(x, p, cfg):
    """kv_a_proj_with_mqa -> (normed latent [T,kv_lora], raw rope slots [T,rope]).
    This pair is the whole per-position cache; the rope part is never rotated."""
    kv = linear(x, p["kv_a"])
    latent = rms_norm(kv[:, :cfg.kv_lora_rank], p["kv_a_norm"], cfg.rms_norm_eps)
    return latent, kv[:, cfg.kv_lora_rank:]


def mla_attention(x, p, cfg, cache=None):
    """Gated MLA over new positions x [T,E] (already input-normed), attending causally
    over cache (dict latent [S,kv_lora], rope [S,rope]) plus themselves.
    q: q_a -> q_a_layernorm -> q_b; score = (q_nope.k_nope + q_rope.k_rope) * (nope+rope)^-0.5
    with ONE shared, unrotated rope key for all heads; out = o_proj(attn * sigmoid(g_proj(x)))."""
    H, dn, dr, dv = (cfg.num_attention_heads, cfg.qk_nope_head_dim,
                     cfg.qk_rope_head_dim, cfg.v_head_dim)
    T = x.shape[0]
    q = linear(rms_norm(linear(x, p["q_a"]), p["q_a_norm"], cfg.rms_norm_eps), p["q_b"])
    q = q.reshape(T, H, dn + dr)
    latent, rope = mla_compress_kv(x, p, cfg)
    if cache is not None and cache["latent"].shape[0] > 0:
        latent = torch.cat([cache["latent"], latent], dim=0)
        rope = torch.cat([cache["rope"], rope], dim=0)
    S = latent.shape[0]
    past = S - T
    kvb = linear(latent, p["kv_b"]).reshape(S, H, dn + dv)
    k_nope, v = kvb[:, :, :dn], kvb[:, :, dn:]
    scores = (einsum("thd,shd->hts", q[:, :, :dn], k_nope)
              + einsum("thd,sd->hts", q[:, :, dn:], rope)) * (dn + dr) ** -0.5
    pos_t = torch.arange(T).reshape(T, 1) + past
    mask = torch.arange(S).reshape(1, S) > pos_t     # causal: s <= position
    scores = scores.masked_fill(mask, float("-inf"))
    o = einsum("hts,shd->thd", torch.softmax(scores, dim=-1), v).reshape(T, H * dv)
    if cfg.mla_use_output_gate:
        o = o * torch.sigmoid(linear(x, p["g"]))
    return linear(o, p["o"]), {"latent": latent, "rope": rope}


# --------------------------------------------------------------------------------
# attention residuals and the decoder layer (seed section 8)
# --------------------------------------------------------------------------------

def attn_res(sources, proj_w, norm_w, eps):
    """Softmax-weighted mix of sources [N,T,E]: key = RMSNorm(source) (with norm_w),
    score = proj_w . key, value = the RAW source. Returns [T,E]."""
    keys = rms_norm(sources, norm_w, eps)
    logits = einsum("nte,e->nt", keys, proj_w.reshape(-1))
    return einsum("nt,nte->te", torch.softmax(logits, dim=0), sources)


def decoder_layer(h, blocks, lw, cfg, layer_idx, state=None):
    """One layer with attention residuals. h [T,E] is the running partial block;
    blocks is the list of block snapshots (each [T,E]); returns (h, blocks, state).
    Pre-attention aggregation only when a block exists; boundary when
    layer_idx % attn_res_block_size == 0 (snapshot, then clear the partial block);
    the pre-MLP aggregation always runs."""
    eps = cfg.rms_norm_eps
    partial = h
    x = h
    if blocks:
        x = attn_res(torch.stack(blocks + [partial]), lw["attn_res_proj"], lw["attn_res_norm"], eps)
    if layer_idx % cfg.attn_res_block_size == 0:
        blocks = blocks + [partial]
        partial = None
    xn = rms_norm(x, lw["input_norm"], eps)
    if "kda" in lw:
        att, state = kda_attention(xn, lw["kda"], cfg, state)
    else:
        att, state = mla_attention(xn, lw["mla"], cfg, state)
    partial = att if partial is None else partial + att
    x = attn_res(torch.stack(blocks + [partial]), lw["mlp_res_proj"], lw["mlp_res_norm"], eps)
    xn = rms_norm(x, lw["post_norm"], eps)
    if "moe" in lw:
        mlp = latent_moe(xn, lw["moe"], cfg)
    else:
        g, u, d = lw["dense"]
        mlp = glu_mlp(xn, g, u, d, cfg.situ_beta, cfg.situ_linear_beta)
    return partial + mlp, blocks, state


# --------------------------------------------------------------------------------
# the model (seed section 11): embed, layers, output aggregation, norm, lm_head
# --------------------------------------------------------------------------------

class K3Model:
    def __init__(self, cfg, tensors):
        """tensors: {name: float32 torch tensor or ('mxfp4', packed, scale)}; a routed
        expert matrix is either (MXFP4) or a float NAME.weight."""
        self.cfg = cfg
        T = tensors

        def get(name):
            if name not in T:
                raise KeyError(f"checkpoint has no tensor {name}")
            return T[name]

        self.embed = get(PREFIX + "embed_tokens.weight")
        self.norm = get(PREFIX + "norm.weight")
        self.out_res_norm = get(PREFIX + "output_attn_res_norm.weight")
        self.out_res_proj = get(PREFIX + "output_attn_res_proj.weight")
        self.lm_head = get(HEAD_NAME)
        self.layers = []
        for L in range(cfg.num_hidden_layers):
            pre = f"{PREFIX}layers.{L}."
            lw = {
                "input_norm": get(pre + "input_layernorm.weight"),
                "post_norm": get(pre + "post_attention_layernorm.weight"),
                "attn_res_norm": get(pre + "self_attention_res_norm.weight"),
                "attn_res_proj": get(pre + "self_attention_res_proj.weight"),
                "mlp_res_norm": get(pre + "mlp_res_norm.weight"),
                "mlp_res_proj": get(pre + "mlp_res_proj.weight"),
            }
            a = pre + "self_attn."
            if cfg.is_mla(L):
                lw["mla"] = {
                    "q_a": get(a + "q_a_proj.weight"), "q_a_norm": get(a + "q_a_layernorm.weight"),
                    "q_b": get(a + "q_b_proj.weight"),
                    "kv_a": get(a + "kv_a_proj_with_mqa.weight"),
                    "kv_a_norm": get(a + "kv_a_layernorm.weight"),
                    "kv_b": get(a + "kv_b_proj.weight"), "o": get(a + "o_proj.weight"),
                    "g": get(a + "g_proj.weight") if cfg.mla_use_output_gate else None,
                }
            else:
                lw["kda"] = {k: get(a + n) for k, n in (
                    ("q", "q_proj.weight"), ("k", "k_proj.weight"), ("v", "v_proj.weight"),
                    ("g", "g_proj.weight"), ("o", "o_proj.weight"),
                    ("q_conv", "q_conv1d.weight"), ("k_conv", "k_conv1d.weight"),
                    ("v_conv", "v_conv1d.weight"), ("f_a", "f_a_proj.weight"),
                    ("f_b", "f_b_proj.weight"), ("b", "b_proj.weight"), ("A_log", "A_log"),
                    ("dt_bias", "dt_bias"), ("o_norm", "o_norm.weight"))}
            if cfg.is_dense(L):
                lw["dense"] = tuple(get(pre + f"mlp.{n}_proj.weight") for n in ("gate", "up", "down"))
            else:
                m = pre + "block_sparse_moe."
                experts = []

                def expert_matrix(base, cols):
                    # MXFP4 (packed + scales, read as one entry) or a plain float
                    # NAME.weight (a checkpoint without quantization_config)
                    if base in T:
                        return mxfp4_decode(*T[base][1:], cols=cols)
                    return get(base + ".weight")

                for e in range(cfg.num_experts):
                    lat, inter = cfg.routed_expert_hidden_size, cfg.moe_intermediate_size
                    experts.append(tuple(
                        expert_matrix(f"{m}experts.{e}.{w}", c)
                        for w, c in (("w1", lat), ("w3", lat), ("w2", inter))))
                lw["moe"] = {
                    "gate": get(m + "gate.weight"), "bias": get(m + "gate.e_score_correction_bias"),
                    "down": get(m + "routed_expert_down_proj.weight"),
                    "up": get(m + "routed_expert_up_proj.weight"),
                    "norm": get(m + "routed_expert_norm.weight") if cfg.latent_moe_use_norm else None,
                    "experts": experts,
                    "shared": (tuple(get(m + f"shared_experts.{n}_proj.weight")
                                     for n in ("gate", "up", "down"))
                               if cfg.num_shared_experts > 0 else None),
                }
            self.layers.append(lw)

    @classmethod
    def load(cls, model_dir):
        return cls(K3Config.from_file(os.path.join(model_dir, "config.json")),
                   load_checkpoint_tensors(model_dir))

    def _forward(self, ids, states):
        cfg = self.cfg
        h = self.embed[torch.as_tensor(ids, dtype=torch.long)]
        blocks = []
        for L, lw in enumerate(self.layers):
            h, blocks, states[L] = decoder_layer(h, blocks, lw, cfg, L, states[L])
        h = attn_res(torch.stack(blocks + [h]), self.out_res_proj, self.out_res_norm, cfg.rms_norm_eps)
        return linear(rms_norm(h, self.norm, cfg.rms_norm_eps), self.lm_head)

    def forward_full(self, ids):
        """Logits [T, vocab] for every position, from a fresh state."""
        with torch.no_grad():
            return self._forward(list(ids), [None] * len(self.layers))

    def session(self):
        return IncrementalSession(self)


class IncrementalSession:
    """Carries the MLA latent cache and the KDA recurrent + ShortConv state."""

    def __init__(self, model):
        self.model = model
        self.states = [None] * len(model.layers)
        self.length = 0

    def step(self, ids):
        """Feed new token ids; returns their logits [len(ids), vocab]."""
        with torch.no_grad():
            logits = self.model._forward(list(ids), self.states)
        self.length += len(ids)
        return logits


def load_checkpoint_tensors(model_dir):
    """Read every shard listed in model.safetensors.index.json. Float tensors come back
    as float32 torch tensors; an expert's weight_packed/weight_scale pair comes back as
    ('mxfp4', packed, scale) under the name without the suffix."""
    with open(os.path.join(model_dir, "model.safetensors.index.json")) as f:
        index = json.load(f)
    out, packed = {}, {}
    for shard in sorted(set(index["weight_map"].values())):
        for name, (dt, arr) in read_safetensors(os.path.join(model_dir, shard)).items():
            if index["weight_map"].get(name) != shard:
                raise ValueError(f"{shard}: tensor {name} is not mapped to this shard by the index")
            if dt == "U8":
                packed[name] = arr
            else:
                out[name] = tensor_to_f32(dt, arr)
    for name in index["weight_map"]:
        if name not in out and name not in packed:
            raise ValueError(f"index names {name} but no shard holds it")
    for name in [n for n in packed if n.endswith(".weight_packed")]:
        base = name[:-len(".weight_packed")]
        out[base] = ("mxfp4", packed[name], packed[base + ".weight_scale"])
    return out


def greedy_full(model, prompt, n):
    """Greedy continuation, recomputing the whole sequence for every token."""
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(torch.argmax(model.forward_full(ids)[-1])))
    return ids[len(prompt):]


def greedy_incremental(model, prompt, n):
    """Greedy continuation with one prefill call and then one token per call."""
    sess = model.session()
    logits = sess.step(prompt)[-1]
    out = []
    for _ in range(n):
        tok = int(torch.argmax(logits))
        out.append(tok)
        logits = sess.step([tok])[-1]
    return out


if __name__ == "__main__":
    import sys
    if len(sys.argv) < 3:
        print("usage: k3_reference.py MODEL_DIR ID[,ID...] [GEN]", file=sys.stderr)
        sys.exit(2)
    m = K3Model.load(sys.argv[1])
    prompt = [int(v) for v in sys.argv[2].split(",")]
    gen = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    print("full        :", greedy_full(m, prompt, gen))
    print("incremental :", greedy_incremental(m, prompt, gen))
