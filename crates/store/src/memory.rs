//! An engine that keeps everything in memory, for one process.
//!
//! It proves that the core is engine-neutral (it passes the same
//! [`crate::conformance`] suite as the file and database engines), and lets
//! the host's glue be tested without files. Nothing survives the process.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::OwnedMutexGuard;

use crate::engine::Engine;
use crate::error::{AlkError, AlkResult};
use crate::kv::KvEngine;
use crate::limits::page;
use crate::lock::{Acquired, Holder, LockEngine};
use crate::queue::{Delivery, Payload, QueueEngine, Settled};
use crate::stream::{Event, StreamEngine, StreamTxEngine, TxFailure};
use crate::wake::Wakes;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn live(expires_at: Option<i64>, now: i64) -> bool {
    !matches!(expires_at, Some(at) if at <= now)
}

/// The in-memory engine.
pub struct MemoryEngine {
    buckets: Mutex<HashMap<String, Arc<MemBucket>>>,
    queues: Mutex<HashMap<String, Arc<MemQueue>>>,
    streams: Arc<MemStreams>,
    locks: Arc<MemLocks>,
    wakes: Wakes,
}

impl Default for MemoryEngine {
    fn default() -> Self {
        MemoryEngine {
            buckets: Default::default(),
            queues: Default::default(),
            streams: Arc::new(MemStreams {
                state: Arc::new(tokio::sync::Mutex::new(StreamState::default())),
            }),
            locks: Default::default(),
            wakes: Wakes::local(),
        }
    }
}

impl MemoryEngine {
    /// An empty engine.
    pub fn new() -> MemoryEngine {
        MemoryEngine::default()
    }
}

#[async_trait]
impl Engine for MemoryEngine {
    async fn bucket(&self, name: &str) -> AlkResult<Arc<dyn KvEngine>> {
        Ok(lock(&self.buckets)
            .entry(name.to_string())
            .or_default()
            .clone())
    }

    async fn queue(&self, name: &str) -> AlkResult<Arc<dyn QueueEngine>> {
        Ok(lock(&self.queues)
            .entry(name.to_string())
            .or_default()
            .clone())
    }

    async fn streams(&self) -> AlkResult<Arc<dyn StreamEngine>> {
        Ok(self.streams.clone())
    }

    async fn locks(&self) -> AlkResult<Arc<dyn LockEngine>> {
        Ok(self.locks.clone())
    }

    fn wakes(&self) -> AlkResult<Wakes> {
        Ok(self.wakes.clone())
    }

    fn describe(&self) -> String {
        "memory".into()
    }
}

/// One bucket: key → (value, expiry).
/// A value and its expiry.
type Entry = (Vec<u8>, Option<i64>);

#[derive(Default)]
struct MemBucket(Mutex<BTreeMap<String, Entry>>);

#[async_trait]
impl KvEngine for MemBucket {
    async fn get(&self, key: &str, now: i64) -> AlkResult<Option<Vec<u8>>> {
        let mut map = lock(&self.0);
        match map.get(key) {
            Some((v, at)) if live(*at, now) => Ok(Some(v.clone())),
            Some(_) => {
                map.remove(key);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    async fn get_many(
        &self,
        keys: &[String],
        now: i64,
        max_bytes: usize,
    ) -> AlkResult<Vec<Option<Vec<u8>>>> {
        let mut values = Vec::with_capacity(keys.len());
        for key in keys {
            values.push(self.get(key, now).await?);
        }
        let size = |v: &Option<Vec<u8>>| v.as_ref().map_or(0, Vec::len);
        Ok(page(values, size, usize::MAX, max_bytes).0)
    }

    async fn set(&self, key: &str, value: &[u8], expires_at: Option<i64>) -> AlkResult<()> {
        lock(&self.0).insert(key.to_string(), (value.to_vec(), expires_at));
        Ok(())
    }

    async fn set_many(
        &self,
        entries: &[(String, Vec<u8>)],
        expires_at: Option<i64>,
    ) -> AlkResult<()> {
        let mut map = lock(&self.0);
        for (k, v) in entries {
            map.insert(k.clone(), (v.clone(), expires_at));
        }
        Ok(())
    }

    async fn set_if_absent(
        &self,
        key: &str,
        value: &[u8],
        expires_at: Option<i64>,
        now: i64,
    ) -> AlkResult<bool> {
        let mut map = lock(&self.0);
        if map.get(key).is_some_and(|(_, at)| live(*at, now)) {
            return Ok(false);
        }
        map.insert(key.to_string(), (value.to_vec(), expires_at));
        Ok(true)
    }

    async fn delete(&self, key: &str) -> AlkResult<()> {
        lock(&self.0).remove(key);
        Ok(())
    }

    async fn scan_prefix(
        &self,
        prefix: &str,
        skip: u64,
        limit: usize,
        now: i64,
        max_bytes: usize,
    ) -> AlkResult<(Vec<(String, Vec<u8>)>, bool)> {
        let map = lock(&self.0);
        let live_matches = map
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter(|(_, (_, at))| live(*at, now))
            .skip(skip as usize)
            .map(|(k, (v, _))| (k.clone(), v.clone()));
        Ok(page(live_matches, |(_, v)| v.len(), limit, max_bytes))
    }
}

/// One message of a queue.
struct Msg {
    payload: Payload,
    enqueued_at: i64,
    visible_at: i64,
    attempt: u32,
    receipt: Option<String>,
}

#[derive(Default)]
struct QueueState {
    next_id: i64,
    msgs: BTreeMap<i64, Msg>,
}

#[derive(Default)]
struct MemQueue(Mutex<QueueState>);

/// `"{id}:{delivery}"` as `(id, receipt)` when it could be one.
/// The message id of a receipt shaped like the ones this engine issues
/// (`<id>:<uuid>`, as the file engine's), whoever issued it.
fn parse_receipt(receipt: &str) -> Option<i64> {
    let (id, claim) = receipt.split_once(':')?;
    let uuid_shaped = claim.len() == 36
        && claim.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
    if !uuid_shaped {
        return None;
    }
    id.parse::<i64>().ok().filter(|id| *id > 0)
}

/// Claims of every memory queue of the process: a receipt is never valid
/// for another queue's message.
static CLAIMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl QueueState {
    fn settle(&mut self, receipt: &str, nack_at: Option<i64>) -> Settled {
        let Some(id) = parse_receipt(receipt) else {
            return Settled::Gone;
        };
        match self.msgs.get_mut(&id) {
            None => Settled::Gone,
            Some(m) if m.receipt.as_deref() != Some(receipt) => Settled::Stale,
            Some(m) => {
                match nack_at {
                    Some(at) => m.visible_at = at,
                    None => {
                        self.msgs.remove(&id);
                    }
                }
                Settled::Done
            }
        }
    }
}

#[async_trait]
impl QueueEngine for MemQueue {
    async fn send(&self, payload: &Payload, now: i64) -> AlkResult<i64> {
        Ok(self.send_batch(std::slice::from_ref(payload), now).await?[0])
    }

    async fn send_batch(&self, payloads: &[Payload], now: i64) -> AlkResult<Vec<i64>> {
        let mut q = lock(&self.0);
        let mut ids = Vec::new();
        for p in payloads {
            q.next_id += 1;
            let id = q.next_id;
            q.msgs.insert(
                id,
                Msg {
                    payload: p.clone(),
                    enqueued_at: now,
                    visible_at: now,
                    attempt: 0,
                    receipt: None,
                },
            );
            ids.push(id);
        }
        Ok(ids)
    }

    async fn receive(&self, max: u32, visible_until: i64, now: i64) -> AlkResult<Vec<Delivery>> {
        let mut q = lock(&self.0);
        let mut due: Vec<(i64, i64)> = q
            .msgs
            .iter()
            .filter(|(_, m)| m.visible_at <= now)
            .map(|(id, m)| (m.enqueued_at, *id))
            .collect();
        due.sort_unstable();
        let claim = CLAIMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let mut out = Vec::new();
        for (_, id) in due.into_iter().take(max as usize) {
            let m = q.msgs.get_mut(&id).expect("listed above");
            m.visible_at = visible_until;
            m.attempt += 1;
            let receipt = format!("{id}:00000000-0000-4000-8000-{claim:012x}");
            m.receipt = Some(receipt.clone());
            out.push(Delivery {
                id,
                payload: m.payload.clone(),
                receipt,
                attempt: m.attempt,
            });
        }
        Ok(out)
    }

    async fn ack(&self, receipt: &str) -> AlkResult<Settled> {
        Ok(lock(&self.0).settle(receipt, None))
    }

    async fn ack_batch(&self, receipts: &[String]) -> AlkResult<Vec<Settled>> {
        let mut q = lock(&self.0);
        // Applied together, like a set-based statement: every current
        // receipt acks its message (its first copy); then any other receipt
        // of a message still there is stale, the rest gone.
        let mut out = vec![Settled::Gone; receipts.len()];
        let mut acked = std::collections::HashSet::new();
        for (i, r) in receipts.iter().enumerate() {
            if let Some(id) = parse_receipt(r)
                && q.msgs
                    .get(&id)
                    .is_some_and(|m| m.receipt.as_deref() == Some(r))
                && acked.insert(id)
            {
                out[i] = Settled::Done;
            }
        }
        for id in &acked {
            q.msgs.remove(id);
        }
        for (i, r) in receipts.iter().enumerate() {
            if out[i] != Settled::Done
                && let Some(id) = parse_receipt(r)
                && q.msgs.contains_key(&id)
            {
                out[i] = Settled::Stale;
            }
        }
        Ok(out)
    }

    async fn nack(&self, receipt: &str, now: i64) -> AlkResult<Settled> {
        Ok(lock(&self.0).settle(receipt, Some(now)))
    }

    async fn next_visible(&self) -> AlkResult<Option<i64>> {
        Ok(lock(&self.0).msgs.values().map(|m| m.visible_at).min())
    }

    async fn purge(&self) -> AlkResult<()> {
        lock(&self.0).msgs.clear();
        Ok(())
    }
}

/// Every stream and saved offset.
#[derive(Default, Clone)]
struct StreamState {
    last: HashMap<String, u64>,
    events: HashMap<String, BTreeMap<u64, Event>>,
    offsets: HashMap<(String, String), u64>,
}

impl StreamState {
    fn publish(&mut self, stream: &str, key: Option<&str>, payload: &[u8], now: i64) -> u64 {
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

    fn save(&mut self, stream: &str, consumer: &str, offset: u64) -> AlkResult<()> {
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

/// The streams; a transaction holds the state for its whole life, like a
/// store's write lock.
struct MemStreams {
    state: Arc<tokio::sync::Mutex<StreamState>>,
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
        Ok(self.state.lock().await.publish(stream, key, payload, now))
    }

    async fn publish_batch(
        &self,
        stream: &str,
        events: &[(Option<String>, Vec<u8>)],
        now: i64,
    ) -> AlkResult<Vec<u64>> {
        let mut s = self.state.lock().await;
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
        let s = self.state.lock().await;
        let Some(events) = s.events.get(stream) else {
            return Ok(Vec::new());
        };
        let after = events.range(offset + 1..).map(|(_, e)| e.clone());
        Ok(page(after, |e| e.payload.len(), limit as usize, max_bytes).0)
    }

    async fn save_offset(&self, stream: &str, consumer: &str, offset: u64) -> AlkResult<()> {
        self.state.lock().await.save(stream, consumer, offset)
    }

    async fn get_offset(&self, stream: &str, consumer: &str) -> AlkResult<Option<u64>> {
        Ok(self
            .state
            .lock()
            .await
            .offsets
            .get(&(stream.to_string(), consumer.to_string()))
            .copied())
    }

    async fn trim_to(&self, stream: &str, horizon: u64) -> AlkResult<u64> {
        let mut s = self.state.lock().await;
        let Some(events) = s.events.get_mut(stream) else {
            return Ok(0);
        };
        let keep = events.split_off(&(horizon + 1));
        let trimmed = events.len() as u64;
        *events = keep;
        Ok(trimmed)
    }

    async fn begin(&self) -> AlkResult<Box<dyn StreamTxEngine>> {
        let guard = self.state.clone().lock_owned().await;
        let work = guard.clone();
        Ok(Box::new(MemTx { guard, work }))
    }
}

/// A transaction: works on a copy, which replaces the state at commit.
struct MemTx {
    guard: OwnedMutexGuard<StreamState>,
    work: StreamState,
}

#[async_trait]
impl StreamTxEngine for MemTx {
    async fn publish(
        &mut self,
        stream: &str,
        key: Option<&str>,
        payload: &[u8],
        now: i64,
    ) -> Result<u64, TxFailure> {
        Ok(self.work.publish(stream, key, payload, now))
    }

    async fn save_offset(
        &mut self,
        stream: &str,
        consumer: &str,
        offset: u64,
    ) -> Result<(), TxFailure> {
        self.work
            .save(stream, consumer, offset)
            .map_err(TxFailure::Refused)
    }

    async fn commit(self: Box<Self>) -> Result<(), String> {
        let MemTx { mut guard, work } = *self;
        *guard = work;
        Ok(())
    }

    async fn rollback(self: Box<Self>) {}
}

/// name → (owner, token, expiry)
/// A lock's holder (if any), last token and deadline.
type LockRow = (Option<String>, u64, Option<i64>);

#[derive(Default)]
struct MemLocks(Mutex<HashMap<String, LockRow>>);

#[async_trait]
impl LockEngine for MemLocks {
    async fn acquire(
        &self,
        name: &str,
        owner: &str,
        now: i64,
        expires_at: i64,
    ) -> AlkResult<Option<u64>> {
        let mut locks = lock(&self.0);
        let entry = locks.entry(name.to_string()).or_insert((None, 0, None));
        let free = entry.0.is_none() || entry.2.is_some_and(|at| at <= now);
        if !free {
            return Ok(None);
        }
        *entry = (Some(owner.to_string()), entry.1 + 1, Some(expires_at));
        Ok(Some(entry.1))
    }

    async fn renew(&self, l: &Acquired, expires_at: i64, now: i64) -> AlkResult<bool> {
        let mut locks = lock(&self.0);
        match locks.get_mut(&l.name) {
            Some((Some(o), t, Some(at))) if *o == l.owner && *t == l.token && *at > now => {
                *at = expires_at;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release(&self, l: &Acquired, now: i64) -> AlkResult<bool> {
        let mut locks = lock(&self.0);
        match locks.get_mut(&l.name) {
            Some(entry)
                if entry.0.as_deref() == Some(l.owner.as_str())
                    && entry.1 == l.token
                    && entry.2.is_some_and(|at| at > now) =>
            {
                entry.0 = None;
                entry.2 = None;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn holder(&self, name: &str, now: i64) -> AlkResult<Option<Holder>> {
        Ok(match lock(&self.0).get(name) {
            Some((Some(owner), token, Some(at))) if *at > now => Some(Holder {
                owner: owner.clone(),
                expires_at: *at,
                token: *token,
            }),
            _ => None,
        })
    }
}
