//! Host glue of the `tx` interface: translates, then calls
//! [`alk_store::tx::Tx`], which checks every operation, runs the engine's
//! transaction and sends the notifications after commit.

use std::sync::Arc;

use wasmtime::component::Resource;

use alk_store::AlkError;
use alk_store::tx::Tx;

use crate::bindings::alk::store::queue::{Payload, SendOptions, UniqueOptions};
use crate::bindings::alk::store::tx;
use crate::ctx::{AlkCtxView, Slot};
use crate::error::CallError;
use crate::queue::{options, to_store, unique};

/// A transaction, as held in the instance's resource table. The store
/// transaction is created at the first operation.
#[derive(Debug)]
pub struct Transaction {
    tx: Option<Arc<Tx>>,
    /// Rolled back before it did anything: finished all the same.
    finished: bool,
    _slot: Slot,
}

capability_linker!("tx", tx);

impl tx::Host for AlkCtxView<'_> {}

impl AlkCtxView<'_> {
    /// The transaction behind `t`, started on first use.
    async fn tx(&mut self, t: &Resource<Transaction>) -> Result<Arc<Tx>, CallError> {
        let held = self.table.get(t)?;
        if let Some(existing) = &held.tx {
            return Ok(existing.clone());
        }
        if held.finished {
            return Err(
                AlkError::InvalidArgument("the transaction is already finished".into()).into(),
            );
        }
        let started = Arc::new(Tx::new(self.ctx.engine.clone(), self.ctx.limits.stream)?);
        self.table.get_mut(t)?.tx = Some(started.clone());
        Ok(started)
    }
}

/// The operations both transaction resources (`tx.transaction`, and the
/// older `stream.transaction`, which is the same resource) run.
impl AlkCtxView<'_> {
    pub(crate) fn tx_new(&mut self) -> wasmtime::Result<Resource<Transaction>> {
        let slot = self.ctx.slot("transaction")?;
        Ok(self.table.push(Transaction {
            tx: None,
            finished: false,
            _slot: slot,
        })?)
    }

    pub(crate) async fn tx_publish(
        &mut self,
        t: &Resource<Transaction>,
        stream: &str,
        key: Option<&str>,
        payload: &[u8],
    ) -> Result<u64, CallError> {
        let now = self.ctx.now();
        Ok(self.tx(t).await?.publish(stream, key, payload, now).await?)
    }

    pub(crate) async fn tx_save_offset(
        &mut self,
        t: &Resource<Transaction>,
        stream: &str,
        consumer: &str,
        offset: u64,
    ) -> Result<(), CallError> {
        Ok(self
            .tx(t)
            .await?
            .save_offset(stream, consumer, offset)
            .await?)
    }

    pub(crate) async fn tx_commit(&mut self, t: &Resource<Transaction>) -> Result<(), CallError> {
        Ok(self.tx(t).await?.commit().await?)
    }

    pub(crate) async fn tx_rollback(&mut self, t: &Resource<Transaction>) -> wasmtime::Result<()> {
        let held = self.table.get_mut(t)?;
        // Finished either way: a transaction rolled back before its first
        // operation takes no further operations either.
        held.finished = true;
        if let Some(tx) = held.tx.clone() {
            tx.rollback().await;
        }
        Ok(())
    }

    pub(crate) async fn tx_drop(&mut self, t: Resource<Transaction>) -> wasmtime::Result<()> {
        // Dropped without commit: roll back now, while we can wait for it.
        if let Some(tx) = self.table.delete(t)?.tx {
            tx.rollback().await;
        }
        Ok(())
    }

    async fn tx_send(
        &mut self,
        t: &Resource<Transaction>,
        to: SendTo<'_>,
        payloads: Vec<Payload>,
        opts: SendOptions,
    ) -> Result<(), CallError> {
        let now = self.ctx.now();
        let payloads: Vec<_> = payloads.into_iter().map(to_store).collect();
        let tx = self.tx(t).await?;
        let opts = options(opts);
        match to {
            SendTo::Queue(q) => tx.enqueue(q, &payloads, &opts, now).await?,
            SendTo::Outbox(o) => tx.outbox_enqueue(o, &payloads, &opts, now).await?,
        }
        Ok(())
    }
}

/// Where a transaction's send goes.
enum SendTo<'a> {
    Queue(&'a str),
    Outbox(&'a str),
}

impl tx::HostTransaction for AlkCtxView<'_> {
    async fn new(&mut self) -> wasmtime::Result<Resource<Transaction>> {
        self.tx_new()
    }

    async fn publish(
        &mut self,
        t: Resource<Transaction>,
        stream: String,
        payload: Vec<u8>,
    ) -> Result<u64, CallError> {
        self.tx_publish(&t, &stream, None, &payload).await
    }

    async fn publish_with_key(
        &mut self,
        t: Resource<Transaction>,
        stream: String,
        key: String,
        payload: Vec<u8>,
    ) -> Result<u64, CallError> {
        self.tx_publish(&t, &stream, Some(&key), &payload).await
    }

    async fn save_offset(
        &mut self,
        t: Resource<Transaction>,
        stream: String,
        consumer: String,
        offset: u64,
    ) -> Result<(), CallError> {
        self.tx_save_offset(&t, &stream, &consumer, offset).await
    }

    async fn enqueue(
        &mut self,
        t: Resource<Transaction>,
        queue: String,
        payloads: Vec<Payload>,
        opts: SendOptions,
    ) -> Result<(), CallError> {
        self.tx_send(&t, SendTo::Queue(&queue), payloads, opts)
            .await
    }

    async fn enqueue_unique(
        &mut self,
        t: Resource<Transaction>,
        queue: String,
        payload: Payload,
        opts: SendOptions,
        unique_opts: UniqueOptions,
    ) -> Result<(), CallError> {
        let now = self.ctx.now();
        let tx = self.tx(&t).await?;
        Ok(tx
            .enqueue_unique(
                &queue,
                &to_store(payload),
                &options(opts),
                &unique(unique_opts),
                now,
            )
            .await?)
    }

    async fn outbox_enqueue(
        &mut self,
        t: Resource<Transaction>,
        outbox: String,
        payloads: Vec<Payload>,
        opts: SendOptions,
    ) -> Result<(), CallError> {
        self.tx_send(&t, SendTo::Outbox(&outbox), payloads, opts)
            .await
    }

    async fn notify(&mut self, t: Resource<Transaction>, channel: String) -> Result<(), CallError> {
        Ok(self.tx(&t).await?.notify(&channel).await?)
    }

    async fn commit(&mut self, t: Resource<Transaction>) -> Result<(), CallError> {
        self.tx_commit(&t).await
    }

    async fn rollback(&mut self, t: Resource<Transaction>) -> wasmtime::Result<()> {
        self.tx_rollback(&t).await
    }

    async fn drop(&mut self, t: Resource<Transaction>) -> wasmtime::Result<()> {
        self.tx_drop(t).await
    }
}
