#!/usr/bin/env python3
"""kvlm workers behind the routers fleets run: vLLM's (vllm-router) and
SGLang's (sglang-router), beside kvlm router, on loopback.

  bench/interop_routers.py [--venv DIR] [--routers kvlm,vllm,sglang]

Installs the two routers from PyPI at pinned versions into a venv (default
build/interop-venv; PyPI must be reachable), then for each router and each
of its policies (a cache-aware one and round robin) starts 3 fresh kvlm
workers (stories260K, a KV pool of about two tenants' prefixes) and checks
through it:
  - greedy outputs equal to a worker's direct answer (8 prompts), whole and
    streamed;
  - the cached-token ratio of kvlm bench serve's multi-tenant workload (the
    workers' usage.prompt_tokens_details.cached_tokens over prompt tokens,
    as router_bench.py measures kvlm router);
  - what the client sees when the worker serving its stream is SIGKILLed
    after the first chunks: the stream completed (and equal to the direct
    answer), or cut off after how many tokens.
Prints one markdown table (docs/scale-out.md keeps the figures).
"""
import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from router_bench import KVLM, MODEL, ROOT, Procs, free_port, wait_http  # noqa: E402

PINS = ["vllm-router==0.1.17", "sglang-router==0.3.2"]
PROMPTS = [f"Once upon a time, {who} went to the {where}" for who in ("Lily", "Tom", "a cat", "the king")
           for where in ("park", "sea")]


def ensure_venv(venv):
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q"] + PINS, check=True)
    return py


def post(port, path, body, timeout=120):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def completion(port, prompt, max_tokens=24, **extra):
    body = {"model": "llama", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **extra}
    return post(port, "/v1/completions", body)["choices"][0]["text"]


def stream_chunks(port, prompt, max_tokens, extra=None):
    """Yields each text chunk of a streamed completion; ends at [DONE] or when the stream breaks."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    body = {"model": "llama", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            **(extra or {})}
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"stream answered {r.status}: {r.read()[:200]!r}")
    while True:
        line = r.readline()
        if not line:
            return  # cut off
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            yield None
            return
        j = json.loads(data)
        if "error" in j:
            raise RuntimeError(f"error event: {j['error'].get('message', j['error'])}")
        for c in j.get("choices", []):
            yield c.get("text", "")


def start_workers(procs, n, pool):
    ports = [free_port() for _ in range(n)]
    for p in ports:
        procs.start("worker", [KVLM, "serve", "-m", MODEL, "--port", str(p), "-t", "1", "--kv-events",
                               "--ctx", str(pool)])
    for p in ports:
        wait_http(f"http://127.0.0.1:{p}/health")
    return ports


def start_router(procs, kind, policy, py, port, workers):
    urls = [f"http://127.0.0.1:{p}" for p in workers]
    if kind == "kvlm":
        argv = [KVLM, "router", "-m", MODEL, "--port", str(port), "--policy", policy, "--workers", ",".join(urls)]
    elif kind == "vllm":
        argv = [os.path.join(os.path.dirname(py), "vllm-router"), "--host", "127.0.0.1", "--port", str(port),
                "--policy", policy, "--prometheus-port", str(free_port()), "--worker-urls"] + urls
    else:
        argv = [py, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port), "--policy",
                policy, "--prometheus-port", str(free_port()), "--worker-urls"] + urls
    procs.start(f"router-{kind}", argv)
    deadline = time.time() + 60
    while time.time() < deadline:  # answering a completion: every router has found its workers
        try:
            completion(port, "Once", max_tokens=1)
            return
        except Exception:
            time.sleep(0.2)
    raise RuntimeError(f"{kind} router did not serve (logs in {procs.logs})")


def serving_worker(workers):
    for p in workers:
        with urllib.request.urlopen(f"http://127.0.0.1:{p}/get_load", timeout=5) as r:
            if json.loads(r.read())[0]["num_reqs"] > 0:
                return p
    return None


def kill_mid_stream(procs, port, workers, direct_long):
    """SIGKILLs the worker serving a long stream after its first chunks; says what the client got."""
    got, done = [], False
    chunks = stream_chunks(port, PROMPTS[0], 400, {"ignore_eos": True})
    try:
        for text in chunks:
            if text is None:
                done = True
                break
            got.append(text)
            if len(got) == 5:
                victim = serving_worker(workers)
                proc = procs.procs[workers.index(victim)] if victim else None
                if proc:
                    proc.send_signal(signal.SIGKILL)
    except Exception as e:  # an error event or a broken connection
        return f"cut off after {len(got)} chunks ({str(e)[:60]})"
    text = "".join(got)
    if done and text == direct_long:
        return f"completed, equal to the direct answer ({len(got)} chunks)"
    if done:
        return f"completed, differs from the direct answer ({len(got)} chunks)"
    return f"cut off after {len(got)} chunks (connection closed)"


def run_one(kind, policy, py, a, direct, direct_long):
    procs = Procs()
    try:
        workers = start_workers(procs, 3, a.pool)
        port = free_port()
        start_router(procs, kind, policy, py, port, workers)
        whole = sum(completion(port, p) == direct[p] for p in PROMPTS)
        streamed = sum("".join(t for t in stream_chunks(port, p, 24) if t) == direct[p] for p in PROMPTS)
        bench = [KVLM, "bench", "serve", "--url", f"http://127.0.0.1:{port}", "--model", "llama", "--workload",
                 "multi-tenant", "--tenants", "6", "--system-len", "400", "--users", "3", "--turns", "2",
                 "--user-len", "24", "--gen-len", "16", "--concurrency", "4", "--seed", "1", "--json",
                 "--tokenize-url", f"http://127.0.0.1:{workers[0]}"]  # prompts of the same tokens for every router
        j = json.loads(subprocess.run(bench, capture_output=True, text=True, check=True).stdout)
        r = j["runs"][0] if "runs" in j else j
        kill = kill_mid_stream(procs, port, workers, direct_long)
        ratio = "-" if r.get("prefix_hit_ratio") is None else f"{r['prefix_hit_ratio']:.3f}"
        errors = f"{r['errors']} {json.dumps(r['error_messages'])[:80]}" if r["errors"] else "0"
        return (f"| {kind} router | {policy} | {whole}/{len(PROMPTS)} | {streamed}/{len(PROMPTS)} | "
                f"{ratio} | {errors} | {kill} |")
    finally:
        procs.stop_all()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", default=os.path.join(ROOT, "build", "interop-venv"))
    ap.add_argument("--routers", default="kvlm,vllm,sglang")
    ap.add_argument("--pool", type=int, default=1024, help="KV pool tokens per worker (about two prefixes)")
    a = ap.parse_args()
    if not os.path.exists(KVLM):
        sys.exit(f"{KVLM} not found: build first (scripts/setup.sh)")
    kinds = a.routers.split(",")
    py = ensure_venv(a.venv) if set(kinds) - {"kvlm"} else sys.executable
    procs = Procs()
    try:  # the direct answers: one worker, no router
        (ref,) = start_workers(procs, 1, a.pool)
        direct = {p: completion(ref, p) for p in PROMPTS}
        direct_long = completion(ref, PROMPTS[0], 400, ignore_eos=True)
    finally:
        procs.stop_all()
    policies = {"kvlm": ["kv-aware", "round-robin"], "vllm": ["cache_aware", "round_robin"],
                "sglang": ["cache_aware", "round_robin"]}
    rows = [run_one(k, pol, py, a, direct, direct_long) for k in kinds for pol in policies[k]]
    print(f"3 kvlm workers ({os.path.basename(MODEL)}, {a.pool}-token KV pool each); {', '.join(PINS)}")
    print("| router | policy | outputs equal | streams equal | cached-token ratio | errors | worker SIGKILLed mid-stream |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
