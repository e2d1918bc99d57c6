//! Durable streams with consumer offsets and transactions: the rules,
//! waiting reads, the transaction state machine, and the traits an engine
//! implements.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::engine::Engine;
use crate::error::{AlkError, AlkResult};
use crate::limits::{MAX_READ, MAX_READ_BYTES, StreamLimits, check_batch};
use crate::names::{check_identifier, check_key, check_name, check_size};
use crate::wake::{Check, Wakes};

/// One stored event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Its offset in the stream: 1, 2, 3, … never reused.
    pub offset: u64,
    /// The stream.
    pub stream: String,
    /// The key it was published with, if any.
    pub key: Option<String>,
    /// The payload.
    pub payload: Vec<u8>,
    /// When it was published, unix epoch milliseconds.
    pub created_at: i64,
}

/// What an engine does for the streams. Arguments are checked by
/// [`Streams`].
#[async_trait]
pub trait StreamEngine: Send + Sync {
    /// Appends an event at the stream's next offset; the offset.
    async fn publish(
        &self,
        stream: &str,
        key: Option<&str>,
        payload: &[u8],
        now: i64,
    ) -> AlkResult<u64>;

    /// Appends every event, all or none; their offsets.
    async fn publish_batch(
        &self,
        stream: &str,
        events: &[(Option<String>, Vec<u8>)],
        now: i64,
    ) -> AlkResult<Vec<u64>>;

    /// Up to `limit` events after `offset`, in offset order, stopping
    /// (after at least one) before the payloads would pass `max_bytes`.
    async fn read_since(
        &self,
        stream: &str,
        offset: u64,
        limit: u32,
        max_bytes: usize,
    ) -> AlkResult<Vec<Event>>;

    /// Saves `consumer`'s offset; a lower one than saved changes nothing;
    /// one beyond the last assigned offset is `invalid-argument`.
    async fn save_offset(&self, stream: &str, consumer: &str, offset: u64) -> AlkResult<()>;

    /// `consumer`'s saved offset.
    async fn get_offset(&self, stream: &str, consumer: &str) -> AlkResult<Option<u64>>;

    /// Deletes the events at or below `horizon`; how many.
    async fn trim_to(&self, stream: &str, horizon: u64) -> AlkResult<u64>;

    /// Begins a transaction (it may take the store's write lock for its
    /// whole life).
    async fn begin(&self) -> AlkResult<Box<dyn StreamTxEngine>>;
}

/// Why an operation inside a transaction failed.
#[derive(Debug)]
pub enum TxFailure {
    /// The request was refused before anything was written: the
    /// transaction goes on.
    Refused(AlkError),
    /// The engine failed; the transaction was rolled back. Why.
    Failed(String),
}

/// An engine's open stream transaction.
#[async_trait]
pub trait StreamTxEngine: Send {
    /// Appends an event inside the transaction; its offset.
    async fn publish(
        &mut self,
        stream: &str,
        key: Option<&str>,
        payload: &[u8],
        now: i64,
    ) -> Result<u64, TxFailure>;

    /// Saves a consumer offset inside the transaction (rules of
    /// [`StreamEngine::save_offset`]).
    async fn save_offset(
        &mut self,
        stream: &str,
        consumer: &str,
        offset: u64,
    ) -> Result<(), TxFailure>;

    /// Makes everything durable and visible; on failure nothing is, and the
    /// error says why.
    async fn commit(self: Box<Self>) -> Result<(), String>;

    /// Discards everything.
    async fn rollback(self: Box<Self>);
}

fn topic(stream: &str) -> String {
    format!("stream.{stream}")
}

fn check_save(stream: &str, consumer: &str) -> AlkResult<()> {
    check_name("stream", stream)?;
    check_identifier("consumer", consumer)
}

/// The streams, as guests use them.
#[derive(Clone)]
pub struct Streams {
    engine: Arc<dyn StreamEngine>,
    limits: StreamLimits,
    wakes: Wakes,
}

impl std::fmt::Debug for Streams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streams").finish_non_exhaustive()
    }
}

impl Streams {
    /// The streams of `engine`.
    pub async fn open(engine: &dyn Engine, limits: StreamLimits) -> AlkResult<Streams> {
        Ok(Streams {
            engine: engine.streams().await?,
            limits,
            wakes: engine.wakes()?,
        })
    }

    /// The limits in force.
    pub fn limits(&self) -> StreamLimits {
        self.limits
    }

    fn check_publish(&self, stream: &str, key: Option<&str>, payload: &[u8]) -> AlkResult<()> {
        check_name("stream", stream)?;
        if let Some(key) = key {
            check_key("event key", key, self.limits.max_key_bytes)?;
        }
        check_size("payload", payload.len(), self.limits.max_payload_bytes)
    }

    /// Appends an event; its offset.
    pub async fn publish(
        &self,
        stream: &str,
        key: Option<&str>,
        payload: &[u8],
        now: i64,
    ) -> AlkResult<u64> {
        self.check_publish(stream, key, payload)?;
        let offset = self.engine.publish(stream, key, payload, now).await?;
        self.wakes.signal(&topic(stream));
        Ok(offset)
    }

    /// Appends every `(key, payload)` to `stream` in one transaction; their
    /// offsets.
    pub async fn publish_batch(
        &self,
        stream: &str,
        events: &[(Option<String>, Vec<u8>)],
        now: i64,
    ) -> AlkResult<Vec<u64>> {
        check_batch("events", events.len())?;
        check_name("stream", stream)?;
        for (key, payload) in events {
            self.check_publish(stream, key.as_deref(), payload)?;
        }
        let offsets = self.engine.publish_batch(stream, events, now).await?;
        if !offsets.is_empty() {
            self.wakes.signal(&topic(stream));
        }
        Ok(offsets)
    }

    /// Up to `limit` (clamped to 1..=[`MAX_READ`]) events with offsets above
    /// `offset`, in offset order; a read stops, after at least one event,
    /// once the payloads reach [`MAX_READ_BYTES`].
    pub async fn read_since(&self, stream: &str, offset: u64, limit: u32) -> AlkResult<Vec<Event>> {
        check_name("stream", stream)?;
        if i64::try_from(offset).is_err() {
            return Err(AlkError::InvalidArgument(format!(
                "offset {offset} is out of range"
            )));
        }
        self.engine
            .read_since(stream, offset, limit.clamp(1, MAX_READ), MAX_READ_BYTES)
            .await
    }

    /// Like [`Streams::read_since`], but waits (holding nothing open) until
    /// there is at least one event after `offset`, or `deadline`; `None`
    /// means there is still nothing. With `limit` 0 it only waits and
    /// returns an empty list when there is something.
    pub async fn read_wait(
        &self,
        stream: &str,
        offset: u64,
        limit: u32,
        deadline: Option<Instant>,
    ) -> AlkResult<Option<Vec<Event>>> {
        check_name("stream", stream)?;
        self.wakes
            .wait_for(&topic(stream), deadline, || {
                Box::pin(async move {
                    let events = self.read_since(stream, offset, limit.max(1)).await?;
                    Ok(match (events.is_empty(), limit) {
                        (true, _) => Check::NotYet(None),
                        (false, 0) => Check::Ready(Vec::new()),
                        (false, _) => Check::Ready(events),
                    })
                })
            })
            .await
    }

    /// Saves `consumer`'s offset in `stream`; a lower offset than the saved
    /// one changes nothing.
    pub async fn save_offset(&self, stream: &str, consumer: &str, offset: u64) -> AlkResult<()> {
        check_save(stream, consumer)?;
        check_offset("offset", offset)?;
        self.engine.save_offset(stream, consumer, offset).await
    }

    /// `consumer`'s saved offset in `stream`, if it ever saved one.
    pub async fn get_offset(&self, stream: &str, consumer: &str) -> AlkResult<Option<u64>> {
        check_save(stream, consumer)?;
        self.engine.get_offset(stream, consumer).await
    }

    /// Deletes the events of `stream` at or below `horizon`; how many.
    pub async fn trim_to(&self, stream: &str, horizon: u64) -> AlkResult<u64> {
        check_name("stream", stream)?;
        check_offset("horizon", horizon)?;
        self.engine.trim_to(stream, horizon).await
    }

    /// A transaction on these streams; it begins at its first operation.
    pub fn transaction(&self) -> StreamTx {
        StreamTx {
            streams: self.clone(),
            state: Arc::new(tokio::sync::Mutex::new(TxState::NotStarted)),
            published: Default::default(),
        }
    }
}

fn check_offset(what: &str, v: u64) -> AlkResult<()> {
    i64::try_from(v)
        .map(|_| ())
        .map_err(|_| AlkError::InvalidArgument(format!("{what} {v} is out of range")))
}

/// Where a transaction stands.
enum TxState {
    /// No operation yet: nothing held.
    NotStarted,
    /// Begun in the engine; the watchdog rolls it back when held too long.
    Open(Box<dyn StreamTxEngine>, tokio::task::AbortHandle),
    /// Committed or rolled back by its owner.
    Finished,
    /// Rolled back by the host; the reason.
    Aborted(String),
}

/// A transaction: publishes and offset saves made in it become visible
/// together at [`StreamTx::commit`], or not at all.
///
/// It may hold the store's write lock from its first operation until commit
/// or rollback, which blocks every other writer of the store (in every
/// process), so the host rolls it back once it has been open for
/// [`StreamLimits::max_transaction`]. Dropping it without committing rolls
/// it back.
pub struct StreamTx {
    streams: Streams,
    state: Arc<tokio::sync::Mutex<TxState>>,
    /// Streams published to, to wake their waiters after commit.
    published: std::sync::Mutex<Vec<String>>,
}

impl std::fmt::Debug for StreamTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamTx").finish_non_exhaustive()
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
}

impl StreamTx {
    /// Runs `op` in the engine's transaction, beginning it if needed; a
    /// publish's offset. An engine failure ends the transaction (rolled
    /// back, `transaction-aborted`).
    async fn apply(&self, op: TxOp<'_>) -> AlkResult<u64> {
        let mut state = self.state.lock().await;
        if matches!(*state, TxState::NotStarted) {
            let tx = self.streams.engine.begin().await?;
            *state = TxState::Open(tx, self.arm_watchdog());
        }
        let result = match &mut *state {
            TxState::Open(tx, _) => match op {
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
            },
            TxState::Finished => {
                return Err(AlkError::InvalidArgument(
                    "the transaction is already finished".into(),
                ));
            }
            TxState::Aborted(why) => return Err(AlkError::TransactionAborted(why.clone())),
            TxState::NotStarted => unreachable!("begun above"),
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

    /// Rolls the transaction back once it has been open too long; the task
    /// is aborted when the transaction ends first.
    fn arm_watchdog(&self) -> tokio::task::AbortHandle {
        let state = Arc::downgrade(&self.state);
        let limit = self.streams.limits.max_transaction;
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
        self.streams.check_publish(stream, key, payload)?;
        let offset = self
            .apply(TxOp::Publish {
                stream,
                key,
                payload,
                now,
            })
            .await?;
        let mut published = self.published.lock().unwrap_or_else(|p| p.into_inner());
        if !published.iter().any(|s| s == stream) {
            published.push(stream.to_string());
        }
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

    /// Makes everything done in the transaction durable and visible, and
    /// wakes the waiters of the streams published to.
    pub async fn commit(&self) -> AlkResult<()> {
        let mut state = self.state.lock().await;
        match std::mem::replace(&mut *state, TxState::Finished) {
            TxState::NotStarted => Ok(()),
            TxState::Open(tx, watchdog) => {
                watchdog.abort();
                match tx.commit().await {
                    Ok(()) => {
                        let published = std::mem::take(
                            &mut *self.published.lock().unwrap_or_else(|p| p.into_inner()),
                        );
                        for stream in published {
                            self.streams.wakes.signal(&topic(&stream));
                        }
                        Ok(())
                    }
                    Err(e) => {
                        let why = format!("commit failed and the transaction was rolled back: {e}");
                        *state = TxState::Aborted(why.clone());
                        Err(AlkError::TransactionAborted(why))
                    }
                }
            }
            TxState::Finished => Err(AlkError::InvalidArgument(
                "the transaction is already finished".into(),
            )),
            TxState::Aborted(why) => {
                *state = TxState::Aborted(why.clone());
                Err(AlkError::TransactionAborted(why))
            }
        }
    }

    /// Discards everything done in the transaction and finishes it.
    pub async fn rollback(&self) {
        let mut state = self.state.lock().await;
        if let TxState::Open(tx, watchdog) = std::mem::replace(&mut *state, TxState::Finished) {
            watchdog.abort();
            tx.rollback().await;
        }
    }
}

impl Drop for StreamTx {
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
