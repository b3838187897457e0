#!/usr/bin/env python3
"""Routing quality and the router's own cost, measured on loopback.

  bench/router_bench.py multi-tenant [--policies kv-aware,least-load,round-robin,session] [--tier]
      T tenants with an L-token system prompt and U users each, follow-up
      turns extending their history (kvlm bench serve --workload
      multi-tenant), through kvlm router over W fresh kvlm serve workers,
      each with a KV pool of about two tenants' prefixes; and the same
      workload on one worker with the pools' memory together (the
      reference). Prints, per policy: prefix-hit ratio, TTFT mean/p99, and
      how often the router predicted the cached tokens the workers reported.
      --tier adds a shared Redis tier (a redis-server it starts).
  bench/router_bench.py overhead [--requests N] [--concurrency C]
      kvlm bench serve against one worker directly and through the router,
      alternated: TTFT p50 and throughput of each.

Every process runs on 127.0.0.1 on a free port and is stopped at the end.
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KVLM = os.environ.get("KVLM_BIN", os.path.join(ROOT, "build", "kvlm"))
MODEL = os.path.join(ROOT, "..", "shared", "models", "stories260K.gguf")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer")


class Procs:
    def __init__(self):
        self.procs = []
        self.logs = tempfile.mkdtemp(prefix="kvlm-router-bench-")

    def start(self, name, argv):
        log = open(os.path.join(self.logs, f"{name}-{len(self.procs)}.log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in self.procs:
            p.wait()
        self.procs = []


def start_worker(procs, port, args):
    procs.start("worker", [KVLM, "serve", "-m", MODEL, "--port", str(port), "-t", "1", "--kv-events"] + args)
    wait_http(f"http://127.0.0.1:{port}/health")


def metrics(url):
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("kvlm_router_cache_predictions_total"):
            out[line.split('"')[1]] = float(line.split()[-1])
    return out


def bench(url, a):
    cmd = [KVLM, "bench", "serve", "--url", url, "--workload", "multi-tenant", "--tenants", str(a.tenants),
           "--system-len", str(a.system_len), "--users", str(a.users), "--turns", str(a.turns),
           "--user-len", str(a.user_len), "--gen-len", str(a.gen_len), "--concurrency", str(a.concurrency),
           "--seed", str(a.seed), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    j = json.loads(out)
    return j["runs"][0] if "runs" in j else j


def row(name, r, pred=None):
    ttft = r["ttft_ms"]
    p = ""
    if pred:
        total = sum(pred.values())
        p = (f"{pred.get('exact', 0) / total * 100:.1f}% of {int(total)} (over {int(pred.get('over', 0))}, "
             f"under {int(pred.get('under', 0))})" if total else "-")
    return (f"| {name} | {r['prefix_hit_ratio']:.3f} | {ttft['mean']:.1f} | {ttft['p99']:.1f} | "
            f"{r['errors']} | {p} |")


def multi_tenant(a):
    pool = 2 * a.system_len + a.pool_extra  # about two tenants' prefixes, in tokens
    rows = []
    for tier in ([False, True] if a.tier else [False]):
        procs = Procs()
        try:
            tier_args = []
            if tier:
                rport = free_port()
                procs.start("redis", ["redis-server", "--port", str(rport), "--save", "", "--appendonly", "no"])
                time.sleep(0.3)
            # The reference: one worker with the pools together.
            port = free_port()
            if tier:
                subprocess.run(["redis-cli", "-p", str(rport), "FLUSHALL"], capture_output=True)
                tier_args = ["--kv-redis", f"redis://127.0.0.1:{rport}"]
            start_worker(procs, port, ["--ctx", str(a.workers * pool)] + tier_args)
            rows.append(row(f"one worker, {a.workers}x pool{' + tier' if tier else ''}", bench(f"http://127.0.0.1:{port}", a)))
            procs.procs[-1].send_signal(signal.SIGKILL)
            for policy in a.policies.split(","):
                if tier:
                    subprocess.run(["redis-cli", "-p", str(rport), "FLUSHALL"], capture_output=True)
                ports = [free_port() for _ in range(a.workers)]
                for p in ports:
                    start_worker(procs, p, ["--ctx", str(pool)] + tier_args)
                rport_router = free_port()
                procs.start("router", [KVLM, "router", "-m", MODEL, "--port", str(rport_router), "--policy", policy,
                                       "--workers", ",".join(f"http://127.0.0.1:{p}" for p in ports)]
                            + (["--load-weight", str(a.load_weight)] if a.load_weight is not None else []))
                url = f"http://127.0.0.1:{rport_router}"
                wait_http(url + "/health")
                time.sleep(0.5)  # the KV-event streams connect
                r = bench(url, a)
                rows.append(row(f"{policy}{' + tier' if tier else ''}", r, metrics(url)))
                for proc in procs.procs[-(a.workers + 1):]:
                    proc.send_signal(signal.SIGKILL)
        finally:
            procs.stop_all()
    print(f"{a.tenants} tenants x {a.system_len}-token system prompt, {a.users} users each, {a.turns} turns, "
          f"{a.user_len}-token messages, {a.gen_len} generated; {a.workers} workers with a {pool}-token pool; "
          f"concurrency {a.concurrency}")
    print("| run | prefix-hit ratio | TTFT mean ms | TTFT p99 ms | errors | cached tokens predicted exactly |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(r)


def overhead(a):
    procs = Procs()
    try:
        wport, rport = free_port(), free_port()
        start_worker(procs, wport, [])
        procs.start("router", [KVLM, "router", "-m", MODEL, "--port", str(rport), "--workers",
                               f"http://127.0.0.1:{wport}"])
        wait_http(f"http://127.0.0.1:{rport}/health")
        results = {"direct": [], "router": []}
        for _ in range(a.rounds):
            for name, port in (("direct", wport), ("router", rport)):
                cmd = [KVLM, "bench", "serve", "--url", f"http://127.0.0.1:{port}", "--requests", str(a.requests),
                       "--concurrency", str(a.concurrency), "--prompt-len", str(a.prompt_len), "--gen-len",
                       str(a.gen_len), "--json"]
                j = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
                results[name].append(j["runs"][0] if "runs" in j else j)
        for name, runs in results.items():
            p50 = sorted(r["ttft_ms"]["p50"] for r in runs)
            tps = sorted(r["generated_tokens_per_s"] for r in runs)
            print(f"{name}: TTFT p50 ms {p50}  gen tok/s {[round(x) for x in tps]}")
    finally:
        procs.stop_all()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    mt = sub.add_parser("multi-tenant")
    mt.add_argument("--policies", default="kv-aware,least-load,round-robin,session")
    mt.add_argument("--tier", action="store_true", help="also with a shared Redis tier")
    mt.add_argument("--workers", type=int, default=3)
    mt.add_argument("--tenants", type=int, default=8)
    mt.add_argument("--system-len", type=int, default=1024)
    mt.add_argument("--users", type=int, default=4)
    mt.add_argument("--turns", type=int, default=3)
    mt.add_argument("--user-len", type=int, default=32)
    mt.add_argument("--gen-len", type=int, default=32)
    mt.add_argument("--concurrency", type=int, default=6)
    mt.add_argument("--pool-extra", type=int, default=512, help="tokens of pool beyond two prefixes")
    mt.add_argument("--load-weight", type=float, default=None)
    mt.add_argument("--seed", type=int, default=1)
    ov = sub.add_parser("overhead")
    ov.add_argument("--requests", type=int, default=200)
    ov.add_argument("--concurrency", type=int, default=16)
    ov.add_argument("--prompt-len", type=int, default=128)
    ov.add_argument("--gen-len", type=int, default=64)
    ov.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if not os.path.exists(KVLM):
        sys.exit(f"{KVLM} not found: build first (scripts/setup.sh)")
    multi_tenant(a) if a.what == "multi-tenant" else overhead(a)


if __name__ == "__main__":
    main()
