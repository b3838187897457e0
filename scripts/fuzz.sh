#!/usr/bin/env bash
# Builds the libFuzzer targets (clang-16, ASan+UBSan, tests/fuzz/) and runs
# each for SECONDS (default 60), one a core at a time, from seed corpora that
# tests/fuzz/make_corpus.py writes from ../shared. Prints one line per target:
#   fuzz: gguf: 60 s, 12345 runs (205/s), cov 4321, ft 9876, corpus 210: ok
# and exits non-zero if any target crashed, leaked, hit a sanitizer report,
# ran out of memory or timed out (the input is kept under $BUILD/fuzz-artifacts/).
#
# Usage: scripts/fuzz.sh [SECONDS]
#   FUZZ_BUILD_DIR=build-fuzz   the clang build (configured here if needed)
#   FUZZ_TARGETS="gguf openai"  a subset (default: all)
#   FUZZ_NO_BUILD=1             run what is built
#   FUZZ_JOBS=N                 targets run at once (default: nproc)
#   KVLM_SHARED=../shared       the shared data (models, vocabularies, templates)
# The corpus a run grows stays in $BUILD/fuzz-corpus/<target>, so the next run
# starts where this one stopped; delete it to start over from the seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/cmake_generator.sh
SECONDS_EACH="${1:-60}"
BUILD="${FUZZ_BUILD_DIR:-build-fuzz}"
export KVLM_SHARED="${KVLM_SHARED:-$(cd .. && pwd)/shared}"
ALL_TARGETS=(record openai tokenizer jinja gguf router_stream http_request)
read -r -a TARGETS <<< "${FUZZ_TARGETS:-${ALL_TARGETS[*]}}"

if [[ "${FUZZ_NO_BUILD:-0}" != 1 ]]; then
  if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
    launcher=()
    if command -v ccache >/dev/null; then
      launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
    fi
    CC=clang-16 CXX=clang++-16 cmake $(cmake_generator "$BUILD") -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKVLM_FUZZ=ON \
      -DKVLM_BUILD_BENCH=OFF "${launcher[@]}" >/dev/null
  fi
  cmake --build "$BUILD" -j"${FUZZ_BUILD_JOBS:-$(nproc)}" --target "${TARGETS[@]/#/kvlm_fuzz_}"
fi

seeds="$BUILD/fuzz-corpus/seeds"
if [[ ! -d "$seeds" || tests/fuzz/make_corpus.py -nt "$seeds" ]]; then
  rm -rf "$seeds"
  python3 tests/fuzz/make_corpus.py "$KVLM_SHARED" "$seeds"
fi
mkdir -p "$BUILD/fuzz-artifacts" "$BUILD/fuzz-logs"

# One target's run; its summary line goes to $BUILD/fuzz-logs/<target>.result.
run_target() {
  local t=$1
  local corpus="$BUILD/fuzz-corpus/$t"
  mkdir -p "$corpus"
  local dict=()
  if [[ -f "tests/fuzz/$t.dict" ]]; then dict=(-dict="tests/fuzz/$t.dict"); fi
  if [[ -f "$seeds/$t.dict" ]]; then dict=(-dict="$seeds/$t.dict"); fi
  local log="$BUILD/fuzz-logs/$t.log"
  local rc=0
  # -timeout: one input taking 25 s is a hang; -rss_limit_mb: ASan's shadow
  # included, well above what any input should need.
  "$BUILD/fuzz/kvlm_fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=25 -rss_limit_mb=3072 \
    -print_final_stats=1 -artifact_prefix="$BUILD/fuzz-artifacts/$t-" "${dict[@]}" \
    "$corpus" "$seeds/$t" >"$log" 2>&1 || rc=$?
  local runs rate last cov ft corp verdict=ok
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
  if ((rc != 0)); then
    verdict="FAILED (exit $rc; log $log; input $(ls -t "$BUILD/fuzz-artifacts/$t-"* 2>/dev/null | head -1 || true))"
    grep -E 'ERROR|SUMMARY|^ +#[0-9]+ ' "$log" | head -30 >&2 || true
  fi
  echo "fuzz: $t: ${SECONDS_EACH} s, ${runs:-0} runs (${rate:-0}/s), cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}: $verdict" \
    >"$BUILD/fuzz-logs/$t.result"
}

# The targets run side by side, one a core (FUZZ_JOBS, default nproc): each
# is single-threaded, so each still gets its SECONDS of a core, and on CI's
# 2 cores the phase takes 3 rounds of SECONDS instead of 5.
jobs_max="${FUZZ_JOBS:-$(nproc)}"
for t in "${TARGETS[@]}"; do
  rm -f "$BUILD/fuzz-logs/$t.result"
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n || true; done
  run_target "$t" &
done
wait
failed=0
for t in "${TARGETS[@]}"; do
  result="$BUILD/fuzz-logs/$t.result"
  if [[ -f "$result" ]]; then cat "$result"; else echo "fuzz: $t: FAILED (no result)"; fi
  grep -q ': ok$' "$result" 2>/dev/null || failed=1
done
exit $failed
