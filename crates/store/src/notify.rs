//! Notifications: signals on named channels, carried by the wakes. Nothing
//! is stored.

use tokio::time::Instant;

use crate::engine::Engine;
use crate::error::AlkResult;
use crate::names::check_name;
use crate::wake::{Check, Listening, Wakes, topics};

/// The channels of an engine.
#[derive(Debug, Clone)]
pub struct Channels {
    wakes: Wakes,
}

impl Channels {
    /// The channels of `engine`.
    pub fn open(engine: &dyn Engine) -> AlkResult<Channels> {
        Ok(Channels {
            wakes: engine.wakes()?,
        })
    }

    /// Wakes every listener of `channel`, in this and every other process.
    pub fn notify(&self, channel: &str) -> AlkResult<()> {
        check_name("channel", channel)?;
        self.wakes.signal(&topics::channel(channel));
        Ok(())
    }

    /// A listener of `channel`, starting now. Watching for other processes
    /// (and saying that this process listens) starts before the listener
    /// takes its starting point, so a notification sent after this returns
    /// is seen even if the listener waits only later.
    pub fn listen(&self, channel: &str) -> AlkResult<Listener> {
        check_name("channel", channel)?;
        let listening = self.wakes.listen(&topics::channel(channel));
        let seen = listening.topic().seq();
        Ok(Listener {
            channel: channel.to_string(),
            wakes: self.wakes.clone(),
            listening,
            seen,
        })
    }
}

/// A listener of one channel.
#[derive(Debug)]
pub struct Listener {
    channel: String,
    wakes: Wakes,
    /// The channel's topic, listened to while the listener exists.
    listening: Listening,
    /// The topic's signal count when the listener last woke (or attached).
    seen: u64,
}

impl Listener {
    /// The channel.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// Waits until the channel was notified since the listener attached or
    /// last woke, or `deadline`; true (and the notification consumed) when
    /// it was.
    pub async fn wait(&mut self, deadline: Option<Instant>) -> bool {
        match self.woken(deadline).await {
            Some(now) => {
                self.seen = now;
                true
            }
            None => false,
        }
    }

    /// Waits like [`Listener::wait`] without consuming the notification
    /// (a pollable's readiness).
    pub async fn ready(&self) {
        self.woken(None).await;
    }

    async fn woken(&self, deadline: Option<Instant>) -> Option<u64> {
        let (topic, seen) = (self.listening.topic(), self.seen);
        self.wakes
            .wait_for(&topics::channel(&self.channel), deadline, || {
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

    /// A snapshot to wait on independently (for a pollable).
    pub fn snapshot(&self) -> Listener {
        Listener {
            channel: self.channel.clone(),
            wakes: self.wakes.clone(),
            listening: self.listening.clone(),
            seen: self.seen,
        }
    }
}
