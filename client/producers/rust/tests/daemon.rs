//! The producer against the real receiptd (RECEIPTD names the binary;
//! run-tests.sh sets it): a receipt in and its row out, a refusal that
//! names its field, and a stream during which the daemon is SIGKILLed and
//! restarted, after which every receipt is stored exactly once.

use std::fs;
use std::io::Write;
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use receiptd_producer::{
    coverage, Artifacts, Backend, Config, Counters, Encoding, Error, ExecutionReceipt, Latency,
    Producer,
};
use serde::{Deserialize, Serialize};

static DIRS: AtomicUsize = AtomicUsize::new(0);

struct Daemon {
    dir: PathBuf,
    sock: PathBuf,
    extra: Vec<String>,
    child: Arc<Mutex<Option<Child>>>,
}

fn binary() -> String {
    std::env::var("RECEIPTD").expect("RECEIPTD: the receiptd binary to test (run-tests.sh sets it)")
}

fn spawn(dir: &PathBuf, sock: &PathBuf, extra: &[String]) -> Child {
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("receiptd.log"))
        .unwrap();
    let child = Command::new(binary())
        .arg("--socket")
        .arg(sock)
        .arg("--db")
        .arg(dir.join("receiptd.db"))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start receiptd");
    let deadline = Instant::now() + Duration::from_secs(20);
    while UnixStream::connect(sock).is_err() {
        assert!(
            Instant::now() < deadline,
            "receiptd did not listen within 20 s"
        );
        thread::sleep(Duration::from_millis(20));
    }
    child
}

impl Daemon {
    fn start() -> Daemon {
        Daemon::start_with(Vec::new())
    }

    fn start_with(extra: Vec<String>) -> Daemon {
        let dir = std::env::temp_dir().join(format!(
            "rp-rs-{}-{}",
            std::process::id(),
            DIRS.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("receiptd.sock");
        let child = spawn(&dir, &sock, &extra);
        Daemon {
            dir,
            sock,
            extra,
            child: Arc::new(Mutex::new(Some(child))),
        }
    }

    /// SIGKILL, then a restart on the same database after `pause`, from
    /// another thread, so the producer meets refused connections too.
    fn kill_and_restart(&self, pause: Duration) -> thread::JoinHandle<()> {
        if let Some(mut c) = self.child.lock().unwrap().take() {
            c.kill().unwrap(); // SIGKILL on Unix
            c.wait().unwrap();
        }
        let (dir, sock, slot) = (self.dir.clone(), self.sock.clone(), self.child.clone());
        let extra = self.extra.clone();
        thread::spawn(move || {
            thread::sleep(pause);
            *slot.lock().unwrap() = Some(spawn(&dir, &sock, &extra));
        })
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn receipt(i: u64) -> ExecutionReceipt {
    let fallback = i % 7 == 0;
    ExecutionReceipt {
        schema_version: 3,
        requested_backend: Backend::Cuda,
        executed_backend: if fallback {
            Backend::Cpu
        } else {
            Backend::Cuda
        },
        model_instance_id: format!("model-{}", i % 3),
        prepared_plan_id: format!("plan-{}", i % 5),
        graph_hash: format!("g{}", i % 2),
        tuning_profile: String::new(),
        stop_reason: "eos".into(),
        counter_coverage: coverage::ALL_V3,
        counters: Counters {
            decode_steps: i,
            fallback_count: u64::from(fallback),
            ..Default::default()
        },
        latency: Latency {
            queue_delay_us: i,
            ..Default::default()
        },
        artifacts: Artifacts::default(),
    }
}

#[derive(Serialize)]
struct ReceiptsQuery<'a> {
    kind: &'static str,
    source: &'a str,
    limit: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    before_id: Option<u64>,
}

#[derive(Serialize)]
struct GapsQuery<'a> {
    kind: &'static str,
    source: &'a str,
}

#[derive(Deserialize)]
struct Rows<T> {
    rows: Vec<T>,
    truncated: bool,
}

#[derive(Deserialize)]
struct RowCounters {
    decode_steps: u64,
}

#[derive(Deserialize)]
struct Row {
    receipt_id: u64,
    seq: Option<u64>,
    fallback: String,
    executed_backend: Backend,
    counters: RowCounters,
}

#[derive(Deserialize)]
struct Gap {
    first_seq: u64,
    last_seq: u64,
    missing: Vec<(u64, u64)>,
}

/// Every stored receipt row of a source, paging with before_id.
fn rows(p: &mut Producer, source: &str) -> Vec<Row> {
    let mut all = Vec::new();
    let mut before_id = None;
    loop {
        let q = ReceiptsQuery {
            kind: "receipts",
            source,
            limit: 10_000,
            before_id,
        };
        let r: Rows<Row> = p.query(&q).unwrap();
        before_id = r.rows.last().map(|row| row.receipt_id);
        all.extend(r.rows);
        if !r.truncated {
            return all;
        }
    }
}

#[test]
fn one_receipt_in_one_row_out() {
    let d = Daemon::start();
    let mut cfg = Config::unix(&d.sock, "rs/one");
    cfg.first_seq = 10;
    let mut p = Producer::connect(cfg).unwrap();
    assert!(p.server().starts_with("receiptd/"), "{}", p.server());
    assert_eq!(p.send(&receipt(7)).unwrap(), 10);
    let out = p.flush().unwrap();
    assert_eq!(out.len(), 1);
    let res = out[0].result.clone().unwrap();
    assert_eq!(res.fallback.as_deref(), Some("fallback"));
    assert!(!res.duplicate);
    let rows = rows(&mut p, "rs/one");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].seq, Some(10));
    assert_eq!(rows[0].counters.decode_steps, 7);
    assert_eq!(rows[0].executed_backend, Backend::Cpu);
    assert_eq!(rows[0].fallback, "fallback");
}

#[test]
fn compact_batches_and_a_refusal_that_names_its_field() {
    let d = Daemon::start();
    let mut cfg = Config::unix(&d.sock, "rs/batch");
    cfg.encoding = Encoding::Compact;
    let mut p = Producer::connect(cfg).unwrap();
    let batch: Vec<ExecutionReceipt> = (0..50).map(receipt).collect();
    p.send_batch(&batch).unwrap();
    // Ids are at most 256 bytes (PROTOCOL section 4).
    let mut bad = receipt(1);
    bad.model_instance_id = "m".repeat(257);
    p.send(&bad).unwrap();
    let out = p.flush().unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].result.as_ref().unwrap().accepted, Some(50));
    let err = out[1].result.clone().unwrap_err();
    assert_eq!(err.code, "invalid");
    assert_eq!(err.path, "model_instance_id", "{}", err);
    assert_eq!(p.resent(), 0);
    assert_eq!(rows(&mut p, "rs/batch").len(), 50);
}

#[test]
fn kill_9_mid_stream_loses_nothing_and_stores_nothing_twice() {
    const TOTAL: u64 = 3000;
    let source = "rs/killed";
    let d = Daemon::start();
    let mut cfg = Config::unix(&d.sock, source);
    cfg.window = 128;
    cfg.retry_for = Duration::from_secs(60);
    let mut p = Producer::connect(cfg).unwrap();
    let mut outcomes = Vec::new();
    let mut in_flight_at_kill = None;
    let mut restart = None;
    for i in 0..TOTAL {
        p.send(&receipt(i)).unwrap();
        // Kill once a third is acknowledged and many writes are in flight
        // (or, on a daemon that keeps up, at two thirds).
        let due = p.pending() >= 32 || (i >= 2 * TOTAL / 3 && p.pending() > 0);
        if in_flight_at_kill.is_none() && p.acked() >= TOTAL / 3 && due {
            in_flight_at_kill = Some(p.pending());
            restart = Some(d.kill_and_restart(Duration::from_millis(300)));
        }
        outcomes.extend(p.poll().unwrap());
    }
    outcomes.extend(p.flush().unwrap());
    restart.expect("the daemon was killed").join().unwrap();
    let in_flight = in_flight_at_kill.unwrap();
    eprintln!(
        "killed with {} in flight; {} reconnects, {} resent",
        in_flight,
        p.reconnects(),
        p.resent()
    );
    assert!(in_flight > 0);
    assert!(p.reconnects() >= 1);
    assert!(p.resent() > 0);

    assert_eq!(outcomes.len() as u64, TOTAL);
    let mut acked: Vec<u64> = outcomes
        .iter()
        .map(|o| {
            assert!(o.result.is_ok(), "seq {}: {:?}", o.seq, o.result);
            o.seq
        })
        .collect();
    acked.sort_unstable();
    assert_eq!(acked, (1..=TOTAL).collect::<Vec<u64>>());

    let rows = rows(&mut p, source);
    let mut seqs: Vec<u64> = rows.iter().map(|r| r.seq.unwrap()).collect();
    seqs.sort_unstable();
    assert_eq!(
        seqs,
        (1..=TOTAL).collect::<Vec<u64>>(),
        "each seq stored once"
    );
    for r in &rows {
        assert_eq!(r.counters.decode_steps, r.seq.unwrap() - 1);
    }
    let gaps: Rows<Gap> = p
        .query(&GapsQuery {
            kind: "gaps",
            source,
        })
        .unwrap();
    assert_eq!(gaps.rows.len(), 1);
    assert_eq!((gaps.rows[0].first_seq, gaps.rows[0].last_seq), (1, TOTAL));
    assert!(gaps.rows[0].missing.is_empty());
}

/// The SHA-256 the daemon's configuration holds for a token, from
/// `receiptd --hash-token`.
fn hash_token(token: &str) -> String {
    let mut c = Command::new(binary())
        .arg("--hash-token")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(token.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A configuration file holding token as the one TCP token.
fn write_token_conf(conf: &PathBuf, token: &str) {
    fs::write(
        conf,
        format!(
            "access: {{\n    tokens = ( {{ name = \"rs\"; sha256 = \"{}\"; }} );\n}};\n",
            hash_token(token)
        ),
    )
    .unwrap();
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn a_token_opens_tcp_and_a_wrong_one_is_refused() {
    let token = "producer-token";
    let conf = std::env::temp_dir().join(format!("rp-rs-{}-tcp.conf", std::process::id()));
    write_token_conf(&conf, token);
    let addr = format!("127.0.0.1:{}", free_port());
    let d = Daemon::start_with(vec![
        "--config".into(),
        conf.display().to_string(),
        "--tcp".into(),
        addr.clone(),
        "--tcp-plaintext".into(),
        "true".into(),
    ]);
    let mut p = Producer::connect(Config::tcp(&addr, "rs/tcp", token)).unwrap();
    p.send(&receipt(3)).unwrap();
    assert!(p.flush().unwrap()[0].result.is_ok());
    assert_eq!(rows(&mut p, "rs/tcp").len(), 1);

    let mut cfg = Config::tcp(&addr, "rs/tcp", "not-it");
    cfg.retry_for = Duration::from_secs(1);
    match Producer::connect(cfg) {
        Err(Error::Remote(e)) => assert_eq!(e.code, "unauthorized", "{}", e),
        Err(e) => panic!("refused with {}", e),
        Ok(_) => panic!("a wrong token was accepted"),
    }
    drop(d);
    let _ = fs::remove_file(&conf);
}

/// TLS with certificates openssl makes here: a session that stores what
/// it sends, an unknown CA and a plain-text port, each said plainly.
#[test]
fn tls_stores_and_names_its_failures() {
    let dir = std::env::temp_dir().join(format!("rp-rs-{}-tls", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let made = |name: &str, cn: &str, ext: Option<&str>| {
        let mut c = Command::new("openssl");
        c.args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:P-256", "-nodes", "-days", "1"])
            .arg("-keyout")
            .arg(dir.join(format!("{}.key", name)))
            .arg("-out")
            .arg(dir.join(format!("{}.pem", name)))
            .arg("-subj")
            .arg(format!("/CN={}", cn));
        if let Some(e) = ext {
            c.args(["-addext", e]);
        }
        c.stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if !made("self", "127.0.0.1", Some("subjectAltName=IP:127.0.0.1"))
        || !made("other", "other CA", None)
    {
        eprintln!("SKIP: openssl could not make certificates");
        let _ = fs::remove_dir_all(&dir);
        return;
    }
    let token = "producer-token";
    let conf = dir.join("d.conf");
    write_token_conf(&conf, token);
    let start = |tls: bool| {
        let addr = format!("127.0.0.1:{}", free_port());
        let mut args: Vec<String> = vec![
            "--config".into(),
            conf.display().to_string(),
            "--tcp".into(),
            addr.clone(),
        ];
        if tls {
            args.push("--tls-cert".into());
            args.push(dir.join("self.pem").display().to_string());
            args.push("--tls-key".into());
            args.push(dir.join("self.key").display().to_string());
        } else {
            args.push("--tcp-plaintext".into());
            args.push("true".into());
        }
        (Daemon::start_with(args), addr)
    };

    let (d, addr) = start(true);
    let mut p =
        Producer::connect(Config::tls(&addr, "rs/tls", token, dir.join("self.pem"))).unwrap();
    for i in 0..50 {
        p.send(&receipt(i)).unwrap();
    }
    assert!(p.flush().unwrap().iter().all(|o| o.result.is_ok()));
    assert_eq!(rows(&mut p, "rs/tls").len(), 50);
    drop(p);
    match Producer::connect(Config::tls(&addr, "rs/tls", token, dir.join("other.pem"))) {
        Err(Error::Tls(s)) => assert!(s.contains("not signed by a trusted CA"), "{}", s),
        Err(e) => panic!("refused with {}", e),
        Ok(_) => panic!("an unknown CA was accepted"),
    }
    drop(d);

    let (d, addr) = start(false);
    match Producer::connect(Config::tls(&addr, "rs/tls", token, dir.join("self.pem"))) {
        Err(Error::Tls(s)) => assert!(s.contains("did not answer with TLS"), "{}", s),
        Err(e) => panic!("refused with {}", e),
        Ok(_) => panic!("plain text was taken for TLS"),
    }
    drop(d);
    let _ = fs::remove_dir_all(&dir);
}
