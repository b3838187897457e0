#!/usr/bin/env python3
"""Inter-token latency of running streams while KV tiers load and store:
a few long greedy streams run on `kvlm serve` while other requests with
long, distinct prompts arrive (their blocks are written to the tiers) and
repeat (their blocks are loaded back). Runs the same load against a server
without tiers and prints the ITL p50/p99 of the long streams for both.

  bench/tier_itl.py --model ../shared/models/synth-tiny-Q8_0.gguf [--kvlm build/kvlm]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tier_ttft import Server, free_port  # noqa: E402


def stream_gaps(server, prompt, max_tokens, out):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    last = None
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            if raw.startswith(b"data: {"):
                now = time.perf_counter()
                if last is not None:
                    out.append(now - last)
                last = now


def one_shot(server, prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 4, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=600).read()


def run_load(server, text, args):
    gaps = []
    streams = [threading.Thread(target=stream_gaps, args=(server, text[i * 50:i * 50 + 40], args.stream_tokens, gaps))
               for i in range(args.streams)]
    for t in streams:
        t.start()
    time.sleep(0.2)
    # Distinct long prompts (stored), then each again (loaded back or RAM hits).
    prompts = [text[10000 + i * 4000:10000 + i * 4000 + args.prompt_chars] for i in range(args.prompts)]
    for p in prompts + prompts:
        one_shot(server, p)
    for t in streams:
        t.join()
    gaps.sort()
    return gaps[len(gaps) // 2], gaps[int(len(gaps) * 0.99)], len(gaps)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--kvlm", default=os.path.join(os.path.dirname(__file__), "..", "build", "kvlm"))
    p.add_argument("--text", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "text",
                                                  "tinystories_sample.txt"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--streams", type=int, default=2)
    p.add_argument("--stream-tokens", type=int, default=300)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--prompt-chars", type=int, default=800)
    p.add_argument("--ctx", type=int, default=2048, help="KV pool tokens: small, so repeats load from the tiers")
    args = p.parse_args()
    text = open(args.text).read()
    work = tempfile.mkdtemp(prefix="kvlm-tier-itl-")
    redis_port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", work], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        rows = []
        for name, extra in (("no tiers", []),
                            ("disk + Redis tiers", ["--kv-disk", os.path.join(work, "disk"), "--kv-redis",
                                                    f"redis://127.0.0.1:{redis_port}"])):
            s = Server(args, ["--ctx", str(args.ctx)] + extra)
            rows.append((name, *run_load(s, text, args)))
            if extra:
                loaded = s.metric("kvlm_kv_tier_hit_tokens_total")
            s.stop()
        print(f"model {args.model}: {args.streams} streams of {args.stream_tokens} tokens beside "
              f"{args.prompts} long prompts sent twice; pool {args.ctx} tokens")
        print(f"{'server':<22} {'ITL p50 ms':>11} {'ITL p99 ms':>11} {'gaps':>6}")
        for name, p50, p99, n in rows:
            print(f"{name:<22} {p50 * 1000:>11.2f} {p99 * 1000:>11.2f} {n:>6}")
        print(f"tokens loaded from tiers: {loaded:.0f}; p99 ratio {rows[1][2] / rows[0][2]:.3f}")
    finally:
        redis.terminate()
        redis.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
