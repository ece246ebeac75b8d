#!/usr/bin/env python3
"""Tests of receiptd_producer against the real daemon (CTest: producer_python).

    test_producer.py RECEIPTD_BINARY VECTORS_DIR

Encodes the shared vectors (tests/data/vectors, written by the real Rust
producer) and compares the bytes; then starts receiptd on a temporary
socket and database and streams receipts through the module, including a
SIGKILL and restart of the daemon in the middle of the stream, after which
every receipt is stored exactly once. Exits 77 (SKIP) when python3-msgpack
is not installed.
"""

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

try:
    import msgpack  # noqa: F401
except ImportError:
    print("SKIP: python3-msgpack is not installed (scripts/install-deps.sh installs it)",
          file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import receiptd_producer as rp  # noqa: E402

DAEMON = None
VECTORS = None


class Daemon:
    """The real receiptd on a socket and database in a temporary directory."""

    def __init__(self, extra=()):
        self.extra = list(extra)
        self.dir = tempfile.mkdtemp(prefix="rp-")
        self.sock = os.path.join(self.dir, "receiptd.sock")
        self.db = os.path.join(self.dir, "receiptd.db")
        self.log = open(os.path.join(self.dir, "receiptd.log"), "ab")
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen([DAEMON, "--socket", self.sock, "--db", self.db]
                                     + self.extra,
                                     stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("receiptd exited %d; log in %s" % (self.proc.returncode,
                                                                    self.log.name))
            with socket.socket(socket.AF_UNIX) as s:
                try:
                    s.connect(self.sock)
                    return
                except OSError:
                    pass
            time.sleep(0.02)
        raise RuntimeError("receiptd did not listen within 20 s")

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self):
        self.stop()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def receipt(i, schema=3):
    """A valid receipt of the given schema, map form, declaration order."""
    r = {
        "schema_version": schema,
        "requested_backend": "cuda",
        "executed_backend": "cpu" if i % 7 == 0 else "cuda",
        "model_instance_id": "model-%d" % (i % 3),
        "prepared_plan_id": "plan-%d" % (i % 5),
        "graph_hash": "g%d" % (i % 2),
        "tuning_profile": "",
        "stop_reason": "eos",
        "counter_coverage": (1 << 26) - 1 if schema == 3 else (1 << 10) - 1,
        "counters": {},
        "latency": {f: i for f in rp.LATENCY},
        "artifacts": {f: 0 for f in rp.ARTIFACTS},
    }
    for f in rp.COUNTERS_V3 if schema == 3 else rp.COUNTERS_V2:
        r["counters"][f] = i
    r["counters"]["fallback_count"] = 1 if i % 7 == 0 else 0
    if schema != 3:
        del r["latency"]
    return r


def all_receipts(p, source):
    """Every stored receipt row of a source, paging with before_id."""
    rows, before = [], None
    while True:
        f = {"source": source, "limit": 10000}
        if before is not None:
            f["before_id"] = before
        res = p.query("receipts", **f)
        rows += res["rows"]
        if not res["truncated"]:
            return rows
        before = res["rows"][-1]["receipt_id"]


class Vectors(unittest.TestCase):
    """The module encodes receipts byte for byte as rmp-serde does."""

    def test_vectors_encode_as_the_rust_producer(self):
        with open(os.path.join(VECTORS, "index.json")) as f:
            index = json.load(f)
        n = 0
        for v in index["vectors"]:
            with open(os.path.join(VECTORS, v["files"]["json"])) as f:
                # serde_json writes fields in declaration order; json keeps it.
                r = json.load(f)
            with open(os.path.join(VECTORS, v["files"]["named_msgpack"]), "rb") as f:
                named = f.read()
            with open(os.path.join(VECTORS, v["files"]["compact_msgpack"]), "rb") as f:
                compact = f.read()
            self.assertEqual(rp.encode_receipt(r), named, v["name"] + " named")
            if v["compact_form"] == "array":
                self.assertEqual(rp.encode_receipt(r, compact=True), compact,
                                 v["name"] + " compact")
            n += 1
        self.assertEqual(n, index["count"])

    def test_array_form_names_a_missing_field(self):
        r = receipt(1)
        del r["counters"]["evictions"]
        with self.assertRaisesRegex(ValueError, r"^counters\.evictions: missing"):
            rp.receipt_to_array(r)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OverTcp(unittest.TestCase):
    """TCP with a token: hello authenticates, a wrong token is final."""

    TOKEN = "producer-token"

    def setUp(self):
        self.port = free_port()
        fd, self.conf = tempfile.mkstemp(suffix=".conf")
        with os.fdopen(fd, "w") as f:
            f.write('access: {\n    tokens = ( { name = "py"; sha256 = "%s"; } );\n};\n'
                    % hashlib.sha256(self.TOKEN.encode()).hexdigest())
        self.d = Daemon(["--config", self.conf, "--tcp", "127.0.0.1:%d" % self.port,
                         "--tcp-plaintext", "true"])

    def tearDown(self):
        self.d.close()
        os.unlink(self.conf)

    def test_a_token_opens_tcp_and_a_wrong_one_is_refused(self):
        addr = "127.0.0.1:%d" % self.port
        with rp.Producer(tcp=addr, token=self.TOKEN, source="py/tcp") as p:
            p.send(receipt(3))
            self.assertTrue(p.flush()[0].ok)
            self.assertEqual(all_receipts(p, "py/tcp")[0]["source"], "py/tcp")
        with self.assertRaises(rp.RemoteError) as cm:
            rp.Producer(tcp=addr, token="not-it", source="py/tcp", retry_for=1)
        self.assertEqual(cm.exception.code, "unauthorized")


class OverTls(unittest.TestCase):
    """TLS over TCP with certificates openssl makes here: a good session,
    an unknown CA and a plain-text port are told apart."""

    TOKEN = "producer-token"

    def setUp(self):
        if shutil.which("openssl") is None:
            self.skipTest("openssl is not installed")
        self.dir = tempfile.mkdtemp()
        ossl = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:P-256", "-nodes", "-days", "1"]
        for name, cn, ext in (("ca", "py test CA", None),
                              ("self", "127.0.0.1", "subjectAltName=IP:127.0.0.1")):
            args = ossl + ["-keyout", os.path.join(self.dir, name + ".key"),
                           "-out", os.path.join(self.dir, name + ".pem"), "-subj", "/CN=" + cn]
            if ext:
                args += ["-addext", ext]
            subprocess.run(args, check=True, capture_output=True)
        self.conf = os.path.join(self.dir, "d.conf")
        with open(self.conf, "w") as f:
            f.write('access: {\n    tokens = ( { name = "py"; sha256 = "%s"; } );\n};\n'
                    % hashlib.sha256(self.TOKEN.encode()).hexdigest())
        self.d = None

    def start(self, tls):
        self.port = free_port()
        extra = ["--config", self.conf, "--tcp", "127.0.0.1:%d" % self.port]
        if tls:
            extra += ["--tls-cert", os.path.join(self.dir, "self.pem"),
                      "--tls-key", os.path.join(self.dir, "self.key")]
        else:
            extra += ["--tcp-plaintext", "true"]
        self.d = Daemon(extra)
        return "127.0.0.1:%d" % self.port

    def tearDown(self):
        if self.d is not None:
            self.d.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def test_a_receipt_over_tls(self):
        addr = self.start(True)
        with rp.Producer(tcp=addr, token=self.TOKEN, source="py/tls", tls=True,
                         ca_file=os.path.join(self.dir, "self.pem")) as p:
            for _ in range(50):
                p.send(receipt(3))
            self.assertTrue(all(o.ok for o in p.flush()))
            self.assertEqual(len(all_receipts(p, "py/tls")), 50)

    def test_an_unknown_ca_is_final(self):
        addr = self.start(True)
        with self.assertRaises(rp.TLSError) as cm:
            rp.Producer(tcp=addr, token=self.TOKEN, source="py/tls", tls=True,
                        ca_file=os.path.join(self.dir, "ca.pem"))
        self.assertIn("not signed by a trusted CA", str(cm.exception))

    def test_a_plain_text_port_is_named(self):
        addr = self.start(False)
        with self.assertRaises(rp.TLSError) as cm:
            rp.Producer(tcp=addr, token=self.TOKEN, source="py/tls", tls=True,
                        ca_file=os.path.join(self.dir, "self.pem"))
        self.assertIn("did not answer with TLS", str(cm.exception))


class AgainstTheDaemon(unittest.TestCase):

    def setUp(self):
        self.d = Daemon()

    def tearDown(self):
        self.d.close()

    def test_one_receipt_in_one_row_out(self):
        with rp.Producer(self.d.sock, source="py/one", first_seq=10) as p:
            self.assertEqual(p.send(receipt(7)), 10)
            out = p.flush()
            self.assertEqual(len(out), 1)
            self.assertTrue(out[0].ok, out[0].error)
            self.assertEqual(out[0].seq, 10)
            self.assertEqual(out[0].result["fallback"], "fallback")
            rows = all_receipts(p, "py/one")
        self.assertEqual(len(rows), 1)
        self.assertEqual(rows[0]["seq"], 10)
        self.assertEqual(rows[0]["counters"]["decode_steps"], 7)
        self.assertEqual(rows[0]["executed_backend"], "cpu")

    def test_compact_form_and_batches(self):
        with rp.Producer(self.d.sock, source="py/batch", compact=True) as p:
            p.send_batch([receipt(i, schema=2) for i in range(50)])
            p.send(receipt(99))
            out = p.flush()
            self.assertEqual([o.ok for o in out], [True, True])
            self.assertEqual(out[0].result["accepted"], 50)
            self.assertEqual(len(all_receipts(p, "py/batch")), 51)

    def test_a_refused_receipt_names_its_field_and_is_not_resent(self):
        bad = receipt(1)
        bad["counters"]["decode_steps"] = "many"
        with rp.Producer(self.d.sock, source="py/bad") as p:
            p.send(bad)
            p.send(receipt(2))
            out = p.flush()
            self.assertFalse(out[0].ok)
            self.assertEqual(out[0].error["code"], "invalid")
            self.assertEqual(out[0].error["path"], "counters.decode_steps")
            self.assertTrue(out[1].ok)
            self.assertEqual(p.resent, 0)
            self.assertEqual(p.query("quarantine")["rows"][0]["path"], "counters.decode_steps")

    def test_a_resent_seq_is_a_duplicate(self):
        with rp.Producer(self.d.sock, source="py/dup", first_seq=5) as p:
            p.send(receipt(1))
            p.flush()
        with rp.Producer(self.d.sock, source="py/dup", first_seq=5) as p:
            p.send(receipt(1))
            out = p.flush()
            self.assertTrue(out[0].ok)
            self.assertTrue(out[0].result.get("duplicate"))
            self.assertEqual(len(all_receipts(p, "py/dup")), 1)

    def test_kill_9_mid_stream_loses_nothing_and_stores_nothing_twice(self):
        total = 3000
        source = "py/killed"
        outcomes, killed = [], []
        restarter = None
        with rp.Producer(self.d.sock, source=source, first_seq=1, window=128,
                         retry_for=60) as p:
            for i in range(total):
                p.send(receipt(i))
                # Kill once a third is acknowledged and many writes are in
                # flight (or, on a daemon that keeps up, at two thirds).
                due = p.pending >= 32 or (i >= 2 * total // 3 and p.pending > 0)
                if not killed and p.acked >= total // 3 and due:
                    # Writes are in flight: some committed and unanswered,
                    # some not committed at all. Restart after a pause, so
                    # the producer also meets a refused connection.
                    killed.append(p.pending)
                    self.d.kill()
                    restarter = threading.Timer(0.3, self.d.start)
                    restarter.start()
                outcomes += p.poll()
            outcomes += p.flush()
            restarter.join()
            self.assertGreater(killed[0], 0, "nothing was in flight at the kill")
            self.assertGreaterEqual(p.reconnects, 1)
            self.assertGreater(p.resent, 0)
            rows = all_receipts(p, source)
            gaps = p.query("gaps", source=source)["rows"]
            dups = p.query("stats")["rows"][0].get("duplicates")
            print("\nkilled with %d in flight; %d reconnects, %d resent, %s duplicates"
                  % (killed[0], p.reconnects, p.resent, dups), file=sys.stderr)
        self.assertEqual(len(outcomes), total)
        self.assertTrue(all(o.ok for o in outcomes), [o for o in outcomes if not o.ok][:3])
        self.assertEqual(sorted(o.seq for o in outcomes), list(range(1, total + 1)))
        seqs = sorted(r["seq"] for r in rows)
        self.assertEqual(seqs, list(range(1, total + 1)), "stored once each")
        self.assertEqual(gaps[0]["missing"], [])
        for r in rows:
            self.assertEqual(r["counters"]["decode_steps"], r["seq"] - 1)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: test_producer.py RECEIPTD_BINARY VECTORS_DIR")
    DAEMON, VECTORS = sys.argv[1], sys.argv[2]
    del sys.argv[1:3]
    unittest.main(verbosity=2)
