//! The pool and how every call runs on it: the engine-wide state each
//! store handle shares ([`Inner`]), the guard that keeps a connection left
//! inside a transaction out of the pool ([`Conn`], [`Tx`]), running a call
//! with its retries ([`Inner::run`]), and what a Postgres error becomes for
//! a guest ([`Fail`], [`Inner::error`]).

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use alk_store::{AlkError, AlkResult};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use futures::FutureExt;
use tokio_postgres::NoTls;

use crate::PostgresOptions;
use crate::clock::Clockwork;
use crate::sql::Sql;

/// The engine-wide state every store handle shares.
pub(crate) struct Inner {
    pool: Pool,
    pub(crate) sql: Sql,
    pub(crate) clock: Arc<Clockwork>,
    pub(crate) target: String,
    pool_size: usize,
}

/// What went wrong inside an engine call.
pub(crate) enum Fail {
    Pg(tokio_postgres::Error),
    Alk(AlkError),
    /// A `COMMIT` whose outcome cannot be known: the connection broke (or
    /// the server ended the session) before it answered.
    CommitUnknown(tokio_postgres::Error),
}

/// Whether `e`, the failure of a `COMMIT`, leaves its outcome unknown: the
/// server did not answer with an error of the statement (which rolls the
/// transaction back), but the connection broke or the session was ended
/// (`FATAL`), possibly after the commit was made durable.
pub(crate) fn commit_outcome_unknown(e: &tokio_postgres::Error) -> bool {
    match e.as_db_error() {
        Some(db) => !matches!(db.severity(), "ERROR"),
        None => true,
    }
}

/// The text of a `COMMIT` whose outcome is unknown.
pub(crate) fn unknown_commit_text(target: &str, e: &tokio_postgres::Error) -> String {
    format!(
        "postgres at {target}: the connection failed during COMMIT ({}); whether the transaction committed is unknown: read back what it wrote before doing it again",
        describe_pg(e)
    )
}

/// A pooled connection that goes back to the pool only while its session
/// is known to be outside any transaction block.
///
/// A transaction begun on it ([`Conn::transaction`], [`Conn::begin`])
/// keeps it *open* until a `COMMIT` or `ROLLBACK` was awaited and the
/// server answered it without an error. Dropped while open — after a
/// failed statement, a failed or cancelled `COMMIT`/`ROLLBACK`, a dropped
/// future, a panic — the connection is closed instead (the server then
/// rolls back): its session may be in an aborted transaction, and every
/// later statement on it would fail with SQLSTATE 25P02. This costs
/// nothing on success (no statement on recycling); a failed transaction
/// costs a new connection. Statements outside a transaction need no care:
/// each ends its own implicit transaction on the server, whatever happens.
pub(crate) struct Conn {
    object: Option<Object>,
    open: bool,
}

impl Conn {
    fn new(object: Object) -> Conn {
        Conn {
            object: Some(object),
            open: false,
        }
    }

    /// Begins a transaction (`START TRANSACTION`), which ends with
    /// [`Tx::commit`] or [`Tx::rollback`]; dropped before, it closes this
    /// connection.
    pub(crate) async fn transaction(&mut self) -> Result<Tx<'_>, tokio_postgres::Error> {
        let Conn { object, open } = self;
        *open = true;
        let txn = object
            .as_mut()
            .expect("a connection is held until dropped")
            .transaction()
            .await?;
        Ok(Tx { txn, open })
    }

    /// `BEGIN` on the connection itself, for a transaction that spans
    /// calls; it ends with [`Conn::end`].
    pub(crate) async fn begin(&mut self) -> Result<(), tokio_postgres::Error> {
        self.open = true;
        self.batch_execute("BEGIN").await
    }

    /// Ends the transaction of [`Conn::begin`] with `how` (`COMMIT` or
    /// `ROLLBACK`); the connection is clean again only when the server
    /// answered without an error.
    pub(crate) async fn end(&mut self, how: &str) -> Result<(), tokio_postgres::Error> {
        self.batch_execute(how).await?;
        self.open = false;
        Ok(())
    }
}

impl Deref for Conn {
    type Target = Object;

    fn deref(&self) -> &Object {
        self.object
            .as_ref()
            .expect("a connection is held until dropped")
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(object) = self.object.take()
            && self.open
        {
            // Out of the pool for good; dropping it closes the connection.
            drop(Object::take(object));
        }
    }
}

/// A transaction on a [`Conn`]; statements run on it through `Deref`
/// (`&*tx` where a [`deadpool_postgres::GenericClient`] is expected).
pub(crate) struct Tx<'a> {
    txn: deadpool_postgres::Transaction<'a>,
    open: &'a mut bool,
}

impl<'a> Tx<'a> {
    /// `COMMIT`. A server's error (a cancelled `COMMIT` among them) means
    /// nothing was committed; a broken connection means the outcome is
    /// unknown ([`Fail::CommitUnknown`]).
    pub(crate) async fn commit(self) -> Result<(), Fail> {
        let Tx { txn, open } = self;
        match txn.commit().await {
            Ok(()) => {
                *open = false;
                Ok(())
            }
            Err(e) if commit_outcome_unknown(&e) => Err(Fail::CommitUnknown(e)),
            Err(e) => Err(Fail::Pg(e)),
        }
    }

    /// `ROLLBACK`.
    pub(crate) async fn rollback(self) -> Result<(), Fail> {
        let Tx { txn, open } = self;
        txn.rollback().await?;
        *open = false;
        Ok(())
    }
}

impl<'a> Deref for Tx<'a> {
    type Target = deadpool_postgres::Transaction<'a>;

    fn deref(&self) -> &deadpool_postgres::Transaction<'a> {
        &self.txn
    }
}

impl From<tokio_postgres::Error> for Fail {
    fn from(e: tokio_postgres::Error) -> Fail {
        Fail::Pg(e)
    }
}

impl From<AlkError> for Fail {
    fn from(e: AlkError) -> Fail {
        Fail::Alk(e)
    }
}

/// SQLSTATEs after which the statement was rolled back and may simply run
/// again: serialization failure, deadlock.
fn retryable(e: &Fail) -> bool {
    matches!(e, Fail::Pg(e) if e.code().is_some_and(|c| matches!(c.code(), "40001" | "40P01")))
}

/// How many times a statement rolled back by the server is run again.
const RETRIES: u32 = 5;

impl Inner {
    /// The pool of `options` (its connections are made when first needed)
    /// and the state around it; no clock offset until one is measured.
    pub(crate) fn new(options: &PostgresOptions) -> AlkResult<Inner> {
        let manager = Manager::from_config(
            options.config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(10)))
            .create_timeout(Some(options.connect_timeout + Duration::from_secs(1)))
            .recycle_timeout(Some(Duration::from_secs(5)))
            .build()
            .map_err(|e| AlkError::Internal(format!("postgres connection pool: {e}")))?;
        Ok(Inner {
            pool,
            sql: Sql::for_schema(&options.schema),
            clock: Arc::new(Clockwork::default()),
            target: options.target(),
            pool_size: options.pool_size,
        })
    }

    /// A pooled connection, or `busy` saying why there is none.
    pub(crate) async fn conn(&self) -> AlkResult<Conn> {
        use deadpool_postgres::PoolError;
        self.pool.get().await.map(Conn::new).map_err(|e| match e {
            PoolError::Backend(e) => AlkError::Busy(format!(
                "cannot reach postgres at {}: {}",
                self.target,
                describe_pg(&e)
            )),
            PoolError::Timeout(_) => AlkError::Busy(format!(
                "no connection to postgres at {} became free in time (all {} in use, or the server does not answer)",
                self.target, self.pool_size
            )),
            other => AlkError::Internal(format!("postgres connection pool: {other}")),
        })
    }

    /// The error a guest sees for `e`: `busy` for what passes (lost
    /// connection, server shutting down, contention, full disk, a statement
    /// cancelled by `statement_timeout` or an operator — also inside a
    /// transaction, whose later statements then fail with 25P02, or at its
    /// `COMMIT`, which then did not commit),
    /// `internal` for the rest, and for a `COMMIT` whose outcome is unknown
    /// (its text says so).
    pub(crate) fn error(&self, e: Fail) -> AlkError {
        match e {
            Fail::Alk(e) => e,
            Fail::CommitUnknown(e) => AlkError::Internal(unknown_commit_text(&self.target, &e)),
            Fail::Pg(e) => {
                let transient = match e.code() {
                    Some(code) => {
                        let c = code.code();
                        c.starts_with("08")
                            || c.starts_with("53")
                            || c.starts_with("57P")
                            || matches!(c, "40001" | "40P01" | "55P03" | "57014")
                            // An earlier failure aborted this transaction
                            // (a connection is never handed out in one):
                            // a cancellation the client did not hear of,
                            // reported at the `Sync` of a statement's
                            // preparation, which tokio-postgres does not
                            // read. Nothing was applied.
                            || c == "25P02"
                    }
                    None => {
                        e.is_closed()
                            || std::error::Error::source(&e)
                                .is_some_and(|s| s.is::<std::io::Error>())
                    }
                };
                let text = format!("postgres at {}: {}", self.target, describe_pg(&e));
                // The connection broke before the server answered: a
                // statement that writes may have committed on the server.
                let lost = e.code().is_none_or(|c| c.code().starts_with("08"));
                if transient && lost {
                    AlkError::Busy(format!(
                        "{text}; the connection was lost before the server answered, so the outcome of a write in flight is unknown (it may have been applied: read before retrying it)"
                    ))
                } else if transient {
                    AlkError::Busy(format!("{text}; retry"))
                } else {
                    AlkError::Internal(text)
                }
            }
        }
    }

    /// Runs `op` on a pooled connection (the future owns it and gives it
    /// back to the pool when done, or closes it when a transaction on it
    /// did not end cleanly: see [`Conn`]); again, a few times, when the
    /// server rolled it back for a deadlock or serialization failure.
    pub(crate) async fn run<'a, T, F>(&self, mut op: F) -> AlkResult<T>
    where
        F: FnMut(Conn) -> futures::future::BoxFuture<'a, Result<T, Fail>>,
    {
        let mut tries = 0;
        loop {
            let conn = self.conn().await?;
            // A panic inside the client (or a statement's decoding) fails
            // this call, not the host; the connection it held is dropped
            // (closed, when a transaction was open on it).
            let outcome = std::panic::AssertUnwindSafe(op(conn))
                .catch_unwind()
                .await
                .unwrap_or_else(|panic| {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    Err(Fail::Alk(AlkError::Internal(format!(
                        "the postgres client failed: {what}"
                    ))))
                });
            match outcome {
                Ok(v) => return Ok(v),
                Err(e) if retryable(&e) && tries < RETRIES => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(2 << tries)).await;
                }
                Err(e) => return Err(self.error(e)),
            }
        }
    }
}

/// A Postgres error as one line: the server's message and SQLSTATE, or
/// the client's.
pub(crate) fn describe_pg(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => {
            let mut s = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(inner) = source {
                let t = inner.to_string();
                if !s.contains(&t) {
                    s = format!("{s}: {t}");
                }
                source = inner.source();
            }
            s
        }
    }
}
