//! `alk-store`: the engine-neutral core of alk's stores.
//!
//! Core owns semantics; engines own statements. This crate holds everything
//! guests rely on that does not depend on how data is kept:
//!
//! - [`AlkError`], the one error type, each case one a caller acts on;
//! - the rules for names, keys and sizes ([`names`], [`json`], [`limits`]);
//! - the clock and the one place TTLs and deadlines are computed ([`time`]);
//! - wakes: topics, the transport trait that carries them to other
//!   processes, and the wait loop ([`wake`]);
//! - per capability — [`kv`], [`queue`], [`stream`], [`lock`], [`notify`],
//!   [`outbox`], [`schedule`] —
//!   its domain types, the trait an engine implements, and the type every
//!   guest call goes through, which checks arguments, computes times,
//!   waits, signals wakes after commits;
//! - [`panic`]: panics inside an engine contained, and told apart from
//!   crashes;
//! - transactions across streams, queues, outboxes and channels ([`tx`]);
//! - [`counters`]: what this process's queues did, for metrics;
//! - [`Engine`], what a storage engine provides, an in-memory engine
//!   ([`memory`]) and the behaviour suite every engine must pass
//!   ([`conformance`]).
//!
//! It depends on neither an engine nor a WebAssembly runtime.

#![deny(missing_docs)]

pub mod conformance;
pub mod counters;
pub mod engine;
pub mod error;
pub mod jobs;
pub mod json;
pub mod kv;
pub mod limits;
pub mod lock;
pub mod memory;
pub mod names;
pub mod notify;
pub mod outbox;
pub mod panic;
pub mod queue;
pub mod rate;
pub mod schedule;
pub mod stream;
pub mod time;
pub mod tx;
pub mod wake;

pub use engine::{Catalog, Engine};
pub use error::{AlkError, AlkResult};
pub use limits::{KvLimits, Limits, StreamLimits};
pub use time::{Clock, ManualClock, SystemClock};
