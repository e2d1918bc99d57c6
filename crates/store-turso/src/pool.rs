//! The databases of this process: at most one [`turso::Database`] per store
//! file (a second handle on the same file from the same process would
//! bypass turso's in-process coordination), shared by every store naming
//! that file, with its idle connections.
//!
//! Open databases are a bounded resource: each costs memory and a few file
//! descriptors. A [`Store`](crate::Store) therefore does not keep its
//! database open; it names a file and reopens it on demand. The process
//! keeps the [`MAX_OPEN_STORES`] most recently used databases open; one
//! that falls out of that set is closed once no operation is using it, and
//! opened again (marker check included) at its next use.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use turso::Database;

use crate::conn::Connection;
use crate::format::Format;
use crate::gate::WriteGate;
use crate::open::OpenLock;

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
pub(crate) const MAX_IDLE: usize = 8;

/// The process-wide open database of one store file and its idle
/// connections.
///
/// Connections are kept and reused rather than opened per operation: turso
/// re-validates the shared WAL state every time a connection is created.
/// A connection serves one operation at a time and every statement is
/// finished before it goes back.
pub(crate) struct Handle {
    pub(crate) db: Database,
    path: PathBuf,
    /// Idle connections, one pool per durability (a connection's
    /// `synchronous` setting is fixed when it is made).
    pub(crate) idle: [Mutex<Vec<Connection>>; 2],
    /// When it was last used (a process-wide tick).
    last_used: AtomicU64,
    /// Whether the registry keeps it open.
    pub(crate) kept: AtomicBool,
    /// The engine failed inside this database (a panic): it is not reused.
    pub(crate) broken: AtomicBool,
    /// Writers take turns through this.
    pub(crate) gate: WriteGate,
    /// Commits made through the gate (a group commit counts once).
    pub(crate) commits: AtomicU64,
    /// The format the file carries (the store's or one of its `also`).
    pub(crate) format: std::sync::OnceLock<&'static Format>,
    /// Held by an exclusive open: no other process opens the store until
    /// this handle is closed.
    pub(crate) _exclusive: Option<OpenLock>,
}

impl Handle {
    /// The open database `db` of the store file `path`, its writers
    /// passing a gate on the store's lock file `lock_file`; not kept by the
    /// registry yet, no connection made.
    pub(crate) fn new(db: Database, path: PathBuf, lock_file: std::fs::File) -> Handle {
        Handle {
            db,
            path,
            idle: Default::default(),
            last_used: AtomicU64::new(0),
            kept: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            gate: WriteGate::new(lock_file),
            commits: AtomicU64::new(0),
            format: std::sync::OnceLock::new(),
            _exclusive: None,
        }
    }

    /// Marks it used now.
    pub(crate) fn touch(&self) {
        self.last_used
            .store(TICK.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
    }
}

static TICK: AtomicU64 = AtomicU64::new(0);

/// The databases of this process.
#[derive(Default)]
pub(crate) struct Registry {
    /// Every open database, by canonical path (one per file).
    pub(crate) open: HashMap<PathBuf, Weak<Handle>>,
    /// The most recently used databases, kept open.
    keep: Vec<Arc<Handle>>,
    /// One gate per path being opened, so two tasks never open the same
    /// file twice while opens of other files go on undisturbed.
    gates: HashMap<PathBuf, Weak<tokio::sync::Mutex<()>>>,
}

pub(crate) static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Default::default);

/// Locks `m`, also when a holder of it panicked.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Registry {
    /// Keeps `handle` open, closing the least recently used idle database
    /// if that makes too many. Returns what to drop outside the lock.
    pub(crate) fn keep(&mut self, handle: &Arc<Handle>) -> Option<Arc<Handle>> {
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
    pub(crate) fn discard(&mut self, handle: &Arc<Handle>) -> Option<Arc<Handle>> {
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
    pub(crate) fn release_idle(&mut self) -> Vec<Arc<Handle>> {
        let (idle, busy): (Vec<_>, Vec<_>) = std::mem::take(&mut self.keep)
            .into_iter()
            .partition(|h| Arc::strong_count(h) == 1);
        self.keep = busy;
        for h in &idle {
            h.kept.store(false, Ordering::Release);
        }
        idle
    }

    pub(crate) fn gate(&mut self, path: &Path) -> Arc<tokio::sync::Mutex<()>> {
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
pub(crate) fn close(handle: Option<Arc<Handle>>) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::tests::FORMAT;
    use crate::retry::RetryPolicy;
    use crate::store::open_store;
    use crate::store::tests::count;

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
