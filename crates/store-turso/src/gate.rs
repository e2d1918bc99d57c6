//! The write gate: writers of a store take turns in a queue, not in a spin,
//! and writers of one process share commits.
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
//! **Group commit.** A writer that gets the gate while other writers of its
//! process queue behind it does not commit: it leaves its transaction open
//! for them (a [`Group`]), and the last of them commits for all — one sync
//! for many guests' writes. Every member's call returns only once that
//! commit succeeded, so a returned call promises what it always did. The
//! group's transaction holds the cross-process lock until it commits;
//! groups are bounded ([`MAX_GROUP`] members), and a task queued behind the
//! group commits it if its members are gone (a cancelled guest).
//!
//! Reads never take the gate.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rustix::fs::{FlockOperation, flock};
use tokio::sync::{Mutex, OwnedMutexGuard};
use tokio::time::Instant;

use crate::conn::Connection;
use crate::options::Durability;
use alk_store::{AlkError, AlkResult};

/// Most writers one group commit takes.
pub(crate) const MAX_GROUP: usize = 64;

/// The write gate of one open store.
#[derive(Debug)]
pub(crate) struct WriteGate {
    /// The in-process queue, and the group transaction it protects.
    state: Arc<Mutex<Option<Group>>>,
    /// Writers queued on `state` right now.
    waiting: Arc<AtomicUsize>,
    /// The store's lock file (`-openlock`), for the cross-process `flock`.
    file: Arc<File>,
    /// Held by whoever holds or waits for the `flock` (see [`Flock`]).
    flock_slot: Arc<Mutex<()>>,
}

/// A transaction of several writers of this process, committed once for
/// all of them.
pub(crate) struct Group {
    /// The connection the transaction runs on.
    pub(crate) conn: Connection,
    /// The durability of that connection; writers of another durability
    /// do not join.
    pub(crate) durability: Durability,
    /// Told how the group ended.
    members: Vec<tokio::sync::oneshot::Sender<Ended>>,
    /// A task queued to commit the group is on its way.
    committer: bool,
    /// The cross-process lock, held until the group ends.
    _flock: Flock,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("members", &self.members.len())
            .finish_non_exhaustive()
    }
}

impl Group {
    /// A new group transaction holding `flock`, on `conn` (already begun).
    pub(crate) fn new(conn: Connection, durability: Durability, flock: Flock) -> Group {
        Group {
            conn,
            durability,
            members: Vec::new(),
            committer: false,
            _flock: flock,
        }
    }

    /// Adds a writer whose work is in the transaction; it learns through
    /// the receiver how the group ended.
    pub(crate) fn join(&mut self) -> tokio::sync::oneshot::Receiver<Ended> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.members.push(tx);
        rx
    }

    /// Members so far.
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether a committer must be sent (once per group).
    pub(crate) fn needs_committer(&mut self) -> bool {
        !std::mem::replace(&mut self.committer, true)
    }

    /// Tells every member how the group ended; the lock is released as the
    /// group is dropped.
    pub(crate) fn finish(self, ended: Ended) {
        for m in self.members {
            let _ = m.send(ended.clone());
        }
    }
}

/// How a group ended, for its members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Committed: every member's work is durable.
    Committed,
    /// Rolled back because of another member's failure: run again.
    Retry,
    /// The group failed; the error says whether its work was applied
    /// (a failure inside its commit leaves that unknown).
    Failed(AlkError),
}

/// The cross-process lock held; released on drop.
#[derive(Debug)]
pub(crate) struct Flock {
    file: Arc<File>,
    _slot: OwnedMutexGuard<()>,
}

impl Drop for Flock {
    fn drop(&mut self) {
        let _ = flock(&*self.file, FlockOperation::Unlock);
    }
}

/// A writer's turn at the gate: the in-process queue is passed; the group
/// (if one is open) is in it.
pub(crate) type Turn = OwnedMutexGuard<Option<Group>>;

/// Holding the gate alone for a long transaction (a guest's stream
/// transaction); dropping it lets the next writer in.
#[derive(Debug)]
pub(crate) struct WriteGuard {
    _turn: Turn,
    _flock: Flock,
}

impl WriteGuard {
    pub(crate) fn new(turn: Turn, flock: Flock) -> WriteGuard {
        WriteGuard {
            _turn: turn,
            _flock: flock,
        }
    }
}

/// Counts a queued writer while it exists.
struct Waiting(Arc<AtomicUsize>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn busy(store: &Path) -> AlkError {
    AlkError::Busy(format!(
        "{} stayed locked by other writers past the deadline; retry later",
        store.display()
    ))
}

impl WriteGate {
    /// The gate on the store's lock file `file` (kept open for the life of
    /// the store's database).
    pub(crate) fn new(file: File) -> WriteGate {
        WriteGate {
            state: Arc::new(Mutex::new(None)),
            waiting: Arc::new(AtomicUsize::new(0)),
            file: Arc::new(file),
            flock_slot: Arc::new(Mutex::new(())),
        }
    }

    /// Writers of this process queued behind the current one.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// Waits for this process's turn at the gate until `deadline`.
    pub(crate) async fn queue(&self, deadline: Instant, store: &Path) -> AlkResult<Turn> {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let _counted = Waiting(self.waiting.clone());
        tokio::time::timeout_at(deadline, self.state.clone().lock_owned())
            .await
            .map_err(|_| busy(store))
    }

    /// A turn for a task that commits a group left open; it does not count
    /// as a waiting writer (members do not wait for it to join).
    pub(crate) async fn committer_turn(&self) -> Turn {
        self.state.clone().lock_owned().await
    }

    /// Takes the cross-process lock (the caller holds its process's turn)
    /// until `deadline`.
    pub(crate) async fn lock(&self, deadline: Instant, store: &Path) -> AlkResult<Flock> {
        let slot = tokio::time::timeout_at(deadline, self.flock_slot.clone().lock_owned())
            .await
            .map_err(|_| busy(store))?;
        if flock(&*self.file, FlockOperation::NonBlockingLockExclusive).is_ok() {
            return Ok(Flock {
                file: self.file.clone(),
                _slot: slot,
            });
        }
        // Another process writes: wait in the kernel, on a blocking thread.
        // If the deadline passes first, the thread lets go of the lock as
        // soon as it gets it. It keeps the slot meanwhile, so no other task
        // of this process takes (or is released from) the lock through the
        // same file description in between.
        let file = self.file.clone();
        let abandoned = Arc::new(AtomicBool::new(false));
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let abandoned = abandoned.clone();
            tokio::task::spawn_blocking(move || {
                let got = flock(&*file, FlockOperation::LockExclusive);
                let held = Flock { file, _slot: slot };
                if got.is_err() || abandoned.load(Ordering::Acquire) {
                    // Dropping `held` unlocks (harmless if never held).
                    return;
                }
                // If the waiter gave up meanwhile, `held` comes back here
                // and is dropped, unlocking.
                let _ = tx.send(held);
            });
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(held)) => Ok(held),
            Ok(Err(_)) => Err(AlkError::Internal(format!(
                "cannot lock {} for writing",
                store.display()
            ))),
            Err(_) => {
                abandoned.store(true, Ordering::Release);
                Err(busy(store))
            }
        }
    }
}
