#!/usr/bin/env bash
# kvlm beside llama.cpp in one run, on TinyLlama-1.1B-shaped random weights:
# every CPU-speed figure we report (prefill, decode against the bandwidth limit,
# the batch-8 step, decode at 4,096 tokens of context, serving, the step
# thread's share). Commands run one after another, never side by side; compare
# figures within one run only (the hosts we measure on are shared and noisy).
#
#   bench/compare_llamacpp.sh LLAMA_BIN OUT [KVLM=build/kvlm] [MODELS=/tmp/kvlm-bench]
#
# Another shape, other types, fewer parts (the environment):
#   PRESET=llama-3-8b VOCAB=128256 TYPES="q4_0 q4_k_m" PARTS=1 BENCH="-p 512 -n 64 -r 2" bench/compare_llamacpp.sh ...
# PRESET: a `kvlm make-model --preset`; VOCAB: its table's rows (the shared
# tokenizer has 32,000 tokens; make-model pads); TYPES: make-model types, and q4_k_m
# (llama-quantize's mix, made from the Q4_0 file with --allow-requantize:
# the weights are random, so their precision does not matter, only the types);
# PARTS: of the five below; BENCH: part 1's llama-bench flags.
#
# LLAMA_BIN: llama.cpp's build/bin (Release, -DGGML_NATIVE=ON -DGGML_OPENMP=ON,
# targets llama-bench llama-server llama-perplexity llama-quantize).
# OUT: a folder for the raw outputs; summary.txt there has the figures.
# The models are made with `kvlm make-model` into MODELS if missing (about
# 6 GB). About 13 minutes on 2 cores.
set -euo pipefail
LLAMA_BIN=$(realpath "$1")
OUT=$2
KVLM=$(realpath "${3:-build/kvlm}")
MODELS=${4:-/tmp/kvlm-bench}
PRESET=${PRESET:-tinyllama-1.1b}
TYPES=${TYPES:-q4_0 q8_0 f16 q4_k q6_k}
PARTS=${PARTS:-1 2 3 4 5}
BENCH=${BENCH:--p 512 -n 128 -r 3}
part() { [[ " $PARTS " == *" $1 "* ]]; }
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=$(realpath "$HERE/../../shared")
export LD_LIBRARY_PATH="$LLAMA_BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$OUT" "$MODELS"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

model() {  # model TYPE [CTX]: path of a $PRESET-shaped model, made if missing
  local type=$1 ctx=${2:-2048} path="$MODELS/$PRESET-$1-ctx${2:-2048}.gguf"
  if [[ ! -s $path && $type == q4_k_m ]]; then
    "$LLAMA_BIN/llama-quantize" --allow-requantize "$(model q4_0 "$ctx")" "$path" Q4_K_M 2 > "$OUT/quantize.log" 2>&1
  elif [[ ! -s $path ]]; then
    # shellcheck disable=SC2086  # VOCAB: empty, or the flag and its value
    "$KVLM" make-model --preset "$PRESET" --type "$type" --ctx "$ctx" ${VOCAB:+--vocab $VOCAB} \
      --vocab-from "$SHARED/vocab/ggml-vocab-llama-spm.gguf" -o "$path" -t 2 >&2
  fi
  echo "$path"
}

say "kvlm $(git -C "$HERE/.." rev-parse --short HEAD) beside llama.cpp ($LLAMA_BIN), $(date -u '+%Y-%m-%d %H:%M') UTC"
say "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)"

say "shape: $PRESET; part 1: $BENCH -t 2"
# 1. Prefill 512 and decode 128, llama-bench style, each type.
for type in $TYPES; do
  part 1 || break
  m=$(model "$type")
  # shellcheck disable=SC2086  # BENCH's words split on purpose
  "$LLAMA_BIN/llama-bench" -m "$m" $BENCH -t 2 -o json > "$OUT/llama-$type.json" 2> "$OUT/llama-$type.err"
  # shellcheck disable=SC2086
  "$KVLM" bench model -m "$m" $BENCH -t 2 --json > "$OUT/kvlm-$type.json" 2> "$OUT/kvlm-$type.err"
  python3 - "$OUT/llama-$type.json" "$OUT/kvlm-$type.json" "$type" <<'EOF' | tee -a "$SUMMARY"
import json, sys
llama = {("pp" if r["n_prompt"] else "tg"): r["avg_ts"] for r in json.load(open(sys.argv[1]))}
k = json.load(open(sys.argv[2]))
res = {t: k[t]["tokens_per_s"] for t in ("pp", "tg")}
print(f"{sys.argv[3]}: prefill kvlm {res['pp']:.1f} llama.cpp {llama['pp']:.1f} ({res['pp'] / llama['pp']:.2f}x) | "
      f"decode kvlm {res['tg']:.1f} llama.cpp {llama['tg']:.1f} ({res['tg'] / llama['tg']:.2f}x) | "
      f"bandwidth {k['read_bandwidth_gb_s']:.1f} GB/s, decode at {100 * k['tg_fraction_of_limit']:.1f}% of the limit")
EOF
done

# 2. The batch-8 step against batch 1 (Q4_0), mean inter-token latency.
if part 2; then
m=$(model q4_0)
for c in 1 8; do
  "$KVLM" bench batch -m "$m" --requests "$c" --concurrency "$c" --prompt-len 8 --gen-len 32 -t 2 --json \
    > "$OUT/batch-$c.json" 2> /dev/null
done
python3 - "$OUT" <<'EOF' | tee -a "$SUMMARY"
import json, sys
one, eight = (json.load(open(f"{sys.argv[1]}/batch-{c}.json"))["itl_ms"] for c in (1, 8))
print(f"batch step (Q4_0): mean ITL {one['mean']:.2f} ms at 1 stream, {eight['mean']:.2f} ms at 8: "
      f"{eight['mean'] / one['mean']:.2f}x (p50 {one['p50']:.2f} / {eight['p50']:.2f} ms)")
EOF
fi

# 3. Decode at 4,096 tokens of context against an empty one (both engines),
# with F16 KV (both defaults), BF16 and Q8_0 KV (llama.cpp: -ctk/-ctv, which
# need its flash attention).
if part 3; then
m=$(model q4_0 8192)
for d in 0 4096; do
  "$KVLM" bench model -m "$m" -t 2 -p 0 -n 32 -r 3 --depth "$d" --json > "$OUT/kvlm-depth-f16-$d.json" 2> /dev/null
  "$LLAMA_BIN/llama-bench" -m "$m" -t 2 -p 0 -n 32 -r 3 -d "$d" -o json > "$OUT/llama-depth-f16-$d.json" 2> /dev/null || true
  for kv in bf16 q8_0; do
    "$KVLM" bench model -m "$m" -t 2 -p 0 -n 32 -r 3 --depth "$d" --kv-type "$kv" --json \
      > "$OUT/kvlm-depth-$kv-$d.json" 2> /dev/null
    "$LLAMA_BIN/llama-bench" -m "$m" -t 2 -p 0 -n 32 -r 3 -d "$d" -ctk "$kv" -ctv "$kv" -fa 1 -o json \
      > "$OUT/llama-depth-$kv-$d.json" 2> /dev/null || true
  done
done
python3 - "$OUT" <<'EOF' | tee -a "$SUMMARY"
import json, sys, os
out = sys.argv[1]
for kv in ("f16", "bf16", "q8_0"):
    k = [json.load(open(f"{out}/kvlm-depth-{kv}-{d}.json"))["tg"]["tokens_per_s"] for d in (0, 4096)]
    line = f"depth, {kv} KV: kvlm {k[0]:.1f} -> {k[1]:.1f} tok/s ({100 * k[1] / k[0]:.1f}%)"
    try:
        l = [json.load(open(f"{out}/llama-depth-{kv}-{d}.json"))[0]["avg_ts"] for d in (0, 4096)]
        line += f" | llama.cpp {l[0]:.1f} -> {l[1]:.1f} ({100 * l[1] / l[0]:.1f}%)"
    except Exception:
        line += " | llama.cpp: no result (this llama-bench lacks -d, or the KV type)"
    print(line)
EOF
fi

# 4. Serving: 16 requests, 4 in flight, 64 tokens, no prefix caching.
if part 4; then
m=$(model q4_0)
free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }
serve_load() {  # serve_load NAME PORT: waits for /health, then runs the load
  for _ in $(seq 600); do curl -sf "127.0.0.1:$2/health" > /dev/null && break; sleep 0.2; done
  python3 "$SHARED/bench/openai_load.py" --port "$2" --requests 16 --concurrency 4 --max-tokens 64 \
    --text "$SHARED/text/tinystories_sample.txt" --extra '{"ignore_eos": true, "cache_prompt": false}' \
    > "$OUT/serve-$1.txt" 2>&1
}
port=$(free_port)
"$KVLM" serve -m "$m" -t 2 --no-prefix-cache --port "$port" > "$OUT/kvlm-serve.log" 2>&1 &
pid=$!
serve_load kvlm "$port"
{ kill -TERM "$pid"; wait "$pid"; } 2> /dev/null || true  # llama-server may abort on SIGTERM
port=$(free_port)
"$LLAMA_BIN/llama-server" -m "$m" -t 2 --parallel 8 -c 8192 --port "$port" > "$OUT/llama-serve.log" 2>&1 &
pid=$!
serve_load llama "$port"
{ kill -TERM "$pid"; wait "$pid"; } 2> /dev/null || true  # llama-server may abort on SIGTERM
python3 - "$OUT" <<'EOF' | tee -a "$SUMMARY"
import json, sys
k, l = (json.load(open(f"{sys.argv[1]}/serve-{n}.txt")) for n in ("kvlm", "llama"))
print(f"serve: kvlm {k['chunks_per_s']:.1f} chunks/s, mean TTFT {k['ttft_s']['mean']:.2f} s, errors {k['errors']} | "
      f"llama-server {l['chunks_per_s']:.1f} chunks/s, mean TTFT {l['ttft_s']['mean']:.2f} s, errors {l['errors']} | "
      f"{k['chunks_per_s'] / l['chunks_per_s']:.2f}x the throughput, {k['ttft_s']['mean'] / l['ttft_s']['mean']:.2f} of the TTFT")
EOF
fi

# 5. The step thread's share: stories260K, 64 streams, 256 requests.
if part 5; then
"$KVLM" bench batch -m "$SHARED/models/stories260K.gguf" --requests 256 --concurrency 64 --prompt-len 32 \
  --gen-len 64 -t 2 --json > "$OUT/step-thread.json" 2> /dev/null
python3 - "$OUT/step-thread.json" <<'EOF' | tee -a "$SUMMARY"
import json, sys
p = json.load(open(sys.argv[1]))["step_profile"]
print(f"step thread (stories260K, 64 streams): {100 * p['outside_forward_fraction']:.1f}% of a step outside the "
      f"forward pass; schedule {p['schedule_s']:.3f} s, sample {p['sample_s']:.3f} s, postprocess "
      f"{p['postprocess_s']:.3f} s, forward {p['forward_s']:.3f} s")
EOF
fi
