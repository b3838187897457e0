#!/usr/bin/env python3
"""Alternated `bench serve` rounds against the servers of two kvlm builds.

Each round starts build A's `kvlm serve`, runs one closed-loop `bench serve`
per concurrency against it, stops it, then does the same for build B (the
order flips every round, so neither build always goes first). The client is
build A's `bench serve` both times. Prints each round's figures, then per
build and concurrency the median (min, max) of generated tokens/s and of the
mean TTFT.

  bench/serve_ab.py --a build/kvlm --b /tmp/kvlm-before --model ../shared/models/stories260K.gguf --rounds 6
"""
import argparse
import json
import re
import signal
import statistics
import subprocess
import sys


def start_server(binary, model, threads):
    """A `kvlm serve` on a free port; (process, port)."""
    proc = subprocess.Popen([binary, "serve", "-m", model, "-t", str(threads), "--port", "0", "--no-prefix-cache"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            return proc, int(m.group(1))
    sys.exit(f"serve_ab.py: {binary} serve exited before listening")


def one_run(client, port, concurrency, requests, prompt_len, gen_len):
    out = subprocess.run([client, "bench", "serve", "--url", f"http://127.0.0.1:{port}", "--requests", str(requests),
                          "--concurrency", str(concurrency), "--prompt-len", str(prompt_len), "--gen-len",
                          str(gen_len), "--json"], capture_output=True, text=True, check=True)
    run = json.loads(out.stdout)["runs"][0]
    return run["generated_tokens_per_s"], run["ttft_ms"]["mean"], run["errors"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="kvlm binary A (its bench serve is the client)")
    ap.add_argument("--b", required=True, help="kvlm binary B")
    ap.add_argument("--model", required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--concurrency", default="1,16", help="comma-separated; requests: 16 x concurrency, at least 16")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-len", type=int, default=64)
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    builds = {"A": args.a, "B": args.b}
    results = {(b, c): [] for b in builds for c in levels}
    for r in range(args.rounds):
        for name in (["A", "B"] if r % 2 == 0 else ["B", "A"]):
            proc, port = start_server(builds[name], args.model, args.threads)
            try:
                for c in levels:
                    figures = one_run(args.a, port, c, max(16, 4 * c), args.prompt_len, args.gen_len)
                    results[(name, c)].append(figures)
                    print(f"round {r} {name} c{c}: {figures[0]:.0f} tokens/s, TTFT mean {figures[1]:.2f} ms, "
                          f"errors {figures[2]}", flush=True)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait()
    for (name, c), runs in results.items():
        tps, ttft = [x[0] for x in runs], [x[1] for x in runs]
        print(f"{name} ({builds[name]}) c{c}: tokens/s {statistics.median(tps):.0f} ({min(tps):.0f}-{max(tps):.0f}), "
              f"TTFT mean ms {statistics.median(ttft):.2f} ({min(ttft):.2f}-{max(ttft):.2f}), "
              f"errors {sum(x[2] for x in runs)}")


if __name__ == "__main__":
    main()
