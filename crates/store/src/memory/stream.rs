//! The streams of the memory engine: every stream's events and saved
//! offsets, behind one writer lock that a transaction holds for its life.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{Queues, lock};
use crate::error::{AlkError, AlkResult};
use crate::limits::page;
use crate::stream::{ConsumerLag, Event, StreamEngine, StreamInfo};

/// Every stream and saved offset.
#[derive(Default, Clone)]
pub(super) struct StreamState {
    last: HashMap<String, u64>,
    events: HashMap<String, BTreeMap<u64, Event>>,
    offsets: HashMap<(String, String), u64>,
}

impl StreamState {
    pub(super) fn publish(
        &mut self,
        stream: &str,
        key: Option<&str>,
        payload: &[u8],
        now: i64,
    ) -> u64 {
        let last = self.last.entry(stream.to_string()).or_default();
        *last += 1;
        let offset = *last;
        self.events.entry(stream.to_string()).or_default().insert(
            offset,
            Event {
                offset,
                stream: stream.to_string(),
                key: key.map(str::to_string),
                payload: payload.to_vec(),
                created_at: now,
            },
        );
        offset
    }

    pub(super) fn save(&mut self, stream: &str, consumer: &str, offset: u64) -> AlkResult<()> {
        let last = self.last.get(stream).copied().unwrap_or(0);
        if offset > last {
            return Err(AlkError::InvalidArgument(format!(
                "offset {offset} is beyond the last offset {last} of stream {stream:?}"
            )));
        }
        let saved = self
            .offsets
            .entry((stream.to_string(), consumer.to_string()))
            .or_default();
        *saved = (*saved).max(offset);
        Ok(())
    }
}

/// The streams. A transaction holds the writer lock for its whole life,
/// like a store's write lock; reads do not wait for it.
pub(super) struct MemStreams {
    pub(super) writer: Arc<tokio::sync::Mutex<()>>,
    pub(super) state: Arc<Mutex<StreamState>>,
    pub(super) queues: Queues,
}

#[async_trait]
impl StreamEngine for MemStreams {
    async fn publish(
        &self,
        stream: &str,
        key: Option<&str>,
        payload: &[u8],
        now: i64,
    ) -> AlkResult<u64> {
        let _writer = self.writer.lock().await;
        Ok(lock(&self.state).publish(stream, key, payload, now))
    }

    async fn publish_batch(
        &self,
        stream: &str,
        events: &[(Option<String>, Vec<u8>)],
        now: i64,
    ) -> AlkResult<Vec<u64>> {
        let _writer = self.writer.lock().await;
        let mut s = lock(&self.state);
        Ok(events
            .iter()
            .map(|(k, p)| s.publish(stream, k.as_deref(), p, now))
            .collect())
    }

    async fn read_since(
        &self,
        stream: &str,
        offset: u64,
        limit: u32,
        max_bytes: usize,
    ) -> AlkResult<Vec<Event>> {
        let s = lock(&self.state);
        let Some(events) = s.events.get(stream) else {
            return Ok(Vec::new());
        };
        let after = events.range(offset + 1..).map(|(_, e)| e.clone());
        Ok(page(after, |e| e.payload.len(), limit as usize, max_bytes).0)
    }

    async fn save_offset(&self, stream: &str, consumer: &str, offset: u64) -> AlkResult<()> {
        let _writer = self.writer.lock().await;
        lock(&self.state).save(stream, consumer, offset)
    }

    async fn get_offset(&self, stream: &str, consumer: &str) -> AlkResult<Option<u64>> {
        Ok(lock(&self.state)
            .offsets
            .get(&(stream.to_string(), consumer.to_string()))
            .copied())
    }

    async fn info(&self, stream: &str, max_consumers: u32) -> AlkResult<StreamInfo> {
        let s = lock(&self.state);
        let mut consumers: Vec<ConsumerLag> = s
            .offsets
            .iter()
            .filter(|((st, _), _)| st == stream)
            .map(|((_, consumer), offset)| ConsumerLag {
                consumer: consumer.clone(),
                offset: *offset,
                lag: 0,
            })
            .collect();
        consumers.sort_by(|a, b| a.consumer.cmp(&b.consumer));
        consumers.truncate(max_consumers as usize);
        Ok(StreamInfo {
            first: s
                .events
                .get(stream)
                .and_then(|e| e.keys().next().copied()),
            last: s.last.get(stream).copied().unwrap_or(0),
            consumers,
        })
    }

    async fn names(&self, after: Option<&str>, max: u32) -> AlkResult<Vec<String>> {
        let s = lock(&self.state);
        let mut names: Vec<String> = s
            .last
            .keys()
            .filter(|n| after.is_none_or(|a| n.as_str() > a))
            .cloned()
            .collect();
        names.sort();
        names.truncate(max as usize);
        Ok(names)
    }

    async fn trim_to(&self, stream: &str, horizon: u64) -> AlkResult<u64> {
        let _writer = self.writer.lock().await;
        let mut s = lock(&self.state);
        let Some(events) = s.events.get_mut(stream) else {
            return Ok(0);
        };
        let keep = events.split_off(&(horizon + 1));
        let trimmed = events.len() as u64;
        *events = keep;
        Ok(trimmed)
    }
}
