#!/usr/bin/env python3
"""What many connections cost a server, and whether a normal client still
gets served under them. Python 3.11 standard library only.

  bench/connections.py idle --kvlm build/kvlm --model ../shared/models/stories260K.gguf
        [--server-arg=--max-connections --server-arg=10000] [--idle 5000] [--slowloris 300]
        [--slowloris-interval 1] [--source-addresses 64] [--hold 20] [--json out.json]
  bench/connections.py idle --url http://127.0.0.1:PORT --pid PID      (a running server, e.g. llama-server)
      Takes one reference completion (greedy, 32 tokens), then opens --idle
      connections that send nothing and --slowloris connections that send a
      POST request head one byte every --slowloris-interval seconds, from
      127.0.1.1, 127.0.1.2, ... (--source-addresses of them), reopening each
      one the server closes at once. While they are held, the same
      completion is asked from 127.0.0.1 every 2 s (10 s client timeout):
      latency, status and whether the text is the reference's. Also the
      server's RSS (KiB per idle connection), threads and open descriptors.

  bench/connections.py streams --kvlm build/kvlm --model ../shared/models/stories260K.gguf
        [--workers 3] [--streams 1000] [--max-tokens 32] [--timeout 120]
        [--worker-arg ARG ...] [--router-arg ARG ...] [--json out.json]
      Starts --workers `kvlm serve -t 1 --kv-events` and `kvlm router
      --policy least-load` over them, then starts --streams streaming
      completions through the router at once. Counts every failure by kind;
      reports streamed tokens (the usage chunks), wall time, the router's
      peak RSS (sampled every 100 ms, and VmHWM) and its CPU time, per
      streamed token.

Every process this script starts is stopped when it ends, Ctrl-C and
errors included.
"""
import argparse
import asyncio
import collections
import ctypes
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

REFERENCE_BODY = {"prompt": "Once upon a time", "max_tokens": 32, "temperature": 0}
PROBE_INTERVAL_S = 2.0
PROBE_TIMEOUT_S = 10.0
LISTENING = re.compile(r"listening on (http://[0-9.]+:[0-9]+)")


# ---------------------------------------------------------------- processes

def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def die_with_parent():
    # Runs in the child before exec: SIGKILL it if this script dies, even by SIGKILL.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Children:
    """The processes this script starts; stop_all() ends every one."""

    def __init__(self):
        self.procs = []
        self.log_dir = tempfile.mkdtemp(prefix="kvlm-connections-")

    def start(self, name, argv, timeout_s=120):
        """Starts argv and returns (process, its URL from the 'listening on' line)."""
        log_path = os.path.join(self.log_dir, f"{name}.log")
        with open(log_path, "w") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    start_new_session=True, preexec_fn=die_with_parent)
        self.procs.append(proc)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with open(log_path) as f:
                found = LISTENING.search(f.read())
            if found:
                return proc, found.group(1)
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        with open(log_path) as f:
            tail = f.read()[-2000:]
        raise RuntimeError(f"{' '.join(argv)} printed no listening line (exit {proc.poll()}):\n{tail}")

    def stop_all(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 5
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def proc_status(pid):
    """VmRSS and VmHWM in KiB, Threads, from /proc/PID/status."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                fields[key] = int(value.split()[0])
    return fields


def cpu_seconds(pid):
    """utime + stime of PID, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        after_name = f.read().rsplit(")", 1)[1].split()
    return (int(after_name[11]) + int(after_name[12])) / os.sysconf("SC_CLK_TCK")


def num_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def server_sample(pid):
    try:
        status = proc_status(pid)
        return {"rss_kib": status["VmRSS"], "threads": status["Threads"], "fds": num_fds(pid)}
    except FileNotFoundError as e:
        raise RuntimeError(f"the server (pid {pid}) has exited") from e


# ---------------------------------------------------------------- HTTP over asyncio

class Truncated(Exception):
    """The server closed the connection in the middle of an answer."""


def request_bytes(host, port, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else b""
    head = (f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n")
    return head.encode() + data


async def read_head(reader):
    """(status, headers with lower-case names) of an HTTP/1.1 answer."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        raise Truncated("closed before the answer's head") from e
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return status, headers


async def body_pieces(reader, headers):
    """The answer's body as it arrives: chunked, Content-Length or to EOF."""
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size_line = await reader.readline()
                if not size_line.endswith(b"\n"):
                    raise Truncated("closed inside a chunked body")
                size = int(size_line.split(b";")[0], 16)
                if size == 0:
                    while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                        pass
                    return
                piece = await reader.readexactly(size)
                await reader.readexactly(2)
                yield piece
        elif "content-length" in headers:
            yield await reader.readexactly(int(headers["content-length"]))
        else:
            while piece := await reader.read(65536):
                yield piece
    except asyncio.IncompleteReadError as e:
        raise Truncated("closed inside the body") from e


async def http_request(url, method, path, body=None, source=None):
    """One request on its own connection; returns (status, body bytes)."""
    host, port = url.hostname, url.port
    reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0) if source else None)
    try:
        writer.write(request_bytes(host, port, method, path, body))
        await writer.drain()
        status, headers = await read_head(reader)
        data = b"".join([piece async for piece in body_pieces(reader, headers)])
        return status, data
    finally:
        writer.transport.abort()


async def wait_healthy(url, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            status, _ = await asyncio.wait_for(http_request(url, "GET", "/health"), 5)
            if status == 200:
                return
        except (OSError, asyncio.TimeoutError, Truncated):
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{url.geturl()}/health did not answer 200 within {timeout_s} s")


def completion_text(data):
    return json.loads(data)["choices"][0]["text"]


def describe_error(e):
    if isinstance(e, asyncio.TimeoutError):
        return "timeout"
    if isinstance(e, ConnectionResetError):
        return "connection reset"
    if isinstance(e, Truncated):
        return f"closed early ({e})"
    return f"{type(e).__name__}: {e}"


def summarize(values):
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


# ---------------------------------------------------------------- idle mode

def source_address(i, num_addresses):
    """The i-th hostile connection's source: 127.0.1.1, 127.0.1.2, ... (254 per /24)."""
    k = i % num_addresses
    return f"127.0.{1 + k // 254}.{1 + k % 254}"


def slowloris_head():
    """A POST head that never ends: a header line after another, forever."""
    yield from b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 64\r\n"
    n = 0
    while True:
        yield from f"X-Pad-{n}: {'a' * 8}\r\n".encode()
        n += 1


class HostileLoad:
    """Holds the idle and slowloris connections and counts what the server does to them."""

    def __init__(self, url, num_addresses, slowloris_interval):
        self.url = url
        self.num_addresses = num_addresses
        self.interval = slowloris_interval
        self.num_open = collections.Counter()       # kind -> open now
        self.num_closed = collections.Counter()     # kind -> closed by the server
        self.num_reopened = collections.Counter()   # kind -> opened again after a close
        self.close_reasons = collections.Counter()  # "kind: how" -> count
        self.connect_errors = collections.Counter()  # "kind: error" -> count
        self.tasks = []

    def open(self, kind, count):
        first = len(self.tasks)
        for i in range(first, first + count):
            self.tasks.append(asyncio.create_task(self.hold(kind, source_address(i, self.num_addresses))))

    async def stop(self):
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def hold(self, kind, source):
        reopening = False
        while True:
            try:
                reader, writer = await asyncio.open_connection(self.url.hostname, self.url.port,
                                                               local_addr=(source, 0))
            except OSError as e:
                self.connect_errors[f"{kind}: {e.strerror or type(e).__name__}"] += 1
                await asyncio.sleep(0.1)  # a failed connect is retried, not spun on
                continue
            self.num_open[kind] += 1
            if reopening:
                self.num_reopened[kind] += 1
            try:
                if kind == "idle":
                    how = await self.until_closed(reader)
                else:
                    how = await self.send_slowly(reader, writer)
            finally:
                self.num_open[kind] -= 1
                writer.transport.abort()
            self.num_closed[kind] += 1
            self.close_reasons[f"{kind}: {how}"] += 1
            reopening = True

    @staticmethod
    async def until_closed(reader):
        """Waits until the server ends the connection; says how it did."""
        try:
            data = await reader.read(4096)
        except ConnectionResetError:
            return "reset"
        if not data:
            return "closed"
        status_line = data.split(b"\r\n", 1)[0].decode("latin-1")
        return f"answered '{status_line[:40]}'"

    async def send_slowly(self, reader, writer):
        for byte in slowloris_head():
            writer.write(bytes([byte]))
            try:
                return await asyncio.wait_for(self.until_closed(reader), self.interval)
            except asyncio.TimeoutError:
                continue


def probe_loop(url, body, reference_text, hold_s, results):
    """In its own thread and event loop, so that the hostile load's loop does
    not delay it: the reference request every 2 s for hold_s seconds."""

    async def probe(start):
        t0 = time.monotonic()
        record = {"at_s": round(start, 3)}
        try:
            status, data = await asyncio.wait_for(
                http_request(url, "POST", "/v1/completions", body, source="127.0.0.1"), PROBE_TIMEOUT_S)
            record["status"] = status
            record["matches"] = status == 200 and completion_text(data) == reference_text
        except Exception as e:  # the figure to record, not a reason to stop
            record["status"] = describe_error(e)
            record["matches"] = False
        record["latency_s"] = round(time.monotonic() - t0, 4)
        results.append(record)

    async def run():
        t0 = time.monotonic()
        tasks = []
        for i in range(max(1, int(hold_s / PROBE_INTERVAL_S))):
            await asyncio.sleep(max(0.0, t0 + i * PROBE_INTERVAL_S - time.monotonic()))
            tasks.append(asyncio.create_task(probe(time.monotonic() - t0)))
        await asyncio.gather(*tasks)

    asyncio.run(run())


async def wait_open(load, kind, target, timeout_s):
    """Seconds until `target` connections of `kind` are open at once (None if
    not within timeout_s), and the most seen open."""
    t0 = time.monotonic()
    most = 0
    while time.monotonic() - t0 < timeout_s:
        most = max(most, load.num_open[kind])
        if load.num_open[kind] >= target:
            return round(time.monotonic() - t0, 3), most
        await asyncio.sleep(0.05)
    return None, most


async def run_idle(args, children):
    if args.url:
        url, pid = urllib.parse.urlsplit(args.url), args.pid
    else:
        argv = [args.kvlm, "serve", "-m", args.model, "--port", "0"]
        argv += args.server_arg
        if "-t" not in args.server_arg and "--threads" not in args.server_arg:
            argv += ["-t", "1"]
        proc, listening = children.start("server", argv)
        url, pid = urllib.parse.urlsplit(listening), proc.pid
    await wait_healthy(url)
    body = dict(REFERENCE_BODY, **json.loads(args.extra))
    status, data = await asyncio.wait_for(http_request(url, "POST", "/v1/completions", body), 60)
    if status != 200:
        raise RuntimeError(f"the reference request got {status}: {data[:500]!r}")
    reference_text = completion_text(data)
    out = {"mode": "idle", "url": url.geturl(), "pid": pid, "idle": args.idle, "slowloris": args.slowloris,
           "slowloris_interval_s": args.slowloris_interval, "source_addresses": args.source_addresses,
           "hold_s": args.hold, "reference_text": reference_text, "server": {"before": server_sample(pid)}}

    load = HostileLoad(url, args.source_addresses, args.slowloris_interval)
    t0 = time.monotonic()
    load.open("idle", args.idle)
    out["idle_open_s"], out["idle_most_open"] = await wait_open(load, "idle", args.idle, args.open_timeout)
    out["idle_open_then"] = load.num_open["idle"]
    out["server"]["idle_open"] = server_sample(pid)
    load.open("slowloris", args.slowloris)
    _, out["slowloris_most_open"] = await wait_open(load, "slowloris", args.slowloris, args.open_timeout)
    out["all_open_s"] = round(time.monotonic() - t0, 3) if (
        load.num_open["idle"] + load.num_open["slowloris"] >= args.idle + args.slowloris) else None
    out["open_then"] = dict(load.num_open)
    out["server"]["all_open"] = server_sample(pid)
    # Per idle connection open at the client, and per one the server holds
    # (its new descriptors): a server whose accept queue is full has not
    # accepted every connection the client sees open.
    before, idle = out["server"]["before"], out["server"]["idle_open"]
    num_accepted = idle["fds"] - before["fds"]
    out["kib_per_idle_connection"] = (
        round((idle["rss_kib"] - before["rss_kib"]) / out["idle_open_then"], 3) if out["idle_open_then"] else None)
    out["kib_per_accepted_connection"] = (
        round((idle["rss_kib"] - before["rss_kib"]) / num_accepted, 3) if num_accepted > 0 else None)

    probes = []
    prober = threading.Thread(target=probe_loop, args=(url, body, reference_text, args.hold, probes),
                              daemon=True)
    prober.start()
    samples, open_counts = [], []
    while prober.is_alive():
        samples.append(server_sample(pid))
        open_counts.append(load.num_open["idle"] + load.num_open["slowloris"])
        await asyncio.sleep(1)
    prober.join()
    await load.stop()
    out["under_load"] = {key: max(s[key] for s in samples) for key in ("rss_kib", "threads", "fds")}
    out["open_during_hold"] = {"min": min(open_counts), "max": max(open_counts)}
    out["closed_by_server"] = dict(load.num_closed)
    out["reopened"] = dict(load.num_reopened)
    out["close_reasons"] = dict(load.close_reasons)
    out["connect_errors"] = dict(load.connect_errors)
    probes.sort(key=lambda p: p["at_s"])
    out["probes"] = probes
    out["latency_s"] = summarize([p["latency_s"] for p in probes])
    out["failures"] = sum(1 for p in probes if p["status"] != 200)
    out["mismatches"] = sum(1 for p in probes if p["status"] == 200 and not p["matches"])
    await asyncio.sleep(1)
    try:
        status, data = await asyncio.wait_for(http_request(url, "POST", "/v1/completions", body), 30)
        out["after_load"] = {"status": status, "matches": status == 200 and completion_text(data) == reference_text}
    except Exception as e:  # recorded: a server that does not recover is a result
        out["after_load"] = {"status": describe_error(e), "matches": False}
    out["server"]["after"] = server_sample(pid)
    return out


def print_idle(out):
    s = out["server"]
    print(f"server {out['url']} (pid {out['pid']}); reference text: {out['reference_text']!r}")
    print(f"load: {out['idle']} idle + {out['slowloris']} slowloris (1 byte / {out['slowloris_interval_s']} s) "
          f"from {out['source_addresses']} source addresses, held {out['hold_s']} s")
    if out["idle_open_s"] is None:
        print(f"idle open: never all {out['idle']} at once (most {out['idle_most_open']})")
    elif out["idle"]:
        print(f"idle open: all {out['idle']} in {out['idle_open_s']} s")
    print(f"open when measured: {out['idle_open_then']} idle; then {out['open_then']} "
          f"(all open after {out['all_open_s']} s); during the hold {out['open_during_hold']}")
    print(f"closed by the server: {out['closed_by_server']}, reopened: {out['reopened']}")
    for reason, count in sorted(out["close_reasons"].items()):
        print(f"  {count:8d}  {reason}")
    if out["connect_errors"]:
        print(f"connect errors: {out['connect_errors']}")
    print("server            before  idle open  all open  hold max  after")
    for key in ("rss_kib", "threads", "fds"):
        print(f"  {key:14s} {s['before'][key]:8d} {s['idle_open'][key]:10d} {s['all_open'][key]:9d} "
              f"{out['under_load'][key]:9d} {s['after'][key]:6d}")
    print(f"RSS KiB per idle connection: {out['kib_per_idle_connection']} open at the client, "
          f"{out['kib_per_accepted_connection']} per descriptor the server holds (kernel socket memory not included)")
    for p in out["probes"]:
        print(f"  probe at {p['at_s']:6.2f} s: {p['status']}, {p['latency_s']:.3f} s, matches {p['matches']}")
    lat = out["latency_s"]
    print(f"normal client: {len(out['probes'])} requests, latency min/median/max "
          f"{lat['min']:.3f}/{lat['median']:.3f}/{lat['max']:.3f} s, failures {out['failures']}, "
          f"mismatches {out['mismatches']}; after the load: {out['after_load']}")


# ---------------------------------------------------------------- streams mode

async def one_stream(url, body, record):
    """One streaming completion: its outcome; fills record's tokens (the usage
    chunk's), chunks with text and seconds to the first one (from t0)."""
    host, port = url.hostname, url.port
    reader, writer = await asyncio.open_connection(host, port)
    record["connected_s"] = time.monotonic() - record["t0"]
    try:
        writer.write(request_bytes(host, port, "POST", "/v1/completions", body))
        await writer.drain()
        status, headers = await read_head(reader)
        if status != 200:
            return f"status {status}"
        done = error_event = False
        pending = b""
        async for piece in body_pieces(reader, headers):
            pending += piece
            *lines, pending = pending.split(b"\n")
            for line in lines:
                line = line.strip()
                if line.startswith(b"event:") and b"error" in line:
                    error_event = True
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    continue
                event = json.loads(data)
                if "error" in event:
                    error_event = True
                if any(choice.get("text") for choice in event.get("choices") or []):
                    record["chunks"] += 1
                    record.setdefault("first_text_s", time.monotonic() - record["t0"])
                if event.get("usage"):
                    record["tokens"] = event["usage"]["completion_tokens"]
        if error_event:
            return "error event"
        if not done:
            return "no [DONE]"
        return "ok"
    finally:
        writer.transport.abort()


async def timed_stream(url, body, timeout_s, t0):
    """One stream's record: outcome, tokens, chunks, and its times from t0,
    when every stream was started."""
    record = {"t0": t0, "tokens": 0, "chunks": 0}
    try:
        record["outcome"] = await asyncio.wait_for(one_stream(url, body, record), timeout_s)
    except Exception as e:  # counted by kind: the point of the benchmark
        record["outcome"] = describe_error(e)
    record["end_s"] = time.monotonic() - t0
    return record


def sample_rss(pid, stop, samples):
    while not stop.is_set():
        samples.append(proc_status(pid)["VmRSS"])
        stop.wait(0.1)


async def run_streams(args, children):
    worker_urls = []
    for i in range(args.workers):
        _, listening = children.start(f"worker-{i}", [args.kvlm, "serve", "-m", args.model, "-t", "1", "--port", "0",
                                                      "--kv-events", *args.worker_arg])
        worker_urls.append(listening)
    router, listening = children.start("router", [args.kvlm, "router", "--port", "0", "--workers",
                                                  ",".join(worker_urls), "--policy", "least-load", *args.router_arg])
    url = urllib.parse.urlsplit(listening)
    for worker in worker_urls:
        await wait_healthy(urllib.parse.urlsplit(worker))
    await wait_healthy(url)
    await asyncio.sleep(2)  # a health check of every worker has passed
    body = {"prompt": "Once upon a time", "max_tokens": args.max_tokens, "temperature": 0.8, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}

    rss_before = proc_status(router.pid)["VmRSS"]
    cpu_before = cpu_seconds(router.pid)
    stop, samples = threading.Event(), []
    sampler = threading.Thread(target=sample_rss, args=(router.pid, stop, samples), daemon=True)
    sampler.start()
    t0 = time.monotonic()
    results = await asyncio.gather(*[timed_stream(url, body, args.timeout, t0) for _ in range(args.streams)])
    wall_s = time.monotonic() - t0
    stop.set()
    sampler.join()
    cpu_s = cpu_seconds(router.pid) - cpu_before
    status = proc_status(router.pid)

    outcomes = collections.Counter(r["outcome"] for r in results)
    tokens = sum(r["tokens"] for r in results)
    peak_kib = max(samples)
    out = {"mode": "streams", "workers": worker_urls, "router": listening, "streams": args.streams,
           "max_tokens": args.max_tokens, "outcomes": dict(outcomes), "errors": args.streams - outcomes["ok"],
           "streamed_tokens": tokens, "chunks_with_text": sum(r["chunks"] for r in results),
           "wall_s": round(wall_s, 3), "tokens_per_s": round(tokens / wall_s, 1),
           "connected_s": summarize([round(r["connected_s"], 3) for r in results if "connected_s" in r]),
           "first_text_s": summarize([round(r["first_text_s"], 3) for r in results if "first_text_s" in r]),
           "end_s": summarize([round(r["end_s"], 3) for r in results]),
           "router_rss_kib": {"before": rss_before, "peak_sampled": peak_kib, "vmhwm": status["VmHWM"],
                              "after": status["VmRSS"], "samples": len(samples)},
           "router_threads_after": status["Threads"], "router_cpu_s": round(cpu_s, 3)}
    if tokens:
        out["router_cpu_us_per_token"] = round(cpu_s * 1e6 / tokens, 2)
        out["router_peak_rss_bytes_per_token"] = round(peak_kib * 1024 / tokens, 1)
        out["router_rss_growth_bytes_per_token"] = round((peak_kib - rss_before) * 1024 / tokens, 1)
    return out


def print_streams(out):
    rss = out["router_rss_kib"]
    print(f"router {out['router']} over {len(out['workers'])} workers; {out['streams']} streams "
          f"of {out['max_tokens']} tokens started at once")
    print(f"outcomes: {out['outcomes']} ({out['errors']} errors)")
    print(f"streamed tokens: {out['streamed_tokens']} (chunks with text {out['chunks_with_text']}) in "
          f"{out['wall_s']} s: {out['tokens_per_s']} tokens/s")
    for key in ("connected_s", "first_text_s", "end_s"):
        print(f"  streams' {key} after the start (min/median/max): {out[key]}")
    print(f"router RSS KiB: before {rss['before']}, peak {rss['peak_sampled']} ({rss['samples']} samples), "
          f"VmHWM {rss['vmhwm']}, after {rss['after']}; threads after {out['router_threads_after']}")
    print(f"router CPU: {out['router_cpu_s']} s; per streamed token: "
          f"{out.get('router_cpu_us_per_token')} us CPU, {out.get('router_peak_rss_bytes_per_token')} bytes "
          f"of peak RSS ({out.get('router_rss_growth_bytes_per_token')} of its growth)")


# ---------------------------------------------------------------- main

def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    modes = parser.add_subparsers(dest="mode", required=True)
    idle = modes.add_parser("idle", help="hold idle and slowloris connections; time a normal client")
    streams = modes.add_parser("streams", help="many concurrent streams through kvlm router")
    for p in (idle, streams):
        p.add_argument("--kvlm", default="build/kvlm")
        p.add_argument("--model", default="../shared/models/stories260K.gguf")
        p.add_argument("--json", metavar="FILE", help="write the numbers here as JSON")
    idle.add_argument("--url", help="a running server instead of starting kvlm serve (needs --pid)")
    idle.add_argument("--pid", type=int, help="the running server's process id, for its memory and threads")
    idle.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                      help="one more argument for kvlm serve (repeatable); -t 1 is added unless given")
    idle.add_argument("--idle", type=int, default=5000, help="connections that send nothing")
    idle.add_argument("--slowloris", type=int, default=300, help="connections that send a request head slowly")
    idle.add_argument("--slowloris-interval", type=float, default=1.0, help="seconds between their bytes")
    idle.add_argument("--source-addresses", type=int, default=64, help="loopback addresses 127.0.1.1... to spread over")
    idle.add_argument("--hold", type=float, default=20.0, help="seconds the normal client is timed under the load")
    idle.add_argument("--open-timeout", type=float, default=30.0, help="most seconds to wait for each kind to be open")
    idle.add_argument("--extra", default="{}", help="JSON merged into the normal request, e.g. '{\"cache_prompt\": false}'")
    streams.add_argument("--workers", type=int, default=3)
    streams.add_argument("--streams", type=int, default=1000)
    streams.add_argument("--max-tokens", type=int, default=32)
    streams.add_argument("--timeout", type=float, default=120.0, help="seconds one stream may take")
    streams.add_argument("--worker-arg", action="append", default=[], metavar="ARG", help="one more kvlm serve argument")
    streams.add_argument("--router-arg", action="append", default=[], metavar="ARG", help="one more kvlm router argument")
    args = parser.parse_args()
    if args.mode == "idle" and bool(args.url) != bool(args.pid):
        parser.error("--url and --pid go together")
    return args


def main():
    args = parse_args()
    nofile = raise_nofile()
    # Ctrl-C (even where the shell started us with SIGINT ignored) and SIGTERM
    # both go through asyncio's SIGINT handling: the run is cancelled cleanly.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
    children = Children()
    try:
        if args.mode == "idle":
            if args.idle + args.slowloris + 64 > nofile:
                print(f"warning: RLIMIT_NOFILE is {nofile}, under the connections asked for", file=sys.stderr)
            out = asyncio.run(run_idle(args, children))
            print_idle(out)
        else:
            out = asyncio.run(run_streams(args, children))
            print_streams(out)
    except KeyboardInterrupt:
        print("interrupted: stopping what was started", file=sys.stderr)
        sys.exit(130)
    finally:
        children.stop_all()
    out["logs"] = children.log_dir
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
