//! Buckets: rows of `kv`, keyed by bucket and key in byte order.

use std::collections::HashMap;
use std::sync::Arc;

use alk_store::kv::{Expected, KvEngine};
use alk_store::limits::page;
use alk_store::{AlkError, AlkResult};
use async_trait::async_trait;

use crate::conn::{Fail, Inner};

// The statements of this module (each listed by name in
// `sql::STATEMENTS`, which a test checks against the format document).

/// A key's value and expiry.
pub const KV_GET: &str = "SELECT value, expires_at FROM alk.kv WHERE bucket = $1 AND key = $2";
/// Lazily deletes a key found expired by a read.
pub const KV_DELETE_EXPIRED: &str =
    "DELETE FROM alk.kv WHERE bucket = $1 AND key = $2 AND expires_at <= $3";
/// Lazily deletes the expired keys among several found by a read.
pub const KV_DELETE_EXPIRED_MANY: &str =
    "DELETE FROM alk.kv WHERE bucket = $1 AND key = ANY($2) AND expires_at <= $3";
/// Several keys at once, in the order asked (`ord`, from 1), with each
/// value's size; a value itself only while the sizes of the live values up
/// to it stay within `$4` bytes (or it is the first): what a read of many
/// returns in one answer is cut here, so values past the cap never leave
/// the server.
pub const KV_GET_MANY: &str = "SELECT ord, size, CASE WHEN running <= $4 OR running = size THEN value END, expired FROM (\
SELECT r.ord, length(k.value)::bigint AS size, k.value, k.expires_at <= $3 IS TRUE AS expired, \
sum(CASE WHEN k.expires_at <= $3 THEN 0 ELSE length(k.value) END) OVER (ORDER BY r.ord ROWS UNBOUNDED PRECEDING) AS running \
FROM unnest($2::text[]) WITH ORDINALITY AS r(key, ord) JOIN alk.kv AS k ON k.bucket = $1 AND k.key = r.key) AS sized ORDER BY ord";
/// Unconditional upsert of keys `$2` with values `$3` (one key once).
pub const KV_PUT: &str = "INSERT INTO alk.kv (bucket, key, value, expires_at) \
SELECT $1, t.key, t.value, $4 FROM unnest($2::text[], $3::bytea[]) AS t(key, value) \
ON CONFLICT (bucket, key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at";
/// Conditional upsert: returns a row when the key was absent or expired.
pub const KV_PUT_IF_ABSENT: &str = "INSERT INTO alk.kv AS cur (bucket, key, value, expires_at) \
VALUES ($1, $2, $3, $4) ON CONFLICT (bucket, key) DO UPDATE SET value = EXCLUDED.value, \
expires_at = EXCLUDED.expires_at WHERE cur.expires_at <= $5 RETURNING 1";
/// Deletes a key.
pub const KV_DELETE: &str = "DELETE FROM alk.kv WHERE bucket = $1 AND key = $2";
/// Live keys in `[$2, $3)` in byte order (the range of a prefix), `$2`
/// itself only when `$5` (a page after the first starts at the last key
/// returned, exclusive), at most `$6`, with each value's size; a value
/// itself only while the sizes up to it stay within `$7` bytes (or it is
/// the first).
pub const KV_SCAN_RANGE: &str = "SELECT key, size, CASE WHEN running <= $7 OR running = size THEN value END FROM (\
SELECT key, value, length(value)::bigint AS size, sum(length(value)) OVER (ORDER BY key ROWS UNBOUNDED PRECEDING) AS running \
FROM (SELECT key, value FROM alk.kv WHERE bucket = $1 AND key >= $2 AND (key > $2 OR $5) AND key < $3 \
AND (expires_at IS NULL OR expires_at > $4) ORDER BY key LIMIT $6) AS page) AS sized ORDER BY key";
/// [`KV_SCAN_RANGE`] from `$2` on, without an upper end (the empty
/// prefix): now `$3`, `$2` included `$4`, at most `$5`, cap `$6`.
pub const KV_SCAN_FROM: &str = "SELECT key, size, CASE WHEN running <= $6 OR running = size THEN value END FROM (\
SELECT key, value, length(value)::bigint AS size, sum(length(value)) OVER (ORDER BY key ROWS UNBOUNDED PRECEDING) AS running \
FROM (SELECT key, value FROM alk.kv WHERE bucket = $1 AND key >= $2 AND (key > $2 OR $4) \
AND (expires_at IS NULL OR expires_at > $3) ORDER BY key LIMIT $5) AS page) AS sized ORDER BY key";
/// [`KV_SCAN_RANGE`] without the values: a key listing reads none. Bucket
/// `$1`, from `$2` (included when `$5`) to before `$3`, now `$4`, at most
/// `$6` rows.
pub const KV_KEYS_RANGE: &str = "SELECT key FROM alk.kv WHERE bucket = $1 AND key >= $2 AND (key > $2 OR $5) AND key < $3 \
AND (expires_at IS NULL OR expires_at > $4) ORDER BY key LIMIT $6";
/// [`KV_KEYS_RANGE`] without an upper end: now `$3`, `$2` included `$4`,
/// at most `$5`.
pub const KV_KEYS_FROM: &str = "SELECT key FROM alk.kv WHERE bucket = $1 AND key >= $2 AND (key > $2 OR $4) \
AND (expires_at IS NULL OR expires_at > $3) ORDER BY key LIMIT $5";
/// Compare-and-swap by value: returns a row when key `$2` held `$5` and was
/// live at `$6`, and now holds `$3` with expiry `$4`.
pub const KV_SWAP: &str = "UPDATE alk.kv SET value = $3, expires_at = $4 \
WHERE bucket = $1 AND key = $2 AND value = $5 AND (expires_at IS NULL OR expires_at > $6) RETURNING 1";
/// Deletes several keys at once.
pub const KV_DELETE_MANY: &str = "DELETE FROM alk.kv WHERE bucket = $1 AND key = ANY($2)";

/// One bucket.
pub(crate) struct PgBucket {
    inner: Arc<Inner>,
    name: String,
    get: String,
    delete_expired: String,
    get_many: String,
    delete_expired_many: String,
    put: String,
    put_if_absent: String,
    delete: String,
    scan_range: String,
    scan_from: String,
    keys_range: String,
    keys_from: String,
    swap: String,
    delete_many: String,
}

impl PgBucket {
    pub(crate) fn new(inner: Arc<Inner>, name: &str) -> PgBucket {
        let s = &inner.sql;
        PgBucket {
            get: s.get(KV_GET),
            delete_expired: s.get(KV_DELETE_EXPIRED),
            get_many: s.get(KV_GET_MANY),
            delete_expired_many: s.get(KV_DELETE_EXPIRED_MANY),
            put: s.get(KV_PUT),
            put_if_absent: s.get(KV_PUT_IF_ABSENT),
            delete: s.get(KV_DELETE),
            scan_range: s.get(KV_SCAN_RANGE),
            scan_from: s.get(KV_SCAN_FROM),
            keys_range: s.get(KV_KEYS_RANGE),
            keys_from: s.get(KV_KEYS_FROM),
            swap: s.get(KV_SWAP),
            delete_many: s.get(KV_DELETE_MANY),
            name: name.to_string(),
            inner,
        }
    }
}

/// Where a page of a prefix scan starts (the key, and whether it is
/// included), where the prefix's range ends, and how many rows to fetch:
/// one more than asked, which tells whether there is more.
fn page_bounds<'a>(
    prefix: &'a str,
    after: Option<&'a str>,
    limit: usize,
) -> (&'a str, bool, Option<String>, i64) {
    let (start, inclusive) = match after {
        Some(after) => (after, false),
        None => (prefix, true),
    };
    (start, inclusive, prefix_end(prefix), limit as i64 + 1)
}

fn live(expires_at: Option<i64>, now: i64) -> bool {
    !matches!(expires_at, Some(at) if at <= now)
}

/// The first string after every string that starts with `prefix`, in
/// byte (= code point) order: the prefix with its last character moved to
/// the next code point (dropping trailing U+10FFFF). `None` when there is
/// no such string (the empty prefix, or only U+10FFFF characters).
pub(crate) fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match last as u32 {
            0xD7FF => Some('\u{E000}'),
            c => char::from_u32(c + 1),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

#[async_trait]
impl KvEngine for PgBucket {
    async fn get(&self, key: &str, now: i64) -> AlkResult<Option<Vec<u8>>> {
        let now = self.inner.clock.to_db(now);
        let (bucket, get, delete_expired) = (&self.name, &self.get, &self.delete_expired);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(get).await?;
                    let Some(row) = c.query_opt(&stmt, &[bucket, &key]).await? else {
                        return Ok(None);
                    };
                    let expires_at: Option<i64> = row.try_get(1)?;
                    if live(expires_at, now) {
                        return Ok(Some(row.try_get::<_, Vec<u8>>(0)?));
                    }
                    let stmt = c.prepare_cached(delete_expired).await?;
                    c.execute(&stmt, &[bucket, &key, &now]).await?;
                    Ok(None)
                })
            })
            .await
    }

    async fn get_many(
        &self,
        keys: &[String],
        now: i64,
        max_bytes: usize,
    ) -> AlkResult<Vec<Option<Vec<u8>>>> {
        let now = self.inner.clock.to_db(now);
        let (bucket, get_many, delete_expired) =
            (&self.name, &self.get_many, &self.delete_expired_many);
        let cap = i64::try_from(max_bytes).unwrap_or(i64::MAX);
        // Per asked key: its size (0 when absent or expired) and its value
        // when the server sent it (within the cap).
        let found = self
            .inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(get_many).await?;
                    let mut found: Vec<(usize, Option<Vec<u8>>)> = vec![(0, None); keys.len()];
                    let mut expired: Vec<&str> = Vec::new();
                    for row in c.query(&stmt, &[bucket, &keys, &now, &cap]).await? {
                        let ord: i64 = row.try_get(0)?;
                        let at = usize::try_from(ord - 1).ok().filter(|i| *i < keys.len());
                        let Some(at) = at else {
                            return Err(Fail::Alk(AlkError::Internal(format!(
                                "get-many returned position {ord} of {} keys",
                                keys.len()
                            ))));
                        };
                        if row.try_get::<_, bool>(3)? {
                            expired.push(&keys[at]);
                        } else {
                            let size: i64 = row.try_get(1)?;
                            found[at] = (usize::try_from(size).unwrap_or(0), row.try_get(2)?);
                        }
                    }
                    if !expired.is_empty() {
                        let stmt = c.prepare_cached(delete_expired).await?;
                        c.execute(&stmt, &[bucket, &expired, &now]).await?;
                    }
                    Ok(found)
                })
            })
            .await?;
        let (answer, _) = page(found, |(size, _)| *size, usize::MAX, max_bytes);
        answer
            .into_iter()
            .map(|(size, value)| match value {
                Some(v) => Ok(Some(v)),
                None if size == 0 => Ok(None),
                None => Err(AlkError::Internal(
                    "get-many: the server left out a value within the read cap".into(),
                )),
            })
            .collect()
    }

    async fn set(&self, key: &str, value: &[u8], expires_at: Option<i64>) -> AlkResult<()> {
        self.set_many(&[(key.to_string(), value.to_vec())], expires_at)
            .await
    }

    async fn set_many(
        &self,
        entries: &[(String, Vec<u8>)],
        expires_at: Option<i64>,
    ) -> AlkResult<()> {
        let expires_at = expires_at.map(|t| self.inner.clock.to_db(t));
        // One statement may not touch a row twice: the last write of a key
        // wins, as if the entries were applied in order.
        let mut last: HashMap<&str, usize> = HashMap::new();
        for (i, (k, _)) in entries.iter().enumerate() {
            last.insert(k, i);
        }
        // In key order: two batches over the same keys lock their rows in
        // the same order, so they never deadlock.
        let mut chosen: Vec<(&str, &[u8])> = entries
            .iter()
            .enumerate()
            .filter(|(i, (k, _))| last[k.as_str()] == *i)
            .map(|(_, (k, v))| (k.as_str(), v.as_slice()))
            .collect();
        chosen.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let keys: Vec<&str> = chosen.iter().map(|(k, _)| *k).collect();
        let values: Vec<&[u8]> = chosen.iter().map(|(_, v)| *v).collect();
        let (bucket, put, keys, values) = (&self.name, &self.put, &keys, &values);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(put).await?;
                    c.execute(&stmt, &[bucket, keys, values, &expires_at])
                        .await?;
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
        let expires_at = expires_at.map(|t| self.inner.clock.to_db(t));
        let now = self.inner.clock.to_db(now);
        let (bucket, put) = (&self.name, &self.put_if_absent);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(put).await?;
                    let won = c
                        .query_opt(&stmt, &[bucket, &key, &value, &expires_at, &now])
                        .await?;
                    Ok(won.is_some())
                })
            })
            .await
    }

    async fn delete(&self, key: &str) -> AlkResult<()> {
        let (bucket, delete) = (&self.name, &self.delete);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(delete).await?;
                    c.execute(&stmt, &[bucket, &key]).await?;
                    Ok(())
                })
            })
            .await
    }

    async fn delete_many(&self, keys: &[String]) -> AlkResult<()> {
        let (bucket, delete_many) = (&self.name, &self.delete_many);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(delete_many).await?;
                    c.execute(&stmt, &[bucket, &keys]).await?;
                    Ok(())
                })
            })
            .await
    }

    async fn read_for_swap(&self, key: &str, now: i64) -> AlkResult<Option<(Vec<u8>, Expected)>> {
        // No versions in this schema: a swap compares values.
        let (bucket, get) = (&self.name, &self.get);
        let db_now = self.inner.clock.to_db(now);
        let found = self
            .inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(get).await?;
                    let Some(row) = c.query_opt(&stmt, &[bucket, &key]).await? else {
                        return Ok(None);
                    };
                    let value: Vec<u8> = row.try_get(0)?;
                    let expires_at: Option<i64> = row.try_get(1)?;
                    Ok(Some((value, expires_at)))
                })
            })
            .await?;
        Ok(found
            .filter(|(_, at)| live(*at, db_now))
            .map(|(v, _)| (v.clone(), Expected::Value(v))))
    }

    async fn swap(
        &self,
        key: &str,
        expected: &Expected,
        value: &[u8],
        expires_at: Option<i64>,
        now: i64,
    ) -> AlkResult<bool> {
        match expected {
            Expected::Absent => self.set_if_absent(key, value, expires_at, now).await,
            Expected::Value(old) => {
                let db_now = self.inner.clock.to_db(now);
                let expires_at = expires_at.map(|at| self.inner.clock.to_db(at));
                let (bucket, swap) = (&self.name, &self.swap);
                self.inner
                    .run(|c| {
                        Box::pin(async move {
                            let stmt = c.prepare_cached(swap).await?;
                            let won = c
                                .query_opt(
                                    &stmt,
                                    &[bucket, &key, &value, &expires_at, old, &db_now],
                                )
                                .await?;
                            Ok(won.is_some())
                        })
                    })
                    .await
            }
            // This schema hands out no versions.
            Expected::Version(_) => Ok(false),
        }
    }

    async fn scan_prefix(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        now: i64,
        max_bytes: usize,
    ) -> AlkResult<(Vec<(String, Vec<u8>)>, bool)> {
        let now = self.inner.clock.to_db(now);
        let (start, inclusive, end, fetch) = page_bounds(prefix, after, limit);
        let bucket = &self.name;
        let (scan_range, scan_from, end) = (&self.scan_range, &self.scan_from, &end);
        let cap = i64::try_from(max_bytes).unwrap_or(i64::MAX);
        let rows = self
            .inner
            .run(|c| {
                Box::pin(async move {
                    let rows = match end {
                        Some(end) => {
                            let stmt = c.prepare_cached(scan_range).await?;
                            c.query(
                                &stmt,
                                &[bucket, &start, end, &now, &inclusive, &fetch, &cap],
                            )
                            .await?
                        }
                        None => {
                            let stmt = c.prepare_cached(scan_from).await?;
                            c.query(&stmt, &[bucket, &start, &now, &inclusive, &fetch, &cap])
                                .await?
                        }
                    };
                    let mut out: Vec<(String, usize, Option<Vec<u8>>)> = Vec::new();
                    for row in rows {
                        let size: i64 = row.try_get(1)?;
                        out.push((
                            row.try_get(0)?,
                            usize::try_from(size).unwrap_or(0),
                            row.try_get(2)?,
                        ));
                    }
                    Ok(out)
                })
            })
            .await?;
        let (taken, more) = page(rows, |(_, size, _)| *size, limit, max_bytes);
        let entries = taken
            .into_iter()
            .map(|(k, _, v)| {
                v.map(|v| (k, v)).ok_or_else(|| {
                    AlkError::Internal(
                        "scan: the server left out a value within the read cap".into(),
                    )
                })
            })
            .collect::<AlkResult<Vec<_>>>()?;
        Ok((entries, more))
    }

    async fn scan_keys(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        now: i64,
    ) -> AlkResult<(Vec<String>, bool)> {
        let now = self.inner.clock.to_db(now);
        let (start, inclusive, end, fetch) = page_bounds(prefix, after, limit);
        let bucket = &self.name;
        let (keys_range, keys_from, end) = (&self.keys_range, &self.keys_from, &end);
        let mut keys: Vec<String> = self
            .inner
            .run(|c| {
                Box::pin(async move {
                    let rows = match end {
                        Some(end) => {
                            let stmt = c.prepare_cached(keys_range).await?;
                            c.query(&stmt, &[bucket, &start, end, &now, &inclusive, &fetch])
                                .await?
                        }
                        None => {
                            let stmt = c.prepare_cached(keys_from).await?;
                            c.query(&stmt, &[bucket, &start, &now, &inclusive, &fetch])
                                .await?
                        }
                    };
                    let mut keys = Vec::with_capacity(rows.len());
                    for row in rows {
                        keys.push(row.try_get::<_, String>(0)?);
                    }
                    Ok(keys)
                })
            })
            .await?;
        let more = keys.len() > limit;
        keys.truncate(limit);
        Ok((keys, more))
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn the_end_of_a_prefix_range_is_the_next_code_point() {
        assert_eq!(prefix_end(""), None);
        assert_eq!(prefix_end("ab").as_deref(), Some("ac"));
        assert_eq!(prefix_end("a\u{7f}").as_deref(), Some("a\u{80}"));
        assert_eq!(prefix_end("a\u{D7FF}").as_deref(), Some("a\u{E000}"));
        assert_eq!(prefix_end("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(prefix_end("\u{10FFFF}"), None);
        for p in ["ab", "a\u{7f}", "é", "a\u{10FFFF}"] {
            let end = prefix_end(p).unwrap();
            for k in [
                p.to_string(),
                format!("{p}\u{10FFFF}\u{10FFFF}"),
                format!("{p}zzz"),
            ] {
                assert!(k.as_bytes() < end.as_bytes(), "{k:?} !< {end:?}");
            }
            assert!(p.as_bytes() < end.as_bytes());
        }
    }
}
