#!/usr/bin/env bash
# Installs kvlm's dependencies (Debian 12 packages, gnuplot for the bench
# plots and Chromium for the web page's test; the openai, LangChain JS, zod
# and ws npm packages for the server tests) and builds kvlm.
# Usage: scripts/setup.sh [--no-install]   (BUILD_DIR=build by default)
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcpp-httplib-dev libcli11-dev libboost1.81-dev
  libpcre2-dev libxxhash-dev libfmt-dev
  libhiredis-dev redis-server redis-tools libssl-dev openssl
  curl prometheus python3 python3-jsonschema python3-numpy python3-yaml systemd
  clang-16 libclang-rt-16-dev libfuzzer-16-dev
  gnuplot-nox chromium fonts-dejavu-core
)

apt_install() {
  echo "setup: installing $*" >&2
  local sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "$@"
}

if [[ "${1:-}" != "--no-install" ]]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  # Machines that ship Node.js with npm keep theirs; others get Debian's.
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then missing+=(nodejs npm); fi
  if ((${#missing[@]})); then apt_install "${missing[@]}"; fi
  if [[ ! -d tests/npm/node_modules/openai || ! -d tests/npm/node_modules/ws ||
        ! -d tests/npm/node_modules/@langchain/openai || ! -d tests/npm/node_modules/@anthropic-ai/sdk ||
        tests/npm/package-lock.json -nt tests/npm/node_modules ]]; then
    npm ci --prefix tests/npm --no-audit --no-fund --loglevel=error
  fi
fi

BUILD_DIR="${BUILD_DIR:-build}"
source scripts/cmake_generator.sh
# Unity batches: a fresh build in about half the time (CMakeLists.txt, KVLM_UNITY_BUILD).
# shellcheck disable=SC2046  # the generator's words split on purpose
cmake $(cmake_generator "$BUILD_DIR") -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DKVLM_UNITY_BUILD=ON >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
