#!/usr/bin/env bash
# Decode speed with each KV policy against none, at equal mean resident KV
# and equal work: unbounded runs prompt 136 + 256 generated (resident
# 136..392, mean 264), budgeted runs prompt 248 + 256 generated under
# --kv-budget 256 (resident 256..272 once the first block is dropped).
# Prints 8 x per-sequence decode tok/s, (gen - 1) / (e2e - ttft), best of 3.
#   bench/kv_budget_speed.sh [MODEL] [KVLM]
set -euo pipefail
M=${1:-../shared/models/synth-tiny-Q8_0.gguf}
KVLM=${2:-build/kvlm}
one() {
  "$KVLM" bench batch -m "$M" --requests 8 --concurrency 8 -t 2 --json "$@" 2>/dev/null | python3 -c "
import json, sys
d = json.load(sys.stdin); g = d['gen_len']
print('%.1f' % (8 * (g - 1) / ((d['e2e_ms']['mean'] - d['ttft_ms']['mean']) / 1000)))"
}
best() { b=0; for _ in 1 2 3; do v=$(one "$@"); b=$(python3 -c "print(max($b, $v))"); done; echo "$b"; }
echo "unbounded (prompt 136, gen 256): $(best --prompt-len 136 --gen-len 256)"
for p in window sinks h2o tova entropy entropy-low lru fifo; do
  echo "$p, budget 256 (prompt 248, gen 256): $(best --prompt-len 248 --gen-len 256 --kv-budget 256 --kv-policy "$p")"
done
