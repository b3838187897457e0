#!/usr/bin/env python3
"""An independent reader of kvlm serve's KV events over ZMQ (pyzmq and the
msgpack package, pinned in requirements.txt), for kv_events_zmq_test.cpp.

It subscribes (connecting to the server's PUB socket, or with --bind-sub
binding the SUB socket the server connects to), sends each prompt of
--prompts (a JSON list of {"prompt"[, "cache_salt"]}) as a completion of
one token, tokenizes it with POST /tokenize,
reads every message until the stream is quiet, asks the replay socket
(--replay) for everything from seq 0, and prints what it saw as JSON:

  {"frames": [{"num_parts", "topic", "seq_len", "seq", "raw", "payload"}],
   "replay": [{"seq", "raw", "payload"}], "replay_ended": bool,
   "tokens": [[id, ...] per prompt]}

"raw" is the payload's hex; "payload" the decoded MessagePack, a bin value
written as {"bin": hex} (hashes must be integers: the test checks). It
checks nothing itself.
"""
import argparse
import json
import sys
import time
import urllib.request

import msgpack
import zmq

QUIET_S = 1.0


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def jsonable(v):
    if isinstance(v, bytes):
        return {"bin": v.hex()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    return v


def decode(payload):
    return jsonable(msgpack.unpackb(payload, raw=False, strict_map_key=False))


def drain(sub, frames, quiet_s):
    """Reads messages until none comes for quiet_s seconds."""
    while sub.poll(int(quiet_s * 1000)):
        parts = sub.recv_multipart()
        frame = {"num_parts": len(parts), "topic": parts[0].decode("utf-8", "replace")}
        if len(parts) == 3:
            frame.update(seq_len=len(parts[1]), seq=int.from_bytes(parts[1], "big"), raw=parts[2].hex(),
                         payload=decode(parts[2]))
        frames.append(frame)


def replay(ctx, endpoint):
    """vLLM's replay protocol: [empty, start seq] in, [empty, seq, payload]
    per kept message out, then [empty, -1, empty]."""
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(endpoint)
    dealer.send_multipart([b"", (0).to_bytes(8, "big")])
    got, ended = [], False
    while dealer.poll(5000):
        parts = dealer.recv_multipart()
        seq = int.from_bytes(parts[1], "big", signed=True)
        if seq == -1:
            ended = parts[2] == b""
            break
        got.append({"seq": seq, "raw": parts[2].hex(), "payload": decode(parts[2])})
    dealer.close(0)
    return got, ended


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--sub", required=True)
    ap.add_argument("--bind-sub", action="store_true")
    ap.add_argument("--replay")
    ap.add_argument("--prompts", required=True)
    args = ap.parse_args()
    prompts = json.load(open(args.prompts, encoding="utf-8"))

    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    if args.bind_sub:
        sub.bind(args.sub)
    else:
        sub.connect(args.sub)
    time.sleep(1.0)  # the subscription reaches the publisher (and a connecting publisher retries every 0.1 s)

    out = {"frames": [], "tokens": []}
    for p in prompts:  # {"prompt": text[, "cache_salt": salt]}
        post(args.server + "/v1/completions", dict(p, max_tokens=1))
        out["tokens"].append(post(args.server + "/tokenize", {"content": p["prompt"]})["tokens"])
        drain(sub, out["frames"], 0.05)
    drain(sub, out["frames"], QUIET_S)
    if args.replay:
        out["replay"], out["replay_ended"] = replay(ctx, args.replay)
    sub.close(0)
    ctx.term()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
