#!/usr/bin/env python3
"""Write a Kimi K3 checkpoint directory in the released format, check it, and compute
its expected outputs with k3_reference.py. Shared by make_tiny_checkpoints.py (random
weights) and train_demo.py (trained weights).

Layout, as released: nested config.json (text_config, text_config.linear_attn_config
with ONE-based kda_layers/full_attn_layers, text_config.quantization_config in
compressed-tensors form); shards model-0000N-of-0000M.safetensors plus
model.safetensors.index.json; prefix language_model.model., head
language_model.lm_head.weight; trunk BF16; A_log and e_score_correction_bias F32;
routed experts MXFP4 (U8 weight_packed [rows, ceil(in/2)], U8 weight_scale
[rows, ceil(in/32)]); each layer's non-expert tensors one gap-free run in one shard;
tiktoken.model + tokenizer_config.json (k3_bpe.py).
"""

import glob
import json
import os
import re
import struct

import jinja2
import numpy as np
import torch
from jinja2.sandbox import ImmutableSandboxedEnvironment

import k3_bpe
import k3_reference as ref

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
# A generator, not a test: the official template sits beside the repository (../shared).
TEMPLATE = os.path.join(REPO, "..", "shared", "reference", "Kimi-K3.jinja")

COMMON_TEXT = {
    "model_type": "kimi_linear", "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
    "mla_use_output_gate": True, "mla_use_nope": True, "moe_renormalize": True,
    "latent_moe_use_norm": True, "first_k_dense_replace": 1, "hidden_act": "situ",
    "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
    "moe_router_activation_func": "sigmoid", "num_expert_group": 1, "topk_group": 1,
    "num_nextn_predict_layers": 0, "max_position_embeddings": 4096,
    "routed_scaling_factor": 1.0,
}


# ------------------------------------------------------------------------ chat text

def _raise(msg):
    raise jinja2.TemplateError(msg)


_TEMPLATE = []


def render_chat(messages, add_generation_prompt=True, thinking=False, image_prompts=None):
    """The official template through jinja2, as Hugging Face's apply_chat_template sets it up."""
    if not _TEMPLATE:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.globals["raise_exception"] = _raise
        with open(TEMPLATE) as f:
            _TEMPLATE.append(env.from_string(f.read()))
    return _TEMPLATE[0].render(messages=messages, add_generation_prompt=add_generation_prompt,
                      thinking=thinking, image_prompts=image_prompts)


# --------------------------------------------------------------------------- config

def make_config(text, kda, tokenizer, quantized=True):
    """text: language-model dims; kda: num_heads, head_dim, full_attn_layers (ONE-based).
    quantized=False leaves out quantization_config: the experts are plain float tensors
    (the released layout, non-quantised)."""
    t = dict(COMMON_TEXT)
    t.update(text)
    t["vocab_size"] = tokenizer.vocab_size
    n = t["num_hidden_layers"]
    full = kda["full_attn_layers"]
    t["linear_attn_config"] = {
        "num_heads": kda["num_heads"], "head_dim": kda["head_dim"],
        "short_conv_kernel_size": 4, "gate_lower_bound": -5.0,
        "kda_layers": [i for i in range(1, n + 1) if i not in full],
        "full_attn_layers": full, "use_full_rank_gate": True,
    }
    if quantized:
        t["quantization_config"] = {
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
    sp = tokenizer.specials
    return {
        "architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3",
        "bos_token_id": sp["[BOS]"], "eos_token_id": sp["<|end_of_msg|>"],
        "pad_token_id": sp["[PAD]"], "text_config": t,
    }


# -------------------------------------------------------------------------- tensors

def tensor_plan(cfg_json):
    """Yield (run, name, shape, kind, init) for every float tensor, in on-disk order.
    kind: 'bf16', 'f32' or 'mxfp4' (a routed expert matrix). init: how a random model
    initialises it: ('linear', gain) | ('norm',) | ('randn', std) | ('alog', heads)."""
    t = cfg_json["text_config"]
    kda = t["linear_attn_config"]
    E, V = t["hidden_size"], t["vocab_size"]
    H, D, K = kda["num_heads"], kda["head_dim"], kda["short_conv_kernel_size"]
    P = H * D
    MH, dn, dr, dv = t["num_attention_heads"], t["qk_nope_head_dim"], t["qk_rope_head_dim"], t["v_head_dim"]
    Lat, I, NE = t["routed_expert_hidden_size"], t["moe_intermediate_size"], t["num_experts"]
    SI = I * t["num_shared_experts"]
    qr, kr = t["q_lora_rank"], t["kv_lora_rank"]
    mla = {i - 1 for i in kda["full_attn_layers"]}
    P_ = ref.PREFIX
    lin = lambda o, i, g=1.0: ([o, i], ("linear", g))  # noqa: E731
    yield ("embed", P_ + "embed_tokens.weight", [V, E], "bf16", ("randn", 1.0))
    for L in range(t["num_hidden_layers"]):
        pre, run = f"{P_}layers.{L}.", f"L{L}"
        a = pre + "self_attn."
        items = [("input_layernorm.weight", [E], ("norm",)),
                 ("post_attention_layernorm.weight", [E], ("norm",)),
                 ("self_attention_res_norm.weight", [E], ("norm",)),
                 ("self_attention_res_proj.weight", [1, E], ("randn", 0.15)),
                 ("mlp_res_norm.weight", [E], ("norm",)),
                 ("mlp_res_proj.weight", [1, E], ("randn", 0.15))]
        for n, shape, init in items:
            yield (run, pre + n, shape, "bf16", init)
        if L in mla:
            for n, (shape, init) in (("q_a_proj.weight", lin(qr, E)),
                                     ("q_a_layernorm.weight", ([qr], ("norm",))),
                                     ("q_b_proj.weight", lin(MH * (dn + dr), qr, 2.0)),
                                     ("kv_a_proj_with_mqa.weight", lin(kr + dr, E, 2.0)),
                                     ("kv_a_layernorm.weight", ([kr], ("norm",))),
                                     ("kv_b_proj.weight", lin(MH * (dn + dv), kr, 2.0)),
                                     ("o_proj.weight", lin(E, MH * dv)),
                                     ("g_proj.weight", lin(MH * dv, E))):
                yield (run, a + n, shape, "bf16", init)
        else:
            for n, (shape, init) in (("q_proj.weight", lin(P, E)), ("k_proj.weight", lin(P, E)),
                                     ("v_proj.weight", lin(P, E)), ("g_proj.weight", lin(P, E)),
                                     ("o_proj.weight", lin(E, P)),
                                     ("q_conv1d.weight", ([P, 1, K], ("randn", 0.5))),
                                     ("k_conv1d.weight", ([P, 1, K], ("randn", 0.5))),
                                     ("v_conv1d.weight", ([P, 1, K], ("randn", 0.5))),
                                     ("f_a_proj.weight", lin(D, E)), ("f_b_proj.weight", lin(P, D)),
                                     ("b_proj.weight", lin(H, E))):
                yield (run, a + n, shape, "bf16", init)
            # shipped head_dim long, only the first num_heads used (as released)
            yield (run, a + "A_log", [D], "f32", ("alog", H))
            yield (run, a + "dt_bias", [P], "bf16", ("randn", 0.5))
            yield (run, a + "o_norm.weight", [D], "bf16", ("norm",))
        if L < t["first_k_dense_replace"]:
            for n, (shape, init) in (("gate_proj", lin(t["intermediate_size"], E)),
                                     ("up_proj", lin(t["intermediate_size"], E, 4.0)),
                                     ("down_proj", lin(E, t["intermediate_size"]))):
                yield (run, f"{pre}mlp.{n}.weight", shape, "bf16", init)
            continue
        m = pre + "block_sparse_moe."
        yield (run, m + "gate.weight", [NE, E], "bf16", ("linear", 1.0))
        yield (run, m + "gate.e_score_correction_bias", [NE], "f32", ("randn", 0.05))
        for n, (shape, init) in (("routed_expert_down_proj.weight", lin(Lat, E)),
                                 ("routed_expert_up_proj.weight", lin(E, Lat)),
                                 ("routed_expert_norm.weight", ([Lat], ("norm",))),
                                 ("shared_experts.gate_proj.weight", lin(SI, E)),
                                 ("shared_experts.up_proj.weight", lin(SI, E, 4.0)),
                                 ("shared_experts.down_proj.weight", lin(E, SI))):
            yield (run, m + n, shape, "bf16", init)
        for e in range(NE):
            for wn, (shape, init) in (("w1", lin(I, Lat)), ("w2", lin(Lat, I)), ("w3", lin(I, Lat, 4.0))):
                yield (f"E{L}", f"{m}experts.{e}.{wn}", shape, "mxfp4", init)
    for n, shape, init in (("norm.weight", [E], ("norm",)),
                           ("output_attn_res_norm.weight", [E], ("norm",)),
                           ("output_attn_res_proj.weight", [1, E], ("randn", 0.15))):
        yield ("final", P_ + n, shape, "bf16", init)
    yield ("final", ref.HEAD_NAME, [V, E], "bf16", ("linear", 3.0))


class RandomSource:
    """Seeded random weights of a sensible scale (torch generator, float32)."""

    def __init__(self, seed):
        self.gen = torch.Generator().manual_seed(seed)

    def _randn(self, shape, std):
        return (torch.randn(*shape, generator=self.gen) * std).numpy().astype(np.float32)

    def __call__(self, name, shape, init):
        kind = init[0]
        if kind == "linear":
            return self._randn(shape, init[1] / np.sqrt(shape[-1]))
        if kind == "norm":
            return (1.0 + self._randn(shape, 0.1)).astype(np.float32)
        if kind == "randn":
            return self._randn(shape, init[1])
        if kind == "alog":
            a = np.zeros(shape, dtype=np.float32)
            u = (torch.rand(init[1], generator=self.gen) * 15.0 + 1.0).numpy()
            a[:init[1]] = np.log(u).astype(np.float32)
            return a
        raise ValueError(f"unknown init {init} for {name}")


def build_runs(cfg_json, source, hook=None, expert_dtype="mxfp4"):
    """{run: [(name, dtype, shape, array)]}. source(name, shape, init) -> float32 array;
    hook(name, kind, packed, scale) may edit an expert's bytes (e.g. a NaN scale).
    expert_dtype "f32" or "bf16" writes each expert matrix as a plain NAME.weight tensor
    (a checkpoint without quantization_config) instead of MXFP4 packed + scales."""
    runs = {}
    for run, name, shape, kind, init in tensor_plan(cfg_json):
        w = np.asarray(source(name, shape, init), dtype=np.float32)
        if list(w.shape) != list(shape):
            raise ValueError(f"{name}: source gave shape {list(w.shape)}, want {shape}")
        if kind == "bf16":
            out = [(name, "BF16", shape, ref.f32_to_bf16_bits(w))]
        elif kind == "f32":
            out = [(name, "F32", shape, w)]
        elif expert_dtype == "f32":
            out = [(name + ".weight", "F32", shape, w)]
        elif expert_dtype == "bf16":
            out = [(name + ".weight", "BF16", shape, ref.f32_to_bf16_bits(w))]
        else:
            packed, scale = ref.mxfp4_encode(w)
            if hook:
                hook(name, packed, scale)
            out = [(name + ".weight_packed", "U8", list(packed.shape), packed),
                   (name + ".weight_scale", "U8", list(scale.shape), scale)]
        runs.setdefault(run, []).extend(out)
    return runs


def shard_plan_auto(runs, num_shards, experts_elsewhere=()):
    """Runs in order, cut into num_shards roughly equal shards; the expert runs named in
    experts_elsewhere go to the LAST shard (so some layers' experts sit apart)."""
    order = [r for r in runs if r not in experts_elsewhere]
    sizes = {r: sum(t[3].nbytes for t in runs[r]) for r in runs}
    body = num_shards - 1 if experts_elsewhere else num_shards
    target = sum(sizes[r] for r in order) / body
    plan, cur, acc = [], [], 0
    for r in order:
        if cur and acc + sizes[r] / 2 > target * (len(plan) + 1) and len(plan) < body - 1:
            plan.append(cur)
            cur = []
        cur.append(r)
        acc += sizes[r]
    plan.append(cur)
    if experts_elsewhere:
        plan.append(list(experts_elsewhere))
    return plan


def write_checkpoint(out_dir, cfg_json, runs, shard_plan, tokenizer):
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
    tokenizer.write(out_dir)


# ------------------------------------------------------------------------- checks

def verify_layout(out_dir):
    """Each layer's non-expert tensors: one shard, one gap-free byte run."""
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


def verify_roundtrip(out_dir, runs, tokenizer):
    """Re-read every shard: each tensor comes back with its dtype, shape and bytes; the
    tokenizer files read back to the same ranks and specials."""
    with open(os.path.join(out_dir, "model.safetensors.index.json")) as f:
        wmap = json.load(f)["weight_map"]
    written = {t[0]: t for r in runs.values() for t in r}
    if set(wmap) != set(written):
        raise SystemExit(f"{out_dir}: index names differ from the tensors written")
    seen = set()
    for shard in sorted(set(wmap.values())):
        for name, (dt, arr) in ref.read_safetensors(os.path.join(out_dir, shard)).items():
            _, wdt, wshape, warr = written[name]
            if dt != wdt or list(arr.shape) != list(wshape) or arr.tobytes() != np.ascontiguousarray(warr).tobytes():
                raise SystemExit(f"{out_dir}: {name} does not round-trip")
            seen.add(name)
    if seen != set(written):
        raise SystemExit(f"{out_dir}: tensors missing on re-read: {sorted(set(written) - seen)[:3]}")
    back = k3_bpe.Tokenizer.read(out_dir)
    if back.ranks != tokenizer.ranks or back.specials != tokenizer.specials:
        raise SystemExit(f"{out_dir}: tokenizer files do not round-trip")


def check_flat_config_reads_the_same(cfg_json, cfg):
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


# ------------------------------------------------------------------------ expected

def greedy_incremental_stop(model, prompt, n, stop=()):
    """Greedy with one prefill call then one token per call; stops after a stop id."""
    sess = model.session()
    logits = sess.step(prompt)[-1]
    out = []
    for _ in range(n):
        tok = int(torch.argmax(logits))
        out.append(tok)
        if tok in stop:
            break
        logits = sess.step([tok])[-1]
    return out


def greedy_full_stop(model, prompt, n, stop=()):
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(torch.argmax(model.forward_full(ids)[-1])))
        if ids[-1] in stop:
            break
    return ids[len(prompt):]


def top2_margins(logits):
    v = torch.topk(logits, 2, dim=-1).values
    return v[..., 0] - v[..., 1]


def compute_expected(out_dir, prompt, n_gen, stop=(), extra=None):
    """Greedy both ways (must agree), teacher forcing over prompt + greedy, routing,
    margins; writes first_step_logits.f32 (last prompt position). Returns the dict."""
    model = ref.K3Model.load(out_dir)
    cfg = model.cfg
    with open(os.path.join(out_dir, "config.json")) as f:
        check_flat_config_reads_the_same(json.load(f), cfg)
    first = model.forward_full(prompt)[-1]
    inc = greedy_incremental_stop(model, prompt, n_gen, stop)
    full = greedy_full_stop(model, prompt, n_gen, stop)
    if full != inc:
        raise SystemExit(f"{out_dir}: full-sequence {full} != incremental {inc}")
    full_ids = prompt + inc
    traces = {L: [] for L, lw in enumerate(model.layers) if "moe" in lw}
    for L, tr in traces.items():
        model.layers[L]["moe"]["trace"] = tr
    tf = model.forward_full(full_ids)
    for L in traces:
        model.layers[L]["moe"]["trace"] = None
    sess = model.session()
    inc_all = torch.cat([sess.step([t]) for t in full_ids])
    if not torch.equal(tf[len(prompt) - 1:len(full_ids) - 1].argmax(-1), torch.tensor(inc)):
        raise SystemExit(f"{out_dir}: teacher forcing over full_ids disagrees with greedy")
    if not torch.equal(inc_all.argmax(-1), tf.argmax(-1)):
        raise SystemExit(f"{out_dir}: one-token-at-a-time argmax differs from the full pass")
    with open(os.path.join(out_dir, "first_step_logits.f32"), "wb") as f:
        f.write(first.numpy().astype("<f4").tobytes())
    margins = top2_margins(tf)
    fl = first.double()
    exp = {
        "generator": "tests/reference (k3_checkpoint.py, k3_reference.py)",
        "layer_map": "".join("M" if cfg.is_mla(L) else "K" for L in range(cfg.num_hidden_layers)),
        "dense_layers": list(range(cfg.first_k_dense_replace)),
        "attn_res_boundaries": [L for L in range(cfg.num_hidden_layers)
                                if L % cfg.attn_res_block_size == 0],
        "prompt_ids": list(prompt),
        "greedy": {"n": n_gen, "stop_ids": sorted(stop), "full_sequence": full, "incremental": inc},
        "full_ids": full_ids,
        "full_ids_teacher_forcing_argmax": [int(v) for v in tf.argmax(-1)],
        "teacher_forcing": {"argmax": [int(v) for v in tf[:len(prompt)].argmax(-1)],
                            "last_logits_first8": [float(v) for v in first[:8]]},
        "first_step_logits": {
            "file": "first_step_logits.f32", "position": len(prompt) - 1,
            "count": int(first.numel()), "sum": float(fl.sum()), "sum_abs": float(fl.abs().sum()),
            "max": float(first.max()), "min": float(first.min()), "argmax": int(first.argmax()),
            "l2": float(fl.pow(2).sum().sqrt()), "first8": [float(v) for v in first[:8]],
        },
        "routing_full_ids": {
            "note": "per MoE layer: for each position of full_ids, the selected experts in "
                    "descending order of the BIASED score (the teacher-forced pass)",
            "layers": {str(L): tr[0].tolist() for L, tr in traces.items()},
        },
        "min_top2_logit_margin": float(margins.min()),
        "min_top2_logit_margin_greedy": float(margins[len(prompt) - 1:].min()),
        "incremental_vs_full_max_abs_logit_diff": float((inc_all - tf).abs().max()),
        "note": "logits in float32 from k3_reference.py (float64-accumulated dot products); "
                "argmax/greedy ids are exact, floats should match to ~1e-4 relative.",
    }
    if extra:
        exp.update(extra)
    return exp


# ----------------------------------------------------------------------- tokenizer

def conversation(question, answer):
    """The rendered training text of one exchange (thinking off) and its prompt prefix.
    The turn ends with [EOS] (what K3 emits) instead of the template's <|end_of_msg|>."""
    full = render_chat([{"role": "user", "content": question},
                        {"role": "assistant", "content": answer}], add_generation_prompt=False)
    prompt = render_chat([{"role": "user", "content": question}], add_generation_prompt=True)
    if not (full.startswith(prompt) and full.endswith("<|end_of_msg|>")):
        raise SystemExit("template render does not have the expected shape")
    return prompt, full[:-len("<|end_of_msg|>")] + "[EOS]"


_CORPUS_TEXTS = []


def train_tokenizer(num_merges):
    """A byte-level BPE trained on the demo corpus rendered in the chat format."""
    import demo_corpus
    if not _CORPUS_TEXTS:
        specials = re.compile("|".join(re.escape(s) for s in k3_bpe.special_names(0)[:6]))
        for q, a in demo_corpus.pairs():
            _CORPUS_TEXTS.extend(s for s in specials.split(conversation(q, a)[1]) if s)
    texts = _CORPUS_TEXTS
    tok = k3_bpe.Tokenizer(k3_bpe.train(texts, num_merges))
    for t in texts[:200]:
        if tok.decode(tok.encode(t)) != t:
            raise SystemExit(f"tokenizer does not round-trip {t!r}")
    return tok
