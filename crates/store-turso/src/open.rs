//! The one way a store file is opened: the steps that turn a store file
//! into a [`turso::Database`], which the store runs, in order, whenever it
//! opens its database (`Store::open_database_as`, in `store.rs`).
//!
//! Opening a live store without turso's multi-process WAL mode corrupts it,
//! so [`build_database`] is the single place that builds a
//! [`turso::Database`]. Around it: the lock that makes the engine's open
//! one step across processes ([`OpenLock`]), the reservation a new store's
//! coordination file gets before the engine maps it ([`Creation`]), the
//! check that no process uses a store ([`unused`]), and the errors of a
//! failed open.

use std::path::{Path, PathBuf};

use turso::{Builder, Database};

use crate::format::Format;
use crate::retry::RetryPolicy;
use alk_store::{AlkError, AlkResult};

/// Builds the engine's database of the store file at `path_str`, in
/// multi-process WAL mode. `Err` is the engine's failure (or panic), as
/// text.
pub(crate) async fn build_database(path_str: &str) -> Result<Database, String> {
    let built = alk_store::panic::contain(
        Builder::new_local(path_str)
            .experimental_multiprocess_wal(true)
            .build(),
    )
    .await;
    match built {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(e)) => Err(e.to_string()),
        Err(panic) => Err(format!("the engine panicked: {}", panic)),
    }
}

/// Runs blocking file-system work off the async worker threads.
pub(crate) async fn blocking<T: Send + 'static>(
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
pub(crate) fn io_failure(
    path: &Path,
    format: &'static Format,
    what: &str,
    e: std::io::Error,
) -> AlkError {
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
pub(crate) fn out_of_descriptors(e: &AlkError) -> bool {
    matches!(e, AlkError::Busy(m) if m.contains("out of file descriptors"))
}

/// The error for an engine failure while opening: classified by its text,
/// which is all turso gives for I/O errors.
pub(crate) fn engine_failure(
    path: &Path,
    format: &'static Format,
    what: &str,
    e: &str,
) -> AlkError {
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

/// What the open of a new store created, to remove it again if the open
/// fails: a failed creation leaves no half-made store behind.
pub(crate) struct Creation {
    path: PathBuf,
    /// The store file did not exist (or was empty) before.
    pub(crate) is_new: bool,
}

/// Bytes reserved for a new store's coordination file before the engine
/// creates it (its first size is about 130 KiB).
const COORDINATION_RESERVE: u64 = 1024 * 1024;

impl Creation {
    pub(crate) fn prepare(path: &Path) -> std::io::Result<Creation> {
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
    pub(crate) fn undo(&self) {
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
pub(crate) fn unused(tshm: &Path) -> bool {
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
pub(crate) struct OpenLock(pub(crate) std::fs::File);

impl OpenLock {
    pub(crate) async fn acquire(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::tests::FORMAT;
    use crate::store::open_store;

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
}
