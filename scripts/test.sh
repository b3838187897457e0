#!/usr/bin/env bash
# Installs, builds, and runs kvlm's whole test suite. ctest prints the summary
# line last ("100% tests passed, 0 tests failed out of N").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j"$(nproc)" "$@"
