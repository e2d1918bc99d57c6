//! Wakes: waiting for another guest's (or another process's) commit without
//! polling the store.
//!
//! turso has no `data_version`, commit hook or update hook, so changes are
//! announced explicitly. Every change a waiter may care about **signals a
//! topic** (`queue.<name>`, `stream.<name>`, `lock.<name>`,
//! `notify.<channel>`) after it commits:
//!
//! - in this process, the topic's [`tokio::sync::Notify`] wakes waiting
//!   tasks directly;
//! - for other processes, 8 bytes are written to the file
//!   `<data-dir>/wake/<topic>@<pid>` (one file per topic and signalling
//!   process). Every process that waits on a data directory runs one thread
//!   blocked on an inotify watch of `<data-dir>/wake/`; the write makes the
//!   kernel report the file name, and the thread wakes that topic's waiters
//!   — unless the pid is its own: a process's own signals already woke its
//!   waiters, and an echo arriving later would look like a new signal to a
//!   listener that attached in between. Files of processes that no longer
//!   exist are removed when a watcher starts.
//!
//! Wakes are hints. A woken waiter re-reads the store and goes back to
//! waiting if there is nothing for it. Every wait also re-reads at least
//! every [`FALLBACK`], so a lost wake (a full inotify queue, a file system
//! without inotify) delays a waiter, never hangs it. Waiting holds no
//! connection and no transaction, and sleeps: it costs no CPU.

use std::collections::HashMap;
use std::fs::File;
use std::future::Future;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::AlkResult;

/// The longest a waiter sleeps before re-reading the store on its own.
pub const FALLBACK: Duration = Duration::from_millis(250);

/// Most wake files a process keeps open per data directory. Signalling a
/// topic beyond them opens its file; the least recently signalled one is
/// closed and removed (the next signal on it creates it again).
pub const MAX_WAKE_FILES: usize = 32;

/// Topics known to a process are pruned of those nobody waits on or
/// listens to once there are more than this many.
const PRUNE_TOPICS_OVER: usize = 1024;

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

    fn wake(&self) {
        self.seq.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }
}

/// The wakes of one data directory, shared by every context in the process.
#[derive(Debug, Clone)]
pub struct Wakes {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    topics: Mutex<Topics>,
    files: Mutex<WakeFiles>,
    watching: Mutex<bool>,
}

#[derive(Debug, Default)]
struct Topics {
    map: HashMap<String, Arc<Topic>>,
    prune_at: usize,
}

/// The open wake files of this process, least recently used first out.
#[derive(Debug, Default)]
struct WakeFiles {
    open: HashMap<String, (File, u64)>,
    tick: u64,
}

static REGISTRY: LazyLock<Mutex<HashMap<PathBuf, Wakes>>> = LazyLock::new(Default::default);

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
    /// The wakes of the data directory `data_dir` (which must exist).
    pub fn for_data_dir(data_dir: &Path) -> Wakes {
        let key = data_dir
            .canonicalize()
            .unwrap_or_else(|_| data_dir.to_path_buf());
        lock(&REGISTRY)
            .entry(key.clone())
            .or_insert_with(|| Wakes {
                inner: Arc::new(Inner {
                    dir: key.join("wake"),
                    topics: Default::default(),
                    files: Default::default(),
                    watching: Mutex::new(false),
                }),
            })
            .clone()
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

    /// The topic `name`, with this process watching for other processes'
    /// signals from now on. A listener attaches through this, so that a
    /// signal sent after it attached is seen even before it first waits.
    pub fn watched_topic(&self, name: &str) -> Arc<Topic> {
        self.ensure_watching();
        self.topic(name)
    }

    /// Announces a committed change on `topic` to waiters in this and
    /// every other process. Best effort: a failure to write the wake file
    /// only delays other processes until their fallback re-read.
    pub fn signal(&self, topic: &str) {
        let t = lock(&self.inner.topics).map.get(topic).cloned();
        let seq = match t {
            Some(t) => {
                t.wake();
                t.seq()
            }
            None => 1,
        };
        let mut files = lock(&self.inner.files);
        files.tick += 1;
        let tick = files.tick;
        if let Some((f, used)) = files.open.get_mut(topic) {
            *used = tick;
            let _ = f.write_at(&seq.to_le_bytes(), 0);
            return;
        }
        let path = self.file_of(topic);
        let _ = std::fs::create_dir_all(&self.inner.dir);
        let Ok(f) = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
        else {
            return;
        };
        let _ = f.write_at(&seq.to_le_bytes(), 0);
        if files.open.len() >= MAX_WAKE_FILES
            && let Some(oldest) = files
                .open
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(name, _)| name.clone())
        {
            files.open.remove(&oldest);
            let _ = std::fs::remove_file(self.file_of(&oldest));
        }
        files.open.insert(topic.to_string(), (f, tick));
    }

    fn file_of(&self, topic: &str) -> PathBuf {
        self.inner
            .dir
            .join(format!("{topic}@{}", std::process::id()))
    }

    /// Wake files this process holds open (for tests).
    pub fn open_files(&self) -> usize {
        lock(&self.inner.files).open.len()
    }

    /// Topics this process knows (for tests).
    pub fn known_topics(&self) -> usize {
        lock(&self.inner.topics).map.len()
    }

    /// Starts watching `<data-dir>/wake/` in this process (once).
    fn ensure_watching(&self) {
        let mut watching = lock(&self.inner.watching);
        if *watching {
            return;
        }
        *watching = watch(&self.inner).is_ok();
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

/// The process's one inotify watcher: one thread and one inotify instance
/// for every data directory, so neither grows with the number of data
/// directories an embedder uses.
#[cfg(target_os = "linux")]
mod watcher {
    use std::collections::HashMap;
    use std::sync::{Arc, LazyLock, Mutex, Weak};

    use inotify::{EventMask, Inotify, WatchMask, Watches};

    use super::{Inner, lock};

    pub(super) struct Watcher {
        watches: Watches,
        dirs: Arc<Mutex<HashMap<i32, Weak<Inner>>>>,
    }

    static WATCHER: LazyLock<Mutex<Option<Watcher>>> = LazyLock::new(Default::default);

    /// Adds `inner`'s wake directory to the watcher, starting it if needed.
    pub(super) fn add(inner: &Arc<Inner>) -> std::io::Result<()> {
        let mut guard = lock(&WATCHER);
        if guard.is_none() {
            *guard = Some(start()?);
        }
        let w = guard.as_mut().expect("started above");
        let wd = w
            .watches
            .add(&inner.dir, WatchMask::MODIFY | WatchMask::CLOSE_WRITE)?;
        lock(&w.dirs).insert(wd.get_watch_descriptor_id(), Arc::downgrade(inner));
        Ok(())
    }

    fn start() -> std::io::Result<Watcher> {
        let mut inotify = Inotify::init()?;
        let dirs: Arc<Mutex<HashMap<i32, Weak<Inner>>>> = Default::default();
        let watcher = Watcher {
            watches: inotify.watches(),
            dirs: dirs.clone(),
        };
        let me = std::process::id().to_string();
        std::thread::Builder::new()
            .name("alk-wake".into())
            .spawn(move || {
                let mut buffer = [0u8; 16 * 1024];
                loop {
                    let Ok(events) = inotify.read_events_blocking(&mut buffer) else {
                        // The fallback re-reads keep waiters going without us.
                        return;
                    };
                    let mut woken: Vec<(i32, String)> = Vec::new();
                    let mut overflowed = false;
                    for event in events {
                        if event.mask.contains(EventMask::Q_OVERFLOW) {
                            overflowed = true;
                            continue;
                        }
                        let Some((topic, pid)) = event
                            .name
                            .and_then(|n| n.to_str())
                            .and_then(|n| n.rsplit_once('@'))
                        else {
                            continue;
                        };
                        let wd = event.wd.get_watch_descriptor_id();
                        if pid != me && !woken.iter().any(|(d, t)| *d == wd && t == topic) {
                            woken.push((wd, topic.to_string()));
                        }
                    }
                    let dirs = lock(&dirs);
                    if overflowed {
                        // Signals were lost: wake everyone (wakes are hints).
                        for inner in dirs.values().filter_map(Weak::upgrade) {
                            for t in lock(&inner.topics).map.values() {
                                t.wake();
                            }
                        }
                        continue;
                    }
                    for (wd, name) in woken {
                        if let Some(inner) = dirs.get(&wd).and_then(Weak::upgrade)
                            && let Some(t) = lock(&inner.topics).map.get(&name)
                        {
                            t.wake();
                        }
                    }
                }
            })?;
        Ok(watcher)
    }
}

/// Watches `<data-dir>/wake/` for other processes' signals.
#[cfg(target_os = "linux")]
fn watch(inner: &Arc<Inner>) -> std::io::Result<()> {
    std::fs::create_dir_all(&inner.dir)?;
    // Wake files of processes that have exited are of no further use.
    for entry in std::fs::read_dir(&inner.dir)?.flatten() {
        let name = entry.file_name();
        if let Some((_, pid)) = name.to_str().and_then(|n| n.rsplit_once('@'))
            && pid.bytes().all(|b| b.is_ascii_digit())
            && !Path::new("/proc").join(pid).exists()
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    watcher::add(inner)
}

/// Without inotify, waiters rely on their fallback re-reads.
#[cfg(not(target_os = "linux"))]
fn watch(_inner: &Arc<Inner>) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_signal_wakes_a_waiter_and_a_deadline_is_a_value() {
        let dir = tempfile::tempdir().unwrap();
        let wakes = Wakes::for_data_dir(dir.path());
        let flag = Arc::new(AtomicU64::new(0));
        let f = flag.clone();
        let waiter = {
            let wakes = wakes.clone();
            tokio::spawn(async move {
                wakes
                    .wait_for("t", Some(Instant::now() + Duration::from_secs(30)), || {
                        let f = f.clone();
                        Box::pin(async move {
                            Ok(if f.load(Ordering::SeqCst) == 1 {
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
        flag.store(1, Ordering::SeqCst);
        wakes.signal("t");
        assert!(waiter.await.unwrap().unwrap().is_some());
        assert!(
            dir.path()
                .join(format!("wake/t@{}", std::process::id()))
                .exists()
        );
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

    #[tokio::test]
    async fn wake_files_and_topics_stay_bounded_whatever_names_are_signalled() {
        let dir = tempfile::tempdir().unwrap();
        let wakes = Wakes::for_data_dir(dir.path());
        let held = wakes.watched_topic("held");
        for i in 0..5_000 {
            let name = format!("t{i}");
            let _ = wakes.topic(&name);
            wakes.signal(&name);
        }
        assert!(wakes.open_files() <= MAX_WAKE_FILES, "{}", wakes.open_files());
        let on_disk = std::fs::read_dir(dir.path().join("wake")).unwrap().count();
        assert!(on_disk <= MAX_WAKE_FILES, "{on_disk} wake files left on disk");
        assert!(wakes.known_topics() <= 2 * PRUNE_TOPICS_OVER, "{}", wakes.known_topics());
        // A topic someone holds survives pruning, and still wakes.
        wakes.signal("held");
        assert!(held.seq() >= 1);
        assert!(Arc::ptr_eq(&held, &wakes.topic("held")));
    }
}
