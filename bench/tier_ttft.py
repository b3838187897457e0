#!/usr/bin/env python3
"""Time to first token of one long prompt through `kvlm serve`, from each
place its KV can come from: computed (cold), the RAM prefix cache, the disk
tier after a restart, and Redis from a second server process. Greedy output
must be the same in every case. Starts its own redis-server on a free
loopback port and removes what it writes.

  bench/tier_ttft.py --model /tmp/tinyllama-q4_0.gguf --prompt-tokens 1024 [--kvlm build/kvlm] [--threads 2]
      [--tier-flags "--kv-secret-file F --kv-encrypt"]   (given to every server that uses a tier)
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(port, path="/health", timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.1)
    raise SystemExit(f"server on port {port} did not come up")


class Server:
    def __init__(self, args, extra):
        self.port = free_port()
        cmd = [args.kvlm, "serve", "-m", args.model, "-t", str(args.threads), "--port", str(self.port)] + extra
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        wait_http(self.port)

    def stop(self):
        self.proc.terminate()  # a clean shutdown flushes the tier writes
        self.proc.wait(timeout=60)

    def metric(self, name):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics") as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + "{") or line.startswith(name + " "):
                    return float(line.rsplit(" ", 1)[1])
        return 0.0


def ttft(server, prompt, max_tokens):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "ignore_eos": True, "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    first = None
    text, cached = "", 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                if first is None:
                    first = time.perf_counter() - start
                text += chunk["choices"][0]["text"]
            if chunk.get("usage"):
                cached = chunk["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
    return first, text, cached


def count_tokens(server, text):
    req = urllib.request.Request(f"http://127.0.0.1:{server.port}/tokenize", data=json.dumps({"content": text}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())["count"]


def prompt_of(args, server):
    """The shortest prefix of the text with at least --prompt-tokens tokens (the server's tokenizer)."""
    text = open(args.text).read()
    lo, hi = 1, min(len(text), args.prompt_tokens * 8)
    while lo < hi:
        mid = (lo + hi) // 2
        if count_tokens(server, text[:mid]) >= args.prompt_tokens:
            hi = mid
        else:
            lo = mid + 1
    return text[:lo]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--kvlm", default=os.path.join(HERE, "..", "build", "kvlm"))
    p.add_argument("--text", default=os.path.join(HERE, "..", "..", "shared", "text", "tinystories_sample.txt"))
    p.add_argument("--prompt-tokens", type=int, default=1024)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--tier-flags", default="", help="more flags for the servers that use a tier (a tier secret)")
    args = p.parse_args()
    tier = args.tier_flags.split()

    work = tempfile.mkdtemp(prefix="kvlm-tier-ttft-")
    redis_port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", work], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        redis_url = f"redis://127.0.0.1:{redis_port}"
        disk = os.path.join(work, "disk")
        rows = []
        # Cold and RAM hit, on a server that also writes both tiers.
        a = Server(args, ["--kv-disk", disk, "--kv-redis", redis_url, "--max-model-len", str(args.prompt_tokens * 4)] + tier)
        prompt = prompt_of(args, a)
        cold, want, _ = ttft(a, prompt, args.max_tokens)
        rows.append(("cold (computed)", cold, 0, True))
        best, text, cached = min(ttft(a, prompt, args.max_tokens) for _ in range(args.repeat))
        rows.append(("RAM prefix hit", best, cached, text == want))
        for _ in range(600):  # writes go behind: wait until both tiers hold the prompt
            if a.metric("kvlm_kv_tier_blocks_written_total") > 0 and a.metric("kvlm_requests_loading") == 0:
                break
            time.sleep(0.05)
        a.stop()
        # Disk hit after a restart (page cache warm, as after a restart).
        results = []
        for _ in range(args.repeat):
            b = Server(args, ["--kv-disk", disk, "--max-model-len", str(args.prompt_tokens * 4)] + tier)
            results.append(ttft(b, prompt, args.max_tokens))
            b.stop()
        best = min(results)
        rows.append(("disk tier, restarted server", best[0], best[2], all(r[1] == want for r in results)))
        # Redis hit from a second server process.
        results = []
        for _ in range(args.repeat):
            c = Server(args, ["--kv-redis", redis_url, "--max-model-len", str(args.prompt_tokens * 4)] + tier)
            results.append(ttft(c, prompt, args.max_tokens))
            c.stop()
        best = min(results)
        rows.append(("Redis tier, second server", best[0], best[2], all(r[1] == want for r in results)))

        print(f"model {args.model}, prompt ~{args.prompt_tokens} tokens, {args.threads} threads, best of {args.repeat}"
              f"{', tier flags: ' + args.tier_flags if tier else ''}")
        print(f"{'source':<30} {'TTFT ms':>10} {'% of cold':>10} {'cached':>8} {'same output':>12}")
        for name, t, cached, same in rows:
            print(f"{name:<30} {t * 1000:>10.1f} {100 * t / cold:>9.1f}% {cached:>8} {str(same):>12}")
        return 0 if all(r[3] for r in rows) else 1
    finally:
        redis.terminate()
        redis.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
