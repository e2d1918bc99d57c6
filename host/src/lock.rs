//! Host glue of the `lock` interface: translates, then calls
//! [`alk_store::lock::Locks`], which checks, waits and asks the engine.

use alk_store::lock::Acquired;
use alk_store::time::wait_deadline;
use wasmtime::component::Resource;

use crate::bindings::alk::store::lock::{self, HeldLock, HolderInfo};
use crate::ctx::{AlkCtxView, Slot};
use crate::error::CallError;

/// One acquisition, as held in the instance's resource table.
#[derive(Debug)]
pub struct Lock {
    acquired: Acquired,
    _slot: Slot,
}

capability_linker!("lock", lock);

impl lock::Host for AlkCtxView<'_> {
    async fn try_lock(
        &mut self,
        name: String,
        owner: String,
        ttl_ms: u64,
    ) -> Result<Option<Resource<Lock>>, CallError> {
        let slot = self.ctx.slot("lock")?;
        let now = self.ctx.now();
        let store = self.ctx.locks().await?;
        match store.try_lock(&name, &owner, ttl_ms, now).await? {
            Some(acquired) => Ok(Some(self.table.push(Lock {
                acquired,
                _slot: slot,
            })?)),
            None => Ok(None),
        }
    }

    async fn wait_lock(
        &mut self,
        name: String,
        owner: String,
        ttl_ms: u64,
        timeout_ms: u64,
    ) -> Result<Option<Resource<Lock>>, CallError> {
        let slot = self.ctx.slot("lock")?;
        let clock = self.ctx.clock();
        let store = self.ctx.locks().await?;
        match store
            .lock_wait(&name, &owner, ttl_ms, &*clock, wait_deadline(timeout_ms))
            .await?
        {
            Some(acquired) => Ok(Some(self.table.push(Lock {
                acquired,
                _slot: slot,
            })?)),
            None => Ok(None),
        }
    }

    async fn holder(&mut self, name: String) -> Result<Option<HolderInfo>, CallError> {
        let now = self.ctx.now();
        let holder = self.ctx.locks().await?.holder(&name, now).await?;
        Ok(holder.map(|h| HolderInfo {
            owner: h.owner,
            expires_at: h.expires_at.max(0) as u64,
            token: h.token,
        }))
    }

    async fn holders(
        &mut self,
        after: Option<String>,
        max: u32,
    ) -> Result<Vec<HeldLock>, CallError> {
        let now = self.ctx.now();
        let locks = self.ctx.locks().await?;
        let page = locks.holders(after.as_deref(), max, now).await?;
        Ok(page
            .into_iter()
            .map(|(name, h)| HeldLock {
                name,
                owner: h.owner,
                expires_at: h.expires_at.max(0) as u64,
                token: h.token,
            })
            .collect())
    }
}

impl lock::HostLock for AlkCtxView<'_> {
    async fn name(&mut self, l: Resource<Lock>) -> wasmtime::Result<String> {
        Ok(self.table.get(&l)?.acquired.name.clone())
    }

    async fn owner(&mut self, l: Resource<Lock>) -> wasmtime::Result<String> {
        Ok(self.table.get(&l)?.acquired.owner.clone())
    }

    async fn token(&mut self, l: Resource<Lock>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&l)?.acquired.token)
    }

    async fn renew(&mut self, l: Resource<Lock>, ttl_ms: u64) -> Result<bool, CallError> {
        let now = self.ctx.now();
        let store = self.ctx.locks().await?;
        Ok(store
            .renew(&self.table.get(&l)?.acquired, ttl_ms, now)
            .await?)
    }

    async fn release(&mut self, l: Resource<Lock>) -> Result<bool, CallError> {
        let now = self.ctx.now();
        let store = self.ctx.locks().await?;
        Ok(store.release(&self.table.get(&l)?.acquired, now).await?)
    }

    async fn drop(&mut self, l: Resource<Lock>) -> wasmtime::Result<()> {
        let lock = self.table.delete(l)?;
        // Dropping the handle releases the acquisition if it still holds
        // the lock. A failure to release is not the guest's problem: the
        // lock then expires at its deadline.
        let now = self.ctx.now();
        let released = match self.ctx.locks().await {
            Ok(store) => store.release(&lock.acquired, now).await.map(|_| ()),
            Err(e) => Err(e),
        };
        if let Err(e) = released {
            tracing::warn!(target: "alk", lock = %lock.acquired.name, "a dropped lock handle was not released, the lock expires at its deadline: {e}");
        }
        Ok(())
    }
}
