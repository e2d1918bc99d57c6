//! Host glue of the `outbox` interface: translates, then calls
//! [`alk_store::outbox::Outbox`].

use wasmtime::component::Resource;

use alk_store::outbox::Outbox as Store;

use crate::bindings::alk::store::outbox;
use crate::bindings::alk::store::queue::{Job, JobInfo, Payload, Retried, SendOptions};
use crate::ctx::{AlkCtxView, Slot};
use crate::error::CallError;
use crate::queue::{info, job, options, retried, to_store};

/// An open outbox, as held in the instance's resource table.
#[derive(Debug)]
pub struct Outbox {
    store: Store,
    _slot: Slot,
}

capability_linker!("outbox", outbox);

impl outbox::Host for AlkCtxView<'_> {}

impl outbox::HostOutbox for AlkCtxView<'_> {
    async fn open(&mut self, name: String) -> Result<Resource<Outbox>, CallError> {
        let slot = self.ctx.slot("outbox")?;
        let store = Store::open(&*self.ctx.engine, &name).await?;
        Ok(self.table.push(Outbox { store, _slot: slot })?)
    }

    async fn name(&mut self, o: Resource<Outbox>) -> wasmtime::Result<String> {
        Ok(self.table.get(&o)?.store.name().to_string())
    }

    async fn enqueue(
        &mut self,
        o: Resource<Outbox>,
        payload: Payload,
        opts: SendOptions,
    ) -> Result<u64, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&o)?.store.clone();
        Ok(store
            .enqueue(&to_store(payload), &options(opts), now)
            .await?)
    }

    async fn next(
        &mut self,
        o: Resource<Outbox>,
        visibility_ms: Option<u64>,
    ) -> Result<Option<Job>, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&o)?.store.clone();
        Ok(store.claim_one(visibility_ms, now).await?.map(job))
    }

    async fn done(&mut self, o: Resource<Outbox>, receipt: String) -> Result<(), CallError> {
        let store = self.table.get(&o)?.store.clone();
        Ok(store.succeeded(&receipt).await?)
    }

    async fn failed(
        &mut self,
        o: Resource<Outbox>,
        receipt: String,
        reason: String,
    ) -> Result<Retried, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&o)?.store.clone();
        Ok(retried(store.failed(&receipt, &reason, now).await?))
    }

    async fn get_job(
        &mut self,
        o: Resource<Outbox>,
        id: u64,
    ) -> Result<Option<JobInfo>, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&o)?.store.clone();
        Ok(store.queue().job(id, now).await?.map(info))
    }

    async fn dead_letters(
        &mut self,
        o: Resource<Outbox>,
        after: Option<u64>,
        max: u32,
    ) -> Result<Vec<JobInfo>, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&o)?.store.clone();
        Ok(store
            .queue()
            .dead_letters(after, max, now)
            .await?
            .into_iter()
            .map(info)
            .collect())
    }

    async fn drop(&mut self, o: Resource<Outbox>) -> wasmtime::Result<()> {
        self.table.delete(o)?;
        Ok(())
    }
}
