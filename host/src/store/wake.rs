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
    topics: Mutex<HashMap<String, Arc<Topic>>>,
    files: Mutex<HashMap<String, File>>,
    watching: Mutex<bool>,
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
        lock(&self.inner.topics)
            .entry(name.to_string())
            .or_default()
            .clone()
    }

    /// Announces a committed change on `topic` to waiters in this and
    /// every other process. Best effort: a failure to write the wake file
    /// only delays other processes until their fallback re-read.
    pub fn signal(&self, topic: &str) {
        let t = self.topic(topic);
        t.wake();
        let mut files = lock(&self.inner.files);
        if !files.contains_key(topic) {
            let _ = std::fs::create_dir_all(&self.inner.dir);
            match std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(
                    self.inner
                        .dir
                        .join(format!("{topic}@{}", std::process::id())),
                ) {
                Ok(f) => {
                    files.insert(topic.to_string(), f);
                }
                Err(_) => return,
            }
        }
        if let Some(f) = files.get(topic) {
            let _ = f.write_at(&t.seq().to_le_bytes(), 0);
        }
    }

    /// Starts this process's watcher of `<data-dir>/wake/` (once).
    fn ensure_watching(&self) {
        let mut watching = lock(&self.inner.watching);
        if *watching {
            return;
        }
        *watching = watch(self.inner.clone()).is_ok();
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
        self.ensure_watching();
        let t = self.topic(topic);
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

/// Runs the inotify watcher thread of one data directory.
#[cfg(target_os = "linux")]
fn watch(inner: Arc<Inner>) -> std::io::Result<()> {
    use inotify::{Inotify, WatchMask};
    std::fs::create_dir_all(&inner.dir)?;
    let me = std::process::id().to_string();
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
    let mut inotify = Inotify::init()?;
    inotify
        .watches()
        .add(&inner.dir, WatchMask::MODIFY | WatchMask::CLOSE_WRITE)?;
    std::thread::Builder::new()
        .name("alk-wake".into())
        .spawn(move || {
            let mut buffer = [0u8; 4096];
            loop {
                let Ok(events) = inotify.read_events_blocking(&mut buffer) else {
                    // The fallback re-reads keep waiters going without us.
                    return;
                };
                let mut woken: Vec<String> = Vec::new();
                for event in events {
                    let Some((topic, pid)) = event
                        .name
                        .and_then(|n| n.to_str())
                        .and_then(|n| n.rsplit_once('@'))
                    else {
                        continue;
                    };
                    if pid != me && !woken.iter().any(|w| w == topic) {
                        woken.push(topic.to_string());
                    }
                }
                let topics = lock(&inner.topics);
                for name in woken {
                    if let Some(t) = topics.get(&name) {
                        t.wake();
                    }
                }
            }
        })?;
    Ok(())
}

/// Without inotify, waiters rely on their fallback re-reads.
#[cfg(not(target_os = "linux"))]
fn watch(_inner: Arc<Inner>) -> std::io::Result<()> {
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
}
