#!/usr/bin/env python3
"""An independent forward pass of the llama-style families in NumPy (float64),
written from the published architectures (Hugging Face's modeling files of
Llama, Mixtral, Qwen2-MoE, Qwen3, Qwen3-MoE and Phi-3), for checking kvlm's
forward pass where llama.cpp's mirror is too old to know a family (Qwen3,
Qwen3-MoE).

Usage: numpy_reference.py MODEL.gguf TOKENS [CONTEXT]
       numpy_reference.py --rank MODEL.gguf TOKENS
  TOKENS: comma-separated ids, fed as one sequence from position 0.
  CONTEXT: the context per sequence (Phi-3 long-rope picks its factors by it;
           default the model's trained context).
Prints {"logits": [[...], ...]}: the logits row after each token; with
--rank (a reranker) {"score": s}: the softmax of cls.output.weight times
the last token's final hidden state, its first label (llama.cpp's rank
pooling of Qwen3-Reranker).

Reads F32 and F16 tensors only (what `kvlm make-model --type F32` writes).
"""
import json
import math
import struct
import sys

import numpy as np

GGML_F32, GGML_F16 = 0, 1
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, kind):
        if kind == 8:
            return self.string()
        if kind == 9:
            item, n = self.take("<I"), self.take("<Q")
            return [self.value(item) for _ in range(n)]
        return self.take(SCALAR[kind])


def read_gguf(path):
    """Metadata dict and {name: float64 array in ggml order reversed (rows, cols)}."""
    with open(path, "rb") as f:
        data = f.read()
    r = Reader(data)
    assert data[:4] == b"GGUF", "not a GGUF file"
    r.pos = 4
    version, n_tensors, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    assert version == 3, version
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take("<Q") for _ in range(r.take("<I"))]
        infos.append((name, dims, r.take("<I"), r.take("<Q")))
    align = meta.get("general.alignment", 32)
    base = (r.pos + align - 1) // align * align
    tensors = {}
    for name, dims, kind, offset in infos:
        count = int(np.prod(dims))
        dtype = {GGML_F32: np.float32, GGML_F16: np.float16}[kind]
        flat = np.frombuffer(data, dtype=dtype, count=count, offset=base + offset).astype(np.float64)
        tensors[name] = flat.reshape(list(reversed(dims)))
    return meta, tensors


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def rope(x, positions, base, neox, factors, attn_factor):
    """x: [T, heads, head_dim]; rotates every dim (rot_dim == head_dim)."""
    d = x.shape[-1]
    half = d // 2
    inv = base ** (-np.arange(half) * 2.0 / d)
    if factors is not None:
        inv = inv / factors
    angles = positions[:, None] * inv[None, :]  # [T, half]
    cos = (np.cos(angles) * attn_factor)[:, None, :]
    sin = (np.sin(angles) * attn_factor)[:, None, :]
    out = x.copy()
    if neox:
        a, b = x[..., :half], x[..., half:]
        out[..., :half], out[..., half:] = a * cos - b * sin, a * sin + b * cos
    else:
        a, b = x[..., 0::2], x[..., 1::2]
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    return out


def attention(q, k, v, window):
    """Causal GQA attention. q: [T, H, D]; k, v: [T, KV, D]."""
    T, H, D = q.shape
    group = H // k.shape[1]
    out = np.zeros_like(q)
    for h in range(H):
        kh, vh = k[:, h // group], v[:, h // group]
        scores = q[:, h] @ kh.T / math.sqrt(D)  # [T, T]
        i, j = np.indices((T, T))
        visible = (j <= i) & ((window == 0) | (i - j < window))
        scores = np.where(visible, scores, -np.inf)
        scores = np.exp(scores - scores.max(axis=1, keepdims=True))
        out[:, h] = (scores / scores.sum(axis=1, keepdims=True)) @ vh
    return out


def swiglu_ffn(x, gate, up, down):
    return (silu(x @ gate.T) * (x @ up.T)) @ down.T


def moe_ffn(x, t, p, cfg):
    """Softmax routing over the experts, top k, optionally renormalised."""
    logits = x @ t[p + "ffn_gate_inp.weight"].T
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    out = np.zeros_like(x)
    gates, ups, downs = (t[p + f"ffn_{n}_exps.weight"] for n in ("gate", "up", "down"))
    for row in range(x.shape[0]):
        chosen = np.argsort(-probs[row], kind="stable")[: cfg["used"]]
        weights = probs[row, chosen]
        if cfg["normalize"]:
            weights = weights / weights.sum()
        for e, w in zip(chosen, weights):
            out[row] += w * swiglu_ffn(x[row:row + 1], gates[e], ups[e], downs[e])[0]
    if p + "ffn_gate_inp_shexp.weight" in t:
        shared = swiglu_ffn(x, t[p + "ffn_gate_shexp.weight"], t[p + "ffn_up_shexp.weight"],
                            t[p + "ffn_down_shexp.weight"])
        gate = 1.0 / (1.0 + np.exp(-(x @ t[p + "ffn_gate_inp_shexp.weight"])))
        out += gate[:, None] * shared
    return out


def config(meta, context):
    arch = meta["general.architecture"]
    a = arch + "."
    heads = meta[a + "attention.head_count"]
    dim = meta[a + "embedding_length"]
    cfg = {
        "arch": arch, "dim": dim, "layers": meta[a + "block_count"], "heads": heads,
        "kv_heads": meta.get(a + "attention.head_count_kv", heads),
        "head_dim": meta.get(a + "attention.key_length", dim // heads),
        "eps": meta[a + "attention.layer_norm_rms_epsilon"], "base": meta.get(a + "rope.freq_base", 10000.0),
        "neox": arch != "llama", "experts": meta.get(a + "expert_count", 0),
        "used": meta.get(a + "expert_used_count", 0), "normalize": arch != "qwen2moe",
        "window": meta.get(a + "attention.sliding_window", 0) if arch == "phi3" else 0,
        "attn_factor": meta.get(a + "rope.scaling.attn_factor", 1.0), "ffn": meta[a + "feed_forward_length"],
    }
    trained = meta[a + "context_length"]
    original = meta.get(a + "rope.scaling.original_context_length", trained)
    cfg["long_rope"] = (context or trained) > original
    return cfg


def forward(meta, t, tokens, context):
    c = config(meta, context)
    factors = t.get("rope_freqs.weight")
    if c["arch"] == "phi3":
        factors = t.get("rope_factors_long.weight" if c["long_rope"] else "rope_factors_short.weight")
    T, H, KV, D = len(tokens), c["heads"], c["kv_heads"], c["head_dim"]
    pos = np.arange(T, dtype=np.float64)
    x = t["token_embd.weight"][tokens]
    for layer in range(c["layers"]):
        p = f"blk.{layer}."
        h = rms_norm(x, t[p + "attn_norm.weight"], c["eps"])
        if c["arch"] == "phi3":
            qkv = h @ t[p + "attn_qkv.weight"].T
            q, k, v = qkv[:, :H * D], qkv[:, H * D:(H + KV) * D], qkv[:, (H + KV) * D:]
        else:
            q, k, v = (h @ t[p + f"attn_{n}.weight"].T for n in ("q", "k", "v"))
            if p + "attn_q.bias" in t:
                q, k, v = q + t[p + "attn_q.bias"], k + t[p + "attn_k.bias"], v + t[p + "attn_v.bias"]
        q, k, v = q.reshape(T, H, D), k.reshape(T, KV, D), v.reshape(T, KV, D)
        if p + "attn_q_norm.weight" in t:  # Qwen3: RMSNorm of each head before RoPE
            q = rms_norm(q, t[p + "attn_q_norm.weight"], c["eps"])
            k = rms_norm(k, t[p + "attn_k_norm.weight"], c["eps"])
        q = rope(q, pos, c["base"], c["neox"], factors, c["attn_factor"])
        k = rope(k, pos, c["base"], c["neox"], factors, c["attn_factor"])
        x = x + attention(q, k, v, c["window"]).reshape(T, H * D) @ t[p + "attn_output.weight"].T
        h = rms_norm(x, t[p + "ffn_norm.weight"], c["eps"])
        if c["experts"] > 0:
            x = x + moe_ffn(h, t, p, c)
        elif c["arch"] == "phi3":
            gate_up = t[p + "ffn_up.weight"]
            x = x + swiglu_ffn(h, gate_up[:c["ffn"]], gate_up[c["ffn"]:], t[p + "ffn_down.weight"])
        else:
            x = x + swiglu_ffn(h, t[p + "ffn_gate.weight"], t[p + "ffn_up.weight"], t[p + "ffn_down.weight"])
    return rms_norm(x, t["output_norm.weight"], c["eps"])


def main():
    rank = sys.argv[1] == "--rank"
    args = sys.argv[2:] if rank else sys.argv[1:]
    meta, tensors = read_gguf(args[0])
    tokens = [int(s) for s in args[1].split(",")]
    context = int(args[2]) if len(args) > 2 else 0
    hidden = forward(meta, tensors, tokens, context)
    if rank:
        logits = tensors["cls.output.weight"] @ hidden[-1] + tensors.get("cls.output.bias", 0.0)
        p = np.exp(logits - logits.max())
        json.dump({"score": float(p[0] / p.sum())}, sys.stdout)
        return
    json.dump({"logits": (hidden @ tensors.get("output.weight", tensors["token_embd.weight"]).T).tolist()}, sys.stdout)


if __name__ == "__main__":
    main()
