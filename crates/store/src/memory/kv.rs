//! The buckets of the memory engine: an ordered map per bucket, with
//! expired entries deleted when a read finds them.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;

use super::lock;
use crate::error::AlkResult;
use crate::kv::{Expected, KvEngine};
use crate::limits::page;

fn live(expires_at: Option<i64>, now: i64) -> bool {
    !matches!(expires_at, Some(at) if at <= now)
}

/// One bucket: key → (value, expiry).
/// A value and its expiry.
type Entry = (Vec<u8>, Option<i64>);

#[derive(Default)]
pub(super) struct MemBucket(Mutex<BTreeMap<String, Entry>>);

/// The live entries of `map` whose key starts with `prefix`, in key order,
/// from the prefix on or right after `after`.
fn live_from<'a>(
    map: &'a BTreeMap<String, Entry>,
    prefix: &'a str,
    after: Option<&str>,
    now: i64,
) -> impl Iterator<Item = (&'a String, &'a Entry)> {
    use std::ops::Bound;
    let start = match after {
        Some(k) => Bound::Excluded(k.to_string()),
        None => Bound::Included(prefix.to_string()),
    };
    map.range((start, Bound::Unbounded))
        .take_while(move |(k, _)| k.starts_with(prefix))
        .filter(move |(_, (_, at))| live(*at, now))
}

#[async_trait]
impl KvEngine for MemBucket {
    async fn get(&self, key: &str, now: i64) -> AlkResult<Option<Vec<u8>>> {
        let mut map = lock(&self.0);
        match map.get(key) {
            Some((v, at)) if live(*at, now) => Ok(Some(v.clone())),
            Some(_) => {
                map.remove(key);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    async fn get_many(
        &self,
        keys: &[String],
        now: i64,
        max_bytes: usize,
    ) -> AlkResult<Vec<Option<Vec<u8>>>> {
        // The page is cut while reading: values past the byte cap are not
        // copied at all.
        let map = lock(&self.0);
        let values = keys.iter().map(|key| {
            map.get(key)
                .filter(|(_, at)| live(*at, now))
                .map(|(v, _)| v.clone())
        });
        let size = |v: &Option<Vec<u8>>| v.as_ref().map_or(0, Vec::len);
        Ok(page(values, size, usize::MAX, max_bytes).0)
    }

    async fn set(&self, key: &str, value: &[u8], expires_at: Option<i64>) -> AlkResult<()> {
        lock(&self.0).insert(key.to_string(), (value.to_vec(), expires_at));
        Ok(())
    }

    async fn set_many(
        &self,
        entries: &[(String, Vec<u8>)],
        expires_at: Option<i64>,
    ) -> AlkResult<()> {
        let mut map = lock(&self.0);
        for (k, v) in entries {
            map.insert(k.clone(), (v.clone(), expires_at));
        }
        Ok(())
    }

    async fn set_if_absent(
        &self,
        key: &str,
        value: &[u8],
        expires_at: Option<i64>,
        now: i64,
    ) -> AlkResult<bool> {
        let mut map = lock(&self.0);
        if map.get(key).is_some_and(|(_, at)| live(*at, now)) {
            return Ok(false);
        }
        map.insert(key.to_string(), (value.to_vec(), expires_at));
        Ok(true)
    }

    async fn delete(&self, key: &str) -> AlkResult<()> {
        lock(&self.0).remove(key);
        Ok(())
    }

    async fn delete_many(&self, keys: &[String]) -> AlkResult<()> {
        let mut map = lock(&self.0);
        for key in keys {
            map.remove(key);
        }
        Ok(())
    }

    async fn scan_prefix(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        now: i64,
        max_bytes: usize,
    ) -> AlkResult<(Vec<(String, Vec<u8>)>, bool)> {
        let map = lock(&self.0);
        let live_matches =
            live_from(&map, prefix, after, now).map(|(k, (v, _))| (k.clone(), v.clone()));
        Ok(page(live_matches, |(_, v)| v.len(), limit, max_bytes))
    }

    async fn scan_keys(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        now: i64,
    ) -> AlkResult<(Vec<String>, bool)> {
        let map = lock(&self.0);
        let live_keys = live_from(&map, prefix, after, now).map(|(k, _)| k.clone());
        Ok(page(live_keys, |_| 0, limit, usize::MAX))
    }

    async fn read_for_swap(&self, key: &str, now: i64) -> AlkResult<Option<(Vec<u8>, Expected)>> {
        // Values are compared, as in a store without versions.
        Ok(self
            .get(key, now)
            .await?
            .map(|v| (v.clone(), Expected::Value(v))))
    }

    async fn swap(
        &self,
        key: &str,
        expected: &Expected,
        value: &[u8],
        expires_at: Option<i64>,
        now: i64,
    ) -> AlkResult<bool> {
        let mut map = lock(&self.0);
        let current = map.get(key).filter(|(_, at)| live(*at, now));
        let holds = match (expected, current) {
            (Expected::Absent, None) => true,
            (Expected::Value(want), Some((v, _))) => want == v,
            _ => false,
        };
        if holds {
            map.insert(key.to_string(), (value.to_vec(), expires_at));
        }
        Ok(holds)
    }
}
