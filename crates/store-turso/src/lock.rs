//! `locallock.v2`: named locks with a TTL and fencing tokens, and named
//! token buckets; the only implementation of that format (and of
//! `locallock.v1`, which it upgrades on open).
//!
//! One file holds every lock and bucket of a data directory:
//! `<data-dir>/lock/locallock.sqlite`. The schema and every statement are
//! defined here, once, and pinned by `docs/formats/locallock.v1.md` and
//! `docs/formats/locallock.v2.md`.

use std::path::{Path, PathBuf};

use alk_store::lock::{Acquired, Holder, LockEngine};
use alk_store::rate::{Bucket, RateLimit, Taken};
use alk_store::{AlkError, AlkResult};
use async_trait::async_trait;
use turso::Value;

use crate::conn::Connection;
use crate::format::{Format, Upgrade};
use crate::options::StoreOptions;
use crate::retry::{Failure, exec, query};
use crate::store::{Store, open_store};

macro_rules! v1_ddl {
    () => {
        "\
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
"
    };
}

macro_rules! upgrade {
    () => {
        "\
CREATE TABLE IF NOT EXISTS rate_buckets (
    name    TEXT PRIMARY KEY,
    tokens  INTEGER NOT NULL,  -- tokens held at since
    since   INTEGER NOT NULL,  -- unix epoch MILLISECONDS; start of the interval now running
    full_at INTEGER NOT NULL   -- unix epoch MILLISECONDS; full again from then, at the rate of the last take
);
CREATE INDEX IF NOT EXISTS idx_rate_buckets_full ON rate_buckets (full_at);
UPDATE meta SET value = 'locallock.v2' WHERE key = 'format';
"
    };
}

/// The DDL of `locallock.v1`.
pub const DDL: &str = v1_ddl!();

/// What turns a `locallock.v1` file into a `locallock.v2` one, in one
/// `BEGIN IMMEDIATE` transaction.
pub const UPGRADE: &str = upgrade!();

/// The DDL of a new `locallock.v2` file: [`DDL`], then [`UPGRADE`].
pub const DDL_V2: &str = concat!(v1_ddl!(), upgrade!());

/// The `locallock.v1` format (files of it are upgraded when opened).
pub static FORMAT_V1: Format = Format {
    marker: "locallock.v1",
    ddl: DDL,
    also: &[],
    upgrades: &[],
};

/// The `locallock.v2` format, which the store opens; a `locallock.v1` file
/// is upgraded to it in place.
pub static FORMAT: Format = Format {
    marker: "locallock.v2",
    ddl: DDL_V2,
    also: &[],
    upgrades: &[Upgrade {
        from: &FORMAT_V1,
        script: UPGRADE,
    }],
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
/// A page of the locks held at `?2`, by name after `?1` (`''` for the
/// first page: names are never empty), from the primary key.
pub const HOLDERS: &str = "SELECT name, owner, expires_at, token FROM locks \
WHERE name > ?1 AND owner IS NOT NULL AND expires_at > ?2 ORDER BY name LIMIT ?3";

/// A named bucket's state (`locallock.v2`).
pub const TOKENS: &str = "SELECT tokens, since FROM rate_buckets WHERE name = ?1";
/// Writes a named bucket's state.
pub const SET_TOKENS: &str = "INSERT INTO rate_buckets (name, tokens, since, full_at) VALUES (?1, ?2, ?3, ?4) \
ON CONFLICT (name) DO UPDATE SET tokens = excluded.tokens, since = excluded.since, full_at = excluded.full_at";
/// Deletes up to `?2` named buckets full again at `?1`.
pub const SWEEP_TOKENS: &str = "DELETE FROM rate_buckets WHERE name IN (SELECT name FROM rate_buckets \
INDEXED BY idx_rate_buckets_full WHERE full_at <= ?1 LIMIT ?2)";

/// How many buckets full again a take that makes a new row deletes: more
/// than it adds, so the table holds the buckets in use and few others.
pub const SWEEP_PER_NEW: i64 = 2;

/// The lock store of a data directory.
#[derive(Debug, Clone)]
pub struct LockStore {
    store: Store,
}

/// The lock store file under `data_dir`.
pub fn lock_path(data_dir: &Path) -> PathBuf {
    data_dir.join("lock").join("locallock.sqlite")
}

impl LockStore {
    /// Opens (creating on first use) the lock store under `data_dir`.
    pub async fn open(data_dir: &Path, options: impl Into<StoreOptions>) -> AlkResult<Self> {
        let store = open_store(&lock_path(data_dir), &FORMAT, options).await?;
        Ok(LockStore { store })
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        self.store.path()
    }
}

#[async_trait]
impl LockEngine for LockStore {
    async fn acquire(
        &self,
        name: &str,
        owner: &str,
        now: i64,
        expires_at: i64,
    ) -> AlkResult<Option<u64>> {
        self.store
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
            .await
    }

    async fn renew(&self, lock: &Acquired, expires_at: i64, now: i64) -> AlkResult<bool> {
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

    async fn release(&self, lock: &Acquired, now: i64) -> AlkResult<bool> {
        let token = lock.token as i64;
        let (name, owner) = (lock.name.as_str(), lock.owner.as_str());
        self.store
            .run_write(|conn: Connection| {
                Box::pin(
                    async move { Ok(exec(&conn, RELEASE, (name, owner, token, now)).await? == 1) },
                )
            })
            .await
    }

    async fn holders(
        &self,
        after: Option<&str>,
        max: u32,
        now: i64,
    ) -> AlkResult<Vec<(String, Holder)>> {
        let path = self.store.path();
        let after = after.unwrap_or("");
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, HOLDERS, (after, now, i64::from(max))).await?;
                    let mut found = Vec::new();
                    while let Some(row) = rows.next().await? {
                        let (Value::Text(name), Value::Text(owner)) =
                            (row.get_value(0)?, row.get_value(1)?)
                        else {
                            return Err(Failure::Alk(AlkError::Internal(format!(
                                "{}: a held lock has a name or owner that is not text; the store is corrupt",
                                path.display()
                            ))));
                        };
                        found.push((
                            name,
                            Holder {
                                owner,
                                expires_at: row.get::<i64>(2)?,
                                token: row.get::<i64>(3)? as u64,
                            },
                        ));
                    }
                    Ok(found)
                })
            })
            .await
    }

    async fn take_tokens(
        &self,
        name: &str,
        rate: &RateLimit,
        n: u32,
        now: i64,
    ) -> AlkResult<Taken> {
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, TOKENS, (name,)).await?;
                    let mut found = None;
                    while let Some(row) = rows.next().await? {
                        found = Some(Bucket {
                            tokens: row.get::<i64>(0)?,
                            since: row.get::<i64>(1)?,
                        });
                    }
                    drop(rows);
                    let new = found.is_none();
                    let bucket = found.unwrap_or_else(|| Bucket::full(rate, now));
                    let (taken, after) = bucket.take(rate, n, now);
                    // A refused take writes nothing: the refill is
                    // worked out again from the row by the next take.
                    if let Taken::Granted(_) = taken {
                        if new {
                            exec(&conn, SWEEP_TOKENS, (now, SWEEP_PER_NEW)).await?;
                        }
                        let full_at = after.full_at(rate);
                        exec(
                            &conn,
                            SET_TOKENS,
                            (name, after.tokens, after.since, full_at),
                        )
                        .await?;
                    }
                    Ok(taken)
                })
            })
            .await
    }

    async fn holder(&self, name: &str, now: i64) -> AlkResult<Option<Holder>> {
        let path = self.store.path();
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, HOLDER, (name, now)).await?;
                    let mut found = None;
                    while let Some(row) = rows.next().await? {
                        let owner = match row.get_value(0)? {
                            Value::Text(o) => o,
                            other => {
                                return Err(Failure::Alk(AlkError::Internal(format!(
                                    "{}: lock {name:?} has {other:?} as its owner; the store is corrupt",
                                    path.display()
                                ))));
                            }
                        };
                        found = Some(Holder {
                            owner,
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

    const DOC: &str = include_str!("../../../docs/formats/locallock.v1.md");

    #[tokio::test]
    async fn a_row_that_breaks_the_format_is_an_internal_error_naming_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let l = LockStore::open(dir.path(), crate::RetryPolicy::default())
            .await
            .unwrap();
        l.acquire("a", "me", 0, 1_000).await.unwrap().unwrap();
        crate::write_sql(&l.store, "UPDATE locks SET token = 'x'").await;
        match l.holder("a", 0).await {
            Err(AlkError::Internal(m)) => assert!(m.contains("locallock.sqlite"), "{m}"),
            other => panic!("expected internal, got {other:?}"),
        }
    }

    #[test]
    fn the_format_document_pins_the_ddl_and_every_statement() {
        crate::assert_document_pins(
            "locallock.v1.md",
            DOC,
            &[
                ("DDL", DDL),
                ("ACQUIRE", ACQUIRE),
                ("RENEW", RENEW),
                ("RELEASE", RELEASE),
                ("HOLDER", HOLDER),
                ("HOLDERS", HOLDERS),
            ],
        );
    }

    const DOC_V2: &str = include_str!("../../../docs/formats/locallock.v2.md");

    /// One integer `sql` returns from `l`'s file.
    async fn number(l: &LockStore, sql: &'static str) -> i64 {
        l.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = conn.query(sql, ()).await?;
                    let mut n = 0;
                    while let Some(row) = rows.next().await? {
                        n = row.get::<i64>(0)?;
                    }
                    Ok(n)
                })
            })
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn buckets_of_ever_new_names_do_not_pile_up() {
        let dir = tempfile::tempdir().unwrap();
        let l = LockStore::open(dir.path(), crate::RetryPolicy::default())
            .await
            .unwrap();
        let rate = RateLimit {
            capacity: 2,
            refill: 1,
            interval_ms: 100,
        };
        // A name a second, each full again 200 ms after its take.
        for i in 0..500 {
            let taken = l
                .take_tokens(&format!("user-{i}"), &rate, 2, i * 1_000)
                .await;
            assert_eq!(taken.unwrap(), Taken::Granted(0));
        }
        let rows = number(&l, "SELECT COUNT(*) FROM rate_buckets").await;
        assert!(rows <= 2, "{rows} rows left");
        // A refused take writes nothing; a bucket not full yet stays.
        let before = number(&l, "SELECT MAX(full_at) FROM rate_buckets").await;
        assert_eq!(
            l.take_tokens("user-499", &rate, 2, 499_050).await.unwrap(),
            Taken::WaitMs(150)
        );
        assert_eq!(
            number(&l, "SELECT MAX(full_at) FROM rate_buckets").await,
            before
        );
        l.take_tokens("new", &rate, 1, 499_100).await.unwrap();
        assert_eq!(
            l.take_tokens("user-499", &rate, 1, 499_100).await.unwrap(),
            Taken::Granted(0)
        );
        let plan = crate::plan_of(
            &l.store,
            SWEEP_TOKENS,
            vec![Value::Integer(0), Value::Integer(2)],
        )
        .await;
        assert!(plan.contains("idx_rate_buckets_full"), "{plan}");
    }

    #[test]
    fn the_v2_document_pins_the_ddl_and_every_statement() {
        crate::assert_document_pins(
            "locallock.v2.md",
            DOC_V2,
            &[
                ("DDL_V2", DDL_V2),
                ("UPGRADE", UPGRADE),
                ("TOKENS", TOKENS),
                ("SET_TOKENS", SET_TOKENS),
                ("SWEEP_TOKENS", SWEEP_TOKENS),
            ],
        );
        assert_eq!(DDL_V2, format!("{DDL}{UPGRADE}"));
    }

    #[tokio::test]
    async fn a_v1_lock_file_is_upgraded_on_open_keeping_its_locks() {
        let dir = tempfile::tempdir().unwrap();
        {
            let v1 = open_store(
                &lock_path(dir.path()),
                &FORMAT_V1,
                crate::RetryPolicy::default(),
            )
            .await
            .unwrap();
            let l = LockStore { store: v1 };
            assert_eq!(l.acquire("a", "me", 0, 1_000).await.unwrap(), Some(1));
            l.store.close_for_test();
        }
        let l = LockStore::open(dir.path(), crate::RetryPolicy::default())
            .await
            .unwrap();
        let marker =
            crate::stream::tests::sql_rows(&l.store, "SELECT value FROM meta WHERE key = 'format'")
                .await;
        assert_eq!(marker, ["Text(\"locallock.v2\")"]);
        assert_eq!(l.holder("a", 10).await.unwrap().unwrap().token, 1);
        let rate = RateLimit {
            capacity: 2,
            refill: 1,
            interval_ms: 100,
        };
        assert_eq!(
            l.take_tokens("b", &rate, 2, 0).await.unwrap(),
            Taken::Granted(0)
        );
        assert_eq!(
            l.take_tokens("b", &rate, 1, 50).await.unwrap(),
            Taken::WaitMs(50)
        );
        assert_eq!(
            l.take_tokens("b", &rate, 1, 100).await.unwrap(),
            Taken::Granted(0)
        );
        // Another bucket is its own, and starts full.
        assert_eq!(
            l.take_tokens("c", &rate, 1, 100).await.unwrap(),
            Taken::Granted(1)
        );
        // A host that knows only v1 refuses the file.
        l.store.close_for_test();
        assert!(matches!(
            open_store(
                &lock_path(dir.path()),
                &FORMAT_V1,
                crate::RetryPolicy::default()
            )
            .await,
            Err(AlkError::StoreSetup { .. })
        ));
    }
}
