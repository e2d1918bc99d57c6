//! The transactions of the memory engine: a copy of the streams
//! (`stream.rs`) and the sends to queues, applied at commit.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::OwnedMutexGuard;

use super::stream::{MemStreams, StreamState};
use super::{Queues, lock, queue_of};
use crate::error::AlkResult;
use crate::jobs::{Stamp, Unique};
use crate::queue::Payload;
use crate::tx::{TxEngine, TxFailure};

/// A send kept until the commit: queue, payloads, stamp, unique key,
/// time.
type PendingSend = (String, Vec<Payload>, Stamp, Option<Unique>, i64);

/// A transaction: works on a copy of the streams, which replaces them at
/// commit, and keeps its sends until then (held under the streams' lock,
/// so transactions commit one at a time).
pub(super) struct MemTx {
    pub(super) guard: OwnedMutexGuard<()>,
    pub(super) state: Arc<Mutex<StreamState>>,
    pub(super) work: StreamState,
    pub(super) sends: Vec<PendingSend>,
    pub(super) queues: Queues,
}

impl MemTx {
    /// Begins a transaction: takes the streams' writer lock for its life.
    pub(super) async fn begin(streams: &MemStreams) -> MemTx {
        let guard = streams.writer.clone().lock_owned().await;
        let work = lock(&streams.state).clone();
        MemTx {
            guard,
            state: streams.state.clone(),
            work,
            sends: Vec::new(),
            queues: streams.queues.clone(),
        }
    }
}

#[async_trait]
impl TxEngine for MemTx {
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

    async fn enqueue(
        &mut self,
        queue: &str,
        payloads: &[Payload],
        stamp: &Stamp,
        now: i64,
    ) -> Result<(), TxFailure> {
        self.sends.push((
            queue.to_string(),
            payloads.to_vec(),
            stamp.clone(),
            None,
            now,
        ));
        Ok(())
    }

    async fn enqueue_unique(
        &mut self,
        queue: &str,
        payload: &Payload,
        stamp: &Stamp,
        unique: &Unique,
        now: i64,
    ) -> Result<(), TxFailure> {
        self.sends.push((
            queue.to_string(),
            vec![payload.clone()],
            stamp.clone(),
            Some(unique.clone()),
            now,
        ));
        Ok(())
    }

    async fn commit(self: Box<Self>) -> AlkResult<()> {
        let MemTx {
            guard,
            state,
            work,
            sends,
            queues,
        } = *self;
        *lock(&state) = work;
        for (queue, payloads, stamp, unique, now) in sends {
            let q = queue_of(&queues, &queue);
            let mut q = lock(&q.0);
            match unique {
                // The key is checked when the message reaches the queue,
                // as on every engine.
                Some(u) => {
                    if let Some(p) = payloads.first() {
                        q.send_unique(p, &stamp, &u, now);
                    }
                }
                None => {
                    q.send(&payloads, &stamp, now);
                }
            }
        }
        drop(guard);
        Ok(())
    }

    async fn rollback(self: Box<Self>) {}
}
