#!/usr/bin/env python3
"""What hostile structured-output requests cost a `kvlm serve` process:
for each grammar shape, a fresh server gets 64 concurrent requests of that
shape while /health and ordinary requests are timed; the table gives the
peak RSS over idle (VmHWM, exact, reset before the burst; idle is the RSS
before the shape's first request), the RSS kept over idle 5 s after the
last answer (and how much of it the grammar cache holds, by design), the statuses, the slowest /health, and the time one
request of the shape takes alone (its compile time, the answer being
1 token). With --decode it also measures decode tokens/s (bench model), so
an allocator's effect on speed sits beside its effect on memory.

  bench/grammar_burst.py --model ../shared/models/stories260K.gguf [--kvlm build/kvlm]
      [--shapes anyof1500,anyof1000] [--preload /usr/lib/x86_64-linux-gnu/libjemalloc.so.2]
      [--env MALLOC_ARENA_MAX=2] [--json out.json] [-- extra serve flags]
"""
import argparse
import concurrent.futures as cf
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request


def one_property_objects(n, kind="integer"):
    return [{"type": "object", "properties": {f"f{i}": {"type": kind}}, "required": [f"f{i}"]} for i in range(n)]


def wide_object(i, num_props):
    props = {f"p{i}_{k}": {"type": "string" if k % 2 else "integer"} for k in range(num_props)}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def schema_body(schema):
    return {"prompt": "Once upon a time", "max_tokens": 1, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}


# The hostile shapes (docs/performance.md) and others of their family: each
# is a request body. Bodies differ per request (a salt property) unless
# `same` is set, so a cache cannot serve them: the worst case for memory.
def shapes():
    return {
        "anyof1500": lambda salt: schema_body({"anyOf": one_property_objects(1500) + [salt_schema(salt)]}),
        "anyof1000": lambda salt: schema_body({"anyOf": one_property_objects(1000) + [salt_schema(salt)]}),
        "oneof40x40": lambda salt: schema_body({"oneOf": [wide_object(i, 40) for i in range(40)] + [salt_schema(salt)]}),
        "props300_minmax": lambda salt: schema_body({
            "type": "object", "minProperties": 1, "maxProperties": 299,
            "properties": {f"k{salt}_{i}": {"type": "integer"} for i in range(300)}}),
        "enum20000": lambda salt: schema_body({"enum": [f"value-{salt}-{i}" for i in range(20000)]}),
        "regex_rep": lambda salt: {"prompt": "Once", "max_tokens": 1,
                                   "guided_regex": f"({salt}|[a-z]{{1,40}}){{1,2000}}"},
        "anyof1000_same": lambda salt: schema_body({"anyOf": one_property_objects(1000)}),
    }


def salt_schema(salt):
    return {"type": "object", "properties": {f"salt{salt}": {"type": "null"}}, "required": [f"salt{salt}"]}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(port, path, body=None, timeout=120):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except Exception as e:  # no answer at all
        return -1, str(e).encode()


def proc_status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


class Server:
    def __init__(self, args, extra):
        self.port = free_port()
        env = dict(os.environ)
        for kv in args.env:
            k, v = kv.split("=", 1)
            env[k] = v
        if args.preload:
            env["LD_PRELOAD"] = args.preload
        cmd = [args.kvlm, "serve", "-m", args.model, "-t", str(args.threads), "--port", str(self.port)] + extra
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log, env=env)
        deadline = time.time() + 60
        while http(self.port, "/health", timeout=1)[0] != 200:
            if time.time() > deadline or self.proc.poll() is not None:
                self.log.seek(0)
                raise SystemExit("server did not come up: " + self.log.read().decode()[-2000:])
            time.sleep(0.05)

    def rss(self):
        return proc_status(self.proc.pid, "VmRSS")

    def reset_peak(self):
        with open(f"/proc/{self.proc.pid}/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS

    def peak(self):
        return proc_status(self.proc.pid, "VmHWM")

    def metric(self, name):
        status, body = http(self.port, "/metrics")
        for line in body.decode(errors="replace").splitlines() if status == 200 else []:
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


ORDINARY = {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}


def watch(port, stop, out):
    """Times /health every 50 ms and sends an ordinary request every 200 ms."""
    worst, served, sent, last = 0.0, 0, 0, 0.0
    while not stop.is_set():
        t0 = time.time()
        status, _ = http(port, "/health", timeout=10)
        worst = max(worst, time.time() - t0 if status == 200 else 10.0)
        if time.time() - last > 0.2:
            last = time.time()
            sent += 1
            served += http(port, "/v1/completions", ORDINARY, timeout=30)[0] == 200
        time.sleep(0.05)
    out.update(health_max_s=worst, ordinary_sent=sent, ordinary_served=served)


def run_shape(args, name, make, extra):
    server = Server(args, extra)
    try:
        http(server.port, "/v1/completions", ORDINARY)
        time.sleep(0.5)
        idle = server.rss()
        t0 = time.time()
        alone_status, alone_body = http(server.port, "/v1/completions", make(10**6))
        alone_s = time.time() - t0
        time.sleep(0.5)
        server.reset_peak()
        stop, watched = threading.Event(), {}
        watcher = threading.Thread(target=watch, args=(server.port, stop, watched))
        watcher.start()
        bodies = [make(i) for i in range(args.concurrency)]
        t0 = time.time()
        with cf.ThreadPoolExecutor(args.concurrency) as pool:
            answers = list(pool.map(lambda b: http(server.port, "/v1/completions", b), bodies))
        burst_s = time.time() - t0
        stop.set()
        watcher.join()
        peak = server.peak()
        time.sleep(5)
        kept = server.rss()
        cached = server.metric("kvlm_grammar_memory_bytes")
        statuses = {}
        for status, body in answers:
            statuses[status] = statuses.get(status, 0) + 1
        return dict(shape=name, body_kb=len(json.dumps(bodies[0])) // 1024, idle_mb=idle / 2**20,
                    peak_mb=(peak - idle) / 2**20, kept_mb=(kept - idle) / 2**20, cached_mb=cached / 2**20, alone_s=alone_s,
                    alone_status=alone_status, alone_error=error_message(alone_body), burst_s=burst_s,
                    statuses=statuses, **watched)
    finally:
        server.stop()


def error_message(body):
    try:
        return json.loads(body)["error"]["message"][:90]
    except Exception:
        return ""


def decode_speed(args):
    env = dict(os.environ)
    if args.preload:
        env["LD_PRELOAD"] = args.preload
    out = subprocess.run([args.kvlm, "bench", "model", "-m", args.decode, "-p", "0", "-n", "128", "-t",
                          str(args.threads), "-r", "3", "--json"], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout)["tg"]["tokens_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--kvlm", default="build/kvlm")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--shapes", default="anyof1500,anyof1000,oneof40x40")
    p.add_argument("--preload", default="", help="LD_PRELOAD for the server (an allocator)")
    p.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server (MALLOC_ARENA_MAX=2)")
    p.add_argument("--decode", default="", help="a model for decode tokens/s (bench model -n 128)")
    p.add_argument("--json", default="")
    args, extra = p.parse_known_args()
    extra = [a for a in extra if a != "--"]
    all_shapes = shapes()
    rows = []
    for name in args.shapes.split(","):
        row = run_shape(args, name, all_shapes[name], extra)
        rows.append(row)
        print(f"{name:16} body {row['body_kb']:4d} KiB | alone {row['alone_s'] * 1e3:7.0f} ms "
              f"({row['alone_status']}) | peak +{row['peak_mb']:7.0f} MiB | kept +{row['kept_mb']:6.0f} MiB "
              f"(grammars {row['cached_mb']:4.0f}) | "
              f"burst {row['burst_s']:5.1f} s {row['statuses']} | /health max {row['health_max_s'] * 1e3:5.0f} ms | "
              f"ordinary {row['ordinary_served']}/{row['ordinary_sent']} | {row['alone_error']}", flush=True)
    result = {"rows": rows}
    if args.decode:
        result["decode_tokens_per_s"] = decode_speed(args)
        print(f"decode: {result['decode_tokens_per_s']:.1f} tokens/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
