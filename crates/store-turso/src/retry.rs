//! Retrying contention: `Busy`/`BusySnapshot` retried with jittered
//! exponential backoff up to a deadline ([`RetryPolicy`]), and never a
//! busy-spinning wait; what the failure of one attempt is ([`Failure`]) and
//! which failures are retried; the statement helpers every operation uses.
//!
//! turso spins a CPU core while it waits for another process's write lock,
//! and its lock hand-off is unfair. The engine wait is therefore kept to a
//! few milliseconds (see `store.rs`) and the waiting happens here, in
//! `tokio::time::sleep`, which costs no CPU. The loops that run operations
//! and retry them are the store's own (`Store::run` and the writes, in
//! `store.rs`).

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use rand::Rng;

use alk_store::{AlkError, AlkResult};

use crate::conn::Connection;

/// How long and how often contended operations are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Give up with [`AlkError::Busy`] once this much time has passed.
    pub deadline: Duration,
    /// First pause between attempts; doubled after each attempt.
    pub initial_backoff: Duration,
    /// Longest pause between attempts.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            deadline: Duration::from_secs(5),
            initial_backoff: Duration::from_micros(500),
            max_backoff: Duration::from_millis(50),
        }
    }
}

impl RetryPolicy {
    /// Sleeps the next backoff step, or gives up with `busy` past the
    /// deadline (the error names `store`).
    pub(crate) async fn back_off(
        &self,
        store: &Path,
        deadline: tokio::time::Instant,
        pause: &mut Duration,
        why: &str,
    ) -> AlkResult<()> {
        if tokio::time::Instant::now() >= deadline {
            return Err(AlkError::Busy(format!(
                "{} stayed locked by other writers for {:?}: {why}",
                store.display(),
                self.deadline
            )));
        }
        // Full jitter between half and all of the pause spreads competing
        // processes apart.
        let nanos = pause.as_nanos() as u64;
        let jittered = rand::rng().random_range(nanos / 2..=nanos.max(1));
        tokio::time::sleep(Duration::from_nanos(jittered)).await;
        *pause = (*pause * 2).min(self.max_backoff);
        Ok(())
    }
}

/// Whether a failed operation can have committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It failed before anything it did could commit.
    NotApplied,
    /// It may have failed before or after its commit.
    Unknown,
}

/// The failure of one attempt: an engine error (maybe retryable) or a
/// domain error decided by the operation itself (never retried).
#[derive(Debug)]
pub enum Failure {
    /// The engine failed.
    Db(turso::Error),
    /// The operation decided the request is refused.
    Alk(AlkError),
}

impl From<turso::Error> for Failure {
    fn from(e: turso::Error) -> Self {
        Failure::Db(e)
    }
}

impl From<AlkError> for Failure {
    fn from(e: AlkError) -> Self {
        Failure::Alk(e)
    }
}

/// The future of one attempt of an operation.
pub type OpFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, Failure>> + Send + 'a>>;

/// Whether an engine error is contention, which is retried.
pub(crate) fn is_retryable(e: &turso::Error) -> bool {
    matches!(e, turso::Error::Busy(_) | turso::Error::BusySnapshot(_))
}

/// Rolls back whatever `conn` has open. A failure is logged and otherwise
/// ignored: the caller is already reporting a failure, and a connection
/// whose rollback failed is dropped with its transaction.
pub(crate) async fn rollback(conn: &Connection, store: &std::path::Path) {
    if let Err(e) = exec(conn, "ROLLBACK", ()).await {
        tracing::warn!(target: "alk", store = %store.display(), "rollback failed: {e}");
    }
}

/// Runs one of the store's own statements, prepared once per connection
/// and kept on it to run again (see [`crate::conn`]; preparing costs about
/// as much as running a point query; transaction control included:
/// `BEGIN IMMEDIATE` and `COMMIT` are not parsed again on every
/// transaction).
pub(crate) async fn exec(
    conn: &Connection,
    sql: &str,
    params: impl turso::IntoParams,
) -> Result<u64, turso::Error> {
    #[cfg(test)]
    STATEMENTS.with(|n| n.set(n.get() + 1));
    conn.run(sql, params).await
}

#[cfg(test)]
thread_local! {
    /// The store's own statements run on this thread (for tests that
    /// count what an operation costs).
    pub(crate) static STATEMENTS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Queries with one of the store's own statements, prepared once per
/// connection and kept on it. The caller drains the rows or drops them;
/// either way the statement is reset once they are gone.
pub(crate) async fn query(
    conn: &Connection,
    sql: &str,
    params: impl turso::IntoParams,
) -> Result<crate::conn::Rows, turso::Error> {
    #[cfg(test)]
    STATEMENTS.with(|n| n.set(n.get() + 1));
    conn.rows(sql, params).await
}

/// Column `i` of `row` as text; `None` for anything else.
pub(crate) fn text_or_null(row: &turso::Row, i: usize) -> Result<Option<String>, Failure> {
    Ok(match row.get_value(i)? {
        turso::Value::Text(t) => Some(t),
        _ => None,
    })
}
