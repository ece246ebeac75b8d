"""receiptd_producer: send execution receipts to receiptd, exactly once.

A producer connects to the daemon's Unix socket (or TCP), says hello with
its source, and pipelines writes: every receipt gets the next ``seq`` and
stays in memory until the daemon's ``ok`` reply says it is committed. When
the connection drops (the daemon restarted, was killed, the network
failed) the producer reconnects, says hello again and resends every write
that was not answered, with the same ``seq``: the daemon stores each
``(source, seq)`` once and answers a resend of a committed write with its
first outcome and ``"duplicate": True``. So nothing acknowledged is lost
and nothing is stored twice.

    import receiptd_producer as rp

    with rp.Producer(source="node-17/runtime-3", first_seq=next_seq) as p:
        p.send(receipt)          # a dict in the map form of ExecutionReceipt
        for outcome in p.flush():
            if not outcome.ok:
                print(outcome.seq, outcome.error)

The seq counter must only grow for a source, across restarts of the
producer too: persist ``p.next_seq`` (or start above the ``last_seq`` of
the ``gaps`` query for your source). The wire contract is the project's
docs/protocol.md; this module needs only python3-msgpack.

Over TCP, ``tls=True`` speaks TLS (the stdlib ssl module): the daemon's
certificate must verify against ``ca_file`` (or the system's CAs) and name
the host or address connected to; ``cert`` and ``key`` answer a daemon
that asks for a client certificate. A certificate that does not verify is
final (TLSError), not retried.

Single-threaded: a Producer is used by one thread at a time.
"""

import collections
import errno
import os
import select
import socket
import ssl
import struct
import time

import msgpack

__all__ = [
    "Producer",
    "Outcome",
    "ProducerError",
    "RemoteError",
    "TLSError",
    "receipt_to_array",
    "encode_receipt",
    "RECEIPT_FIELDS",
    "COUNTERS_V2",
    "COUNTERS_V3",
    "LATENCY",
    "ARTIFACTS",
    "BACKENDS",
]

PROTOCOL = 1
DEFAULT_SOCKET = "/run/receiptd/receiptd.sock"

# The fields of the runtimes' ExecutionReceipt in declaration order (the
# order rmp-serde writes them, and the positions of its array form).
# Schema 1 has no tuning_profile, schema 3 adds latency.
RECEIPT_FIELDS = (
    "schema_version",
    "requested_backend",
    "executed_backend",
    "model_instance_id",
    "prepared_plan_id",
    "graph_hash",
    "tuning_profile",
    "stop_reason",
    "counter_coverage",
    "counters",
    "latency",
    "artifacts",
)
COUNTERS_V2 = (
    "decode_steps",
    "graph_launches",
    "compute_dispatches",
    "device_fences",
    "host_to_device_bytes",
    "device_to_host_bytes",
    "fallback_count",
    "hot_path_allocations",
    "compile_calls",
    "immutable_upload_bytes",
)
COUNTERS_V3 = COUNTERS_V2 + (
    "submitted_prefill_tokens",
    "committed_prefill_tokens",
    "cached_prefill_tokens",
    "queued_requests",
    "admitted_requests",
    "cow_copies",
    "evictions",
    "unique_freed_pages",
    "pool_high_water_bytes",
    "cancellations",
    "graph_bucket_tokens",
    "graph_padding_tokens",
    "rebuild_outcomes",
)
LATENCY = ("queue_delay_us", "time_to_first_token_us", "inter_token_latency_us")
ARTIFACTS = (
    "temp_created_bytes",
    "temp_removed_bytes",
    "temp_retained_bytes",
    "temp_cleanup_failures",
)
BACKENDS = ("cpu", "wgpu-dx12", "wgpu-vulkan", "wgpu-metal", "cuda", "metal", "unknown")

# Error codes after which the same write is sent again later (PROTOCOL
# section 8); every other error is the write's final outcome.
RETRY_CODES = ("overloaded", "unavailable")


class ProducerError(Exception):
    """The daemon could not be reached (within retry_for seconds), refused
    the hello, or broke the protocol."""


class TLSError(ProducerError):
    """TLS with the daemon failed in a way a retry does not mend: its
    certificate is not signed by a trusted CA, does not name the host, has
    expired, or the daemon did not answer with TLS."""


class RemoteError(ProducerError):
    """An error reply to a request the producer cannot go on without
    (hello, a query): .code, .path, .message as the daemon sent them."""

    def __init__(self, error):
        self.code = error.get("code", "")
        self.path = error.get("path", "")
        self.message = error.get("message", "")
        where = " at " + self.path if self.path else ""
        super().__init__("%s%s: %s" % (self.code, where, self.message))


# The final outcome of one write: seq, ok, and the daemon's result (a
# dict, with "duplicate": True for a resend of a committed write) or
# error (a dict with code, path and message).
Outcome = collections.namedtuple("Outcome", "seq op ok result error")


def _missing(path):
    return ValueError("%s: missing" % path)


def receipt_to_array(receipt):
    """The array form (rmp-serde's to_vec) of a receipt given in its map
    form: fields in declaration order, the layout chosen by
    schema_version. A missing field raises ValueError naming it."""
    if not isinstance(receipt, dict):
        raise ValueError("receipt: expected a map, got %s" % type(receipt).__name__)
    if "schema_version" not in receipt:
        raise _missing("schema_version")
    schema = receipt["schema_version"]
    if schema not in (1, 2, 3):
        raise ValueError("schema_version: %r is not 1, 2 or 3" % (schema,))
    out = []
    for name in RECEIPT_FIELDS:
        if name == "tuning_profile" and schema == 1:
            continue
        if name == "latency" and schema != 3:
            continue
        if name not in receipt:
            raise _missing(name)
        value = receipt[name]
        inner = {"counters": COUNTERS_V3 if schema == 3 else COUNTERS_V2,
                 "latency": LATENCY, "artifacts": ARTIFACTS}.get(name)
        if inner is not None:
            if not isinstance(value, dict):
                raise ValueError("%s: expected a map" % name)
            for f in inner:
                if f not in value:
                    raise _missing("%s.%s" % (name, f))
            value = [value[f] for f in inner]
        out.append(value)
    return out


def encode_receipt(receipt, compact=False):
    """A receipt's msgpack bytes: the map form as given (rmp-serde's
    to_vec_named when the dict is in declaration order), or with
    compact=True the array form (to_vec)."""
    if compact:
        receipt = receipt_to_array(receipt)
    return msgpack.packb(receipt, use_bin_type=True)


def _parse_tcp(addr):
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError("tcp: expected HOST:PORT, got %r" % (addr,))
    return host.strip("[]"), int(port)


class _Request:
    __slots__ = ("op", "seq", "body", "id", "not_before")

    def __init__(self, op, seq, body):
        self.op = op
        self.seq = seq
        self.body = body  # encoded msgpack bytes of the body, or None
        self.id = None
        self.not_before = 0.0


class Producer:
    """A connection to receiptd that delivers writes exactly once.

    socket: the Unix socket (default $RECEIPTD_SOCKET, then
      /run/receiptd/receiptd.sock); tcp: "HOST:PORT" instead, with token.
    tls: speak TLS over tcp, verifying the daemon against ca_file (PEM; the
      system's CAs when None); cert, key: a client certificate (PEM).
    source: this producer's name, the key of idempotency.
    first_seq: the seq of the first write (must be above every seq this
      source ever sent).
    window: writes in flight before send() waits for replies.
    compact: encode dict receipts in the array form (to_vec) instead of
      the map form (to_vec_named).
    retry_for: seconds to keep reconnecting after the connection is lost
      before ProducerError is raised; timeout: seconds a connected daemon
      may take to answer the oldest request before the connection is
      treated as lost.
    """

    def __init__(self, socket=None, tcp=None, *, source, token=None, first_seq=1,
                 window=256, compact=False, retry_for=30.0, timeout=30.0,
                 tls=False, ca_file=None, cert=None, key=None):
        if not isinstance(source, str) or not source:
            raise ValueError("source: expected a non-empty string")
        if not isinstance(first_seq, int) or first_seq < 0:
            raise ValueError("first_seq: expected an unsigned integer")
        if window < 1:
            raise ValueError("window: expected at least 1")
        self._tls = None
        if tls and tcp is None:
            raise ValueError("tls: goes with tcp")
        if tls:
            self._tls = ssl.create_default_context(cafile=ca_file)
            self._tls.minimum_version = ssl.TLSVersion.TLSv1_2
            if cert is not None:
                self._tls.load_cert_chain(cert, key)
        if tcp is not None:
            self._addr = (_inet_family(tcp), _parse_tcp(tcp))
        else:
            path = socket or os.environ.get("RECEIPTD_SOCKET") or DEFAULT_SOCKET
            self._addr = (_AF_UNIX, path)
        self.source = source
        self.token = token
        self.next_seq = first_seq
        self.window = window
        self.compact = compact
        self.retry_for = retry_for
        self.timeout = timeout
        self.max_frame = 1 << 20
        self.max_batch = 10000
        self.server = None
        # Figures for the curious and for tests.
        self.reconnects = 0
        self.resent = 0
        self.acked = 0
        self._sock = None
        self._next_id = 1
        self._inflight = collections.deque()  # sent, awaiting a reply, in order
        self._queue = collections.deque()  # not sent yet (or to resend)
        self._out = bytearray()
        self._in = bytearray()
        self._done = []  # outcomes not yet returned by poll/flush
        self._query_results = {}
        self._connect()

    # -- the public calls ------------------------------------------------

    def send(self, receipt):
        """Queues one receipt (a map-form dict, or bytes already encoded
        as msgpack) as a `receipt` write with the next seq, sends what it
        can, and returns the seq. Waits for replies while `window` writes
        are in flight."""
        return self._write("receipt", self._encode(receipt))

    def send_batch(self, receipts):
        """Queues a list of receipts as one `receipts` write (one seq for
        the batch; its result says how many were accepted and which
        were rejected). Returns the seq."""
        if len(receipts) > self.max_batch:
            raise ValueError("receipts: batch of %d is over the daemon's max_batch %d"
                             % (len(receipts), self.max_batch))
        items = [self._encode(r) for r in receipts]
        body = _array_header(len(items)) + b"".join(items)
        return self._write("receipts", body)

    def poll(self, timeout=0.0):
        """Sends and reads what the connection allows within timeout
        seconds, and returns the outcomes that arrived since the last
        call (a list of Outcome, in seq order)."""
        self._pump(time.monotonic() + timeout)
        return self._take()

    def flush(self, timeout=None):
        """Waits until every write has its final outcome, reconnecting and
        resending as needed, and returns the outcomes not yet returned.
        Raises ProducerError if the daemon stays unreachable for retry_for
        seconds, TimeoutError if timeout seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._inflight or self._queue:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("flush: %d writes still unanswered" % self.pending)
            step = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
            self._pump(time.monotonic() + step)
        return self._take()

    def query(self, kind, **filters):
        """Runs one query (docs/protocol.md, Queries) and returns its
        result dict; an error reply raises RemoteError. Writes already
        queued go first: replies come in request order."""
        body = dict(filters)
        body["kind"] = kind
        req = _Request("query", None, msgpack.packb(body, use_bin_type=True))
        self._queue.append(req)
        while True:
            if req in self._query_results:
                ok, value = self._query_results.pop(req)
                if not ok:
                    raise RemoteError(value)
                return value
            self._pump(time.monotonic() + 0.5)

    @property
    def pending(self):
        """Writes (and queries) without a final outcome yet."""
        return len(self._inflight) + len(self._queue)

    def close(self):
        """Closes the connection. Unanswered writes are dropped: call
        flush() first to keep them."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                self.flush()
        finally:
            self.close()

    # -- inside ------------------------------------------------------------

    def _encode(self, receipt):
        if isinstance(receipt, (bytes, bytearray)):
            return bytes(receipt)
        return encode_receipt(receipt, compact=self.compact)

    def _write(self, op, body):
        if len(body) + 64 > self.max_frame:
            raise ValueError("body: %d bytes, over the daemon's max_frame %d"
                             % (len(body), self.max_frame))
        seq = self.next_seq
        self.next_seq += 1
        self._queue.append(_Request(op, seq, body))
        while len(self._inflight) + len(self._queue) > self.window:
            self._pump(time.monotonic() + 0.5)
        self._pump(time.monotonic())
        return seq

    def _take(self):
        done, self._done = self._done, []
        return done

    def _frame(self, req):
        req.id = self._next_id
        self._next_id += 1
        # The envelope is written by hand so that the body's bytes, encoded
        # once, are sent as they are (and again, unchanged, on a resend).
        keys = 2 + (req.seq is not None) + (req.body is not None)
        parts = [_map_header(keys)]
        parts.append(msgpack.packb("op") + msgpack.packb(req.op))
        parts.append(msgpack.packb("id") + msgpack.packb(req.id))
        if req.seq is not None:
            parts.append(msgpack.packb("seq") + msgpack.packb(req.seq))
        if req.body is not None:
            parts.append(msgpack.packb("body") + req.body)
        payload = b"".join(parts)
        return struct.pack(">I", len(payload)) + payload

    def _connect(self):
        """Connects and says hello, retrying for retry_for seconds. On
        return the connection is up and every unanswered request is
        queued again, oldest first."""
        lost = time.monotonic()
        delay = 0.02
        while True:
            try:
                self._open()
                return
            except (OSError, ProducerError) as e:
                self.close()
                if isinstance(e, (RemoteError, TLSError)):
                    raise
                if time.monotonic() - lost >= self.retry_for:
                    raise ProducerError("cannot reach receiptd at %s for %.0f s: %s"
                                        % (self._addr[1], self.retry_for, e)) from e
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def _open(self):
        family, addr = self._addr
        if family == _AF_UNIX:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        else:
            s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(addr)
            if self._tls is not None:
                s = _start_tls(self._tls, s, addr)
        except OSError:
            s.close()
            raise
        self._sock = s
        self._in = bytearray()
        self._out = bytearray()
        body = {"protocol": PROTOCOL, "source": self.source}
        if self.token is not None:
            body["token"] = self.token
        hello = _Request("hello", None, msgpack.packb(body, use_bin_type=True))
        s.sendall(self._frame(hello))
        reply = self._read_reply_blocking()
        if reply.get("id") != hello.id:
            raise ProducerError("hello: the reply carries id %r" % (reply.get("id"),))
        if not reply.get("ok"):
            raise RemoteError(reply.get("error") or {})
        result = reply.get("result") or {}
        self.max_frame = result.get("max_frame", self.max_frame)
        self.max_batch = result.get("max_batch", self.max_batch)
        self.server = result.get("server")
        s.setblocking(False)
        # Resend what the lost connection left unanswered, oldest first.
        if self._inflight:
            self.resent += sum(1 for r in self._inflight if r.seq is not None)
            self._queue.extendleft(reversed(self._inflight))
            self._inflight.clear()

    def _read_reply_blocking(self):
        while True:
            reply = self._next_reply()
            if reply is not None:
                return reply
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ProducerError("the daemon closed the connection during hello")
            self._in += chunk

    def _next_reply(self):
        if len(self._in) < 4:
            return None
        (n,) = struct.unpack(">I", self._in[:4])
        if n == 0 or n > (64 << 20):
            raise ProducerError("reply frame of %d bytes" % n)
        if len(self._in) < 4 + n:
            return None
        frame = bytes(self._in[4:4 + n])
        del self._in[:4 + n]
        reply = msgpack.unpackb(frame, raw=False, strict_map_key=False)
        if not isinstance(reply, dict):
            raise ProducerError("a reply that is not a map")
        return reply

    def _lost(self):
        self.close()
        self.reconnects += 1
        self._connect()

    def _pump(self, deadline):
        """Moves bytes both ways until deadline (at least one pass)."""
        while True:
            try:
                self._pump_once(deadline)
            except (OSError, ProducerError) as e:
                if isinstance(e, RemoteError) or not _is_connection_error(e):
                    raise
                self._lost()
                continue
            if time.monotonic() >= deadline:
                return
            if not self._inflight and not self._queue and not self._out:
                return

    def _pump_once(self, deadline):
        if self._sock is None:
            raise ProducerError("not connected")
        now = time.monotonic()
        # Frame what the window allows; a write to retry later waits.
        while self._queue and len(self._inflight) < self.window:
            req = self._queue[0]
            if req.not_before > now:
                break
            self._queue.popleft()
            self._out += self._frame(req)
            self._inflight.append(req)
        wait = max(0.0, deadline - now)
        if self._queue and self._queue[0].not_before > now:
            wait = min(wait, self._queue[0].not_before - now)
        if self._inflight and not self._out:
            # A connected daemon that answers nothing for `timeout` is lost.
            wait = min(wait, self.timeout)
        # TLS may hold decrypted bytes that select() cannot see.
        held = self._tls is not None and self._sock.pending() > 0
        r, w, _ = select.select([self._sock], [self._sock] if self._out else [], [],
                                0 if held else wait)
        r = r or held
        if w:
            try:
                n = self._sock.send(self._out)
                del self._out[:n]
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                pass
        if r:
            try:
                chunk = self._sock.recv(1 << 20)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                chunk = None
            if chunk == b"":
                raise ProducerError("the daemon closed the connection")
            if chunk:
                self._in += chunk
                while True:
                    reply = self._next_reply()
                    if reply is None:
                        break
                    self._answer(reply)
        elif not w and self._inflight and not self._out and wait >= self.timeout:
            raise ProducerError("no reply within %.0f s" % self.timeout)

    def _answer(self, reply):
        if not self._inflight:
            raise ProducerError("a reply to nothing (id %r)" % (reply.get("id"),))
        req = self._inflight.popleft()
        if reply.get("id") != req.id:
            raise ProducerError("reply id %r where %r was due" % (reply.get("id"), req.id))
        ok = bool(reply.get("ok"))
        error = None if ok else (reply.get("error") or {})
        if req.op == "query":
            self._query_results[req] = (ok, reply.get("result") if ok else error)
            return
        if not ok and error.get("code") in RETRY_CODES:
            # Not stored: send it again, same seq, after a pause.
            req.not_before = time.monotonic() + 0.2
            self._queue.appendleft(req)
            return
        if ok:
            self.acked += 1
        self._done.append(Outcome(req.seq, req.op, ok, reply.get("result") if ok else None, error))


_AF_UNIX = "unix"


def _start_tls(ctx, s, addr):
    """TLS on the connected socket s; the daemon's certificate must name
    addr's host. Returns the TLS socket; raises TLSError saying why."""
    host = addr[0]
    try:
        return ctx.wrap_socket(s, server_hostname=host)
    except ssl.SSLCertVerificationError as e:
        code = getattr(e, "verify_code", 0)
        if code in (18, 19, 20, 21):
            why = "is not signed by a trusted CA (%s)" % e.verify_message
        elif code in (62, 64):
            why = "does not name %s (%s)" % (host, e.verify_message)
        elif code == 10:
            why = "has expired"
        else:
            why = "did not verify: %s" % (e.verify_message or e)
        s.close()
        raise TLSError("TLS with %s:%d: the server's certificate %s" % (host, addr[1], why))
    except ssl.SSLError as e:
        s.close()
        if e.reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE",
                        "PACKET_LENGTH_TOO_LONG"):
            raise TLSError("TLS with %s:%d: the server did not answer with TLS "
                           "(is it a plain-text listener?)" % addr)
        raise


def _inet_family(addr):
    host, _ = _parse_tcp(addr)
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _is_connection_error(e):
    if isinstance(e, ProducerError):
        return True
    if isinstance(e, (ConnectionError, socket.timeout)):
        return True
    return getattr(e, "errno", None) in (errno.EPIPE, errno.ECONNRESET, errno.ECONNREFUSED,
                                         errno.ENOENT, errno.ENOTCONN, errno.ETIMEDOUT)


def _map_header(n):
    if n < 16:
        return bytes([0x80 | n])
    return b"\xde" + struct.pack(">H", n)


def _array_header(n):
    if n < 16:
        return bytes([0x90 | n])
    if n < 65536:
        return b"\xdc" + struct.pack(">H", n)
    return b"\xdd" + struct.pack(">I", n)
