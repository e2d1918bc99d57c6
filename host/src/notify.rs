//! Host glue of the `notify` interface: signals on named channels, carried
//! by [`crate::store::wake`]. Nothing is stored.

use std::sync::Arc;

use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

use crate::bindings::alk::store::notify;
use crate::ctx::{AlkCtxView, Slot};
use crate::error::{AlkError, CallError};
use crate::store::names::check_name;
use crate::store::wake::{Check, Topic, Wakes};

/// A listener, as held in the instance's resource table.
#[derive(Debug)]
pub struct Listener {
    channel: String,
    wakes: Wakes,
    topic: Arc<Topic>,
    /// The topic's signal count when the listener last woke (or attached).
    seen: u64,
    _slot: Slot,
}

capability_linker!("notify", notify);

fn topic_name(channel: &str) -> String {
    format!("notify.{channel}")
}

impl AlkCtxView<'_> {
    /// The wakes of the data directory, which using a channel creates.
    fn wakes(&self) -> Result<Wakes, AlkError> {
        std::fs::create_dir_all(&self.ctx.data_dir).map_err(|e| {
            AlkError::Internal(format!(
                "cannot create the data directory {}: {e}",
                self.ctx.data_dir.display()
            ))
        })?;
        Ok(Wakes::for_data_dir(&self.ctx.data_dir))
    }
}

impl notify::Host for AlkCtxView<'_> {
    async fn notify(&mut self, channel: String) -> Result<(), CallError> {
        check_name("channel", &channel)?;
        self.wakes()?.signal(&topic_name(&channel));
        Ok(())
    }

    async fn listen(&mut self, channel: String) -> Result<Resource<Listener>, CallError> {
        check_name("channel", &channel)?;
        let slot = self.ctx.slot("listener")?;
        let wakes = self.wakes()?;
        // Watching starts before the listener takes its starting point, so
        // a notification from another process sent after this call returns
        // is seen even if the guest waits only later.
        let topic = wakes.watched_topic(&topic_name(&channel));
        let seen = topic.seq();
        Ok(self.table.push(Listener {
            channel,
            wakes,
            topic,
            seen,
            _slot: slot,
        })?)
    }
}

/// Waits until `topic` has seen a signal after `seen`; the new count.
async fn woken(
    wakes: &Wakes,
    channel: &str,
    topic: &Topic,
    seen: u64,
    deadline: Option<tokio::time::Instant>,
) -> Option<u64> {
    wakes
        .wait_for(&topic_name(channel), deadline, || {
            let now = topic.seq();
            Box::pin(async move {
                Ok(if now > seen {
                    Check::Ready(now)
                } else {
                    Check::NotYet(None)
                })
            })
        })
        .await
        .ok()
        .flatten()
}

impl notify::HostListener for AlkCtxView<'_> {
    async fn channel(&mut self, l: Resource<Listener>) -> wasmtime::Result<String> {
        Ok(self.table.get(&l)?.channel.clone())
    }

    async fn wait(&mut self, l: Resource<Listener>, timeout_ms: u64) -> wasmtime::Result<bool> {
        let listener = self.table.get(&l)?;
        let (wakes, topic, seen, channel) = (
            listener.wakes.clone(),
            listener.topic.clone(),
            listener.seen,
            listener.channel.clone(),
        );
        let deadline = crate::deadline_in(timeout_ms);
        match woken(&wakes, &channel, &topic, seen, Some(deadline)).await {
            Some(now) => {
                self.table.get_mut(&l)?.seen = now;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn subscribe(
        &mut self,
        l: Resource<Listener>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let listener = self.table.get(&l)?;
        let ready = ListenerReady {
            wakes: listener.wakes.clone(),
            channel: listener.channel.clone(),
            topic: listener.topic.clone(),
            seen: listener.seen,
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
    wakes: Wakes,
    channel: String,
    topic: Arc<Topic>,
    seen: u64,
    _slot: Slot,
}

#[wasmtime_wasi::async_trait]
impl Pollable for ListenerReady {
    async fn ready(&mut self) {
        woken(&self.wakes, &self.channel, &self.topic, self.seen, None).await;
    }
}
