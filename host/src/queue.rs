//! Host glue of the `queue` interface: translates, then calls
//! [`alk_store::queue::Queue`], which checks, waits and asks the engine.

use alk_store::queue::{self as store, Queue as Store};
use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

use crate::bindings::alk::store::queue::{self, AckOutcome, Message, Payload};
use crate::ctx::{AlkCtxView, Slot};
use crate::error::CallError;

/// An open queue, as held in the instance's resource table.
#[derive(Debug)]
pub struct Queue {
    store: Store,
    _slot: Slot,
}

capability_linker!("queue", queue);

impl queue::Host for AlkCtxView<'_> {}

fn to_store(payload: Payload) -> store::Payload {
    match payload {
        Payload::Json(s) => store::Payload::Json(s),
        Payload::Text(s) => store::Payload::Text(s),
    }
}

fn message(d: store::Delivery) -> Message {
    Message {
        payload: match d.payload {
            store::Payload::Json(s) => Payload::Json(s),
            store::Payload::Text(s) => Payload::Text(s),
        },
        receipt: d.receipt,
        attempt: d.attempt,
    }
}

/// Ready when a message of the queue may be receivable.
struct QueueReady {
    store: Store,
    clock: Box<dyn Fn() -> i64 + Send + Sync>,
    _slot: Slot,
}

#[wasmtime_wasi::async_trait]
impl Pollable for QueueReady {
    async fn ready(&mut self) {
        // An error makes the pollable ready: the guest's next call reports it.
        let _ = self.store.wait_due(&*self.clock, None).await;
    }
}

impl queue::HostQueue for AlkCtxView<'_> {
    async fn open(&mut self, name: String) -> Result<Resource<Queue>, CallError> {
        let slot = self.ctx.slot("queue")?;
        let store = Store::open(&*self.ctx.engine, &name).await?;
        Ok(self.table.push(Queue { store, _slot: slot })?)
    }

    async fn name(&mut self, q: Resource<Queue>) -> wasmtime::Result<String> {
        Ok(self.table.get(&q)?.store.name().to_string())
    }

    async fn send(&mut self, q: Resource<Queue>, payload: Payload) -> Result<u64, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        Ok(store.send(&to_store(payload), now).await? as u64)
    }

    async fn send_batch(
        &mut self,
        q: Resource<Queue>,
        payloads: Vec<Payload>,
    ) -> Result<Vec<u64>, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        let payloads: Vec<store::Payload> = payloads.into_iter().map(to_store).collect();
        Ok(store
            .send_batch(&payloads, now)
            .await?
            .into_iter()
            .map(|id| id as u64)
            .collect())
    }

    async fn ack_batch(
        &mut self,
        q: Resource<Queue>,
        receipts: Vec<String>,
    ) -> Result<Vec<AckOutcome>, CallError> {
        let store = self.table.get(&q)?.store.clone();
        Ok(store
            .ack_batch(&receipts)
            .await?
            .into_iter()
            .map(|s| match s {
                store::Settled::Done => AckOutcome::Acked,
                store::Settled::Gone => AckOutcome::Gone,
                store::Settled::Stale => AckOutcome::Stale,
            })
            .collect())
    }

    async fn receive(
        &mut self,
        q: Resource<Queue>,
        max: u32,
        visibility_ms: Option<u64>,
    ) -> Result<Vec<Message>, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        let deliveries = store.receive(max, visibility_ms, now).await?;
        Ok(deliveries.into_iter().map(message).collect())
    }

    async fn receive_wait(
        &mut self,
        q: Resource<Queue>,
        max: u32,
        visibility_ms: Option<u64>,
        timeout_ms: u64,
    ) -> Result<Vec<Message>, CallError> {
        let now = self.ctx.clock_fn();
        let store = self.table.get(&q)?.store.clone();
        let deadline = alk_store::time::wait_deadline(timeout_ms);
        let deliveries = store
            .receive_wait(max, visibility_ms, &now, deadline)
            .await?;
        Ok(deliveries.into_iter().map(message).collect())
    }

    async fn subscribe(&mut self, q: Resource<Queue>) -> wasmtime::Result<Resource<DynPollable>> {
        let ready = QueueReady {
            store: self.table.get(&q)?.store.clone(),
            clock: Box::new(self.ctx.clock_fn()),
            _slot: self.ctx.slot("pollable")?,
        };
        let ready = self.table.push(ready)?;
        subscribe(self.table, ready)
    }

    async fn ack(&mut self, q: Resource<Queue>, receipt: String) -> Result<(), CallError> {
        let store = self.table.get(&q)?.store.clone();
        Ok(store.ack(&receipt).await?)
    }

    async fn nack(&mut self, q: Resource<Queue>, receipt: String) -> Result<(), CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        Ok(store.nack(&receipt, now).await?)
    }

    async fn purge(&mut self, q: Resource<Queue>) -> Result<(), CallError> {
        let store = self.table.get(&q)?.store.clone();
        Ok(store.purge().await?)
    }

    async fn drop(&mut self, q: Resource<Queue>) -> wasmtime::Result<()> {
        self.table.delete(q)?;
        Ok(())
    }
}
