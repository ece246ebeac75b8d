#!/usr/bin/env python3
"""Writes the hostile-frame corpus in tests/hostile/.

Each case is one file holding exactly the bytes a hostile peer sends: the
4-byte big-endian length prefix and the frame body (or a prefix that lies).
tests/hostile/README.txt lists every file with the outcome PROTOCOL.md
requires; tests/e2e/check_hostile.c and tests/e2e/e2e_hostile.c read that list.

The msgpack is written by hand (no msgpack module needed) so that every
header form, lie and edge can be spelled out exactly.

Usage: scripts/gen-hostile.py   (from anywhere; writes relative to the repo)
"""
import os
import struct
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "hostile")
MAX_FRAME = 1 << 20


class Raw:
    """Bytes written as they are: a lie, a reserved byte, a bad form."""

    def __init__(self, b):
        self.b = b


class Bin:
    def __init__(self, b):
        self.b = b


class I64:
    """An integer forced into the int64 (0xd3) form."""

    def __init__(self, v):
        self.v = v


class Pairs:
    """A map as a list of (key, value) pairs: allows duplicate keys."""

    def __init__(self, pairs):
        self.pairs = pairs


def pack(o):
    if isinstance(o, Raw):
        return o.b
    if o is None:
        return b"\xc0"
    if o is True:
        return b"\xc3"
    if o is False:
        return b"\xc2"
    if isinstance(o, I64):
        return b"\xd3" + struct.pack(">q", o.v)
    if isinstance(o, int):
        if 0 <= o <= 0x7F:
            return bytes([o])
        if -32 <= o < 0:
            return struct.pack(">b", o)
        if 0 <= o <= 0xFF:
            return b"\xcc" + bytes([o])
        if 0 <= o <= 0xFFFF:
            return b"\xcd" + struct.pack(">H", o)
        if 0 <= o <= 0xFFFFFFFF:
            return b"\xce" + struct.pack(">I", o)
        if 0 <= o <= 0xFFFFFFFFFFFFFFFF:
            return b"\xcf" + struct.pack(">Q", o)
        return b"\xd3" + struct.pack(">q", o)
    if isinstance(o, float):
        return b"\xcb" + struct.pack(">d", o)
    if isinstance(o, str):
        o = o.encode("utf-8")
        return strhdr(len(o)) + o
    if isinstance(o, bytes):  # a str whose bytes are given (maybe invalid)
        return strhdr(len(o)) + o
    if isinstance(o, Bin):
        n = len(o.b)
        if n <= 0xFF:
            return b"\xc4" + bytes([n]) + o.b
        return b"\xc5" + struct.pack(">H", n) + o.b
    if isinstance(o, list):
        return arrhdr(len(o)) + b"".join(pack(x) for x in o)
    if isinstance(o, dict):
        o = Pairs(list(o.items()))
    if isinstance(o, Pairs):
        return maphdr(len(o.pairs)) + b"".join(
            pack(k) + pack(v) for k, v in o.pairs)
    raise TypeError(type(o))


def strhdr(n):
    if n <= 31:
        return bytes([0xA0 | n])
    if n <= 0xFF:
        return b"\xd9" + bytes([n])
    if n <= 0xFFFF:
        return b"\xda" + struct.pack(">H", n)
    return b"\xdb" + struct.pack(">I", n)


def arrhdr(n):
    if n <= 15:
        return bytes([0x90 | n])
    if n <= 0xFFFF:
        return b"\xdc" + struct.pack(">H", n)
    return b"\xdd" + struct.pack(">I", n)


def maphdr(n):
    if n <= 15:
        return bytes([0x80 | n])
    if n <= 0xFFFF:
        return b"\xde" + struct.pack(">H", n)
    return b"\xdf" + struct.pack(">I", n)


def frame(body):
    return struct.pack(">I", len(body)) + body


COUNTERS = [
    "decode_steps", "graph_launches", "compute_dispatches", "device_fences",
    "host_to_device_bytes", "device_to_host_bytes", "fallback_count",
    "hot_path_allocations", "compile_calls", "immutable_upload_bytes",
    "submitted_prefill_tokens", "committed_prefill_tokens",
    "cached_prefill_tokens", "queued_requests", "admitted_requests",
    "cow_copies", "evictions", "unique_freed_pages", "pool_high_water_bytes",
    "cancellations", "graph_bucket_tokens", "graph_padding_tokens",
    "rebuild_outcomes",
]
LATENCY = ["queue_delay_us", "time_to_first_token_us", "inter_token_latency_us"]
ARTIFACTS = ["temp_created_bytes", "temp_removed_bytes", "temp_retained_bytes",
             "temp_cleanup_failures"]


def receipt(**over):
    """A valid schema-3 receipt as an ordered list of pairs; keyword
    arguments replace top-level fields (dotted names are not used here)."""
    r = [
        ("schema_version", 3),
        ("requested_backend", "cuda"),
        ("executed_backend", "cuda"),
        ("model_instance_id", "model-a"),
        ("prepared_plan_id", "plan-1"),
        ("graph_hash", "g0"),
        ("tuning_profile", ""),
        ("stop_reason", "eos"),
        ("counter_coverage", 0x3FFFFFF),
        ("counters", Pairs([(k, i + 1 if k != "fallback_count" else 0)
                            for i, k in enumerate(COUNTERS)])),
        ("latency", Pairs([(k, 100 + i) for i, k in enumerate(LATENCY)])),
        ("artifacts", Pairs([(k, 0) for k in ARTIFACTS])),
    ]
    out = []
    for k, v in r:
        if k in over:
            v = over.pop(k)
        out.append((k, v))
    assert not over, over
    return Pairs(out)


def with_sub(struct_name, field, value):
    """A valid receipt whose struct_name.field is replaced by value."""
    r = receipt()
    pairs = []
    for k, v in r.pairs:
        if k == struct_name:
            v = Pairs([(fk, value if fk == field else fv)
                       for fk, fv in v.pairs])
        pairs.append((k, v))
    return Pairs(pairs)


def request(op="receipt", rid=1, body=None, seq=None, extra=None):
    pairs = [("op", op), ("id", rid)]
    if seq is not None:
        pairs.append(("seq", seq))
    if body is not None:
        pairs.append(("body", body))
    if extra:
        pairs.extend(extra)
    return pack(Pairs(pairs))


cases = []  # (name, bytes, expect, path, description)


def add(name, data, expect, path, desc):
    cases.append((name, data, expect, path, desc))


def main():
    valid = request(body=receipt(), seq=1)

    # Lengths.
    add("len-zero", struct.pack(">I", 0), "close", "malformed",
        "frame length 0")
    add("len-max-plus-one", struct.pack(">I", MAX_FRAME + 1) + b"\x80" * 64,
        "close", "too_large", "frame length max_frame + 1 (1 MiB + 1)")
    add("len-ffffffff", b"\xff\xff\xff\xff" + b"\x80" * 16, "close",
        "too_large", "frame length 0xFFFFFFFF")
    add("len-ceiling-plus-one", struct.pack(">I", (64 << 20) + 1), "close",
        "too_large", "frame length over the 64 MiB hard ceiling")
    add("len-longer-than-bytes", struct.pack(">I", len(valid) + 100) + valid,
        "wait", "", "length claims 100 bytes more than are ever sent")

    # Lying container headers.
    add("lie-array32", frame(b"\xdd\xff\xff\xff\xff\xc0"), "reply",
        "malformed", "array32 claiming 2^32-1 elements, one present")
    add("lie-map32", frame(b"\xdf\xff\xff\xff\xff\xa2op"), "reply",
        "malformed", "map32 claiming 2^32-1 pairs")
    add("lie-str32", frame(b"\xdb\xff\xff\xff\xffabc"), "reply", "malformed",
        "str32 claiming 4 GiB of bytes, 3 present")
    add("lie-bin32", frame(b"\xc6\xff\xff\xff\xffabc"), "reply", "malformed",
        "bin32 claiming 4 GiB of bytes")
    add("lie-ext32", frame(b"\xc9\xff\xff\xff\xff\x01abc"), "reply",
        "malformed", "ext32 claiming 4 GiB of bytes")
    add("lie-array16-in-body",
        frame(request(body=Raw(b"\xdc\xff\xff\xc0\xc0"))), "reply",
        "malformed", "a valid envelope whose body is an array16 claiming "
        "65535 elements")
    add("lie-map32-in-body",
        frame(request(body=Raw(b"\xdf\x7f\xff\xff\xff"))), "reply",
        "malformed", "a valid envelope whose body is a map32 claiming 2^31 "
        "pairs")
    add("lie-str32-op", frame(b"\x82\xa2op\xdb\x00\x10\x00\x00rec"), "reply",
        "malformed", "op as a str32 claiming 1 MiB")

    # Nesting.
    add("nest-33", frame(b"\x91" * 33 + b"\xc0"), "reply", "malformed",
        "arrays nested 33 deep")
    add("nest-33-in-body", frame(request(op="ping",
                                         body=Raw(b"\x91" * 32 + b"\xc0"))),
        "reply", "malformed", "a body nested so that the frame is 33 deep")
    add("nest-32-in-body", frame(request(op="ping",
                                         body=Raw(b"\x91" * 31 + b"\xc0"))),
        "reply", "ok", "a ping whose frame is exactly 32 deep (the limit; "
        "valid)")
    add("nest-1000", frame(b"\x91" * 1000 + b"\xc0"), "reply", "malformed",
        "arrays nested 1,000 deep")
    add("nest-100000", frame(b"\x91" * 100000 + b"\xc0"), "reply",
        "malformed", "arrays nested 100,000 deep")
    add("nest-maps-1000", frame(b"\x81\xa1k" * 1000 + b"\xc0"), "reply",
        "malformed", "maps nested 1,000 deep")

    # Truncation of a valid receipt request: the length is patched to the
    # bytes kept, so each is one whole frame that is not one whole object.
    for cut in (1, 2, 7, len(valid) // 2, len(valid) - 1):
        add("trunc-%d" % cut, frame(valid[:cut]), "reply", "malformed",
            "a valid receipt request cut to its first %d of %d bytes"
            % (cut, len(valid)))
    add("trunc-header-only", frame(valid)[:3], "wait", "",
        "three bytes of a length prefix, then nothing")
    add("trunc-body", frame(valid)[:len(valid) // 2], "wait", "",
        "a correct length prefix, then half of the body")

    # Envelope.
    add("two-objects", frame(valid + b"\xc0"), "reply", "malformed",
        "a valid request followed by a nil in the same frame")
    add("two-requests", frame(valid + valid), "reply", "malformed",
        "two valid requests in one frame")
    add("reserved-c1", frame(b"\xc1"), "reply", "malformed",
        "the never-used type byte 0xc1")
    add("not-a-map", frame(pack(["receipt", 1])), "reply", "malformed",
        "a request that is an array")
    add("missing-id", frame(pack({"op": "ping"})), "reply", "malformed:id",
        "no id")
    add("missing-op", frame(pack({"id": 1})), "reply", "malformed:op",
        "no op")
    add("id-string", frame(pack({"op": "ping", "id": "1"})), "reply",
        "malformed:id", "id as a string")
    add("id-negative", frame(pack({"op": "ping", "id": -1})), "reply",
        "malformed:id", "id -1")
    add("op-integer", frame(pack({"op": 2, "id": 1})), "reply",
        "malformed:op", "op as an integer")
    add("op-unknown", frame(pack({"op": "fly", "id": 1})), "reply",
        "unknown_op:op", "op \"fly\"")
    add("op-invalid-utf8", frame(pack(Pairs([("op", b"\xff\xfe"),
                                             ("id", 1)]))),
        "reply", "unknown_op:op", "op holding invalid UTF-8")
    add("dup-id", frame(pack(Pairs([("op", "ping"), ("id", 1), ("id", 2)]))),
        "reply", "malformed:id", "the key id twice")
    add("dup-op", frame(pack(Pairs([("op", "ping"), ("op", "receipt"),
                                    ("id", 1)]))),
        "reply", "malformed:op", "the key op twice")
    add("seq-negative", frame(request(op="ping", seq=I64(-5))), "reply",
        "invalid:seq", "seq -5 in int64 form")
    add("id-u64-max", frame(pack({"op": "ping", "id": 2**64 - 1})), "reply",
        "ok", "ping with id 2^64-1 (valid)")

    # Receipt bodies.
    add("valid-receipt", frame(valid), "reply", "ok",
        "a valid schema-3 receipt (control)")
    add("body-missing", frame(request()), "reply", "invalid",
        "op receipt without a body (the path may be empty or \"body\")")
    add("body-string", frame(request(body="receipt")), "reply", "invalid:body",
        "a body that is a string")
    wrong = {
        "schema_version": "3", "requested_backend": 4,
        "executed_backend": ["cuda"], "model_instance_id": 7,
        "prepared_plan_id": None, "graph_hash": 1.5,
        "tuning_profile": False, "stop_reason": {"a": 1},
        "counter_coverage": "all", "counters": "many", "latency": 5,
        "artifacts": [],
    }
    for k, v in wrong.items():
        add("type-%s" % k, frame(request(body=receipt(**{k: v}))), "reply",
            "invalid:%s" % k, "%s of the wrong type" % k)
    for s, names in (("counters", COUNTERS), ("latency", LATENCY),
                     ("artifacts", ARTIFACTS)):
        for k in names:
            add("type-%s.%s" % (s, k),
                frame(request(body=with_sub(s, k, "1"))), "reply",
                "invalid:%s.%s" % (s, k), "%s.%s as a string" % (s, k))

    # Integer edges.
    add("int-u64-max", frame(request(body=with_sub("counters", "evictions",
                                                   2**64 - 1))),
        "reply", "ok", "a counter of 2^64-1 (valid)")
    add("int-negative-int64", frame(request(body=with_sub(
        "counters", "decode_steps", I64(-1)))), "reply",
        "invalid:counters.decode_steps", "a counter of -1 in int64 form")
    add("int-negative-fixint", frame(request(body=with_sub(
        "artifacts", "temp_created_bytes", -1))), "reply",
        "invalid:artifacts.temp_created_bytes", "a negative fixint counter")
    add("int-positive-int64", frame(request(body=with_sub(
        "counters", "decode_steps", I64(5)))), "reply", "ok",
        "a counter of 5 in int64 form (valid)")
    add("schema-u16-overflow", frame(request(body=receipt(
        schema_version=65536))), "reply", "invalid:schema_version",
        "schema_version 65536, not a u16")
    add("schema-u16-max", frame(request(body=receipt(
        schema_version=65535))), "reply", "unsupported_schema:schema_version",
        "schema_version 65535")
    add("schema-zero", frame(request(body=receipt(schema_version=0))),
        "reply", "unsupported_schema:schema_version", "schema_version 0")
    add("schema-four", frame(request(body=receipt(schema_version=4))),
        "reply", "unsupported_schema:schema_version", "schema_version 4")

    # UTF-8 and string limits.
    utf = {
        "invalid": b"\xff\xfe", "overlong": b"\xc0\xaf",
        "overlong-3": b"\xe0\x80\xaf", "surrogate": b"\xed\xa0\x80",
        "above-10ffff": b"\xf4\x90\x80\x80", "cut-multibyte": b"ab\xe2\x82",
    }
    for n, b in utf.items():
        add("utf8-%s" % n, frame(request(body=receipt(model_instance_id=b))),
            "reply", "invalid:model_instance_id",
            "model_instance_id with %s UTF-8" % n)
    add("utf8-bin-valid", frame(request(body=receipt(
        model_instance_id=Bin("modèle".encode())))), "reply", "ok",
        "model_instance_id as a bin holding valid UTF-8 (valid)")
    add("str-model-257", frame(request(body=receipt(
        model_instance_id="m" * 257))), "reply",
        "invalid:model_instance_id", "model_instance_id of 257 bytes")
    add("str-tuning-4097", frame(request(body=receipt(
        tuning_profile="t" * 4097))), "reply", "invalid:tuning_profile",
        "tuning_profile of 4097 bytes")

    # Duplicate keys inside the receipt.
    r = receipt()
    add("dup-receipt-key", frame(request(body=Pairs(
        r.pairs + [("stop_reason", "eos")]))), "reply", "invalid:stop_reason",
        "stop_reason twice")
    r = receipt()
    add("dup-unknown-key", frame(request(body=Pairs(
        r.pairs + [("flavour", 1), ("flavour", 2)]))), "reply",
        "invalid:flavour", "the same unknown key twice")

    # Amplification: one msgpack object per byte costs the unpacker about
    # 24 bytes each.
    n = MAX_FRAME - 64
    add("wide-nil-array", frame(request(op="ping", body=Raw(
        b"\xdd" + struct.pack(">I", n) + b"\xc0" * n))), "reply", "ok",
        "a ping whose body is an array of ~1 M nils (a whole max_frame)")

    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.endswith(".bin"):
            os.unlink(os.path.join(OUT, f))
    lines = [
        "Hostile frames for receiptd (generated by scripts/gen-hostile.py;",
        "edit the script, not the files). Each file is what a peer sends,",
        "length prefix included. Expected outcome, per PROTOCOL.md:",
        "  close CODE   an error reply with CODE, then the connection closes",
        "  reply CODE:PATH   an error reply with CODE and field path PATH,",
        "               the connection stays open; reply ok = a success reply",
        "  wait         the frame never completes: no reply; the daemon",
        "               closes the connection at EOF or frame_timeout",
        "",
        "file expect code description",
    ]
    for i, (name, data, expect, code, desc) in enumerate(cases):
        fn = "%03d-%s.bin" % (i + 1, name)
        with open(os.path.join(OUT, fn), "wb") as f:
            f.write(data)
        lines.append("%s %s %s %s" % (fn, expect, code or "-", desc))
    with open(os.path.join(OUT, "README.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("%d hostile frames written" % len(cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
