//! Transactions across mechanisms: publishes, offset saves, sends to queues
//! and outboxes, and notifications that take effect together at commit, or
//! not at all.
//!
//! The core keeps the state machine (not started → open → finished or
//! aborted), the watchdog, the checks of every argument, the resolution of
//! send options and the wakes after commit; notifications are held back
//! until the commit succeeded. An engine's [`TxEngine`] only applies
//! checked operations and commits them atomically — how it does that across
//! its stores is its own business (see `docs/architecture.md`).

use std::sync::Arc;

use async_trait::async_trait;

use crate::engine::Engine;
use crate::error::{AlkError, AlkResult};
use crate::jobs::{SendOptions, Stamp};
use crate::limits::{StreamLimits, check_batch};
use crate::names::check_name;
use crate::queue::{Payload, check_payload};
use crate::stream::{check_offset, check_publish, check_save};
use crate::wake::{Wakes, topics};

/// Why an operation inside a transaction failed.
#[derive(Debug)]
pub enum TxFailure {
    /// The request was refused before anything was written: the
    /// transaction goes on.
    Refused(AlkError),
    /// The engine failed and the transaction was rolled back; the error
    /// that says why (`busy` when retrying the transaction may succeed,
    /// `internal` otherwise).
    Failed(AlkError),
}

/// An engine's open transaction, begun by [`Engine::begin`]. Sends to
/// queues made in it must become claimable exactly when it commits and
/// never if it rolls back.
#[async_trait]
pub trait TxEngine: Send {
    /// Appends an event inside the transaction; its offset.
    async fn publish(
        &mut self,
        stream: &str,
        key: Option<&str>,
        payload: &[u8],
        now: i64,
    ) -> Result<u64, TxFailure>;

    /// Saves a consumer offset inside the transaction (rules of
    /// [`crate::stream::StreamEngine::save_offset`]).
    async fn save_offset(
        &mut self,
        stream: &str,
        consumer: &str,
        offset: u64,
    ) -> Result<(), TxFailure>;

    /// Sends `payloads` to queue `queue` (a checked name; it may be an
    /// outbox's reserved backing queue) with `stamp`, inside the
    /// transaction.
    async fn enqueue(
        &mut self,
        queue: &str,
        payloads: &[Payload],
        stamp: &Stamp,
        now: i64,
    ) -> Result<(), TxFailure>;

    /// Sends `payload` to queue `queue` with `stamp` unless `unique`'s key
    /// is taken when the message reaches the queue (the rule of
    /// [`crate::queue::QueueEngine::send_unique`]; a taken key stores
    /// nothing), inside the transaction.
    async fn enqueue_unique(
        &mut self,
        queue: &str,
        payload: &Payload,
        stamp: &Stamp,
        unique: &crate::jobs::Unique,
        now: i64,
    ) -> Result<(), TxFailure>;

    /// Makes everything durable and visible. On failure the error says what
    /// is true: [`AlkError::TransactionAborted`] when nothing was applied
    /// (rolled back), [`AlkError::Internal`] saying the outcome is unknown
    /// when the engine failed inside its commit and cannot tell.
    async fn commit(self: Box<Self>) -> AlkResult<()>;

    /// Discards everything.
    async fn rollback(self: Box<Self>);
}

/// Where a transaction stands.
enum TxState {
    /// No operation yet: nothing held.
    NotStarted,
    /// Begun in the engine; the watchdog rolls it back when held too long.
    Open(Box<dyn TxEngine>, tokio::task::AbortHandle),
    /// Committed or rolled back by its owner.
    Finished,
    /// Rolled back by the host; the reason.
    Aborted(String),
}

/// The most distinct channels one transaction may notify.
pub const MAX_TX_CHANNELS: usize = 1_000;

/// What to wake once the transaction has committed.
#[derive(Default)]
struct AfterCommit {
    /// Wake topics (streams published to, queues sent to), each once.
    topics: std::collections::BTreeSet<String>,
    /// Channels notified, each once.
    channels: std::collections::BTreeSet<String>,
}

/// A transaction: publishes, offset saves, queue and outbox sends and
/// notifications made in it take effect together at [`Tx::commit`], or not
/// at all.
///
/// It may hold a write lock of the engine from its first operation until
/// commit or rollback, which blocks every other writer of that store (in
/// every process), so the host rolls it back once it has been open for
/// [`crate::StreamLimits::max_transaction`]. Dropping it without committing
/// rolls it back.
pub struct Tx {
    engine: Arc<dyn Engine>,
    limits: StreamLimits,
    wakes: Wakes,
    state: Arc<tokio::sync::Mutex<TxState>>,
    after: std::sync::Mutex<AfterCommit>,
}

impl std::fmt::Debug for Tx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx").finish_non_exhaustive()
    }
}

/// One operation inside a transaction.
enum TxOp<'a> {
    Publish {
        stream: &'a str,
        key: Option<&'a str>,
        payload: &'a [u8],
        now: i64,
    },
    SaveOffset {
        stream: &'a str,
        consumer: &'a str,
        offset: u64,
    },
    Enqueue {
        queue: &'a str,
        payloads: &'a [Payload],
        stamp: &'a Stamp,
        now: i64,
    },
    EnqueueUnique {
        queue: &'a str,
        payload: &'a Payload,
        stamp: &'a Stamp,
        unique: &'a crate::jobs::Unique,
        now: i64,
    },
}

impl Tx {
    /// A transaction of `engine`, checked against `limits` (event sizes,
    /// the longest it may stay open). Nothing is begun in the engine until
    /// its first operation.
    pub fn new(engine: Arc<dyn Engine>, limits: StreamLimits) -> AlkResult<Tx> {
        let wakes = engine.wakes()?;
        Ok(Tx {
            engine,
            limits,
            wakes,
            state: Arc::new(tokio::sync::Mutex::new(TxState::NotStarted)),
            after: Default::default(),
        })
    }

    fn after(&self) -> std::sync::MutexGuard<'_, AfterCommit> {
        self.after.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `op` in the engine's transaction, beginning it if needed; a
    /// publish's offset. An engine failure ends the transaction (rolled
    /// back, `transaction-aborted`).
    async fn apply(&self, op: TxOp<'_>) -> AlkResult<u64> {
        let mut state = self.state.lock().await;
        if let Some(e) = Self::finished(&state) {
            return Err(e);
        }
        if matches!(*state, TxState::NotStarted) {
            let tx = self.engine.begin().await?;
            *state = TxState::Open(tx, self.arm_watchdog());
        }
        let TxState::Open(tx, _) = &mut *state else {
            unreachable!("begun above")
        };
        let result = match op {
            TxOp::Publish {
                stream,
                key,
                payload,
                now,
            } => tx.publish(stream, key, payload, now).await,
            TxOp::SaveOffset {
                stream,
                consumer,
                offset,
            } => tx.save_offset(stream, consumer, offset).await.map(|()| 0),
            TxOp::Enqueue {
                queue,
                payloads,
                stamp,
                now,
            } => tx.enqueue(queue, payloads, stamp, now).await.map(|()| 0),
            TxOp::EnqueueUnique {
                queue,
                payload,
                stamp,
                unique,
                now,
            } => tx
                .enqueue_unique(queue, payload, stamp, unique, now)
                .await
                .map(|()| 0),
        };
        match result {
            Ok(v) => Ok(v),
            // A refused request wrote nothing: the transaction goes on.
            Err(TxFailure::Refused(e)) => Err(e),
            Err(TxFailure::Failed(why)) => {
                if let TxState::Open(_, watchdog) =
                    std::mem::replace(&mut *state, TxState::Finished)
                {
                    watchdog.abort();
                }
                let why = format!("an operation failed and the transaction was rolled back: {why}");
                *state = TxState::Aborted(why.clone());
                Err(AlkError::TransactionAborted(why))
            }
        }
    }

    /// The error of an operation on a finished transaction, if it is one.
    fn finished(state: &TxState) -> Option<AlkError> {
        match state {
            TxState::Finished => Some(AlkError::InvalidArgument(
                "the transaction is already finished".into(),
            )),
            TxState::Aborted(why) => Some(AlkError::TransactionAborted(why.clone())),
            _ => None,
        }
    }

    /// Rolls the transaction back once it has been open too long; the task
    /// is aborted when the transaction ends first.
    fn arm_watchdog(&self) -> tokio::task::AbortHandle {
        let state = Arc::downgrade(&self.state);
        let limit = self.limits.max_transaction;
        tokio::spawn(async move {
            tokio::time::sleep(limit).await;
            let Some(state) = state.upgrade() else { return };
            let mut state = state.lock().await;
            if !matches!(*state, TxState::Open(..)) {
                return;
            }
            if let TxState::Open(tx, _) = std::mem::replace(&mut *state, TxState::Finished) {
                tx.rollback().await;
                *state = TxState::Aborted(format!(
                    "the transaction was open longer than {limit:?} and was rolled back"
                ));
            }
        })
        .abort_handle()
    }

    /// Appends an event inside the transaction; its offset.
    pub async fn publish(
        &self,
        stream: &str,
        key: Option<&str>,
        payload: &[u8],
        now: i64,
    ) -> AlkResult<u64> {
        check_publish(&self.limits, stream, key, payload)?;
        let offset = self
            .apply(TxOp::Publish {
                stream,
                key,
                payload,
                now,
            })
            .await?;
        self.after().topics.insert(topics::stream(stream));
        Ok(offset)
    }

    /// Saves a consumer offset inside the transaction.
    pub async fn save_offset(&self, stream: &str, consumer: &str, offset: u64) -> AlkResult<()> {
        check_save(stream, consumer)?;
        check_offset("offset", offset)?;
        self.apply(TxOp::SaveOffset {
            stream,
            consumer,
            offset,
        })
        .await
        .map(|_| ())
    }

    /// Sends `payloads` to queue `queue` with `options` (resolved at `now`)
    /// inside the transaction: the messages become claimable when it
    /// commits.
    pub async fn enqueue(
        &self,
        queue: &str,
        payloads: &[Payload],
        options: &SendOptions,
        now: i64,
    ) -> AlkResult<()> {
        check_name("queue", queue)?;
        self.enqueue_to(queue, payloads, options, now).await
    }

    /// [`Tx::enqueue`] to the backing queue of outbox `outbox`.
    pub async fn outbox_enqueue(
        &self,
        outbox: &str,
        payloads: &[Payload],
        options: &SendOptions,
        now: i64,
    ) -> AlkResult<()> {
        let queue = crate::outbox::backing_queue(outbox)?;
        self.enqueue_to(&queue, payloads, options, now).await
    }

    async fn enqueue_to(
        &self,
        queue: &str,
        payloads: &[Payload],
        options: &SendOptions,
        now: i64,
    ) -> AlkResult<()> {
        check_batch("payloads", payloads.len())?;
        let stamp = Stamp::resolve(options, now)?;
        payloads.iter().try_for_each(check_payload)?;
        if payloads.is_empty() {
            return Ok(());
        }
        self.apply(TxOp::Enqueue {
            queue,
            payloads,
            stamp: &stamp,
            now,
        })
        .await?;
        self.after().topics.insert(topics::queue(queue));
        Ok(())
    }

    /// Sends `payload` to queue `queue` with `options` inside the
    /// transaction unless `unique`'s key is taken when the message reaches
    /// the queue (a taken key stores nothing; see
    /// [`crate::queue::Queue::send_unique`]).
    pub async fn enqueue_unique(
        &self,
        queue: &str,
        payload: &Payload,
        options: &SendOptions,
        unique: &crate::jobs::UniqueOptions,
        now: i64,
    ) -> AlkResult<()> {
        check_name("queue", queue)?;
        let stamp = Stamp::resolve(options, now)?;
        let unique = crate::jobs::Unique::resolve(unique, now)?;
        check_payload(payload)?;
        self.apply(TxOp::EnqueueUnique {
            queue,
            payload,
            stamp: &stamp,
            unique: &unique,
            now,
        })
        .await?;
        self.after().topics.insert(topics::queue(queue));
        Ok(())
    }

    /// Notifies `channel` when (and only if) the transaction commits. Takes
    /// no lock and writes nothing; at most [`MAX_TX_CHANNELS`] distinct
    /// channels per transaction (`invalid-argument` beyond).
    pub async fn notify(&self, channel: &str) -> AlkResult<()> {
        check_name("channel", channel)?;
        if let Some(e) = Self::finished(&*self.state.lock().await) {
            return Err(e);
        }
        let mut after = self.after();
        if after.channels.len() >= MAX_TX_CHANNELS && !after.channels.contains(channel) {
            return Err(AlkError::InvalidArgument(format!(
                "a transaction notifies at most {MAX_TX_CHANNELS} channels; commit this one and notify the rest in another"
            )));
        }
        after.channels.insert(channel.to_string());
        Ok(())
    }

    /// Makes everything done in the transaction durable and visible, then
    /// wakes the waiters of the streams and queues written and sends the
    /// notifications.
    pub async fn commit(&self) -> AlkResult<()> {
        let mut state = self.state.lock().await;
        let committed = match std::mem::replace(&mut *state, TxState::Finished) {
            TxState::NotStarted => Ok(()),
            TxState::Open(tx, watchdog) => {
                watchdog.abort();
                tx.commit().await.inspect_err(|e| {
                    *state = TxState::Aborted(e.to_string());
                })
            }
            TxState::Finished => Err(AlkError::InvalidArgument(
                "the transaction is already finished".into(),
            )),
            TxState::Aborted(why) => {
                *state = TxState::Aborted(why.clone());
                Err(AlkError::TransactionAborted(why))
            }
        };
        let after = std::mem::take(&mut *self.after());
        if committed.is_ok() {
            for topic in after.topics {
                self.wakes.signal(&topic);
            }
            for channel in after.channels {
                self.wakes.signal(&topics::channel(&channel));
            }
        }
        committed
    }

    /// Discards everything done in the transaction and finishes it.
    pub async fn rollback(&self) {
        let mut state = self.state.lock().await;
        if let TxState::Open(tx, watchdog) = std::mem::replace(&mut *state, TxState::Finished) {
            watchdog.abort();
            tx.rollback().await;
        }
        *self.after() = AfterCommit::default();
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        // Dropped while open (a guest that trapped or was torn down): roll
        // back on the runtime, since a drop cannot wait.
        let Ok(mut state) = self.state.try_lock() else {
            return;
        };
        if let TxState::Open(tx, watchdog) = std::mem::replace(&mut *state, TxState::Finished) {
            watchdog.abort();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(tx.rollback());
            }
        }
    }
}
