//! Work queues with visibility timeouts, and the job options on top of
//! them (see [`crate::jobs`]): the rules, waiting receives, and the trait an
//! engine implements.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::counters::{self, Count};
use crate::engine::Engine;
use crate::error::{AlkError, AlkResult};
use crate::jobs::{
    Beat, JobInfo, JobResult, QueueLimits, Retried, RetryDelay, SendOptions, Sent, Stamp, Unique,
    UniqueOptions, error_text, random_word, result_expiry,
};
use crate::limits::{DEFAULT_VISIBILITY_MS, MAX_PAYLOAD_BYTES, MAX_RECEIVE, check_batch};
use crate::names::check_name;
use crate::rate::Taken;
use crate::time::{Clock, after, instant_at};
use crate::wake::{Check, Wakes, topics};

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
    pub id: u64,
    /// The body.
    pub payload: Payload,
    /// Identifies this delivery for ack and nack; opaque to guests.
    pub receipt: String,
    /// Deliveries so far, this one included.
    pub attempt: u32,
    /// The message's priority.
    pub priority: i32,
    /// The message's group, if any.
    pub group: Option<String>,
    /// The message's attempt limit, if any.
    pub max_attempts: Option<u32>,
}

/// What a receipt says: the message, and the claim that delivered it.
/// Written `<id>:<claim>` (the claim as a hyphenated lower-case UUID); every
/// engine issues and reads them so, and a receipt that does not parse was
/// never issued by any of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Receipt {
    /// The message id.
    pub id: u64,
    /// The claim: new at every delivery, so an older receipt of the same
    /// message is told apart from the current one.
    pub claim: uuid::Uuid,
}

impl Receipt {
    /// Receipts longer than this were never issued.
    pub const MAX_LEN: usize = 128;

    /// The receipt of delivery `claim` of message `id`.
    pub fn new(id: u64, claim: uuid::Uuid) -> Receipt {
        Receipt { id, claim }
    }

    /// A new claim: a random (version 4) UUID from the thread's random
    /// generator, which the operating system seeds, so that a claim makes no
    /// system call for it.
    pub fn new_claim() -> uuid::Uuid {
        uuid::Builder::from_random_bytes(rand::random()).into_uuid()
    }

    /// The receipt `text` spells, if an engine could have issued it: an id
    /// from 1 to `i64::MAX`, a colon, a UUID in any of its spellings.
    pub fn parse(text: &str) -> Option<Receipt> {
        if text.len() > Self::MAX_LEN {
            return None;
        }
        let (id, claim) = text.split_once(':')?;
        let id: i64 = id.parse().ok().filter(|id| *id > 0)?;
        let claim = uuid::Uuid::parse_str(claim).ok()?;
        Some(Receipt {
            id: id as u64,
            claim,
        })
    }
}

impl std::fmt::Display for Receipt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.id, self.claim.hyphenated())
    }
}

/// What an engine found when it acknowledged a batch of receipts in one
/// transaction; [`AckedBatch::settle`] tells each receipt's outcome from
/// it, by the same rule on every engine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckedBatch {
    /// The messages deleted, each with the claim it was current under.
    pub deleted: HashMap<u64, uuid::Uuid>,
    /// Of the messages not deleted, those still there after the batch
    /// (an engine may leave it empty when every message was deleted).
    pub present: HashSet<u64>,
}

impl AckedBatch {
    /// What each receipt of a batch found, in order (`None`: it did not
    /// parse): the current receipt acknowledged its message — the first of
    /// its copies, if the batch repeats it; any other receipt of a message
    /// still there is stale; the rest found their message gone.
    pub fn settle(&self, receipts: &[Option<Receipt>]) -> Vec<Settled> {
        let mut acked = HashSet::new();
        receipts
            .iter()
            .map(|r| match r {
                None => Settled::Gone,
                Some(r) if self.deleted.get(&r.id) == Some(&r.claim) && acked.insert(r.id) => {
                    Settled::Done
                }
                Some(r) if self.present.contains(&r.id) => Settled::Stale,
                Some(_) => Settled::Gone,
            })
            .collect()
    }
}

/// How many messages a queue holds, by state, at one moment (what the
/// engine saw in one read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Due and not in flight: a claim now would get them (or bury them,
    /// when expired or out of attempts).
    pub waiting: u64,
    /// Not due yet and never delivered since they were last made due: sent
    /// with a delay, or retried with one.
    pub delayed: u64,
    /// Delivered, with their delivery's deadline still ahead.
    pub in_flight: u64,
    /// In the dead letters.
    pub dead: u64,
    /// When the oldest waiting message was sent (epoch milliseconds).
    pub oldest_waiting_enqueued_at: Option<i64>,
    /// Groups with at least one message.
    pub groups: u64,
    /// Groups with a message in flight.
    pub groups_in_flight: u64,
}

/// The most dead letters one listing returns (each is up to 64 KiB).
pub const MAX_DEAD_PAGE: u32 = 100;

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
/// is at or before `now`. The rules every engine follows are those of the
/// [`Queue`] methods and are pinned by [`crate::conformance`].
#[async_trait]
pub trait QueueEngine: Send + Sync {
    /// Appends every message with `stamp`, all or none; their ids, in
    /// order.
    async fn send(&self, payloads: &[Payload], stamp: &Stamp, now: i64) -> AlkResult<Vec<u64>>;

    /// Claims up to `max` due messages for one delivery each, hidden until
    /// `visible_until`; every claimed message's attempt grows by one and it
    /// gets a new receipt (older ones become stale). Each message goes to
    /// exactly one claimer, whatever the number of racing claimers in any
    /// process. Order: messages without a group by priority (highest
    /// first), then the time they became ready, then id; of a group only
    /// its oldest message, and only while no other message of the group is
    /// in flight; groups (and the messages without a group, as one more
    /// participant) take turns, the one served longest ago first. With
    /// `floor`, messages and groups of a lower priority are left alone.
    /// Due messages that expired, or whose last attempt's deadline passed,
    /// go to the dead letters instead of being delivered.
    async fn claim(
        &self,
        max: u32,
        visible_until: i64,
        floor: Option<i32>,
        now: i64,
    ) -> AlkResult<Vec<Delivery>>;

    /// Deletes the message of a current receipt.
    async fn ack(&self, receipt: &Receipt) -> AlkResult<Settled>;

    /// Acknowledges every current receipt of `receipts` (at least two,
    /// possibly repeated) in one transaction; what it deleted and which
    /// other messages are still there ([`AckedBatch::settle`] does the
    /// rest).
    async fn ack_batch(&self, receipts: &[Receipt]) -> AlkResult<AckedBatch>;

    /// Makes the message of a current receipt due at `now`, keeping its
    /// attempt count and its place.
    async fn nack(&self, receipt: &Receipt, now: i64) -> AlkResult<Settled>;

    /// When the next message is due, if there is any message. When one is
    /// due at `now`, any time at or before `now` may be told: an engine may
    /// stop looking at the first due message it finds.
    async fn next_visible(&self, now: i64) -> AlkResult<Option<i64>>;

    /// Deletes every message (not the dead letters).
    async fn purge(&self) -> AlkResult<()>;

    /// Moves the deadline of a current receipt's delivery to `deadline`,
    /// unless it has passed by `now`.
    async fn heartbeat(&self, receipt: &Receipt, deadline: i64, now: i64) -> AlkResult<Beat>;

    /// Ends a current receipt's delivery as failed with `error`: the
    /// message is due again after `delay` and becomes the ready message of
    /// that time, or goes to the dead letters when its attempts are used
    /// up. Its receipt is no longer current.
    async fn retry(
        &self,
        receipt: &Receipt,
        error: &str,
        delay: RetryDelay,
        now: i64,
    ) -> AlkResult<Retried>;

    /// Moves the message of a current receipt to the dead letters with
    /// `error`.
    async fn fail(&self, receipt: &Receipt, error: &str, now: i64) -> AlkResult<Settled>;

    /// Deletes message `id` (at most `i64::MAX`), whatever its state, dead
    /// letters included; whether there was one.
    async fn cancel(&self, id: u64) -> AlkResult<bool>;

    /// Message `id` (at most `i64::MAX`), dead or not.
    async fn job(&self, id: u64, now: i64) -> AlkResult<Option<JobInfo>>;

    /// Moves every message whose expiry is at or before `now`, in any
    /// state, to the dead letters; how many.
    async fn sweep_expired(&self, now: i64) -> AlkResult<u64>;

    /// Up to `max` dead letters with ids above `after` (at most
    /// `i64::MAX`), by id.
    async fn dead_letters(&self, after: u64, max: u32, now: i64) -> AlkResult<Vec<JobInfo>>;

    /// Sends each dead letter of `ids` again as a new message — a new id,
    /// due and ready at `now`, attempts reset, no expiry, its other options
    /// and last error kept — and deletes the dead letter; for each id, the
    /// new message's id, or `None` when it was not a dead letter. New ids
    /// follow the order of `ids` (each at most `i64::MAX`).
    async fn redrive(&self, ids: &[u64], now: i64) -> AlkResult<Vec<Option<u64>>>;

    /// Deletes every dead letter; how many.
    async fn purge_dead(&self) -> AlkResult<u64>;

    /// The queue's counts at `now`, from one read (a consistent moment),
    /// each served by an index rather than a pass over every message. A
    /// message is waiting, delayed or in flight as [`JobState::of`] says.
    ///
    /// [`JobState::of`]: crate::jobs::JobState::of
    async fn stats(&self, now: i64) -> AlkResult<QueueStats>;

    /// Up to `max` live messages (not the dead letters) with ids above
    /// `after`, by id, each in its state at `now`: a range of the primary
    /// key, for operators' tools.
    async fn jobs(&self, after: u64, max: u32, now: i64) -> AlkResult<Vec<JobInfo>>;

    /// Sends one message with `stamp` unless `unique.key` is taken at `now`
    /// — held by a message sent with it whose `until` is still ahead, or,
    /// without `until`, that is still live (waiting, delayed or in flight)
    /// ([`Unique::blocks`]) — in one transaction: checking the key and
    /// storing the message and the key are one step for every process. A
    /// taken key stores nothing and returns the id of the message holding
    /// it. A key whose hold is over is taken anew by the new message.
    async fn send_unique(
        &self,
        payload: &Payload,
        stamp: &Stamp,
        unique: &Unique,
        now: i64,
    ) -> AlkResult<Sent>;

    /// The queue's limits ([`QueueLimits::default`] when none were set).
    async fn limits(&self) -> AlkResult<QueueLimits>;

    /// Sets the queue's limits (checked by the core); claims in every
    /// process follow them from the next one on. A rate's bucket keeps its
    /// tokens when the rate changes (cut to a lower capacity); a new bucket
    /// starts full.
    async fn set_limits(&self, limits: &QueueLimits) -> AlkResult<()>;

    /// Takes `n` tokens (at least 1) from the bucket the queue's claims
    /// take from — of `group` when the rate applies per group (`None`: the
    /// messages without a group), else the queue's one bucket (`group` is
    /// ignored) — or none, in one transaction. A queue without a rate, or
    /// `n` above its capacity, is [`AlkError::InvalidArgument`].
    async fn try_take(&self, group: Option<&str>, n: u32, now: i64) -> AlkResult<Taken>;

    /// When a claim that found due messages but took none because of the
    /// queue's rate can next get a token: `None` when the queue has no rate
    /// or its (queue-wide) bucket is not empty at `now`; with a rate per
    /// group, the earliest time any empty group bucket refills.
    async fn throttled_until(&self, now: i64) -> AlkResult<Option<i64>>;

    /// Acknowledges the message of a current receipt and stores `result`
    /// for it until `expires_at`, in one transaction (a result already
    /// stored for the message is replaced). Nothing is stored when the
    /// receipt is stale or the message gone.
    async fn complete(
        &self,
        receipt: &Receipt,
        result: &Payload,
        expires_at: i64,
        now: i64,
    ) -> AlkResult<Settled>;

    /// The result stored for message `id` (at most `i64::MAX`), unless its
    /// time ran out at `now`.
    async fn result(&self, id: u64, now: i64) -> AlkResult<Option<JobResult>>;

    /// Deletes the result of message `id`; whether there was one not
    /// expired at `now`.
    async fn delete_result(&self, id: u64, now: i64) -> AlkResult<bool>;
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
        Self::open_checked(engine, name).await
    }

    /// Opens a queue whose name the core derived (an outbox's backing
    /// queue, under the reserved prefix).
    pub(crate) async fn open_checked(engine: &dyn Engine, name: &str) -> AlkResult<Queue> {
        Ok(Queue {
            name: name.to_string(),
            engine: engine.queue(name).await?,
            wakes: engine.wakes()?,
            topic: topics::queue(name),
        })
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Appends a message at `now`; its id.
    pub async fn send(&self, payload: &Payload, now: i64) -> AlkResult<u64> {
        self.send_with(payload, &SendOptions::default(), now).await
    }

    /// Appends a message with `options` at `now`; its id.
    pub async fn send_with(
        &self,
        payload: &Payload,
        options: &SendOptions,
        now: i64,
    ) -> AlkResult<u64> {
        let stamp = Stamp::resolve(options, now)?;
        check_payload(payload)?;
        let ids = self
            .engine
            .send(std::slice::from_ref(payload), &stamp, now)
            .await?;
        counters::add(Count::Sent, 1);
        self.wakes.signal(&self.topic);
        ids.first()
            .copied()
            .ok_or_else(|| AlkError::Internal("the engine returned no id for a send".into()))
    }

    /// Appends every payload at `now`, all or none (every payload is
    /// checked first); their ids.
    pub async fn send_batch(&self, payloads: &[Payload], now: i64) -> AlkResult<Vec<u64>> {
        self.send_batch_with(payloads, &SendOptions::default(), now)
            .await
    }

    /// [`Queue::send_batch`] with the same `options` for every message.
    pub async fn send_batch_with(
        &self,
        payloads: &[Payload],
        options: &SendOptions,
        now: i64,
    ) -> AlkResult<Vec<u64>> {
        check_batch("payloads", payloads.len())?;
        let stamp = Stamp::resolve(options, now)?;
        payloads.iter().try_for_each(check_payload)?;
        if payloads.is_empty() {
            return Ok(Vec::new());
        }
        let ids = self.engine.send(payloads, &stamp, now).await?;
        counters::add(Count::Sent, ids.len() as u64);
        self.wakes.signal(&self.topic);
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
        self.claim(max, visibility_ms, None, now).await
    }

    /// [`Queue::receive`] leaving alone messages and groups of a priority
    /// below `floor`.
    pub async fn claim(
        &self,
        max: u32,
        visibility_ms: Option<u64>,
        floor: Option<i32>,
        now: i64,
    ) -> AlkResult<Vec<Delivery>> {
        let visible_until = after(
            "visibility-ms",
            visibility_ms.unwrap_or(DEFAULT_VISIBILITY_MS),
            now,
        )?;
        let got = self
            .engine
            .claim(max.clamp(1, MAX_RECEIVE), visible_until, floor, now)
            .await?;
        counters::add(Count::Claimed, got.len() as u64);
        Ok(got)
    }

    /// Like [`Queue::receive`], but waits (holding nothing open) until at
    /// least one message can be claimed or `deadline` passes; an empty list
    /// means the deadline passed.
    pub async fn receive_wait(
        &self,
        max: u32,
        visibility_ms: Option<u64>,
        clock: &dyn Clock,
        deadline: Instant,
    ) -> AlkResult<Vec<Delivery>> {
        self.claim_wait(max, visibility_ms, None, clock, deadline)
            .await
    }

    /// [`Queue::claim`] that waits like [`Queue::receive_wait`].
    pub async fn claim_wait(
        &self,
        max: u32,
        visibility_ms: Option<u64>,
        floor: Option<i32>,
        clock: &dyn Clock,
        deadline: Instant,
    ) -> AlkResult<Vec<Delivery>> {
        // Refuse bad arguments now, not at the first message.
        after(
            "visibility-ms",
            visibility_ms.unwrap_or(DEFAULT_VISIBILITY_MS),
            clock.now_ms(),
        )?;
        let got = self
            .wakes
            .wait_for(&self.topic, Some(deadline), || {
                Box::pin(async move {
                    let now = clock.now_ms();
                    match self.engine.next_visible(now).await? {
                        Some(at) if at <= now => {}
                        Some(at) => return Ok(Check::NotYet(Some(instant_at(at, now)))),
                        None => return Ok(Check::NotYet(None)),
                    }
                    let got = self.claim(max, visibility_ms, floor, now).await?;
                    if !got.is_empty() {
                        return Ok(Check::Ready(got));
                    }
                    // Due messages, none taken: another receiver was
                    // faster, or the queue's limits held them back. A rate
                    // says when its next token comes; an ack that frees a
                    // group's or the queue's place signals nothing, so a
                    // waiting claim looks again within LIMITED_RECHECK_MS.
                    let limits = self.engine.limits().await?;
                    if limits.is_default() {
                        return Ok(Check::NotYet(None));
                    }
                    let recheck = now.saturating_add(LIMITED_RECHECK_MS);
                    let at = match self.engine.throttled_until(now).await? {
                        Some(t) => t.min(recheck),
                        None => recheck,
                    };
                    Ok(Check::NotYet(Some(instant_at(at, now))))
                })
            })
            .await?;
        let got = got.unwrap_or_default();
        if !got.is_empty() && self.wakes.others_waiting(&self.topic) {
            // A signal wakes one waiting process: if more is due, the next
            // one is woken from here (see `wake`).
            let now = clock.now_ms();
            if matches!(self.engine.next_visible(now).await, Ok(Some(at)) if at <= now) {
                self.wakes.pass_on(&self.topic);
            }
        }
        Ok(got)
    }

    /// Waits until some message is due (by `clock`), or `deadline`; true
    /// when one is. A hint: another receiver may take it first.
    pub async fn wait_due(&self, clock: &dyn Clock, deadline: Option<Instant>) -> AlkResult<bool> {
        let found = self
            .wakes
            .wait_for(&self.topic, deadline, || {
                Box::pin(async move {
                    let now = clock.now_ms();
                    Ok(match self.engine.next_visible(now).await? {
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
        let Some(parsed) = Receipt::parse(receipt) else {
            return Ok(());
        };
        match self.engine.ack(&parsed).await? {
            Settled::Done => {
                counters::add(Count::Acked, 1);
                Ok(())
            }
            Settled::Gone => Ok(()),
            Settled::Stale => Err(Self::stale(receipt)),
        }
    }

    /// Acknowledges up to [`crate::limits::MAX_BATCH`] receipts in one
    /// transaction; what each found (stale ones do not stop the others).
    pub async fn ack_batch(&self, receipts: &[String]) -> AlkResult<Vec<Settled>> {
        check_batch("receipts", receipts.len())?;
        let parsed: Vec<Option<Receipt>> = receipts.iter().map(|r| Receipt::parse(r)).collect();
        let valid: Vec<Receipt> = parsed.iter().flatten().copied().collect();
        let settled = match valid.as_slice() {
            [] => return Ok(vec![Settled::Gone; receipts.len()]),
            [one] if receipts.len() == 1 => vec![self.engine.ack(one).await?],
            _ => self.engine.ack_batch(&valid).await?.settle(&parsed),
        };
        let acked = settled.iter().filter(|s| **s == Settled::Done).count();
        counters::add(Count::Acked, acked as u64);
        Ok(settled)
    }

    /// Makes the message of a current receipt due at `now`.
    pub async fn nack(&self, receipt: &str, now: i64) -> AlkResult<()> {
        let Some(parsed) = Receipt::parse(receipt) else {
            return Ok(());
        };
        let settled = self.engine.nack(&parsed, now).await?;
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

    /// Moves the deadline of a current receipt's delivery to `extend_ms`
    /// after `now` (an absolute reset, not an addition). False when the
    /// deadline had already passed or the message is gone: the delivery is
    /// over and nothing changed. A receipt the message was delivered again
    /// under since is a `stale-receipt` error.
    pub async fn heartbeat(&self, receipt: &str, extend_ms: u64, now: i64) -> AlkResult<bool> {
        let deadline = after("extend-ms", extend_ms, now)?;
        let Some(parsed) = Receipt::parse(receipt) else {
            return Ok(false);
        };
        match self.engine.heartbeat(&parsed, deadline, now).await? {
            Beat::Extended => Ok(true),
            Beat::Lapsed | Beat::Gone => Ok(false),
            Beat::Stale => Err(Self::stale(receipt)),
        }
    }

    /// Ends a delivery as failed: the message is due again after
    /// `delay_ms`, or by default after its backoff curve's delay; when its
    /// attempts are used up it goes to the dead letters instead.
    pub async fn retry(
        &self,
        receipt: &str,
        error: &str,
        delay_ms: Option<u64>,
        now: i64,
    ) -> AlkResult<Retried> {
        let delay = match delay_ms {
            Some(ms) => RetryDelay::Fixed(ms),
            None => RetryDelay::Backoff(random_word()),
        };
        self.retry_with(receipt, error, delay, now).await
    }

    /// [`Queue::retry`] with the delay given (tests pin the backoff curve
    /// with a chosen random word).
    pub async fn retry_with(
        &self,
        receipt: &str,
        error: &str,
        delay: RetryDelay,
        now: i64,
    ) -> AlkResult<Retried> {
        if let RetryDelay::Fixed(ms) = delay {
            // Refuse a delay that overflows the clock before anything changes.
            if ms > 0 {
                after("delay-ms", ms, now)?;
            }
        }
        let Some(parsed) = Receipt::parse(receipt) else {
            return Ok(Retried::Gone);
        };
        let outcome = self
            .engine
            .retry(&parsed, &error_text(error), delay, now)
            .await?;
        match outcome {
            Retried::Stale => Err(Self::stale(receipt)),
            Retried::Scheduled(_) => {
                self.wakes.signal(&self.topic);
                Ok(outcome)
            }
            Retried::Dead => {
                counters::add(Count::DeadLettered, 1);
                Ok(outcome)
            }
            other => Ok(other),
        }
    }

    /// Moves the message of a current receipt to the dead letters at once;
    /// false when it was already gone.
    pub async fn fail(&self, receipt: &str, error: &str, now: i64) -> AlkResult<bool> {
        let Some(parsed) = Receipt::parse(receipt) else {
            return Ok(false);
        };
        match self.engine.fail(&parsed, &error_text(error), now).await? {
            Settled::Done => {
                counters::add(Count::DeadLettered, 1);
                // The next message of its group may be claimable now.
                self.wakes.signal(&self.topic);
                Ok(true)
            }
            Settled::Gone => Ok(false),
            Settled::Stale => Err(Self::stale(receipt)),
        }
    }

    /// Deletes message `id` wherever it is (waiting, delayed, in flight or
    /// dead); whether there was one.
    pub async fn cancel(&self, id: u64) -> AlkResult<bool> {
        if !is_id(id) {
            return Ok(false);
        }
        let cancelled = self.engine.cancel(id).await?;
        if cancelled {
            self.wakes.signal(&self.topic);
        }
        Ok(cancelled)
    }

    /// Message `id` as it is now, dead letters included.
    pub async fn job(&self, id: u64, now: i64) -> AlkResult<Option<JobInfo>> {
        if !is_id(id) {
            return Ok(None);
        }
        self.engine.job(id, now).await
    }

    /// Moves every expired message, in any state, to the dead letters; how
    /// many.
    pub async fn sweep_expired(&self, now: i64) -> AlkResult<u64> {
        let moved = self.engine.sweep_expired(now).await?;
        if moved > 0 {
            self.wakes.signal(&self.topic);
        }
        Ok(moved)
    }

    /// Up to `max` (clamped to 1..=[`MAX_DEAD_PAGE`]) dead letters with ids
    /// above `after` (from the first when `None`), by id.
    pub async fn dead_letters(
        &self,
        after: Option<u64>,
        max: u32,
        now: i64,
    ) -> AlkResult<Vec<JobInfo>> {
        let after = after.unwrap_or(0).min(i64::MAX as u64);
        self.engine
            .dead_letters(after, max.clamp(1, MAX_DEAD_PAGE), now)
            .await
    }

    /// Sends dead letters again as new messages (new ids, due at once,
    /// attempts reset, at the back of their group); for each id, the new
    /// message's id, or `None` when it was not a dead letter.
    pub async fn redrive(&self, ids: &[u64], now: i64) -> AlkResult<Vec<Option<u64>>> {
        check_batch("ids", ids.len())?;
        let known: Vec<u64> = ids.iter().copied().filter(|id| is_id(*id)).collect();
        let mut found = self.engine.redrive(&known, now).await?.into_iter();
        let out: Vec<Option<u64>> = ids
            .iter()
            .map(|id| {
                if is_id(*id) {
                    found.next().flatten()
                } else {
                    None
                }
            })
            .collect();
        if out.iter().any(Option::is_some) {
            self.wakes.signal(&self.topic);
        }
        Ok(out)
    }

    /// Deletes every dead letter; how many.
    pub async fn purge_dead(&self) -> AlkResult<u64> {
        self.engine.purge_dead().await
    }

    /// How many messages the queue holds at `now`, by state; how many
    /// groups it has, and how many of them have a message in flight.
    pub async fn stats(&self, now: i64) -> AlkResult<QueueStats> {
        self.engine.stats(now).await
    }

    /// Sends a message with `options` unless `unique`'s key is taken (see
    /// [`QueueEngine::send_unique`]): the new message's id, or the id of
    /// the message holding the key and `duplicate` set.
    pub async fn send_unique(
        &self,
        payload: &Payload,
        options: &SendOptions,
        unique: &UniqueOptions,
        now: i64,
    ) -> AlkResult<Sent> {
        let stamp = Stamp::resolve(options, now)?;
        let unique = Unique::resolve(unique, now)?;
        check_payload(payload)?;
        let sent = self
            .engine
            .send_unique(payload, &stamp, &unique, now)
            .await?;
        if !sent.duplicate {
            counters::add(Count::Sent, 1);
            self.wakes.signal(&self.topic);
        }
        Ok(sent)
    }

    /// The queue's limits.
    pub async fn limits(&self) -> AlkResult<QueueLimits> {
        self.engine.limits().await
    }

    /// Sets the queue's limits, for every process.
    pub async fn set_limits(&self, limits: &QueueLimits) -> AlkResult<()> {
        limits.check()?;
        self.engine.set_limits(limits).await?;
        // Claims waiting on the old limits look again.
        self.wakes.signal(&self.topic);
        Ok(())
    }

    /// Takes `n` tokens from the bucket the queue's claims take from (of
    /// `group` when its rate applies per group), or none.
    pub async fn try_take(&self, n: u32, group: Option<&str>, now: i64) -> AlkResult<Taken> {
        if n == 0 {
            return Err(AlkError::InvalidArgument(
                "cannot take 0 tokens: take at least 1".into(),
            ));
        }
        if let Some(g) = group {
            crate::jobs::check_group(g)?;
        }
        self.engine.try_take(group, n, now).await
    }

    /// Acknowledges the message of a current receipt and keeps `result`
    /// for it for `keep_ms` (default
    /// [`crate::jobs::DEFAULT_RESULT_KEEP_MS`]); false when the message
    /// was already gone (nothing kept). A stale receipt is an error, as
    /// for [`Queue::ack`].
    pub async fn complete(
        &self,
        receipt: &str,
        result: &Payload,
        keep_ms: Option<u64>,
        now: i64,
    ) -> AlkResult<bool> {
        let expires_at = result_expiry(keep_ms, now)?;
        check_payload(result)?;
        let Some(parsed) = Receipt::parse(receipt) else {
            return Ok(false);
        };
        match self
            .engine
            .complete(&parsed, result, expires_at, now)
            .await?
        {
            Settled::Done => {
                counters::add(Count::Acked, 1);
                // A place of its group (or of the queue) is free.
                self.wakes.signal(&self.topic);
                Ok(true)
            }
            Settled::Gone => Ok(false),
            Settled::Stale => Err(Self::stale(receipt)),
        }
    }

    /// The result kept for message `id`, if any.
    pub async fn result(&self, id: u64, now: i64) -> AlkResult<Option<JobResult>> {
        if !is_id(id) {
            return Ok(None);
        }
        self.engine.result(id, now).await
    }

    /// Deletes the result of message `id`; whether there was one.
    pub async fn delete_result(&self, id: u64, now: i64) -> AlkResult<bool> {
        if !is_id(id) {
            return Ok(false);
        }
        self.engine.delete_result(id, now).await
    }

    /// Up to `max` (clamped to 1..=[`MAX_DEAD_PAGE`]) live messages with
    /// ids above `after`, by id, each in its state at `now` (the dead
    /// letters are listed by [`Queue::dead_letters`]).
    pub async fn jobs(&self, after: Option<u64>, max: u32, now: i64) -> AlkResult<Vec<JobInfo>> {
        let after = after.unwrap_or(0).min(i64::MAX as u64);
        self.engine
            .jobs(after, max.clamp(1, MAX_DEAD_PAGE), now)
            .await
    }
}

/// How soon a waiting claim on a queue with limits looks again when due
/// messages were held back (by a group's or the queue's in-flight cap):
/// the ack that frees the place wakes no one.
pub const LIMITED_RECHECK_MS: i64 = 250;

/// Whether `id` could be a message id (engines store them as signed 64-bit
/// integers): larger ones name no message.
fn is_id(id: u64) -> bool {
    i64::try_from(id).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipts_parse_only_when_an_engine_could_have_issued_them() {
        let uuid = "67e55044-10b1-426f-9247-bb680e5fe0c8";
        let parsed = Receipt::parse(&format!("12:{uuid}")).unwrap();
        assert_eq!(parsed.id, 12);
        assert_eq!(parsed.to_string(), format!("12:{uuid}"));
        // Any spelling of the UUID names the same claim.
        assert_eq!(
            Receipt::parse(&format!("12:{}", uuid.to_uppercase())),
            Some(parsed)
        );
        assert_eq!(
            Receipt::parse(&format!("12:{}", uuid.replace('-', ""))),
            Some(parsed)
        );
        for bad in [
            "".to_string(),
            "12".into(),
            ":".into(),
            "12:".into(),
            format!(":{uuid}"),
            format!("0:{uuid}"),
            format!("-1:{uuid}"),
            format!("{}:{uuid}", u64::MAX),
            "12:not-a-uuid".into(),
            format!("x:{uuid}"),
            format!("12:{}", &uuid[1..]),
            format!("12:{uuid}{}", "0".repeat(200)),
        ] {
            assert_eq!(Receipt::parse(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_batch_settles_the_first_current_copy_and_tells_stale_from_gone() {
        let (a, b) = (uuid::Uuid::from_u128(1), uuid::Uuid::from_u128(2));
        let batch = AckedBatch {
            deleted: [(1, a)].into(),
            present: [2].into(),
        };
        let receipts = [
            Some(Receipt::new(1, a)),
            Some(Receipt::new(1, a)),
            Some(Receipt::new(1, b)),
            Some(Receipt::new(2, a)),
            Some(Receipt::new(3, a)),
            None,
        ];
        assert_eq!(
            batch.settle(&receipts),
            [
                Settled::Done,
                Settled::Gone,
                Settled::Gone,
                Settled::Stale,
                Settled::Gone,
                Settled::Gone
            ]
        );
    }
}
