#!/usr/bin/env python3
"""Alternated A/B runs of two kvlm builds (or one build under two environments).

This machine's memory and cores change speed within seconds, so a speed-up is
only believable from runs that take turns: A, B, B, A, A, B, ... Each run is one
`kvlm ... --json` command; the JSON field named by --field is its figure.

  bench/ab.py --a build/kvlm --b /tmp/kvlm-before --rounds 5 \\
      --field tg.tokens_per_s -- bench model -m M -p 0 -n 128 -t 2 --json
  bench/ab.py --a build/kvlm --b-env KVLM_CPU_PATH=avx2 --field itl_ms.mean \\
      -- bench batch -m M --requests 8 --concurrency 8 --prompt-len 8 --gen-len 64 -t 2 --json

Prints each round's two figures, then each side's median, min and max and the
median of the per-round ratios B / A. Exits 1 if a run fails or lacks the field.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def field_of(doc, path):
    """The value at a dotted path (tg.tokens_per_s) of a JSON document."""
    for key in path.split("."):
        if not isinstance(doc, dict) or key not in doc:
            raise KeyError(path)
        doc = doc[key]
    return float(doc)


def env_with(assignments):
    env = dict(os.environ)
    for a in assignments:
        key, sep, value = a.partition("=")
        if not sep:
            sys.exit(f"ab.py: --a-env/--b-env takes KEY=VALUE, got {a!r}")
        env[key] = value
    return env


def run_once(binary, env, args, field):
    proc = subprocess.run([binary] + args, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"ab.py: {binary} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    try:
        return field_of(json.loads(proc.stdout), field)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        sys.exit(f"ab.py: no number at {field!r} in {binary}'s output ({e})")


def summary(name, values):
    return (f"{name}: median {statistics.median(values):.4g}, "
            f"min {min(values):.4g}, max {max(values):.4g} ({len(values)} runs)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", default="build/kvlm", help="kvlm binary A (default build/kvlm)")
    p.add_argument("--b", help="kvlm binary B (default: A)")
    p.add_argument("--a-env", action="append", default=[], help="KEY=VALUE set for A's runs (repeatable)")
    p.add_argument("--b-env", action="append", default=[], help="KEY=VALUE set for B's runs (repeatable)")
    p.add_argument("--rounds", type=int, default=3, help="A-then-B rounds (default 3)")
    p.add_argument("--field", required=True, help="dotted JSON path of the figure, e.g. tg.tokens_per_s")
    p.add_argument("args", nargs=argparse.REMAINDER, help="-- then kvlm's arguments (with --json)")
    o = p.parse_args()
    args = o.args[1:] if o.args[:1] == ["--"] else o.args
    if not args:
        p.error("give kvlm's arguments after --")
    b = o.b or o.a
    if b == o.a and not o.a_env and not o.b_env:
        p.error("A and B are the same: give --b or an environment")
    env_a, env_b = env_with(o.a_env), env_with(o.b_env)
    a_vals, b_vals = [], []
    for r in range(o.rounds):
        # Who goes first alternates too: the second run of a pair was ~2%
        # faster in an A/A test (the same binary on both sides) here.
        if r % 2 == 0:
            a_vals.append(run_once(o.a, env_a, args, o.field))
            b_vals.append(run_once(b, env_b, args, o.field))
        else:
            b_vals.append(run_once(b, env_b, args, o.field))
            a_vals.append(run_once(o.a, env_a, args, o.field))
        print(f"round {r + 1}: A {a_vals[-1]:.4g}  B {b_vals[-1]:.4g}  B/A {b_vals[-1] / a_vals[-1]:.3f}", flush=True)
    print(summary("A", a_vals))
    print(summary("B", b_vals))
    ratios = [y / x for x, y in zip(a_vals, b_vals)]
    print(f"B/A: median {statistics.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f}")


if __name__ == "__main__":
    main()
