//! Host glue of the `notify` interface: translates, then calls
//! [`alk_store::notify::Channels`]. Nothing is stored.

use alk_store::notify::{Channels, Listener as CoreListener};
use alk_store::time::wait_deadline;
use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

use crate::bindings::alk::store::notify;
use crate::ctx::{AlkCtxView, Slot};
use crate::error::CallError;

/// A listener, as held in the instance's resource table.
#[derive(Debug)]
pub struct Listener {
    listener: CoreListener,
    _slot: Slot,
}

capability_linker!("notify", notify);

impl notify::Host for AlkCtxView<'_> {
    async fn notify(&mut self, channel: String) -> Result<(), CallError> {
        Ok(Channels::open(&*self.ctx.engine)?.notify(&channel)?)
    }

    async fn listen(&mut self, channel: String) -> Result<Resource<Listener>, CallError> {
        let channels = Channels::open(&*self.ctx.engine)?;
        // Check the name before counting the resource.
        let listener = channels.listen(&channel)?;
        let slot = self.ctx.slot("listener")?;
        Ok(self.table.push(Listener {
            listener,
            _slot: slot,
        })?)
    }
}

impl notify::HostListener for AlkCtxView<'_> {
    async fn channel(&mut self, l: Resource<Listener>) -> wasmtime::Result<String> {
        Ok(self.table.get(&l)?.listener.channel().to_string())
    }

    async fn wait(&mut self, l: Resource<Listener>, timeout_ms: u64) -> wasmtime::Result<bool> {
        // Wait on a copy, so the table is free meanwhile; keep what it saw.
        let mut waiting = self.table.get(&l)?.listener.snapshot();
        let woke = waiting.wait(Some(wait_deadline(timeout_ms))).await;
        if woke {
            self.table.get_mut(&l)?.listener = waiting;
        }
        Ok(woke)
    }

    async fn subscribe(
        &mut self,
        l: Resource<Listener>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let ready = ListenerReady {
            listener: self.table.get(&l)?.listener.snapshot(),
            _slot: self.ctx.slot("pollable")?,
        };
        let ready = self.table.push(ready)?;
        subscribe(self.table, ready)
    }

    async fn drop(&mut self, l: Resource<Listener>) -> wasmtime::Result<()> {
        self.table.delete(l)?;
        Ok(())
    }
}

/// Ready when the channel has been notified since the listener last woke.
struct ListenerReady {
    listener: CoreListener,
    _slot: Slot,
}

#[wasmtime_wasi::async_trait]
impl Pollable for ListenerReady {
    async fn ready(&mut self) {
        self.listener.ready().await;
    }
}
