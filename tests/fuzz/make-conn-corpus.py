#!/usr/bin/env python3
"""Writes the generated seeds of fuzz_conn (tests/fuzz/corpus/conn/gen-*).

Each seed is one connection: a mode byte, then the bytes the peer sends.
The mode byte m picks the peer, m % 3 (0: a Unix peer that may write, 1: a
read-only Unix peer, 2: a TCP peer that must say hello with the token
"fuzz-token"), and the feeding, m // 3 % 3 (0: whole, 1: one byte at a time,
2: chunks sized by the input), m // 3 % 3, whether the loop runs
between pieces, m // 9 % 2, and the timed mode, m // 18 % 2, whose six
bytes after the mode byte set short timeouts, sleeps between pieces, a
client that reads nothing, and how the stream ends (write_timed below);
see fuzz_conn.c. The seed-* files beside
these are the seeds of the harness before it drove conn.c, with mode byte 0
put in front; they are not regenerated here.

Receipts come from tests/data/vectors, plans, retention specs and readbacks
from tests/data/plans. Uses the standard library only (a small msgpack
encoder below). Run it when those change:
    tests/fuzz/make-conn-corpus.py
"""
import glob
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
OUT = os.path.join(HERE, "corpus", "conn")

UNIX, READ, TCP = 0, 1, 2
WHOLE, BYTES, CHUNKS = 0, 1, 2
TOKEN = "fuzz-token"


class Raw(bytes):
    """Bytes that are already msgpack, embedded as they are."""


def pack(o):
    if isinstance(o, Raw):
        return bytes(o)
    if o is None:
        return b"\xc0"
    if o is True:
        return b"\xc3"
    if o is False:
        return b"\xc2"
    if isinstance(o, int):
        if 0 <= o < 0x80:
            return bytes([o])
        if 0 <= o < 1 << 8:
            return b"\xcc" + struct.pack(">B", o)
        if 0 <= o < 1 << 16:
            return b"\xcd" + struct.pack(">H", o)
        if 0 <= o < 1 << 32:
            return b"\xce" + struct.pack(">I", o)
        if 0 <= o < 1 << 64:
            return b"\xcf" + struct.pack(">Q", o)
        if -32 <= o < 0:
            return struct.pack(">b", o)
        return b"\xd3" + struct.pack(">q", o)
    if isinstance(o, str):
        b = o.encode()
        if len(b) < 32:
            return bytes([0xA0 | len(b)]) + b
        if len(b) < 1 << 8:
            return b"\xd9" + bytes([len(b)]) + b
        return b"\xda" + struct.pack(">H", len(b)) + b
    if isinstance(o, bytes):
        return b"\xc4" + bytes([len(o)]) + o
    if isinstance(o, list):
        n = len(o)
        h = bytes([0x90 | n]) if n < 16 else b"\xdc" + struct.pack(">H", n)
        return h + b"".join(pack(x) for x in o)
    if isinstance(o, dict):
        n = len(o)
        h = bytes([0x80 | n]) if n < 16 else b"\xde" + struct.pack(">H", n)
        return h + b"".join(pack(k) + pack(v) for k, v in o.items())
    raise TypeError(type(o))


def frame(payload):
    return struct.pack(">I", len(payload)) + payload


def req(op, id=None, seq=None, body=None):
    m = {"op": op}
    if id is not None:
        m["id"] = id
    if seq is not None:
        m["seq"] = seq
    if body is not None:
        m["body"] = body
    return frame(pack(m))


def data(path):
    with open(os.path.join(DATA, path), "rb") as f:
        return Raw(f.read())


def vectors(form):
    paths = sorted(glob.glob(os.path.join(DATA, "vectors", "*.%s.msgpack" % form)))
    return [(os.path.basename(p).split(".")[0], data(p)) for p in paths]


def hello(id, token=None, source="fuzz"):
    body = {"protocol": 1, "source": source}
    if token is not None:
        body["token"] = token
    return req("hello", id, body=body)


def write(name, mode, feeding, stream, interleave=0):
    with open(os.path.join(OUT, "gen-" + name), "wb") as f:
        f.write(bytes([mode + 3 * feeding + 9 * interleave]) + stream)


# How a timed seed ends (fuzz_conn.c's enum ending).
END_SHUTDOWN, END_WAIT, END_DRAIN, END_DRAIN_SHUTDOWN = 0, 1, 2, 3


def write_timed(name, mode, feeding, stream, frame_ms=16, hello_ms=16,
                idle_ms=16, sleep_ms=0, sleep_every=1, deaf=0,
                end=END_SHUTDOWN, grace_ms=0, drain_after=0, interleave=0):
    """A seed of the timed mode: timeouts 1..16 ms, sleeps 0..3 ms after
    every 1st..4th piece, grace 0..15 ms, drain after piece 0..255 (0: at
    the end)."""
    params = bytes([frame_ms - 1, hello_ms - 1, idle_ms - 1,
                    sleep_ms + 4 * (sleep_every - 1) + 16 * deaf,
                    end + 4 * grace_ms, drain_after])
    with open(os.path.join(OUT, "gen-timed-" + name), "wb") as f:
        f.write(bytes([mode + 3 * feeding + 9 * interleave + 18]) + params +
                stream)


def main():
    os.makedirs(OUT, exist_ok=True)
    for p in glob.glob(os.path.join(OUT, "gen-*")):
        os.remove(p)
    compact = vectors("compact")
    named = vectors("named")
    plan = data("plans/fixture.msgpack")
    retention = data("plans/retention.msgpack")
    readback = data("plans/readback.msgpack")

    # Hello on each kind of peer, then a ping and a receipt.
    one = req("ping", 2) + req("receipt", 3, seq=1, body=compact[0][1])
    write("unix-hello", UNIX, WHOLE, hello(1) + one)
    write("unix-hello-bytes", UNIX, BYTES, hello(1) + one)
    write("read-hello", READ, WHOLE, hello(1) + one + req("query", 4,
          body={"kind": "stats"}))
    write("tcp-hello-token", TCP, WHOLE, hello(1, TOKEN) + one)
    write("tcp-hello-token-chunks", TCP, CHUNKS, hello(1, TOKEN) + one)
    write("tcp-hello-token-interleaved", TCP, BYTES, hello(1, TOKEN) + one,
          interleave=1)
    # Refused: no token, a wrong one (the connection ends after the reply
    # and the frames after it are never dispatched), nothing before hello.
    write("tcp-hello-no-token", TCP, WHOLE, hello(1) + one)
    write("tcp-hello-bad-token", TCP, WHOLE, hello(1, "guess") + one)
    write("tcp-before-hello", TCP, WHOLE,
          req("ping", 1) + req("query", 2, body={"kind": "stats"}) +
          hello(3, TOKEN) + req("ping", 4))
    write("tcp-hello-bad-protocol", TCP, WHOLE,
          req("hello", 1, body={"protocol": 2, "token": TOKEN}) +
          hello(2, TOKEN) + req("ping", 3))

    # Every receipt vector, both forms, with seqs; then a resend of the
    # first few (duplicates answered from dedupe).
    s = hello(1, source="vectors")
    for i, (_, v) in enumerate(compact + named):
        s += req("receipt", 10 + i, seq=i + 1, body=v)
    for i, (_, v) in enumerate(compact[:3]):
        s += req("receipt", 100 + i, seq=i + 1, body=v)
    write("receipts-each", UNIX, WHOLE, s)
    write("receipts-each-chunks", UNIX, CHUNKS, s)
    write("receipts-each-interleaved", UNIX, CHUNKS, s, interleave=1)
    # Batches: valid, one bad item, not an array, over max_batch (64).
    s = hello(1, source="batch")
    s += req("receipts", 2, seq=1, body=[v for _, v in compact[:4]])
    s += req("receipts", 3, seq=2, body=[compact[5][1], {"schema_version": 4}])
    s += req("receipts", 4, body={"not": "an array"})
    s += req("receipts", 5, body=list(range(65)))
    s += req("receipts", 6, seq=1, body=[v for _, v in compact[:4]])
    s += req("receipt", 7)
    write("receipts-batch", UNIX, WHOLE, s)

    # A plan, a retention spec against it and a readback; then every query.
    s = hello(1, source="planner")
    s += req("plan", 2, body=plan)
    s += req("plan", 3, body=plan)
    s += req("retention", 4, body=retention)
    s += req("readback", 5, body=readback)
    s += req("query", 6, body={"kind": "plans"})
    s += req("query", 7, body={"kind": "retained",
                               "plan": "plan:fixture/1"})
    write("plan-retention-readback", UNIX, WHOLE, s)
    write("plan-retention-readback-bytes", UNIX, BYTES, s)
    write("plan-retention-readback-interleaved", UNIX, BYTES, s, interleave=1)
    write("plan-read-only", READ, WHOLE, s)

    queries = [
        {"kind": "receipts", "limit": 5},
        {"kind": "receipts", "before_id": 3, "source": "vectors"},
        {"kind": "fallbacks"},
        {"kind": "fallbacks", "group_by": "none", "limit": 2},
        {"kind": "fallbacks", "group_by": "backends"},
        {"kind": "coverage", "group_by": "model"},
        {"kind": "gaps"},
        {"kind": "quarantine"},
        {"kind": "quarantine", "id": 1, "raw": True},
        {"kind": "stats"},
        {"kind": "plans", "since": 0, "until": 1 << 62},
        {"kind": "retained", "plan": "plan:fixture/1"},
        {"kind": "prunes"},
        {"kind": "nope"},
        {"limit": 3},
    ]
    for q in queries:
        name = "query-%s" % q.get("kind", "nokind")
        if len(q) > 1:
            name += "-" + "-".join(k for k in q if k != "kind")
        s = req("receipt", 1, seq=1, body=compact[1][1])
        s += req("receipt", 2, body={"schema_version": 9})
        write(name, UNIX, WHOLE, s + req("query", 3, body=q))
    write("query-read-only", READ, WHOLE,
          b"".join(req("query", i, body=q) for i, q in enumerate(queries)))

    # Pipelined bursts past the limits: unsent replies (1 KiB), queries in
    # flight (4 a connection), queued write bytes (4 KiB).
    pings = b"".join(req("ping", i) for i in range(300))
    write("burst-pings", UNIX, WHOLE, pings)
    write("burst-pings-chunks", UNIX, CHUNKS, pings)
    write("burst-pings-interleaved", UNIX, BYTES, pings, interleave=1)
    queries12 = b"".join(req("query", i, body={"kind": "stats"})
                         for i in range(12))
    write("burst-queries", READ, WHOLE, queries12)
    writes = b"".join(req("receipt", i, seq=1000 + i, body=compact[i % 8][1])
                      for i in range(40))
    write("burst-receipts", UNIX, WHOLE, writes)
    write("burst-receipts-interleaved", UNIX, CHUNKS, writes, interleave=1)
    write("burst-mixed-chunks", UNIX, CHUNKS,
          b"".join(req("ping", 1000 + i) + req("receipt", i, body=v) +
                   req("query", 2000 + i, body={"kind": "receipts", "limit": 1})
                   for i, (_, v) in enumerate(compact * 2)))

    # Framing errors mid-stream: the frames before are answered, then the
    # error, and nothing after it is dispatched.
    head = hello(1) + req("ping", 2) + req("receipt", 3, body=compact[2][1])
    tail = req("ping", 4) + req("ping", 5)
    write("framing-zero-mid", UNIX, WHOLE, head + b"\0\0\0\0" + tail)
    write("framing-too-large-mid", UNIX, BYTES,
          head + struct.pack(">I", 4097) + tail)
    write("framing-too-large-tcp", TCP, WHOLE,
          hello(1, TOKEN) + struct.pack(">I", 1 << 31) + tail)
    write("truncated-end", UNIX, WHOLE, head + req("ping", 4)[:7])
    # Requests that are not requests: no id, a string id, a bad seq, an
    # unknown op, not a map; each is answered and the stream goes on.
    s = frame(pack({"op": "ping"}))
    s += frame(pack({"op": "ping", "id": "x"}))
    s += req("receipt", 3, seq="x", body=compact[0][1])
    s += req("fly", 4)
    s += frame(pack([1, 2, 3]))
    s += frame(b"\xc1")
    s += req("ping", 7)
    write("bad-requests", UNIX, WHOLE, s)
    write("bad-requests-tcp", TCP, WHOLE, s)

    # The timed mode: each deadline of conn.c's timer and the drain.
    # A frame begun and never finished: cut off by the frame deadline,
    # answered malformed, whether the stream stays open or the deadline
    # passes during a sleep between two bytes of a frame.
    head = hello(1) + req("ping", 2)
    write_timed("frame-wait", UNIX, WHOLE, head + req("ping", 3)[:6],
                frame_ms=2, end=END_WAIT)
    write_timed("frame-sleep-bytes", UNIX, BYTES, head + req("ping", 3),
                frame_ms=1, sleep_ms=3, sleep_every=4)
    # A TCP peer that never says hello, silent or talking.
    write_timed("hello-wait", TCP, WHOLE, req("ping", 1), hello_ms=1,
                end=END_WAIT)
    write_timed("hello-sleep-chunks", TCP, CHUNKS,
                b"".join(req("ping", i) for i in range(20)), hello_ms=2,
                sleep_ms=3)
    # Idle: everything answered, the stream left open.
    write_timed("idle-wait", UNIX, WHOLE, head, idle_ms=1, end=END_WAIT)
    write_timed("idle-sleep-interleaved", READ, CHUNKS, head + head,
                idle_ms=1, sleep_ms=2, sleep_every=2, interleave=1)
    # A peer that reads none of its replies: the socket fills, writes wait,
    # and the idle deadline counts from the last write progress; with the
    # stream open, half-closed, or after a framing error. 300 pings are all
    # dispatched, a little past the point where a socketpair with Linux's
    # default buffers fills (about 280 small writes), so the EOF or the
    # framing error comes while writes wait: conn.c used to stop its timer
    # there, and the connection was held for good.
    pings = b"".join(req("ping", i) for i in range(1000))
    write_timed("deaf-wait", UNIX, WHOLE, pings, idle_ms=2, deaf=1,
                end=END_WAIT)
    pings = b"".join(req("ping", i) for i in range(300))
    write_timed("deaf-shutdown", UNIX, WHOLE, pings, deaf=1)
    write_timed("deaf-framing-error", UNIX, WHOLE, pings + b"\0\0\0\0",
                deaf=1, end=END_WAIT)
    # The drain of SIGTERM: at the end, with or without the peer's EOF;
    # mid-stream, with writes at the writer; with a grace that runs out on
    # a peer that reads nothing.
    writes = b"".join(req("receipt", i, seq=2000 + i, body=compact[i % 8][1])
                      for i in range(24))
    write_timed("drain-end", UNIX, WHOLE, head + writes, end=END_DRAIN,
                grace_ms=15)
    write_timed("drain-end-shutdown", UNIX, CHUNKS, head + writes,
                end=END_DRAIN_SHUTDOWN, grace_ms=5)
    write_timed("drain-mid-chunks", UNIX, CHUNKS, head + writes,
                end=END_DRAIN, drain_after=12, interleave=1)
    write_timed("drain-grace-deaf", UNIX, WHOLE, pings, idle_ms=16, deaf=1,
                end=END_DRAIN, grace_ms=1)
    write_timed("drain-tcp-before-hello", TCP, BYTES,
                req("ping", 1) + hello(2, TOKEN) + req("ping", 3),
                end=END_DRAIN_SHUTDOWN, drain_after=40, grace_ms=3)
    print(len(glob.glob(os.path.join(OUT, "gen-*"))), "seeds in", OUT)


if __name__ == "__main__":
    main()
