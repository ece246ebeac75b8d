//! receiptd-producer: send execution receipts to receiptd, exactly once.
//!
//! ```no_run
//! use receiptd_producer::{Config, Producer, ExecutionReceipt};
//!
//! let mut cfg = Config::unix("/run/receiptd/receiptd.sock", "node-17/runtime-3");
//! cfg.first_seq = 1; // persist Producer::next_seq() across restarts
//! let mut p = Producer::connect(cfg)?;
//! let receipt = ExecutionReceipt { schema_version: 3, ..Default::default() };
//! p.send(&receipt)?;
//! for outcome in p.flush()? {
//!     if let Err(e) = outcome.result {
//!         eprintln!("seq {} refused: {}", outcome.seq, e);
//!     }
//! }
//! # Ok::<(), receiptd_producer::Error>(())
//! ```
//!
//! [`receipt`] has the runtimes' `ExecutionReceipt` structs (schemas 1-3);
//! [`Producer`] is the loop: hello with a source, a seq for every write,
//! up to `window` requests in flight, and after a lost connection a
//! reconnect and the resend of every unanswered write with its seq, which
//! the daemon stores once. The wire contract is docs/protocol.md of the
//! receiptd source.

pub mod producer;
pub mod receipt;

pub use producer::{
    Address, Config, Encoding, Error, Outcome, Producer, Rejected, RemoteError, Tls, WriteResult,
};
pub use receipt::{
    coverage, Artifacts, Backend, Counters, CountersV2, ExecutionReceipt, ExecutionReceiptV2,
    Latency,
};
