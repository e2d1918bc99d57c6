//! Key-value buckets: the rules, and the trait an engine implements.

use std::sync::Arc;

use async_trait::async_trait;

use crate::engine::Engine;
use crate::error::{AlkError, AlkResult};
use crate::limits::{KvLimits, MAX_READ_BYTES, MAX_SCAN_LIMIT, check_batch};
use crate::names::{check_key, check_name, check_size};
use crate::time::expiry;

/// One page of a prefix scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanPage {
    /// Live entries, in key order (byte order of the UTF-8 key).
    pub entries: Vec<(String, Vec<u8>)>,
    /// The cursor of the next page, if there is one.
    pub next_cursor: Option<String>,
}

/// What an engine does for one bucket. Arguments are checked by [`Bucket`];
/// times are epoch milliseconds. A key is live when it has no expiry or its
/// expiry is after `now` (`expires_at == now` is expired).
#[async_trait]
pub trait KvEngine: Send + Sync {
    /// The live value of `key`; an expired one found is deleted.
    async fn get(&self, key: &str, now: i64) -> AlkResult<Option<Vec<u8>>>;

    /// The live values of `keys` in order, stopping (after at least one)
    /// before the values would pass `max_bytes`; expired keys found are
    /// deleted.
    async fn get_many(
        &self,
        keys: &[String],
        now: i64,
        max_bytes: usize,
    ) -> AlkResult<Vec<Option<Vec<u8>>>>;

    /// Stores `value` under `key` with the absolute expiry `expires_at`.
    async fn set(&self, key: &str, value: &[u8], expires_at: Option<i64>) -> AlkResult<()>;

    /// Stores every entry, all or none.
    async fn set_many(
        &self,
        entries: &[(String, Vec<u8>)],
        expires_at: Option<i64>,
    ) -> AlkResult<()>;

    /// Stores `value` when `key` is absent or expired at `now`, in one
    /// atomic step (of any number of racing callers, in any process,
    /// exactly one wins); whether this call won.
    async fn set_if_absent(
        &self,
        key: &str,
        value: &[u8],
        expires_at: Option<i64>,
        now: i64,
    ) -> AlkResult<bool>;

    /// Removes `key`.
    async fn delete(&self, key: &str) -> AlkResult<()>;

    /// Live entries whose key starts with `prefix`, in byte order of the
    /// key, skipping the first `skip` of them, at most `limit`, stopping
    /// (after at least one) before the values would pass `max_bytes`; and
    /// whether more follow. Expired entries are skipped, not deleted.
    async fn scan_prefix(
        &self,
        prefix: &str,
        skip: u64,
        limit: usize,
        now: i64,
        max_bytes: usize,
    ) -> AlkResult<(Vec<(String, Vec<u8>)>, bool)>;
}

/// A bucket, as guests use it: every call checks its arguments, then asks
/// the engine.
#[derive(Clone)]
pub struct Bucket {
    name: String,
    engine: Arc<dyn KvEngine>,
    limits: KvLimits,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket").field("name", &self.name).finish()
    }
}

impl Bucket {
    /// Opens (creating on first use) bucket `name` of `engine`.
    pub async fn open(engine: &dyn Engine, name: &str, limits: KvLimits) -> AlkResult<Bucket> {
        check_name("bucket", name)?;
        Ok(Bucket {
            name: name.to_string(),
            engine: engine.bucket(name).await?,
            limits,
        })
    }

    /// The bucket's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn check_key(&self, key: &str) -> AlkResult<()> {
        check_key("key", key, self.limits.max_key_bytes)
    }

    fn check_value(&self, value: &[u8]) -> AlkResult<()> {
        check_size("value", value.len(), self.limits.max_value_bytes)
    }

    /// The value of `key` at `now`, `None` when absent or expired.
    pub async fn get(&self, key: &str, now: i64) -> AlkResult<Option<Vec<u8>>> {
        self.check_key(key)?;
        self.engine.get(key, now).await
    }

    /// Whether `key` is live at `now`.
    pub async fn exists(&self, key: &str, now: i64) -> AlkResult<bool> {
        Ok(self.get(key, now).await?.is_some())
    }

    /// The values of `keys` at `now`, in order. The list stops early, after
    /// at least one key, when the values would pass [`MAX_READ_BYTES`]: the
    /// caller asks again for the keys after the last one returned.
    pub async fn get_many(&self, keys: &[String], now: i64) -> AlkResult<Vec<Option<Vec<u8>>>> {
        check_batch("keys", keys.len())?;
        for key in keys {
            self.check_key(key)?;
        }
        self.engine.get_many(keys, now, MAX_READ_BYTES).await
    }

    /// Stores `value` under `key`, expiring `ttl_ms` after `now` if given.
    pub async fn set(
        &self,
        key: &str,
        value: &[u8],
        ttl_ms: Option<u64>,
        now: i64,
    ) -> AlkResult<()> {
        self.check_key(key)?;
        self.check_value(value)?;
        let expires_at = expiry(ttl_ms, now)?;
        self.engine.set(key, value, expires_at).await
    }

    /// Stores every entry with the same TTL, all or none; every entry is
    /// checked before the store is touched.
    pub async fn set_many(
        &self,
        entries: &[(String, Vec<u8>)],
        ttl_ms: Option<u64>,
        now: i64,
    ) -> AlkResult<()> {
        check_batch("entries", entries.len())?;
        for (key, value) in entries {
            self.check_key(key)?;
            self.check_value(value)?;
        }
        let expires_at = expiry(ttl_ms, now)?;
        self.engine.set_many(entries, expires_at).await
    }

    /// Stores `value` when `key` is absent or expired at `now`; whether
    /// this call won.
    pub async fn set_if_absent(
        &self,
        key: &str,
        value: &[u8],
        ttl_ms: Option<u64>,
        now: i64,
    ) -> AlkResult<bool> {
        self.check_key(key)?;
        self.check_value(value)?;
        let expires_at = expiry(ttl_ms, now)?;
        self.engine.set_if_absent(key, value, expires_at, now).await
    }

    /// Removes `key`.
    pub async fn delete(&self, key: &str) -> AlkResult<()> {
        self.check_key(key)?;
        self.engine.delete(key).await
    }

    /// One page of live entries whose key starts with `prefix`.
    ///
    /// The cursor is the number of live matching entries already returned,
    /// as a canonical decimal string; anything else is `invalid-argument`.
    /// `limit` is clamped to 1..=[`MAX_SCAN_LIMIT`]; a page also ends,
    /// after at least one entry, when its values would pass
    /// [`MAX_READ_BYTES`].
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
        let skip: u64 = match cursor {
            None => 0,
            // Only canonical decimals are cursors this bucket hands out.
            Some(c) => c
                .parse::<u64>()
                .ok()
                .filter(|n| n.to_string() == c)
                .ok_or_else(|| {
                    AlkError::InvalidArgument(format!("cursor {c:?} is not a scan cursor"))
                })?,
        };
        let limit = limit.clamp(1, MAX_SCAN_LIMIT) as usize;
        let (entries, more) = self
            .engine
            .scan_prefix(prefix, skip, limit, now, MAX_READ_BYTES)
            .await?;
        let next_cursor = more.then(|| (skip + entries.len() as u64).to_string());
        Ok(ScanPage {
            entries,
            next_cursor,
        })
    }
}
