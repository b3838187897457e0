#!/usr/bin/env python3
"""Records llama.cpp's numbers for the tiny random-weight models of the new
families, into model_families.json beside this script, which
tests/e2e/model_families_test.cpp compares kvlm against.

Usage (from the repository root, with llama.cpp built from its source as
docs/CONTRIBUTING.md says, "Benchmark beside llama.cpp"):
  python3 tests/e2e/golden/record_model_families.py build/kvlm /tmp/llamacpp/build/bin SHARED_DIR COMMIT

For each family it writes the model with `kvlm make-model` (a fixed seed:
the test regenerates the same bytes and checks their SHA-256), then runs
  llama-perplexity -m M -f SHARED/text/tinystories_sample.txt -c C --chunks 16 -t 2 -ctk f32 -ctv f32
and asks llama-server (-c CTX --parallel 1 -t 2 -ctk f32 -ctv f32) for 64 greedy tokens after
the prompt, returning their ids (POST /completion with temperature 0, top_k
1, ignore_eos, return_tokens).
"""
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

VOCAB = "models/stories260K.gguf"
TEXT = "text/tinystories_sample.txt"
PROMPT = "Once upon a time"
STEPS = 64
CHUNKS = 16
# F32 KV on both sides: llama.cpp's F16-KV attention also rounds the queries
# and the softmax to F16 (ggml's F16 matmul converts its other operand), which
# kvlm does not; F32 KV compares the families' arithmetic itself.
KV_F32 = ["-ctk", "f32", "-ctv", "f32"]
TINY = ["--dim", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--ffn", "96", "--std", "0.3",
        "--seed", "7", "-t", "1"]

# name: make-model flags beyond TINY and the type, the contexts perplexity runs at.
FAMILIES = {
    "mixtral": (["--arch", "llama", "--experts", "4", "--experts-used", "2"], "F32", [128]),
    "mixtral-q8_0": (["--arch", "llama", "--experts", "4", "--experts-used", "2"], "Q8_0", [128]),
    "qwen2moe": (["--arch", "qwen2moe", "--experts", "4", "--experts-used", "2", "--expert-ffn", "32",
                  "--shared-expert-ffn", "64"], "F32", [128]),
    # A window of 32 inside the 128-token chunks; long factors past 64 tokens
    # of context, short ones at 64.
    "phi3": (["--arch", "phi3", "--ctx", "256", "--sliding-window", "32", "--rope-scaling", "longrope",
              "--rope-original-ctx", "64"], "F32", [128, 64]),
    "llama3-rope": (["--arch", "llama", "--ctx", "256", "--rope-scaling", "llama3", "--rope-original-ctx", "64",
                     "--rope-factor", "8", "--rope-low-freq-factor", "1", "--rope-high-freq-factor", "4"],
                    "F32", [128]),
}


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def perplexity(llama_bin, model, text, ctx):
    cmd = [f"{llama_bin}/llama-perplexity", "-m", model, "-f", text, "-c", str(ctx), "--chunks", str(CHUNKS),
           "-t", "2"] + KV_F32
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out.stdout + out.stderr)
    return float(m.group(1)), cmd


# What greedy() POSTs to llama-server's /completion.
REQUEST = {"prompt": PROMPT, "n_predict": STEPS, "temperature": 0, "top_k": 1, "ignore_eos": True,
           "return_tokens": True, "cache_prompt": False}


def greedy(llama_bin, model, ctx, port):
    cmd = [f"{llama_bin}/llama-server", "-m", model, "-c", str(ctx), "--parallel", "1", "-t", "2",
           "--port", str(port)] + KV_F32
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        body = REQUEST
        for _ in range(100):
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", json.dumps(body).encode(),
                                             {"Content-Type": "application/json"})
                with urllib.request.urlopen(req) as r:
                    return json.load(r)["tokens"], cmd
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("llama-server did not answer")
    finally:
        server.terminate()
        server.wait()


def compact_json(value, indent=""):
    """JSON with objects one key a line and every list on one line."""
    if isinstance(value, dict):
        inner = indent + "  "
        items = [f"{inner}{json.dumps(k)}: {compact_json(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    return json.dumps(value)


def readable(cmd, model, shared):
    """The command line with the model as MODEL.gguf and the shared folder as ../shared."""
    return " ".join(cmd).replace(model, "MODEL.gguf").replace(shared.rstrip("/"), "../shared")


def main():
    kvlm, llama_bin, shared, commit = sys.argv[1:5]
    out = {"llama_cpp_commit": commit,
           "llama_cpp_build": "../shared/bench/build_llamacpp.sh MIRROR /tmp/llamacpp (MIRROR: github:ggerganov/llama.cpp)",
           "recorded_with": "python3 tests/e2e/golden/record_model_families.py build/kvlm /tmp/llamacpp/build/bin "
                            f"../shared {commit}",
           "server_request": REQUEST, "prompt": PROMPT, "steps": STEPS, "chunks": CHUNKS, "vocab": VOCAB,
           "text": TEXT, "families": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, (flags, dtype, contexts)) in enumerate(FAMILIES.items()):
            model = os.path.join(tmp, name + ".gguf")
            args = ["make-model"] + TINY + flags + ["--type", dtype]
            subprocess.run([kvlm] + args + ["--vocab-from", os.path.join(shared, VOCAB), "-o", model],
                           check=True, capture_output=True)
            entry = {"make_model": args, "sha256": sha256(model), "perplexity": {}, "commands": []}
            for ctx in contexts:
                ppl, cmd = perplexity(llama_bin, model, os.path.join(shared, TEXT), ctx)
                entry["perplexity"][str(ctx)] = ppl
                entry["commands"].append(readable(cmd, model, shared))
            trained = int(flags[flags.index("--ctx") + 1]) if "--ctx" in flags else 2048
            entry["greedy"], cmd = greedy(llama_bin, model, trained, 18700 + i)
            entry["commands"].append(readable(cmd, model, shared))
            out["families"][name] = entry
            print(name, entry["perplexity"], entry["greedy"][:8], file=sys.stderr)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_families.json")
    with open(path, "w") as f:
        f.write(compact_json(out) + "\n")


if __name__ == "__main__":
    main()
