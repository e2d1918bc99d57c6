//! Reading a store file's format marker without opening it in the engine.
//!
//! Opening a file with the engine changes it: turso switches a
//! rollback-journal database to WAL (bytes 18–19 of its header) and creates
//! `-wal` and `-tshm` siblings, even if the caller only reads. So before a
//! file is handed to the engine, this module reads it with plain `pread`s on
//! a read-only descriptor — it cannot change the file — and says what it
//! holds: nothing yet, an alk format marker, or something else.
//!
//! It reads the SQLite file format directly: the 100-byte header, the
//! `sqlite_schema` table b-tree and the `meta` table b-tree, with the pages
//! of committed transactions in the `-wal` file laid over the main file
//! (a live store's newest pages, its schema included, may not have been
//! copied back yet). Only frames whose salts and running checksum are valid
//! count, up to the last commit frame, as SQLite itself reads a WAL. Every
//! offset read from the file is bounds-checked: a hostile file yields an
//! error, never a panic or an unbounded read.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// What a store file holds, as read without the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Contents {
    /// Missing, empty, or a database with no tables: nothing to protect.
    Fresh,
    /// A `meta` table whose `format` row holds this marker.
    Marker(String),
    /// A `meta` table without a (text) `format` row, or no `meta` table:
    /// another program's database. Its table names.
    Foreign(Vec<String>),
    /// Not an SQLite database at all; why.
    NotADatabase(String),
}

/// Pages read at most while walking one b-tree (a hostile file cannot make
/// the walk endless).
const MAX_PAGES_WALKED: usize = 10_000;

/// Reads what the file at `path` (and its `-wal`, when present) holds.
/// I/O errors other than "not found" are returned as they are.
pub fn inspect(path: &Path) -> std::io::Result<Contents> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Contents::Fresh),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    let wal = open_sibling(path, "-wal")?;
    if len == 0 && wal.is_none() {
        return Ok(Contents::Fresh);
    }
    let mut db = match Db::new(file, len) {
        Ok(db) => db,
        // An empty main file with a WAL: a store made by the engine whose
        // first pages are still only in the WAL.
        Err(_) if len == 0 => Db::empty(),
        Err(why) => return Ok(Contents::NotADatabase(why)),
    };
    // The main file alone usually answers (a store's schema and marker are
    // written once, at creation); the WAL is read when it does not.
    let first = db.contents();
    if matches!(first, Ok(Contents::Marker(_))) || wal.is_none() {
        return Ok(first.unwrap_or_else(Contents::NotADatabase));
    }
    if let Some(wal) = wal {
        match read_wal(&wal, db.page_size) {
            Ok(Some(overlay)) => {
                if db.page_size == 0 {
                    db.page_size = overlay.page_size;
                    db.usable = overlay.page_size;
                }
                if overlay.page_size == db.page_size {
                    db.overlay = overlay.pages;
                }
            }
            Ok(None) => {}
            Err(why) => return Ok(Contents::NotADatabase(why)),
        }
    }
    if db.page_size == 0 {
        return Ok(Contents::Fresh);
    }
    Ok(db.contents().unwrap_or_else(Contents::NotADatabase))
}

fn open_sibling(path: &Path, suffix: &str) -> std::io::Result<Option<File>> {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    match File::open(&name) {
        Ok(f) if f.metadata()?.len() > 0 => Ok(Some(f)),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A database file with an optional WAL overlay.
struct Db {
    file: Option<File>,
    len: u64,
    page_size: usize,
    usable: usize,
    utf16: Option<bool>,
    overlay: HashMap<u32, Vec<u8>>,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

impl Db {
    fn empty() -> Db {
        Db {
            file: None,
            len: 0,
            page_size: 0,
            usable: 0,
            utf16: None,
            overlay: HashMap::new(),
        }
    }

    fn new(file: File, len: u64) -> Result<Db, String> {
        let mut header = [0u8; 100];
        if len < 100 {
            return Err(format!(
                "the file is {len} bytes, shorter than an SQLite header"
            ));
        }
        file.read_exact_at(&mut header, 0)
            .map_err(|e| format!("cannot read the header: {e}"))?;
        if &header[..16] != b"SQLite format 3\0" {
            return Err("the file does not start with the SQLite header".into());
        }
        let (page_size, usable) = sizes(&header)?;
        Ok(Db {
            file: Some(file),
            len,
            page_size,
            usable,
            utf16: encoding(&header),
            overlay: HashMap::new(),
        })
    }

    fn page(&self, n: u32) -> Result<Vec<u8>, String> {
        if n == 0 {
            return Err("page number 0".into());
        }
        if let Some(p) = self.overlay.get(&n) {
            return Ok(p.clone());
        }
        let at = (n as u64 - 1) * self.page_size as u64;
        if at + self.page_size as u64 > self.len {
            return Err(format!("page {n} is beyond the end of the file"));
        }
        let file = self.file.as_ref().ok_or("the main file is empty")?;
        let mut buf = vec![0u8; self.page_size];
        file.read_exact_at(&mut buf, at)
            .map_err(|e| format!("cannot read page {n}: {e}"))?;
        Ok(buf)
    }

    /// The header in force: page 1 of the overlay or of the file.
    fn header_encoding(&mut self) -> Result<bool, String> {
        if let Some(u) = self.utf16 {
            return Ok(u);
        }
        let p1 = self.page(1)?;
        let u = encoding(&p1).unwrap_or(false);
        self.utf16 = Some(u);
        Ok(u)
    }

    fn contents(&mut self) -> Result<Contents, String> {
        if self.page_size == 0 || (self.len == 0 && !self.overlay.contains_key(&1)) {
            return Ok(Contents::Fresh);
        }
        let utf16 = self.header_encoding()?;
        let mut tables = Vec::new();
        let mut meta_root = None;
        self.walk(1, &mut |rec| {
            let cols = record(rec, utf16)?;
            let (Some(Val::Text(kind)), Some(Val::Text(name))) = (cols.first(), cols.get(1)) else {
                return Ok(());
            };
            if kind == "table" {
                if name == "meta"
                    && let Some(Val::Int(root)) = cols.get(3)
                {
                    meta_root = u32::try_from(*root).ok();
                }
                tables.push(name.clone());
            }
            Ok(())
        })?;
        if tables.is_empty() {
            return Ok(Contents::Fresh);
        }
        let Some(root) = meta_root else {
            return Ok(Contents::Foreign(tables));
        };
        let mut marker = None;
        self.walk(root, &mut |rec| {
            let cols = record(rec, utf16)?;
            if let (Some(Val::Text(key)), Some(Val::Text(value))) = (cols.first(), cols.get(1))
                && key == "format"
            {
                marker = Some(value.clone());
            }
            Ok(())
        })?;
        Ok(match marker {
            Some(m) => Contents::Marker(m),
            None => Contents::Foreign(tables),
        })
    }

    /// Calls `row` with the payload of every row of the table b-tree rooted
    /// at `root`.
    fn walk(
        &self,
        root: u32,
        row: &mut dyn FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut stack = vec![root];
        let mut seen = 0usize;
        while let Some(n) = stack.pop() {
            seen += 1;
            if seen > MAX_PAGES_WALKED {
                return Err("the b-tree is larger than a store's schema can be".into());
            }
            let page = self.page(n)?;
            let base = if n == 1 { 100 } else { 0 };
            let kind = *page.get(base).ok_or("short page")?;
            let cells = be16(&page, base + 3).ok_or("short page")? as usize;
            let (header_len, leaf) = match kind {
                0x0d => (8, true),
                0x05 => (12, false),
                other => {
                    return Err(format!(
                        "page {n} is not a table b-tree page (type {other:#x})"
                    ));
                }
            };
            if !leaf {
                stack.push(be32(&page, base + 8).ok_or("short page")?);
            }
            for i in 0..cells {
                let ptr =
                    be16(&page, base + header_len + 2 * i).ok_or("short cell array")? as usize;
                if leaf {
                    let (size, a) = varint(&page, ptr).ok_or("bad cell")?;
                    let (_rowid, b) = varint(&page, ptr + a).ok_or("bad cell")?;
                    let payload = self.payload(&page, ptr + a + b, size)?;
                    row(&payload)?;
                } else {
                    stack.push(be32(&page, ptr).ok_or("bad cell")?);
                }
            }
        }
        Ok(())
    }

    /// The payload of a table leaf cell starting at `at`, overflow included.
    fn payload(&self, page: &[u8], at: usize, size: u64) -> Result<Vec<u8>, String> {
        let u = self.usable;
        let size = usize::try_from(size).map_err(|_| "payload too large")?;
        if size > 64 * 1024 * 1024 {
            return Err("a schema row larger than 64 MiB".into());
        }
        let max_local = u - 35;
        let local = if size <= max_local {
            size
        } else {
            let min_local = (u - 12) * 32 / 255 - 23;
            let k = min_local + (size - min_local) % (u - 4);
            if k <= max_local { k } else { min_local }
        };
        let mut out = page
            .get(at..at + local)
            .ok_or("a cell runs past its page")?
            .to_vec();
        if local < size {
            let mut next = be32(page, at + local).ok_or("a cell runs past its page")?;
            let mut hops = 0;
            while out.len() < size {
                hops += 1;
                if next == 0 || hops > MAX_PAGES_WALKED {
                    return Err("a broken overflow chain".into());
                }
                let p = self.page(next)?;
                next = be32(&p, 0).ok_or("short overflow page")?;
                let take = (size - out.len()).min(u - 4);
                out.extend_from_slice(p.get(4..4 + take).ok_or("short overflow page")?);
            }
        }
        Ok(out)
    }
}

fn sizes(header: &[u8]) -> Result<(usize, usize), String> {
    let raw = be16(header, 16).ok_or("short header")?;
    let page_size = if raw == 1 { 65536 } else { raw as usize };
    if !(512..=65536).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(format!("invalid page size {page_size}"));
    }
    let reserved = *header.get(20).ok_or("short header")? as usize;
    let usable = page_size - reserved;
    if usable < 480 {
        return Err(format!("invalid usable page size {usable}"));
    }
    Ok((page_size, usable))
}

/// Whether the text encoding is UTF-16 (None: not set yet).
fn encoding(header: &[u8]) -> Option<bool> {
    match be32(header, 56)? {
        0 => None,
        1 => Some(false),
        _ => Some(true),
    }
}

/// An SQLite varint at `at`: the value and its length.
fn varint(b: &[u8], at: usize) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for i in 0..9 {
        let byte = *b.get(at + i)?;
        if i == 8 {
            return Some(((v << 8) | byte as u64, 9));
        }
        v = (v << 7) | (byte & 0x7f) as u64;
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// A column value, as far as the schema check needs one.
enum Val {
    Null,
    Int(i64),
    Text(String),
    Other,
}

/// The columns of a record.
fn record(rec: &[u8], utf16: bool) -> Result<Vec<Val>, String> {
    let (header_len, mut hp) = varint(rec, 0).ok_or("bad record header")?;
    let header_len = usize::try_from(header_len).map_err(|_| "bad record header")?;
    if header_len > rec.len() {
        return Err("bad record header".into());
    }
    let mut body = header_len;
    let mut cols = Vec::new();
    while hp < header_len {
        let (t, n) = varint(rec, hp).ok_or("bad record header")?;
        hp += n;
        let (len, val) = match t {
            0 => (0, Some(Val::Null)),
            1..=6 => {
                let len = [0, 1, 2, 3, 4, 6, 8][t as usize];
                let bytes = rec.get(body..body + len).ok_or("a record runs short")?;
                let mut v: i64 = if bytes[0] & 0x80 != 0 { -1 } else { 0 };
                for b in bytes {
                    v = (v << 8) | *b as i64;
                }
                (len, Some(Val::Int(v)))
            }
            7 => (8, Some(Val::Other)),
            8 => (0, Some(Val::Int(0))),
            9 => (0, Some(Val::Int(1))),
            10 | 11 => return Err("reserved serial type".into()),
            t if t % 2 == 0 => (((t - 12) / 2) as usize, Some(Val::Other)),
            t => (((t - 13) / 2) as usize, None),
        };
        let bytes = rec.get(body..body + len).ok_or("a record runs short")?;
        cols.push(match val {
            Some(v) => v,
            None => Val::Text(text(bytes, utf16)),
        });
        body += len;
    }
    Ok(cols)
}

fn text(bytes: &[u8], utf16: bool) -> String {
    if !utf16 {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    // UTF-16; the byte order does not matter for the ASCII names compared
    // here as long as it is consistent, so read little-endian and fall back.
    let units: Vec<u16> = bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    String::from_utf16_lossy(&units)
}

/// Committed pages of a WAL file.
struct Overlay {
    page_size: usize,
    pages: HashMap<u32, Vec<u8>>,
}

/// Most WAL bytes read; a WAL larger than this is not a fresh store's, and
/// the main file answers for it.
const MAX_WAL_BYTES: u64 = 256 * 1024 * 1024;

fn read_wal(wal: &File, db_page_size: usize) -> Result<Option<Overlay>, String> {
    let len = wal.metadata().map_err(|e| e.to_string())?.len();
    if len < 32 {
        return Ok(None);
    }
    let mut header = [0u8; 32];
    wal.read_exact_at(&mut header, 0)
        .map_err(|e| format!("cannot read the WAL header: {e}"))?;
    let magic = be32(&header, 0).unwrap_or(0);
    let big_endian = match magic {
        0x377f0682 => false,
        0x377f0683 => true,
        _ => return Err("the -wal file does not start with the WAL header".into()),
    };
    let page_size = be32(&header, 8).unwrap_or(0) as usize;
    if !(512..=65536).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(format!("invalid WAL page size {page_size}"));
    }
    if db_page_size != 0 && page_size != db_page_size {
        return Ok(None);
    }
    let (salt1, salt2) = (
        be32(&header, 16).unwrap_or(0),
        be32(&header, 20).unwrap_or(0),
    );
    let mut sum = checksum((0, 0), &header[..24], big_endian);
    if sum
        != (
            be32(&header, 24).unwrap_or(0),
            be32(&header, 28).unwrap_or(0),
        )
    {
        return Ok(None);
    }
    let frame_len = 24 + page_size as u64;
    let mut committed: HashMap<u32, Vec<u8>> = HashMap::new();
    let mut pending: Vec<(u32, Vec<u8>)> = Vec::new();
    let mut at = 32u64;
    let mut frame = vec![0u8; frame_len as usize];
    while at + frame_len <= len.min(MAX_WAL_BYTES) {
        if wal.read_exact_at(&mut frame, at).is_err() {
            break;
        }
        let (fh, data) = frame.split_at(24);
        if (be32(fh, 8), be32(fh, 12)) != (Some(salt1), Some(salt2)) {
            break;
        }
        sum = checksum(sum, &fh[..8], big_endian);
        sum = checksum(sum, data, big_endian);
        if sum != (be32(fh, 16).unwrap_or(0), be32(fh, 20).unwrap_or(0)) {
            break;
        }
        let pgno = be32(fh, 0).unwrap_or(0);
        pending.push((pgno, data.to_vec()));
        if be32(fh, 4).unwrap_or(0) != 0 {
            committed.extend(pending.drain(..));
        }
        at += frame_len;
    }
    Ok(Some(Overlay {
        page_size,
        pages: committed,
    }))
}

/// SQLite's WAL checksum over `data` (a multiple of 8 bytes), continuing
/// from `(s0, s1)`.
fn checksum((mut s0, mut s1): (u32, u32), data: &[u8], big_endian: bool) -> (u32, u32) {
    let word = |c: &[u8]| {
        let b = [c[0], c[1], c[2], c[3]];
        if big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    };
    for pair in data.chunks_exact(8) {
        s0 = s0.wrapping_add(word(&pair[..4])).wrapping_add(s1);
        s1 = s1.wrapping_add(word(&pair[4..])).wrapping_add(s0);
    }
    (s0, s1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_decode_as_sqlite_writes_them() {
        assert_eq!(varint(&[0x05], 0), Some((5, 1)));
        assert_eq!(varint(&[0x81, 0x00], 0), Some((128, 2)));
        assert_eq!(varint(&[0xff; 9], 0), Some((u64::MAX, 9)));
        assert_eq!(varint(&[0x81], 0), None);
    }

    /// Makes a database with stock SQLite (Python's sqlite3) running `py`
    /// with `c` the connection; the process exits without closing, so a WAL
    /// keeps what it holds.
    fn sqlite(path: &Path, py: &str) {
        let python = std::env::var("ALK_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = format!(
            "import sqlite3, sys, os\nc = sqlite3.connect(sys.argv[1])\n{py}\nc.commit()\nos._exit(0)\n"
        );
        let out = std::process::Command::new(python)
            .arg("-c")
            .arg(script)
            .arg(path)
            .output()
            .expect("python3");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn marker_db(path: &Path, pre: &str, marker: &str) {
        sqlite(
            path,
            &format!(
                "{pre}\nc.execute('CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)')\n\
                 c.execute(\"INSERT INTO meta VALUES ('format', {marker})\")"
            ),
        );
    }

    #[test]
    fn markers_are_read_from_rollback_journal_files_and_from_the_wal() {
        let dir = tempfile::tempdir().unwrap();
        let rollback = dir.path().join("rollback.sqlite");
        marker_db(&rollback, "", "'localkv.v1'");
        assert_eq!(
            inspect(&rollback).unwrap(),
            Contents::Marker("localkv.v1".into())
        );

        // Everything still only in the WAL: the main file is empty.
        let wal = dir.path().join("wal.sqlite");
        marker_db(
            &wal,
            "c.execute('PRAGMA journal_mode=WAL')\nc.execute('PRAGMA wal_autocheckpoint=0')",
            "'localqueue.v1'",
        );
        assert!(dir.path().join("wal.sqlite-wal").exists());
        assert_eq!(
            inspect(&wal).unwrap(),
            Contents::Marker("localqueue.v1".into())
        );

        let null = dir.path().join("null.sqlite");
        marker_db(&null, "", "NULL");
        assert_eq!(
            inspect(&null).unwrap(),
            Contents::Foreign(vec!["meta".into()])
        );

        let utf16 = dir.path().join("utf16.sqlite");
        marker_db(
            &utf16,
            "c.execute(\"PRAGMA encoding='UTF-16le'\")",
            "'localkv.v1'",
        );
        assert_eq!(
            inspect(&utf16).unwrap(),
            Contents::Marker("localkv.v1".into())
        );
    }

    #[test]
    fn large_schemas_with_interior_and_overflow_pages_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.sqlite");
        // 300 tables (the schema b-tree gets interior pages) with long
        // definitions (its cells overflow), then the marker.
        let cols: String = (0..400)
            .map(|i| format!(", column_number_{i} TEXT"))
            .collect();
        sqlite(
            &p,
            &format!(
                "c.execute('PRAGMA page_size=512')\n\
                 for i in range(300): c.execute('CREATE TABLE t%d (id INTEGER{cols})' % i)\n\
                 c.execute('CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)')\n\
                 c.executemany('INSERT INTO meta VALUES (?, ?)', [('k%d' % i, 'v' * 300) for i in range(200)])\n\
                 c.execute(\"INSERT INTO meta VALUES ('format', 'localstream.v1')\")"
            ),
        );
        assert_eq!(
            inspect(&p).unwrap(),
            Contents::Marker("localstream.v1".into())
        );
    }

    #[test]
    fn a_torn_or_garbled_file_is_an_answer_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.sqlite");
        marker_db(&p, "", "'localkv.v1'");
        let good = std::fs::read(&p).unwrap();
        let mut x: u32 = 7;
        for round in 0..200 {
            let mut bytes = good.clone();
            // Garble a few bytes after the magic, or cut the file short.
            for _ in 0..(1 + round % 8) {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                let at = 16 + (x as usize) % (bytes.len() - 16);
                bytes[at] = (x >> 8) as u8;
            }
            if round % 5 == 0 {
                bytes.truncate(100 + (x as usize) % bytes.len());
            }
            std::fs::write(&p, &bytes).unwrap();
            let _ = inspect(&p).unwrap();
        }
    }

    #[test]
    fn missing_empty_and_non_database_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.sqlite");
        assert_eq!(inspect(&p).unwrap(), Contents::Fresh);
        std::fs::write(&p, b"").unwrap();
        assert_eq!(inspect(&p).unwrap(), Contents::Fresh);
        std::fs::write(&p, b"hello, this is not a database").unwrap();
        assert!(matches!(inspect(&p).unwrap(), Contents::NotADatabase(_)));
        let mut junk = b"SQLite format 3\0".to_vec();
        junk.extend(std::iter::repeat_n(0xab, 5000));
        std::fs::write(&p, &junk).unwrap();
        assert!(matches!(inspect(&p).unwrap(), Contents::NotADatabase(_)));
    }
}
