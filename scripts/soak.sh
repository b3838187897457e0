#!/usr/bin/env bash
# The soak and fault test at full length: scripts/soak.sh [REQUESTS] (default
# 20000) runs tests/soak against a real `kvlm serve` and prints its summary
# (requests, outcomes by kind, hang-ups, blocks held after, RSS before and
# after). ctest runs the same test with 256 requests. KVLM_SOAK_CLIENTS and
# KVLM_SOAK_SEED change the clients (64) and the seed (1); BUILD_DIR the build.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${BUILD_DIR:-build}"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" -j"${JOBS:-2}" --target kvlm kvlm_soak
KVLM_SOAK_REQUESTS="${1:-20000}" OMP_NUM_THREADS=1 "$build/tests/kvlm_soak" --gtest_filter='Soak.*'
