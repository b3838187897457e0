#!/usr/bin/env bash
# Store/load speed of the KV tiers with `kvlm kv bench`: a disk tier, one
# redis-server and a 3-node Redis Cluster, all started here on loopback
# (free ports from 27000 up) and stopped on exit, whatever happens.
# Usage: scripts/kv_bench.sh [kvlm kv bench options, e.g. --iterations 20]
# Env: KVLM=build/kvlm, DISK_DIR=a scratch directory (default: mktemp -d).
set -euo pipefail
cd "$(dirname "$0")/.."
KVLM="${KVLM:-build/kvlm}"
work="$(mktemp -d)"
DISK_DIR="${DISK_DIR:-$work/disk}"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
next_port=27000
free_port() {  # a free port whose cluster-bus twin (+10000) is free too
  while ! port_free "$next_port" || ! port_free $((next_port + 10000)); do next_port=$((next_port + 1)); done
  echo "$next_port"
  next_port=$((next_port + 1))
}
start_redis() {  # port [extra args...]
  local port=$1; shift
  mkdir -p "$work/r$port"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work/r$port" \
    --logfile "$work/r$port/log" "$@" &
  pids+=($!)
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && return; sleep 0.05; done
  echo "redis-server on $port did not start" >&2; exit 1
}

echo "== disk ($DISK_DIR)"
mkdir -p "$DISK_DIR"
"$KVLM" kv bench --kv-disk "$DISK_DIR" "$@"

echo "== redis (one server)"
p=$(free_port); start_redis "$p"
"$KVLM" kv bench --kv-redis "redis://127.0.0.1:$p" "$@"

echo "== redis cluster (3 masters)"
nodes=()
for _ in 1 2 3; do
  p=$(free_port); start_redis "$p" --cluster-enabled yes --cluster-config-file "nodes-$p.conf"
  nodes+=("127.0.0.1:$p")
done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
for _ in $(seq 100); do
  redis-cli -p "${nodes[0]##*:}" cluster info | grep -q cluster_state:ok && break; sleep 0.1
done
"$KVLM" kv bench --kv-redis "redis+cluster://$(IFS=,; echo "${nodes[*]}")" "$@"
