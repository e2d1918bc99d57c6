//! The clock, and the one place where TTLs, deadlines and waits are turned
//! into instants.
//!
//! Stored times are unix epoch milliseconds read from a [`Clock`], passed to
//! engines as plain numbers, so expiry and leases are tested without
//! sleeping. Waits use the monotonic clock ([`tokio::time::Instant`]).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{AlkError, AlkResult};

/// The source of "now" for expiry decisions, in unix epoch milliseconds.
///
/// Time is read through this trait only, so embedders and tests can inject a
/// clock and exercise TTLs without sleeping.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the unix epoch.
    fn now_ms(&self) -> i64;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to; for tests.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        ManualClock(AtomicI64::new(now_ms))
    }
    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
    /// Sets the clock.
    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The moment `ms` milliseconds after `now` (epoch ms): a TTL's expiry, a
/// lock's deadline, a delivery's visibility. `what` names the argument in
/// the error: 0 is refused (it would be over before it starts), and so is a
/// value that overflows the clock.
pub fn after(what: &str, ms: u64, now: i64) -> AlkResult<i64> {
    if ms == 0 {
        return Err(AlkError::InvalidArgument(format!(
            "{what} is 0; it must be at least 1"
        )));
    }
    i64::try_from(ms)
        .ok()
        .and_then(|ms| now.checked_add(ms))
        .ok_or_else(|| AlkError::InvalidArgument(format!("{what} {ms} overflows the clock")))
}

/// The expiry of an optional TTL (see [`after`]); `None` is no expiry.
pub fn expiry(ttl_ms: Option<u64>, now: i64) -> AlkResult<Option<i64>> {
    ttl_ms.map(|ttl| after("ttl-ms", ttl, now)).transpose()
}

/// The instant when the epoch-ms moment `at` arrives, by a clock reading
/// `now` (at once when it has passed).
pub fn instant_at(at: i64, now: i64) -> Instant {
    Instant::now() + Duration::from_millis(at.saturating_sub(now).max(0) as u64)
}

/// The deadline of a wait of `timeout_ms` from now; absurdly long timeouts
/// are capped at a year (a guest cannot overflow the host's clock).
pub fn wait_deadline(timeout_ms: u64) -> Instant {
    let timeout = Duration::from_millis(timeout_ms.min(365 * 24 * 3600 * 1000));
    Instant::now() + timeout
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_refuses_zero_and_overflow_and_adds_otherwise() {
        assert_eq!(after("ttl-ms", 5, 100), Ok(105));
        assert!(
            matches!(after("ttl-ms", 0, 100), Err(AlkError::InvalidArgument(m)) if m.contains("ttl-ms is 0"))
        );
        assert!(matches!(
            after("ttl-ms", u64::MAX, 0),
            Err(AlkError::InvalidArgument(_))
        ));
        assert!(matches!(
            after("ttl-ms", i64::MAX as u64, 1),
            Err(AlkError::InvalidArgument(_))
        ));
        assert_eq!(expiry(None, 7), Ok(None));
        assert_eq!(expiry(Some(3), 7), Ok(Some(10)));
    }
}
