//! `localkv.v1`: the key-value store format and its only implementation.
//!
//! The schema and every statement are defined here, once, and pinned by
//! `docs/formats/localkv.v1.md`; a test checks that the document carries the
//! same DDL and statements. Any change to either must change both, and an
//! incompatible change must bump the format marker.

use std::path::{Path, PathBuf};

use turso::{Connection, Value};

use super::names::{check_key, check_name, check_size};
use super::open::{Format, Store, open_store};
use super::retry::{Failure, exec, query};
use crate::error::{AlkError, AlkResult};

/// The DDL of `localkv.v1`, run (idempotently) on every open.
pub const DDL: &str = "\
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT OR IGNORE INTO meta (key, value) VALUES ('format', 'localkv.v1');
CREATE TABLE IF NOT EXISTS kv (
    key        TEXT PRIMARY KEY,
    value      BLOB NOT NULL,
    expires_at INTEGER -- unix epoch MILLISECONDS, NULL = no expiry
);
";

/// The `localkv.v1` format.
pub static FORMAT: Format = Format {
    marker: "localkv.v1",
    ddl: DDL,
};

/// Reads a key.
pub const SELECT: &str = "SELECT value, expires_at FROM kv WHERE key = ?1";
/// Lazily deletes a key found expired by `get` or `exists`.
pub const DELETE_EXPIRED: &str =
    "DELETE FROM kv WHERE key = ?1 AND expires_at IS NOT NULL AND expires_at <= ?2";
/// Unconditional upsert.
pub const PUT: &str = "INSERT INTO kv (key, value, expires_at) VALUES (?1, ?2, ?3) \
ON CONFLICT(key) DO UPDATE SET value = ?2, expires_at = ?3";
/// Conditional upsert: wins (changed rows = 1) when the key is absent or expired.
pub const PUT_IF_ABSENT: &str = "INSERT INTO kv (key, value, expires_at) VALUES (?1, ?2, ?3) \
ON CONFLICT(key) DO UPDATE SET value = ?2, expires_at = ?3 \
WHERE kv.expires_at IS NOT NULL AND kv.expires_at <= ?4";
/// Deletes a key.
pub const DELETE: &str = "DELETE FROM kv WHERE key = ?1";
/// Prefix scan: rows from the prefix on, in key order; the reader stops at
/// the first key that no longer starts with the prefix.
pub const SCAN: &str = "SELECT key, value, expires_at FROM kv WHERE key >= ?1 ORDER BY key";

/// Size limits of keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvLimits {
    /// Longest key, in bytes.
    pub max_key_bytes: usize,
    /// Largest value, in bytes.
    pub max_value_bytes: usize,
}

impl Default for KvLimits {
    fn default() -> Self {
        KvLimits {
            max_key_bytes: 1024,
            max_value_bytes: 1024 * 1024,
        }
    }
}

/// The most entries one scan page returns; larger limits are clamped so a
/// guest cannot make the host buffer an unbounded page.
pub const MAX_SCAN_LIMIT: u32 = 1000;

/// One page of a prefix scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanPage {
    /// Live entries, in key order.
    pub entries: Vec<(String, Vec<u8>)>,
    /// The cursor of the next page, if there is one.
    pub next_cursor: Option<String>,
}

/// A `localkv.v1` bucket: `<data-dir>/kv/<bucket>/localkv.sqlite`.
#[derive(Debug, Clone)]
pub struct KvStore {
    store: Store,
    limits: KvLimits,
}

/// The file of bucket `bucket` under `data_dir`.
pub fn bucket_path(data_dir: &Path, bucket: &str) -> PathBuf {
    data_dir.join("kv").join(bucket).join("localkv.sqlite")
}

fn expired(expires_at: Option<i64>, now: i64) -> bool {
    matches!(expires_at, Some(at) if at <= now)
}

fn opt_int(v: Value) -> Option<i64> {
    match v {
        Value::Integer(i) => Some(i),
        _ => None,
    }
}

fn blob(v: Value) -> Vec<u8> {
    match v {
        Value::Blob(b) => b,
        Value::Text(t) => t.into_bytes(),
        _ => Vec::new(),
    }
}

impl KvStore {
    /// Opens (creating on first use) bucket `bucket` under `data_dir`.
    pub async fn open(
        data_dir: &Path,
        bucket: &str,
        limits: KvLimits,
        policy: impl Into<super::StoreOptions>,
    ) -> AlkResult<Self> {
        check_name("bucket", bucket)?;
        let store = open_store(&bucket_path(data_dir, bucket), &FORMAT, policy).await?;
        Ok(KvStore { store, limits })
    }

    /// The bucket's file.
    pub fn path(&self) -> &Path {
        self.store.path()
    }

    fn check_key(&self, key: &str) -> AlkResult<()> {
        check_key("key", key, self.limits.max_key_bytes)
    }

    fn check_value(&self, value: &[u8]) -> AlkResult<()> {
        check_size("value", value.len(), self.limits.max_value_bytes)
    }

    /// The absolute expiry of a TTL given now. A zero TTL is refused (it
    /// would store an already-expired key), as is one that overflows.
    fn expiry(ttl_ms: Option<u64>, now: i64) -> AlkResult<Option<i64>> {
        match ttl_ms {
            None => Ok(None),
            Some(0) => Err(AlkError::InvalidArgument(
                "ttl-ms is 0; omit it for no expiry".into(),
            )),
            Some(ttl) => i64::try_from(ttl)
                .ok()
                .and_then(|ttl| now.checked_add(ttl))
                .map(Some)
                .ok_or_else(|| {
                    AlkError::InvalidArgument(format!("ttl-ms {ttl} overflows the clock"))
                }),
        }
    }

    /// Reads `key` at time `now`; deletes it when found expired.
    pub async fn get(&self, key: &str, now: i64) -> AlkResult<Option<Vec<u8>>> {
        self.check_key(key)?;
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let Some((value, expires_at)) = select(&conn, key).await? else {
                        return Ok(None);
                    };
                    if expired(expires_at, now) {
                        exec(&conn, DELETE_EXPIRED, (key, now)).await?;
                        return Ok(None);
                    }
                    Ok(Some(value))
                })
            })
            .await
    }

    /// The values of `keys` at `now`, in order; expired keys found are
    /// deleted. The list stops early, after at least one key, when the
    /// values would pass [`super::MAX_READ_BYTES`]: the caller asks again for
    /// the keys after the last one returned.
    pub async fn get_many(&self, keys: &[String], now: i64) -> AlkResult<Vec<Option<Vec<u8>>>> {
        super::check_batch("keys", keys.len())?;
        for key in keys {
            self.check_key(key)?;
        }
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut out = Vec::with_capacity(keys.len());
                    let mut expired_keys = Vec::new();
                    let mut bytes = 0usize;
                    for key in keys {
                        let found = select(&conn, key).await?;
                        if let Some((value, _)) = &found {
                            if !out.is_empty() && bytes + value.len() > super::MAX_READ_BYTES {
                                break;
                            }
                            bytes += value.len();
                        }
                        match found {
                            Some((_, expires_at)) if expired(expires_at, now) => {
                                expired_keys.push(key.as_str());
                                out.push(None);
                            }
                            Some((value, _)) => out.push(Some(value)),
                            None => out.push(None),
                        }
                    }
                    for key in expired_keys {
                        exec(&conn, DELETE_EXPIRED, (key, now)).await?;
                    }
                    Ok(out)
                })
            })
            .await
    }

    /// Stores every entry with the same TTL, in one transaction.
    pub async fn set_many(
        &self,
        entries: &[(String, Vec<u8>)],
        ttl_ms: Option<u64>,
        now: i64,
    ) -> AlkResult<()> {
        super::check_batch("entries", entries.len())?;
        for (key, value) in entries {
            self.check_key(key)?;
            self.check_value(value)?;
        }
        let expires_at = Self::expiry(ttl_ms, now)?;
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(async move {
                    for (key, value) in entries {
                        exec(&conn, PUT, (key.as_str(), value.clone(), expires_at)).await?;
                    }
                    Ok(())
                })
            })
            .await
    }

    /// Whether `key` is live at `now`; deletes it when found expired.
    pub async fn exists(&self, key: &str, now: i64) -> AlkResult<bool> {
        Ok(self.get(key, now).await?.is_some())
    }

    /// Stores `value` under `key`.
    pub async fn set(
        &self,
        key: &str,
        value: &[u8],
        ttl_ms: Option<u64>,
        now: i64,
    ) -> AlkResult<()> {
        self.check_key(key)?;
        self.check_value(value)?;
        let expires_at = Self::expiry(ttl_ms, now)?;
        self.store
            .run_write(|conn: Connection| {
                Box::pin(async move {
                    exec(&conn, PUT, (key, value.to_vec(), expires_at)).await?;
                    Ok(())
                })
            })
            .await
    }

    /// Stores `value` when `key` is absent or expired at `now`; returns
    /// whether this call won.
    pub async fn set_if_absent(
        &self,
        key: &str,
        value: &[u8],
        ttl_ms: Option<u64>,
        now: i64,
    ) -> AlkResult<bool> {
        self.check_key(key)?;
        self.check_value(value)?;
        let expires_at = Self::expiry(ttl_ms, now)?;
        self.store
            .run_write(|conn: Connection| {
                Box::pin(async move {
                    let changed = conn
                        .execute(PUT_IF_ABSENT, (key, value.to_vec(), expires_at, now))
                        .await?;
                    Ok(changed == 1)
                })
            })
            .await
    }

    /// Removes `key`.
    pub async fn delete(&self, key: &str) -> AlkResult<()> {
        self.check_key(key)?;
        self.store
            .run_write(|conn: Connection| {
                Box::pin(async move {
                    exec(&conn, DELETE, (key,)).await?;
                    Ok(())
                })
            })
            .await
    }

    /// One page of live entries whose key starts with `prefix`.
    ///
    /// The cursor is the number of live matching entries already returned,
    /// as a decimal string. A page stops early, after at least one entry,
    /// when its values would pass [`super::MAX_READ_BYTES`].
    pub async fn scan_prefix(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
        now: i64,
    ) -> AlkResult<ScanPage> {
        if prefix.len() > self.limits.max_key_bytes {
            return Err(AlkError::PayloadTooLarge {
                what: "prefix",
                size: prefix.len() as u64,
                limit: self.limits.max_key_bytes as u64,
            });
        }
        let offset: u64 = match cursor {
            None => 0,
            // Only canonical decimals are cursors this store hands out.
            Some(c) => c
                .parse::<u64>()
                .ok()
                .filter(|n| n.to_string() == c)
                .ok_or_else(|| {
                    AlkError::InvalidArgument(format!("cursor {c:?} is not a scan cursor"))
                })?,
        };
        let limit = limit.clamp(1, MAX_SCAN_LIMIT) as usize;
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, SCAN, (prefix,)).await?;
                    let mut skipped = 0u64;
                    let mut entries: Vec<(String, Vec<u8>)> = Vec::new();
                    let mut bytes = 0usize;
                    let mut more = false;
                    while let Some(row) = rows.next().await? {
                        let key = row.get::<String>(0)?;
                        if !key.starts_with(prefix) {
                            break;
                        }
                        if expired(opt_int(row.get_value(2)?), now) {
                            continue;
                        }
                        if skipped < offset {
                            skipped += 1;
                            continue;
                        }
                        if entries.len() == limit {
                            more = true;
                            break;
                        }
                        let value = blob(row.get_value(1)?);
                        if !entries.is_empty() && bytes + value.len() > super::MAX_READ_BYTES {
                            more = true;
                            break;
                        }
                        bytes += value.len();
                        entries.push((key, value));
                    }
                    // Stopping early is deliberate (the rest of the table is not
                    // needed); dropping the rows ends the statement and its read
                    // snapshot before the connection is dropped.
                    drop(rows);
                    let next_cursor = more.then(|| (offset + entries.len() as u64).to_string());
                    Ok(ScanPage {
                        entries,
                        next_cursor,
                    })
                })
            })
            .await
    }
}

async fn select(conn: &Connection, key: &str) -> Result<Option<(Vec<u8>, Option<i64>)>, Failure> {
    let mut rows = query(conn, SELECT, (key,)).await?;
    let mut found = None;
    // Drain: an unfinished statement keeps its read snapshot open.
    while let Some(row) = rows.next().await? {
        found = Some((blob(row.get_value(0)?), opt_int(row.get_value(1)?)));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::RetryPolicy;

    const DOC: &str = include_str!("../../../docs/formats/localkv.v1.md");

    #[test]
    fn the_format_document_pins_the_ddl_and_every_statement() {
        crate::store::assert_document_pins(
            "localkv.v1.md",
            DOC,
            &[
                ("DDL", DDL),
                ("SELECT", SELECT),
                ("DELETE_EXPIRED", DELETE_EXPIRED),
                ("PUT", PUT),
                ("PUT_IF_ABSENT", PUT_IF_ABSENT),
                ("DELETE", DELETE),
                ("SCAN", SCAN),
            ],
        );
    }

    async fn bucket(dir: &Path) -> KvStore {
        KvStore::open(dir, "b", KvLimits::default(), RetryPolicy::default())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn expiry_is_decided_by_the_given_clock_reading() {
        let dir = tempfile::tempdir().unwrap();
        let kv = bucket(dir.path()).await;
        kv.set("k", b"v", Some(100), 1_000).await.unwrap();
        assert_eq!(kv.get("k", 1_099).await.unwrap(), Some(b"v".to_vec()));
        assert!(!kv.set_if_absent("k", b"w", None, 1_099).await.unwrap());
        assert_eq!(
            kv.scan_prefix("", None, 10, 1_099)
                .await
                .unwrap()
                .entries
                .len(),
            1
        );
        // expires_at == now is expired.
        assert_eq!(
            kv.scan_prefix("", None, 10, 1_100)
                .await
                .unwrap()
                .entries
                .len(),
            0
        );
        assert!(kv.set_if_absent("k", b"w", Some(50), 1_100).await.unwrap());
        assert_eq!(kv.get("k", 1_149).await.unwrap(), Some(b"w".to_vec()));
        assert!(!kv.exists("k", 1_150).await.unwrap());
        // The lazy delete removed the row: an earlier clock cannot revive it.
        assert_eq!(kv.get("k", 0).await.unwrap(), None);
    }

    #[tokio::test]
    async fn oversized_input_is_refused_before_the_store_is_touched() {
        let dir = tempfile::tempdir().unwrap();
        let kv = bucket(dir.path()).await;
        let big = vec![0u8; KvLimits::default().max_value_bytes + 1];
        assert!(matches!(
            kv.set("k", &big, None, 0).await,
            Err(AlkError::PayloadTooLarge { what: "value", .. })
        ));
        assert_eq!(kv.get("k", 0).await.unwrap(), None);
    }

    #[tokio::test]
    async fn many_large_values_come_back_in_pages_of_at_most_the_read_cap() {
        let dir = tempfile::tempdir().unwrap();
        let kv = bucket(dir.path()).await;
        let mib = vec![7u8; 1024 * 1024];
        let keys: Vec<String> = (0..40).map(|i| format!("k{i:02}")).collect();
        let entries: Vec<(String, Vec<u8>)> =
            keys.iter().map(|k| (k.clone(), mib.clone())).collect();
        kv.set_many(&entries, None, 0).await.unwrap();
        let cap = crate::store::MAX_READ_BYTES / mib.len();
        // get-many: a shorter list, in key order; asking again for the rest
        // returns the rest.
        let first = kv.get_many(&keys, 0).await.unwrap();
        assert_eq!(first.len(), cap);
        assert!(first.iter().all(|v| v.as_deref() == Some(mib.as_slice())));
        let rest = kv.get_many(&keys[cap..], 0).await.unwrap();
        assert_eq!(rest.len(), cap);
        // scan-prefix: pages of at most the cap, with a cursor, until all 40.
        let (mut seen, mut cursor) = (Vec::new(), None::<String>);
        loop {
            let page = kv.scan_prefix("k", cursor.as_deref(), 1000, 0).await.unwrap();
            assert!(!page.entries.is_empty() && page.entries.len() <= cap);
            seen.extend(page.entries.into_iter().map(|(k, _)| k));
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        assert_eq!(seen, keys);
    }

    #[tokio::test]
    async fn bad_bucket_names_are_refused_before_any_file_is_created() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["..", "a/b", "__alkstore_x"] {
            assert!(
                KvStore::open(dir.path(), bad, KvLimits::default(), RetryPolicy::default())
                    .await
                    .is_err()
            );
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
