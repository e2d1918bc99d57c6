//! [`Store`]: one store file, named by its path, its format and how it is
//! operated, and every operation on it.
//!
//! **Opening.** Every store file of every format is opened by its store and
//! only by it ([`Store::handle`], with the steps of `open.rs`). It keeps at
//! most one database per file per process (`pool.rs`), reads the format
//! marker without the engine before the engine ever sees the file (see
//! [`super::inspect`]), and creates the schema only then (`format.rs`). A
//! store holds no database open by itself: it opens one on demand.
//!
//! **Running operations.** Each attempt of an operation gets a pooled
//! connection; contention is retried with backoff up to a deadline
//! (`retry.rs`). Every operation run here is a single statement or one
//! transaction that is rolled back on failure, so running it again after
//! `Busy` cannot apply it twice. Writers pass the write gate (`gate.rs`),
//! where writers of one process share commits.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use crate::conn::Connection;
use crate::format::{Format, Found, create_schema};
use crate::gate::{Ended, Group, MAX_GROUP, Turn, WriteGuard};
use crate::inspect::{Contents, inspect};
use crate::open::{
    Creation, OpenLock, blocking, build_database, engine_failure, io_failure, out_of_descriptors,
    sibling, unused,
};
use crate::options::{Durability, StoreOptions};
use crate::pool::{Handle, MAX_IDLE, REGISTRY, close, lock};
use crate::retry::{
    Failure, OpFuture, Outcome, RetryPolicy, exec, is_retryable, query, rollback, text_or_null,
};
use alk_store::{AlkError, AlkResult};

/// How long one engine-level wait for the write lock may last before the
/// engine returns `Busy`. turso busy-spins a CPU core while it waits, so the
/// engine wait is kept short and longer waits happen in [`super::retry`],
/// which sleeps between attempts.
const ENGINE_BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(5);

/// Pages of page cache per connection (turso's default is 2,000 pages,
/// 8 MB). Every transaction in multi-process mode re-validates the cache
/// against other processes' commits, so a large cache buys little here,
/// while every pooled connection of every open store would pay for it.
const CACHE_PAGES: i64 = 500;

/// A name for a store file: where it is, its format, how it is operated.
/// Cheap to clone; it holds no database open by itself (see the
/// [`pool`](crate::pool) documentation).
#[derive(Clone)]
pub struct Store {
    inner: Arc<StoreInner>,
}

struct StoreInner {
    path: PathBuf,
    format: &'static Format,
    policy: RetryPolicy,
    durability: Durability,
    /// The database this store used last, while it is open.
    cached: Mutex<Weak<Handle>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

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
        ..
    } = opts.into();
    let dir = path.parent().unwrap_or(Path::new("."));
    let dir = {
        let dir = dir.to_path_buf();
        let shown = dir.clone();
        blocking(move || {
            std::fs::create_dir_all(&dir)?;
            dir.canonicalize()
        })
        .await
        .map_err(|e| io_failure(&shown, format, "cannot create the directory of", e))?
    };
    let store = Store {
        inner: Arc::new(StoreInner {
            path: dir.join(path.file_name().unwrap_or_default()),
            format,
            policy,
            durability,
            cached: Mutex::new(Weak::new()),
        }),
    };
    // Open it now, so a foreign or unusable file is reported by the open
    // call, not by the first operation.
    store.handle().await?;
    Ok(store)
}

impl Store {
    /// A name for the existing store file at `path`, not opened (for
    /// [`Store::with_exclusive`]).
    pub(crate) fn unopened(path: &Path, format: &'static Format, opts: StoreOptions) -> Store {
        let dir = path.parent().unwrap_or(Path::new("."));
        let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        Store {
            inner: Arc::new(StoreInner {
                path: dir.join(path.file_name().unwrap_or_default()),
                format,
                policy: opts.retry,
                durability: opts.durability,
                cached: Mutex::new(Weak::new()),
            }),
        }
    }

    /// The store file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The retry policy of operations on this store.
    pub(crate) fn policy(&self) -> &RetryPolicy {
        &self.inner.policy
    }

    /// When this store's commits count as done.
    pub(crate) fn durability(&self) -> Durability {
        self.inner.durability
    }

    /// This store at full durability: the same database, every commit
    /// synced before it returns, whatever the store's own durability. For
    /// the steps of a relay between two files (`relay.rs`, `Relay`), whose
    /// order must survive a power cut: at relaxed durability each file
    /// keeps a prefix of its commits, and two files may keep prefixes from
    /// different moments.
    pub(crate) fn synced(&self) -> Store {
        if self.inner.durability == Durability::Full {
            return self.clone();
        }
        Store {
            inner: Arc::new(StoreInner {
                path: self.inner.path.clone(),
                format: self.inner.format,
                policy: self.inner.policy,
                durability: Durability::Full,
                cached: Mutex::new(lock(&self.inner.cached).clone()),
            }),
        }
    }

    fn format(&self) -> &'static Format {
        self.inner.format
    }

    /// The open database of this store, opening it when it is not.
    pub(crate) async fn handle(&self) -> AlkResult<Arc<Handle>> {
        let cached = lock(&self.inner.cached).upgrade();
        if let Some(h) = cached
            && !h.broken.load(Ordering::Acquire)
        {
            h.touch();
            if !h.kept.load(Ordering::Acquire) {
                let evicted = lock(&REGISTRY).keep(&h);
                close(evicted);
            }
            return Ok(h);
        }
        let path = &self.inner.path;
        let gate = lock(&REGISTRY).gate(path);
        let _gate = gate.lock().await;
        let existing = lock(&REGISTRY).open.get(path).and_then(Weak::upgrade);
        let h = match existing {
            Some(h) if !h.broken.load(Ordering::Acquire) => h,
            _ => {
                let opened = match self.open_database().await {
                    // Out of descriptors: close the databases nobody is
                    // using and try once more.
                    Err(e) if out_of_descriptors(&e) => {
                        let idle = lock(&REGISTRY).release_idle();
                        if idle.is_empty() {
                            return Err(e);
                        }
                        for h in idle {
                            close(Some(h));
                        }
                        self.open_database().await?
                    }
                    other => other?,
                };
                let h = Arc::new(opened);
                lock(&REGISTRY)
                    .open
                    .insert(path.clone(), Arc::downgrade(&h));
                h
            }
        };
        h.touch();
        let evicted = lock(&REGISTRY).keep(&h);
        close(evicted);
        *lock(&self.inner.cached) = Arc::downgrade(&h);
        Ok(h)
    }

    /// Commits made through the write gate of this store's database.
    #[cfg(test)]
    pub(crate) async fn commits(&self) -> u64 {
        self.handle().await.unwrap().commits.load(Ordering::Acquire)
    }

    /// Closes this store's database now (tests: a store "closed by another
    /// process" is opened again, format check and DDL included).
    #[cfg(test)]
    pub(crate) fn close_for_test(&self) {
        let handle = lock(&self.inner.cached).upgrade();
        if let Some(h) = handle {
            let dropped = lock(&REGISTRY).discard(&h);
            drop(h);
            close(dropped);
        }
    }

    /// Called when the engine panicked inside this store's database: the
    /// database is closed (its descriptors, and with them its locks on the
    /// shared files, are released) and the next operation opens it anew.
    pub(crate) fn discard(&self, handle: &Arc<Handle>) {
        let dropped = lock(&REGISTRY).discard(handle);
        close(dropped);
    }

    /// Opens the database: marker check without the engine, then the
    /// engine, then the schema. Serialized across processes.
    async fn open_database(&self) -> AlkResult<Handle> {
        self.open_database_as(false).await
    }

    /// [`Store::open_database`]; `exclusive`: refused while any other
    /// process (or another handle of this one) has the store open, and no
    /// process opens it until the handle is closed.
    async fn open_database_as(&self, exclusive: bool) -> AlkResult<Handle> {
        let path = self.inner.path.clone();
        let format = self.format();
        let path_str = path
            .to_str()
            .ok_or_else(|| AlkError::StoreSetup {
                path: path.clone(),
                found: None,
                supported: format.marker,
                message: "the path is not valid UTF-8".into(),
            })?
            .to_string();
        // Refuse what is plainly not a store of this format before anything
        // is created next to it (not even the open lock's file); then again
        // under the open lock, in case another process made or replaced the
        // file meanwhile.
        self.check_contents().await?;
        let open_lock = OpenLock::acquire(&path, format, *self.policy()).await?;
        self.check_contents().await?;
        if exclusive {
            let open_here = lock(&REGISTRY)
                .open
                .get(&path)
                .and_then(Weak::upgrade)
                .is_some();
            if open_here || !unused(&sibling(&path, "-tshm")) {
                return Err(AlkError::Busy(format!(
                    "{} is open in {}; stop every process using the store and try again",
                    path.display(),
                    if open_here {
                        "this process"
                    } else {
                        "another process"
                    }
                )));
            }
        }

        // A new store: make sure the coordination file can be backed before
        // the engine maps it (on a full disk, touching an unbacked mapping
        // kills the process with SIGBUS).
        let created = {
            let p = path.clone();
            blocking(move || Creation::prepare(&p)).await
        }
        .map_err(|e| io_failure(&path, format, "cannot create", e))?;

        let lock_file = open_lock
            .0
            .try_clone()
            .map_err(|e| io_failure(&path, format, "cannot keep the lock file of", e))?;
        let opened = self.engine_open(&path_str, &created, lock_file).await;
        let mut handle = match opened {
            Ok(h) => h,
            Err(e) => {
                created.undo();
                return Err(e);
            }
        };
        if exclusive {
            handle._exclusive = Some(open_lock);
        }
        Ok(handle)
    }

    /// Rewrites the file to format `to` with the script of the format it
    /// has (`from`: pairs of an older format and what turns it into `to`),
    /// in one `BEGIN IMMEDIATE` transaction that reads the marker again
    /// first, while no other process has the store open (see
    /// [`Store::with_exclusive`]). The marker of the format it was
    /// rewritten from (`None`: the file is already `to`). A failure rolls
    /// everything back.
    pub(crate) async fn migrate_exclusive(
        &self,
        from: &[(&'static Format, &'static str)],
        to: &'static Format,
    ) -> AlkResult<Option<&'static str>> {
        self.with_exclusive(async |conn: &Connection, found: &'static Format| {
            if found.marker == to.marker {
                return Ok(None);
            }
            conn.execute("BEGIN IMMEDIATE", ()).await?;
            let upgraded = async {
                // Read the marker again inside the transaction.
                let mut rows =
                    query(conn, "SELECT value FROM meta WHERE key = 'format'", ()).await?;
                let mut marker = None;
                while let Some(row) = rows.next().await? {
                    marker = text_or_null(&row, 0)?;
                }
                drop(rows);
                if marker.as_deref() == Some(to.marker) {
                    return Ok(None);
                }
                let Some((older, script)) = from
                    .iter()
                    .find(|(f, _)| marker.as_deref() == Some(f.marker))
                else {
                    // Changed under us into something no format here is.
                    let names: Vec<&str> = from
                        .iter()
                        .map(|(f, _)| f.marker)
                        .chain(std::iter::once(to.marker))
                        .collect();
                    return Err(Failure::Alk(AlkError::StoreSetup {
                        path: self.path().to_path_buf(),
                        found: marker,
                        supported: to.marker,
                        message: format!(
                            "the file is none of {}; nothing was changed",
                            names.join(", ")
                        ),
                    }));
                };
                conn.execute_batch(script).await?;
                Ok::<Option<&'static str>, Failure>(Some(older.marker))
            }
            .await;
            match upgraded {
                Ok(done) => {
                    conn.execute(if done.is_some() { "COMMIT" } else { "ROLLBACK" }, ())
                        .await?;
                    Ok(done)
                }
                Err(e) => {
                    let _ = conn.execute("ROLLBACK", ()).await;
                    Err(e)
                }
            }
        })
        .await
    }

    /// Runs `op` on a connection of a database opened only for it, while no
    /// other process has the store open and none can open it (see
    /// [`Store::open_database_as`]); the database is closed afterwards.
    pub(crate) async fn with_exclusive<T>(
        &self,
        op: impl AsyncFnOnce(&Connection, &'static Format) -> Result<T, Failure>,
    ) -> AlkResult<T> {
        let handle = Arc::new(self.open_database_as(true).await?);
        let result = alk_store::panic::contain(async {
            let conn = self.connect(&handle).await.map_err(Failure::Db)?;
            op(&conn, self.format_of(&handle)).await
        })
        .await;
        close(Some(handle));
        match result {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(Failure::Alk(e))) => Err(e),
            // The operation (a migration) commits itself: a failure may
            // come after its commit. Running it again tells: it finishes,
            // or finds the store already migrated.
            Ok(Err(Failure::Db(e))) => Err(self.exclusive_failed(&e.to_string())),
            Err(panic) => Err(self.exclusive_failed(&panic)),
        }
    }

    /// The error of a failed exclusive operation (see
    /// [`Store::with_exclusive`]).
    fn exclusive_failed(&self, why: &str) -> AlkError {
        AlkError::Internal(format!(
            "the storage engine failed on {} during the migration ({why}); whether it was applied is unknown: run the migration again, which completes it or reports the store as already migrated",
            self.path().display()
        ))
    }

    /// The format of the store's file as opened (the store's own, or one of
    /// the formats it also opens).
    pub(crate) async fn file_format(&self) -> AlkResult<&'static Format> {
        let handle = self.handle().await?;
        Ok(self.format_of(&handle))
    }

    /// The format of the file as `handle` opened it. An operation whose
    /// statements depend on the format takes it from the handle it runs
    /// on (see [`Store::run_in`]): a file can change format between two
    /// handles of one store (a migration in another process after this
    /// process closed an idle database).
    pub(crate) fn format_of(&self, handle: &Handle) -> &'static Format {
        handle
            .format
            .get()
            .copied()
            .unwrap_or_else(|| self.format())
    }

    /// Reads the file's marker without the engine (see [`super::inspect`])
    /// and refuses it unless it is new or carries this store's format.
    async fn check_contents(&self) -> AlkResult<()> {
        let path = self.inner.path.clone();
        let format = self.format();
        let contents = {
            let p = path.clone();
            blocking(move || inspect(&p))
                .await
                .map_err(|e| io_failure(&path, format, "cannot read", e))?
        };
        let setup_err = |found: Option<String>, message: String| AlkError::StoreSetup {
            path: path.clone(),
            found,
            supported: format.marker,
            message,
        };
        match contents {
            Contents::Fresh => Ok(()),
            Contents::Marker(m)
                if format.accepts(&m).is_some() || format.upgrade_from(&m).is_some() =>
            {
                Ok(())
            }
            Contents::Marker(m) => Err(setup_err(Some(m), format.refusal())),
            Contents::Foreign(tables) => Err(setup_err(
                None,
                format!(
                    "the file holds tables of another program ({}) and no alk format marker; it was left untouched",
                    tables.join(", ")
                ),
            )),
            Contents::NotADatabase(why) => Err(setup_err(
                None,
                format!("the file is not a database ({why}); it was left untouched"),
            )),
        }
    }

    /// The engine's open and the schema, with a damaged coordination file
    /// rebuilt when no process uses the store, and reported otherwise.
    async fn engine_open(
        &self,
        path_str: &str,
        created: &Creation,
        lock_file: std::fs::File,
    ) -> AlkResult<Handle> {
        let mut lock_file = Some(lock_file);
        let path = &self.inner.path;
        let format = self.format();
        // Why the coordination file was rebuilt, once it was.
        let mut rebuilt: Option<String> = None;
        loop {
            let file = match lock_file.take() {
                Some(f) => f,
                None => return Err(engine_failure(path, format, "cannot open", "no lock file")),
            };
            let (failure, file) = match self.try_engine_open(path_str, file).await {
                Ok(result) => {
                    if let (Some(why), Ok(_)) = (&rebuilt, &result) {
                        tracing::warn!(
                            target: "alk",
                            "{}: the store's coordination file was damaged or out of step with the log, as after a crash of the machine ({why}); no process was using the store, so it was rebuilt (it holds no data)",
                            sibling(path, "-tshm").display()
                        );
                    }
                    return result;
                }
                Err(failed) => failed,
            };
            lock_file = Some(file);
            // The coordination file holds no data, only the state of the
            // processes using the store: when the engine cannot open the
            // store (a damaged coordination file shows as anything from a
            // bad WAL header to a panic) and no process uses it, rebuilding
            // it is always safe, and is tried once.
            let tshm = sibling(path, "-tshm");
            if rebuilt.is_some() || created.is_new || !tshm.exists() {
                return Err(engine_failure(path, format, "cannot open", &failure));
            }
            if !unused(&tshm) {
                return Err(AlkError::StoreSetup {
                    path: path.clone(),
                    found: None,
                    supported: format.marker,
                    message: format!(
                        "cannot open the store ({failure}) while another process is using it; if its \
                         coordination file {} is damaged, stop every process using the store and open it \
                         again (that file holds no data and is rebuilt then)",
                        tshm.display()
                    ),
                });
            }
            std::fs::remove_file(&tshm).map_err(|e| {
                io_failure(&tshm, format, "cannot rebuild the coordination file of", e)
            })?;
            rebuilt = Some(failure);
        }
    }

    /// One attempt of the engine's open and the schema. `Err` is an engine
    /// failure (or panic), as text; `Ok(Err)` a final answer (another
    /// format's marker).
    async fn try_engine_open(
        &self,
        path_str: &str,
        lock_file: std::fs::File,
    ) -> Result<AlkResult<Handle>, (String, std::fs::File)> {
        let built = match build_database(path_str).await {
            Ok(db) => db,
            Err(failure) => return Err((failure, lock_file)),
        };
        let spare = lock_file.try_clone();
        let handle = Handle::new(built, self.inner.path.clone(), lock_file);
        let schema = alk_store::panic::contain(self.handshake(&handle)).await;
        let failure = match schema {
            Ok(Ok(Found::Format(f))) => {
                let _ = handle.format.set(f);
                return Ok(Ok(handle));
            }
            Ok(Ok(Found::Other(found))) => {
                close(Some(Arc::new(handle)));
                return Ok(Err(AlkError::StoreSetup {
                    path: self.inner.path.clone(),
                    found: Some(found),
                    supported: self.format().marker,
                    message: self.format().refusal(),
                }));
            }
            Ok(Err(e)) => e.to_string(),
            Err(panic) => format!("the engine panicked: {}", panic),
        };
        close(Some(Arc::new(handle)));
        match spare {
            Ok(file) => Err((failure, file)),
            Err(e) => Ok(Err(io_failure(
                &self.inner.path,
                self.format(),
                "cannot keep the lock file of",
                e,
            ))),
        }
    }

    /// Reads the marker through the engine and creates the schema (see
    /// [`create_schema`]), retrying contention up to the deadline.
    async fn handshake(&self, handle: &Handle) -> Result<Found, turso::Error> {
        let conn = self.connect(handle).await?;
        let deadline = std::time::Instant::now() + self.policy().deadline;
        loop {
            match create_schema(&conn, self.format()).await {
                Err(turso::Error::Busy(_) | turso::Error::BusySnapshot(_))
                    if std::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                }
                other => return other,
            }
        }
    }

    /// A new connection with the busy timeout, cache size and durability
    /// of this store.
    async fn connect(&self, handle: &Handle) -> Result<Connection, turso::Error> {
        let conn = Connection::new(handle.db.connect()?);
        conn.busy_timeout(ENGINE_BUSY_TIMEOUT)?;
        conn.execute(&format!("PRAGMA cache_size = {CACHE_PAGES}"), ())
            .await?;
        if self.inner.durability == Durability::Relaxed {
            conn.execute("PRAGMA synchronous = NORMAL", ()).await?;
        }
        Ok(conn)
    }

    /// An idle connection of `handle`, or a new one. It serves one
    /// operation, then goes back with [`Store::check_in`] or is dropped.
    pub(crate) async fn check_out(&self, handle: &Handle) -> Result<Connection, turso::Error> {
        let pool = &handle.idle[self.inner.durability as usize];
        if let Some(conn) = lock(pool).pop() {
            return Ok(conn);
        }
        self.connect(handle).await
    }

    /// Returns a connection whose operation finished. One left inside a
    /// transaction, or with a statement that could not be reset, is
    /// dropped instead.
    pub(crate) fn check_in(&self, handle: &Handle, conn: Connection) {
        if conn.is_broken() || !matches!(conn.is_autocommit(), Ok(true)) {
            return;
        }
        let mut idle = lock(&handle.idle[self.inner.durability as usize]);
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }
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
                    policy
                        .back_off(self.path(), deadline, &mut pause, &e.to_string())
                        .await?
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
                        policy
                            .back_off(self.path(), deadline, &mut pause, &e.to_string())
                            .await?;
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
                        policy
                            .back_off(self.path(), deadline, &mut pause, &e.to_string())
                            .await?;
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
                        policy
                            .back_off(self.path(), deadline, &mut pause, &e.to_string())
                            .await?;
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
                            policy
                                .back_off(
                                    self.path(),
                                    deadline,
                                    &mut pause,
                                    "a shared commit failed",
                                )
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::format::tests::FORMAT;
    use std::sync::atomic::AtomicBool;

    /// The test format's store `s/store.sqlite` under `dir`.
    async fn test_store(dir: &Path) -> Store {
        open_store(&dir.join("s/store.sqlite"), &FORMAT, RetryPolicy::default())
            .await
            .unwrap()
    }

    pub(crate) async fn count(s: &Store) -> AlkResult<i64> {
        s.run(|conn: Connection| {
            Box::pin(async move {
                let mut rows = conn.query("SELECT count(*) FROM t", ()).await?;
                let mut n = 0;
                while let Some(r) = rows.next().await? {
                    n = r.get::<i64>(0)?;
                }
                Ok(n)
            })
        })
        .await
    }

    #[tokio::test]
    async fn a_panic_inside_an_operation_is_an_error_and_the_store_is_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let s = test_store(dir.path()).await;
        let before = s.handle().await.unwrap();
        // The engine panicking half-way through a transaction.
        let result: AlkResult<()> = s
            .run_immediate(|conn: Connection| {
                Box::pin(async move {
                    conn.execute("INSERT INTO t (x) VALUES (7)", ()).await?;
                    panic!("simulated engine failure");
                })
            })
            .await;
        match result {
            Err(AlkError::Internal(m)) => {
                assert!(
                    m.contains("simulated engine failure") && m.contains("reopened"),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
        // The database it failed in is not used again; nothing of the
        // operation was applied; the store works, through a new database,
        // and its write lock was released (a write goes through).
        assert!(before.broken.load(Ordering::Acquire));
        drop(before);
        assert_eq!(count(&s).await.unwrap(), 0);
        s.run_immediate(|conn: Connection| {
            Box::pin(async move {
                conn.execute("INSERT INTO t (x) VALUES (1)", ()).await?;
                Ok(())
            })
        })
        .await
        .unwrap();
        assert_eq!(count(&s).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn a_panic_after_a_statement_committed_is_reported_as_unknown_never_as_not_applied() {
        let dir = tempfile::tempdir().unwrap();
        let s = test_store(dir.path()).await;
        // One statement, alone: it commits on its own, and the engine fails
        // after that (as a panic inside COMMIT would).
        let result: AlkResult<()> = s
            .run_write(|conn: Connection| {
                Box::pin(async move {
                    conn.execute("INSERT INTO t (x) VALUES (7)", ()).await?;
                    panic!("simulated failure after the commit");
                })
            })
            .await;
        match result {
            Err(AlkError::Internal(m)) => {
                assert!(
                    m.contains("simulated failure") && m.contains("outcome is unknown"),
                    "{m}"
                );
                assert!(!m.contains("not applied"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        // It was applied: "not applied" would have been false.
        assert_eq!(count(&s).await.unwrap(), 1);
    }

    async fn rows(s: &Store) -> Vec<i64> {
        s.run(|conn: Connection| {
            Box::pin(async move {
                let mut rows = conn.query("SELECT x FROM t ORDER BY x", ()).await?;
                let mut out = Vec::new();
                while let Some(r) = rows.next().await? {
                    out.push(r.get::<i64>(0)?);
                }
                Ok(out)
            })
        })
        .await
        .unwrap()
    }

    /// Starts `n` writers, each inserting its number, while the gate is
    /// held, so that they all queue; then lets them go. `refuse` makes
    /// that writer write and then refuse; `fail_once` makes that writer's
    /// first attempt fail in the engine (retryably) after writing.
    async fn queued_writers(
        s: &Store,
        n: i64,
        refuse: Option<i64>,
        fail_once: Option<i64>,
    ) -> Vec<AlkResult<()>> {
        let handle = s.handle().await.unwrap();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        let held = handle.gate.queue(deadline, s.path()).await.unwrap();
        let failed = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for x in 0..n {
            let (s, failed) = (s.clone(), failed.clone());
            tasks.push(tokio::spawn(async move {
                s.run_immediate(|conn: Connection| {
                    let failed = failed.clone();
                    Box::pin(async move {
                        conn.execute("INSERT INTO t (x) VALUES (?1)", (x,)).await?;
                        if Some(x) == refuse {
                            return Err(crate::retry::Failure::Alk(AlkError::InvalidArgument(
                                "refused after writing".into(),
                            )));
                        }
                        if Some(x) == fail_once && !failed.swap(true, Ordering::AcqRel) {
                            return Err(crate::retry::Failure::Db(turso::Error::Busy(
                                "simulated".into(),
                            )));
                        }
                        Ok(())
                    })
                })
                .await
            }));
        }
        while handle.gate.waiting() < n as usize {
            tokio::task::yield_now().await;
        }
        drop(held);
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writers_queued_behind_each_other_share_one_commit() {
        let dir = tempfile::tempdir().unwrap();
        let s = test_store(dir.path()).await;
        let results = queued_writers(&s, 10, None, None).await;
        assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
        assert_eq!(rows(&s).await, (0..10).collect::<Vec<_>>());
        assert_eq!(
            s.commits().await,
            1,
            "the ten writers did not share a commit"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refusal_inside_a_shared_commit_undoes_only_that_writer() {
        let dir = tempfile::tempdir().unwrap();
        let s = test_store(dir.path()).await;
        let results = queued_writers(&s, 6, Some(3), None).await;
        assert!(matches!(results[3], Err(AlkError::InvalidArgument(_))));
        assert!(results.iter().enumerate().all(|(i, r)| i == 3 || r.is_ok()));
        assert_eq!(rows(&s).await, [0, 1, 2, 4, 5]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_engine_failure_inside_a_shared_commit_reruns_every_writer_once() {
        let dir = tempfile::tempdir().unwrap();
        let s = test_store(dir.path()).await;
        let results = queued_writers(&s, 6, None, Some(4)).await;
        assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
        // The group was rolled back and every writer ran again: each row
        // is there exactly once.
        assert_eq!(rows(&s).await, (0..6).collect::<Vec<_>>());
    }
}
