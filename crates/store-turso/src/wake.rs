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
//!
//! **Queues wake one process.** A process about to sleep on a queue writes
//! its pid into a free 4-byte slot of `<data-dir>/wake/waiting/<topic>`
//! (under an `flock` of that file, slot 0 meaning free) and clears the slot
//! when it no longer waits. A signal on a queue reads that file — one
//! `pread` on a file kept open — and writes to one waiting process's own
//! folder, `<data-dir>/wake/inbox/<pid>/`, which only that process watches;
//! the waiters take turns. A pid whose process is gone is skipped and its
//! slot reused. Nothing is written when no other process waits.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use rustix::fs::{FlockOperation, flock};

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
                registry: Default::default(),
                turn: AtomicU64::new(0),
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
    /// The waiting registries read or written, by topic (at most
    /// [`MAX_WAKE_FILES`] open).
    registry: Mutex<HashMap<String, Arc<File>>>,
    /// Which waiting process a queue's next signal goes to.
    turn: AtomicU64,
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

    /// The waiting registry of `topic`, opened (created: at most one small
    /// file per queue, beside the queue's own store file) once.
    fn registry_of(&self, topic: &str) -> std::io::Result<Arc<File>> {
        let mut open = lock(&self.registry);
        if let Some(f) = open.get(topic) {
            return Ok(f.clone());
        }
        let dir = self.dir.join("waiting");
        std::fs::create_dir_all(&dir)?;
        let f = Arc::new(
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(dir.join(topic))?,
        );
        if open.len() >= MAX_WAKE_FILES {
            open.clear();
        }
        open.insert(topic.to_string(), f.clone());
        Ok(f)
    }

    /// The processes other than this one that wait on `topic`.
    fn waiters(&self, topic: &str) -> Vec<u32> {
        let Ok(f) = self.registry_of(topic) else {
            return Vec::new();
        };
        let me = std::process::id();
        let mut buf = [0u8; 4 * MAX_WAITING];
        let n = f.read_at(&mut buf, 0).unwrap_or(0);
        buf[..n - n % 4]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .filter(|pid| *pid != 0 && *pid != me)
            .collect()
    }

    /// Writes this process's pid into a free slot of `topic`'s registry
    /// (`waiting`), or clears its slot.
    fn register(&self, topic: &str, waiting: bool) -> std::io::Result<()> {
        let f = self.registry_of(topic)?;
        flock(&*f, FlockOperation::LockExclusive)?;
        let result = (|| {
            let me = std::process::id();
            let mut buf = [0u8; 4 * MAX_WAITING];
            let n = f.read_at(&mut buf, 0)?;
            let slots: Vec<u32> = buf[..n - n % 4]
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect();
            let mine = slots.iter().position(|p| *p == me);
            let slot = match (waiting, mine) {
                (true, Some(_)) | (false, None) => return Ok(()),
                (false, Some(i)) => {
                    f.write_at(&0u32.to_le_bytes(), 4 * i as u64)?;
                    return Ok(());
                }
                (true, None) => slots
                    .iter()
                    .position(|p| *p == 0 || !alive(*p))
                    .unwrap_or(slots.len()),
            };
            if slot >= MAX_WAITING {
                // Past the registry's size: this process is woken by its
                // fallback re-reads only.
                return Ok(());
            }
            f.write_at(&me.to_le_bytes(), 4 * slot as u64)?;
            Ok(())
        })();
        let _ = flock(&*f, FlockOperation::Unlock);
        result
    }

    /// Writes to the inbox of process `pid` (only it is woken); false when
    /// it has none (it never watched, or it is another process that got a
    /// gone waiter's pid). Not kept open: an inbox goes with its process,
    /// and a later process with the same pid gets a new one.
    fn wake_process(&self, pid: u32, topic: &str) -> bool {
        let seq = SEQ.fetch_add(1, Ordering::Relaxed).to_le_bytes();
        // One file per queue in an inbox, whoever signals: `@0` is never
        // the receiving process's own pid, so its watcher takes it.
        let path = self
            .dir
            .join("inbox")
            .join(pid.to_string())
            .join(format!("{topic}@0"));
        match std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
        {
            Ok(f) => f.write_at(&seq, 0).is_ok(),
            Err(_) => false,
        }
    }
}

/// Most processes a queue's registry holds at once.
const MAX_WAITING: usize = 1024;

/// Whether process `pid` exists.
fn alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

impl WakeFiles {
    /// Closes and removes the least recently used file once `max` are
    /// open.
    fn evict_over(&mut self, max: usize, dir: &Path) {
        if self.open.len() < max {
            return;
        }
        if let Some(oldest) = self
            .open
            .iter()
            .min_by_key(|(_, (_, used))| *used)
            .map(|(name, _)| name.clone())
        {
            self.open.remove(&oldest);
            let _ = std::fs::remove_file(dir.join(format!("{oldest}@{}", std::process::id())));
        }
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
        files.evict_over(MAX_WAKE_FILES, &self.dir);
        files.open.insert(topic.to_string(), (f, tick));
    }

    fn announce_one(&self, topic: &str) {
        let waiters = self.waiters(topic);
        if waiters.is_empty() {
            return;
        }
        // The waiters take turns; one whose process is gone is passed over.
        let turn = self.turn.fetch_add(1, Ordering::Relaxed) as usize;
        let _woken = (0..waiters.len())
            .map(|i| waiters[(turn + i) % waiters.len()])
            .any(|pid| alive(pid) && self.wake_process(pid, topic));
    }

    fn waiting(&self, topic: &str, waiting: bool) {
        if let Err(e) = self.register(topic, waiting) {
            tracing::warn!(target: "alk", "cannot write the waiting registry of {topic} (this process's waits fall back to re-reading): {e}");
        }
    }

    fn others_waiting(&self, topic: &str) -> bool {
        !self.waiters(topic).is_empty()
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
    // So are their inboxes.
    let inboxes = dir.join("inbox");
    for entry in std::fs::read_dir(&inboxes).into_iter().flatten().flatten() {
        let name = entry.file_name();
        if let Some(pid) = name.to_str()
            && pid.bytes().all(|b| b.is_ascii_digit())
            && !Path::new("/proc").join(pid).exists()
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    // This process's inbox: signals meant for it alone.
    let inbox = inboxes.join(std::process::id().to_string());
    std::fs::create_dir_all(&inbox)?;
    watcher::add(dir, sink.clone())?;
    watcher::add(&inbox, sink)
}

/// Without inotify, waiters rely on their fallback re-reads.
#[cfg(not(target_os = "linux"))]
fn watch(_dir: &Path, _sink: WakeSink) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(dir: &Path, topic: &str) -> Vec<u32> {
        std::fs::read(dir.join("wake/waiting").join(topic))
            .unwrap_or_default()
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn inbox(dir: &Path, pid: u32, topic: &str) -> Option<Vec<u8>> {
        let file = format!("wake/inbox/{pid}/{topic}@0");
        std::fs::read(dir.join(file)).ok()
    }

    #[test]
    fn a_queue_signal_wakes_one_waiting_process_and_they_take_turns() {
        let dir = tempfile::tempdir().unwrap();
        let (_, t) = transport_of(dir.path()).unwrap();
        // Nobody waits: no process is written to.
        t.announce_one("queue.q");
        assert!(!dir.path().join("wake/inbox").exists());
        assert!(!t.others_waiting("queue.q"));

        // Two other processes wait (as their watch and their waits leave
        // it: an inbox each, a slot each; slot 1 is free).
        let mut a = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let mut b = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let waiting = dir.path().join("wake/waiting");
        std::fs::create_dir_all(&waiting).unwrap();
        let registry: Vec<u8> = [a.id(), 0, b.id()]
            .iter()
            .flat_map(|p| p.to_le_bytes())
            .collect();
        std::fs::write(waiting.join("queue.q"), registry).unwrap();
        for pid in [a.id(), b.id()] {
            std::fs::create_dir_all(dir.path().join(format!("wake/inbox/{pid}"))).unwrap();
        }
        assert!(t.others_waiting("queue.q"));

        // Each signal goes to one of them, and the next to the other.
        t.announce_one("queue.q");
        let first = [a.id(), b.id()].map(|p| inbox(dir.path(), p, "queue.q").is_some());
        assert_eq!(first.iter().filter(|w| **w).count(), 1, "{first:?}");
        t.announce_one("queue.q");
        assert!(inbox(dir.path(), a.id(), "queue.q").is_some());
        assert!(inbox(dir.path(), b.id(), "queue.q").is_some());

        // A process that is gone is passed over: every signal goes to b.
        a.kill().unwrap();
        a.wait().unwrap();
        for _ in 0..3 {
            let (before_a, before_b) = (
                inbox(dir.path(), a.id(), "queue.q"),
                inbox(dir.path(), b.id(), "queue.q"),
            );
            t.announce_one("queue.q");
            assert_eq!(inbox(dir.path(), a.id(), "queue.q"), before_a);
            assert_ne!(inbox(dir.path(), b.id(), "queue.q"), before_b);
        }

        // So is a live process without an inbox (it never watched: say,
        // another program that got a gone waiter's pid).
        let mut c = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let registry: Vec<u8> = [c.id(), 0, b.id()]
            .iter()
            .flat_map(|p| p.to_le_bytes())
            .collect();
        std::fs::write(waiting.join("queue.q"), registry).unwrap();
        for _ in 0..3 {
            let before = inbox(dir.path(), b.id(), "queue.q");
            t.announce_one("queue.q");
            assert_ne!(inbox(dir.path(), b.id(), "queue.q"), before);
        }
        assert!(!dir.path().join(format!("wake/inbox/{}", c.id())).exists());
        c.kill().unwrap();
        c.wait().unwrap();

        // This process waits: it takes the first free slot (the gone
        // process's), is not one of the "others", and leaves its slot free.
        let me = std::process::id();
        t.waiting("queue.q", true);
        assert_eq!(slots(dir.path(), "queue.q"), vec![me, 0, b.id()]);
        t.waiting("queue.q", true);
        assert_eq!(slots(dir.path(), "queue.q"), vec![me, 0, b.id()]);
        b.kill().unwrap();
        b.wait().unwrap();
        assert!(
            t.others_waiting("queue.q"),
            "a registry entry counts until reused"
        );
        t.announce_one("queue.q");
        assert!(
            inbox(dir.path(), me, "queue.q").is_none(),
            "never to itself"
        );
        t.waiting("queue.q", false);
        assert_eq!(slots(dir.path(), "queue.q"), vec![0, 0, b.id()]);
        assert!(!t.others_waiting("queue.other"));
    }

    #[test]
    fn a_corrupt_waiting_registry_wakes_no_one_and_still_takes_registrations() {
        let dir = tempfile::tempdir().unwrap();
        let (_, t) = transport_of(dir.path()).unwrap();
        let waiting = dir.path().join("wake/waiting");
        std::fs::create_dir_all(&waiting).unwrap();
        // Not pids of live processes, an odd length, this process's own
        // pid, and more than the registry reads.
        let me = std::process::id();
        let mut junk: Vec<u8> = [u32::MAX, 1 << 30, me]
            .iter()
            .flat_map(|p| p.to_le_bytes())
            .collect();
        junk.extend([7u8, 7, 7]);
        junk.extend(vec![0xAB; 8 * MAX_WAITING]);
        std::fs::write(waiting.join("queue.j"), &junk).unwrap();
        // Nobody real waits: a signal writes no inbox and fails nothing.
        t.announce_one("queue.j");
        assert!(!dir.path().join("wake/inbox").exists());
        // Waiting and leaving work on it: this process's slot is found
        // again and freed; what is not a live pid is left alone.
        t.waiting("queue.j", true);
        t.waiting("queue.j", false);
        let after = slots(dir.path(), "queue.j");
        assert_eq!(&after[..3], &[u32::MAX, 1 << 30, 0]);
        // An entry that is no live pid costs a reader one look at the
        // store (`others_waiting`), never a wake sent somewhere.
        t.announce_one("queue.j");
        assert!(!dir.path().join("wake/inbox").exists());
    }

    #[test]
    fn waiting_registries_held_open_stay_bounded_whatever_queues_are_signalled() {
        let dir = tempfile::tempdir().unwrap();
        let (_, t) = transport_of(dir.path()).unwrap();
        for i in 0..500 {
            t.announce_one(&format!("queue.q{i}"));
            t.waiting(&format!("queue.w{i}"), true);
            t.waiting(&format!("queue.w{i}"), false);
            assert!(lock(&t.registry).len() <= MAX_WAKE_FILES);
        }
        // Every process that waited left its slot free.
        assert_eq!(slots(dir.path(), "queue.w499"), vec![0]);
    }

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
