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

use rand::Rng;
use turso::Connection;

use super::gate::{Ended, Group, MAX_GROUP, Turn, WriteGuard};
use super::open::{Format, Handle, Store};
use alk_store::{AlkError, AlkResult};
use std::sync::Arc;

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

/// Whether a failed operation can have committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
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
        mut op: impl FnMut(Connection) -> OpFuture<'a, T> + Send,
    ) -> AlkResult<T> {
        self.run_in(move |conn, _| op(conn)).await
    }

    /// [`Store::run`], giving `op` the format of the file as opened by the
    /// database it runs on, for operations whose statements depend on it.
    pub(crate) async fn run_in<'a, T>(
        &self,
        mut op: impl FnMut(Connection, &'static Format) -> OpFuture<'a, T> + Send,
    ) -> AlkResult<T> {
        let policy = *self.policy();
        let deadline = tokio::time::Instant::now() + policy.deadline;
        let mut pause = policy.initial_backoff;
        loop {
            let handle = self.handle().await?;
            let format = self.format_of(&handle);
            let attempt = alk_store::panic::contain(async {
                let conn = self.check_out(&handle).await?;
                let result = op(conn.clone(), format).await;
                self.check_in(&handle, conn);
                result
            })
            .await;
            let attempt = match attempt {
                Ok(result) => result,
                Err(panic) => {
                    return Err(self.engine_panicked(&handle, &panic, Outcome::NotApplied));
                }
            };
            drop(handle);
            match attempt {
                Ok(v) => return Ok(v),
                Err(Failure::Alk(e)) => return Err(e),
                Err(Failure::Db(e)) if is_retryable(&e) => {
                    self.back_off(deadline, &mut pause, &e.to_string()).await?
                }
                Err(Failure::Db(e)) => return Err(self.engine_error(e)),
            }
        }
    }

    /// Runs `op`, one writing statement, through the store's write gate;
    /// see [`Store::run_immediate`].
    pub(crate) async fn run_write<'a, T>(
        &self,
        mut op: impl FnMut(Connection) -> OpFuture<'a, T> + Send,
    ) -> AlkResult<T> {
        self.write(true, move |conn, _| op(conn)).await
    }

    /// [`Store::run_write`], giving `op` the file's format (see
    /// [`Store::run_in`]).
    pub(crate) async fn run_write_in<'a, T>(
        &self,
        op: impl FnMut(Connection, &'static Format) -> OpFuture<'a, T> + Send,
    ) -> AlkResult<T> {
        self.write(true, op).await
    }

    /// Runs `op` inside a `BEGIN IMMEDIATE` transaction, through the
    /// store's write gate (see [`super::gate`]): it applies entirely or not
    /// at all, and the call returns once it is committed. When other
    /// writers of this process queue behind it, its transaction is shared
    /// with theirs and committed once for all (group commit); its own
    /// failures (a refusal, or an engine error) never apply any of its work.
    /// Contention is retried as in [`Store::run`].
    pub(crate) async fn run_immediate<'a, T: Send + 'a>(
        &self,
        mut op: impl FnMut(Connection) -> OpFuture<'a, T> + Send,
    ) -> AlkResult<T> {
        self.write(false, move |conn, _| op(conn)).await
    }

    /// [`Store::run_immediate`], giving `op` the file's format (see
    /// [`Store::run_in`]).
    pub(crate) async fn run_immediate_in<'a, T: Send + 'a>(
        &self,
        op: impl FnMut(Connection, &'static Format) -> OpFuture<'a, T> + Send,
    ) -> AlkResult<T> {
        self.write(false, op).await
    }

    /// A write through the gate. `one_statement`: `op` is a single
    /// statement, which commits on its own when nobody else is queued (no
    /// `BEGIN`/`COMMIT` to run for it).
    async fn write<'a, T>(
        &self,
        one_statement: bool,
        mut op: impl FnMut(Connection, &'static Format) -> OpFuture<'a, T> + Send,
    ) -> AlkResult<T> {
        let policy = *self.policy();
        let deadline = tokio::time::Instant::now() + policy.deadline;
        let mut pause = policy.initial_backoff;
        loop {
            let handle = self.handle().await?;
            let format = self.format_of(&handle);
            let mut turn = handle.gate.queue(deadline, self.path()).await?;
            if turn
                .as_ref()
                .is_some_and(|g| g.durability != self.durability())
            {
                // Writers of another durability do not share a commit.
                let g = turn.take().expect("checked");
                self.end_group(&handle, g, true).await;
            }
            if turn.is_none() && one_statement && handle.gate.waiting() == 0 {
                // Alone: the statement commits on its own, under the lock.
                let flock = handle.gate.lock(deadline, self.path()).await?;
                let attempt = alk_store::panic::contain(async {
                    let conn = self.check_out(&handle).await?;
                    let result = op(conn.clone(), format).await;
                    self.check_in(&handle, conn);
                    result
                })
                .await;
                drop(flock);
                drop(turn);
                match attempt {
                    // The statement commits on its own: the panic may have
                    // come before or after its commit.
                    Err(panic) => {
                        return Err(self.engine_panicked(&handle, &panic, Outcome::Unknown));
                    }
                    Ok(Ok(v)) => {
                        handle
                            .commits
                            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                        return Ok(v);
                    }
                    Ok(Err(Failure::Alk(e))) => return Err(e),
                    Ok(Err(Failure::Db(e))) if is_retryable(&e) => {
                        self.back_off(deadline, &mut pause, &e.to_string()).await?;
                        continue;
                    }
                    // The statement's own commit writes and syncs the log:
                    // an I/O failure may come after the commit record.
                    Ok(Err(Failure::Db(e))) if matches!(e, turso::Error::IoError(..)) => {
                        return Err(self.outcome_unknown(&e.to_string()));
                    }
                    Ok(Err(Failure::Db(e))) => return Err(self.engine_error(e)),
                }
            }
            if turn.is_none() {
                match self.begin_group(&handle, deadline).await {
                    Ok(g) => *turn = Some(g),
                    Err(Failure::Db(e)) if is_retryable(&e) => {
                        drop(turn);
                        self.back_off(deadline, &mut pause, &e.to_string()).await?;
                        continue;
                    }
                    Err(Failure::Db(e)) => return Err(self.engine_error(e)),
                    Err(Failure::Alk(e)) => return Err(e),
                }
            }
            let group = turn.as_mut().expect("begun above");
            // Joining other writers' transaction: a savepoint, so that a
            // refusal undoes only this writer's work.
            let shared = group.len() > 0;
            let conn = group.conn.clone();
            let attempt = alk_store::panic::contain(async {
                if shared {
                    exec(&conn, "SAVEPOINT alk_writer", ()).await?;
                }
                let result = op(conn.clone(), format).await;
                if shared {
                    if let Err(Failure::Alk(_)) = &result {
                        exec(&conn, "ROLLBACK TO alk_writer", ()).await?;
                    }
                    if !matches!(result, Err(Failure::Db(_))) {
                        exec(&conn, "RELEASE alk_writer", ()).await?;
                    }
                }
                result
            })
            .await;
            match attempt {
                Err(panic) => {
                    if let Some(g) = turn.take() {
                        g.finish(Ended::Failed(AlkError::Internal(format!(
                            "the storage engine failed on {} before the commit ({panic}); nothing of this write was applied",
                            self.path().display()
                        ))));
                    }
                    drop(turn);
                    // Inside the open transaction, before its commit: the
                    // database is closed with it uncommitted.
                    return Err(self.engine_panicked(&handle, &panic, Outcome::NotApplied));
                }
                Ok(Err(Failure::Db(e))) => {
                    // The transaction is in doubt: roll it back for everyone
                    // in it; they run again.
                    let g = turn.take().expect("open");
                    self.end_group(&handle, g, false).await;
                    drop(turn);
                    if is_retryable(&e) {
                        self.back_off(deadline, &mut pause, &e.to_string()).await?;
                        continue;
                    }
                    return Err(self.engine_error(e));
                }
                Ok(Err(Failure::Alk(e))) => {
                    if shared {
                        self.pass_on(&handle, turn).await;
                    } else {
                        // Only this writer's work was in it: undo it all.
                        let g = turn.take().expect("open");
                        self.end_group(&handle, g, false).await;
                    }
                    return Err(e);
                }
                Ok(Ok(v)) => {
                    let ended = turn.as_mut().expect("open").join();
                    self.pass_on(&handle, turn).await;
                    match ended.await {
                        Ok(Ended::Committed) => return Ok(v),
                        Ok(Ended::Retry) => {
                            self.back_off(deadline, &mut pause, "a shared commit failed")
                                .await?
                        }
                        Ok(Ended::Failed(e)) => return Err(e),
                        Err(_) => {
                            return Err(AlkError::Internal(
                                "the write was abandoned before its commit".into(),
                            ));
                        }
                    }
                }
            }
        }
    }

    /// Starts a group transaction: the cross-process lock, a connection,
    /// `BEGIN IMMEDIATE`.
    async fn begin_group(
        &self,
        handle: &Arc<Handle>,
        deadline: tokio::time::Instant,
    ) -> Result<Group, Failure> {
        let flock = handle.gate.lock(deadline, self.path()).await?;
        let conn = self.check_out(handle).await?;
        if let Err(e) = exec(&conn, "BEGIN IMMEDIATE", ()).await {
            self.check_in(handle, conn);
            return Err(Failure::Db(e));
        }
        Ok(Group::new(conn, self.durability(), flock))
    }

    /// After a writer's work: leaves the group open for the writers queued
    /// behind (with a committer on its way, in case they give up), or
    /// commits it.
    async fn pass_on(&self, handle: &Arc<Handle>, mut turn: Turn) {
        let group = turn.as_mut().expect("open");
        if handle.gate.waiting() > 0 && group.len() < MAX_GROUP {
            if group.needs_committer() {
                let (store, handle) = (self.clone(), handle.clone());
                tokio::spawn(async move {
                    let mut turn = handle.gate.committer_turn().await;
                    if let Some(g) = turn.take() {
                        store.end_group(&handle, g, true).await;
                    }
                });
            }
            return;
        }
        let g = turn.take().expect("open");
        self.end_group(handle, g, true).await;
    }

    /// Commits (or rolls back) a group and tells its members.
    async fn end_group(&self, handle: &Arc<Handle>, group: Group, commit: bool) {
        let sql = if commit { "COMMIT" } else { "ROLLBACK" };
        let result = alk_store::panic::contain(exec(&group.conn, sql, ())).await;
        let ended = match result {
            Ok(Ok(_)) if commit => {
                handle
                    .commits
                    .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                Ended::Committed
            }
            Ok(Ok(_)) => Ended::Retry,
            Ok(Err(e)) => {
                rollback(&group.conn, self.path()).await;
                if is_retryable(&e) {
                    Ended::Retry
                } else if commit {
                    // A failure inside COMMIT (an I/O error writing or
                    // syncing the log) may come after the commit record
                    // reached the file.
                    Ended::Failed(self.outcome_unknown(&e.to_string()))
                } else {
                    Ended::Failed(self.engine_error(e))
                }
            }
            Err(panic) => {
                self.discard(handle);
                Ended::Failed(self.outcome_unknown(&panic))
            }
        };
        if !matches!(ended, Ended::Failed(_)) {
            self.check_in(handle, group.conn.clone());
        }
        group.finish(ended);
    }

    /// Sleeps the next backoff step, or gives up with `busy` past the
    /// deadline.
    async fn back_off(
        &self,
        deadline: tokio::time::Instant,
        pause: &mut Duration,
        why: &str,
    ) -> AlkResult<()> {
        if tokio::time::Instant::now() >= deadline {
            return Err(AlkError::Busy(format!(
                "{} stayed locked by other writers for {:?}: {why}",
                self.path().display(),
                self.policy().deadline
            )));
        }
        // Full jitter between half and all of the pause spreads competing
        // processes apart.
        let nanos = pause.as_nanos() as u64;
        let jittered = rand::rng().random_range(nanos / 2..=nanos.max(1));
        tokio::time::sleep(Duration::from_nanos(jittered)).await;
        *pause = (*pause * 2).min(self.policy().max_backoff);
        Ok(())
    }

    /// The error of an engine panic; the database it happened in is closed.
    /// `outcome`: whether the operation can have committed.
    fn engine_panicked(&self, handle: &Arc<Handle>, panic: &str, outcome: Outcome) -> AlkError {
        self.discard(handle);
        match outcome {
            Outcome::NotApplied => AlkError::Internal(format!(
                "the storage engine failed on {} ({panic}); the operation was not applied and the store will be reopened at its next use",
                self.path().display(),
            )),
            Outcome::Unknown => self.outcome_unknown(panic),
        }
    }

    /// The error of a write whose commit failed in a way that does not say
    /// whether it took effect: the guest is told so, never "not applied".
    pub(crate) fn outcome_unknown(&self, why: &str) -> AlkError {
        let lower = why.to_ascii_lowercase();
        let full = if lower.contains("no space left") || lower.contains("disk quota") {
            "no space left on the device: "
        } else {
            ""
        };
        AlkError::Internal(format!(
            "the storage engine failed on {} while committing ({full}{why}); the outcome is unknown: the write may or may not have been applied, read the store before retrying it",
            self.path().display(),
        ))
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
            // A row the format does not allow (a NULL or a wrongly typed
            // value) lands here too: the text names the store.
            AlkError::Internal(format!("{}: {text}", self.path().display()))
        }
    }

    /// Begins a `BEGIN IMMEDIATE` transaction that outlives this call (a
    /// guest's stream transaction): its connection, the database it belongs
    /// to (which stays open while the connection is in use), and the write
    /// gate, held alone until the transaction ends.
    pub(crate) async fn begin(&self) -> AlkResult<(Arc<Handle>, Connection, WriteGuard)> {
        let handle = self.handle().await?;
        let deadline = tokio::time::Instant::now() + self.policy().deadline;
        let mut turn = handle.gate.queue(deadline, self.path()).await?;
        if let Some(g) = turn.take() {
            self.end_group(&handle, g, true).await;
        }
        let flock = handle.gate.lock(deadline, self.path()).await?;
        let conn = self
            .run(|conn: Connection| {
                Box::pin(async move {
                    exec(&conn, "BEGIN IMMEDIATE", ()).await?;
                    Ok(conn)
                })
            })
            .await?;
        Ok((handle, conn, WriteGuard::new(turn, flock)))
    }
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

/// Column `i` of `row` as text; `None` for anything else.
pub(crate) fn text_or_null(row: &turso::Row, i: usize) -> Result<Option<String>, Failure> {
    Ok(match row.get_value(i)? {
        turso::Value::Text(t) => Some(t),
        _ => None,
    })
}
