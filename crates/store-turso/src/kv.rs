//! `localkv.v1`: the key-value store format and its only implementation.
//!
//! The schema and every statement are defined here, once, and pinned by
//! `docs/formats/localkv.v1.md`; a test checks that the document carries the
//! same DDL and statements. Any change to either must change both, and an
//! incompatible change must bump the format marker.

use std::path::{Path, PathBuf};

use alk_store::kv::KvEngine;
use alk_store::{AlkError, AlkResult};
use async_trait::async_trait;
use turso::{Connection, Value};

use crate::open::{Format, Store, StoreOptions, open_store};
use crate::retry::{Failure, exec, query};

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
    also: &[],
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

/// A `localkv.v1` bucket: `<data-dir>/kv/<bucket>/localkv.sqlite`.
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
        "{}: key {key:?} has {found:?} in {column}, which localkv.v1 does not allow; the store is corrupt",
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
        let store = open_store(&bucket_path(data_dir, bucket), &FORMAT, options).await?;
        Ok(KvStore { store })
    }

    /// The bucket's file.
    pub fn path(&self) -> &Path {
        self.store.path()
    }
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
                    let mut bytes = 0usize;
                    for key in keys {
                        let found = select(store, &conn, key).await?;
                        if let Some((value, _)) = &found {
                            if !out.is_empty() && bytes + value.len() > max_bytes {
                                break;
                            }
                            bytes += value.len();
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
            .run_write(|conn: Connection| {
                Box::pin(async move {
                    exec(&conn, PUT, (key, value.to_vec(), expires_at)).await?;
                    Ok(())
                })
            })
            .await
    }

    async fn set_many(
        &self,
        entries: &[(String, Vec<u8>)],
        expires_at: Option<i64>,
    ) -> AlkResult<()> {
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

    async fn set_if_absent(
        &self,
        key: &str,
        value: &[u8],
        expires_at: Option<i64>,
        now: i64,
    ) -> AlkResult<bool> {
        self.store
            .run_write(|conn: Connection| {
                Box::pin(async move {
                    let changed =
                        exec(&conn, PUT_IF_ABSENT, (key, value.to_vec(), expires_at, now)).await?;
                    Ok(changed == 1)
                })
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

    async fn scan_prefix(
        &self,
        prefix: &str,
        skip: u64,
        limit: usize,
        now: i64,
        max_bytes: usize,
    ) -> AlkResult<(Vec<(String, Vec<u8>)>, bool)> {
        let store = &self.store;
        store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, SCAN, (prefix,)).await?;
                    let mut skipped = 0u64;
                    let mut entries: Vec<(String, Vec<u8>)> = Vec::new();
                    let mut bytes = 0usize;
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
                        if skipped < skip {
                            skipped += 1;
                            continue;
                        }
                        if entries.len() == limit {
                            more = true;
                            break;
                        }
                        let value = value_of(store, &key, row.get_value(1)?)?;
                        if !entries.is_empty() && bytes + value.len() > max_bytes {
                            more = true;
                            break;
                        }
                        bytes += value.len();
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
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = include_str!("../../../docs/formats/localkv.v1.md");

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
            ],
        );
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
