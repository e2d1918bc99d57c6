//! alk's database engine: every store of every host in one schema of a
//! PostgreSQL database, so hosts on many machines share queues, streams,
//! buckets and locks; waits are woken across machines by `LISTEN/NOTIFY`.
//!
//! The schema is `alk-postgres.v3` (`docs/formats/alk-postgres.v3.md`,
//! statements in [`sql`]). [`PostgresEngine::connect`] applies its
//! migrations at start and refuses a schema of a newer or foreign format
//! untouched.
//!
//! **Time.** The database's clock judges every expiry (keys, visibility
//! timeouts, locks). Hosts pass their own clock readings through the engine
//! seam; the engine measures how far the database's clock is from the
//! host's (at connect, then every minute) and moves every time it sends or
//! reads by that much. Hosts with skewed clocks therefore agree on when a
//! lock expires or a message is due, to within the round trip of the
//! measurement. A difference within the measurement's noise (the round
//! trip, at least [`SKEW_DEAD_BAND_MS`]) is not corrected: hosts whose
//! clocks agree keep judging by their own clocks exactly.

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use alk_store::kv::KvEngine;
use alk_store::lock::LockEngine;
use alk_store::queue::QueueEngine;
use alk_store::stream::StreamEngine;
use alk_store::wake::Wakes;
use alk_store::{AlkError, AlkResult, Engine};
use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use futures::FutureExt;
use tokio_postgres::NoTls;

mod kv;
mod lock;
mod queue;
mod schedule;
pub mod sql;
mod stream;
mod wake;

use sql::Sql;

/// The default schema.
pub const DEFAULT_SCHEMA: &str = "alk";

/// Connections each engine keeps at most, besides the wake connection.
pub const DEFAULT_POOL_SIZE: usize = 8;

/// How to reach the database, and where in it the stores live.
#[derive(Clone)]
pub struct PostgresOptions {
    config: tokio_postgres::Config,
    schema: String,
    pool_size: usize,
    connect_timeout: Duration,
}

impl std::fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("target", &target(&self.config))
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .finish()
    }
}

/// `url` with its passwords replaced by `***` (for messages): the one
/// after the user name, and any `password=` parameter.
pub fn redact(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let base = match base.split_once("://") {
        Some((scheme, rest)) => match rest.rfind('@') {
            Some(at) => match rest[..at].split_once(':') {
                Some((user, _)) => format!("{scheme}://{user}:***{}", &rest[at..]),
                None => base.to_string(),
            },
            None => base.to_string(),
        },
        None => base.to_string(),
    };
    match query {
        None => base,
        Some(q) => {
            let params: Vec<String> = q
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => p.to_string(),
                })
                .collect();
            format!("{base}?{}", params.join("&"))
        }
    }
}

/// Whether `store` names a Postgres database (rather than a data directory).
pub fn is_postgres_url(store: &str) -> bool {
    store.starts_with("postgres://") || store.starts_with("postgresql://")
}

impl PostgresOptions {
    /// Options from a `postgres://user:password@host:port/database` URL (any
    /// parameter libpq-style URLs take). alk's own parameters, removed before
    /// the URL reaches the client: `schema=<name>` (default `alk`) and
    /// `pool_size=<n>`. Errors never repeat the password.
    pub fn from_url(url: &str) -> AlkResult<PostgresOptions> {
        let bad = |why: String| {
            AlkError::InvalidArgument(format!(
                "{} is not a usable postgres URL: {why}",
                redact(url)
            ))
        };
        if !is_postgres_url(url) {
            return Err(bad("it must start with postgres:// or postgresql://".into()));
        }
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (url, None),
        };
        let mut schema = DEFAULT_SCHEMA.to_string();
        let mut pool_size = DEFAULT_POOL_SIZE;
        let mut kept = Vec::new();
        for pair in query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|p| !p.is_empty())
        {
            match pair.split_once('=') {
                Some(("schema", v)) => schema = v.to_string(),
                Some(("pool_size", v)) => {
                    pool_size = v
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=1000).contains(n))
                        .ok_or_else(|| {
                            bad(format!("pool_size {v:?} is not a number from 1 to 1000"))
                        })?
                }
                _ => kept.push(pair),
            }
        }
        sql::check_schema(&schema).map_err(bad)?;
        let client_url = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        let mut config: tokio_postgres::Config =
            client_url.parse().map_err(|e: tokio_postgres::Error| {
                // The client's parse errors quote the offending part at most,
                // never the password; redact anyway.
                bad(redact(&e.to_string()))
            })?;
        let connect_timeout = config
            .get_connect_timeout()
            .copied()
            .unwrap_or(Duration::from_secs(5));
        config.connect_timeout(connect_timeout);
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(30));
        config.keepalives_interval(Duration::from_secs(10));
        config.keepalives_retries(3);
        if config.get_application_name().is_none() {
            config.application_name("alk-host");
        }
        Ok(PostgresOptions {
            config,
            schema,
            pool_size,
            connect_timeout,
        })
    }

    /// Uses schema `name` (checked) instead of the URL's or the default.
    pub fn schema(mut self, name: &str) -> AlkResult<PostgresOptions> {
        sql::check_schema(name).map_err(AlkError::InvalidArgument)?;
        self.schema = name.to_string();
        Ok(self)
    }

    /// With `true`, a commit returns before the server has flushed it to
    /// disk (`synchronous_commit = off` for the engine's sessions): several
    /// times faster for small writes; a crash of the database server may
    /// lose the last commits, never consistency. A crash of the host loses
    /// nothing either way.
    pub fn relaxed(mut self, relaxed: bool) -> PostgresOptions {
        if relaxed {
            let setting = "-c synchronous_commit=off";
            let options = match self.config.get_options() {
                Some(o) if !o.is_empty() => format!("{o} {setting}"),
                _ => setting.to_string(),
            };
            self.config.options(&options);
        }
        self
    }

    /// Keeps at most `n` pooled connections (at least 1).
    pub fn pool_size(mut self, n: usize) -> PostgresOptions {
        self.pool_size = n.max(1);
        self
    }

    /// The schema the stores live in.
    pub fn schema_name(&self) -> &str {
        &self.schema
    }

    /// `host:port` (or the socket directory), for messages.
    pub fn target(&self) -> String {
        target(&self.config)
    }
}

fn target(config: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}

/// The engine-wide state every store handle shares.
pub(crate) struct Inner {
    pool: Pool,
    pub(crate) sql: Sql,
    pub(crate) clock: Arc<Clockwork>,
    target: String,
    pool_size: usize,
}

/// How far the database's clock is ahead of this host's, in milliseconds.
#[derive(Debug, Default)]
pub(crate) struct Clockwork(AtomicI64);

impl Clockwork {
    /// A host time as the database's clock reads it.
    pub(crate) fn to_db(&self, host_ms: i64) -> i64 {
        host_ms.saturating_add(self.0.load(Ordering::Relaxed))
    }

    /// A database time as this host's clock reads it.
    pub(crate) fn to_host(&self, db_ms: i64) -> i64 {
        db_ms.saturating_sub(self.0.load(Ordering::Relaxed))
    }

    /// Measures the offset on `client`: three readings, the one with the
    /// shortest round trip, against the midpoint of that round trip. An
    /// offset within the measurement's noise (the round trip, and at least
    /// [`SKEW_DEAD_BAND_MS`]) counts as none: hosts whose clocks agree (on
    /// one machine, or kept by NTP) then judge by exactly their own clocks,
    /// and only real skew is corrected.
    pub(crate) async fn measure(
        &self,
        client: &tokio_postgres::Client,
    ) -> Result<(), tokio_postgres::Error> {
        let mut best: Option<(i64, i64)> = None;
        for _ in 0..3 {
            let before = host_now();
            let row = client.query_one(sql::DB_NOW, &[]).await?;
            let after = host_now();
            let db: i64 = row.try_get(0)?;
            let rtt = after - before;
            if best.is_none_or(|(r, _)| rtt < r) {
                best = Some((rtt, db - (before + after) / 2));
            }
        }
        let (rtt, offset) = best.unwrap_or((0, 0));
        let offset = if offset.abs() <= rtt.max(SKEW_DEAD_BAND_MS) {
            0
        } else {
            offset
        };
        self.0.store(offset, Ordering::Relaxed);
        Ok(())
    }
}

/// Clock differences up to this many milliseconds are not corrected.
pub const SKEW_DEAD_BAND_MS: i64 = 25;

fn host_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
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

/// alk's stores in one schema of a PostgreSQL database.
#[derive(Clone)]
pub struct PostgresEngine {
    inner: Arc<Inner>,
    wakes: Wakes,
    describe: String,
}

impl std::fmt::Debug for PostgresEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe)
    }
}

impl PostgresEngine {
    /// Connects, applies the schema's migrations (refusing a newer or
    /// foreign schema untouched) and starts the wake connection.
    ///
    /// Errors: `busy` "cannot reach postgres at host:port: …" when the
    /// server does not answer or refuses the login; `store-setup` for a
    /// schema this engine must not touch.
    pub async fn connect(options: PostgresOptions) -> AlkResult<PostgresEngine> {
        let target = options.target();
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
        let inner = Arc::new(Inner {
            pool,
            sql: Sql::for_schema(&options.schema),
            clock: Arc::new(Clockwork::default()),
            target: target.clone(),
            pool_size: options.pool_size,
        });
        {
            let mut conn = inner.conn().await?;
            migrate(&inner, &mut conn, &options.schema).await?;
            inner
                .clock
                .measure(&conn)
                .await
                .map_err(|e| inner.error(Fail::Pg(e)))?;
        }
        let wakes = wake::start(
            options.config.clone(),
            sql::channel(&options.schema),
            inner.clock.clone(),
            target.clone(),
        )
        .await
        .map_err(|e| {
            AlkError::Busy(format!(
                "cannot reach postgres at {target}: {}",
                describe_pg(&e)
            ))
        })?;
        let db = options
            .config
            .get_dbname()
            .unwrap_or("postgres")
            .to_string();
        Ok(PostgresEngine {
            inner,
            wakes,
            describe: format!("postgres {target}/{db} schema {}", options.schema),
        })
    }

    /// Connects to `url` (see [`PostgresOptions::from_url`]).
    pub async fn connect_url(url: &str) -> AlkResult<PostgresEngine> {
        PostgresEngine::connect(PostgresOptions::from_url(url)?).await
    }
}

/// Brings the schema to [`sql::VERSION`] in one transaction, serialized
/// with other starting engines; refuses (and changes nothing in) a schema
/// that holds anything but alk's tables, or alk's tables of a newer
/// version.
async fn migrate(inner: &Inner, conn: &mut Conn, schema: &str) -> AlkResult<()> {
    let place =
        || std::path::PathBuf::from(format!("postgres://{}/ schema {schema}", inner.target));
    let refuse = |found: Option<String>, message: String| AlkError::StoreSetup {
        path: place(),
        found,
        supported: sql::SUPPORTED,
        message,
    };
    let result: Result<Result<(), AlkError>, Fail> = async {
        let tx = conn.transaction().await?;
        tx.execute(sql::MIGRATE_LOCK, &[&format!("alk-migrate:{schema}")])
            .await?;
        let relations: Vec<String> = tx
            .query(sql::SCHEMA_RELATIONS, &[&schema])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let version = if relations.is_empty() {
            0
        } else if !relations.iter().any(|r| r == "meta") {
            return Ok(Err(refuse(
                None,
                format!(
                    "the schema holds other tables ({}) and no alk marker; choose another schema (?schema=…)",
                    relations.join(", ")
                ),
            )));
        } else {
            let rows = tx.query(&inner.sql.get(sql::READ_META), &[]).await?;
            let get = |k: &str| {
                rows.iter()
                    .find(|r| r.try_get::<_, Option<&str>>(0).ok().flatten() == Some(k))
                    .and_then(|r| r.try_get::<_, Option<String>>(1).ok().flatten())
            };
            let format = get("format");
            let version = get("version");
            match (format.as_deref(), version.as_deref().map(str::parse::<i64>)) {
                (Some(sql::FORMAT), Some(Ok(v))) if (1..=sql::VERSION).contains(&v) => v,
                (Some(sql::FORMAT), Some(Ok(v))) if v > sql::VERSION => {
                    return Ok(Err(refuse(
                        Some(format!("{}.v{v}", sql::FORMAT)),
                        "it was made by a newer alk; upgrade this host".into(),
                    )));
                }
                (f, _) => {
                    return Ok(Err(refuse(
                        f.map(|f| format!("{f}.v{}", version.as_deref().unwrap_or("?"))),
                        "the schema's marker is not alk's; choose another schema (?schema=…)".into(),
                    )));
                }
            }
        };
        if version < sql::VERSION {
            // Only when missing: creating a schema needs a privilege on the
            // database that the owner of an existing schema may lack.
            if tx.query_opt(sql::SCHEMA_EXISTS, &[&schema]).await?.is_none() {
                tx.batch_execute(&format!("CREATE SCHEMA {schema}")).await?;
            }
            for (i, step) in sql::MIGRATIONS.iter().enumerate().skip(version as usize) {
                tx.batch_execute(&inner.sql.get(step)).await?;
                if i > 0 {
                    tx.execute(&inner.sql.get(sql::SET_VERSION), &[&(i as i64 + 1).to_string()])
                        .await?;
                }
            }
        }
        tx.commit().await?;
        Ok(Ok(()))
    }
    .await;
    match result {
        Ok(r) => r,
        Err(Fail::Pg(e)) if e.code().is_some_and(|c| c.code() == "42501") => Err(refuse(
            None,
            format!("not allowed to create or read it: {}", describe_pg(&e)),
        )),
        // A `meta` table of another shape: not alk's.
        Err(Fail::Pg(e))
            if e.code().is_some_and(|c| {
                matches!(c.code(), "42703" | "42804" | "42883" | "22P02" | "42846")
            }) =>
        {
            Err(refuse(
                None,
                format!(
                    "its meta table is not alk's ({}); choose another schema (?schema=…)",
                    describe_pg(&e)
                ),
            ))
        }
        Err(e) => Err(inner.error(e)),
    }
}

#[async_trait]
impl Engine for PostgresEngine {
    async fn bucket(&self, name: &str) -> AlkResult<Arc<dyn KvEngine>> {
        Ok(Arc::new(kv::PgBucket::new(self.inner.clone(), name)))
    }

    async fn queue(&self, name: &str) -> AlkResult<Arc<dyn QueueEngine>> {
        Ok(Arc::new(queue::PgQueue::new(self.inner.clone(), name)))
    }

    async fn streams(&self) -> AlkResult<Arc<dyn StreamEngine>> {
        Ok(Arc::new(stream::PgStreams::new(self.inner.clone())))
    }

    async fn locks(&self) -> AlkResult<Arc<dyn LockEngine>> {
        Ok(Arc::new(lock::PgLocks::new(self.inner.clone())))
    }

    async fn schedules(&self) -> AlkResult<Arc<dyn alk_store::schedule::ScheduleEngine>> {
        Ok(Arc::new(schedule::PgSchedules::new(self.inner.clone())))
    }

    fn wakes(&self) -> AlkResult<Wakes> {
        Ok(self.wakes.clone())
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    async fn flush(&self) {
        // Signals wait behind at most one round trip; a server that does
        // not answer does not hold the host's exit for long.
        let _ = tokio::time::timeout(Duration::from_secs(2), self.wakes.flush()).await;
    }
}

#[cfg(test)]
mod options_tests {
    use super::*;

    #[test]
    fn urls_lose_their_password_in_messages() {
        assert_eq!(
            redact("postgres://u:s3cret@h:5432/db?schema=x"),
            "postgres://u:***@h:5432/db?schema=x"
        );
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
        assert_eq!(
            redact("postgres://u@h/db?password=s3cret&pool_size=0"),
            "postgres://u@h/db?password=***&pool_size=0"
        );
        let e =
            PostgresOptions::from_url("postgres://u@h/db?password=s3cret&pool_size=0").unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
        let e = PostgresOptions::from_url("postgres://u:s3cret@h:5432/db?schema=Bad").unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
        let e = PostgresOptions::from_url("postgres://u:s3cret@h:notaport/db").unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    #[test]
    fn alk_parameters_are_taken_out_of_the_url() {
        let o = PostgresOptions::from_url(
            "postgres://u:p@db.example:6543/app?schema=tenant_1&pool_size=3&sslmode=disable",
        )
        .unwrap();
        assert_eq!(o.schema_name(), "tenant_1");
        assert_eq!(o.pool_size, 3);
        assert_eq!(o.target(), "db.example:6543");
        assert!(PostgresOptions::from_url("postgres://h/db?pool_size=0").is_err());
        assert!(PostgresOptions::from_url("mysql://h/db").is_err());
    }
}

#[cfg(test)]
mod tests;
