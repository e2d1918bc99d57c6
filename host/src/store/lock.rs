//! `locallock.v1`: named locks with a TTL and fencing tokens, and the only
//! implementation of that format.
//!
//! One file holds every lock of a data directory:
//! `<data-dir>/lock/locallock.sqlite`. The schema and every statement are
//! defined here, once, and pinned by `docs/formats/locallock.v1.md`.

use std::path::{Path, PathBuf};

use tokio::time::Instant;
use turso::Connection;

use super::names::check_name;
use super::open::{Format, Store, open_store};
use super::retry::{exec, query};
use super::wake::{Check, Wakes};
use crate::error::{AlkError, AlkResult};

/// The DDL of `locallock.v1`, run (idempotently) on every open.
pub const DDL: &str = "\
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT OR IGNORE INTO meta (key, value) VALUES ('format', 'locallock.v1');
CREATE TABLE IF NOT EXISTS locks (
    name        TEXT PRIMARY KEY,
    owner       TEXT,             -- current holder; NULL once released
    token       INTEGER NOT NULL, -- fencing token of the latest acquisition; only grows
    acquired_at INTEGER NOT NULL, -- unix epoch MILLISECONDS of the latest acquisition
    expires_at  INTEGER           -- unix epoch MILLISECONDS; NULL once released
);
";

/// The `locallock.v1` format.
pub static FORMAT: Format = Format {
    marker: "locallock.v1",
    ddl: DDL,
};

/// Acquires a lock that is new, released or expired, in one statement; a
/// returned row means acquired, with its token.
pub const ACQUIRE: &str = "INSERT INTO locks (name, owner, token, acquired_at, expires_at) VALUES (?1, ?2, 1, ?3, ?4) \
ON CONFLICT(name) DO UPDATE SET owner = ?2, token = locks.token + 1, acquired_at = ?3, expires_at = ?4 \
WHERE locks.owner IS NULL OR locks.expires_at <= ?3 \
RETURNING token";
/// Moves the deadline of a live acquisition.
pub const RENEW: &str = "UPDATE locks SET expires_at = ?4 \
WHERE name = ?1 AND owner = ?2 AND token = ?3 AND expires_at > ?5";
/// Releases a live acquisition.
pub const RELEASE: &str = "UPDATE locks SET owner = NULL, expires_at = NULL \
WHERE name = ?1 AND owner = ?2 AND token = ?3 AND expires_at > ?4";
/// The live holder of a lock.
pub const HOLDER: &str = "SELECT owner, expires_at, token FROM locks \
WHERE name = ?1 AND owner IS NOT NULL AND expires_at > ?2";

/// The longest owner string, in bytes.
pub const MAX_OWNER_BYTES: usize = 256;

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

/// The lock store of a data directory.
#[derive(Debug, Clone)]
pub struct LockStore {
    store: Store,
    wakes: Wakes,
}

fn topic(name: &str) -> String {
    format!("lock.{name}")
}

/// The lock store file under `data_dir`.
pub fn lock_path(data_dir: &Path) -> PathBuf {
    data_dir.join("lock").join("locallock.sqlite")
}

fn check_owner(owner: &str) -> AlkResult<()> {
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

fn deadline(ttl_ms: u64, now: i64) -> AlkResult<i64> {
    if ttl_ms == 0 {
        return Err(AlkError::InvalidArgument(
            "ttl-ms is 0; a lock needs a TTL of at least 1 ms".into(),
        ));
    }
    i64::try_from(ttl_ms)
        .ok()
        .and_then(|ttl| now.checked_add(ttl))
        .ok_or_else(|| AlkError::InvalidArgument(format!("ttl-ms {ttl_ms} overflows the clock")))
}

impl LockStore {
    /// Opens (creating on first use) the lock store under `data_dir`.
    pub async fn open(data_dir: &Path, policy: impl Into<super::StoreOptions>) -> AlkResult<Self> {
        let store = open_store(&lock_path(data_dir), &FORMAT, policy).await?;
        Ok(LockStore {
            store,
            wakes: Wakes::for_data_dir(data_dir),
        })
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        self.store.path()
    }

    /// Takes `name` for `owner` until `now + ttl_ms` if it is free (never
    /// taken, released, or expired at `now`); `None` when someone holds it.
    pub async fn try_lock(
        &self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        now: i64,
    ) -> AlkResult<Option<Acquired>> {
        check_name("lock", name)?;
        check_owner(owner)?;
        let expires_at = deadline(ttl_ms, now)?;
        let token = self
            .store
            .run_write(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, ACQUIRE, (name, owner, now, expires_at)).await?;
                    let mut token = None;
                    while let Some(row) = rows.next().await? {
                        token = Some(row.get::<i64>(0)? as u64);
                    }
                    Ok(token)
                })
            })
            .await?;
        Ok(token.map(|token| Acquired {
            name: name.to_string(),
            owner: owner.to_string(),
            token,
        }))
    }

    /// Sets the deadline of `lock` to `now + ttl_ms`; false when the
    /// acquisition has expired or the lock was taken since.
    pub async fn renew(&self, lock: &Acquired, ttl_ms: u64, now: i64) -> AlkResult<bool> {
        let expires_at = deadline(ttl_ms, now)?;
        let token = lock.token as i64;
        let (name, owner) = (lock.name.as_str(), lock.owner.as_str());
        self.store
            .run_write(|conn: Connection| {
                Box::pin(async move {
                    Ok(exec(&conn, RENEW, (name, owner, token, expires_at, now)).await? == 1)
                })
            })
            .await
    }

    /// Releases `lock`; false when it had already expired, been released,
    /// or been taken by someone else.
    pub async fn release(&self, lock: &Acquired, now: i64) -> AlkResult<bool> {
        let token = lock.token as i64;
        let (name, owner) = (lock.name.as_str(), lock.owner.as_str());
        let released = self
            .store
            .run_write(|conn: Connection| {
                Box::pin(
                    async move { Ok(exec(&conn, RELEASE, (name, owner, token, now)).await? == 1) },
                )
            })
            .await?;
        if released {
            self.wakes.signal(&topic(name));
        }
        Ok(released)
    }

    /// Like [`LockStore::try_lock`], but waits (without holding anything
    /// open) until the lock is free and taken, or `deadline`. Waiters wake
    /// when the lock is released, and at the holder's deadline.
    pub async fn lock_wait(
        &self,
        name: &str,
        owner: &str,
        ttl_ms: u64,
        clock: &(dyn Fn() -> i64 + Send + Sync),
        deadline: Instant,
    ) -> AlkResult<Option<Acquired>> {
        check_name("lock", name)?;
        check_owner(owner)?;
        self.wakes
            .wait_for(&topic(name), Some(deadline), || {
                Box::pin(async move {
                    let now = clock();
                    if let Some(acquired) = self.try_lock(name, owner, ttl_ms, now).await? {
                        return Ok(Check::Ready(acquired));
                    }
                    let retry_at = self
                        .holder(name, now)
                        .await?
                        .map(|h| super::queue::instant_in(h.expires_at - now));
                    Ok(Check::NotYet(retry_at))
                })
            })
            .await
    }

    /// Who holds `name` at `now`, if anyone.
    pub async fn holder(&self, name: &str, now: i64) -> AlkResult<Option<Holder>> {
        check_name("lock", name)?;
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, HOLDER, (name, now)).await?;
                    let mut found = None;
                    while let Some(row) = rows.next().await? {
                        found = Some(Holder {
                            owner: row.get::<String>(0)?,
                            expires_at: row.get::<i64>(1)?,
                            token: row.get::<i64>(2)? as u64,
                        });
                    }
                    Ok(found)
                })
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::RetryPolicy;

    const DOC: &str = include_str!("../../../docs/formats/locallock.v1.md");

    #[test]
    fn the_format_document_pins_the_ddl_and_every_statement() {
        crate::store::assert_document_pins(
            "locallock.v1.md",
            DOC,
            &[
                ("DDL", DDL),
                ("ACQUIRE", ACQUIRE),
                ("RENEW", RENEW),
                ("RELEASE", RELEASE),
                ("HOLDER", HOLDER),
            ],
        );
    }

    #[tokio::test]
    async fn expiry_renewal_and_takeover_follow_the_given_clock_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let s = LockStore::open(dir.path(), RetryPolicy::default())
            .await
            .unwrap();
        let a = s.try_lock("l", "a", 100, 1_000).await.unwrap().unwrap();
        assert_eq!(a.token, 1);
        assert_eq!(s.try_lock("l", "b", 100, 1_099).await.unwrap(), None);
        assert!(s.renew(&a, 100, 1_099).await.unwrap());
        // Deadline now 1_199: held at 1_198, free at 1_199.
        assert_eq!(
            s.holder("l", 1_198).await.unwrap().unwrap().expires_at,
            1_199
        );
        assert_eq!(s.holder("l", 1_199).await.unwrap(), None);
        assert!(
            !s.renew(&a, 100, 1_199).await.unwrap(),
            "late renew accepted"
        );
        let b = s.try_lock("l", "b", 100, 1_199).await.unwrap().unwrap();
        assert_eq!(b.token, 2);
        assert!(
            !s.release(&a, 1_200).await.unwrap(),
            "stale release accepted"
        );
        // The same owner string again holds a different acquisition.
        let a_again_stale = Acquired {
            token: 1,
            ..b.clone()
        };
        assert!(!s.release(&a_again_stale, 1_200).await.unwrap());
        assert!(s.release(&b, 1_200).await.unwrap());
        assert!(!s.release(&b, 1_200).await.unwrap());
        assert_eq!(
            s.try_lock("l", "c", 100, 1_201)
                .await
                .unwrap()
                .unwrap()
                .token,
            3
        );
    }
}
