//! Work queues with visibility timeouts: the rules, waiting receives, and
//! the trait an engine implements.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::engine::Engine;
use crate::error::{AlkError, AlkResult};
use crate::limits::{DEFAULT_VISIBILITY_MS, MAX_PAYLOAD_BYTES, MAX_RECEIVE, check_batch};
use crate::names::check_name;
use crate::time::{after, instant_at};
use crate::wake::{Check, Wakes};

/// A message body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// JSON text (its syntax checked on send; stored as written).
    Json(String),
    /// Plain text.
    Text(String),
}

impl Payload {
    /// `"json"` or `"text"`, and the text.
    pub fn parts(&self) -> (&'static str, &str) {
        match self {
            Payload::Json(t) => ("json", t),
            Payload::Text(t) => ("text", t),
        }
    }
}

/// One delivery of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The message id: increasing, never reused.
    pub id: i64,
    /// The body.
    pub payload: Payload,
    /// Identifies this delivery for ack and nack; opaque to guests.
    pub receipt: String,
    /// Deliveries so far, this one included.
    pub attempt: u32,
}

/// How an ack or nack found the message of a receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Acknowledged (or given back) now.
    Done,
    /// Already gone, or not a receipt at all.
    Gone,
    /// The message exists, but this is not its current receipt.
    Stale,
}

/// What an engine does for one queue. Arguments are checked by [`Queue`];
/// times are epoch milliseconds; a message is due when its visibility time
/// is at or before `now`.
#[async_trait]
pub trait QueueEngine: Send + Sync {
    /// Appends a message due at once; its id.
    async fn send(&self, payload: &Payload, now: i64) -> AlkResult<i64>;

    /// Appends every message, all or none; their ids, in order.
    async fn send_batch(&self, payloads: &[Payload], now: i64) -> AlkResult<Vec<i64>>;

    /// Claims up to `max` due messages, oldest sent first, for one
    /// delivery each, hidden until `visible_until`; every claimed message's
    /// attempt grows by one and it gets a new receipt (older ones become
    /// stale). Each message goes to exactly one claimer, whatever the
    /// number of racing claimers in any process.
    async fn receive(&self, max: u32, visible_until: i64, now: i64) -> AlkResult<Vec<Delivery>>;

    /// Deletes the message of a current receipt.
    async fn ack(&self, receipt: &str) -> AlkResult<Settled>;

    /// Acknowledges every receipt in one transaction; what each found.
    async fn ack_batch(&self, receipts: &[String]) -> AlkResult<Vec<Settled>>;

    /// Makes the message of a current receipt due at `now`, keeping its
    /// attempt count.
    async fn nack(&self, receipt: &str, now: i64) -> AlkResult<Settled>;

    /// When the next message is due, if there is any message.
    async fn next_visible(&self) -> AlkResult<Option<i64>>;

    /// Deletes every message.
    async fn purge(&self) -> AlkResult<()>;
}

/// Checks a payload: its size, and for JSON its syntax.
pub fn check_payload(payload: &Payload) -> AlkResult<()> {
    let (kind, data) = payload.parts();
    if data.len() > MAX_PAYLOAD_BYTES {
        return Err(AlkError::PayloadTooLarge {
            what: "payload",
            size: data.len() as u64,
            limit: MAX_PAYLOAD_BYTES as u64,
        });
    }
    if kind == "json"
        && let Err(e) = crate::json::check(data)
    {
        return Err(AlkError::InvalidArgument(format!(
            "payload is not valid JSON: {e}"
        )));
    }
    Ok(())
}

/// A queue, as guests use it.
#[derive(Clone)]
pub struct Queue {
    name: String,
    engine: Arc<dyn QueueEngine>,
    wakes: Wakes,
    topic: String,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("name", &self.name).finish()
    }
}

impl Queue {
    /// Opens (creating on first use) queue `name` of `engine`.
    pub async fn open(engine: &dyn Engine, name: &str) -> AlkResult<Queue> {
        check_name("queue", name)?;
        Ok(Queue {
            name: name.to_string(),
            engine: engine.queue(name).await?,
            wakes: engine.wakes()?,
            topic: format!("queue.{name}"),
        })
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Appends a message at `now`; its id.
    pub async fn send(&self, payload: &Payload, now: i64) -> AlkResult<i64> {
        check_payload(payload)?;
        let id = self.engine.send(payload, now).await?;
        self.wakes.signal(&self.topic);
        Ok(id)
    }

    /// Appends every payload at `now`, all or none (every payload is
    /// checked first); their ids.
    pub async fn send_batch(&self, payloads: &[Payload], now: i64) -> AlkResult<Vec<i64>> {
        check_batch("payloads", payloads.len())?;
        payloads.iter().try_for_each(check_payload)?;
        let ids = self.engine.send_batch(payloads, now).await?;
        if !ids.is_empty() {
            self.wakes.signal(&self.topic);
        }
        Ok(ids)
    }

    /// Claims up to `max` (clamped to 1..=[`MAX_RECEIVE`]) due messages at
    /// `now` for `visibility_ms` (default [`DEFAULT_VISIBILITY_MS`]).
    pub async fn receive(
        &self,
        max: u32,
        visibility_ms: Option<u64>,
        now: i64,
    ) -> AlkResult<Vec<Delivery>> {
        let visible_until = after(
            "visibility-ms",
            visibility_ms.unwrap_or(DEFAULT_VISIBILITY_MS),
            now,
        )?;
        self.engine
            .receive(max.clamp(1, MAX_RECEIVE), visible_until, now)
            .await
    }

    /// Like [`Queue::receive`], but waits (holding nothing open) until at
    /// least one message can be claimed or `deadline` passes; an empty list
    /// means the deadline passed.
    pub async fn receive_wait(
        &self,
        max: u32,
        visibility_ms: Option<u64>,
        clock: &(dyn Fn() -> i64 + Send + Sync),
        deadline: Instant,
    ) -> AlkResult<Vec<Delivery>> {
        // Refuse bad arguments now, not at the first message.
        after(
            "visibility-ms",
            visibility_ms.unwrap_or(DEFAULT_VISIBILITY_MS),
            clock(),
        )?;
        let got = self
            .wakes
            .wait_for(&self.topic, Some(deadline), || {
                Box::pin(async move {
                    let now = clock();
                    match self.engine.next_visible().await? {
                        Some(at) if at <= now => {}
                        Some(at) => return Ok(Check::NotYet(Some(instant_at(at, now)))),
                        None => return Ok(Check::NotYet(None)),
                    }
                    let got = self.receive(max, visibility_ms, now).await?;
                    // Empty: another receiver was faster; wait again.
                    Ok(if got.is_empty() {
                        Check::NotYet(None)
                    } else {
                        Check::Ready(got)
                    })
                })
            })
            .await?;
        Ok(got.unwrap_or_default())
    }

    /// Waits until some message is due (by `clock`), or `deadline`; true
    /// when one is. A hint: another receiver may take it first.
    pub async fn wait_due(
        &self,
        clock: &(dyn Fn() -> i64 + Send + Sync),
        deadline: Option<Instant>,
    ) -> AlkResult<bool> {
        let found = self
            .wakes
            .wait_for(&self.topic, deadline, || {
                Box::pin(async move {
                    let now = clock();
                    Ok(match self.engine.next_visible().await? {
                        Some(at) if at <= now => Check::Ready(()),
                        Some(at) => Check::NotYet(Some(instant_at(at, now))),
                        None => Check::NotYet(None),
                    })
                })
            })
            .await?;
        Ok(found.is_some())
    }

    fn stale(receipt: &str) -> AlkError {
        AlkError::StaleReceipt(format!(
            "receipt {receipt} is not the current one of its message: it was delivered again since, or the receipt is not this queue's"
        ))
    }

    /// Deletes the message of a current receipt; gone messages and strings
    /// that are not receipts succeed and do nothing.
    pub async fn ack(&self, receipt: &str) -> AlkResult<()> {
        match self.engine.ack(receipt).await? {
            Settled::Done | Settled::Gone => Ok(()),
            Settled::Stale => Err(Self::stale(receipt)),
        }
    }

    /// Acknowledges up to [`crate::limits::MAX_BATCH`] receipts in one
    /// transaction; what each found (stale ones do not stop the others).
    pub async fn ack_batch(&self, receipts: &[String]) -> AlkResult<Vec<Settled>> {
        check_batch("receipts", receipts.len())?;
        self.engine.ack_batch(receipts).await
    }

    /// Makes the message of a current receipt due at `now`.
    pub async fn nack(&self, receipt: &str, now: i64) -> AlkResult<()> {
        let settled = self.engine.nack(receipt, now).await?;
        if settled == Settled::Done {
            self.wakes.signal(&self.topic);
        }
        match settled {
            Settled::Done | Settled::Gone => Ok(()),
            Settled::Stale => Err(Self::stale(receipt)),
        }
    }

    /// Deletes every message.
    pub async fn purge(&self) -> AlkResult<()> {
        self.engine.purge().await
    }
}
