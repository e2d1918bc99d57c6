//! Host glue of the `stream` interface: translates, then calls
//! [`alk_store::stream::Streams`], which checks, waits, runs transactions
//! and asks the engine.

use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

use crate::tx::Transaction;
use alk_store::names::{check_identifier, check_name};
use alk_store::stream::{self as store, Streams};
use alk_store::time::wait_deadline;

use crate::bindings::alk::store::stream::{self, ConsumerLag, Event, NewEvent, StreamInfo};
use crate::ctx::{AlkCtxView, Slot};
use crate::error::CallError;

/// A consumer's read position, as held in the instance's resource table.
#[derive(Debug)]
pub struct Subscription {
    stream: String,
    consumer: String,
    position: u64,
    _slot: Slot,
}

capability_linker!("stream", stream);

fn event(e: store::Event) -> Event {
    Event {
        offset: e.offset,
        stream: e.stream,
        key: e.key,
        payload: e.payload,
        created_at: e.created_at.max(0) as u64,
    }
}

/// Ready when the stream has events after a position.
struct StreamReady {
    store: Streams,
    stream: String,
    position: u64,
    _slot: Slot,
}

#[wasmtime_wasi::async_trait]
impl Pollable for StreamReady {
    async fn ready(&mut self) {
        // An error makes the pollable ready: the guest's next call reports it.
        let _ = self
            .store
            .read_wait(&self.stream, self.position, 0, None)
            .await;
    }
}

impl stream::Host for AlkCtxView<'_> {
    async fn publish(&mut self, stream: String, payload: Vec<u8>) -> Result<u64, CallError> {
        let now = self.ctx.now();
        Ok(self
            .ctx
            .streams()
            .await?
            .publish(&stream, None, &payload, now)
            .await?)
    }

    async fn publish_with_key(
        &mut self,
        stream: String,
        key: String,
        payload: Vec<u8>,
    ) -> Result<u64, CallError> {
        let now = self.ctx.now();
        Ok(self
            .ctx
            .streams()
            .await?
            .publish(&stream, Some(&key), &payload, now)
            .await?)
    }

    async fn publish_batch(
        &mut self,
        stream: String,
        events: Vec<NewEvent>,
    ) -> Result<Vec<u64>, CallError> {
        let now = self.ctx.now();
        let events: Vec<(Option<String>, Vec<u8>)> =
            events.into_iter().map(|e| (e.key, e.payload)).collect();
        Ok(self
            .ctx
            .streams()
            .await?
            .publish_batch(&stream, &events, now)
            .await?)
    }

    async fn read_since(
        &mut self,
        stream: String,
        offset: u64,
        limit: u32,
    ) -> Result<Vec<Event>, CallError> {
        let events = self
            .ctx
            .streams()
            .await?
            .read_since(&stream, offset, limit)
            .await?;
        Ok(events.into_iter().map(event).collect())
    }

    async fn save_offset(
        &mut self,
        stream: String,
        consumer: String,
        offset: u64,
    ) -> Result<(), CallError> {
        Ok(self
            .ctx
            .streams()
            .await?
            .save_offset(&stream, &consumer, offset)
            .await?)
    }

    async fn get_offset(
        &mut self,
        stream: String,
        consumer: String,
    ) -> Result<Option<u64>, CallError> {
        Ok(self
            .ctx
            .streams()
            .await?
            .get_offset(&stream, &consumer)
            .await?)
    }

    async fn info(&mut self, stream: String) -> Result<StreamInfo, CallError> {
        let info = self.ctx.streams().await?.info(&stream).await?;
        Ok(StreamInfo {
            first: info.first,
            last: info.last,
            consumers: info
                .consumers
                .into_iter()
                .map(|c| ConsumerLag {
                    consumer: c.consumer,
                    offset: c.offset,
                    lag: c.lag,
                })
                .collect(),
        })
    }

    async fn trim_to(&mut self, stream: String, horizon: u64) -> Result<u64, CallError> {
        Ok(self.ctx.streams().await?.trim_to(&stream, horizon).await?)
    }

    async fn subscribe(
        &mut self,
        stream: String,
        consumer: String,
    ) -> Result<Resource<Subscription>, CallError> {
        check_name("stream", &stream).map_err(CallError::from)?;
        check_identifier("consumer", &consumer).map_err(CallError::from)?;
        let slot = self.ctx.slot("subscription")?;
        let saved = self
            .ctx
            .streams()
            .await?
            .get_offset(&stream, &consumer)
            .await?;
        Ok(self.table.push(Subscription {
            stream,
            consumer,
            position: saved.unwrap_or(0),
            _slot: slot,
        })?)
    }
}

impl stream::HostSubscription for AlkCtxView<'_> {
    async fn next(
        &mut self,
        sub: Resource<Subscription>,
        max: u32,
    ) -> Result<Vec<Event>, CallError> {
        let store = self.ctx.streams().await?;
        let s = self.table.get(&sub)?;
        let events = store.read_since(&s.stream, s.position, max).await?;
        if let Some(last) = events.last() {
            self.table.get_mut(&sub)?.position = last.offset;
        }
        Ok(events.into_iter().map(event).collect())
    }

    async fn next_wait(
        &mut self,
        sub: Resource<Subscription>,
        max: u32,
        timeout_ms: u64,
    ) -> Result<Vec<Event>, CallError> {
        let store = self.ctx.streams().await?;
        let s = self.table.get(&sub)?;
        let events = store
            .read_wait(&s.stream, s.position, max, Some(wait_deadline(timeout_ms)))
            .await?
            .unwrap_or_default();
        if let Some(last) = events.last() {
            self.table.get_mut(&sub)?.position = last.offset;
        }
        Ok(events.into_iter().map(event).collect())
    }

    async fn subscribe(
        &mut self,
        sub: Resource<Subscription>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        // The store is open: the subscription was made through it.
        let store = self.ctx.streams().await?;
        let s = self.table.get(&sub)?;
        let ready = StreamReady {
            store,
            stream: s.stream.clone(),
            position: s.position,
            _slot: self.ctx.slot("pollable")?,
        };
        let ready = self.table.push(ready)?;
        subscribe(self.table, ready)
    }

    async fn position(&mut self, sub: Resource<Subscription>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&sub)?.position)
    }

    async fn save(&mut self, sub: Resource<Subscription>) -> Result<(), CallError> {
        let store = self.ctx.streams().await?;
        let s = self.table.get(&sub)?;
        Ok(store
            .save_offset(&s.stream, &s.consumer, s.position)
            .await?)
    }

    async fn drop(&mut self, sub: Resource<Subscription>) -> wasmtime::Result<()> {
        self.table.delete(sub)?;
        Ok(())
    }
}

impl stream::HostTransaction for AlkCtxView<'_> {
    async fn new(&mut self) -> wasmtime::Result<Resource<Transaction>> {
        self.tx_new()
    }

    async fn publish(
        &mut self,
        tx: Resource<Transaction>,
        stream: String,
        payload: Vec<u8>,
    ) -> Result<u64, CallError> {
        self.tx_publish(&tx, &stream, None, &payload).await
    }

    async fn publish_with_key(
        &mut self,
        tx: Resource<Transaction>,
        stream: String,
        key: String,
        payload: Vec<u8>,
    ) -> Result<u64, CallError> {
        self.tx_publish(&tx, &stream, Some(&key), &payload).await
    }

    async fn save_offset(
        &mut self,
        tx: Resource<Transaction>,
        stream: String,
        consumer: String,
        offset: u64,
    ) -> Result<(), CallError> {
        self.tx_save_offset(&tx, &stream, &consumer, offset).await
    }

    async fn commit(&mut self, tx: Resource<Transaction>) -> Result<(), CallError> {
        self.tx_commit(&tx).await
    }

    async fn rollback(&mut self, tx: Resource<Transaction>) -> wasmtime::Result<()> {
        self.tx_rollback(&tx).await
    }

    async fn drop(&mut self, tx: Resource<Transaction>) -> wasmtime::Result<()> {
        self.tx_drop(tx).await
    }
}
