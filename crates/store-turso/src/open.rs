//! The one way a store file is opened.
//!
//! Every store file of every format is opened here and only here. Opening a
//! live store without turso's multi-process WAL mode corrupts it, so this is
//! the single place that builds a [`turso::Database`]. It keeps at most one
//! `Database` per file per process (a second handle on the same file from
//! the same process would bypass turso's in-process coordination), reads
//! the format marker without the engine before the engine ever sees the
//! file (see [`super::inspect`]), and creates the schema only then.
//!
//! Open databases are a bounded resource: each costs memory and a few file
//! descriptors. A [`Store`] therefore does not keep its database open; it
//! names a file and reopens it on demand. The process keeps the
//! [`MAX_OPEN_STORES`] most recently used databases open; one that falls
//! out of that set is closed once no operation is using it, and opened
//! again (marker check included) at its next use.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use turso::{Builder, Connection, Database};

use super::gate::WriteGate;
use super::inspect::{Contents, inspect};
use super::retry::{Failure, RetryPolicy};
use alk_store::{AlkError, AlkResult};

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

/// The format of the queue files a host creates. Existing files keep
/// theirs whatever this says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NewQueues {
    /// `localqueue.v2`: every job option.
    #[default]
    V2,
    /// `localqueue.v1`, for a data directory shared with a program that
    /// reads only v1 files: plain messages only.
    V1,
}

/// The format of the kv bucket files a host creates. Existing files keep
/// theirs whatever this says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NewKv {
    /// `localkv.v1`, the format every program sharing the data directory
    /// layout has read.
    #[default]
    V1,
    /// `localkv.v2`: a version per put, so compare-and-swap compares
    /// versions instead of values.
    V2,
}

/// How stores are opened and operated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreOptions {
    /// Retrying contention.
    pub retry: RetryPolicy,
    /// When commits count as done.
    pub durability: Durability,
    /// The format of new queue files.
    pub new_queues: NewQueues,
    /// The format of new kv bucket files.
    pub new_kv: NewKv,
}

impl From<RetryPolicy> for StoreOptions {
    fn from(retry: RetryPolicy) -> Self {
        StoreOptions {
            retry,
            ..StoreOptions::default()
        }
    }
}

/// An on-disk format: the marker stored in `meta` and the DDL that creates
/// it. The DDL is idempotent (`IF NOT EXISTS`, `INSERT OR IGNORE`).
#[derive(Debug)]
pub struct Format {
    /// The value of the `('format', …)` row of the `meta` table.
    pub marker: &'static str,
    /// The complete DDL of the format, run when a file is created (and
    /// its `CREATE … IF NOT EXISTS` statements when an object is missing).
    pub ddl: &'static str,
    /// Other formats of the same store that are opened and used as they
    /// are (such a file is never converted by opening it).
    pub also: &'static [&'static Format],
    /// Older formats of the same store that a file is upgraded from, in
    /// place, when it is opened (only for formats no other program reads).
    pub upgrades: &'static [Upgrade],
}

/// How a file of an older format becomes a file of a newer one.
#[derive(Debug)]
pub struct Upgrade {
    /// The older format.
    pub from: &'static Format,
    /// What turns a complete file of `from` into one of the newer format,
    /// run in one `BEGIN IMMEDIATE` transaction with the marker check.
    pub script: &'static str,
}

impl Format {
    /// Whether a file carrying `marker` is opened as this format or one of
    /// its [`Format::also`] formats; which.
    pub fn accepts(&'static self, marker: &str) -> Option<&'static Format> {
        std::iter::once(self)
            .chain(self.also.iter().copied())
            .find(|f| f.marker == marker)
    }

    /// The statements of the DDL that create a missing table or index, or
    /// insert a row a table is made with, and change nothing else (run on a
    /// file of this format that lacks one).
    fn repair(&self) -> String {
        // Comments may hold a `;`: drop them before splitting statements
        // (no DDL of ours has `--` inside a string).
        let bare: String = self
            .ddl
            .lines()
            .map(|line| line.split("--").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        let dropped = self.dropped();
        bare.split(';')
            .filter(|stmt| {
                let words: Vec<&str> = stmt.split_whitespace().take(6).collect();
                match words.as_slice() {
                    ["CREATE", "TABLE" | "INDEX", "IF", "NOT", "EXISTS", name] => {
                        !dropped.contains(name)
                    }
                    // Rows a table is made with (a marker, a fixed row).
                    ["INSERT", "OR", "IGNORE", ..] => true,
                    _ => false,
                }
            })
            .map(|stmt| format!("{};\n", stmt.trim()))
            .collect()
    }

    /// The upgrade of a file carrying `marker` to this format, if there is
    /// one.
    pub fn upgrade_from(&'static self, marker: &str) -> Option<&'static Upgrade> {
        self.upgrades.iter().find(|u| u.from.marker == marker)
    }

    /// Why a file of another format is refused, naming the formats this one
    /// opens.
    fn refusal(&self) -> String {
        let also: Vec<&str> = self.also.iter().map(|f| f.marker).collect();
        let upgrades: Vec<&str> = self.upgrades.iter().map(|u| u.from.marker).collect();
        let opens = match (also.is_empty(), upgrades.is_empty()) {
            (true, true) => String::new(),
            (false, true) => format!(" (it also opens {} files)", also.join(", ")),
            (true, false) => format!(
                " (it also opens {} files, which it upgrades)",
                upgrades.join(", ")
            ),
            (false, false) => format!(
                " (it also opens {} files, and {} files, which it upgrades)",
                also.join(", "),
                upgrades.join(", ")
            ),
        };
        format!(
            "the file was left untouched{opens}; use a data directory of the matching alk version"
        )
    }

    /// The names of the tables and indexes its DDL creates (and does not
    /// drop again further on).
    pub fn objects(&self) -> impl Iterator<Item = &'static str> {
        let dropped = self.dropped();
        self.ddl
            .split(';')
            .filter_map(|stmt| {
                let words: Vec<&str> = stmt.split_whitespace().collect();
                match words.as_slice() {
                    ["CREATE", "TABLE" | "INDEX", "IF", "NOT", "EXISTS", name, ..] => Some(*name),
                    _ => None,
                }
            })
            .filter(move |name| !dropped.contains(name))
    }

    /// The indexes its DDL drops (`DROP INDEX IF EXISTS`).
    fn dropped(&self) -> Vec<&'static str> {
        self.ddl
            .split(';')
            .filter_map(|stmt| {
                let words: Vec<&str> = stmt.split_whitespace().collect();
                match words.as_slice() {
                    ["DROP", "INDEX", "IF", "EXISTS", name, ..] => Some(*name),
                    _ => None,
                }
            })
            .collect()
    }
}

/// How long one engine-level wait for the write lock may last before the
/// engine returns `Busy`. turso busy-spins a CPU core while it waits, so the
/// engine wait is kept short and longer waits happen in [`super::retry`],
/// which sleeps between attempts.
const ENGINE_BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(5);

/// Most store databases one process keeps open at once (the most recently
/// used ones). Each costs about 2 MB and 3–4 file descriptors; beyond this
/// count, the least recently used idle one is closed and reopened at its
/// next use. A process with a low descriptor limit keeps fewer (see
/// [`max_open_stores`]).
pub const MAX_OPEN_STORES: usize = 64;

/// The open databases this process keeps: [`MAX_OPEN_STORES`], or fewer
/// when the descriptor limit (`ulimit -n`) leaves less than 4 descriptors
/// per store after 64 for everything else.
pub fn max_open_stores() -> usize {
    static MAX: LazyLock<usize> = LazyLock::new(|| {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        let room = limit.saturating_sub(64) / 4;
        (room.min(MAX_OPEN_STORES as u64) as usize).max(2)
    });
    *MAX
}

/// Most idle connections kept per store file and durability.
const MAX_IDLE: usize = 8;

/// Pages of page cache per connection (turso's default is 2,000 pages,
/// 8 MB). Every transaction in multi-process mode re-validates the cache
/// against other processes' commits, so a large cache buys little here,
/// while every pooled connection of every open store would pay for it.
const CACHE_PAGES: i64 = 500;

/// A name for a store file: where it is, its format, how it is operated.
/// Cheap to clone; it holds no database open by itself (see the module
/// documentation).
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

/// The process-wide open database of one store file and its idle
/// connections.
///
/// Connections are kept and reused rather than opened per operation: turso
/// re-validates the shared WAL state every time a connection is created.
/// A connection serves one operation at a time and every statement is
/// finished before it goes back.
pub(crate) struct Handle {
    db: Database,
    path: PathBuf,
    /// Idle connections, one pool per durability (a connection's
    /// `synchronous` setting is fixed when it is made).
    idle: [Mutex<Vec<Connection>>; 2],
    /// When it was last used (a process-wide tick).
    last_used: AtomicU64,
    /// Whether the registry keeps it open.
    kept: AtomicBool,
    /// The engine failed inside this database (a panic): it is not reused.
    broken: AtomicBool,
    /// Writers take turns through this.
    pub(crate) gate: WriteGate,
    /// Commits made through the gate (a group commit counts once).
    pub(crate) commits: AtomicU64,
    /// The format the file carries (the store's or one of its `also`).
    pub(crate) format: std::sync::OnceLock<&'static Format>,
    /// Held by an exclusive open: no other process opens the store until
    /// this handle is closed.
    _exclusive: Option<OpenLock>,
}

impl Handle {
    fn touch(&self) {
        self.last_used
            .store(TICK.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
    }
}

static TICK: AtomicU64 = AtomicU64::new(0);

/// The databases of this process.
#[derive(Default)]
struct Registry {
    /// Every open database, by canonical path (one per file).
    open: HashMap<PathBuf, Weak<Handle>>,
    /// The most recently used databases, kept open.
    keep: Vec<Arc<Handle>>,
    /// One gate per path being opened, so two tasks never open the same
    /// file twice while opens of other files go on undisturbed.
    gates: HashMap<PathBuf, Weak<tokio::sync::Mutex<()>>>,
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Default::default);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Registry {
    /// Keeps `handle` open, closing the least recently used idle database
    /// if that makes too many. Returns what to drop outside the lock.
    fn keep(&mut self, handle: &Arc<Handle>) -> Option<Arc<Handle>> {
        if handle.kept.swap(true, Ordering::AcqRel) {
            return None;
        }
        self.keep.push(handle.clone());
        if self.keep.len() <= max_open_stores() {
            return None;
        }
        // The least recently used one that no operation holds right now
        // (only this list refers to it); if every one is busy, the oldest.
        let victim = self
            .keep
            .iter()
            .enumerate()
            .filter(|(_, h)| Arc::strong_count(h) == 1)
            .min_by_key(|(_, h)| h.last_used.load(Ordering::Relaxed))
            .or_else(|| {
                self.keep
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, h)| h.last_used.load(Ordering::Relaxed))
            })
            .map(|(i, _)| i)?;
        let evicted = self.keep.swap_remove(victim);
        evicted.kept.store(false, Ordering::Release);
        Some(evicted)
    }

    /// Forgets a database whose engine failed, so the next use opens the
    /// file anew.
    fn discard(&mut self, handle: &Arc<Handle>) -> Option<Arc<Handle>> {
        handle.broken.store(true, Ordering::Release);
        if let Some(w) = self.open.get(&handle.path)
            && w.as_ptr() == Arc::as_ptr(handle)
        {
            self.open.remove(&handle.path);
        }
        let i = self.keep.iter().position(|h| Arc::ptr_eq(h, handle))?;
        handle.kept.store(false, Ordering::Release);
        Some(self.keep.swap_remove(i))
    }

    /// Stops keeping every database no operation holds right now; what to
    /// drop outside the lock.
    fn release_idle(&mut self) -> Vec<Arc<Handle>> {
        let (idle, busy): (Vec<_>, Vec<_>) = std::mem::take(&mut self.keep)
            .into_iter()
            .partition(|h| Arc::strong_count(h) == 1);
        self.keep = busy;
        for h in &idle {
            h.kept.store(false, Ordering::Release);
        }
        idle
    }

    fn gate(&mut self, path: &Path) -> Arc<tokio::sync::Mutex<()>> {
        if let Some(g) = self.gates.get(path).and_then(Weak::upgrade) {
            return g;
        }
        if self.gates.len() > 4 * MAX_OPEN_STORES {
            self.gates.retain(|_, g| g.strong_count() > 0);
        }
        let g = Arc::new(tokio::sync::Mutex::new(()));
        self.gates.insert(path.to_path_buf(), Arc::downgrade(&g));
        g
    }
}

/// Drops a database outside every lock. A drop that panics inside the
/// engine is contained: the file descriptors are closed either way.
fn close(handle: Option<Arc<Handle>>) {
    if let Some(h) = handle
        && let Err(panic) = alk_store::panic::contain_sync(move || drop(h))
    {
        tracing::warn!(
            target: "alk",
            "the storage engine failed while closing a database: {}",
            panic
        );
    }
}

/// How many databases this process has open right now.
pub fn open_databases() -> usize {
    lock(&REGISTRY)
        .open
        .values()
        .filter(|w| w.strong_count() > 0)
        .count()
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
}

/// Runs blocking file-system work off the async worker threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => rt
            .spawn_blocking(f)
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string()))),
        Err(_) => f(),
    }
}

/// The error for an I/O failure on a store's files: transient (out of
/// descriptors) is `busy`, a full disk `internal`, the rest `store-setup`.
fn io_failure(path: &Path, format: &'static Format, what: &str, e: std::io::Error) -> AlkError {
    match e.raw_os_error() {
        Some(24) | Some(23) => AlkError::Busy(format!(
            "{what} {}: the host process is out of file descriptors ({e}); close stores or retry later",
            path.display()
        )),
        Some(28) | Some(122) => AlkError::Internal(format!(
            "{what} {}: no space left on the device ({e}); nothing was written",
            path.display()
        )),
        _ => AlkError::StoreSetup {
            path: path.to_path_buf(),
            found: None,
            supported: format.marker,
            message: format!("{what} the store: {e}"),
        },
    }
}

/// Whether `e` says the process ran out of file descriptors.
fn out_of_descriptors(e: &AlkError) -> bool {
    matches!(e, AlkError::Busy(m) if m.contains("out of file descriptors"))
}

/// The error for an engine failure while opening: classified by its text,
/// which is all turso gives for I/O errors.
fn engine_failure(path: &Path, format: &'static Format, what: &str, e: &str) -> AlkError {
    let lower = e.to_ascii_lowercase();
    if lower.contains("too many open files") {
        io_failure(path, format, what, std::io::Error::from_raw_os_error(24))
    } else if lower.contains("no space left") || lower.contains("disk quota") {
        io_failure(path, format, what, std::io::Error::from_raw_os_error(28))
    } else {
        AlkError::StoreSetup {
            path: path.to_path_buf(),
            found: None,
            supported: format.marker,
            message: format!("{what} the store: {e}"),
        }
    }
}

/// A sibling file of a store: `<store><suffix>`.
pub(crate) fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

impl Store {
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
    /// the steps of a relay between two files (`stream.rs`, `Relay`), whose
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

    /// Rewrites the file from format `from` to format `to` with `script`,
    /// in one `BEGIN IMMEDIATE` transaction that reads the marker again
    /// first, while no other process has the store open (see
    /// [`Store::with_exclusive`]). Whether it did (`false`: the file is
    /// already `to`). A failure rolls everything back.
    pub(crate) async fn migrate_exclusive(
        &self,
        from: &'static Format,
        to: &'static Format,
        script: &'static str,
    ) -> AlkResult<bool> {
        self.with_exclusive(async |conn: &Connection, found: &'static Format| {
            if found.marker == to.marker {
                return Ok(false);
            }
            conn.execute("BEGIN IMMEDIATE", ()).await?;
            let upgraded = async {
                // Read the marker again inside the transaction.
                let mut rows =
                    super::retry::query(conn, "SELECT value FROM meta WHERE key = 'format'", ())
                        .await?;
                let mut marker = None;
                while let Some(row) = rows.next().await? {
                    marker = super::retry::text_or_null(&row, 0)?;
                }
                drop(rows);
                if marker.as_deref() == Some(to.marker) {
                    return Ok(false);
                }
                if marker.as_deref() != Some(from.marker) {
                    // Changed under us into something neither format is.
                    return Err(Failure::Alk(AlkError::StoreSetup {
                        path: self.path().to_path_buf(),
                        found: marker,
                        supported: from.marker,
                        message: format!(
                            "the file is neither {} nor {}; nothing was changed",
                            from.marker, to.marker
                        ),
                    }));
                }
                conn.execute_batch(script).await?;
                Ok::<bool, Failure>(true)
            }
            .await;
            match upgraded {
                Ok(done) => {
                    conn.execute(if done { "COMMIT" } else { "ROLLBACK" }, ())
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
        let built = alk_store::panic::contain(
            Builder::new_local(path_str)
                .experimental_multiprocess_wal(true)
                .build(),
        )
        .await;
        let built = match built {
            Ok(Ok(db)) => db,
            Ok(Err(e)) => return Err((e.to_string(), lock_file)),
            Err(panic) => {
                return Err((format!("the engine panicked: {}", panic), lock_file));
            }
        };
        let spare = lock_file.try_clone();
        let handle = Handle {
            db: built,
            path: self.inner.path.clone(),
            idle: Default::default(),
            last_used: AtomicU64::new(0),
            kept: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            gate: WriteGate::new(lock_file),
            commits: AtomicU64::new(0),
            format: std::sync::OnceLock::new(),
            _exclusive: None,
        };
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
        let conn = handle.db.connect()?;
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
    /// transaction is dropped instead.
    pub(crate) fn check_in(&self, handle: &Handle, conn: Connection) {
        if !matches!(conn.is_autocommit(), Ok(true)) {
            return;
        }
        let mut idle = lock(&handle.idle[self.inner.durability as usize]);
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }
}

/// What the open of a new store created, to remove it again if the open
/// fails: a failed creation leaves no half-made store behind.
struct Creation {
    path: PathBuf,
    /// The store file did not exist (or was empty) before.
    is_new: bool,
}

/// Bytes reserved for a new store's coordination file before the engine
/// creates it (its first size is about 130 KiB).
const COORDINATION_RESERVE: u64 = 1024 * 1024;

impl Creation {
    fn prepare(path: &Path) -> std::io::Result<Creation> {
        let is_new = std::fs::metadata(path)
            .map(|m| m.len() == 0)
            .unwrap_or(true);
        let creation = Creation {
            path: path.to_path_buf(),
            is_new,
        };
        let tshm = sibling(path, "-tshm");
        if !is_new || tshm.exists() {
            return Ok(creation);
        }
        // Reserve the blocks of the coordination file while it is still
        // empty (KEEP_SIZE leaves its length 0, so the engine initializes
        // it as new). On a full disk this fails here, with an error, rather
        // than later inside the engine's memory mapping, with SIGBUS.
        let file = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&tshm)?;
        let reserved = rustix::fs::fallocate(
            &file,
            rustix::fs::FallocateFlags::KEEP_SIZE,
            0,
            COORDINATION_RESERVE,
        );
        match reserved {
            Ok(()) => Ok(creation),
            // A file system without fallocate: nothing to reserve with.
            Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => {
                Ok(creation)
            }
            Err(e) => {
                drop(file);
                let _ = std::fs::remove_file(&tshm);
                Err(e.into())
            }
        }
    }

    /// Removes what a failed creation left.
    fn undo(&self) {
        if !self.is_new {
            return;
        }
        for suffix in ["", "-wal", "-tshm"] {
            let _ = std::fs::remove_file(sibling(&self.path, suffix));
        }
    }
}

/// Whether no process has `tshm` open through the engine. Every engine
/// process holds a lock on part of the coordination file while it uses the
/// store, so an exclusive lock on the whole file succeeds only when none
/// does.
fn unused(tshm: &Path) -> bool {
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(tshm)
    else {
        return true;
    };
    match rustix::fs::fcntl_lock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {
            let _ = rustix::fs::fcntl_lock(&file, rustix::fs::FlockOperation::NonBlockingUnlock);
            true
        }
        Err(_) => false,
    }
}

/// An exclusive lock on `<store>-openlock`, held while a process opens a
/// store file.
///
/// turso decides at open time whether a process is the only one using the
/// file (probe for an exclusive lock, then take a shared one). Two processes
/// opening at the same instant can both conclude they are alone, and the
/// "alone" path resets shared reader state that the other process is using.
/// Holding this lock across the engine's open makes the probe and the lock
/// that follows it one step for every alk process. It also keeps a store
/// from being read by one process while another is still creating it.
struct OpenLock(std::fs::File);

impl OpenLock {
    async fn acquire(
        store: &Path,
        format: &'static Format,
        policy: RetryPolicy,
    ) -> AlkResult<OpenLock> {
        let lock_path = sibling(store, "-openlock");
        let file = {
            let p = lock_path.clone();
            blocking(move || {
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&p)
            })
            .await
            .map_err(|e| io_failure(&lock_path, format, "cannot create", e))?
        };
        let start = std::time::Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(OpenLock(file)),
                Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < policy.deadline => {
                    // Opens take milliseconds; poll without blocking a thread.
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
                // Another process is opening the store and taking long:
                // transient, like a writer holding the lock.
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(AlkError::Busy(format!(
                        "{} stayed locked by another opening process for {:?}; retry later",
                        lock_path.display(),
                        policy.deadline
                    )));
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(io_failure(&lock_path, format, "cannot lock", e));
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

/// What the schema check found in a file.
enum Found {
    /// A file of this format (or one it also opens), ready for use.
    Format(&'static Format),
    /// Another format's marker: the file is refused.
    Other(String),
}

/// Creates the schema of `format` in one `BEGIN IMMEDIATE` transaction,
/// unless the file (read again, now through the engine: another process may
/// have made the store since the check without it) carries another
/// format's marker, which is returned. A file of one of the formats it also
/// opens is used in its own format, its missing objects created. A store
/// that already has its marker and every table and index of its DDL is not
/// written at all (so opening one works on a full disk, and costs no write
/// transaction).
async fn create_schema(conn: &Connection, format: &'static Format) -> Result<Found, turso::Error> {
    let mut present = Vec::new();
    let mut rows = conn
        .query(
            "SELECT name FROM sqlite_schema WHERE type IN ('table', 'index')",
            (),
        )
        .await?;
    while let Some(row) = rows.next().await? {
        present.push(row.get::<String>(0)?);
    }
    drop(rows);
    let mut script = format.ddl.to_string();
    let mut found = format;
    let mut upgrading: Option<&'static Upgrade> = None;
    if present.iter().any(|n| n == "meta") {
        let mut rows = conn
            .query("SELECT value FROM meta WHERE key = 'format'", ())
            .await?;
        let mut marker = None;
        while let Some(row) = rows.next().await? {
            marker = row.get_value(0)?.as_text().cloned();
        }
        drop(rows);
        if let Some(m) = marker {
            if let Some(f) = format.accepts(&m) {
                if f.objects().all(|o| present.iter().any(|p| p == o)) {
                    return Ok(Found::Format(f));
                }
                found = f;
                script = f.repair();
            } else if let Some(up) = format.upgrade_from(&m) {
                // An older format: completed (its own repair) and upgraded,
                // in the transaction below.
                upgrading = Some(up);
                script = format!("{}{}", up.from.repair(), up.script);
            } else {
                return Ok(Found::Other(m));
            }
        }
    }
    conn.execute("BEGIN IMMEDIATE", ()).await?;
    if let Some(up) = upgrading {
        // The marker again, now under the write lock: a process that opened
        // the store before this one took the open lock cannot have changed
        // it, but a writer that is not an alk host could have.
        let reread = async {
            let mut rows = conn
                .query("SELECT value FROM meta WHERE key = 'format'", ())
                .await?;
            let mut marker = None;
            while let Some(row) = rows.next().await? {
                marker = row.get_value(0)?.as_text().cloned();
            }
            Ok::<_, turso::Error>(marker)
        }
        .await;
        let m = match reread {
            Ok(marker) => marker.unwrap_or_default(),
            Err(e) => {
                if let Err(r) = conn.execute("ROLLBACK", ()).await {
                    tracing::warn!(target: "alk", "rollback of a failed upgrade failed: {r}");
                }
                return Err(e);
            }
        };
        if m != up.from.marker {
            if let Some(f) = format.accepts(&m) {
                // Upgraded meanwhile: only completed.
                found = f;
                script = f.repair();
            } else {
                conn.execute("ROLLBACK", ()).await?;
                return Ok(Found::Other(m));
            }
        }
    }
    match conn.execute_batch(&script).await {
        Ok(()) => conn
            .execute("COMMIT", ())
            .await
            .map(|_| Found::Format(found)),
        Err(e) => {
            if let Err(r) = conn.execute("ROLLBACK", ()).await {
                tracing::warn!(target: "alk", "rollback of a failed schema creation failed: {r}");
            }
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static FORMAT: Format = Format {
        marker: "test.v1",
        ddl: "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);\n\
              INSERT OR IGNORE INTO meta (key, value) VALUES ('format', 'test.v1');\n\
              CREATE TABLE IF NOT EXISTS t (x INTEGER);\n\
              CREATE INDEX IF NOT EXISTS idx_t ON t (x);",
        also: &[],
        upgrades: &[],
    };

    #[test]
    fn the_objects_of_a_format_are_the_tables_and_indexes_of_its_ddl() {
        assert_eq!(FORMAT.objects().collect::<Vec<_>>(), ["meta", "t", "idx_t"]);
        assert_eq!(
            crate::queue::FORMAT.objects().collect::<Vec<_>>(),
            [
                "meta",
                "messages",
                "idx_messages_visible",
                "idx_messages_claim"
            ]
        );
    }

    #[tokio::test]
    async fn an_open_lock_held_past_the_deadline_is_busy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s/store.sqlite");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let held = std::fs::File::create(sibling(&path, "-openlock")).unwrap();
        held.lock().unwrap();
        let policy = RetryPolicy {
            deadline: std::time::Duration::from_millis(100),
            ..RetryPolicy::default()
        };
        let result = open_store(&path, &FORMAT, policy).await;
        assert!(matches!(result, Err(AlkError::Busy(_))), "{result:?}");
        held.unlock().unwrap();
        open_store(&path, &FORMAT, policy).await.unwrap();
    }

    /// The test format's store `s/store.sqlite` under `dir`.
    async fn test_store(dir: &Path) -> Store {
        open_store(&dir.join("s/store.sqlite"), &FORMAT, RetryPolicy::default())
            .await
            .unwrap()
    }

    async fn count(s: &Store) -> AlkResult<i64> {
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

    #[tokio::test]
    async fn the_process_keeps_a_bounded_number_of_databases_open() {
        let dir = tempfile::tempdir().unwrap();
        let n = max_open_stores() * 3;
        let mut stores = Vec::new();
        for i in 0..n {
            let s = open_store(
                &dir.path().join(format!("s{i}/store.sqlite")),
                &FORMAT,
                RetryPolicy::default(),
            )
            .await
            .unwrap();
            s.run(|conn: Connection| {
                Box::pin(async move {
                    conn.execute("INSERT INTO t (x) VALUES (1)", ()).await?;
                    Ok(())
                })
            })
            .await
            .unwrap();
            stores.push(s);
        }
        // Every store is still usable through its handle; the process has
        // closed all but the most recently used ones (other tests of this
        // binary may hold a few more).
        assert!(
            open_databases() <= max_open_stores() + 8,
            "{}",
            open_databases()
        );
        for s in &stores {
            assert_eq!(count(s).await.unwrap(), 1);
        }
    }
}
