#!/usr/bin/env python3
"""Writes the seed corpora and the GGUF dictionary of the fuzz targets from ../shared.

Usage: tests/fuzz/make_corpus.py SHARED_DIR OUT_DIR
Writes OUT_DIR/<target>/ (gguf, tokenizer, jinja, openai, record, router_stream, http_request) and
OUT_DIR/gguf.dict. Model files are never copied whole: each shared model
becomes a tiny GGUF of the same architecture (one layer, a few dozen
dimensions, random weights) that loads and runs in milliseconds, plus its
first 16 KiB (a truncated file, for the header and metadata paths).
"""
import json
import os
import random
import struct
import sys

GGUF_TYPES = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
# ggml type -> (block elements, block bytes)
BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 8: (32, 34), 12: (256, 144), 14: (256, 210)}


class Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.d, self.p)
        self.p += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.take("Q")
        s = self.d[self.p:self.p + n]
        self.p += n
        return s.decode("utf-8", "replace")

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("I"), self.take("Q")
            return (et, [self.value(et) for _ in range(n)])
        return self.take(GGUF_TYPES[t])


def read_gguf(path):
    r = Reader(open(path, "rb").read())
    assert r.take("I") == 0x46554747, path
    r.take("I")
    n_tensors, n_kv = r.take("Q"), r.take("Q")
    kv = {}
    for _ in range(n_kv):
        k = r.string()
        t = r.take("I")
        kv[k] = (t, r.value(t))
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take("Q") for _ in range(r.take("I"))]
        tensors.append((name, dims, r.take("I")))
        r.take("Q")
    return kv, tensors


def pack_string(s):
    b = s.encode("utf-8", "surrogateescape") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def pack_value(t, v):
    if t == 8:
        return pack_string(v)
    if t == 9:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(pack_value(et, x) for x in items)
    return struct.pack("<" + GGUF_TYPES[t], v)


def write_gguf(kv, tensors, rng):
    """tensors: (name, dims, ggml type); data is random, small and finite."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for k, (t, v) in kv.items():
        out += pack_string(k) + struct.pack("<I", t) + pack_value(t, v)
    blobs, offset = [], 0
    for name, dims, gt in tensors:
        n = 1
        for d in dims:
            n *= d
        be, bb = BLOCKS[gt]
        if gt == 0:
            blob = struct.pack("<%df" % n, *[rng.uniform(-0.1, 0.1) for _ in range(n)])
        elif gt == 1:
            blob = struct.pack("<%de" % n, *[rng.uniform(-0.1, 0.1) for _ in range(n)])
        else:  # a small f16 scale, then random quants
            blob = b"".join(struct.pack("<e", 0.01) + bytes(rng.randrange(256) for _ in range(bb - 2))
                            for _ in range(n // be))
        out += pack_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", gt, offset)
        blobs.append(blob)
        offset += (len(blob) + 31) // 32 * 32
    out += bytes(-len(out) % 32)
    for blob in blobs:
        out += blob + bytes(-len(blob) % 32)
    return bytes(out)


def shrink_model(path, rng):
    kv, tensors = read_gguf(path)
    arch = kv["general.architecture"][1]
    g = lambda k, d=None: kv.get(arch + "." + k, (None, d))[1]
    dim, ffn, heads = g("embedding_length"), g("feed_forward_length"), g("attention.head_count")
    kv_heads = g("attention.head_count_kv", heads)
    head_dim = g("attention.key_length", dim // heads)
    toks = kv.get("tokenizer.ggml.tokens", (9, (8, [])))[1][1]
    vocab = len(toks) or dim
    V, D, F, H, HD = min(vocab, 320), 32, 64, 2, 16
    KVH = 1 if kv_heads < heads else 2
    # By value, later entries winning a collision; the vocabulary dimension by position
    # (it may equal another size in a synthetic model).
    dims_map = {g("context_length", 0): 64, 3 * dim: 3 * D, heads * head_dim: H * HD, kv_heads * head_dim: KVH * HD,
                dim: D, ffn: F}
    new_kv = {}
    for k, (t, v) in kv.items():
        if t == 9 and k.startswith("tokenizer.ggml.") and len(v[1]) == vocab:
            v = (v[0], v[1][:V])
        elif k == "tokenizer.ggml.merges":
            kept = set(toks[:V])
            v = (v[0], [m for m in v[1] if all(p in kept for p in m.split(" ", 1))][:64])
        elif k.startswith("tokenizer.ggml.") and k.endswith("_id") and isinstance(v, int) and v >= V:
            v = 1
        new_kv[k] = (t, v)
    for k, v in {"embedding_length": D, "feed_forward_length": F, "attention.head_count": H,
                 "attention.head_count_kv": KVH, "block_count": 1, "context_length": 64}.items():
        new_kv[arch + "." + k] = (4, v)
    for k in ("attention.key_length", "attention.value_length", "rope.dimension_count"):
        if arch + "." + k in kv:
            new_kv[arch + "." + k] = (4, HD)
    if arch + ".attention.sliding_window" in kv:
        new_kv[arch + ".attention.sliding_window"] = (4, 16)
    new_tensors = []
    for name, dims, gt in tensors:
        if name.startswith("blk.") and not name.startswith("blk.0."):
            continue
        nd = [dims_map.get(d, d) for d in dims]
        if name.split(".")[0] in ("token_embd", "output") and len(dims) == 2 and dims[1] == vocab:
            nd[1] = V
        if BLOCKS[gt][0] > 1 and nd[0] % BLOCKS[gt][0]:
            gt = 8 if nd[0] % 32 == 0 else 1
        new_tensors.append((name, nd, gt))
    return write_gguf(new_kv, new_tensors, rng)


def write(dirpath, name, data):
    os.makedirs(dirpath, exist_ok=True)
    with open(os.path.join(dirpath, name), "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


def gguf_corpus(shared, out, rng):
    keys = set()
    for sub in ("models", "vocab"):
        for f in sorted(os.listdir(os.path.join(shared, sub))):
            if not f.endswith(".gguf"):
                continue
            path = os.path.join(shared, sub, f)
            kv, tensors = read_gguf(path)
            keys.update(kv)
            keys.update(n for n, _, _ in tensors if not n.startswith("blk.") or n.startswith("blk.0."))
            write(out + "/gguf", f + ".head", open(path, "rb").read(16384))
            if sub == "models":
                write(out + "/gguf", f + ".tiny", shrink_model(path, rng))
    write(out + "/gguf", "empty.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 0))
    with open(out + "/gguf.dict", "w") as f:
        f.write('"GGUF"\n')
        for k in sorted(keys):
            f.write('"%s"\n' % k.replace("\\", "\\\\").replace('"', '\\"'))


def tokenizer_corpus(shared, out, rng):
    # Index order of tokenizer_fuzz.cpp's kVocabs.
    names = ["ggml-vocab-llama-spm", "ggml-vocab-phi-3", None, "ggml-vocab-gpt-2", "ggml-vocab-deepseek-coder",
             "ggml-vocab-falcon", "ggml-vocab-starcoder"]
    for i, name in enumerate(names):
        if name is None:
            write(out + "/tokenizer", "%d-story" % i, bytes([i, 6]) + b"Once upon a time, there was a little cat.")
            continue
        base = os.path.join(shared, "vocab", name + ".gguf")
        texts = open(base + ".inp", "rb").read().split(b"\n__ggml_vocab_test__\n")
        ids = open(base + ".out").read().split("\n")
        for j, text in enumerate(texts[:24]):
            write(out + "/tokenizer", "%d-enc-%d" % (i, j), bytes([i, rng.choice([0, 2, 4, 6])]) + text)
            if j < len(ids) and ids[j].strip():
                words = [int(x) for x in ids[j].split()]
                write(out + "/tokenizer", "%d-dec-%d" % (i, j), bytes([i, 1]) + b"".join(struct.pack("<H", x & 0xFFFF) for x in words))


def jinja_corpus(shared, out):
    tdir = os.path.join(shared, "templates")
    cases = json.load(open(os.path.join(tdir, "cases.json")))
    convs = list(cases["conversations"].values())
    for f in sorted(os.listdir(tdir)):
        if f.endswith(".jinja"):
            src = open(os.path.join(tdir, f), "rb").read()
            write(out + "/jinja", f, src)
            for j, conv in enumerate(convs):
                write(out + "/jinja", "%s.%d" % (f, j), src + b"\0" + json.dumps(conv).encode())
    write(out + "/jinja", "small", "{% for m in messages %}{{ m.role|upper }}: {{ m.content|trim }}\n{% endfor %}"
          "{% if add_generation_prompt %}{{ 'A:' }}{% endif %}{{ messages|tojson }}")


OPENAI_SEEDS = [
    {"model": "m", "input": ["a cat", [1, 2, 3]], "encoding_format": "base64", "user": "u"},
    {"model": "m", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "top_k": 40,
     "min_p": 0.05, "seed": 1, "stop": ["\n", "."], "echo": True, "logprobs": 2, "n": 2, "best_of": 3},
    {"prompt": [1, 2, 3], "stream": True, "stream_options": {"include_usage": True}, "logit_bias": {"13": -100}},
    {"prompt": [[5, 6]], "repetition_penalty": 1.1, "frequency_penalty": 0.5, "presence_penalty": -0.5,
     "ignore_eos": True, "cache_salt": "s", "kv_budget": 64, "kv_policy": "h2o", "kv_sinks": 4, "kv_recent": 16,
     "kv_shift": True},
    {"model": "m", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
     "max_completion_tokens": 4, "logprobs": True, "top_logprobs": 3, "response_format": {"type": "text"}},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
     "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto",
     "chat_template_kwargs": {"enable_thinking": False}, "documents": [{"title": "t", "text": "x"}]},
    {"content": "Hello world", "add_special": False, "parse_special": True, "with_pieces": True},
    {"tokens": [1, 15043, 3186]},
]


# Streams as kvlm serve writes them for a router (return_token_ids).
ROUTER_STREAM_SEEDS = [
    'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"Hi",'
    '"logprobs":null,"finish_reason":null,"prompt_token_ids":[1,2],"token_ids":[5]}]}\n\n: keep-alive\n\n'
    'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"",'
    '"logprobs":null,"finish_reason":"length","token_ids":[]}]}\n\ndata: [DONE]\n\n',
    'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":1,"delta":'
    '{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]},'
    '"logprobs":null,"finish_reason":null}]}\r\n\r\n',
]


HTTP_REQUEST_SEEDS = [
    "GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
    "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\n\r\n{\"prompt\":\"a\"}",
    "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: v\r\n\r\n",
    "GET /a%20b?x=1&y=a+b HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.1\r\n\r\n",
    "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
]


def main():
    shared, out = sys.argv[1], sys.argv[2]
    rng = random.Random(15)
    gguf_corpus(shared, out, rng)
    tokenizer_corpus(shared, out, rng)
    jinja_corpus(shared, out)
    for i, seed in enumerate(OPENAI_SEEDS):
        write(out + "/openai", "seed-%d.json" % i, json.dumps(seed))
    write(out + "/record", "empty", b"")
    for i, chunk in enumerate(ROUTER_STREAM_SEEDS):
        write(out + "/router_stream", "seed-%d" % i, bytes([7]) + chunk.encode())
    for i, request in enumerate(HTTP_REQUEST_SEEDS):
        write(out + "/http_request", "seed-%d" % i, bytes([3]) + request.encode())


if __name__ == "__main__":
    main()
