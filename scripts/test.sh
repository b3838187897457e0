#!/usr/bin/env bash
# Installs, builds, and runs kvlm's whole test suite, then the sanitizer and
# fuzz phases (skipped with KVLM_CI_QUICK=1):
#   asan: one clang build (build-fuzz: ASan+UBSan, fuzzer-no-link coverage)
#         gives the sanitized unit/engine test binaries and the fuzz targets;
#   fuzz: scripts/fuzz.sh, KVLM_CI_FUZZ_SECONDS (default 10) per target: with the
#         builds and suites it keeps .ci/run under 30 min on 2 cores;
#   tsan: a clang TSan build (build-tsan) runs the engine tests, and the
#         main build's server tests run against its kvlm (KVLM_TEST_BIN);
#         tests/tsan.supp suppresses third-party code only.
# Every phase prints "ci-phase: NAME: N s"; all of them are repeated at the
# end, and ctest's summary line of the main suite is printed last
# ("100% tests passed, 0 tests failed out of N"). Extra arguments go to the
# main suite's ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS="$(nproc)"
source scripts/cmake_generator.sh
source scripts/cpu_isa_paths.sh
PHASES=()

phase() {  # phase NAME COMMAND...: runs it, prints and records its time
  local name=$1 start=$SECONDS rc=0
  shift
  echo "ci-phase: $name: started" >&2
  "$@" || rc=$?
  local line="ci-phase: $name: $((SECONDS - start)) s"
  if ((rc != 0)); then line+=" (FAILED, exit $rc)"; fi
  PHASES+=("$line")
  echo "${PHASES[-1]}"
  return $rc
}

# Sanitizer reports of every process (tests and the kvlm children they start)
# go to files in $1: a report from a child that the test did not notice still
# fails the phase.
no_sanitizer_reports() {
  if compgen -G "$1/*" >/dev/null; then
    echo "sanitizer reports in $1:" >&2
    head -c 20000 "$1"/* >&2
    return 1
  fi
}

# The main suite; a test that fails is named at the end of the output (the
# part of a CI log that is kept) and run once more alone: one that passes
# then is reported as FLAKY (a defect to fix, named in the log) instead of
# failing the whole run, one that fails again fails the phase.
FAILED_TESTS=()
FLAKY_TESTS=()
main_suite() {
  local dir="${BUILD_DIR:-build}" rc=0
  (cd "$dir" && ctest --output-on-failure -j"$JOBS" "$@") | tee "$ROOT/$dir/ci-suite.log" || rc=$?
  ((rc == 0)) && return 0
  local failed="$ROOT/$dir/Testing/Temporary/LastTestsFailed.log"
  [[ -s $failed ]] || return $rc
  local names
  mapfile -t names < <(cut -d: -f2- "$failed")
  echo "ci: failed under -j$JOBS, running alone once more: ${names[*]}" >&2
  local name again
  rm -f "$ROOT/$dir/ci-rerun.log"
  for name in "${names[@]}"; do
    again=0
    (cd "$dir" && ctest --output-on-failure -R "^${name}\$") >>"$ROOT/$dir/ci-rerun.log" 2>&1 || again=1
    if ((again)); then FAILED_TESTS+=("$name"); else FLAKY_TESTS+=("$name"); fi
  done
  cat "$ROOT/$dir/ci-rerun.log" >&2
  ((${#FAILED_TESTS[@]} == 0))
}

asan_build() {
  local targets=(kvlm_unit_common kvlm_unit_kv kvlm_unit_kvstore kvlm_unit_sched kvlm_unit_tokenizer
                 kvlm_unit_model kvlm_unit_runner kvlm_unit_engine kvlm_unit_chat kvlm_unit_constrain kvlm_unit_router kvlm_unit_wire kvlm_ops)
  if [[ ! -f build-fuzz/CMakeCache.txt ]]; then
    CC=clang-16 CXX=clang++-16 cmake $(cmake_generator build-fuzz) -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release -DKVLM_FUZZ=ON -DKVLM_UNITY_BUILD=ON \
      -DKVLM_BUILD_BENCH=OFF -DKVLM_WERROR=ON >/dev/null
  fi
  cmake --build build-fuzz -j"$JOBS" --target "${targets[@]}" kvlm_fuzz_record kvlm_fuzz_openai \
    kvlm_fuzz_tokenizer kvlm_fuzz_jinja kvlm_fuzz_gguf kvlm_fuzz_router_stream kvlm_fuzz_http_request
}

# The server's unit tests are not in the sanitized build (they link the whole
# server); its untrusted inputs are fuzzed there instead (kvlm_fuzz_*).
asan_tests() {
  local logs="$ROOT/build-fuzz/sanitizer-logs"
  rm -rf "$logs" && mkdir -p "$logs"
  local rc=0
  (cd build-fuzz && ASAN_OPTIONS="log_path=$logs/asan:detect_leaks=1" \
     UBSAN_OPTIONS="log_path=$logs/ubsan:print_stacktrace=1" \
     ctest --output-on-failure -j"$JOBS" -L '^(kvlm_unit_|kvlm_ops)' -LE '^kvlm_unit_server$') || rc=1
  no_sanitizer_reports "$logs" || rc=1
  return $rc
}

tsan_build() {
  if [[ ! -f build-tsan/CMakeCache.txt ]]; then
    # This CPU's best kernel copy only: with scalar kernels the TSan server
    # is too slow for the drain and body-limit tests (they timed out); the
    # other copies are the ASan build's and the suite's to check.
    CC=clang-16 CXX=clang++-16 cmake $(cmake_generator build-tsan) -S . -B build-tsan -DCMAKE_BUILD_TYPE=Release -DKVLM_TSAN=ON -DKVLM_UNITY_BUILD=ON \
      -DKVLM_BUILD_BENCH=OFF -DKVLM_WERROR=ON "-DKVLM_ISA_PATHS=$(cpu_isa_paths)" >/dev/null
  fi
  cmake --build build-tsan -j"$JOBS" --target kvlm kvlm_unit_runner kvlm_unit_engine kvlm_unit_router
}

tsan_tests() {
  local logs="$ROOT/build-tsan/sanitizer-logs"
  rm -rf "$logs" && mkdir -p "$logs"
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$ROOT/tests/tsan.supp log_path=$logs/tsan"
  local rc=0
  # The server tests are the main build's, run against the TSan kvlm: the
  # server is that child process (the test's own HTTP client needs no TSan).
  # The draft proposer's tests are engine-thread logic over the same pool
  # (20 s of TSan time): the other engine tests cover its threads.
  (cd build-tsan && ctest --output-on-failure -j"$JOBS" -L '^kvlm_unit_(runner|engine|router)$' -E 'Draft') || rc=1
  (cd "${BUILD_DIR:-build}" && KVLM_TEST_BIN="$ROOT/build-tsan/kvlm" ctest --output-on-failure -j"$JOBS" \
     -L '^kvlm_e2e$' -R '^(Server|SseHeartbeat|Choices|KvBudgetServer|Limits|Constrained|ResumeServer|RouterFleet|RouterRegistry|RouterFaults\.A|RouterModels|ServeModels)') || rc=1
  no_sanitizer_reports "$logs" || rc=1
  return $rc
}

rc=0
phase setup scripts/setup.sh || exit 1
phase suite main_suite "$@" || rc=1
if [[ "${KVLM_CI_QUICK:-0}" != 1 ]]; then
  if phase asan-build asan_build; then
    phase asan-tests asan_tests || rc=1
    phase fuzz env FUZZ_NO_BUILD=1 scripts/fuzz.sh "${KVLM_CI_FUZZ_SECONDS:-10}" || rc=1
  else
    rc=1
  fi
  if phase tsan-build tsan_build; then
    phase tsan-tests tsan_tests || rc=1
  else
    rc=1
  fi
fi
printf '%s\n' "${PHASES[@]}"
for t in "${FLAKY_TESTS[@]}"; do echo "ci: FLAKY (failed in the suite, passed alone): $t"; done
for t in "${FAILED_TESTS[@]}"; do echo "ci: FAILED (in the suite and alone): $t"; done
# A fuzz target's failure is printed here too, with the crash's own summary
# and the input in hex: only the end of a CI log is kept.
for result in build-fuzz/fuzz-logs/*.result; do
  [[ -f $result ]] && ! grep -q ': ok$' "$result" || continue
  echo "ci: $(cat "$result")"
  log="${result%.result}.log"
  grep -E '^==[0-9]+==ERROR|^SUMMARY|^ +#[0-9]+ 0x' "$log" 2>/dev/null | head -20 || true
  input=$(sed -n 's/.*; input \([^)]*\)).*/\1/p' "$result")
  if [[ -n $input && -f $input ]]; then
    echo "ci: the input ($(stat -c %s "$input") bytes), first 2 KB in hex:"
    head -c 2048 "$input" | od -A d -t x1 | head -140
  fi
done
grep -E 'tests passed|tests failed' "${BUILD_DIR:-build}/ci-suite.log" | tail -1 || true
exit $rc
