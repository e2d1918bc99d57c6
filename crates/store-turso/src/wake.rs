//! Wakes between processes of one data directory: files and inotify.
//!
//! turso has no `data_version`, commit hook or update hook, so a process
//! cannot see another process's commits without being told. A signal is a
//! write of 8 bytes to a file under `<data-dir>/wake/`, and only when some
//! other process waits or listens for it (below). Every process that waits
//! on a data directory watches `<data-dir>/wake/` and its own inbox,
//! `<data-dir>/wake/inbox/<pid>/`, with inotify — one inotify instance and
//! one thread per process — and the kernel reports the file name
//! `<topic>@<pid>`; the watcher delivers the topic unless the pid is its
//! own. Files and inboxes of processes that no longer exist are removed
//! when a watch starts.
//!
//! Bounded whatever names guests invent: a process keeps at most
//! [`MAX_WAKE_FILES`] wake files (`<topic>@<pid>`, written for every
//! process) open per data directory; signalling one more topic closes and
//! removes the least recently signalled one (its next signal creates it
//! again). A listener's inbox file goes when it stops listening.
//!
//! **Queues wake one process.** A process about to sleep on a queue writes
//! its pid into a free 4-byte slot of `<data-dir>/wake/waiting/<topic>`
//! (under an `flock` of that file, slot 0 meaning free) and clears the slot
//! when it no longer waits. A signal on a queue reads that file — one
//! `pread` on a file kept open — and writes to one waiting process's own
//! folder, `<data-dir>/wake/inbox/<pid>/`, which only that process watches;
//! the waiters take turns. A pid whose process is gone is skipped and its
//! slot reused. Nothing is written when no other process waits.
//!
//! **Other topics wake the processes that listen.** A process that waits on
//! or listens to a stream, a lock, a channel or the schedules writes an
//! 8-byte entry — its pid and the topic's 32-bit hash — into a free slot
//! of one of [`LISTENING_FILES`] files, `<data-dir>/wake/listening/<nn>`
//! (the topic's hash picks the file; under an `flock`), and clears it when
//! it stops. A signal reads that file (one `pread`) and writes to the inbox
//! of each other live process listed with the topic's hash; beyond
//! [`MAX_INBOXES`] of them it writes the topic's wake file, which every
//! watching process sees. Nobody listed, nothing is written. Two topics
//! with one hash only cost a process a wake it did not need. A listening
//! file holds [`MAX_LISTENING`] entries; a process that finds it full adds
//! to the count kept after them instead, and while that count is not zero
//! every signal of the file's topics writes the wake file: wider, never
//! lost.

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
                listening: Default::default(),
                editing: Default::default(),
                counted: Default::default(),
                turn: AtomicU64::new(0),
                me: std::process::id(),
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
    /// The listening files, by number, kept open (at most
    /// [`LISTENING_FILES`]).
    listening: Mutex<HashMap<u32, Arc<File>>>,
    /// Held around each change to a registry or a listening file: its
    /// `flock` keeps other processes out, not this process's other threads
    /// (they share the descriptor).
    editing: Mutex<()>,
    /// This process's listens that found their listening file full and
    /// were counted after its entries, by topic.
    counted: Mutex<HashMap<String, usize>>,
    /// Which waiting process a queue's next signal goes to.
    turn: AtomicU64,
    /// This process's id, read once (each signal would otherwise ask the
    /// kernel for it).
    me: u32,
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
        self.dir.join(format!("{topic}@{}", self.me))
    }

    /// The file `<folder>/<name>` under the wake folder, for reading and
    /// writing by every process (created if new, never truncated).
    fn open_shared(&self, folder: &str, name: &str) -> std::io::Result<Arc<File>> {
        let dir = self.dir.join(folder);
        std::fs::create_dir_all(&dir)?;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(dir.join(name))?;
        Ok(Arc::new(f))
    }

    /// Runs `change` on the shared file `f` with no other process's or
    /// thread's change in between: the `flock` keeps other processes out,
    /// the mutex this process's other threads (they share the descriptor).
    fn edit<T>(&self, f: &File, change: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
        let _editing = lock(&self.editing);
        flock(f, FlockOperation::LockExclusive)?;
        let result = change();
        let _ = flock(f, FlockOperation::Unlock);
        result
    }

    /// The waiting registry of `topic`, opened (created: at most one small
    /// file per queue, beside the queue's own store file) once.
    fn registry_of(&self, topic: &str) -> std::io::Result<Arc<File>> {
        let mut open = lock(&self.registry);
        if let Some(f) = open.get(topic) {
            return Ok(f.clone());
        }
        let f = self.open_shared("waiting", topic)?;
        if open.len() >= MAX_WAKE_FILES {
            open.clear();
        }
        open.insert(topic.to_string(), f.clone());
        Ok(f)
    }

    /// The listening file of `topic`, opened once.
    fn listening_file(&self, topic: &str) -> std::io::Result<Arc<File>> {
        let number = topic_hash(topic) % LISTENING_FILES;
        let mut open = lock(&self.listening);
        if let Some(f) = open.get(&number) {
            return Ok(f.clone());
        }
        let f = self.open_shared("listening", &format!("{number:02x}"))?;
        open.insert(number, f.clone());
        Ok(f)
    }

    /// The processes other than this one that listen to `topic` (or to a
    /// topic of the same hash), each once, and whether listeners were
    /// counted without an entry (then every process may be one).
    fn listeners(&self, topic: &str) -> (Vec<u32>, bool) {
        let Ok(f) = self.listening_file(topic) else {
            return (Vec::new(), true);
        };
        let (me, hash) = (self.me, topic_hash(topic));
        let buf = read_up_to(&f, 8 * (MAX_LISTENING + 1)).unwrap_or_default();
        let (entries, counted) = listening_contents(&buf);
        let mut pids: Vec<u32> = entries
            .filter(|(pid, h)| *h == hash && *pid != 0 && *pid != me)
            .map(|(pid, _)| pid)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        (pids, counted != 0)
    }

    /// Adds an entry (this process, `topic`'s hash) to the topic's
    /// listening file, or removes one. Entries are counted, not merged: two
    /// topics of one hash listened to make two entries. When the file is
    /// full the listen is counted after the entries instead. The last
    /// listen of a topic to go removes the topic's file from this process's
    /// inbox.
    fn listen(&self, topic: &str, listening: bool) -> std::io::Result<()> {
        let f = self.listening_file(topic)?;
        self.edit(&f, || {
            let (me, hash) = (self.me, topic_hash(topic));
            let buf = read_up_to(&f, 8 * (MAX_LISTENING + 1))?;
            let (entries, counted) = listening_contents(&buf);
            let entries: Vec<(u32, u32)> = entries.collect();
            let mut mine = lock(&self.counted);
            if !listening {
                if let Some(c) = mine.get_mut(topic) {
                    *c -= 1;
                    if *c == 0 {
                        mine.remove(topic);
                    }
                    let count = counted.saturating_sub(1).to_le_bytes();
                    f.write_at(&count, 8 * MAX_LISTENING as u64)?;
                    return Ok(());
                }
                let Some(i) = entries.iter().position(|e| *e == (me, hash)) else {
                    return Ok(());
                };
                f.write_at(&[0u8; 8], 8 * i as u64)?;
                if entries.iter().filter(|e| **e == (me, hash)).count() == 1 {
                    let inbox = self.dir.join("inbox").join(me.to_string());
                    let _ = std::fs::remove_file(inbox.join(format!("{topic}@0")));
                }
                return Ok(());
            }
            let slot = entries
                .iter()
                .position(|(pid, _)| *pid == 0 || (*pid != me && !alive(*pid)))
                .unwrap_or(entries.len());
            if slot >= MAX_LISTENING {
                // Full: counted, so that the topics of this file are
                // signalled to every process until the count is back to 0.
                tracing::warn!(target: "alk", "the listening file of {topic} is full ({MAX_LISTENING} listeners): its signals now go to every process");
                *mine.entry(topic.to_string()).or_default() += 1;
                let count = counted.saturating_add(1).to_le_bytes();
                f.write_at(&count, 8 * MAX_LISTENING as u64)?;
                return Ok(());
            }
            let mut entry = [0u8; 8];
            entry[..4].copy_from_slice(&me.to_le_bytes());
            entry[4..].copy_from_slice(&hash.to_le_bytes());
            f.write_at(&entry, 8 * slot as u64)?;
            Ok(())
        })
    }

    /// The processes other than this one that wait on `topic`.
    fn waiters(&self, topic: &str) -> Vec<u32> {
        let Ok(f) = self.registry_of(topic) else {
            return Vec::new();
        };
        let me = self.me;
        let buf = read_up_to(&f, 4 * MAX_WAITING).unwrap_or_default();
        buf[..buf.len() - buf.len() % 4]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .filter(|pid| *pid != 0 && *pid != me)
            .collect()
    }

    /// Writes this process's pid into a free slot of `topic`'s registry
    /// (`waiting`), or clears its slot.
    fn register(&self, topic: &str, waiting: bool) -> std::io::Result<()> {
        let f = self.registry_of(topic)?;
        self.edit(&f, || {
            let me = self.me;
            let buf = read_up_to(&f, 4 * MAX_WAITING)?;
            let slots: Vec<u32> = buf[..buf.len() - buf.len() % 4]
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
        })
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

impl FileTransport {
    /// Writes `topic`'s wake file: every process watching the data
    /// directory sees it.
    fn announce_all(&self, topic: &str) {
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
}

/// Most processes a queue's registry holds at once.
const MAX_WAITING: usize = 1024;

/// Files the listeners of the other topics are spread over.
pub const LISTENING_FILES: u32 = 64;

/// Most listening processes a signal writes to one by one; beyond, it
/// writes the topic's wake file, seen by every process.
pub const MAX_INBOXES: usize = 8;

/// Most entries a listening file holds.
pub const MAX_LISTENING: usize = 1024;

/// The 32-bit FNV-1a hash of a topic's name.
fn topic_hash(topic: &str) -> u32 {
    topic.bytes().fold(0x811c_9dc5, |h: u32, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The entries (pid, topic hash) of a listening file's contents, and the
/// count of listeners kept after them (0 when the file is shorter).
fn listening_contents(buf: &[u8]) -> (impl Iterator<Item = (u32, u32)> + '_, u64) {
    let entries = &buf[..buf.len().min(8 * MAX_LISTENING)];
    let counted = buf
        .get(8 * MAX_LISTENING..8 * MAX_LISTENING + 8)
        .map_or(0, |c| u64::from_le_bytes(c.try_into().expect("8 bytes")));
    let entries = entries[..entries.len() - entries.len() % 8]
        .chunks_exact(8)
        .map(|c| {
            (
                u32::from_le_bytes(c[..4].try_into().expect("4 bytes")),
                u32::from_le_bytes(c[4..].try_into().expect("4 bytes")),
            )
        });
    (entries, counted)
}

/// The first `max` bytes of `f` (fewer when it is shorter). Every signal
/// reads a registry or listening file, and most hold a few entries: the
/// first read takes a small buffer, and only a longer file gets one of
/// `max` bytes.
fn read_up_to(f: &File, max: usize) -> std::io::Result<Vec<u8>> {
    const FIRST: usize = 256;
    let mut buf = vec![0u8; FIRST.min(max)];
    let mut len = f.read_at(&mut buf, 0)?;
    if len < buf.len() {
        buf.truncate(len);
        return Ok(buf);
    }
    buf.resize(max, 0);
    while len < max {
        let n = f.read_at(&mut buf[len..], len as u64)?;
        if n == 0 {
            break;
        }
        len += n;
    }
    buf.truncate(len);
    Ok(buf)
}

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
        let (listeners, counted) = self.listeners(topic);
        let listeners: Vec<u32> = listeners.into_iter().filter(|pid| alive(*pid)).collect();
        if listeners.is_empty() && !counted {
            return;
        }
        if listeners.len() <= MAX_INBOXES && !counted {
            for pid in listeners {
                self.wake_process(pid, topic);
            }
            return;
        }
        self.announce_all(topic);
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
        let result = if alk_store::wake::topics::wakes_one(topic) {
            self.register(topic, waiting)
        } else {
            self.listen(topic, waiting)
        };
        if let Err(e) = result {
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

    #[test]
    fn a_registry_read_returns_the_file_up_to_its_limit_whatever_its_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        for len in [0, 1, 255, 256, 257, 4095, 4096, 4097, 9000] {
            let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            std::fs::write(&path, &bytes).unwrap();
            let f = File::open(&path).unwrap();
            assert_eq!(
                read_up_to(&f, 4096).unwrap(),
                bytes[..len.min(4096)],
                "{len}"
            );
            assert_eq!(read_up_to(&f, 100).unwrap(), bytes[..len.min(100)], "{len}");
        }
    }

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

    fn entries(dir: &Path, topic: &str) -> Vec<(u32, u32)> {
        let file = format!("wake/listening/{:02x}", topic_hash(topic) % LISTENING_FILES);
        let buf = std::fs::read(dir.join(file)).unwrap_or_default();
        listening_contents(&buf).0.collect()
    }

    fn sleeper() -> std::process::Child {
        std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap()
    }

    #[test]
    fn a_stream_signal_wakes_only_the_processes_that_listen() {
        let dir = tempfile::tempdir().unwrap();
        let (_, t) = transport_of(dir.path()).unwrap();
        let me = std::process::id();
        // Nobody listens: nothing is written, not even the wake file.
        t.announce("stream.s");
        assert!(!dir.path().join(format!("wake/stream.s@{me}")).exists());
        assert!(!dir.path().join("wake/inbox").exists());

        // This process listening is not another process: still nothing.
        t.waiting("stream.s", true);
        let hash = topic_hash("stream.s");
        assert_eq!(entries(dir.path(), "stream.s"), vec![(me, hash)]);
        t.announce("stream.s");
        assert!(!dir.path().join("wake/inbox").exists());

        // Another process listens (as its listener leaves it: an entry and
        // an inbox): the signal goes to its inbox only.
        let mut other = sleeper();
        let listening = dir.path().join("wake/listening");
        let file = listening.join(format!("{:02x}", hash % LISTENING_FILES));
        let mut bytes = std::fs::read(&file).unwrap();
        bytes.extend(other.id().to_le_bytes());
        bytes.extend(hash.to_le_bytes());
        std::fs::write(&file, &bytes).unwrap();
        std::fs::create_dir_all(dir.path().join(format!("wake/inbox/{}", other.id()))).unwrap();
        t.announce("stream.s");
        assert!(inbox(dir.path(), other.id(), "stream.s").is_some());
        assert!(!dir.path().join(format!("wake/stream.s@{me}")).exists());
        // A topic of another hash in the same file reaches nobody.
        let sibling = (0..)
            .map(|i| format!("lock.l{i}"))
            .find(|n| {
                topic_hash(n) % LISTENING_FILES == hash % LISTENING_FILES && topic_hash(n) != hash
            })
            .unwrap();
        t.announce(&sibling);
        assert!(inbox(dir.path(), other.id(), &sibling).is_none());

        // Once it is gone, its entry is passed over and its slot reused.
        other.kill().unwrap();
        other.wait().unwrap();
        t.announce("stream.s");
        t.waiting("stream.s", false);
        assert_eq!(
            entries(dir.path(), "stream.s"),
            vec![(0, 0), (other.id(), hash)]
        );
        t.waiting("stream.s", true);
        t.waiting("stream.s", true);
        assert_eq!(
            entries(dir.path(), "stream.s"),
            vec![(me, hash), (me, hash)]
        );
        // Entries are counted: two registrations need two removals; the
        // topic's file in this process's inbox goes with the last.
        let mine = dir.path().join(format!("wake/inbox/{me}"));
        std::fs::create_dir_all(&mine).unwrap();
        std::fs::write(mine.join("stream.s@0"), [1u8; 8]).unwrap();
        t.waiting("stream.s", false);
        assert_eq!(entries(dir.path(), "stream.s"), vec![(0, 0), (me, hash)]);
        assert!(mine.join("stream.s@0").exists());
        t.waiting("stream.s", false);
        assert_eq!(entries(dir.path(), "stream.s"), vec![(0, 0), (0, 0)]);
        assert!(!mine.join("stream.s@0").exists());
    }

    #[test]
    fn many_listening_processes_get_the_wake_file_and_the_files_stay_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let (_, t) = transport_of(dir.path()).unwrap();
        let hash = topic_hash("notify.c");
        let mut others: Vec<std::process::Child> = (0..=MAX_INBOXES).map(|_| sleeper()).collect();
        let bytes: Vec<u8> = others
            .iter()
            .flat_map(|c| [c.id().to_le_bytes(), hash.to_le_bytes()].concat())
            .collect();
        let listening = dir.path().join("wake/listening");
        std::fs::create_dir_all(&listening).unwrap();
        std::fs::write(
            listening.join(format!("{:02x}", hash % LISTENING_FILES)),
            bytes,
        )
        .unwrap();
        t.announce("notify.c");
        assert!(
            dir.path()
                .join(format!("wake/notify.c@{}", std::process::id()))
                .exists()
        );
        for c in &mut others {
            c.kill().unwrap();
            c.wait().unwrap();
        }
        // However many topics are listened to, the files are a fixed set,
        // and a corrupt one (an odd length, junk) takes registrations.
        std::fs::write(listening.join("00"), [7u8; 13]).unwrap();
        for i in 0..2_000 {
            let topic = format!("notify.n{i}");
            t.waiting(&topic, true);
            t.waiting(&topic, false);
        }
        assert!(std::fs::read_dir(&listening).unwrap().count() <= LISTENING_FILES as usize);
        assert!(lock(&t.listening).len() <= LISTENING_FILES as usize);
    }

    #[test]
    fn a_full_listening_file_sends_its_signals_to_every_process_until_it_has_room() {
        let dir = tempfile::tempdir().unwrap();
        let (_, t) = transport_of(dir.path()).unwrap();
        let me = std::process::id();
        // Another live process holds every entry of the file, for topics
        // of another hash.
        let mut other = sleeper();
        let hash = topic_hash("stream.s");
        let number = hash % LISTENING_FILES;
        let full: Vec<u8> = (0..MAX_LISTENING)
            .flat_map(|_| [other.id().to_le_bytes(), (!hash).to_le_bytes()].concat())
            .collect();
        let listening = dir.path().join("wake/listening");
        std::fs::create_dir_all(&listening).unwrap();
        let file = listening.join(format!("{number:02x}"));
        std::fs::write(&file, &full).unwrap();
        let wake_file = dir.path().join(format!("wake/stream.s@{me}"));
        t.announce("stream.s");
        assert!(!wake_file.exists(), "nobody listens to it yet");

        // This process listens twice: both are counted after the entries,
        // and the topic's signals (any topic of the file) go to everyone.
        t.waiting("stream.s", true);
        t.waiting("stream.s", true);
        let bytes = std::fs::read(&file).unwrap();
        assert_eq!(bytes[..8 * MAX_LISTENING], full[..]);
        assert_eq!(listening_contents(&bytes).1, 2);
        t.announce("stream.s");
        assert!(wake_file.exists());

        // Both leave: the count is back to 0, and signals reach no one.
        t.waiting("stream.s", false);
        assert_eq!(listening_contents(&std::fs::read(&file).unwrap()).1, 1);
        t.waiting("stream.s", false);
        assert_eq!(listening_contents(&std::fs::read(&file).unwrap()).1, 0);
        std::fs::remove_file(&wake_file).unwrap();
        lock(&t.files).open.clear();
        t.announce("stream.s");
        assert!(!wake_file.exists());
        assert_eq!(std::fs::read(&file).unwrap()[..8 * MAX_LISTENING], full[..]);

        // A count that no process will take back (one was killed) only
        // widens the signals: every process gets them.
        let mut bytes = full.clone();
        bytes.extend(u64::MAX.to_le_bytes());
        std::fs::write(&file, &bytes).unwrap();
        t.waiting("stream.s", true);
        t.announce("stream.s");
        assert!(wake_file.exists());
        t.waiting("stream.s", false);
        other.kill().unwrap();
        other.wait().unwrap();
    }

    #[test]
    fn threads_of_one_process_listening_at_once_lose_no_entry() {
        let dir = tempfile::tempdir().unwrap();
        let (_, t) = transport_of(dir.path()).unwrap();
        // Topics of one file, so that every change edits the same file.
        let number = topic_hash("stream.t") % LISTENING_FILES;
        let topics: Vec<String> = (0..)
            .map(|i| format!("stream.t{i}"))
            .filter(|n| topic_hash(n) % LISTENING_FILES == number)
            .take(8)
            .collect();
        std::thread::scope(|s| {
            for topic in &topics {
                let t = t.clone();
                s.spawn(move || {
                    for _ in 0..50 {
                        t.waiting(topic, true);
                    }
                });
            }
        });
        let me = std::process::id();
        let listed = entries(dir.path(), &topics[0])
            .into_iter()
            .filter(|(pid, _)| *pid == me)
            .count();
        assert_eq!(listed, 8 * 50);
        std::thread::scope(|s| {
            for topic in &topics {
                let t = t.clone();
                s.spawn(move || {
                    for _ in 0..50 {
                        t.waiting(topic, false);
                    }
                });
            }
        });
        assert!(
            entries(dir.path(), &topics[0])
                .iter()
                .all(|(pid, _)| *pid == 0)
        );
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
        let files = || {
            std::fs::read_dir(dir.path().join("wake"))
                .unwrap()
                .flatten()
                .filter(|e| e.file_type().unwrap().is_file())
                .count()
        };
        // Nobody listens: signals write no wake file at all.
        for i in 0..100 {
            wakes.signal(&format!("t{i}"));
        }
        assert_eq!(files(), 0);
        // Written for everyone (many listeners), they stay bounded.
        let (_, t) = transport_of(dir.path()).unwrap();
        for i in 0..5_000 {
            t.announce_all(&format!("t{i}"));
        }
        assert!(open_wake_files(dir.path()) <= MAX_WAKE_FILES);
        let on_disk = files();
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
