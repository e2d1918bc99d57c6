//! Locks: one row per name in `locks`, kept after release so its fencing
//! token only grows, whichever host takes the lock next; the free-standing
//! token buckets kept with them, one row per name in `limiters`.

use std::sync::Arc;

use alk_store::lock::{Acquired, Holder, LockEngine};
use alk_store::rate::{Bucket, RateLimit, Taken};
use alk_store::{AlkError, AlkResult};
use async_trait::async_trait;

use crate::conn::Inner;

// The statements of this module (each listed by name in
// `sql::STATEMENTS`, which a test checks against the format document).

/// Takes a lock that is free or expired at `$3`, until `$4`; its new token.
pub const L_ACQUIRE: &str = "INSERT INTO alk.locks AS l (name, owner, token, acquired_at, expires_at) \
VALUES ($1, $2, 1, $3, $4) ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, token = l.token + 1, \
acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at \
WHERE l.owner IS NULL OR l.expires_at <= $3 RETURNING token";
/// Moves the deadline of a live acquisition.
pub const L_RENEW: &str = "UPDATE alk.locks SET expires_at = $4 \
WHERE name = $1 AND owner = $2 AND token = $3 AND expires_at > $5";
/// Releases a live acquisition (the row and its token stay).
pub const L_RELEASE: &str = "UPDATE alk.locks SET owner = NULL, expires_at = NULL \
WHERE name = $1 AND owner = $2 AND token = $3 AND expires_at > $4";
/// The live holder of a lock.
pub const L_HOLDER: &str = "SELECT owner, expires_at, token FROM alk.locks \
WHERE name = $1 AND owner IS NOT NULL AND expires_at > $2";
/// A page of the locks held at `$2`, by name after `$1` (`''` for the
/// first page), at most `$3`: a range of the primary key.
pub const L_HOLDERS: &str = "SELECT name, owner, expires_at, token FROM alk.locks \
WHERE name > $1 AND owner IS NOT NULL AND expires_at > $2 ORDER BY name LIMIT $3";
/// Token bucket `$1`, locked for the rest of the transaction: its tokens
/// and the start of its interval (no row: the bucket is full).
pub const L_TOKENS_HOLD: &str = "SELECT tokens, since FROM alk.limiters WHERE name = $1 FOR UPDATE";
/// Makes the row of token bucket `$1` (`$2` tokens since `$3`, full again
/// at `$4`) unless another transaction made it first; 1 row when made.
pub const L_TOKENS_NEW: &str = "INSERT INTO alk.limiters (name, tokens, since, full_at) VALUES ($1, $2, $3, $4) \
ON CONFLICT (name) DO NOTHING";
/// Writes back token bucket `$1` (held by this transaction).
pub const L_TOKENS_SAVE: &str =
    "UPDATE alk.limiters SET tokens = $2, since = $3, full_at = $4 WHERE name = $1";
/// Deletes up to 2 token buckets full again at `$1` (as a bucket without a
/// row is), passing over those a take holds: a range of `limiters_full`.
pub const L_TOKENS_SWEEP: &str = "DELETE FROM alk.limiters AS l USING (SELECT name FROM alk.limiters \
WHERE full_at <= $1 ORDER BY full_at LIMIT 2 FOR UPDATE SKIP LOCKED) AS x WHERE l.name = x.name";

/// The locks of a schema.
pub(crate) struct PgLocks {
    inner: Arc<Inner>,
    acquire: String,
    renew: String,
    release: String,
    holder: String,
    holders: String,
    tokens_hold: String,
    tokens_new: String,
    tokens_save: String,
    tokens_sweep: String,
}

impl PgLocks {
    pub(crate) fn new(inner: Arc<Inner>) -> PgLocks {
        let s = &inner.sql;
        PgLocks {
            acquire: s.get(L_ACQUIRE),
            renew: s.get(L_RENEW),
            release: s.get(L_RELEASE),
            holder: s.get(L_HOLDER),
            holders: s.get(L_HOLDERS),
            tokens_hold: s.get(L_TOKENS_HOLD),
            tokens_new: s.get(L_TOKENS_NEW),
            tokens_save: s.get(L_TOKENS_SAVE),
            tokens_sweep: s.get(L_TOKENS_SWEEP),
            inner,
        }
    }

    /// Runs RENEW or RELEASE; whether it changed the row.
    async fn change(&self, sql: &str, lock: &Acquired, extra: &[i64]) -> AlkResult<bool> {
        let token = i64::try_from(lock.token).unwrap_or(i64::MAX);
        let (name, owner) = (&lock.name, &lock.owner);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(sql).await?;
                    let changed = match extra {
                        [a] => c.execute(&stmt, &[name, owner, &token, a]).await?,
                        [a, b] => c.execute(&stmt, &[name, owner, &token, a, b]).await?,
                        _ => unreachable!("RENEW takes two times, RELEASE one"),
                    };
                    Ok(changed == 1)
                })
            })
            .await
    }
}

#[async_trait]
impl LockEngine for PgLocks {
    async fn acquire(
        &self,
        name: &str,
        owner: &str,
        now: i64,
        expires_at: i64,
    ) -> AlkResult<Option<u64>> {
        let now = self.inner.clock.to_db(now);
        let expires_at = self.inner.clock.to_db(expires_at);
        let sql = &self.acquire;
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(sql).await?;
                    Ok(
                        match c
                            .query_opt(&stmt, &[&name, &owner, &now, &expires_at])
                            .await?
                        {
                            Some(row) => {
                                Some(u64::try_from(row.try_get::<_, i64>(0)?).unwrap_or(0))
                            }
                            None => None,
                        },
                    )
                })
            })
            .await
    }

    async fn renew(&self, lock: &Acquired, expires_at: i64, now: i64) -> AlkResult<bool> {
        let clock = &self.inner.clock;
        self.change(
            &self.renew,
            lock,
            &[clock.to_db(expires_at), clock.to_db(now)],
        )
        .await
    }

    async fn release(&self, lock: &Acquired, now: i64) -> AlkResult<bool> {
        let now = self.inner.clock.to_db(now);
        self.change(&self.release, lock, &[now]).await
    }

    async fn holders(
        &self,
        after: Option<&str>,
        max: u32,
        now: i64,
    ) -> AlkResult<Vec<(String, Holder)>> {
        let now = self.inner.clock.to_db(now);
        let (sql, after, limit) = (&self.holders, after.unwrap_or(""), i64::from(max));
        let found = self
            .inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(sql).await?;
                    let mut out = Vec::new();
                    for row in c.query(&stmt, &[&after, &now, &limit]).await? {
                        out.push((
                            row.try_get::<_, String>(0)?,
                            row.try_get::<_, String>(1)?,
                            row.try_get::<_, i64>(2)?,
                            row.try_get::<_, i64>(3)?,
                        ));
                    }
                    Ok(out)
                })
            })
            .await?;
        Ok(found
            .into_iter()
            .map(|(name, owner, expires_at, token)| {
                (
                    name,
                    Holder {
                        owner,
                        expires_at: self.inner.clock.to_host(expires_at),
                        token: u64::try_from(token).unwrap_or(0),
                    },
                )
            })
            .collect())
    }

    async fn holder(&self, name: &str, now: i64) -> AlkResult<Option<Holder>> {
        let now = self.inner.clock.to_db(now);
        let sql = &self.holder;
        let found = self
            .inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(sql).await?;
                    Ok(match c.query_opt(&stmt, &[&name, &now]).await? {
                        Some(row) => Some((
                            row.try_get::<_, String>(0)?,
                            row.try_get::<_, i64>(1)?,
                            row.try_get::<_, i64>(2)?,
                        )),
                        None => None,
                    })
                })
            })
            .await?;
        Ok(found.map(|(owner, expires_at, token)| Holder {
            owner,
            expires_at: self.inner.clock.to_host(expires_at),
            token: u64::try_from(token).unwrap_or(0),
        }))
    }

    async fn take_tokens(
        &self,
        name: &str,
        rate: &RateLimit,
        n: u32,
        now: i64,
    ) -> AlkResult<Taken> {
        let now = self.inner.clock.to_db(now);
        let me = &*self;
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let mut c = c;
                    let tx = c.transaction().await?;
                    let hold = tx.prepare_cached(&me.tokens_hold).await?;
                    let mut row = tx.query_opt(&hold, &[&name]).await?;
                    if row.is_none() {
                        // A bucket without a row is full: a take from it
                        // makes the row, and forgets two buckets full again,
                        // so rows of names no longer used do not pile up.
                        let (taken, after) = Bucket::full(rate, now).take(rate, n, now);
                        if !matches!(taken, Taken::Granted(_)) {
                            return Ok(taken);
                        }
                        let new = tx.prepare_cached(&me.tokens_new).await?;
                        let full_at = after.full_at(rate);
                        let made = tx
                            .execute(&new, &[&name, &after.tokens, &after.since, &full_at])
                            .await?;
                        if made == 1 {
                            let sweep = tx.prepare_cached(&me.tokens_sweep).await?;
                            tx.execute(&sweep, &[&now]).await?;
                            tx.commit().await?;
                            return Ok(taken);
                        }
                        // Another take made it first: wait for it, then
                        // take from what it left.
                        row = tx.query_opt(&hold, &[&name]).await?;
                    }
                    let row = row.ok_or_else(|| {
                        crate::conn::Fail::Alk(AlkError::Internal(
                            "a token bucket's row vanished while it was held".into(),
                        ))
                    })?;
                    let stored = Bucket {
                        tokens: row.try_get(0)?,
                        since: row.try_get(1)?,
                    };
                    let (taken, after) = stored.take(rate, n, now);
                    // A refused take writes nothing: the refill is worked
                    // out again from the row by the next take.
                    if let Taken::Granted(_) = taken {
                        let save = tx.prepare_cached(&me.tokens_save).await?;
                        let full_at = after.full_at(rate);
                        tx.execute(&save, &[&name, &after.tokens, &after.since, &full_at])
                            .await?;
                    }
                    tx.commit().await?;
                    Ok(taken)
                })
            })
            .await
    }
}
