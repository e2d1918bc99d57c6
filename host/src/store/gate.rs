//! The write gate: writers of a store take turns in a queue, not in a spin.
//!
//! turso serializes writers across processes with a lock whose waiters spin
//! a CPU core, and whose hand-off is unfair: under contention one process
//! can commit thousands of times while another waits past any deadline.
//! So every alk write to a store first passes this gate, and only then
//! begins its transaction, which the engine then grants at once:
//!
//! - inside a process, a FIFO queue (`tokio::sync::Mutex`): tasks and
//!   guests of one process get the gate in the order they asked;
//! - across processes, an exclusive `flock` on the store's `-openlock`
//!   file, waited for in the kernel by a blocking thread: a waiting process
//!   sleeps (no CPU) and is woken when the holder lets go.
//!
//! The gate holds one write transaction (a statement, a batch, a claim, a
//! guest's stream transaction) and nothing else; reads never take it.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{FlockOperation, flock};
use tokio::sync::{Mutex, OwnedMutexGuard};
use tokio::time::Instant;

use crate::error::{AlkError, AlkResult};

/// The write gate of one open store.
#[derive(Debug)]
pub(crate) struct WriteGate {
    local: Arc<Mutex<()>>,
    file: Arc<File>,
}

/// Holding the gate; dropping it lets the next writer in.
#[derive(Debug)]
pub(crate) struct WriteGuard {
    file: Arc<File>,
    _local: OwnedMutexGuard<()>,
}

impl Drop for WriteGuard {
    fn drop(&mut self) {
        let _ = flock(&*self.file, FlockOperation::Unlock);
    }
}

impl WriteGate {
    /// The gate on the store's lock file `file` (kept open for the life of
    /// the store's database).
    pub(crate) fn new(file: File) -> WriteGate {
        WriteGate {
            local: Arc::new(Mutex::new(())),
            file: Arc::new(file),
        }
    }

    /// Waits for the gate until `deadline`; `busy` past it.
    pub(crate) async fn enter(&self, deadline: Instant, store: &Path) -> AlkResult<WriteGuard> {
        let busy = || {
            AlkError::Busy(format!(
                "{} stayed locked by other writers past the deadline; retry later",
                store.display()
            ))
        };
        let local = tokio::time::timeout_at(deadline, self.local.clone().lock_owned())
            .await
            .map_err(|_| busy())?;
        if flock(&*self.file, FlockOperation::NonBlockingLockExclusive).is_ok() {
            return Ok(WriteGuard {
                file: self.file.clone(),
                _local: local,
            });
        }
        // Another process writes: wait in the kernel, on a blocking thread.
        // If the deadline passes first, the thread lets go of the lock as
        // soon as it gets it (and of this process's turn with it).
        let file = self.file.clone();
        let abandoned = Arc::new(AtomicBool::new(false));
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let abandoned = abandoned.clone();
            tokio::task::spawn_blocking(move || {
                let got = flock(&*file, FlockOperation::LockExclusive);
                let guard = WriteGuard { file, _local: local };
                if got.is_err() || abandoned.load(Ordering::Acquire) {
                    // Dropping the guard unlocks (harmless if never held).
                    return;
                }
                // If the waiter gave up meanwhile, the guard comes back
                // here and is dropped, unlocking.
                let _ = tx.send(guard);
            });
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(guard)) => Ok(guard),
            Ok(Err(_)) => Err(AlkError::Internal(format!(
                "cannot lock {} for writing",
                store.display()
            ))),
            Err(_) => {
                abandoned.store(true, Ordering::Release);
                Err(busy())
            }
        }
    }
}
