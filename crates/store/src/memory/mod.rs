//! An engine that keeps everything in memory, for one process.
//!
//! It proves that the core is engine-neutral (it passes the same
//! [`crate::conformance`] suite as the file and database engines), and lets
//! the host's glue be tested without files. Nothing survives the process.
//!
//! It is also the template for a new engine: the smallest complete
//! implementation of [`Engine`] and of every per-capability trait it hands
//! out, one file per capability, named as in the engine crates:
//!
//! - `mod.rs` (this file): [`MemoryEngine`], its [`Engine`] impl, and what
//!   the files share — the mutex lock that survives a poisoned mutex and
//!   the engine's queues, which transactions and schedules send to;
//! - `kv.rs`: the buckets ([`crate::kv::KvEngine`]);
//! - `queue.rs`: the queues, with job options, groups and dead letters
//!   ([`crate::queue::QueueEngine`]);
//! - `stream.rs`: the streams and saved offsets
//!   ([`crate::stream::StreamEngine`]);
//! - `tx.rs`: the transaction ([`crate::tx::TxEngine`], begun by
//!   [`Engine::begin`]);
//! - `lock.rs`: the locks ([`crate::lock::LockEngine`]);
//! - `schedule.rs`: the schedules ([`crate::schedule::ScheduleEngine`]).
//!
//! Wakes need no file: the data lives in this process only, so the engine
//! hands out [`Wakes::local`], which carries none to other processes.
//! Channels ([`crate::notify`]) and outboxes ([`crate::outbox`]) need no
//! engine code at all: the core builds them on wakes and queues.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::engine::{Catalog, Engine};
use crate::error::AlkResult;
use crate::kv::KvEngine;
use crate::lock::LockEngine;
use crate::queue::QueueEngine;
use crate::schedule::ScheduleEngine;
use crate::stream::StreamEngine;
use crate::tx::TxEngine;
use crate::wake::Wakes;

mod kv;
mod lock;
mod queue;
mod schedule;
mod stream;
mod tx;

use kv::MemBucket;
use lock::MemLocks;
use queue::MemQueue;
use schedule::MemSchedules;
use stream::MemStreams;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The in-memory engine.
pub struct MemoryEngine {
    buckets: Mutex<HashMap<String, Arc<MemBucket>>>,
    queues: Queues,
    streams: Arc<MemStreams>,
    locks: Arc<MemLocks>,
    schedules: Arc<MemSchedules>,
    wakes: Wakes,
}

/// Every queue of the engine, shared with the transactions and schedules
/// that send to them.
type Queues = Arc<Mutex<HashMap<String, Arc<MemQueue>>>>;

fn queue_of(queues: &Queues, name: &str) -> Arc<MemQueue> {
    lock(queues).entry(name.to_string()).or_default().clone()
}

impl Default for MemoryEngine {
    fn default() -> Self {
        let queues: Queues = Default::default();
        MemoryEngine {
            buckets: Default::default(),
            queues: queues.clone(),
            streams: Arc::new(MemStreams {
                writer: Default::default(),
                state: Default::default(),
                queues: queues.clone(),
            }),
            locks: Default::default(),
            schedules: Arc::new(MemSchedules {
                rows: Default::default(),
                queues,
            }),
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
        Ok(queue_of(&self.queues, name))
    }

    async fn streams(&self) -> AlkResult<Arc<dyn StreamEngine>> {
        Ok(self.streams.clone())
    }

    async fn locks(&self) -> AlkResult<Arc<dyn LockEngine>> {
        Ok(self.locks.clone())
    }

    async fn schedules(&self) -> AlkResult<Arc<dyn ScheduleEngine>> {
        Ok(self.schedules.clone())
    }

    async fn begin(&self) -> AlkResult<Box<dyn TxEngine>> {
        Ok(Box::new(tx::MemTx::begin(&self.streams).await))
    }

    fn wakes(&self) -> AlkResult<Wakes> {
        Ok(self.wakes.clone())
    }

    fn describe(&self) -> String {
        "memory".into()
    }

    async fn catalog(&self) -> AlkResult<Catalog> {
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        let streams = self.streams.names(None, u32::MAX).await?;
        Ok(Catalog {
            buckets: sorted(lock(&self.buckets).keys().cloned().collect()),
            queues: sorted(lock(&self.queues).keys().cloned().collect()),
            // The memory engine's stores exist from its start.
            stream_store: true,
            streams,
            lock_store: true,
            unreadable: Vec::new(),
        })
    }
}
