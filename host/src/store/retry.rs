//! Running operations against a store: a pooled connection per attempt,
//! `Busy`/`BusySnapshot` retried with jittered exponential backoff up to a
//! deadline, and never a busy-spinning wait.
//!
//! turso spins a CPU core while it waits for another process's write lock,
//! and its lock hand-off is unfair. The engine wait is therefore kept to a
//! few milliseconds (see `open.rs`) and the waiting happens here, in
//! `tokio::time::sleep`, which costs no CPU. Every operation run here is a
//! single statement or one transaction that is rolled back on failure, so
//! running it again after `Busy` cannot apply it twice.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures::FutureExt as _;
use rand::Rng;
use turso::Connection;

use super::gate::WriteGuard;
use super::open::{Handle, Store};
use std::sync::Arc;
use crate::error::{AlkError, AlkResult};

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

fn is_retryable(e: &turso::Error) -> bool {
    matches!(e, turso::Error::Busy(_) | turso::Error::BusySnapshot(_))
}

impl Store {
    /// Runs `op` (which only reads) on a pooled connection, retrying
    /// contention.
    ///
    /// A panic inside the engine is contained here: the operation fails
    /// with `internal`, the store's database is closed (which releases its
    /// locks on the shared files, as if this process had exited) and the
    /// next operation opens it anew. Nothing of the failed operation is
    /// applied: it was one statement or one transaction that did not commit.
    pub(crate) async fn run<'a, T>(
        &self,
        op: impl FnMut(Connection) -> OpFuture<'a, T> + Send,
    ) -> AlkResult<T> {
        self.attempt(false, op).await
    }

    /// Runs `op`, one writing statement, through the store's write gate
    /// (see [`super::gate`]), retrying contention as [`Store::run`].
    pub(crate) async fn run_write<'a, T>(
        &self,
        op: impl FnMut(Connection) -> OpFuture<'a, T> + Send,
    ) -> AlkResult<T> {
        self.attempt(true, op).await
    }

    async fn attempt<'a, T>(
        &self,
        gated: bool,
        mut op: impl FnMut(Connection) -> OpFuture<'a, T> + Send,
    ) -> AlkResult<T> {
        let policy = *self.policy();
        let deadline = tokio::time::Instant::now() + policy.deadline;
        let mut pause = policy.initial_backoff;
        let mut turn: Option<(Arc<Handle>, WriteGuard)> = None;
        loop {
            let handle = self.handle().await?;
            if gated && turn.as_ref().is_none_or(|(h, _)| !Arc::ptr_eq(h, &handle)) {
                // A turn at a database that has since been replaced.
                drop(turn.take());
                let guard = handle.gate.enter(deadline, self.path()).await?;
                turn = Some((handle.clone(), guard));
            }
            let attempt = std::panic::AssertUnwindSafe(async {
                let conn = self.check_out(&handle).await?;
                let result = op(conn.clone()).await;
                self.check_in(&handle, conn);
                result
            })
            .catch_unwind()
            .await;
            let attempt = match attempt {
                Ok(result) => result,
                Err(panic) => {
                    drop(turn);
                    self.discard(&handle);
                    return Err(AlkError::Internal(format!(
                        "the storage engine failed on {} ({}); the operation was not applied and the store will be reopened at its next use",
                        self.path().display(),
                        super::open::panic_text(&*panic)
                    )));
                }
            };
            drop(handle);
            match attempt {
                Ok(v) => return Ok(v),
                Err(Failure::Alk(e)) => return Err(e),
                Err(Failure::Db(e)) if is_retryable(&e) => {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(AlkError::Busy(format!(
                            "{} stayed locked by other writers for {:?}: {e}",
                            self.path().display(),
                            policy.deadline
                        )));
                    }
                    // Full jitter between half and all of the pause spreads
                    // competing processes apart.
                    let nanos = pause.as_nanos() as u64;
                    let jittered = rand::rng().random_range(nanos / 2..=nanos.max(1));
                    tokio::time::sleep(Duration::from_nanos(jittered)).await;
                    pause = (pause * 2).min(policy.max_backoff);
                }
                Err(Failure::Db(e)) => return Err(self.engine_error(e)),
            }
        }
    }

    /// The error a non-retryable engine failure is reported as.
    pub(crate) fn engine_error(&self, e: turso::Error) -> AlkError {
        let text = e.to_string();
        let lower = text.to_ascii_lowercase();
        if lower.contains("no space left") || lower.contains("disk quota") {
            AlkError::Internal(format!(
                "{}: no space left on the device ({text}); nothing was written",
                self.path().display()
            ))
        } else if lower.contains("too many open files") {
            AlkError::Busy(format!(
                "{}: the host process is out of file descriptors ({text}); close stores or retry later",
                self.path().display()
            ))
        } else {
            AlkError::Internal(text)
        }
    }

    /// Begins a `BEGIN IMMEDIATE` transaction that outlives this call (a
    /// guest's stream transaction): its connection, the database it belongs
    /// to (which stays open while the connection is in use), and the write
    /// gate, held until the transaction ends.
    pub(crate) async fn begin(&self) -> AlkResult<(Arc<Handle>, Connection, WriteGuard)> {
        let handle = self.handle().await?;
        let deadline = tokio::time::Instant::now() + self.policy().deadline;
        let guard = handle.gate.enter(deadline, self.path()).await?;
        let conn = self
            .run(|conn: Connection| {
                Box::pin(async move {
                    exec(&conn, "BEGIN IMMEDIATE", ()).await?;
                    Ok(conn)
                })
            })
            .await?;
        Ok((handle, conn, guard))
    }

    /// Runs `op` inside `BEGIN IMMEDIATE` … `COMMIT` on a pooled connection,
    /// rolling back on any failure, and retrying contention as [`Store::run`].
    pub(crate) async fn run_immediate<'a, T: Send + 'a>(
        &self,
        mut op: impl FnMut(Connection) -> OpFuture<'a, T> + Send,
    ) -> AlkResult<T> {
        self.run_write(|conn: Connection| {
            let attempt = op(conn.clone());
            Box::pin(async move {
                exec(&conn, "BEGIN IMMEDIATE", ()).await?;
                match attempt.await {
                    Ok(v) => match exec(&conn, "COMMIT", ()).await {
                        Ok(_) => Ok(v),
                        Err(e) => {
                            let _ = exec(&conn, "ROLLBACK", ()).await;
                            Err(Failure::Db(e))
                        }
                    },
                    Err(e) => {
                        let _ = exec(&conn, "ROLLBACK", ()).await;
                        Err(e)
                    }
                }
            })
        })
        .await
    }
}

/// Runs one of the store's own statements, prepared once per connection
/// and reused (preparing costs about as much as running a point query;
/// transaction control included: `BEGIN IMMEDIATE` and `COMMIT` are not
/// parsed again on every transaction).
pub(crate) async fn exec(
    conn: &Connection,
    sql: &str,
    params: impl turso::IntoParams,
) -> Result<u64, turso::Error> {
    conn.prepare_cached(sql).await?.execute(params).await
}

/// Queries with one of the store's own statements, prepared once per
/// connection and reused. The caller drains the rows or drops them.
pub(crate) async fn query(
    conn: &Connection,
    sql: &str,
    params: impl turso::IntoParams,
) -> Result<turso::Rows, turso::Error> {
    conn.prepare_cached(sql).await?.query(params).await
}
