#!/usr/bin/env python3
"""A chaos run of kvlm serve with a disk and a Redis KV tier.

Clients send greedy completions of a few long prompts without pause while
the run, over and over: SIGKILLs the server and restarts it, SIGSTOPs Redis
for a while, SIGKILLs Redis and restarts it empty, and fills the disk
tier's filesystem (a small tmpfs, as root) and frees it again. Everything
is on loopback ports chosen free. At the end it prints, and exits 1 unless
the promises held:

  requests sent, answered, failed (each failure must be a request in flight
  on a killed server, or one sent while it was down: the server answers
  every request it has, whatever its tiers do), outputs wrong (answers that
  differ from a cold run: must be 0), blocks leaked (KV blocks still held
  once the last server is idle: must be 0), and records bad on disk after
  the run (`kvlm kv verify`: must be 0).

usage: scripts/chaos.py --kvlm build/kvlm --model M.gguf [--seconds 60]
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, seconds):
    end = time.time() + seconds
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return True
        except OSError:
            time.sleep(0.02)
    return False


def post(port, path, body, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", "/metrics")
        return c.getresponse().read().decode()
    finally:
        c.close()


def sample(text, name):
    m = re.search(r"^" + re.escape(name) + r"(?:\{[^}]*\})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else -1.0


class Redis:
    def __init__(self, workdir):
        self.port = free_port()
        self.dir = workdir
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, 10)

    def kill(self):
        if self.proc:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
            self.proc = None


class Server:
    def __init__(self, args, workdir):
        self.args = args
        self.port = free_port()
        self.log = open(os.path.join(workdir, "server.log"), "ab")
        self.proc = None
        self.up = threading.Event()

    def start(self):
        self.proc = subprocess.Popen(self.args + ["--port", str(self.port)], stdout=self.log, stderr=self.log)
        if not wait_port(self.port, 60):
            raise RuntimeError("kvlm serve did not start; see server.log")
        self.up.set()

    def kill(self):
        self.up.clear()
        self.proc.kill()
        self.proc.wait()


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.sent = self.answered = self.failed = self.wrong = 0
        self.failures = {}

    def add(self, field, reason=None):
        with self.lock:
            setattr(self, field, getattr(self, field) + 1)
            if reason:
                self.failures[reason] = self.failures.get(reason, 0) + 1


def client(server, prompts, want, tally, stop, seed):
    rng = random.Random(seed)
    while not stop.is_set():
        if not server.up.wait(0.5):
            continue  # the server is down: nothing is sent to a dead port
        i = rng.randrange(len(prompts))
        tally.add("sent")
        try:
            status, body = post(server.port, "/v1/completions",
                                {"prompt": prompts[i], "max_tokens": 8, "temperature": 0, "ignore_eos": True})
        except (OSError, http.client.HTTPException) as e:
            tally.add("failed", type(e).__name__)
            continue
        if status != 200:
            tally.add("failed", "HTTP %d" % status)
            continue
        tally.add("answered")
        if json.loads(body)["choices"][0]["text"] != want[i]:
            tally.add("wrong")


def fill_disk(path, seconds):
    filler = os.path.join(path, "filler")
    try:
        with open(filler, "wb") as f:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
    except OSError:
        pass  # ENOSPC: full
    time.sleep(seconds)
    os.unlink(filler)


def chaos(server, redis, disk, rng, seconds, log):
    end = time.time() + seconds
    counts = {}
    while time.time() < end:
        time.sleep(rng.uniform(0.3, 1.5))
        action = rng.choice(["kill-server", "stop-redis", "kill-redis", "fill-disk"])
        if action == "fill-disk" and disk is None:
            action = "kill-server"
        counts[action] = counts.get(action, 0) + 1
        log(action)
        if action == "kill-server":
            server.kill()
            time.sleep(rng.uniform(0, 0.3))
            server.start()
        elif action == "stop-redis":
            redis.proc.send_signal(signal.SIGSTOP)
            time.sleep(rng.uniform(0.5, 2.5))
            redis.proc.send_signal(signal.SIGCONT)
        elif action == "kill-redis":
            redis.kill()
            time.sleep(rng.uniform(0, 1))
            redis.start()
        else:
            fill_disk(disk, rng.uniform(0.5, 2))
    return counts


def mount_tmpfs(path, size):
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + size, "tmpfs", path],
                          stderr=subprocess.DEVNULL).returncode == 0


def cold_answers(kvlm, model, prompts, workdir):
    cold = Server([kvlm, "serve", "-m", model, "-t", "1", "--no-prefix-cache"], workdir)
    cold.start()
    try:
        return [json.loads(post(cold.port, "/v1/completions",
                                {"prompt": p, "max_tokens": 8, "temperature": 0, "ignore_eos": True})[1])
                ["choices"][0]["text"] for p in prompts]
    finally:
        cold.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvlm", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True, help="text the prompts are cut from")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--disk-size", default="16m", help="size of the disk tier's tmpfs")
    ap.add_argument("serve_args", nargs="*", help="more kvlm serve flags (after --)")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    text = open(a.text).read()
    prompts = [text[i * 800:i * 800 + 900] for i in range(12)]
    workdir = tempfile.mkdtemp(prefix="kvlm-chaos-")
    disk = os.path.join(workdir, "disk")
    os.mkdir(disk)
    mounted = mount_tmpfs(disk, a.disk_size)
    redis = Redis(workdir)
    server = None
    started = time.time()
    log = lambda what: print("chaos %6.1f s: %s" % (time.time() - started, what), flush=True)
    try:
        want = cold_answers(a.kvlm, a.model, prompts, workdir)
        redis.start()
        server = Server([a.kvlm, "serve", "-m", a.model, "-t", "1", "--kv-disk", disk, "--kv-redis",
                         "redis://127.0.0.1:%d" % redis.port] + a.serve_args, workdir)
        server.start()
        tally, stop = Tally(), threading.Event()
        threads = [threading.Thread(target=client, args=(server, prompts, want, tally, stop, a.seed * 100 + c))
                   for c in range(a.clients)]
        for t in threads:
            t.start()
        counts = chaos(server, redis, disk if mounted else None, rng, a.seconds, log)
        stop.set()
        for t in threads:
            t.join()
        # Idle now: every request's blocks must be back in the pool.
        text_metrics = ""
        for _ in range(100):
            text_metrics = metrics(server.port)
            if sample(text_metrics, "kvlm_requests_running") == 0 and sample(text_metrics, "kvlm_kv_blocks_used") == 0:
                break
            time.sleep(0.05)
        leaked = sample(text_metrics, "kvlm_kv_blocks_used")
        server.kill()
        verify = subprocess.run([a.kvlm, "kv", "verify", "--kv-disk", disk], capture_output=True, text=True)
        bad = re.search(r"(\d+) bad", verify.stdout)
        bad = int(bad.group(1)) if bad else -1
    finally:
        if server and server.proc and server.proc.poll() is None:
            server.kill()
        redis.kill()
        if mounted:
            subprocess.run(["umount", "-l", disk])
        shutil.rmtree(workdir, ignore_errors=True)
    print("chaos run: %.0f s, %s; disk tier on %s" % (a.seconds, ", ".join(
        "%s x%d" % kv for kv in sorted(counts.items())), "a %s tmpfs" % a.disk_size if mounted else
        "the test's filesystem (no tmpfs: not root, so the disk was never filled)"))
    print("requests sent %d, answered %d, failed %d (%s), outputs wrong %d, blocks leaked %d, disk records bad %d"
          % (tally.sent, tally.answered, tally.failed, ", ".join("%s %d" % kv for kv in sorted(tally.failures.items()))
             or "none", tally.wrong, leaked, bad))
    kills = counts.get("kill-server", 0)
    # A failure is a request in flight on a killed server: at most one per
    # client per kill (a client sends one request at a time).
    ok = tally.wrong == 0 and leaked == 0 and bad == 0 and tally.failed <= kills * a.clients and tally.answered > 0
    print("chaos: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
