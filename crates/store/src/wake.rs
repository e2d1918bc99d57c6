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
//!
//! **A queue's signal wakes one process, not all** ([`topics::wakes_one`]).
//! A message goes to one receiver, so waking every waiting worker of every
//! process for it makes all of them read the store and race for the write
//! lock, and all but one find nothing: with eight worker processes that is
//! most of the work done per message. A process about to sleep on a queue
//! says so to the transport ([`WakeTransport::waiting`]); a signal wakes
//! the waiters of its own process when it has any, else the transport
//! wakes one waiting process ([`WakeTransport::announce_one`]). A waiter
//! that took messages and sees more due passes the wake on
//! ([`Wakes::pass_on`]); a wait that ends (found, at its deadline, or
//! dropped) with a wake that came after it last looked at the store passes
//! that one on too. Transports without a registry of waiters announce to
//! every process, as for the other topics.
//!
//! **Other topics wake only the processes that listen.** A stream's, a
//! lock's, a channel's or the schedules' signal is for every waiter, but
//! only processes that wait on the topic or listen to it care: a process
//! says so to the transport while it does (a wait about to sleep, a
//! channel's listener for its life, the scheduler's runner), and a
//! transport with a registry announces to those processes only. With
//! eight worker processes that never read the stream their producers
//! publish to, a publish no longer wakes all of them.

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

    /// Whether a signal on `topic` is for one waiter (a queue's: a message
    /// goes to one receiver) rather than for all of them.
    pub fn wakes_one(topic: &str) -> bool {
        topic.starts_with("queue.")
    }
}

/// Carries signals between processes that share an engine's stores.
pub trait WakeTransport: Send + Sync + 'static {
    /// Tells other processes that `topic` changed — a transport that keeps
    /// a registry ([`WakeTransport::waiting`]) tells those that listen — (best
    /// effort: a lost signal only delays their waiters until the fallback
    /// re-read).
    fn announce(&self, topic: &str);

    /// Starts delivering other processes' signals to `sink`. Called once,
    /// when this process first waits or listens; an error leaves waiters to
    /// their fallback re-reads.
    fn start(&self, sink: WakeSink) -> std::io::Result<()>;

    /// Tells one other process that `topic` changed: a process that said
    /// it waits on `topic` ([`WakeTransport::waiting`]), if any does. A
    /// transport that keeps no such registry tells every process.
    fn announce_one(&self, topic: &str) {
        self.announce(topic)
    }

    /// This process now waits on `topic` (`true`), or no longer does: for
    /// a topic that wakes one waiter ([`topics::wakes_one`]), a wait about
    /// to sleep; for any other, a wait or a listener (see [`Listening`]).
    /// A transport that keeps a registry of these announces a topic to the
    /// processes in it only; it must take this process in before the call
    /// returns, as the caller looks at the store again only after.
    fn waiting(&self, _topic: &str, _waiting: bool) {}

    /// Whether another process says it waits on `topic` (a waiter that
    /// took messages passes the wake on only then). `false` when the
    /// transport keeps no registry: its announcements reach everyone.
    fn others_waiting(&self, _topic: &str) -> bool {
        false
    }

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
    /// Waits in this process that said they sleep on the topic (see
    /// [`Waiting`]); the transport is told when this leaves or reaches 0.
    waiters: Mutex<usize>,
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
    /// The transport delivers other processes' signals here (it started):
    /// only then does this process say it waits.
    delivering: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct Topics {
    map: HashMap<String, Arc<Topic>>,
    prune_at: usize,
}

/// A listener's hold on a topic ([`Wakes::listen`]): while it exists, this
/// process receives other processes' signals on the topic.
pub struct Listening {
    wakes: Wakes,
    name: String,
    topic: Arc<Topic>,
    _waiting: Option<Waiting>,
}

impl Listening {
    /// The topic listened to.
    pub fn topic(&self) -> &Arc<Topic> {
        &self.topic
    }
}

impl Clone for Listening {
    fn clone(&self) -> Listening {
        Listening {
            wakes: self.wakes.clone(),
            name: self.name.clone(),
            topic: self.topic.clone(),
            _waiting: self.wakes.listening(&self.name, &self.topic),
        }
    }
}

impl std::fmt::Debug for Listening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listening")
            .field("topic", &self.name)
            .finish_non_exhaustive()
    }
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

/// A wait (or a listener) in this process on a topic: the transport knows
/// this process waits while any such wait exists.
struct Waiting {
    inner: Arc<Inner>,
    name: String,
    topic: Arc<Topic>,
}

impl Waiting {
    fn new(inner: Arc<Inner>, name: &str, topic: Arc<Topic>) -> Waiting {
        {
            // Under the count's lock, so that the transport hears "waits"
            // and "no longer waits" in the order the count moved.
            let mut n = lock(&topic.waiters);
            *n += 1;
            if *n == 1 {
                inner.transport.waiting(name, true);
            }
        }
        Waiting {
            inner,
            name: name.to_string(),
            topic,
        }
    }
}

/// A wait's registration, however the wait ends (found, deadline, or
/// dropped: a guest's `poll` that returned for another pollable). A wake
/// that came in since the wait last looked at the store may have been
/// meant for work it did not take: it is passed on to another waiting
/// process.
struct Registered<'w> {
    wakes: &'w Wakes,
    name: &'w str,
    /// The topic wakes one waiter: an unused wake is passed on.
    one: bool,
    topic: Arc<Topic>,
    waiting: Option<Waiting>,
    /// The topic's signals when the wait last looked at the store.
    seen: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        if let Some(w) = self.waiting.take() {
            drop(w);
            if self.one && self.topic.seq() != self.seen {
                self.wakes.pass_on(self.name);
            }
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut n = lock(&self.topic.waiters);
        *n = n.saturating_sub(1);
        if *n == 0 {
            self.inner.transport.waiting(&self.name, false);
        }
    }
}

impl Wakes {
    /// Wakes carried to other processes by `transport`.
    pub fn new(transport: Arc<dyn WakeTransport>) -> Wakes {
        Wakes {
            inner: Arc::new(Inner {
                topics: Default::default(),
                transport,
                watching: Mutex::new(false),
                delivering: Default::default(),
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
    /// signals from now on.
    pub fn watched_topic(&self, name: &str) -> Arc<Topic> {
        self.ensure_watching();
        self.topic(name)
    }

    /// Listens to `name` until the returned value is dropped: this process
    /// receives other processes' signals on it, and says to the transport
    /// that it listens, so that those signals are sent here. A listener
    /// attaches through this, so that a signal sent after it attached is
    /// seen even before it first waits.
    pub fn listen(&self, name: &str) -> Listening {
        let topic = self.watched_topic(name);
        let waiting = self.listening(name, &topic);
        Listening {
            wakes: self.clone(),
            name: name.to_string(),
            topic,
            _waiting: waiting,
        }
    }

    fn listening(&self, name: &str, topic: &Arc<Topic>) -> Option<Waiting> {
        self.inner
            .delivering
            .load(Ordering::SeqCst)
            .then(|| Waiting::new(self.inner.clone(), name, topic.clone()))
    }

    /// Announces a committed change on `topic` to waiters in this and
    /// every other process — or, for a queue's topic, to the waiters of
    /// this process if it has any, else to one other waiting process (see
    /// the module's documentation).
    pub fn signal(&self, topic: &str) {
        let t = lock(&self.inner.topics).map.get(topic).cloned();
        if !topics::wakes_one(topic) {
            if let Some(t) = t {
                t.wake();
            }
            self.inner.transport.announce(topic);
            return;
        }
        if let Some(t) = t {
            t.wake();
            if *lock(&t.waiters) > 0 {
                return;
            }
        }
        self.inner.transport.announce_one(topic);
    }

    /// A waiter of a queue took what it was woken for and more is there:
    /// wakes one other waiting process, if any says it waits.
    pub fn pass_on(&self, topic: &str) {
        if self.inner.transport.others_waiting(topic) {
            self.inner.transport.announce_one(topic);
        }
    }

    /// Whether another process waits on `topic` (worth a look at the store
    /// before [`Wakes::pass_on`]).
    pub fn others_waiting(&self, topic: &str) -> bool {
        self.inner.transport.others_waiting(topic)
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
            Ok(()) => {
                *watching = true;
                self.inner.delivering.store(true, Ordering::SeqCst);
            }
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
        let one = topics::wakes_one(topic);
        // Said to the transport before the sleep, and checked again after
        // saying it: a signal sent before that went to another process, or
        // to none.
        let mut registered = Registered {
            wakes: self,
            name: topic,
            one,
            topic: t.clone(),
            waiting: None,
            seen: 0,
        };
        loop {
            let notified = t.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            registered.seen = t.seq();
            let retry_at = match check().await? {
                Check::Ready(v) => return Ok(Some(v)),
                Check::NotYet(at) => at,
            };
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            if registered.waiting.is_none() && self.inner.delivering.load(Ordering::SeqCst) {
                registered.waiting = Some(Waiting::new(self.inner.clone(), topic, t.clone()));
                continue;
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

    /// A transport that records what it is told.
    #[derive(Default)]
    struct Recorder {
        log: Mutex<Vec<String>>,
        others: AtomicBool,
    }

    impl WakeTransport for Recorder {
        fn announce(&self, topic: &str) {
            lock(&self.log).push(format!("all {topic}"));
        }
        fn announce_one(&self, topic: &str) {
            lock(&self.log).push(format!("one {topic}"));
        }
        fn waiting(&self, topic: &str, waiting: bool) {
            lock(&self.log).push(format!("waiting {topic} {waiting}"));
        }
        fn others_waiting(&self, _topic: &str) -> bool {
            self.others.load(Ordering::SeqCst)
        }
        fn start(&self, _sink: WakeSink) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn recorded(r: &Recorder) -> Vec<String> {
        std::mem::take(&mut *lock(&r.log))
    }

    #[tokio::test]
    async fn a_queue_signal_wakes_this_process_or_one_other_and_other_topics_wake_all() {
        let recorder = Arc::new(Recorder::default());
        let wakes = Wakes::new(recorder.clone());
        // Nobody waits here: one other process is told; a stream's signal
        // goes to all of them.
        wakes.signal("queue.q");
        wakes.signal("stream.s");
        assert_eq!(recorded(&recorder), ["one queue.q", "all stream.s"]);

        // A waiter that finds nothing says it waits, once, before sleeping.
        let flag = Arc::new(AtomicBool::new(false));
        let checks = Arc::new(AtomicU64::new(0));
        let waiter = {
            let (wakes, flag, checks) = (wakes.clone(), flag.clone(), checks.clone());
            tokio::spawn(async move {
                wakes
                    .wait_for("queue.q", None, || {
                        let (flag, checks) = (flag.clone(), checks.clone());
                        Box::pin(async move {
                            checks.fetch_add(1, Ordering::SeqCst);
                            Ok(if flag.load(Ordering::SeqCst) {
                                Check::Ready(())
                            } else {
                                Check::NotYet(None)
                            })
                        })
                    })
                    .await
            })
        };
        while checks.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        assert_eq!(recorded(&recorder), ["waiting queue.q true"]);

        // With a waiter here, the signal wakes it and tells no one else;
        // leaving, the waiter says it no longer waits.
        flag.store(true, Ordering::SeqCst);
        wakes.signal("queue.q");
        assert!(waiter.await.unwrap().unwrap().is_some());
        assert_eq!(recorded(&recorder), ["waiting queue.q false"]);

        // Passing a wake on tells one other process only if one waits.
        wakes.pass_on("queue.q");
        assert!(recorded(&recorder).is_empty());
        recorder.others.store(true, Ordering::SeqCst);
        wakes.pass_on("queue.q");
        assert_eq!(recorded(&recorder), ["one queue.q"]);

        // A stream's waiter that does not sleep says nothing; one that
        // sleeps says it waits, and a wake it leaves unused is not passed
        // on (a stream's signal reached every listener already).
        let none = wakes
            .wait_for("stream.s", Some(Instant::now()), || {
                Box::pin(async { Ok(Check::<()>::NotYet(None)) })
            })
            .await
            .unwrap();
        assert!(none.is_none());
        assert!(recorded(&recorder).is_empty());
        let deadline = Instant::now() + Duration::from_millis(50);
        let checks = Arc::new(AtomicU64::new(0));
        let none = {
            let (w, checks) = (wakes.clone(), checks.clone());
            wakes
                .wait_for("stream.s", Some(deadline), move || {
                    let (w, checks) = (w.clone(), checks.clone());
                    Box::pin(async move {
                        if checks.fetch_add(1, Ordering::SeqCst) == 1 {
                            w.signal("stream.s");
                            tokio::time::sleep_until(deadline).await;
                        }
                        Ok(Check::<()>::NotYet(None))
                    })
                })
                .await
                .unwrap()
        };
        assert!(none.is_none());
        assert_eq!(
            recorded(&recorder),
            [
                "waiting stream.s true",
                "all stream.s",
                "waiting stream.s false"
            ]
        );
    }

    #[tokio::test]
    async fn a_listener_says_it_listens_for_its_life_and_each_copy_counts() {
        let recorder = Arc::new(Recorder::default());
        let wakes = Wakes::new(recorder.clone());
        let first = wakes.listen("notify.c");
        assert_eq!(recorded(&recorder), ["waiting notify.c true"]);
        // A second listener (or a copy of the first, a pollable's) adds
        // nothing to say; the process listens until the last is gone.
        let second = first.clone();
        let third = wakes.listen("notify.c");
        drop(first);
        drop(third);
        assert!(recorded(&recorder).is_empty());
        // A signal from another process reaches the remaining one.
        let seen = second.topic().seq();
        wakes.signal("notify.c");
        assert!(second.topic().seq() > seen);
        drop(second);
        assert_eq!(
            recorded(&recorder),
            ["all notify.c", "waiting notify.c false"]
        );
    }

    /// Wakes whose transport says another process waits, and a count of
    /// checks.
    fn another_process_waits() -> (Arc<Recorder>, Wakes, Arc<AtomicU64>) {
        let recorder = Arc::new(Recorder::default());
        recorder.others.store(true, Ordering::SeqCst);
        let wakes = Wakes::new(recorder.clone());
        (recorder, wakes, Arc::new(AtomicU64::new(0)))
    }

    /// What a wait that registered, then ended with a wake it did not look
    /// at, tells the transport.
    const PASSED_ON: [&str; 3] = [
        "waiting queue.q true",
        "waiting queue.q false",
        "one queue.q",
    ];

    #[tokio::test]
    async fn a_waiter_leaving_with_a_wake_it_did_not_use_passes_it_on() {
        let (recorder, wakes, checks) = another_process_waits();
        // The first check runs at once, well before the deadline.
        let deadline = Instant::now() + Duration::from_secs(2);
        let got = {
            let (w, checks) = (wakes.clone(), checks.clone());
            wakes
                .wait_for("queue.q", Some(deadline), move || {
                    let (w, checks) = (w.clone(), checks.clone());
                    Box::pin(async move {
                        if checks.fetch_add(1, Ordering::SeqCst) == 1 {
                            // The second check, registered: a signal comes
                            // in, and the deadline passes before a third.
                            w.signal("queue.q");
                            tokio::time::sleep_until(deadline).await;
                        }
                        Ok(Check::<()>::NotYet(None))
                    })
                })
                .await
                .unwrap()
        };
        assert!(got.is_none());
        assert_eq!(recorded(&recorder), PASSED_ON);
    }

    #[tokio::test]
    async fn a_wait_dropped_with_a_wake_it_did_not_look_at_passes_it_on() {
        let (recorder, wakes, checks) = another_process_waits();
        let waiter = {
            let (w, checks) = (wakes.clone(), checks.clone());
            tokio::spawn(async move {
                let w2 = w.clone();
                w.wait_for("queue.q", None, move || {
                    let (w, checks) = (w2.clone(), checks.clone());
                    Box::pin(async move {
                        if checks.fetch_add(1, Ordering::SeqCst) == 1 {
                            // Registered: a signal comes in, and the wait
                            // is dropped (a guest's poll returned for
                            // something else) before it looks again.
                            w.signal("queue.q");
                            std::future::pending::<()>().await;
                        }
                        Ok(Check::<()>::NotYet(None))
                    })
                })
                .await
            })
        };
        while checks.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        assert_eq!(recorded(&recorder), PASSED_ON);
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
