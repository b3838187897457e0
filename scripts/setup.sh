#!/usr/bin/env bash
# Installs kvlm's dependencies (Debian 12 packages, gnuplot for the bench
# plots and Chromium for the web page's test; the openai, LangChain JS, zod
# and ws npm packages for the server tests; pyzmq and msgpack in tests/py/.venv
# for the KV-event test) and builds kvlm.
# Usage: scripts/setup.sh [--no-install] [--kvlm]   (BUILD_DIR=build by default)
#   --no-install  install nothing, build only
#   --kvlm        only what the kvlm binary needs: its build packages, no
#                 test tools or npm, and the one target (scripts/demo.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

INSTALL=1
ONLY_KVLM=0
for arg in "$@"; do
  case "$arg" in
    --no-install) INSTALL=0 ;;
    --kvlm) ONLY_KVLM=1 ;;
    *) echo "setup: unknown argument $arg (--no-install, --kvlm)" >&2; exit 2 ;;
  esac
done

# What building the kvlm binary needs (Boost: Asio, header-only; cpp-httplib:
# bench serve's client; OpenSSL: HTTPS and tier secrets).
BUILD_PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libcpp-httplib-dev libcli11-dev libboost1.81-dev
  libpcre2-dev libxxhash-dev libfmt-dev libssl-dev
)
# Everything else the tests, sanitizers, fuzzers and benchmarks use.
PACKAGES=(
  "${BUILD_PACKAGES[@]}"
  libgtest-dev libgmock-dev libbenchmark-dev
  libhiredis-dev redis-server redis-tools openssl
  curl prometheus python3 python3-jsonschema python3-numpy python3-yaml python3-venv systemd
  libzmq3-dev
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

missing_of() {  # the packages of "$@" not installed yet
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

if ((INSTALL && ONLY_KVLM)); then
  mapfile -t missing < <(missing_of "${BUILD_PACKAGES[@]}")
  if ((${#missing[@]})); then apt_install "${missing[@]}"; fi
elif ((INSTALL)); then
  mapfile -t missing < <(missing_of "${PACKAGES[@]}")
  # Machines that ship Node.js with npm keep theirs; others get Debian's.
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then missing+=(nodejs npm); fi
  if ((${#missing[@]})); then apt_install "${missing[@]}"; fi
  if [[ ! -d tests/npm/node_modules/openai || ! -d tests/npm/node_modules/ws ||
        ! -d tests/npm/node_modules/@langchain/openai || ! -d tests/npm/node_modules/@anthropic-ai/sdk ||
        tests/npm/package-lock.json -nt tests/npm/node_modules ]]; then
    npm ci --prefix tests/npm --no-audit --no-fund --loglevel=error
  fi
  # The tests' Python clients (pyzmq, msgpack: tests/py/requirements.txt)
  # in a venv of their own, made again when the pins change.
  if [[ ! -x tests/py/.venv/bin/python || tests/py/requirements.txt -nt tests/py/.venv/.installed ]]; then
    python3 -m venv tests/py/.venv
    tests/py/.venv/bin/pip install --quiet --disable-pip-version-check -r tests/py/requirements.txt
    touch tests/py/.venv/.installed
  fi
fi

BUILD_DIR="${BUILD_DIR:-build}"
source scripts/cmake_generator.sh
source scripts/cpu_isa_paths.sh
# Unity batches: a fresh build in about half the time (CMakeLists.txt, KVLM_UNITY_BUILD).
# shellcheck disable=SC2046  # the generator's words split on purpose
if ((ONLY_KVLM)); then
  # Tests and micro-benchmarks off, and only this CPU's kernel copy (the
  # copies are most of a kvlm build), unless this build folder was set up
  # whole before (then it stays so: a later full setup reuses every object).
  options=(-DCMAKE_BUILD_TYPE=Release -DKVLM_UNITY_BUILD=ON)
  if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
    options+=(-DKVLM_BUILD_TESTS=OFF -DKVLM_BUILD_BENCH=OFF "-DKVLM_ISA_PATHS=$(cpu_isa_paths)")
  fi
  cmake $(cmake_generator "$BUILD_DIR") -S . -B "$BUILD_DIR" "${options[@]}" >/dev/null
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target kvlm
else
  cmake $(cmake_generator "$BUILD_DIR") -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DKVLM_UNITY_BUILD=ON \
    -DKVLM_BUILD_TESTS=ON -DKVLM_BUILD_BENCH=ON -DKVLM_WERROR=ON \
    "-DKVLM_ISA_PATHS=avx2;avxvnni;avx512" >/dev/null
  cmake --build "$BUILD_DIR" -j"$(nproc)"
fi
