//! The producer loop: connect, hello, a seq per write, pipelining, and the
//! resend of every unanswered write after a reconnect.
//!
//! A write stays in memory until its reply. Replies come back in request
//! order (PROTOCOL section 1), so the oldest request in flight is the one
//! a reply answers. When the connection is lost (the daemon restarted or
//! was killed, a reset, no reply within `reply_timeout`), the producer
//! reconnects for up to `retry_for`, says hello with the same source and
//! sends every unanswered request again with its seq: the daemon stores a
//! `(source, seq)` once and answers a resend of a committed write with its
//! first outcome and `duplicate: true`.
//!
//! Over TCP, [`Config::tls`] speaks TLS (OpenSSL through the `openssl`
//! crate): the daemon's certificate must verify against the CA file (or
//! the system's CAs) and name the host or address connected to. A
//! certificate that does not verify is final ([`Error::Tls`]), not
//! retried.
//!
//! Single-threaded: a [`Producer`] belongs to one thread at a time. Writes
//! to the socket block (bounded by `reply_timeout`); that cannot deadlock
//! because at most `window` requests, and so at most `window` small
//! replies, are outstanding.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use openssl::ssl::{HandshakeError, SslConnector, SslFiletype, SslMethod, SslStream, SslVersion};
use openssl::x509::X509VerifyResult;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The protocol version this crate speaks.
pub const PROTOCOL: u64 = 1;

/// Where the daemon listens.
#[derive(Clone, Debug)]
pub enum Address {
    /// A Unix socket path (receiptd's default: /run/receiptd/receiptd.sock).
    Unix(PathBuf),
    /// `HOST:PORT`, numeric (`127.0.0.1:7411`, `[::1]:7411`); needs a token.
    Tcp(String),
}

/// TLS over [`Address::Tcp`]: the CAs to verify the daemon against (PEM;
/// the system's when `None`), and a client certificate with its key for
/// a daemon that asks for one.
#[derive(Clone, Debug, Default)]
pub struct Tls {
    pub ca_file: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// How receipts are encoded; the daemon reads both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// `rmp_serde::to_vec_named`: structs as maps keyed by field name.
    Named,
    /// `rmp_serde::to_vec`: structs as arrays in declaration order.
    Compact,
}

/// A producer's settings; [`Config::unix`] and [`Config::tcp`] give the
/// defaults.
#[derive(Clone, Debug)]
pub struct Config {
    pub address: Address,
    /// This producer's name (`node-17/runtime-3`), the key of idempotency.
    pub source: String,
    /// Sent in hello; required on TCP listeners.
    pub token: Option<String>,
    /// The seq of the first write. Seqs must only grow for a source,
    /// across restarts of the producer too: persist
    /// [`Producer::next_seq`], or start above the `last_seq` that the
    /// `gaps` query reports for the source.
    pub first_seq: u64,
    /// Requests in flight before a send waits for replies (1 to 4,000:
    /// the daemon reads at most 4,096 unanswered requests per connection).
    pub window: usize,
    pub encoding: Encoding,
    /// How long to keep reconnecting after the connection is lost.
    pub retry_for: Duration,
    /// How long a connected daemon may take to answer the oldest request
    /// (or to take our bytes) before the connection counts as lost.
    pub reply_timeout: Duration,
    /// TLS over TCP ([`Config::tls`]); `None` for plain text.
    pub tls: Option<Tls>,
}

impl Config {
    pub fn unix<P: Into<PathBuf>>(path: P, source: &str) -> Config {
        Config {
            address: Address::Unix(path.into()),
            source: source.to_string(),
            token: None,
            first_seq: 1,
            window: 256,
            encoding: Encoding::Named,
            retry_for: Duration::from_secs(30),
            reply_timeout: Duration::from_secs(30),
            tls: None,
        }
    }

    pub fn tcp(addr: &str, source: &str, token: &str) -> Config {
        let mut c = Config::unix("", source);
        c.address = Address::Tcp(addr.to_string());
        c.token = Some(token.to_string());
        c
    }

    /// [`Config::tcp`] with TLS, verifying the daemon against `ca_file`.
    pub fn tls<P: Into<PathBuf>>(addr: &str, source: &str, token: &str, ca_file: P) -> Config {
        let mut c = Config::tcp(addr, source, token);
        c.tls = Some(Tls {
            ca_file: Some(ca_file.into()),
            ..Tls::default()
        });
        c
    }
}

/// An error reply as the daemon sent it (PROTOCOL section 8).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct RemoteError {
    pub code: String,
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub message: String,
}

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}: {}", self.code, self.message)
        } else {
            write!(f, "{} at {}: {}", self.code, self.path, self.message)
        }
    }
}

/// What the producer cannot go on from.
#[derive(Debug)]
pub enum Error {
    /// The daemon could not be reached within `retry_for`; the last reason.
    Unreachable(String),
    /// An error reply to hello or to a query.
    Remote(RemoteError),
    /// A request this producer will not send, naming the field
    /// (`body: 2000000 bytes, over the daemon's max_frame 1048576`).
    Invalid(String),
    /// The daemon's bytes break the protocol.
    Protocol(String),
    /// TLS failed in a way a retry does not mend: the daemon's certificate
    /// is not signed by a trusted CA, does not name the host, has expired,
    /// the daemon did not answer with TLS, or a file did not load.
    Tls(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unreachable(s) => write!(f, "receiptd unreachable: {}", s),
            Error::Remote(e) => write!(f, "{}", e),
            Error::Invalid(s) => write!(f, "{}", s),
            Error::Protocol(s) => write!(f, "protocol error: {}", s),
            Error::Tls(s) => write!(f, "TLS: {}", s),
        }
    }
}

impl std::error::Error for Error {}

/// One item of a batch the daemon refused (the others were stored).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Rejected {
    pub index: u64,
    pub code: String,
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub message: String,
}

/// The result of a committed write: `receipt_id` and `fallback` for
/// `receipt`, `accepted` and `rejected` for `receipts`; `duplicate` when
/// this was a resend of a write already committed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct WriteResult {
    #[serde(default)]
    pub receipt_id: Option<u64>,
    #[serde(default)]
    pub fallback: Option<String>,
    #[serde(default)]
    pub accepted: Option<u64>,
    #[serde(default)]
    pub rejected: Vec<Rejected>,
    #[serde(default)]
    pub duplicate: bool,
}

/// The final outcome of one write: committed, or refused (not retried:
/// the payload is in the daemon's quarantine).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub seq: u64,
    pub result: Result<WriteResult, RemoteError>,
}

#[derive(Deserialize)]
struct Reply<T> {
    id: u64,
    ok: bool,
    #[serde(default = "none")]
    result: Option<T>,
    #[serde(default)]
    error: Option<RemoteError>,
}

fn none<T>() -> Option<T> {
    None
}

#[derive(Deserialize, Default)]
struct HelloResult {
    #[serde(default)]
    server: String,
    #[serde(default)]
    max_frame: u64,
    #[serde(default)]
    max_batch: u64,
}

#[derive(Serialize)]
struct Hello<'a> {
    protocol: u64,
    source: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<&'a str>,
}

/// Error codes after which the same write is sent again, later.
const RETRY_CODES: [&str; 2] = ["overloaded", "unavailable"];
const RETRY_PAUSE: Duration = Duration::from_millis(200);
const MAX_REPLY: usize = 64 << 20;

struct Request {
    op: &'static str,
    seq: Option<u64>,
    /// The body's msgpack bytes, encoded once and sent as they are.
    body: Vec<u8>,
    /// Envelope id on the current connection.
    id: u64,
    /// For a query: the key of its reply in `answers`.
    token: u64,
    not_before: Option<Instant>,
}

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
    Tls(SslStream<TcpStream>),
}

impl Stream {
    fn set_timeouts(&self, t: Duration) -> io::Result<()> {
        match self {
            Stream::Unix(s) => {
                s.set_read_timeout(Some(t))?;
                s.set_write_timeout(Some(t))
            }
            Stream::Tcp(s) => {
                s.set_read_timeout(Some(t))?;
                s.set_write_timeout(Some(t))
            }
            Stream::Tls(s) => {
                s.get_ref().set_read_timeout(Some(t))?;
                s.get_ref().set_write_timeout(Some(t))
            }
        }
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_nonblocking(on),
            Stream::Tcp(s) => s.set_nonblocking(on),
            Stream::Tls(s) => s.get_ref().set_nonblocking(on),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Why one step of the loop stopped: the connection is gone (reconnect
/// and resend), or something no reconnect can fix.
enum Stop {
    Lost(String),
    Fatal(Error),
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Stop {
        Stop::Lost(e.to_string())
    }
}

/// A connection to receiptd that delivers every write exactly once.
pub struct Producer {
    cfg: Config,
    stream: Option<Stream>,
    next_seq: u64,
    next_id: u64,
    next_token: u64,
    inflight: VecDeque<Request>,
    queue: VecDeque<Request>,
    inbuf: Vec<u8>,
    done: Vec<Outcome>,
    answers: HashMap<u64, Vec<u8>>,
    max_frame: u64,
    max_batch: u64,
    server: String,
    reconnects: u64,
    resent: u64,
    acked: u64,
}

impl Producer {
    /// Connects and says hello, retrying for `cfg.retry_for`.
    pub fn connect(cfg: Config) -> Result<Producer, Error> {
        if cfg.source.is_empty() {
            return Err(Error::Invalid("source: must not be empty".into()));
        }
        if cfg.window == 0 || cfg.window > 4000 {
            return Err(Error::Invalid(format!(
                "window: {} is not within 1-4000",
                cfg.window
            )));
        }
        let mut p = Producer {
            next_seq: cfg.first_seq,
            cfg,
            stream: None,
            next_id: 1,
            next_token: 1,
            inflight: VecDeque::new(),
            queue: VecDeque::new(),
            inbuf: Vec::new(),
            done: Vec::new(),
            answers: HashMap::new(),
            max_frame: 1 << 20,
            max_batch: 10_000,
            server: String::new(),
            reconnects: 0,
            resent: 0,
            acked: 0,
        };
        p.open_with_retry("connecting".into())?;
        Ok(p)
    }

    /// Queues one receipt as a `receipt` write with the next seq, sends
    /// what the window allows, and returns the seq. Waits for replies
    /// while `window` requests are in flight.
    pub fn send<T: Serialize>(&mut self, receipt: &T) -> Result<u64, Error> {
        let body = self.encode(receipt)?;
        self.write("receipt", body)
    }

    /// Queues receipts as one `receipts` write (one seq for the batch;
    /// its result counts the accepted and lists the rejected items).
    pub fn send_batch<T: Serialize>(&mut self, receipts: &[T]) -> Result<u64, Error> {
        if receipts.len() as u64 > self.max_batch {
            return Err(Error::Invalid(format!(
                "receipts: batch of {} is over the daemon's max_batch {}",
                receipts.len(),
                self.max_batch
            )));
        }
        let body = self.encode(&receipts)?;
        self.write("receipts", body)
    }

    /// A receipt already encoded as msgpack (one object), sent as it is.
    pub fn send_encoded(&mut self, body: Vec<u8>) -> Result<u64, Error> {
        self.write("receipt", body)
    }

    /// Sends and reads what the connection has ready, without waiting,
    /// and returns the outcomes that arrived since the last call.
    pub fn poll(&mut self) -> Result<Vec<Outcome>, Error> {
        self.pump(false, |_| true)?;
        Ok(std::mem::take(&mut self.done))
    }

    /// Waits until every write has its final outcome (reconnecting and
    /// resending as needed) and returns the outcomes not yet returned.
    pub fn flush(&mut self) -> Result<Vec<Outcome>, Error> {
        self.pump(true, |p| p.inflight.is_empty() && p.queue.is_empty())?;
        Ok(std::mem::take(&mut self.done))
    }

    /// Runs a query (`body` is a map with `kind` and filters, see
    /// docs/protocol.md) and decodes its result into `R`. Writes queued
    /// before it are sent first.
    pub fn query<Q: Serialize, R: DeserializeOwned>(&mut self, body: &Q) -> Result<R, Error> {
        let body =
            rmp_serde::to_vec_named(body).map_err(|e| Error::Invalid(format!("query: {}", e)))?;
        let token = self.next_token;
        self.next_token += 1;
        self.queue.push_back(Request {
            op: "query",
            seq: None,
            body,
            id: 0,
            token,
            not_before: None,
        });
        self.pump(true, |p| p.answers.contains_key(&token))?;
        let frame = self.answers.remove(&token).unwrap_or_default();
        let reply: Reply<R> = rmp_serde::from_slice(&frame)
            .map_err(|e| Error::Protocol(format!("query reply: {}", e)))?;
        if !reply.ok {
            return Err(Error::Remote(reply.error.unwrap_or_default()));
        }
        reply
            .result
            .ok_or_else(|| Error::Protocol("query reply without a result".into()))
    }

    /// The seq the next write will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Requests without a final outcome yet.
    pub fn pending(&self) -> usize {
        self.inflight.len() + self.queue.len()
    }

    /// Writes answered `ok` so far.
    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// Connections lost and made again.
    pub fn reconnects(&self) -> u64 {
        self.reconnects
    }

    /// Writes sent again after a reconnect.
    pub fn resent(&self) -> u64 {
        self.resent
    }

    /// The daemon's name and version from hello (`receiptd/0.1.0`).
    pub fn server(&self) -> &str {
        &self.server
    }

    fn encode<T: Serialize + ?Sized>(&self, v: &T) -> Result<Vec<u8>, Error> {
        let r = match self.cfg.encoding {
            Encoding::Named => rmp_serde::to_vec_named(v),
            Encoding::Compact => rmp_serde::to_vec(v),
        };
        r.map_err(|e| Error::Invalid(format!("body: {}", e)))
    }

    fn write(&mut self, op: &'static str, body: Vec<u8>) -> Result<u64, Error> {
        // The envelope around the body takes at most 40 bytes.
        if body.len() as u64 + 40 > self.max_frame {
            return Err(Error::Invalid(format!(
                "body: {} bytes, over the daemon's max_frame {}",
                body.len(),
                self.max_frame
            )));
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.push_back(Request {
            op,
            seq: Some(seq),
            body,
            id: 0,
            token: 0,
            not_before: None,
        });
        // Send at once what the window allows, then wait only if it is full.
        self.pump(false, |_| true)?;
        let window = self.cfg.window;
        self.pump(true, |p| p.pending() <= window)?;
        Ok(seq)
    }

    /// Steps the loop until `done` holds (one step when not blocking),
    /// reconnecting whenever the connection is lost.
    fn pump<F: Fn(&Producer) -> bool>(&mut self, block: bool, done: F) -> Result<(), Error> {
        loop {
            if done(self) && block {
                return Ok(());
            }
            match self.step(block) {
                Ok(()) => {}
                Err(Stop::Lost(why)) => self.reconnect(why)?,
                Err(Stop::Fatal(e)) => return Err(e),
            }
            if !block || done(self) {
                return Ok(());
            }
        }
    }

    fn step(&mut self, block: bool) -> Result<(), Stop> {
        let now = Instant::now();
        while self.inflight.len() < self.cfg.window {
            match self.queue.front() {
                Some(r) if r.not_before.map_or(true, |t| t <= now) => {}
                _ => break,
            }
            let mut req = self.queue.pop_front().expect("front was Some");
            req.id = self.next_id;
            self.next_id += 1;
            let frame = envelope(&req);
            // Counted in flight before the write: if the write fails the
            // request is resent after the reconnect.
            self.inflight.push_back(req);
            self.stream_mut()?.write_all(&frame)?;
        }
        if self.inflight.is_empty() {
            if let (true, Some(t)) = (block, self.queue.front().and_then(|r| r.not_before)) {
                thread::sleep(t.saturating_duration_since(Instant::now()));
            }
            return Ok(());
        }
        let mut buf = [0u8; 65536];
        let stream = self.stream_mut()?;
        let n = if block {
            match stream.read(&mut buf) {
                Ok(n) => n,
                Err(e) if is_timeout(&e) => {
                    return Err(Stop::Lost("no reply within reply_timeout".into()))
                }
                Err(e) => return Err(e.into()),
            }
        } else {
            stream.set_nonblocking(true)?;
            let r = stream.read(&mut buf);
            stream.set_nonblocking(false)?;
            match r {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        };
        if n == 0 {
            return Err(Stop::Lost("the daemon closed the connection".into()));
        }
        self.inbuf.extend_from_slice(&buf[..n]);
        while let Some(frame) = self.next_frame()? {
            self.answer(frame)?;
        }
        Ok(())
    }

    fn stream_mut(&mut self) -> Result<&mut Stream, Stop> {
        self.stream
            .as_mut()
            .ok_or_else(|| Stop::Lost("not connected".into()))
    }

    fn next_frame(&mut self) -> Result<Option<Vec<u8>>, Stop> {
        if self.inbuf.len() < 4 {
            return Ok(None);
        }
        let n = u32::from_be_bytes([self.inbuf[0], self.inbuf[1], self.inbuf[2], self.inbuf[3]])
            as usize;
        if n == 0 || n > MAX_REPLY {
            return Err(Stop::Lost(format!("a reply frame of {} bytes", n)));
        }
        if self.inbuf.len() < 4 + n {
            return Ok(None);
        }
        let frame = self.inbuf[4..4 + n].to_vec();
        self.inbuf.drain(..4 + n);
        Ok(Some(frame))
    }

    fn answer(&mut self, frame: Vec<u8>) -> Result<(), Stop> {
        // The reply's own id must be the oldest request's.
        let head: Reply<serde::de::IgnoredAny> = rmp_serde::from_slice(&frame)
            .map_err(|e| Stop::Lost(format!("a reply that is not a reply map: {}", e)))?;
        let req = match self.inflight.pop_front() {
            Some(r) if r.id == head.id => r,
            Some(r) => {
                let due = r.id;
                self.inflight.push_front(r);
                return Err(Stop::Lost(format!(
                    "reply id {} where {} was due",
                    head.id, due
                )));
            }
            None => return Err(Stop::Lost(format!("a reply to nothing (id {})", head.id))),
        };
        if req.op == "query" {
            self.answers.insert(req.token, frame);
            return Ok(());
        }
        let seq = req.seq.unwrap_or(0);
        if head.ok {
            let reply: Reply<WriteResult> = rmp_serde::from_slice(&frame)
                .map_err(|e| Stop::Fatal(Error::Protocol(format!("write reply: {}", e))))?;
            self.acked += 1;
            self.done.push(Outcome {
                seq,
                result: Ok(reply.result.unwrap_or_default()),
            });
            return Ok(());
        }
        let err = head.error.unwrap_or_default();
        if RETRY_CODES.contains(&err.code.as_str()) {
            // Nothing was stored: the same write goes again, later.
            let mut req = req;
            req.not_before = Some(Instant::now() + RETRY_PAUSE);
            self.queue.push_front(req);
            return Ok(());
        }
        self.done.push(Outcome {
            seq,
            result: Err(err),
        });
        Ok(())
    }

    fn reconnect(&mut self, why: String) -> Result<(), Error> {
        self.stream = None;
        self.reconnects += 1;
        // Every unanswered request goes again, oldest first.
        while let Some(req) = self.inflight.pop_back() {
            if req.seq.is_some() {
                self.resent += 1;
            }
            self.queue.push_front(req);
        }
        self.open_with_retry(why)
    }

    fn open_with_retry(&mut self, why: String) -> Result<(), Error> {
        let start = Instant::now();
        let mut delay = Duration::from_millis(20);
        loop {
            let last = match self.open() {
                Ok(()) => return Ok(()),
                Err(Stop::Fatal(e)) => return Err(e),
                Err(Stop::Lost(e)) => e,
            };
            self.stream = None;
            if start.elapsed() >= self.cfg.retry_for {
                return Err(Error::Unreachable(format!(
                    "{:?} for {:?} after {}: {}",
                    self.cfg.address, self.cfg.retry_for, why, last
                )));
            }
            thread::sleep(delay);
            delay = std::cmp::min(delay * 2, Duration::from_millis(500));
        }
    }

    fn open(&mut self) -> Result<(), Stop> {
        let stream = match (&self.cfg.address, &self.cfg.tls) {
            (Address::Unix(p), _) => Stream::Unix(UnixStream::connect(p)?),
            (Address::Tcp(a), None) => Stream::Tcp(TcpStream::connect(a.as_str())?),
            (Address::Tcp(a), Some(t)) => {
                let tcp = TcpStream::connect(a.as_str())?;
                tcp.set_read_timeout(Some(self.cfg.reply_timeout))?;
                tcp.set_write_timeout(Some(self.cfg.reply_timeout))?;
                Stream::Tls(start_tls(t, a, tcp)?)
            }
        };
        stream.set_timeouts(self.cfg.reply_timeout)?;
        self.stream = Some(stream);
        self.inbuf.clear();
        let hello = Hello {
            protocol: PROTOCOL,
            source: &self.cfg.source,
            token: self.cfg.token.as_deref(),
        };
        let body = rmp_serde::to_vec_named(&hello)
            .map_err(|e| Stop::Fatal(Error::Invalid(format!("hello: {}", e))))?;
        let req = Request {
            op: "hello",
            seq: None,
            body,
            id: self.next_id,
            token: 0,
            not_before: None,
        };
        self.next_id += 1;
        self.stream_mut()?.write_all(&envelope(&req))?;
        let frame = loop {
            if let Some(f) = self.next_frame()? {
                break f;
            }
            let mut buf = [0u8; 4096];
            let n = self.stream_mut()?.read(&mut buf)?;
            if n == 0 {
                return Err(Stop::Lost(
                    "the daemon closed the connection in hello".into(),
                ));
            }
            self.inbuf.extend_from_slice(&buf[..n]);
        };
        let reply: Reply<HelloResult> =
            rmp_serde::from_slice(&frame).map_err(|e| Stop::Lost(format!("hello reply: {}", e)))?;
        if reply.id != req.id {
            return Err(Stop::Lost(format!(
                "hello reply id {}, sent {}",
                reply.id, req.id
            )));
        }
        if !reply.ok {
            return Err(Stop::Fatal(Error::Remote(reply.error.unwrap_or_default())));
        }
        let r = reply.result.unwrap_or_default();
        if r.max_frame > 0 {
            self.max_frame = r.max_frame;
        }
        if r.max_batch > 0 {
            self.max_batch = r.max_batch;
        }
        self.server = r.server;
        Ok(())
    }
}

/// TLS on the connected `tcp`; the daemon's certificate must name `addr`'s
/// host. What a retry does not mend is [`Stop::Fatal`].
fn start_tls(t: &Tls, addr: &str, tcp: TcpStream) -> Result<SslStream<TcpStream>, Stop> {
    let fatal = |s: String| Stop::Fatal(Error::Tls(s));
    let file = |what: &str, p: &PathBuf, e: openssl::error::ErrorStack| {
        fatal(format!("cannot load the {} {}: {}", what, p.display(), e))
    };
    let mut b = SslConnector::builder(SslMethod::tls_client()).map_err(|e| fatal(e.to_string()))?;
    b.set_min_proto_version(Some(SslVersion::TLS1_2))
        .map_err(|e| fatal(e.to_string()))?;
    if let Some(ca) = &t.ca_file {
        b.set_ca_file(ca).map_err(|e| file("CA", ca, e))?;
    }
    if let Some(cert) = &t.cert {
        b.set_certificate_chain_file(cert)
            .map_err(|e| file("certificate", cert, e))?;
    }
    if let Some(key) = &t.key {
        b.set_private_key_file(key, SslFiletype::PEM)
            .map_err(|e| file("key", key, e))?;
    }
    let host = match addr.rfind(':') {
        Some(i) => addr[..i].trim_start_matches('[').trim_end_matches(']'),
        None => addr,
    };
    match b.build().connect(host, tcp) {
        Ok(s) => Ok(s),
        Err(HandshakeError::SetupFailure(e)) => Err(fatal(e.to_string())),
        Err(HandshakeError::Failure(mid)) => {
            let v = mid.ssl().verify_result();
            let why = mid.error().to_string();
            Err(fatal(if v != X509VerifyResult::OK {
                verify_reason(v, host)
            } else if why.contains("wrong version number")
                || why.contains("packet length too long")
                || why.contains("record layer failure")
            {
                format!(
                    "{}: the server did not answer with TLS (is it a plain-text listener?)",
                    addr
                )
            } else {
                format!("{}: {}", addr, why)
            }))
        }
        Err(HandshakeError::WouldBlock(_)) => Err(Stop::Lost(format!(
            "{}: no answer to the TLS handshake",
            addr
        ))),
    }
}

/// The words of tls.c for a certificate that did not verify.
fn verify_reason(v: X509VerifyResult, host: &str) -> String {
    match v.as_raw() {
        18..=21 | 7 => format!(
            "the server's certificate is not signed by a trusted CA ({})",
            v.error_string()
        ),
        62 | 64 => format!(
            "the server's certificate does not name {} ({})",
            host,
            v.error_string()
        ),
        10 => "the server's certificate has expired".to_string(),
        9 => "the server's certificate is not valid yet".to_string(),
        _ => format!(
            "the server's certificate did not verify: {}",
            v.error_string()
        ),
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A request frame: the length prefix, then `{"op", "id", ["seq",]
/// "body"}` with the body's bytes as they were encoded.
fn envelope(req: &Request) -> Vec<u8> {
    let mut f = Vec::with_capacity(req.body.len() + 40);
    f.extend_from_slice(&[0; 4]);
    let keys = 3 + u32::from(req.seq.is_some());
    // Writes into a Vec cannot fail.
    let _ = rmp::encode::write_map_len(&mut f, keys);
    let _ = rmp::encode::write_str(&mut f, "op");
    let _ = rmp::encode::write_str(&mut f, req.op);
    let _ = rmp::encode::write_str(&mut f, "id");
    let _ = rmp::encode::write_uint(&mut f, req.id);
    if let Some(seq) = req.seq {
        let _ = rmp::encode::write_str(&mut f, "seq");
        let _ = rmp::encode::write_uint(&mut f, seq);
    }
    let _ = rmp::encode::write_str(&mut f, "body");
    f.extend_from_slice(&req.body);
    let len = (f.len() - 4) as u32;
    f[..4].copy_from_slice(&len.to_be_bytes());
    f
}
