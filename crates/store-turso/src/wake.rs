//! Wakes between processes of one data directory: files and inotify.
//!
//! turso has no `data_version`, commit hook or update hook, so a process
//! cannot see another process's commits without being told. A signal writes
//! 8 bytes to `<data-dir>/wake/<topic>@<pid>` (one file per topic and
//! signalling process). Every process that waits on a data directory
//! watches `<data-dir>/wake/` with inotify — one inotify instance and one
//! thread per process, one watch per data directory — and the kernel
//! reports the file name; the watcher delivers the topic unless the pid is
//! its own. Files of processes that no longer exist are removed when a
//! watch starts.
//!
//! Bounded whatever names guests invent: a process keeps at most
//! [`MAX_WAKE_FILES`] wake files open per data directory; signalling one
//! more topic closes and removes the least recently signalled one (its next
//! signal creates it again).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use alk_store::wake::{WakeSink, WakeTransport, Wakes};
use alk_store::{AlkError, AlkResult};

/// Most wake files a process keeps open per data directory.
pub const MAX_WAKE_FILES: usize = 32;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The wakes of each data directory this process uses.
/// The wakes of each data directory this process uses, and their transport.
type Registry = HashMap<PathBuf, (Wakes, Arc<FileTransport>)>;

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Default::default);

/// The wakes of the data directory `data_dir`, shared by every context of
/// the process; creates the directory.
pub fn wakes_of(data_dir: &Path) -> AlkResult<Wakes> {
    Ok(transport_of(data_dir)?.0)
}

fn transport_of(data_dir: &Path) -> AlkResult<(Wakes, Arc<FileTransport>)> {
    std::fs::create_dir_all(data_dir).map_err(|e| {
        AlkError::Internal(format!(
            "cannot create the data directory {}: {e}",
            data_dir.display()
        ))
    })?;
    let key = data_dir
        .canonicalize()
        .unwrap_or_else(|_| data_dir.to_path_buf());
    Ok(lock(&REGISTRY)
        .entry(key.clone())
        .or_insert_with(|| {
            let transport = Arc::new(FileTransport {
                dir: key.join("wake"),
                files: Default::default(),
            });
            (Wakes::new(transport.clone()), transport)
        })
        .clone())
}

/// Wake files this process holds open for `data_dir` (for tests).
pub fn open_wake_files(data_dir: &Path) -> usize {
    transport_of(data_dir)
        .map(|(_, t)| lock(&t.files).open.len())
        .unwrap_or(0)
}

/// Signals written as files, delivered by inotify.
#[derive(Debug)]
struct FileTransport {
    dir: PathBuf,
    files: Mutex<WakeFiles>,
}

/// The open wake files of this process, least recently used first out.
#[derive(Debug, Default)]
struct WakeFiles {
    open: HashMap<String, (File, u64)>,
    tick: u64,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

impl FileTransport {
    fn file_of(&self, topic: &str) -> PathBuf {
        self.dir.join(format!("{topic}@{}", std::process::id()))
    }
}

impl WakeTransport for FileTransport {
    fn announce(&self, topic: &str) {
        // What is written does not matter (the write is the signal); a
        // counter makes each write a change.
        let seq = SEQ.fetch_add(1, Ordering::Relaxed).to_le_bytes();
        let mut files = lock(&self.files);
        files.tick += 1;
        let tick = files.tick;
        if let Some((f, used)) = files.open.get_mut(topic) {
            *used = tick;
            if let Err(e) = f.write_at(&seq, 0) {
                tracing::warn!(target: "alk", "cannot write the wake file of {topic} (other processes notice by re-reading instead): {e}");
            }
            return;
        }
        let _ = std::fs::create_dir_all(&self.dir);
        let f = match std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.file_of(topic))
        {
            Ok(f) => f,
            Err(e) => {
                // Other processes' waiters fall back to re-reading.
                tracing::warn!(target: "alk", "cannot open the wake file of {topic} (other processes notice by re-reading instead): {e}");
                return;
            }
        };
        let _ = f.write_at(&seq, 0);
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

    fn start(&self, sink: WakeSink) -> std::io::Result<()> {
        watch(&self.dir, sink)
    }
}

/// The process's one inotify watcher: one thread and one inotify instance
/// for every data directory, so neither grows with the number of data
/// directories an embedder uses.
#[cfg(target_os = "linux")]
mod watcher {
    use std::collections::HashMap;
    use std::sync::{Arc, LazyLock, Mutex};

    use alk_store::wake::WakeSink;
    use inotify::{EventMask, Inotify, WatchMask, Watches};

    use super::lock;

    pub(super) struct Watcher {
        watches: Watches,
        dirs: Arc<Mutex<HashMap<i32, WakeSink>>>,
    }

    static WATCHER: LazyLock<Mutex<Option<Watcher>>> = LazyLock::new(Default::default);

    /// Adds `dir` to the watcher, starting it if needed.
    pub(super) fn add(dir: &std::path::Path, sink: WakeSink) -> std::io::Result<()> {
        let mut guard = lock(&WATCHER);
        if guard.is_none() {
            *guard = Some(start()?);
        }
        let w = guard.as_mut().expect("started above");
        let wd = w
            .watches
            .add(dir, WatchMask::MODIFY | WatchMask::CLOSE_WRITE)?;
        lock(&w.dirs).insert(wd.get_watch_descriptor_id(), sink);
        Ok(())
    }

    fn start() -> std::io::Result<Watcher> {
        let mut inotify = Inotify::init()?;
        let dirs: Arc<Mutex<HashMap<i32, WakeSink>>> = Default::default();
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
                    let events = match inotify.read_events_blocking(&mut buffer) {
                        Ok(events) => events,
                        Err(e) => {
                            // The fallback re-reads keep waiters going.
                            tracing::warn!("the wake watcher stopped: {e}");
                            return;
                        }
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
                    let mut dirs = lock(&dirs);
                    dirs.retain(|_, sink| sink.is_alive());
                    if overflowed {
                        // Signals were lost: wake everyone (wakes are hints).
                        for sink in dirs.values() {
                            sink.deliver_all();
                        }
                        continue;
                    }
                    for (wd, topic) in woken {
                        if let Some(sink) = dirs.get(&wd) {
                            sink.deliver(&topic);
                        }
                    }
                }
            })?;
        Ok(watcher)
    }
}

/// Watches `dir` for other processes' signals.
#[cfg(target_os = "linux")]
fn watch(dir: &Path, sink: WakeSink) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    // Wake files of processes that have exited are of no further use.
    for entry in std::fs::read_dir(dir)?.flatten() {
        let name = entry.file_name();
        if let Some((_, pid)) = name.to_str().and_then(|n| n.rsplit_once('@'))
            && pid.bytes().all(|b| b.is_ascii_digit())
            && !Path::new("/proc").join(pid).exists()
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    watcher::add(dir, sink)
}

/// Without inotify, waiters rely on their fallback re-reads.
#[cfg(not(target_os = "linux"))]
fn watch(_dir: &Path, _sink: WakeSink) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_files_stay_bounded_whatever_topics_are_signalled() {
        let dir = tempfile::tempdir().unwrap();
        let wakes = wakes_of(dir.path()).unwrap();
        for i in 0..5_000 {
            wakes.signal(&format!("t{i}"));
        }
        assert!(open_wake_files(dir.path()) <= MAX_WAKE_FILES);
        let on_disk = std::fs::read_dir(dir.path().join("wake")).unwrap().count();
        assert!(
            on_disk <= MAX_WAKE_FILES,
            "{on_disk} wake files left on disk"
        );
        assert!(
            dir.path()
                .join(format!("wake/t4999@{}", std::process::id()))
                .exists()
        );
    }
}
