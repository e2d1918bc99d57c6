//! `alk-powercut`: a FUSE file system that can lose power.
//!
//! The model is LazyFS's: what a program writes is kept apart from what it
//! synced, and a *cut* drops everything not synced — what a power failure
//! does to a disk behind a volatile cache. It is a passthrough over a
//! backing directory with two trees:
//!
//! - `live/` is what reads see: every write goes there at once;
//! - `durable/` is what survives a cut: a file's content reaches it only
//!   when that file is synced (`fsync`, `fdatasync`, or `msync` of a
//!   mapping): the byte ranges written since the last sync are copied
//!   `live/` → `durable/`, and the durable size becomes the live size.
//!
//! Metadata operations (create, mkdir, unlink, rmdir, rename, truncate,
//! chmod) are applied to both trees at once, like a file system that
//! journals its metadata synchronously: a cut never loses a directory entry
//! or a truncation, only file contents. (Whether a program fsyncs the
//! directories it creates entries in is counted, not enforced.)
//!
//! [`PowerCut::cut`] unmounts (the workload must have been killed first),
//! makes `durable/` the new `live/` and mounts again, so the kernel's page
//! cache starts empty too.
//!
//! What programs on the mount can rely on: read, write, pread/pwrite,
//! fsync/fdatasync, ftruncate, fallocate, O_CREAT/O_EXCL, rename,
//! shared writable `mmap` (files are served through the kernel page cache,
//! never with `direct_io`, and every open keeps that cache), and locks:
//! the file system does not implement lock operations, so the kernel
//! keeps `fcntl` (OFD and process-associated) and `flock` locks itself,
//! which excludes processes on this machine as on any local file system.
//!
//! Counters per file ([`Stats`]) say who synced what, how often.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BackgroundSession, Config, Errno, FileAttr, FileHandle, FileType, Filesystem,
    FopenFlags, Generation, INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, Request, TimeOrNow, WriteFlags,
};

/// How long the kernel may cache entries and attributes. Nothing but this
/// file system changes the backing trees while it is mounted.
const TTL: Duration = Duration::from_secs(1);

/// What happened to one file (by its path under the mount point).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileStats {
    /// `write` requests (including pages written back from a mapping).
    pub writes: u64,
    /// Bytes they carried.
    pub bytes_written: u64,
    /// `fsync` requests.
    pub fsyncs: u64,
    /// `fdatasync` requests.
    pub fdatasyncs: u64,
    /// Bytes copied to the durable tree by those syncs.
    pub bytes_synced: u64,
    /// `fallocate` requests.
    pub fallocates: u64,
    /// Truncations (`ftruncate`, `truncate`, `O_TRUNC`).
    pub truncates: u64,
    /// Written bytes that were not synced when a cut came: lost.
    pub bytes_dropped: u64,
}

/// Counters since the file system was first mounted (they survive cuts).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Per file.
    pub files: BTreeMap<String, FileStats>,
    /// `fsync` of a directory, per directory (`""` is the mount's root).
    pub dir_fsyncs: BTreeMap<String, u64>,
    /// Cuts so far.
    pub cuts: u64,
}

/// Disjoint, non-adjacent byte ranges `[start, end)`.
#[derive(Debug, Default, Clone)]
struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    fn add(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        let touching: Vec<(u64, u64)> = self
            .0
            .range(..=end)
            .rev()
            .take_while(|(_, re)| **re >= start)
            .map(|(a, b)| (*a, *b))
            .collect();
        for (a, b) in touching {
            self.0.remove(&a);
            s = s.min(a);
            e = e.max(b);
        }
        self.0.insert(s, e);
    }

    fn truncate(&mut self, size: u64) {
        let beyond: Vec<u64> = self.0.range(size..).map(|(a, _)| *a).collect();
        for a in beyond {
            self.0.remove(&a);
        }
        if let Some((_, e)) = self.0.iter_mut().next_back() {
            *e = (*e).min(size);
        }
        self.0.retain(|a, e| a < e);
    }

    fn total(&self, size: u64) -> u64 {
        self.0
            .iter()
            .map(|(a, e)| (*e).min(size).saturating_sub(*a))
            .sum()
    }
}

/// The state of one mount; `stats` carries over to the next.
struct Inner {
    live: PathBuf,
    durable: PathBuf,
    /// Inode → path relative to the trees' roots (the root is `""`).
    paths: HashMap<u64, PathBuf>,
    inos: HashMap<PathBuf, u64>,
    next_ino: u64,
    handles: HashMap<u64, (u64, Arc<File>)>,
    next_fh: u64,
    /// Per inode, what was written and not synced yet.
    dirty: HashMap<u64, Ranges>,
    stats: Stats,
}

impl Inner {
    fn new(live: PathBuf, durable: PathBuf, stats: Stats) -> Inner {
        let mut inner = Inner {
            live,
            durable,
            paths: HashMap::new(),
            inos: HashMap::new(),
            next_ino: 2,
            handles: HashMap::new(),
            next_fh: 1,
            dirty: HashMap::new(),
            stats,
        };
        inner.paths.insert(1, PathBuf::new());
        inner.inos.insert(PathBuf::new(), 1);
        inner
    }

    fn path_of(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        self.paths.get(&ino.0).cloned().ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.path_of(parent)?.join(name))
    }

    fn intern(&mut self, rel: &Path) -> u64 {
        if let Some(ino) = self.inos.get(rel) {
            return *ino;
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.inos.insert(rel.to_path_buf(), ino);
        self.paths.insert(ino, rel.to_path_buf());
        ino
    }

    /// Forgets the path of a removed entry (and of everything under it).
    fn orphan(&mut self, rel: &Path) {
        let gone: Vec<PathBuf> = self
            .inos
            .keys()
            .filter(|p| p.starts_with(rel))
            .cloned()
            .collect();
        for p in gone {
            if let Some(ino) = self.inos.remove(&p) {
                self.paths.remove(&ino);
                self.dirty.remove(&ino);
            }
        }
    }

    fn name(&self, ino: u64) -> String {
        self.paths
            .get(&ino)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|| "(unlinked)".into())
    }

    fn file_stats(&mut self, ino: u64) -> &mut FileStats {
        let name = self.name(ino);
        self.stats.files.entry(name).or_default()
    }

    /// The open file of `fh`, or the live file of `ino` opened now (pages
    /// of a mapping may be written back after the handle that made them
    /// was released).
    fn file_for(&self, ino: INodeNo, fh: Option<FileHandle>) -> Result<Arc<File>, Errno> {
        if let Some((_, f)) = fh.and_then(|fh| self.handles.get(&fh.0)) {
            return Ok(f.clone());
        }
        let p = self.live.join(self.path_of(ino)?);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .or_else(|_| File::open(&p))?;
        Ok(Arc::new(f))
    }

    /// Copies what `ino` wrote since its last sync to the durable tree;
    /// the bytes copied.
    fn sync(&mut self, ino: u64) -> std::io::Result<u64> {
        let ranges = self.dirty.remove(&ino).unwrap_or_default();
        let Some(rel) = self.paths.get(&ino).cloned() else {
            return Ok(0);
        };
        let live = File::open(self.live.join(&rel))?;
        let len = live.metadata()?.len();
        let durable = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.durable.join(&rel))?;
        let mut copied = 0;
        let mut buf = vec![0u8; 1 << 20];
        for (start, end) in ranges.0 {
            let mut at = start;
            let end = end.min(len);
            while at < end {
                let n = ((end - at) as usize).min(buf.len());
                live.read_exact_at(&mut buf[..n], at)?;
                durable.write_all_at(&buf[..n], at)?;
                at += n as u64;
                copied += n as u64;
            }
        }
        durable.set_len(len)?;
        Ok(copied)
    }

    fn attr(&self, ino: u64, m: &std::fs::Metadata) -> FileAttr {
        let time = |s: i64, ns: i64| {
            if s >= 0 {
                UNIX_EPOCH + Duration::new(s as u64, ns as u32)
            } else {
                UNIX_EPOCH
            }
        };
        FileAttr {
            ino: INodeNo(ino),
            size: m.len(),
            blocks: m.blocks(),
            atime: time(m.atime(), m.atime_nsec()),
            mtime: time(m.mtime(), m.mtime_nsec()),
            ctime: time(m.ctime(), m.ctime_nsec()),
            crtime: UNIX_EPOCH,
            kind: FileType::from_std(m.file_type()).unwrap_or(FileType::RegularFile),
            perm: (m.mode() & 0o7777) as u16,
            nlink: m.nlink() as u32,
            uid: m.uid(),
            gid: m.gid(),
            rdev: m.rdev() as u32,
            blksize: 4096,
            flags: 0,
        }
    }

    fn entry(&mut self, rel: &Path) -> Result<FileAttr, Errno> {
        let m = std::fs::symlink_metadata(self.live.join(rel))?;
        let ino = self.intern(rel);
        Ok(self.attr(ino, &m))
    }

    fn new_handle(&mut self, ino: u64, file: File) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, (ino, Arc::new(file)));
        fh
    }

    fn truncate(&mut self, ino: INodeNo, fh: Option<FileHandle>, size: u64) -> Result<(), Errno> {
        self.file_for(ino, fh)?.set_len(size)?;
        let rel = self.path_of(ino)?;
        if let Ok(d) = OpenOptions::new().write(true).open(self.durable.join(&rel)) {
            d.set_len(size)?;
        }
        if let Some(r) = self.dirty.get_mut(&ino.0) {
            r.truncate(size);
        }
        self.file_stats(ino.0).truncates += 1;
        Ok(())
    }
}

fn lock(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    inner.lock().unwrap_or_else(|p| p.into_inner())
}

fn errno(e: rustix::io::Errno) -> Errno {
    Errno::from_i32(e.raw_os_error())
}

/// The file system the kernel talks to.
struct PowerFs {
    inner: Arc<Mutex<Inner>>,
}

impl Filesystem for PowerFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut g = lock(&self.inner);
        match g.child(parent, name).and_then(|rel| g.entry(&rel)) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let g = lock(&self.inner);
        let meta = match fh.and_then(|fh| g.handles.get(&fh.0)) {
            Some((_, f)) => f.metadata(),
            None => match g.path_of(ino) {
                Ok(rel) => std::fs::symlink_metadata(g.live.join(rel)),
                Err(e) => return reply.error(e),
            },
        };
        match meta {
            Ok(m) => reply.attr(&TTL, &g.attr(ino.0, &m)),
            Err(e) => reply.error(e.into()),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut g = lock(&self.inner);
        let result = (|| -> Result<FileAttr, Errno> {
            let rel = g.path_of(ino)?;
            if let Some(size) = size {
                g.truncate(ino, fh, size)?;
            }
            if let Some(mode) = mode {
                let perm = std::fs::Permissions::from_mode(mode & 0o7777);
                std::fs::set_permissions(g.live.join(&rel), perm.clone())?;
                let _ = std::fs::set_permissions(g.durable.join(&rel), perm);
            }
            if atime.is_some() || mtime.is_some() {
                let at = |t: TimeOrNow| match t {
                    TimeOrNow::SpecificTime(t) => t,
                    TimeOrNow::Now => SystemTime::now(),
                };
                let mut times = std::fs::FileTimes::new();
                if let Some(t) = atime {
                    times = times.set_accessed(at(t));
                }
                if let Some(t) = mtime {
                    times = times.set_modified(at(t));
                }
                File::open(g.live.join(&rel))?.set_times(times)?;
            }
            let m = std::fs::symlink_metadata(g.live.join(&rel))?;
            Ok(g.attr(ino.0, &m))
        })();
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & 0o170000 != 0o100000 {
            // Regular files only: nothing on a data directory needs more.
            return reply.error(Errno::EPERM);
        }
        let mut g = lock(&self.inner);
        let result = (|| -> Result<FileAttr, Errno> {
            let rel = g.child(parent, name)?;
            let perm = mode & !umask & 0o7777;
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(perm)
                .open(g.live.join(&rel))?;
            let _ = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(perm)
                .open(g.durable.join(&rel));
            g.entry(&rel)
        })();
        match result {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mut g = lock(&self.inner);
        let result = (|| -> Result<FileAttr, Errno> {
            let rel = g.child(parent, name)?;
            let mut b = std::fs::DirBuilder::new();
            b.mode(mode & !umask & 0o7777);
            b.create(g.live.join(&rel))?;
            let _ = b.create(g.durable.join(&rel));
            g.entry(&rel)
        })();
        match result {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut g = lock(&self.inner);
        let result = (|| -> Result<(), Errno> {
            let rel = g.child(parent, name)?;
            std::fs::remove_file(g.live.join(&rel))?;
            let _ = std::fs::remove_file(g.durable.join(&rel));
            g.orphan(&rel);
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut g = lock(&self.inner);
        let result = (|| -> Result<(), Errno> {
            let rel = g.child(parent, name)?;
            std::fs::remove_dir(g.live.join(&rel))?;
            let _ = std::fs::remove_dir(g.durable.join(&rel));
            g.orphan(&rel);
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::EINVAL);
        }
        let mut g = lock(&self.inner);
        let result = (|| -> Result<(), Errno> {
            let from = g.child(parent, name)?;
            let to = g.child(newparent, newname)?;
            let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
            let rename = |a: &Path, b: &Path| -> Result<(), Errno> {
                let f = if noreplace {
                    rustix::fs::RenameFlags::NOREPLACE
                } else {
                    rustix::fs::RenameFlags::empty()
                };
                rustix::fs::renameat_with(rustix::fs::CWD, a, rustix::fs::CWD, b, f).map_err(errno)
            };
            rename(&g.live.join(&from), &g.live.join(&to))?;
            let _ = rename(&g.durable.join(&from), &g.durable.join(&to));
            g.orphan(&to);
            let moved: Vec<(PathBuf, u64)> = g
                .inos
                .iter()
                .filter(|(p, _)| p.starts_with(&from))
                .map(|(p, i)| (p.clone(), *i))
                .collect();
            for (p, ino) in moved {
                let np = to.join(p.strip_prefix(&from).unwrap_or(Path::new("")));
                g.inos.remove(&p);
                g.inos.insert(np.clone(), ino);
                g.paths.insert(ino, np);
            }
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let mut g = lock(&self.inner);
        match g.file_for(ino, None) {
            Ok(f) => {
                let f = Arc::try_unwrap(f).expect("a new file");
                let fh = g.new_handle(ino.0, f);
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE)
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let file = match lock(&self.inner).file_for(ino, Some(fh)) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let mut buf = vec![0u8; size as usize];
        let mut n = 0;
        while n < buf.len() {
            match file.read_at(&mut buf[n..], offset + n as u64) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return reply.error(e.into()),
            }
        }
        reply.data(&buf[..n])
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut g = lock(&self.inner);
        let result = (|| -> Result<(), Errno> {
            g.file_for(ino, Some(fh))?.write_all_at(data, offset)?;
            let end = offset + data.len() as u64;
            g.dirty.entry(ino.0).or_default().add(offset, end);
            let s = g.file_stats(ino.0);
            s.writes += 1;
            s.bytes_written += data.len() as u64;
            Ok(())
        })();
        match result {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok()
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        lock(&self.inner).handles.remove(&fh.0);
        reply.ok()
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut g = lock(&self.inner);
        match g.sync(ino.0) {
            Ok(copied) => {
                let s = g.file_stats(ino.0);
                if datasync {
                    s.fdatasyncs += 1;
                } else {
                    s.fsyncs += 1;
                }
                s.bytes_synced += copied;
                reply.ok()
            }
            Err(e) => reply.error(e.into()),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut g = lock(&self.inner);
        let rel = match g.path_of(ino) {
            Ok(r) => r,
            Err(e) => return reply.error(e),
        };
        let listing = match std::fs::read_dir(g.live.join(&rel)) {
            Ok(l) => l,
            Err(e) => return reply.error(e.into()),
        };
        let parent = rel
            .parent()
            .and_then(|p| g.inos.get(p).copied())
            .unwrap_or(1);
        let mut entries = vec![
            (ino.0, FileType::Directory, ".".into()),
            (parent, FileType::Directory, "..".into()),
        ];
        let mut names: Vec<(std::ffi::OsString, FileType)> = listing
            .flatten()
            .map(|e| {
                let kind = e
                    .file_type()
                    .ok()
                    .and_then(FileType::from_std)
                    .unwrap_or(FileType::RegularFile);
                (e.file_name(), kind)
            })
            .collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, kind) in names {
            let child = g.intern(&rel.join(&name));
            entries.push((child, kind, name));
        }
        for (i, (child, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), (i + 1) as u64, kind, &name) {
                break;
            }
        }
        reply.ok()
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut g = lock(&self.inner);
        let name = g.name(ino.0);
        *g.stats.dir_fsyncs.entry(name).or_default() += 1;
        reply.ok()
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let live = lock(&self.inner).live.clone();
        match rustix::fs::statvfs(&live) {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        reply.ok()
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut g = lock(&self.inner);
        let result = (|| -> Result<(FileAttr, u64), Errno> {
            let rel = g.child(parent, name)?;
            let perm = mode & !umask & 0o7777;
            let mut o = OpenOptions::new();
            o.read(true).write(true).mode(perm);
            if flags & rustix::fs::OFlags::EXCL.bits() as i32 != 0 {
                o.create_new(true);
            } else {
                o.create(true);
            }
            let file = o.open(g.live.join(&rel))?;
            let _ = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(perm)
                .open(g.durable.join(&rel));
            let attr = g.entry(&rel)?;
            let fh = g.new_handle(attr.ino.0, file);
            Ok((attr, fh))
        })();
        match result {
            Ok((attr, fh)) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(fh),
                FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let mut g = lock(&self.inner);
        let result = (|| -> Result<(), Errno> {
            let f = g.file_for(ino, Some(fh))?;
            let flags = rustix::fs::FallocateFlags::from_bits_retain(mode as u32);
            rustix::fs::fallocate(&*f, flags, offset, length).map_err(errno)?;
            // The range's new content (zeros, or a longer file) is data:
            // durable once synced, like a write.
            g.dirty
                .entry(ino.0)
                .or_default()
                .add(offset, offset + length);
            g.file_stats(ino.0).fallocates += 1;
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

/// A mounted power-cut file system. Dropping it unmounts (lazily, if a
/// process still holds a file open).
pub struct PowerCut {
    inner: Arc<Mutex<Inner>>,
    mountpoint: PathBuf,
    session: Option<BackgroundSession>,
}

impl PowerCut {
    /// Mounts at `mountpoint` (an empty directory) a file system kept in
    /// `backing` (made if missing; gets `live/` and `durable/`).
    ///
    /// Fails with a message naming what is missing when `/dev/fuse` cannot
    /// be opened or the mount is refused.
    pub fn mount(backing: &Path, mountpoint: &Path) -> Result<PowerCut, String> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .map_err(|e| {
                format!(
                    "power-loss tests need FUSE: cannot open /dev/fuse ({e}); \
                     they need the fuse device and the right to mount (root, \
                     or the fusermount3 binary from Debian's fuse3)"
                )
            })?;
        let live = backing.join("live");
        let durable = backing.join("durable");
        for d in [&live, &durable, &mountpoint.to_path_buf()] {
            std::fs::create_dir_all(d)
                .map_err(|e| format!("cannot create {}: {e}", d.display()))?;
        }
        let mut cut = PowerCut {
            inner: Arc::new(Mutex::new(Inner::new(live, durable, Stats::default()))),
            mountpoint: mountpoint.to_path_buf(),
            session: None,
        };
        cut.start()?;
        Ok(cut)
    }

    /// The mount point.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The backing tree reads see (what a cut replaces).
    pub fn live_dir(&self) -> PathBuf {
        lock(&self.inner).live.clone()
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        lock(&self.inner).stats.clone()
    }

    fn start(&mut self) -> Result<(), String> {
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("alk-powercut".into()),
            MountOption::Subtype("powercut".into()),
            MountOption::RW,
        ];
        config.n_threads = Some(4);
        let fs = PowerFs {
            inner: self.inner.clone(),
        };
        let session = fuser::spawn_mount(fs, &self.mountpoint, &config).map_err(|e| {
            format!(
                "cannot mount the power-cut FUSE file system at {}: {e} (needs /dev/fuse and \
                 the right to mount: root, or the fusermount3 binary from Debian's fuse3)",
                self.mountpoint.display()
            )
        })?;
        self.session = Some(session);
        Ok(())
    }

    fn stop(&mut self) -> Result<(), String> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let mut tries = 0;
        loop {
            match nix::mount::umount(&self.mountpoint) {
                Ok(()) => break,
                Err(nix::errno::Errno::EBUSY) if tries < 100 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(nix::errno::Errno::EINVAL) => break, // not mounted any more
                Err(e) => {
                    let _ = nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH);
                    let _ = session.join();
                    return Err(format!(
                        "cannot unmount {} ({e}): is a process still using it? (detached it)",
                        self.mountpoint.display()
                    ));
                }
            }
        }
        session
            .join()
            .map_err(|e| format!("the FUSE session ended with an error: {e}"))
    }

    /// A power cut: unmounts (every process using the mount must be dead),
    /// drops every write not synced, mounts again. Returns the bytes
    /// dropped, per file.
    pub fn cut(&mut self) -> Result<BTreeMap<String, u64>, String> {
        self.stop()?;
        let mut dropped = BTreeMap::new();
        {
            let mut g = lock(&self.inner);
            let dirty: Vec<(u64, Ranges)> = g.dirty.drain().collect();
            for (ino, ranges) in dirty {
                let Some(rel) = g.paths.get(&ino).cloned() else {
                    continue;
                };
                let size = std::fs::metadata(g.live.join(&rel))
                    .map(|m| m.len())
                    .unwrap_or(0);
                let lost = ranges.total(size);
                if lost > 0 {
                    let name = rel.to_string_lossy().into_owned();
                    *dropped.entry(name.clone()).or_insert(0) += lost;
                    g.stats.files.entry(name).or_default().bytes_dropped += lost;
                }
            }
            let (live, durable) = (g.live.clone(), g.durable.clone());
            std::fs::remove_dir_all(&live)
                .map_err(|e| format!("cannot remove {}: {e}", live.display()))?;
            copy_tree(&durable, &live).map_err(|e| format!("cannot copy the durable tree: {e}"))?;
            let stats = std::mem::take(&mut g.stats);
            *g = Inner::new(live, durable, stats);
            g.stats.cuts += 1;
        }
        self.start()?;
        Ok(dropped)
    }

    /// Unmounts; an error when a process still used the mount.
    pub fn unmount(mut self) -> Result<(), String> {
        self.stop()
    }
}

impl Drop for PowerCut {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("alk-powercut: {e}");
        }
    }
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    std::fs::set_permissions(to, std::fs::metadata(from)?.permissions())?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let kind = e.file_type()?;
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_file() {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Ranges;

    #[test]
    fn ranges_merge_and_truncate() {
        let mut r = Ranges::default();
        r.add(10, 20);
        r.add(30, 40);
        r.add(20, 30);
        assert_eq!(r.0.iter().collect::<Vec<_>>(), vec![(&10, &40)]);
        r.add(50, 60);
        r.add(5, 12);
        assert_eq!(r.total(u64::MAX), 35 + 10);
        r.truncate(55);
        assert_eq!(r.0.iter().collect::<Vec<_>>(), vec![(&5, &40), (&50, &55)]);
        r.truncate(3);
        assert!(r.0.is_empty());
        assert_eq!(r.total(0), 0);
    }
}
