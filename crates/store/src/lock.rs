//! Named locks with a TTL and fencing tokens: the rules, waiting for a
//! lock, and the trait an engine implements.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::engine::Engine;
use crate::error::{AlkError, AlkResult};
use crate::limits::MAX_OWNER_BYTES;
use crate::names::check_name;
use crate::time::{Clock, after, instant_at};
use crate::wake::{Check, Wakes, topics};

/// One acquisition of a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired {
    /// The lock's name.
    pub name: String,
    /// Who holds it.
    pub owner: String,
    /// The fencing token of this acquisition.
    pub token: u64,
}

/// The live holder of a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Who holds it.
    pub owner: String,
    /// When it expires, unix epoch milliseconds.
    pub expires_at: i64,
    /// The fencing token of the acquisition.
    pub token: u64,
}

/// What an engine does for the locks. A lock is held until its deadline
/// (`expires_at > now`) or its release; tokens only grow, across every
/// process and machine that shares the engine.
#[async_trait]
pub trait LockEngine: Send + Sync {
    /// Takes `name` for `owner` until `expires_at` if it is free (never
    /// taken, released, or expired at `now`), in one atomic step; the new
    /// token, or `None` when someone holds it.
    async fn acquire(
        &self,
        name: &str,
        owner: &str,
        now: i64,
        expires_at: i64,
    ) -> AlkResult<Option<u64>>;

    /// Moves the deadline of a live acquisition; false when it expired or
    /// the lock was taken since.
    async fn renew(&self, lock: &Acquired, expires_at: i64, now: i64) -> AlkResult<bool>;

    /// Releases a live acquisition; false when it had expired, been
    /// released, or been taken by someone else.
    async fn release(&self, lock: &Acquired, now: i64) -> AlkResult<bool>;

    /// Who holds `name` at `now`.
    async fn holder(&self, name: &str, now: i64) -> AlkResult<Option<Holder>>;

    /// Up to `max` locks held at `now` whose names come after `after`
    /// (from the first when `None`), by name, with their holders.
    async fn holders(
        &self,
        after: Option<&str>,
        max: u32,
        now: i64,
    ) -> AlkResult<Vec<(String, Holder)>>;

    /// Takes `n` tokens (1 to `rate.capacity`) from the free-standing
    /// bucket `name` of settings `rate` at `now`, or none, in one
    /// transaction: the bucket's row read, refilled and written back with
    /// [`crate::rate::Bucket::take`]. A bucket without a row is full.
    async fn take_tokens(
        &self,
        name: &str,
        rate: &crate::rate::RateLimit,
        n: u32,
        now: i64,
    ) -> AlkResult<crate::rate::Taken>;
}

/// The most locks one [`Locks::holders`] page lists.
pub const MAX_HOLDERS_LISTED: u32 = 1000;

/// Checks a lock owner: non-empty, at most [`MAX_OWNER_BYTES`], no NUL.
pub fn check_owner(owner: &str) -> AlkResult<()> {
    if owner.is_empty() {
        return Err(AlkError::InvalidArgument("lock owner is empty".into()));
    }
    if owner.len() > MAX_OWNER_BYTES {
        return Err(AlkError::InvalidArgument(format!(
            "lock owner is {} bytes long; the limit is {MAX_OWNER_BYTES}",
            owner.len()
        )));
    }
    if owner.contains('\0') {
        return Err(AlkError::InvalidArgument(
            "lock owner contains a NUL character".into(),
        ));
    }
    Ok(())
}

/// The locks, as guests use them.
#[derive(Clone)]
pub struct Locks {
    engine: Arc<dyn LockEngine>,
    wakes: Wakes,
}

impl std::fmt::Debug for Locks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locks").finish_non_exhaustive()
    }
}

impl Locks {
    /// The locks of `engine`.
    pub async fn open(engine: &dyn Engine) -> AlkResult<Locks> {
        Ok(Locks {
            engine: engine.locks().await?,
            wakes: engine.wakes()?,
        })
    }

    /// Takes `name` for `owner` until `now + ttl_ms` if it is free; `None`
    /// when someone holds it.
    pub async fn try_lock(
        &self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        now: i64,
    ) -> AlkResult<Option<Acquired>> {
        check_name("lock", name)?;
        check_owner(owner)?;
        let expires_at = after("ttl-ms", ttl_ms, now)?;
        let token = self.engine.acquire(name, owner, now, expires_at).await?;
        Ok(token.map(|token| Acquired {
            name: name.to_string(),
            owner: owner.to_string(),
            token,
        }))
    }

    /// Sets the deadline of `lock` to `now + ttl_ms`; false when the
    /// acquisition has expired or the lock was taken since.
    pub async fn renew(&self, lock: &Acquired, ttl_ms: u64, now: i64) -> AlkResult<bool> {
        let expires_at = after("ttl-ms", ttl_ms, now)?;
        self.engine.renew(lock, expires_at, now).await
    }

    /// Releases `lock`; false when it had already expired, been released,
    /// or been taken by someone else. Wakes the lock's waiters.
    pub async fn release(&self, lock: &Acquired, now: i64) -> AlkResult<bool> {
        let released = self.engine.release(lock, now).await?;
        if released {
            self.wakes.signal(&topics::lock(&lock.name));
        }
        Ok(released)
    }

    /// Like [`Locks::try_lock`], but waits (holding nothing open) until the
    /// lock is free and taken, or `deadline`. Waiters wake when the lock is
    /// released, and at the holder's deadline.
    pub async fn lock_wait(
        &self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        clock: &dyn Clock,
        deadline: Instant,
    ) -> AlkResult<Option<Acquired>> {
        check_name("lock", name)?;
        check_owner(owner)?;
        after("ttl-ms", ttl_ms, clock.now_ms())?;
        self.wakes
            .wait_for(&topics::lock(name), Some(deadline), || {
                Box::pin(async move {
                    let now = clock.now_ms();
                    if let Some(acquired) = self.try_lock(name, owner, ttl_ms, now).await? {
                        return Ok(Check::Ready(acquired));
                    }
                    let retry_at = self
                        .engine
                        .holder(name, now)
                        .await?
                        .map(|h| instant_at(h.expires_at, now));
                    Ok(Check::NotYet(retry_at))
                })
            })
            .await
    }

    /// Who holds `name` at `now`, if anyone.
    pub async fn holder(&self, name: &str, now: i64) -> AlkResult<Option<Holder>> {
        check_name("lock", name)?;
        self.engine.holder(name, now).await
    }

    /// Up to `max` (clamped to 1..=[`MAX_HOLDERS_LISTED`]) locks held at
    /// `now`, by name, after `after` (the last name of the previous page).
    pub async fn holders(
        &self,
        after: Option<&str>,
        max: u32,
        now: i64,
    ) -> AlkResult<Vec<(String, Holder)>> {
        if let Some(after) = after {
            check_name("lock", after)?;
        }
        self.engine
            .holders(after, max.clamp(1, MAX_HOLDERS_LISTED), now)
            .await
    }
}
