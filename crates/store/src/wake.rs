//! Wakes: waiting for another guest's (or another process's) commit without
//! polling the store.
//!
//! Every change a waiter may care about **signals a topic** ([`topics`]:
//! `queue.<name>`, `stream.<name>`, `lock.<name>`, `notify.<channel>`,
//! `schedule`) after it commits. In
//! this process the topic's [`Notify`] wakes waiting tasks directly; a
//! [`WakeTransport`], provided by the engine, carries the signal to other
//! processes and delivers theirs here (files and inotify for the file
//! engine; `LISTEN/NOTIFY` for a database server). A process ignores its
//! own signals coming back through the transport: its waiters were woken
//! already, and a late echo would look like a new signal to a listener that
//! attached in between.
//!
//! Wakes are hints. A woken waiter re-reads the store and goes back to
//! waiting if there is nothing for it. Every wait also re-reads at least
//! every [`FALLBACK`], so a lost wake delays a waiter, never hangs it.
//! Waiting holds no connection and no transaction, and sleeps: it costs no
//! CPU.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::AlkResult;

/// The longest a waiter sleeps before re-reading the store on its own.
pub const FALLBACK: Duration = Duration::from_millis(250);

/// Topics known to a process are pruned of those nobody waits on or
/// listens to once there are more than this many.
pub const PRUNE_TOPICS_OVER: usize = 1024;

/// The name of every wake topic, in one place: the core signals them, and
/// an engine that signals one itself (a commit it makes on its own, such as
/// a relayed send) names it from here.
pub mod topics {
    /// The topic of queue `name`: sends, nacks, retries, redrives.
    pub fn queue(name: &str) -> String {
        format!("queue.{name}")
    }

    /// The topic of stream `name`: publishes.
    pub fn stream(name: &str) -> String {
        format!("stream.{name}")
    }

    /// The topic of lock `name`: releases.
    pub fn lock(name: &str) -> String {
        format!("lock.{name}")
    }

    /// The topic of notification channel `name`.
    pub fn channel(name: &str) -> String {
        format!("notify.{name}")
    }

    /// The topic schedule runners watch: a schedule was set or deleted.
    pub const SCHEDULES: &str = "schedule";
}

/// Carries signals between processes that share an engine's stores.
pub trait WakeTransport: Send + Sync + 'static {
    /// Tells other processes that `topic` changed (best effort: a lost
    /// signal only delays their waiters until the fallback re-read).
    fn announce(&self, topic: &str);

    /// Starts delivering other processes' signals to `sink`. Called once,
    /// when this process first waits or listens; an error leaves waiters to
    /// their fallback re-reads.
    fn start(&self, sink: WakeSink) -> std::io::Result<()>;

    /// Resolves once every signal announced so far has been handed on (or
    /// given up on). A host calls it before it exits, so that a signal
    /// from its last moments is not lost with the process. Transports that
    /// hand signals on before `announce` returns need not implement it.
    fn flush(&self) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        Box::pin(std::future::ready(()))
    }
}

/// A transport for stores that one process alone uses (nothing to carry).
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalOnly;

impl WakeTransport for LocalOnly {
    fn announce(&self, _topic: &str) {}
    fn start(&self, _sink: WakeSink) -> std::io::Result<()> {
        Ok(())
    }
}

/// Where a transport delivers other processes' signals.
#[derive(Clone)]
pub struct WakeSink(Weak<Inner>);

impl std::fmt::Debug for WakeSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WakeSink")
    }
}

impl WakeSink {
    /// Another process signalled `topic`: wakes its waiters here.
    pub fn deliver(&self, topic: &str) {
        if let Some(inner) = self.0.upgrade()
            && let Some(t) = lock(&inner.topics).map.get(topic)
        {
            t.wake();
        }
    }

    /// Signals may have been lost (a transport's queue overflowed): wakes
    /// every waiter, which re-read what they wait for.
    pub fn deliver_all(&self) {
        if let Some(inner) = self.0.upgrade() {
            for t in lock(&inner.topics).map.values() {
                t.wake();
            }
        }
    }

    /// Whether the wakes it delivers to still exist.
    pub fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }
}

/// One topic's waiters in this process.
#[derive(Debug, Default)]
pub struct Topic {
    notify: Notify,
    /// Signals seen by this process (its own and other processes'). Only
    /// grows; listeners compare it with what they saw last.
    seq: AtomicU64,
}

impl Topic {
    /// Signals seen so far.
    pub fn seq(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }

    /// Completes once a signal beyond `seen` (a [`Topic::seq`] reading)
    /// has arrived.
    pub async fn changed_since(&self, seen: u64) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.seq() != seen {
                return;
            }
            notified.await;
        }
    }

    fn wake(&self) {
        self.seq.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }
}

/// The wakes of one engine's stores, shared by every context in the
/// process that uses them.
#[derive(Clone)]
pub struct Wakes {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Wakes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wakes").finish_non_exhaustive()
    }
}

struct Inner {
    topics: Mutex<Topics>,
    transport: Arc<dyn WakeTransport>,
    watching: Mutex<bool>,
}

#[derive(Default)]
struct Topics {
    map: HashMap<String, Arc<Topic>>,
    prune_at: usize,
}

/// What a check of the store found.
#[derive(Debug)]
pub enum Check<T> {
    /// What the waiter waited for.
    Ready(T),
    /// Nothing yet; look again at the latest at this instant (for example
    /// when an in-flight message becomes visible or a lock expires).
    NotYet(Option<Instant>),
}

/// The future of one check.
pub type CheckFuture<'a, T> = Pin<Box<dyn Future<Output = AlkResult<Check<T>>> + Send + 'a>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Wakes {
    /// Wakes carried to other processes by `transport`.
    pub fn new(transport: Arc<dyn WakeTransport>) -> Wakes {
        Wakes {
            inner: Arc::new(Inner {
                topics: Default::default(),
                transport,
                watching: Mutex::new(false),
            }),
        }
    }

    /// Wakes of this process only.
    pub fn local() -> Wakes {
        Wakes::new(Arc::new(LocalOnly))
    }

    /// The topic `name` in this process.
    pub fn topic(&self, name: &str) -> Arc<Topic> {
        let mut topics = lock(&self.inner.topics);
        if let Some(t) = topics.map.get(name) {
            return t.clone();
        }
        // Names come from guests: forget the topics nobody holds any more,
        // so the map does not grow with every name a guest invents.
        if topics.map.len() >= topics.prune_at.max(PRUNE_TOPICS_OVER) {
            topics.map.retain(|_, t| Arc::strong_count(t) > 1);
            topics.prune_at = topics.map.len() * 2;
        }
        let t = Arc::new(Topic::default());
        topics.map.insert(name.to_string(), t.clone());
        t
    }

    /// The topic `name`, with this process receiving other processes'
    /// signals from now on. A listener attaches through this, so that a
    /// signal sent after it attached is seen even before it first waits.
    pub fn watched_topic(&self, name: &str) -> Arc<Topic> {
        self.ensure_watching();
        self.topic(name)
    }

    /// Announces a committed change on `topic` to waiters in this and
    /// every other process.
    pub fn signal(&self, topic: &str) {
        let t = lock(&self.inner.topics).map.get(topic).cloned();
        if let Some(t) = t {
            t.wake();
        }
        self.inner.transport.announce(topic);
    }

    /// Resolves once every signal announced so far has been handed to the
    /// other processes (see [`WakeTransport::flush`]).
    pub fn flush(&self) -> impl Future<Output = ()> + Send + 'static {
        self.inner.transport.flush()
    }

    /// Topics this process knows (for tests).
    pub fn known_topics(&self) -> usize {
        lock(&self.inner.topics).map.len()
    }

    fn ensure_watching(&self) {
        let mut watching = lock(&self.inner.watching);
        if *watching {
            return;
        }
        match self
            .inner
            .transport
            .start(WakeSink(Arc::downgrade(&self.inner)))
        {
            Ok(()) => *watching = true,
            Err(e) => {
                // Waiters fall back to re-reading every FALLBACK.
                tracing::warn!("cannot watch for other processes' wakes: {e}");
                *watching = true;
            }
        }
    }

    /// Waits until `check` finds what the caller waits for, or `deadline`.
    ///
    /// `check` runs first at once, then after every wake on `topic`, at the
    /// instant it asks for, and at least every [`FALLBACK`]. The wait is
    /// registered before each check, so a signal between the check and the
    /// sleep is not missed. `None` means the deadline passed.
    pub async fn wait_for<'a, T>(
        &self,
        topic: &str,
        deadline: Option<Instant>,
        mut check: impl FnMut() -> CheckFuture<'a, T> + Send,
    ) -> AlkResult<Option<T>> {
        let t = self.watched_topic(topic);
        loop {
            let notified = t.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let retry_at = match check().await? {
                Check::Ready(v) => return Ok(Some(v)),
                Check::NotYet(at) => at,
            };
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            let mut wake_at = now + FALLBACK;
            for at in [deadline, retry_at].into_iter().flatten() {
                wake_at = wake_at.min(at);
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(wake_at) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[tokio::test]
    async fn a_signal_wakes_a_waiter_and_a_deadline_is_a_value() {
        let wakes = Wakes::local();
        let flag = Arc::new(AtomicBool::new(false));
        let f = flag.clone();
        let waiter = {
            let wakes = wakes.clone();
            tokio::spawn(async move {
                wakes
                    .wait_for("t", Some(Instant::now() + Duration::from_secs(30)), || {
                        let f = f.clone();
                        Box::pin(async move {
                            Ok(if f.load(Ordering::SeqCst) {
                                Check::Ready(())
                            } else {
                                Check::NotYet(None)
                            })
                        })
                    })
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        flag.store(true, Ordering::SeqCst);
        wakes.signal("t");
        assert!(waiter.await.unwrap().unwrap().is_some());
        let timed_out = wakes
            .wait_for(
                "t",
                Some(Instant::now() + Duration::from_millis(30)),
                || Box::pin(async { Ok(Check::<()>::NotYet(None)) }),
            )
            .await
            .unwrap();
        assert!(timed_out.is_none());
    }

    #[test]
    fn topics_stay_bounded_whatever_names_are_signalled() {
        let wakes = Wakes::local();
        let held = wakes.watched_topic("held");
        for i in 0..5_000 {
            let name = format!("t{i}");
            let _ = wakes.topic(&name);
            wakes.signal(&name);
        }
        assert!(
            wakes.known_topics() <= 2 * PRUNE_TOPICS_OVER,
            "{}",
            wakes.known_topics()
        );
        // A topic someone holds survives pruning, and still wakes.
        wakes.signal("held");
        assert!(held.seq() >= 1);
        assert!(Arc::ptr_eq(&held, &wakes.topic("held")));
    }
}
