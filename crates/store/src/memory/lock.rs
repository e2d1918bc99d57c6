//! The locks of the memory engine: a holder, a token and a deadline per
//! name.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use super::lock;
use crate::error::AlkResult;
use crate::lock::{Acquired, Holder, LockEngine};
use crate::rate::{Bucket, RateLimit, Taken};

/// name → (owner, token, expiry)
/// A lock's holder (if any), last token and deadline.
type LockRow = (Option<String>, u64, Option<i64>);

#[derive(Default)]
pub(super) struct MemLocks(
    Mutex<HashMap<String, LockRow>>,
    /// The free-standing token buckets, by name (with when each is full
    /// again), and how many there were after the last sweep.
    Mutex<(HashMap<String, (Bucket, i64)>, usize)>,
);

#[async_trait]
impl LockEngine for MemLocks {
    async fn take_tokens(
        &self,
        name: &str,
        rate: &RateLimit,
        n: u32,
        now: i64,
    ) -> AlkResult<Taken> {
        let mut guard = lock(&self.1);
        let (buckets, swept) = &mut *guard;
        let bucket = buckets
            .get(name)
            .map(|(b, _)| *b)
            .unwrap_or_else(|| Bucket::full(rate, now));
        let (taken, after) = bucket.take(rate, n, now);
        if let Taken::Granted(_) = taken {
            buckets.insert(name.to_string(), (after, after.full_at(rate)));
            // Buckets full again go once there are twice as many as after
            // the last sweep: each take pays for its share.
            if buckets.len() >= (*swept * 2).max(64) {
                buckets.retain(|_, (_, full_at)| *full_at > now);
                *swept = buckets.len();
            }
        }
        Ok(taken)
    }

    async fn acquire(
        &self,
        name: &str,
        owner: &str,
        now: i64,
        expires_at: i64,
    ) -> AlkResult<Option<u64>> {
        let mut locks = lock(&self.0);
        let entry = locks.entry(name.to_string()).or_insert((None, 0, None));
        let free = entry.0.is_none() || entry.2.is_some_and(|at| at <= now);
        if !free {
            return Ok(None);
        }
        *entry = (Some(owner.to_string()), entry.1 + 1, Some(expires_at));
        Ok(Some(entry.1))
    }

    async fn renew(&self, l: &Acquired, expires_at: i64, now: i64) -> AlkResult<bool> {
        let mut locks = lock(&self.0);
        match locks.get_mut(&l.name) {
            Some((Some(o), t, Some(at))) if *o == l.owner && *t == l.token && *at > now => {
                *at = expires_at;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release(&self, l: &Acquired, now: i64) -> AlkResult<bool> {
        let mut locks = lock(&self.0);
        match locks.get_mut(&l.name) {
            Some(entry)
                if entry.0.as_deref() == Some(l.owner.as_str())
                    && entry.1 == l.token
                    && entry.2.is_some_and(|at| at > now) =>
            {
                entry.0 = None;
                entry.2 = None;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn holders(
        &self,
        after: Option<&str>,
        max: u32,
        now: i64,
    ) -> AlkResult<Vec<(String, Holder)>> {
        let locks = lock(&self.0);
        let mut held: Vec<(String, Holder)> = locks
            .iter()
            .filter(|(name, _)| after.is_none_or(|a| name.as_str() > a))
            .filter_map(|(name, entry)| match entry {
                (Some(owner), token, Some(at)) if *at > now => Some((
                    name.clone(),
                    Holder {
                        owner: owner.clone(),
                        expires_at: *at,
                        token: *token,
                    },
                )),
                _ => None,
            })
            .collect();
        held.sort_by(|a, b| a.0.cmp(&b.0));
        held.truncate(max as usize);
        Ok(held)
    }

    async fn holder(&self, name: &str, now: i64) -> AlkResult<Option<Holder>> {
        Ok(match lock(&self.0).get(name) {
            Some((Some(owner), token, Some(at))) if *at > now => Some(Holder {
                owner: owner.clone(),
                expires_at: *at,
                token: *token,
            }),
            _ => None,
        })
    }
}
