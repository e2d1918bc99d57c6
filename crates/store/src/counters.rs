//! What this process's queues did, counted since it started, for metrics
//! (`/metrics` of `alk-host serve` and of the dashboard): relaxed atomic
//! counters, one add per call, never a lock.
//!
//! The core counts what passes through it ([`crate::queue::Queue`]); the
//! host counts the errors it hands to guests ([`Count::Busy`],
//! [`Count::Failure`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// One of the counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// Messages sent to queues (outside transactions).
    Sent,
    /// Deliveries handed out by claims and receives.
    Claimed,
    /// Messages acknowledged (deleted by their current receipt).
    Acked,
    /// Messages moved to the dead letters by `fail`, or by a `retry` whose
    /// attempts were used up.
    DeadLettered,
    /// `busy` answers (contention that outlasted the retries; an
    /// unreachable database).
    Busy,
    /// `internal` answers: failures of the engine or of the host.
    Failure,
}

const COUNTS: usize = 6;

static VALUES: [AtomicU64; COUNTS] = [const { AtomicU64::new(0) }; COUNTS];

fn slot(c: Count) -> usize {
    match c {
        Count::Sent => 0,
        Count::Claimed => 1,
        Count::Acked => 2,
        Count::DeadLettered => 3,
        Count::Busy => 4,
        Count::Failure => 5,
    }
}

/// Adds `n` to count `c`.
pub fn add(c: Count, n: u64) {
    if n > 0 {
        VALUES[slot(c)].fetch_add(n, Ordering::Relaxed);
    }
}

/// Count `c` now.
pub fn get(c: Count) -> u64 {
    VALUES[slot(c)].load(Ordering::Relaxed)
}

/// Counts an error about to be answered: `busy` and `internal` ones.
pub fn count_error(e: &crate::AlkError) {
    match e {
        crate::AlkError::Busy(_) => add(Count::Busy, 1),
        crate::AlkError::Internal(_) => add(Count::Failure, 1),
        _ => {}
    }
}
