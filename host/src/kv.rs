//! Host glue of the `kv` interface: translates, then calls
//! [`alk_store::kv::Bucket`], which checks and asks the engine.

use wasmtime::component::Resource;

use alk_store::kv::Bucket as Store;

use crate::bindings::alk::store::kv::{self, Entry, ScanPage};
use crate::ctx::{AlkCtxView, Slot};
use crate::error::CallError;

/// An open bucket, as held in the instance's resource table.
#[derive(Debug)]
pub struct Bucket {
    store: Store,
    _slot: Slot,
}

capability_linker!("kv", kv);

impl kv::Host for AlkCtxView<'_> {}

impl kv::HostBucket for AlkCtxView<'_> {
    async fn open(&mut self, name: String) -> Result<Resource<Bucket>, CallError> {
        let slot = self.ctx.slot("bucket")?;
        let store = Store::open(&*self.ctx.engine, &name, self.ctx.limits.kv).await?;
        Ok(self.table.push(Bucket { store, _slot: slot })?)
    }

    async fn name(&mut self, bucket: Resource<Bucket>) -> wasmtime::Result<String> {
        Ok(self.table.get(&bucket)?.store.name().to_string())
    }

    async fn get(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
    ) -> Result<Option<Vec<u8>>, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&bucket)?.store.clone();
        Ok(store.get(&key, now).await?)
    }

    async fn set(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> Result<(), CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&bucket)?.store.clone();
        Ok(store.set(&key, &value, ttl_ms, now).await?)
    }

    async fn set_if_absent(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> Result<bool, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&bucket)?.store.clone();
        Ok(store.set_if_absent(&key, &value, ttl_ms, now).await?)
    }

    async fn get_many(
        &mut self,
        bucket: Resource<Bucket>,
        keys: Vec<String>,
    ) -> Result<Vec<Option<Vec<u8>>>, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&bucket)?.store.clone();
        Ok(store.get_many(&keys, now).await?)
    }

    async fn set_many(
        &mut self,
        bucket: Resource<Bucket>,
        entries: Vec<Entry>,
        ttl_ms: Option<u64>,
    ) -> Result<(), CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&bucket)?.store.clone();
        let entries: Vec<(String, Vec<u8>)> =
            entries.into_iter().map(|e| (e.key, e.value)).collect();
        Ok(store.set_many(&entries, ttl_ms, now).await?)
    }

    async fn delete(&mut self, bucket: Resource<Bucket>, key: String) -> Result<(), CallError> {
        let store = self.table.get(&bucket)?.store.clone();
        Ok(store.delete(&key).await?)
    }

    async fn exists(&mut self, bucket: Resource<Bucket>, key: String) -> Result<bool, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&bucket)?.store.clone();
        Ok(store.exists(&key, now).await?)
    }

    async fn scan_prefix(
        &mut self,
        bucket: Resource<Bucket>,
        prefix: String,
        cursor: Option<String>,
        limit: u32,
    ) -> Result<ScanPage, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&bucket)?.store.clone();
        let page = store
            .scan_prefix(&prefix, cursor.as_deref(), limit, now)
            .await?;
        Ok(ScanPage {
            entries: page
                .entries
                .into_iter()
                .map(|(key, value)| Entry { key, value })
                .collect(),
            next_cursor: page.next_cursor,
        })
    }

    async fn drop(&mut self, bucket: Resource<Bucket>) -> wasmtime::Result<()> {
        self.table.delete(bucket)?;
        Ok(())
    }
}
