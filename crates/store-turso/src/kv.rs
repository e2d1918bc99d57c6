//! `localkv.v1` and `localkv.v2`: the key-value store formats and their
//! only implementation.
//!
//! The schemas and every statement are defined here, once, and pinned by
//! `docs/formats/localkv.v1.md` and `docs/formats/localkv.v2.md`; tests
//! check that the documents carry the same DDL and statements. Any change
//! to either must change both, and an incompatible change must bump the
//! format marker.
//!
//! `localkv.v2` is `localkv.v1` plus a `version` column that every applied
//! put changes, which compare-and-swap compares. New buckets are v1 unless
//! the host is configured otherwise ([`NewKv`]); a file of either format is
//! used as it is, and [`KvStore::migrate`] moves a v1 file to v2.

use std::path::{Path, PathBuf};

use alk_store::kv::KvEngine;
use alk_store::limits::Pager;

use alk_store::{AlkError, AlkResult};
use async_trait::async_trait;
use turso::Value;

use alk_store::kv::Expected;

use crate::conn::Connection;
use crate::format::Format;
use crate::options::{NewKv, StoreOptions};
use crate::retry::{Failure, exec, query};
use crate::store::{Store, open_store};

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

/// The DDL of `localkv.v2`, run (idempotently) on every open.
pub const DDL_V2: &str = "\
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT OR IGNORE INTO meta (key, value) VALUES ('format', 'localkv.v2');

CREATE TABLE IF NOT EXISTS kv (
    key        TEXT PRIMARY KEY,
    value      BLOB NOT NULL,
    expires_at INTEGER,         -- unix epoch MILLISECONDS, NULL = no expiry
    version    TEXT NOT NULL    -- changes on every applied put
);
";

/// What turns a `localkv.v1` file into a `localkv.v2` one, in one
/// `BEGIN IMMEDIATE` transaction with every other process kept out: the
/// rows move to a table of the v2 schema, each with a fresh version.
pub const MIGRATE: &str = "\
CREATE TABLE kv_v1 (key TEXT PRIMARY KEY, value BLOB NOT NULL, expires_at INTEGER);
INSERT INTO kv_v1 (key, value, expires_at) SELECT key, value, expires_at FROM kv;
DROP TABLE kv;
CREATE TABLE IF NOT EXISTS kv (
    key        TEXT PRIMARY KEY,
    value      BLOB NOT NULL,
    expires_at INTEGER,         -- unix epoch MILLISECONDS, NULL = no expiry
    version    TEXT NOT NULL    -- changes on every applied put
);
INSERT INTO kv (key, value, expires_at, version)
    SELECT key, value, expires_at, lower(hex(randomblob(16))) FROM kv_v1;
DROP TABLE kv_v1;
UPDATE meta SET value = 'localkv.v2' WHERE key = 'format';
";

/// The `localkv.v1` format, alone.
pub static FORMAT: Format = Format {
    marker: "localkv.v1",
    ddl: DDL,
    also: &[],
    upgrades: &[],
};

/// The `localkv.v2` format, alone.
pub static FORMAT_V2: Format = Format {
    marker: "localkv.v2",
    ddl: DDL_V2,
    also: &[],
    upgrades: &[],
};

/// Buckets whose new files are `localkv.v1` (the default); v2 files are
/// used as they are.
pub static NEW_V1: Format = Format {
    marker: "localkv.v1",
    ddl: DDL,
    also: &[&FORMAT_V2],
    upgrades: &[],
};

/// Buckets whose new files are `localkv.v2`; v1 files are used as they are.
pub static NEW_V2: Format = Format {
    marker: "localkv.v2",
    ddl: DDL_V2,
    also: &[&FORMAT],
    upgrades: &[],
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
/// The next page of a prefix scan: rows after the last key returned.
pub const SCAN_AFTER: &str = "SELECT key, value, expires_at FROM kv WHERE key > ?1 ORDER BY key";
/// [`SCAN`] without the values: a key listing reads no value.
pub const SCAN_KEYS: &str = "SELECT key, expires_at FROM kv WHERE key >= ?1 ORDER BY key";
/// [`SCAN_AFTER`] without the values.
pub const SCAN_KEYS_AFTER: &str = "SELECT key, expires_at FROM kv WHERE key > ?1 ORDER BY key";
/// Compare-and-swap by value: wins (changed rows = 1) when the key holds
/// `?4` and is live at `?5`.
pub const SWAP: &str = "UPDATE kv SET value = ?2, expires_at = ?3 \
WHERE key = ?1 AND CAST(value AS BLOB) = ?4 AND (expires_at IS NULL OR expires_at > ?5)";

/// `localkv.v2`: reads a key and its version.
pub const SELECT_V2: &str = "SELECT value, expires_at, version FROM kv WHERE key = ?1";
/// `localkv.v2`: unconditional upsert with a fresh version `?4`.
pub const PUT_V2: &str = "INSERT INTO kv (key, value, expires_at, version) VALUES (?1, ?2, ?3, ?4) \
ON CONFLICT(key) DO UPDATE SET value = ?2, expires_at = ?3, version = ?4";
/// `localkv.v2`: conditional upsert; wins when the key is absent or
/// expired at `?5`.
pub const PUT_IF_ABSENT_V2: &str = "INSERT INTO kv (key, value, expires_at, version) VALUES (?1, ?2, ?3, ?4) \
ON CONFLICT(key) DO UPDATE SET value = ?2, expires_at = ?3, version = ?4 \
WHERE kv.expires_at IS NOT NULL AND kv.expires_at <= ?5";
/// `localkv.v2`: compare-and-swap by value, for a key whose version is
/// not text (written so by another program); wins when the key holds `?5`
/// and is live at `?6`.
pub const SWAP_V2: &str = "UPDATE kv SET value = ?2, expires_at = ?3, version = ?4 \
WHERE key = ?1 AND CAST(value AS BLOB) = ?5 AND (expires_at IS NULL OR expires_at > ?6)";
/// `localkv.v2`: conditional put by version; wins when the key holds
/// version `?5` and is live at `?6`.
pub const PUT_IF_VERSION_V2: &str = "UPDATE kv SET value = ?2, expires_at = ?3, version = ?4 \
WHERE key = ?1 AND version = ?5 AND (expires_at IS NULL OR expires_at > ?6)";

/// A fresh version for a `localkv.v2` put: 32 random hex digits (a version
/// 4 UUID from the thread's random generator, no system call per put).
fn fresh_version() -> String {
    uuid::Builder::from_random_bytes(rand::random())
        .into_uuid()
        .simple()
        .to_string()
}

/// What [`KvStore::migrate`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Migrated {
    /// The file was `localkv.v1` and is now `localkv.v2`.
    Upgraded,
    /// The file was already `localkv.v2`; nothing changed.
    AlreadyV2,
}

/// A bucket: `<data-dir>/kv/<bucket>/localkv.sqlite`, `localkv.v1` or
/// `localkv.v2`.
#[derive(Debug, Clone)]
pub struct KvStore {
    store: Store,
}

/// The file of bucket `bucket` under `data_dir`.
pub fn bucket_path(data_dir: &Path, bucket: &str) -> PathBuf {
    data_dir.join("kv").join(bucket).join("localkv.sqlite")
}

fn expired(expires_at: Option<i64>, now: i64) -> bool {
    matches!(expires_at, Some(at) if at <= now)
}

/// The row of `key` in `store`'s file breaks the format.
fn corrupt(store: &Store, key: &str, column: &str, found: &Value) -> Failure {
    Failure::Alk(AlkError::Internal(format!(
        "{}: key {key:?} has {found:?} in {column}, which its format does not allow; the store is corrupt",
        store.path().display()
    )))
}

fn value_of(store: &Store, key: &str, v: Value) -> Result<Vec<u8>, Failure> {
    match v {
        Value::Blob(b) => Ok(b),
        // Written by a program that stored text: the bytes of the text.
        Value::Text(t) => Ok(t.into_bytes()),
        other => Err(corrupt(store, key, "value", &other)),
    }
}

fn expiry_of(store: &Store, key: &str, v: Value) -> Result<Option<i64>, Failure> {
    match v {
        Value::Integer(i) => Ok(Some(i)),
        Value::Null => Ok(None),
        other => Err(corrupt(store, key, "expires_at", &other)),
    }
}

impl KvStore {
    /// Opens (creating on first use) bucket `bucket` under `data_dir`; the
    /// name is checked by the caller.
    pub async fn open(
        data_dir: &Path,
        bucket: &str,
        options: impl Into<StoreOptions>,
    ) -> AlkResult<Self> {
        let options = options.into();
        let format = match options.new_kv {
            NewKv::V1 => &NEW_V1,
            NewKv::V2 => &NEW_V2,
        };
        let store = open_store(&bucket_path(data_dir, bucket), format, options).await?;
        Ok(KvStore { store })
    }

    /// Moves bucket `bucket` under `data_dir` from `localkv.v1` to
    /// `localkv.v2`, in one transaction: every key keeps its value and
    /// expiry and gets a version. Refused (`busy`) while any process has
    /// the bucket open; no process can open it while the migration runs. A
    /// file that does not exist is not created.
    pub async fn migrate(
        data_dir: &Path,
        bucket: &str,
        options: impl Into<StoreOptions>,
    ) -> AlkResult<Migrated> {
        let path = bucket_path(data_dir, bucket);
        if !path.exists() {
            return Err(AlkError::InvalidArgument(format!(
                "there is no bucket {bucket} under {} ({} does not exist)",
                data_dir.display(),
                path.display()
            )));
        }
        // Only a kv store is migrated: an empty file would otherwise be
        // made a new v2 store by the open below.
        let contents = crate::inspect::inspect(&path)
            .map_err(|e| AlkError::Internal(format!("cannot read {}: {e}", path.display())))?;
        match contents {
            crate::inspect::Contents::Marker(m) if m == FORMAT.marker || m == FORMAT_V2.marker => {}
            other => {
                return Err(AlkError::InvalidArgument(format!(
                    "{} is not a kv bucket store ({other:?}); nothing was changed",
                    path.display()
                )));
            }
        }
        let store = Store::unopened(&path, &NEW_V2, options.into());
        let upgraded = store
            .migrate_exclusive(&[(&FORMAT, MIGRATE)], &FORMAT_V2)
            .await?;
        Ok(if upgraded.is_some() {
            Migrated::Upgraded
        } else {
            Migrated::AlreadyV2
        })
    }

    /// Whether the file is `localkv.v2`.
    pub async fn is_v2(&self) -> AlkResult<bool> {
        Ok(is_v2(self.store.file_format().await?))
    }

    /// The bucket's file.
    pub fn path(&self) -> &Path {
        self.store.path()
    }
}

/// Whether a file opened as `format` is `localkv.v2`.
fn is_v2(format: &Format) -> bool {
    format.marker == FORMAT_V2.marker
}

async fn select(
    store: &Store,
    conn: &Connection,
    key: &str,
) -> Result<Option<(Vec<u8>, Option<i64>)>, Failure> {
    let mut rows = query(conn, SELECT, (key,)).await?;
    let mut found = None;
    // Drain: an unfinished statement keeps its read snapshot open.
    while let Some(row) = rows.next().await? {
        found = Some((
            value_of(store, key, row.get_value(0)?)?,
            expiry_of(store, key, row.get_value(1)?)?,
        ));
    }
    Ok(found)
}

/// A key's value, expiry and version (`localkv.v2`).
async fn select_v2(
    store: &Store,
    conn: &Connection,
    key: &str,
) -> Result<Option<(Vec<u8>, Option<i64>, Option<String>)>, Failure> {
    let mut rows = query(conn, SELECT_V2, (key,)).await?;
    let mut found = None;
    while let Some(row) = rows.next().await? {
        // alk writes text; a version of another type (another program's)
        // is compared through the value instead.
        let version = match row.get_value(2)? {
            Value::Text(v) => Some(v),
            _ => None,
        };
        found = Some((
            value_of(store, key, row.get_value(0)?)?,
            expiry_of(store, key, row.get_value(1)?)?,
            version,
        ));
    }
    Ok(found)
}

/// Stores one key, with a fresh version on `localkv.v2`.
async fn put(
    conn: &Connection,
    v2: bool,
    key: &str,
    value: &[u8],
    expires_at: Option<i64>,
) -> Result<(), Failure> {
    if v2 {
        exec(
            conn,
            PUT_V2,
            (key, value.to_vec(), expires_at, fresh_version()),
        )
        .await?;
    } else {
        exec(conn, PUT, (key, value.to_vec(), expires_at)).await?;
    }
    Ok(())
}

#[async_trait]
impl KvEngine for KvStore {
    async fn get(&self, key: &str, now: i64) -> AlkResult<Option<Vec<u8>>> {
        let store = &self.store;
        let found = store
            .run(|conn: Connection| Box::pin(async move { select(store, &conn, key).await }))
            .await?;
        match found {
            Some((_, at)) if expired(at, now) => {
                // Found expired: deleted now (a short write).
                store
                    .run_write(|conn: Connection| {
                        Box::pin(async move {
                            exec(&conn, DELETE_EXPIRED, (key, now)).await?;
                            Ok(())
                        })
                    })
                    .await?;
                Ok(None)
            }
            Some((v, _)) => Ok(Some(v)),
            None => Ok(None),
        }
    }

    async fn get_many(
        &self,
        keys: &[String],
        now: i64,
        max_bytes: usize,
    ) -> AlkResult<Vec<Option<Vec<u8>>>> {
        let store = &self.store;
        let (out, expired_keys) = store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut out = Vec::with_capacity(keys.len());
                    let mut expired_keys = Vec::new();
                    let mut pager = Pager::new(usize::MAX, max_bytes);
                    for key in keys {
                        let found = select(store, &conn, key).await?;
                        // Only live values count toward the page's bytes,
                        // as on every engine.
                        let size = match &found {
                            Some((value, at)) if !expired(*at, now) => value.len(),
                            _ => 0,
                        };
                        if !pager.admit(size) {
                            break;
                        }
                        match found {
                            Some((_, at)) if expired(at, now) => {
                                expired_keys.push(key.as_str());
                                out.push(None);
                            }
                            Some((value, _)) => out.push(Some(value)),
                            None => out.push(None),
                        }
                    }
                    Ok((out, expired_keys))
                })
            })
            .await?;
        if !expired_keys.is_empty() {
            let expired_keys = &expired_keys;
            store
                .run_immediate(|conn: Connection| {
                    Box::pin(async move {
                        for key in expired_keys {
                            exec(&conn, DELETE_EXPIRED, (*key, now)).await?;
                        }
                        Ok(())
                    })
                })
                .await?;
        }
        Ok(out)
    }

    async fn set(&self, key: &str, value: &[u8], expires_at: Option<i64>) -> AlkResult<()> {
        self.store
            .run_write_in(|conn: Connection, format| {
                let v2 = is_v2(format);
                Box::pin(async move { put(&conn, v2, key, value, expires_at).await })
            })
            .await
    }

    async fn set_many(
        &self,
        entries: &[(String, Vec<u8>)],
        expires_at: Option<i64>,
    ) -> AlkResult<()> {
        self.store
            .run_immediate_in(|conn: Connection, format| {
                let v2 = is_v2(format);
                Box::pin(async move {
                    for (key, value) in entries {
                        put(&conn, v2, key, value, expires_at).await?;
                    }
                    Ok(())
                })
            })
            .await
    }

    async fn set_if_absent(
        &self,
        key: &str,
        value: &[u8],
        expires_at: Option<i64>,
        now: i64,
    ) -> AlkResult<bool> {
        self.store
            .run_write_in(|conn: Connection, format| {
                let v2 = is_v2(format);
                Box::pin(async move { put_if_absent(&conn, v2, key, value, expires_at, now).await })
            })
            .await
    }

    async fn delete(&self, key: &str) -> AlkResult<()> {
        self.store
            .run_write(|conn: Connection| {
                Box::pin(async move {
                    exec(&conn, DELETE, (key,)).await?;
                    Ok(())
                })
            })
            .await
    }

    async fn delete_many(&self, keys: &[String]) -> AlkResult<()> {
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(async move {
                    for key in keys {
                        exec(&conn, DELETE, (key.as_str(),)).await?;
                    }
                    Ok(())
                })
            })
            .await
    }

    async fn read_for_swap(&self, key: &str, now: i64) -> AlkResult<Option<(Vec<u8>, Expected)>> {
        let store = &self.store;
        let found = store
            .run_in(|conn: Connection, format| {
                let v2 = is_v2(format);
                Box::pin(async move {
                    if v2 {
                        select_v2(store, &conn, key).await
                    } else {
                        Ok(select(store, &conn, key)
                            .await?
                            .map(|(v, at)| (v, at, None)))
                    }
                })
            })
            .await?;
        // An expired key reads as absent (and is left for `get` to delete).
        // A v2 row whose version is not text (another program's) is
        // compared by value, as on v1.
        Ok(found
            .filter(|(_, at, _)| !expired(*at, now))
            .map(|(v, _, version)| match version {
                Some(version) => (v, Expected::Version(version)),
                None => (v.clone(), Expected::Value(v)),
            }))
    }

    async fn swap(
        &self,
        key: &str,
        expected: &Expected,
        value: &[u8],
        expires_at: Option<i64>,
        now: i64,
    ) -> AlkResult<bool> {
        self.store
            .run_write_in(|conn: Connection, format| {
                let v2 = is_v2(format);
                Box::pin(async move {
                    let changed = match (expected, v2) {
                        (Expected::Absent, _) => {
                            return put_if_absent(&conn, v2, key, value, expires_at, now).await;
                        }
                        (Expected::Version(version), true) => {
                            exec(
                                &conn,
                                PUT_IF_VERSION_V2,
                                (
                                    key,
                                    value.to_vec(),
                                    expires_at,
                                    fresh_version(),
                                    version.as_str(),
                                    now,
                                ),
                            )
                            .await?
                        }
                        (Expected::Value(old), false) => {
                            exec(
                                &conn,
                                SWAP,
                                (key, value.to_vec(), expires_at, old.clone(), now),
                            )
                            .await?
                        }
                        (Expected::Value(old), true) => {
                            exec(
                                &conn,
                                SWAP_V2,
                                (
                                    key,
                                    value.to_vec(),
                                    expires_at,
                                    fresh_version(),
                                    old.clone(),
                                    now,
                                ),
                            )
                            .await?
                        }
                        // A reading taken before the file changed format
                        // never wins.
                        (Expected::Version(_), false) => 0,
                    };
                    Ok(changed == 1)
                })
            })
            .await
    }

    async fn scan_prefix(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        now: i64,
        max_bytes: usize,
    ) -> AlkResult<(Vec<(String, Vec<u8>)>, bool)> {
        let store = &self.store;
        store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = match after {
                        Some(after) => query(&conn, SCAN_AFTER, (after,)).await?,
                        None => query(&conn, SCAN, (prefix,)).await?,
                    };
                    let mut entries: Vec<(String, Vec<u8>)> = Vec::new();
                    let mut pager = Pager::new(limit, max_bytes);
                    let mut more = false;
                    while let Some(row) = rows.next().await? {
                        let key = match row.get_value(0)? {
                            Value::Text(k) => k,
                            other => {
                                return Err(corrupt(store, "?", "key", &other));
                            }
                        };
                        // Keys are compared as SQLite compares TEXT (BINARY:
                        // byte order of the UTF-8), so the first key without
                        // the prefix ends the prefix's keys.
                        if !key.starts_with(prefix) {
                            break;
                        }
                        if expired(expiry_of(store, &key, row.get_value(2)?)?, now) {
                            continue;
                        }
                        if entries.len() == limit {
                            // Full: the value past the page is not read.
                            more = true;
                            break;
                        }
                        let value = value_of(store, &key, row.get_value(1)?)?;
                        if !pager.admit(value.len()) {
                            more = true;
                            break;
                        }
                        entries.push((key, value));
                    }
                    // Stopping early is deliberate (the rest of the table is
                    // not needed); dropping the rows ends the statement and
                    // its read snapshot before the connection goes back.
                    drop(rows);
                    Ok((entries, more))
                })
            })
            .await
    }

    async fn scan_keys(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        now: i64,
    ) -> AlkResult<(Vec<String>, bool)> {
        let store = &self.store;
        store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = match after {
                        Some(after) => query(&conn, SCAN_KEYS_AFTER, (after,)).await?,
                        None => query(&conn, SCAN_KEYS, (prefix,)).await?,
                    };
                    let mut keys: Vec<String> = Vec::new();
                    let mut more = false;
                    while let Some(row) = rows.next().await? {
                        let key = match row.get_value(0)? {
                            Value::Text(k) => k,
                            other => return Err(corrupt(store, "?", "key", &other)),
                        };
                        // As in `scan_prefix`: the first key without the
                        // prefix ends the prefix's keys.
                        if !key.starts_with(prefix) {
                            break;
                        }
                        if expired(expiry_of(store, &key, row.get_value(1)?)?, now) {
                            continue;
                        }
                        if keys.len() == limit {
                            more = true;
                            break;
                        }
                        keys.push(key);
                    }
                    drop(rows);
                    Ok((keys, more))
                })
            })
            .await
    }
}

/// The conditional upsert that wins on an absent or expired key.
async fn put_if_absent(
    conn: &Connection,
    v2: bool,
    key: &str,
    value: &[u8],
    expires_at: Option<i64>,
    now: i64,
) -> Result<bool, Failure> {
    let changed = if v2 {
        exec(
            conn,
            PUT_IF_ABSENT_V2,
            (key, value.to_vec(), expires_at, fresh_version(), now),
        )
        .await?
    } else {
        exec(conn, PUT_IF_ABSENT, (key, value.to_vec(), expires_at, now)).await?
    };
    Ok(changed == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::text_or_null;

    const DOC: &str = include_str!("../../../docs/formats/localkv.v1.md");
    const DOC_V2: &str = include_str!("../../../docs/formats/localkv.v2.md");

    #[test]
    fn the_format_document_pins_the_ddl_and_every_statement() {
        crate::assert_document_pins(
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
                ("SCAN_AFTER", SCAN_AFTER),
                ("SCAN_KEYS", SCAN_KEYS),
                ("SCAN_KEYS_AFTER", SCAN_KEYS_AFTER),
                ("SWAP", SWAP),
            ],
        );
        crate::assert_document_pins(
            "localkv.v2.md",
            DOC_V2,
            &[
                ("DDL_V2", DDL_V2),
                ("SELECT", SELECT),
                ("SELECT_V2", SELECT_V2),
                ("PUT_V2", PUT_V2),
                ("PUT_IF_ABSENT_V2", PUT_IF_ABSENT_V2),
                ("PUT_IF_VERSION_V2", PUT_IF_VERSION_V2),
                ("SWAP_V2", SWAP_V2),
                ("MIGRATE", MIGRATE),
            ],
        );
    }

    /// The v2 DDL is the shared format's, character for character (the
    /// schema text a file carries is the same whoever created it).
    #[test]
    fn the_v2_ddl_is_the_shared_formats_exactly() {
        let spec = "CREATE TABLE IF NOT EXISTS kv (\n    key        TEXT PRIMARY KEY,\n    value      BLOB NOT NULL,\n    expires_at INTEGER,         -- unix epoch MILLISECONDS, NULL = no expiry\n    version    TEXT NOT NULL    -- changes on every applied put\n);";
        assert!(DDL_V2.contains(spec));
        assert!(MIGRATE.contains(spec));
    }

    /// The text the file records for its `kv` table, if it has one.
    async fn kv_table_sql(store: &Store) -> Option<String> {
        store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows =
                        query(&conn, "SELECT sql FROM sqlite_schema WHERE name = 'kv'", ()).await?;
                    let mut sql = None;
                    while let Some(row) = rows.next().await? {
                        sql = text_or_null(&row, 0)?;
                    }
                    Ok(sql)
                })
            })
            .await
            .unwrap()
    }

    fn v2_options() -> StoreOptions {
        StoreOptions {
            new_kv: NewKv::V2,
            ..StoreOptions::default()
        }
    }

    /// New buckets follow the configuration; an existing file keeps its
    /// format whatever the configuration says.
    #[tokio::test]
    async fn new_buckets_follow_the_configuration_and_old_ones_keep_their_format() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = KvStore::open(dir.path(), "a", StoreOptions::default())
            .await
            .unwrap();
        let v2 = KvStore::open(dir.path(), "b", v2_options()).await.unwrap();
        assert!(!v1.is_v2().await.unwrap());
        assert!(v2.is_v2().await.unwrap());
        v1.store.close_for_test();
        v2.store.close_for_test();
        drop((v1, v2));
        let a = KvStore::open(dir.path(), "a", v2_options()).await.unwrap();
        let b = KvStore::open(dir.path(), "b", StoreOptions::default())
            .await
            .unwrap();
        assert!(!a.is_v2().await.unwrap());
        assert!(b.is_v2().await.unwrap());
        // Every applied put writes a fresh version.
        b.set("k", b"1", None).await.unwrap();
        let (_, e1) = b.read_for_swap("k", 0).await.unwrap().unwrap();
        b.set("k", b"1", None).await.unwrap();
        let (_, e2) = b.read_for_swap("k", 0).await.unwrap().unwrap();
        match (&e1, &e2) {
            (Expected::Version(x), Expected::Version(y)) => {
                assert_ne!(x, y);
                assert_eq!(x.len(), 32);
            }
            other => panic!("{other:?}"),
        }
        // A v2 swap compares versions: the same value written again in
        // between makes the older reading lose.
        assert!(!b.swap("k", &e1, b"2", None, 0).await.unwrap());
        assert!(b.swap("k", &e2, b"2", None, 0).await.unwrap());
        // A v1 swap compares values.
        a.set("k", b"1", None).await.unwrap();
        let (_, e) = a.read_for_swap("k", 0).await.unwrap().unwrap();
        assert_eq!(e, Expected::Value(b"1".to_vec()));
        a.set("k", b"1", None).await.unwrap();
        assert!(a.swap("k", &e, b"2", None, 0).await.unwrap());
    }

    /// The migration keeps every key, value and expiry, gives each a
    /// version, leaves exactly the v2 schema, and refuses while the bucket
    /// is open elsewhere.
    #[tokio::test]
    async fn migration_moves_every_row_to_v2_in_one_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let kv = KvStore::open(dir.path(), "m", StoreOptions::default())
            .await
            .unwrap();
        let entries: Vec<(String, Vec<u8>)> = (0..50)
            .map(|i| (format!("k{i:02}"), vec![i as u8; i]))
            .collect();
        kv.set_many(&entries, None).await.unwrap();
        kv.set("ttl", b"t", Some(123)).await.unwrap();
        assert!(matches!(
            KvStore::migrate(dir.path(), "m", StoreOptions::default()).await,
            Err(AlkError::Busy(_))
        ));
        kv.store.close_for_test();
        drop(kv);
        assert_eq!(
            KvStore::migrate(dir.path(), "m", StoreOptions::default())
                .await
                .unwrap(),
            Migrated::Upgraded
        );
        assert_eq!(
            KvStore::migrate(dir.path(), "m", StoreOptions::default())
                .await
                .unwrap(),
            Migrated::AlreadyV2
        );
        assert!(matches!(
            KvStore::migrate(dir.path(), "none", StoreOptions::default()).await,
            Err(AlkError::InvalidArgument(_))
        ));
        let kv = KvStore::open(dir.path(), "m", StoreOptions::default())
            .await
            .unwrap();
        assert!(kv.is_v2().await.unwrap());
        let keys: Vec<String> = entries.iter().map(|(k, _)| k.clone()).collect();
        let got = kv.get_many(&keys, 0, usize::MAX).await.unwrap();
        let want: Vec<Option<Vec<u8>>> = entries.iter().map(|(_, v)| Some(v.clone())).collect();
        assert_eq!(got, want);
        assert_eq!(kv.get("ttl", 122).await.unwrap(), Some(b"t".to_vec()));
        assert_eq!(kv.get("ttl", 123).await.unwrap(), None);
        let (_, e) = kv.read_for_swap("k01", 0).await.unwrap().unwrap();
        assert!(matches!(e, Expected::Version(v) if v.len() == 32));
        // The table is the one a new v2 file has, as the engine records it.
        let fresh = KvStore::open(dir.path(), "fresh", v2_options())
            .await
            .unwrap();
        assert_eq!(
            kv_table_sql(&kv.store).await,
            kv_table_sql(&fresh.store).await
        );
    }

    /// A bucket whose idle database this process closed (as it does past
    /// its open-store budget) can be migrated by another process; the
    /// bucket in use then writes what the file now is: every put a version,
    /// and a swap from a reading taken before the migration compares the
    /// value.
    #[tokio::test]
    async fn a_bucket_migrated_while_its_database_was_closed_writes_v2_rows() {
        let dir = tempfile::tempdir().unwrap();
        let kv = KvStore::open(dir.path(), "live", StoreOptions::default())
            .await
            .unwrap();
        kv.set("old", b"1", None).await.unwrap();
        let (_, before) = kv.read_for_swap("old", 0).await.unwrap().unwrap();
        assert_eq!(before, Expected::Value(b"1".to_vec()));
        kv.store.close_for_test();
        assert_eq!(
            KvStore::migrate(dir.path(), "live", StoreOptions::default())
                .await
                .unwrap(),
            Migrated::Upgraded
        );
        kv.set("new", b"2", None).await.unwrap();
        kv.set_many(&[("many".into(), b"3".to_vec())], None)
            .await
            .unwrap();
        assert!(kv.set_if_absent("absent", b"4", None, 0).await.unwrap());
        assert!(kv.swap("old", &before, b"5", None, 0).await.unwrap());
        for key in ["new", "many", "absent", "old"] {
            let (_, e) = kv.read_for_swap(key, 0).await.unwrap().unwrap();
            assert!(
                matches!(&e, Expected::Version(v) if v.len() == 32),
                "{key}: {e:?}"
            );
        }
    }

    /// A v2 file whose `kv` table is missing (another program stopped after
    /// writing the marker) gets it back exactly as a new file has it (the
    /// engine records the text of a table it creates in a normal form,
    /// without the DDL's comments, whether it creates or repairs).
    #[tokio::test]
    async fn a_repaired_table_has_the_schema_text_of_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = KvStore::open(dir.path(), "fresh", v2_options())
            .await
            .unwrap();
        let want = kv_table_sql(&fresh.store).await.expect("a kv table");
        assert!(want.contains("version TEXT NOT NULL"), "{want}");
        let damaged = KvStore::open(dir.path(), "damaged", v2_options())
            .await
            .unwrap();
        crate::write_sql(&damaged.store, "DROP TABLE kv").await;
        assert_eq!(kv_table_sql(&damaged.store).await, None);
        damaged.store.close_for_test();
        drop(damaged);
        let repaired = KvStore::open(dir.path(), "damaged", StoreOptions::default())
            .await
            .unwrap();
        assert!(repaired.is_v2().await.unwrap());
        assert_eq!(kv_table_sql(&repaired.store).await.as_deref(), Some(&*want));
        repaired.set("k", b"v", None).await.unwrap();
        assert_eq!(
            repaired.get("k", 0).await.unwrap().as_deref(),
            Some(&b"v"[..])
        );
    }

    /// Values another program stored as TEXT, and versions of another
    /// type, still take part in compare-and-swap (increments included).
    #[tokio::test]
    async fn text_values_and_foreign_versions_swap() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = KvStore::open(dir.path(), "a", StoreOptions::default())
            .await
            .unwrap();
        crate::write_sql(
            &v1.store,
            "INSERT INTO kv (key, value, expires_at) VALUES ('c', '5', NULL)",
        )
        .await;
        let (v, e) = v1.read_for_swap("c", 0).await.unwrap().unwrap();
        assert_eq!(v, b"5");
        assert!(v1.swap("c", &e, b"6", None, 0).await.unwrap());
        let v2 = KvStore::open(dir.path(), "b", v2_options()).await.unwrap();
        crate::write_sql(
            &v2.store,
            "INSERT INTO kv (key, value, expires_at, version) VALUES ('c', '5', NULL, x'07')",
        )
        .await;
        let (v, e) = v2.read_for_swap("c", 0).await.unwrap().unwrap();
        assert_eq!(
            (v.as_slice(), &e),
            (&b"5"[..], &Expected::Value(b"5".to_vec()))
        );
        assert!(
            !v2.swap("c", &Expected::Value(b"4".to_vec()), b"6", None, 0)
                .await
                .unwrap()
        );
        assert!(v2.swap("c", &e, b"6", None, 0).await.unwrap());
        let (v, e) = v2.read_for_swap("c", 0).await.unwrap().unwrap();
        assert_eq!(v, b"6");
        assert!(matches!(e, Expected::Version(v) if v.len() == 32));
    }

    /// Migration refuses a file that is not a kv store (an empty one
    /// included) and leaves it as it was.
    #[tokio::test]
    async fn migration_refuses_what_is_not_a_kv_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = bucket_path(dir.path(), "e");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"").unwrap();
        assert!(matches!(
            KvStore::migrate(dir.path(), "e", StoreOptions::default()).await,
            Err(AlkError::InvalidArgument(_))
        ));
        assert_eq!(std::fs::read(&path).unwrap(), b"");
        assert!(!path.with_file_name("localkv.sqlite-wal").exists());
    }

    #[tokio::test]
    async fn a_row_that_breaks_the_format_is_an_internal_error_naming_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let kv = KvStore::open(dir.path(), "b", crate::RetryPolicy::default())
            .await
            .unwrap();
        crate::write_sql(
            &kv.store,
            "INSERT INTO kv (key, value, expires_at) VALUES ('k', x'76', 'soon')",
        )
        .await;
        match kv.get("k", 0).await {
            Err(AlkError::Internal(m)) => {
                assert!(
                    m.contains("localkv.sqlite") && m.contains("expires_at"),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}
