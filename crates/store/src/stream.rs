//! Durable streams with consumer offsets: the rules, waiting reads, and
//! the trait an engine implements (transactions are [`crate::tx`]).

use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::engine::Engine;
use crate::error::{AlkError, AlkResult};
use crate::limits::{MAX_READ, MAX_READ_BYTES, StreamLimits, check_batch};
use crate::names::{check_identifier, check_key, check_name, check_size};
use crate::wake::{Check, Wakes, topics};

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

/// A consumer's saved offset, and how many events of the stream lie
/// beyond it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerLag {
    /// The consumer.
    pub consumer: String,
    /// Its saved offset.
    pub offset: u64,
    /// Offsets assigned after it (the stream's last offset minus it).
    pub lag: u64,
}

/// What a stream holds: its offsets and its consumers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamInfo {
    /// The lowest offset still stored (none when every event was trimmed,
    /// or none was published).
    pub first: Option<u64>,
    /// The last offset assigned (0 before the first publish); trimming
    /// does not lower it.
    pub last: u64,
    /// The consumers that saved an offset, by name, at most
    /// [`MAX_CONSUMERS_LISTED`].
    pub consumers: Vec<ConsumerLag>,
}

/// The most consumers one [`Streams::info`] lists.
pub const MAX_CONSUMERS_LISTED: u32 = 1000;

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

    /// The stream's first stored and last assigned offsets, and up to
    /// `max_consumers` saved offsets by consumer name (their `lag` is the
    /// core's to fill in). Each from the stream's own rows (keys that
    /// start with the stream), never a pass over other streams.
    async fn info(&self, stream: &str, max_consumers: u32) -> AlkResult<StreamInfo>;

    /// Up to `max` streams ever published to whose names come after
    /// `after` (from the first when `None`), by name: a range of the index
    /// of stream names.
    async fn names(&self, after: Option<&str>, max: u32) -> AlkResult<Vec<String>>;
}

/// The most stream names one [`Streams::names`] page lists.
pub const MAX_NAMES_LISTED: u32 = 1000;

/// Every stream name of `engine`, page by page (for an engine's
/// [`crate::Engine::catalog`]).
pub async fn all_names(engine: &dyn StreamEngine) -> AlkResult<Vec<String>> {
    let mut names: Vec<String> = Vec::new();
    loop {
        let page = engine
            .names(names.last().map(String::as_str), MAX_NAMES_LISTED)
            .await?;
        let done = page.len() < MAX_NAMES_LISTED as usize;
        names.extend(page);
        if done {
            return Ok(names);
        }
    }
}

pub(crate) fn check_save(stream: &str, consumer: &str) -> AlkResult<()> {
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
        check_publish(&self.limits, stream, key, payload)
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
        self.wakes.signal(&topics::stream(stream));
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
            self.wakes.signal(&topics::stream(stream));
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
            .wait_for(&topics::stream(stream), deadline, || {
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

    /// What `stream` holds: its first stored and last assigned offsets,
    /// and each consumer's saved offset with its lag (up to
    /// [`MAX_CONSUMERS_LISTED`] consumers, by name).
    pub async fn info(&self, stream: &str) -> AlkResult<StreamInfo> {
        check_name("stream", stream)?;
        let mut info = self.engine.info(stream, MAX_CONSUMERS_LISTED).await?;
        for c in &mut info.consumers {
            c.lag = info.last.saturating_sub(c.offset);
        }
        Ok(info)
    }

    /// Up to `max` (clamped to 1..=[`MAX_NAMES_LISTED`]) streams ever
    /// published to, by name, after `after` (the last name of the previous
    /// page).
    pub async fn names(&self, after: Option<&str>, max: u32) -> AlkResult<Vec<String>> {
        if let Some(after) = after {
            check_name("stream", after)?;
        }
        self.engine
            .names(after, max.clamp(1, MAX_NAMES_LISTED))
            .await
    }

    /// Deletes the events of `stream` at or below `horizon`; how many.
    pub async fn trim_to(&self, stream: &str, horizon: u64) -> AlkResult<u64> {
        check_name("stream", stream)?;
        check_offset("horizon", horizon)?;
        self.engine.trim_to(stream, horizon).await
    }

}

/// Checks an event to publish against `limits`.
pub(crate) fn check_publish(
    limits: &StreamLimits,
    stream: &str,
    key: Option<&str>,
    payload: &[u8],
) -> AlkResult<()> {
    check_name("stream", stream)?;
    if let Some(key) = key {
        check_key("event key", key, limits.max_key_bytes)?;
    }
    check_size("payload", payload.len(), limits.max_payload_bytes)
}

pub(crate) fn check_offset(what: &str, v: u64) -> AlkResult<()> {
    i64::try_from(v)
        .map(|_| ())
        .map_err(|_| AlkError::InvalidArgument(format!("{what} {v} is out of range")))
}
