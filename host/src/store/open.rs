//! The one way a store file is opened.
//!
//! Every store file of every format is opened by [`open_store`] and only by
//! it. Opening a live store without turso's multi-process WAL mode corrupts
//! it, so this is the single place that builds a [`turso::Database`]; it
//! keeps one `Database` per file per process (a second handle on the same
//! file from the same process would bypass turso's in-process coordination),
//! and it runs the format-marker handshake before any provider table is
//! created, so a foreign or corrupt file is reported and left untouched.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use turso::{Builder, Connection, Database};

use super::retry::{OpFuture, RetryPolicy};

/// When a commit counts as done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Durability {
    /// Every commit is synced to disk before it returns (`synchronous =
    /// FULL`): nothing acknowledged is lost, even on power failure.
    #[default]
    Full,
    /// Commits return once written to the operating system (`synchronous =
    /// NORMAL`): nothing is lost when a process crashes or is killed, but
    /// the last commits before a power failure or kernel crash may be. The
    /// store stays consistent either way. Several times faster for small
    /// writes.
    Relaxed,
}

/// How stores are opened and operated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreOptions {
    /// Retrying contention.
    pub retry: RetryPolicy,
    /// When commits count as done.
    pub durability: Durability,
}

impl From<RetryPolicy> for StoreOptions {
    fn from(retry: RetryPolicy) -> Self {
        StoreOptions {
            retry,
            durability: Durability::default(),
        }
    }
}
use crate::error::{AlkError, AlkResult};

/// An on-disk format: the marker stored in `meta` and the DDL that creates
/// it. The DDL is idempotent (`IF NOT EXISTS`, `INSERT OR IGNORE`).
#[derive(Debug)]
pub struct Format {
    /// The value of the `('format', …)` row of the `meta` table.
    pub marker: &'static str,
    /// The complete DDL of the format, run on every open.
    pub ddl: &'static str,
}

/// How long one engine-level wait for the write lock may last before the
/// engine returns `Busy`. turso busy-spins a CPU core while it waits, so the
/// engine wait is kept short and longer waits happen in [`super::retry`],
/// which sleeps between attempts.
const ENGINE_BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(5);

/// An open store file: the process-wide database handle plus what callers
/// need to run operations on it.
#[derive(Clone)]
pub struct Store {
    db: Arc<Handle>,
    path: Arc<PathBuf>,
    policy: RetryPolicy,
    durability: Durability,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The process-wide handle of one store file: the database and its idle
/// connections.
///
/// Connections are kept and reused rather than opened per operation: turso
/// re-validates the shared WAL state every time a connection is created, and
/// that path resets reader slots of other processes' connections that are
/// being released at the same moment (the engine then panics with "reader
/// slot released by non-owner"). With reuse, a process creates a handful of
/// connections over its life instead of one per operation. A connection
/// serves one operation at a time and every statement is finished before it
/// goes back.
struct Handle {
    db: Database,
    /// Idle connections, one pool per durability (a connection's
    /// `synchronous` setting is fixed when it is made).
    idle: [std::sync::Mutex<Vec<Connection>>; 2],
}

/// Most idle connections kept per store file.
const MAX_IDLE: usize = 16;

/// Process-wide registry: one handle per store file.
static DATABASES: LazyLock<tokio::sync::Mutex<HashMap<PathBuf, Arc<Handle>>>> =
    LazyLock::new(Default::default);

/// Opens the store file at `path` in `format`, creating the file and its
/// directory when missing. Fails with [`AlkError::StoreSetup`] when the file
/// carries another format's marker, holds another program's tables, or is
/// not a database; in those cases nothing is written to it.
pub async fn open_store(
    path: &Path,
    format: &'static Format,
    opts: impl Into<StoreOptions>,
) -> AlkResult<Store> {
    let StoreOptions {
        retry: policy,
        durability,
    } = opts.into();
    let setup_err = |found: Option<String>, message: String| AlkError::StoreSetup {
        path: path.to_path_buf(),
        found,
        supported: format.marker,
        message,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| {
        setup_err(
            None,
            format!("cannot create directory {}: {e}", dir.display()),
        )
    })?;
    let dir = dir.canonicalize().map_err(|e| {
        setup_err(
            None,
            format!("cannot resolve directory {}: {e}", dir.display()),
        )
    })?;
    let key = dir.join(path.file_name().unwrap_or_default());

    let mut registry = DATABASES.lock().await;
    if let Some(db) = registry.get(&key) {
        return Ok(Store {
            db: db.clone(),
            path: Arc::new(key),
            policy,
            durability,
        });
    }
    let path_str = key
        .to_str()
        .ok_or_else(|| setup_err(None, "the path is not valid UTF-8".into()))?;
    let _open_lock = OpenLock::acquire(&key, policy)
        .await
        .map_err(|m| setup_err(None, m))?;
    let db = Builder::new_local(path_str)
        .experimental_multiprocess_wal(true)
        .build()
        .await
        .map_err(|e| setup_err(None, format!("cannot open: {e}")))?;
    let handle = Arc::new(Handle {
        db,
        idle: Default::default(),
    });
    let store = Store {
        db: handle,
        path: Arc::new(key.clone()),
        policy,
        durability,
    };
    store.handshake(format).await?;
    registry.insert(key, store.db.clone());
    Ok(store)
}

/// An exclusive lock on `<store>-openlock`, held while a process opens a
/// store file.
///
/// turso decides at open time whether a process is the only one using the
/// file (probe for an exclusive lock, then take a shared one). Two processes
/// opening at the same instant can both conclude they are alone, and the
/// "alone" path resets shared reader state that the other process is using
/// (seen as the engine panicking with "reader slot released by non-owner").
/// Holding this lock across the engine's open makes the probe and the lock
/// that follows it one step for every alk process.
struct OpenLock(std::fs::File);

impl OpenLock {
    async fn acquire(store: &Path, policy: RetryPolicy) -> Result<OpenLock, String> {
        let mut name = store.as_os_str().to_owned();
        name.push("-openlock");
        let lock_path = PathBuf::from(name);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| format!("cannot create {}: {e}", lock_path.display()))?;
        let start = std::time::Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(OpenLock(file)),
                Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < policy.deadline => {
                    // Opens take milliseconds; poll without blocking a thread.
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(format!(
                        "{} stayed locked by another opening process for {:?}",
                        lock_path.display(),
                        policy.deadline
                    ));
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(format!("cannot lock {}: {e}", lock_path.display()));
                }
            }
        }
    }
}

impl Drop for OpenLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// What a file holds before the DDL runs.
enum Found {
    /// No tables at all: a new file.
    Fresh,
    /// A `meta` table with this format marker.
    Marker(String),
    /// Tables, but no alk marker.
    Foreign(Vec<String>),
}

impl Store {
    /// The store file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// An idle connection, or a new one with the busy timeout set. It serves
    /// one operation, then goes back with [`Store::check_in`] or is dropped.
    pub(crate) async fn check_out(&self) -> Result<Connection, turso::Error> {
        let pool = &self.db.idle[self.durability as usize];
        if let Some(conn) = pool.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            return Ok(conn);
        }
        let conn = self.db.db.connect()?;
        conn.busy_timeout(ENGINE_BUSY_TIMEOUT)?;
        if self.durability == Durability::Relaxed {
            conn.execute("PRAGMA synchronous = NORMAL", ()).await?;
        }
        Ok(conn)
    }

    /// Returns a connection whose operation finished. One left inside a
    /// transaction (which `run_immediate` never does) is dropped instead.
    pub(crate) fn check_in(&self, conn: Connection) {
        if !matches!(conn.is_autocommit(), Ok(true)) {
            return;
        }
        let mut idle = self.db.idle[self.durability as usize]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// The retry policy of operations on this store.
    pub(crate) fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// Checks the marker read-only, then creates the schema in one
    /// `BEGIN IMMEDIATE` transaction. A foreign file is rejected before
    /// anything is written.
    async fn handshake(&self, format: &'static Format) -> AlkResult<()> {
        let setup_err = |found: Option<String>, message: String| AlkError::StoreSetup {
            path: self.path.to_path_buf(),
            found,
            supported: format.marker,
            message,
        };
        let check = |conn: Connection| -> OpFuture<'static, Found> {
            Box::pin(async move {
                let mut tables = Vec::new();
                let mut rows = conn
                    .query("SELECT name FROM sqlite_schema WHERE type = 'table'", ())
                    .await?;
                while let Some(row) = rows.next().await? {
                    tables.push(row.get::<String>(0)?);
                }
                drop(rows);
                if tables.is_empty() {
                    return Ok(Found::Fresh);
                }
                if tables.iter().any(|t| t == "meta") {
                    let mut rows = conn
                        .query("SELECT value FROM meta WHERE key = 'format'", ())
                        .await?;
                    let mut marker = None;
                    while let Some(row) = rows.next().await? {
                        marker = Some(row.get_value(0)?.as_text().cloned().unwrap_or_default());
                    }
                    if let Some(marker) = marker {
                        return Ok(Found::Marker(marker));
                    }
                }
                Ok(Found::Foreign(tables))
            })
        };
        let found = self.run(check).await.map_err(|e| match e {
            AlkError::Internal(m) => setup_err(None, format!("cannot read the file: {m}")),
            other => other,
        })?;
        match found {
            Found::Marker(m) if m != format.marker => {
                return Err(setup_err(
                    Some(m),
                    "the file was left untouched; use a data directory of the matching alk version"
                        .into(),
                ));
            }
            Found::Foreign(tables) => {
                return Err(setup_err(
                    None,
                    format!(
                        "the file holds tables of another program ({}) and no alk format marker; it was left untouched",
                        tables.join(", ")
                    ),
                ));
            }
            Found::Fresh | Found::Marker(_) => {}
        }
        self.run_immediate(|conn: Connection| -> OpFuture<'static, ()> {
            Box::pin(async move {
                conn.execute_batch(format.ddl).await?;
                Ok(())
            })
        })
        .await
        .map_err(|e| match e {
            AlkError::Internal(m) => setup_err(None, format!("cannot create the schema: {m}")),
            other => other,
        })
    }
}
