//! Key-value buckets: the rules, and the trait an engine implements.

use std::sync::Arc;

use async_trait::async_trait;

use crate::engine::Engine;
use crate::error::{AlkError, AlkResult};
use crate::limits::{KvLimits, MAX_READ_BYTES, MAX_SCAN_LIMIT, check_batch};
use crate::names::{check_key, check_name, check_size};
use crate::time::{Clock, expiry};

/// One page of a prefix scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanPage {
    /// Live entries, in key order (byte order of the UTF-8 key).
    pub entries: Vec<(String, Vec<u8>)>,
    /// The cursor of the next page, if there is one.
    pub next_cursor: Option<String>,
}

/// One page of [`Bucket::scan_keys`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeysPage {
    /// Live keys, in byte order of the UTF-8 key.
    pub keys: Vec<String>,
    /// The cursor of the next page, if there is one: the same cursors as
    /// [`Bucket::scan_prefix`] hands out.
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

    /// Removes every key of `keys`, all or none.
    async fn delete_many(&self, keys: &[String]) -> AlkResult<()>;

    /// Live entries whose key starts with `prefix` and, given `after`,
    /// sorts after it, in byte order of the key, at most `limit`, stopping
    /// (after at least one) before the values would pass `max_bytes`; and
    /// whether more follow. Expired entries are skipped, not deleted.
    async fn scan_prefix(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        now: i64,
        max_bytes: usize,
    ) -> AlkResult<(Vec<(String, Vec<u8>)>, bool)>;

    /// [`KvEngine::scan_prefix`] without the values: the live keys, at
    /// most `limit`, and whether more follow. No value is read.
    async fn scan_keys(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        now: i64,
    ) -> AlkResult<(Vec<String>, bool)>;

    /// The live value of `key` and what a later [`KvEngine::swap`] expects
    /// to find: its version where the store keeps one, else the value. An
    /// expired key found reads as absent.
    async fn read_for_swap(&self, key: &str, now: i64) -> AlkResult<Option<(Vec<u8>, Expected)>>;

    /// Stores `value` under `key` with the absolute expiry `expires_at` in
    /// one conditional statement, only when the key still holds what
    /// `expected` describes at `now`; whether it did (of racing swaps from
    /// the same reading, exactly one wins).
    async fn swap(
        &self,
        key: &str,
        expected: &Expected,
        value: &[u8],
        expires_at: Option<i64>,
        now: i64,
    ) -> AlkResult<bool>;
}

/// What a compare-and-swap expects to find under its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// No live value (absent or expired).
    Absent,
    /// This live value (stores without versions compare values).
    Value(Vec<u8>),
    /// The live value written with this version (`localkv.v2`).
    Version(String),
}

/// The form of the scan cursors a bucket hands out: this tag, the length
/// in bytes of the prefix scanned, `.`, then the last key returned,
/// hex-encoded.
const CURSOR_TAG: &str = "k1.";

/// The cursor that resumes a scan of `prefix` after `key`.
pub fn cursor_after(prefix: &str, key: &str) -> String {
    let mut c = format!("{CURSOR_TAG}{}.", prefix.len());
    for b in key.as_bytes() {
        c.push_str(&format!("{b:02x}"));
    }
    c
}

/// Longest key a cursor may name: larger than any key limit, so a key that
/// another program (or a host with a larger limit) stored still pages.
const MAX_CURSOR_KEY_BYTES: usize = 1024 * 1024;

/// The key a cursor of prefix `prefix` resumes after, or why it is not one
/// (`invalid-argument`).
pub fn cursor_key(cursor: &str, prefix: &str) -> AlkResult<String> {
    let refuse = |why: &str| {
        // Quote a bounded, printable part of what the caller sent.
        let shown: String = cursor.chars().take(64).collect();
        let more = if shown.len() < cursor.len() {
            "…"
        } else {
            ""
        };
        AlkError::InvalidArgument(format!(
            "cursor {shown:?}{more} is not a scan cursor of prefix {:?} ({why}); pass back the next-cursor of a page of the same prefix, or start again without a cursor",
            prefix.chars().take(64).collect::<String>()
        ))
    };
    if cursor.len() > CURSOR_TAG.len() + 21 + 2 * MAX_CURSOR_KEY_BYTES {
        return Err(refuse("too long"));
    }
    if !cursor.is_empty() && cursor.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refuse(
            "it looks like an offset cursor, which earlier versions handed out; cursors now resume after a key",
        ));
    }
    let (len, hex) = cursor
        .strip_prefix(CURSOR_TAG)
        .and_then(|rest| rest.split_once('.'))
        .ok_or_else(|| refuse("not a cursor this host hands out"))?;
    if len != prefix.len().to_string() {
        return Err(refuse("it belongs to another prefix"));
    }
    let hex = hex.as_bytes();
    if hex.len() % 2 != 0
        || !hex
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return Err(refuse("malformed"));
    }
    let nibble = |b: u8| {
        if b.is_ascii_digit() {
            b - b'0'
        } else {
            b - b'a' + 10
        }
    };
    let bytes: Vec<u8> = hex
        .chunks(2)
        .map(|pair| nibble(pair[0]) << 4 | nibble(pair[1]))
        .collect();
    let key = String::from_utf8(bytes).map_err(|_| refuse("malformed"))?;
    if key.contains('\0') {
        return Err(refuse("malformed"));
    }
    if !key.starts_with(prefix) {
        return Err(refuse("it belongs to another prefix"));
    }
    Ok(key)
}

/// The turn of this process's increments of `key` in bucket `bucket`: one
/// at a time per key. The table keeps only keys being incremented (entries
/// whose lock nobody holds are pruned as it grows).
async fn increment_turn(bucket: &str, key: &str) -> tokio::sync::OwnedMutexGuard<()> {
    type Turns = std::collections::HashMap<(String, String), std::sync::Weak<tokio::sync::Mutex<()>>>;
    static TURNS: std::sync::OnceLock<std::sync::Mutex<Turns>> = std::sync::OnceLock::new();
    let lock = {
        let mut turns = TURNS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if turns.len() >= 1024 {
            turns.retain(|_, w| w.strong_count() > 0);
        }
        let name = (bucket.to_string(), key.to_string());
        match turns.get(&name).and_then(std::sync::Weak::upgrade) {
            Some(lock) => lock,
            None => {
                let lock = Arc::new(tokio::sync::Mutex::new(()));
                turns.insert(name, Arc::downgrade(&lock));
                lock
            }
        }
    };
    lock.lock_owned().await
}

/// A number below `n` from the clock's nanoseconds: enough to spread
/// retries of racing writers apart.
fn clock_jitter(n: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    u64::from(nanos) % n.max(1)
}

/// Most attempts of an increment that keeps losing its compare-and-swap to
/// other writers before it gives up with `busy`.
const MAX_INCREMENT_ATTEMPTS: usize = 1000;

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

    /// Removes every key of `keys` (up to [`crate::limits::MAX_BATCH`]),
    /// all or none; every key is checked first.
    pub async fn delete_many(&self, keys: &[String]) -> AlkResult<()> {
        check_batch("keys", keys.len())?;
        for key in keys {
            self.check_key(key)?;
        }
        self.engine.delete_many(keys).await
    }

    /// The live value of `key` at `now` and what [`Bucket::swap`] expects
    /// to find there for the swap to win.
    pub async fn read_for_swap(
        &self,
        key: &str,
        now: i64,
    ) -> AlkResult<(Option<Vec<u8>>, Expected)> {
        self.check_key(key)?;
        Ok(match self.engine.read_for_swap(key, now).await? {
            Some((value, expected)) => (Some(value), expected),
            None => (None, Expected::Absent),
        })
    }

    /// Stores `value` (without expiry) under `key` only when it still holds
    /// what `expected` (from [`Bucket::read_for_swap`]) describes; whether
    /// it did. One conditional statement: of racing swaps from the same
    /// reading, in any number of processes, exactly one wins.
    pub async fn swap(
        &self,
        key: &str,
        expected: &Expected,
        value: &[u8],
        now: i64,
    ) -> AlkResult<bool> {
        self.check_key(key)?;
        self.check_value(value)?;
        self.engine.swap(key, expected, value, None, now).await
    }

    /// Adds `delta` to the counter under `key` and returns the new value.
    ///
    /// A counter is stored as the decimal text of an integer (an absent or
    /// expired key counts as 0). A value that is not such text, or a result
    /// outside `range`, is `invalid-argument` and changes nothing. The
    /// update is a compare-and-swap, retried while other writers change the
    /// key in between: increments from any number of processes all count.
    /// The counter loses any TTL the key had. Increments of one key made in
    /// this process take turns, so they never lose their swaps to each
    /// other (only to other processes'), however many run at once.
    pub async fn increment(
        &self,
        key: &str,
        delta: i128,
        range: std::ops::RangeInclusive<i128>,
        clock: &dyn Clock,
    ) -> AlkResult<i128> {
        self.check_key(key)?;
        let _turn = increment_turn(&self.name, key).await;
        for attempt in 0..MAX_INCREMENT_ATTEMPTS {
            let (current, expected) = self.read_for_swap(key, clock.now_ms()).await?;
            let old: i128 = match &current {
                None => 0,
                Some(v) => std::str::from_utf8(v)
                    .ok()
                    .filter(|t| !t.is_empty() && t.len() <= 40)
                    .and_then(|t| t.parse::<i128>().ok())
                    .filter(|n| range.contains(n))
                    .ok_or_else(|| {
                        AlkError::InvalidArgument(format!(
                            "the value of key {key:?} is not a counter (the decimal text of an integer from {} to {}); nothing was changed",
                            range.start(),
                            range.end()
                        ))
                    })?,
            };
            let new = old
                .checked_add(delta)
                .filter(|n| range.contains(n))
                .ok_or_else(|| {
                    AlkError::InvalidArgument(format!(
                        "incrementing key {key:?} ({old}) by {delta} overflows (the counter runs from {} to {}); nothing was changed",
                        range.start(),
                        range.end()
                    ))
                })?;
            if self
                .engine
                .swap(key, &expected, new.to_string().as_bytes(), None, clock.now_ms())
                .await?
            {
                return Ok(new);
            }
            // Another writer got in between: give it room before reading
            // again (up to 1 ms, growing with the attempts lost).
            let pause = (attempt as u64 + 1).min(10) * 100;
            tokio::time::sleep(std::time::Duration::from_micros(
                pause / 2 + clock_jitter(pause / 2 + 1),
            ))
            .await;
        }
        Err(AlkError::Busy(format!(
            "incrementing key {key:?} lost to other writers {MAX_INCREMENT_ATTEMPTS} times in a row; retry"
        )))
    }

    /// One page of live entries whose key starts with `prefix`.
    ///
    /// The cursor names the last key of the previous page, so the next page
    /// starts right after it whatever was written in between (keys present
    /// during the whole scan are returned exactly once, in order). A cursor
    /// this bucket did not hand out for the same prefix, an offset cursor of
    /// earlier versions included, is `invalid-argument`. `limit` is clamped
    /// to 1..=[`MAX_SCAN_LIMIT`]; a page also ends, after at least one
    /// entry, when its values would pass [`MAX_READ_BYTES`].
    pub async fn scan_prefix(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
        now: i64,
    ) -> AlkResult<ScanPage> {
        let (after, limit) = self.check_scan(prefix, cursor, limit)?;
        let (entries, more) = self
            .engine
            .scan_prefix(prefix, after.as_deref(), limit, now, MAX_READ_BYTES)
            .await?;
        let next_cursor = more
            .then(|| entries.last().map(|(k, _)| cursor_after(prefix, k)))
            .flatten();
        Ok(ScanPage {
            entries,
            next_cursor,
        })
    }

    /// The live keys starting with `prefix`, in byte order, without their
    /// values: [`Bucket::scan_prefix`]'s pages and cursors (the two take
    /// each other's cursors), except that a page ends only at `limit`
    /// (keys are small: at most 1,000 of at most 1 KiB), however large the
    /// values are.
    pub async fn scan_keys(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
        now: i64,
    ) -> AlkResult<KeysPage> {
        let (after, limit) = self.check_scan(prefix, cursor, limit)?;
        let (keys, more) = self
            .engine
            .scan_keys(prefix, after.as_deref(), limit, now)
            .await?;
        let next_cursor = more
            .then(|| keys.last().map(|k| cursor_after(prefix, k)))
            .flatten();
        Ok(KeysPage { keys, next_cursor })
    }

    /// Checks a scan's prefix and cursor: the key the page starts after,
    /// and the clamped limit.
    fn check_scan(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> AlkResult<(Option<String>, usize)> {
        if prefix.len() > self.limits.max_key_bytes {
            return Err(AlkError::PayloadTooLarge {
                what: "prefix",
                size: prefix.len() as u64,
                limit: self.limits.max_key_bytes as u64,
            });
        }
        if prefix.contains('\0') {
            // No key holds NUL, so no key could match: refused like a key
            // with NUL, the same on every engine.
            return Err(AlkError::InvalidArgument(
                "prefix contains a NUL character, which no key may hold".into(),
            ));
        }
        let after = cursor.map(|c| cursor_key(c, prefix)).transpose()?;
        Ok((after, limit.clamp(1, MAX_SCAN_LIMIT) as usize))
    }
}
