//! A store's connection: turso's connection and the statements run on it,
//! kept to be run again.
//!
//! turso's statement cache (`prepare_cached`) keeps a statement's compiled
//! program, but builds a new statement around it every time: the program's
//! state, its registers and cursors are allocated again for each run. A
//! store runs the same few statements over and over on each pooled
//! connection, so it keeps the statement itself and resets it between runs,
//! as SQLite programs keep `sqlite3_stmt` handles. A kept statement notices
//! schema and setting changes itself and is prepared again by the engine
//! when it next runs.
//!
//! A kept statement is lent to one run at a time and reset when the run is
//! over, however it ended (the last row read, rows dropped early, an
//! error, a cancelled future), so a connection never goes back to its pool
//! with a statement half run.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::pool::lock;

/// Most statements kept per connection; past it, statements are prepared
/// for one run (from turso's own cache) and dropped after it.
pub(crate) const MAX_KEPT: usize = 64;

/// turso's connection with the statements kept on it. Clones share both.
#[derive(Clone)]
pub(crate) struct Connection {
    inner: turso::Connection,
    kept: Kept,
    /// Set when a statement's reset failed: what that statement had
    /// started may not have ended, so the connection is not pooled again.
    broken: Arc<AtomicBool>,
}

impl Deref for Connection {
    type Target = turso::Connection;

    fn deref(&self) -> &turso::Connection {
        &self.inner
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("kept", &lock(&self.kept).len())
            .finish()
    }
}

impl Connection {
    /// `inner`, with no statement kept yet.
    pub(crate) fn new(inner: turso::Connection) -> Connection {
        Connection {
            inner,
            kept: Default::default(),
            broken: Default::default(),
        }
    }

    /// Whether a statement of this connection failed to reset (then the
    /// connection is dropped instead of going back to its pool).
    pub(crate) fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    /// The statement for `sql`, lent to one run: the kept one, or one
    /// prepared now (and kept, if there is room). When the kept one is
    /// still lent to another run, this run gets a statement of its own.
    async fn lend(&self, sql: &str) -> Result<Lent, turso::Error> {
        {
            let kept = lock(&self.kept);
            if let Some(st) = kept.get(sql)
                && Arc::strong_count(st) == 1
            {
                return Ok(self.lent(st.clone(), true));
            }
        }
        let st = self.inner.prepare_cached(sql).await?;
        let mut kept = lock(&self.kept);
        if kept.len() < MAX_KEPT && !kept.contains_key(sql) {
            let st = Arc::new(st);
            kept.insert(sql.to_owned(), st.clone());
            return Ok(self.lent(st, true));
        }
        Ok(self.lent(Arc::new(st), false))
    }

    fn lent(&self, st: Arc<turso::Statement>, kept: bool) -> Lent {
        Lent {
            statement: (*st).clone(),
            kept: kept.then(|| (st, self.kept.clone())),
            broken: self.broken.clone(),
        }
    }

    /// Runs `sql` with `params` to its end; the rows changed.
    pub(crate) async fn run(
        &self,
        sql: &str,
        params: impl turso::IntoParams,
    ) -> Result<u64, turso::Error> {
        let mut lent = self.lend(sql).await?;
        lent.statement.execute(params).await
    }

    /// Starts `sql` with `params`; the caller reads the rows (to the end,
    /// or drops them).
    pub(crate) async fn rows(
        &self,
        sql: &str,
        params: impl turso::IntoParams,
    ) -> Result<Rows, turso::Error> {
        let mut lent = self.lend(sql).await?;
        let rows = lent.statement.query(params).await?;
        Ok(Rows { rows, _lent: lent })
    }

    /// How many statements this connection keeps (for tests).
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        lock(&self.kept).len()
    }

    /// Marks the connection broken, as a failed reset does (for tests).
    #[cfg(test)]
    pub(crate) fn break_for_test(&self) {
        self.broken.store(true, Ordering::Release);
    }
}

/// A statement lent to one run, reset when the run is over: what a run
/// that ended early had started ends there, and the next run starts from
/// a statement in the state of a new one (dropping a statement resets it
/// the same way). When the reset fails or panics, the statement is no
/// longer kept, the failure is logged and the connection is marked broken.
struct Lent {
    statement: turso::Statement,
    kept: Option<(Arc<turso::Statement>, Kept)>,
    broken: Arc<AtomicBool>,
}

type Kept = Arc<Mutex<HashMap<String, Arc<turso::Statement>>>>;

impl Drop for Lent {
    fn drop(&mut self) {
        let st = &self.statement;
        let failure = match alk_store::panic::contain_sync(|| st.reset()) {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e.to_string(),
            Err(panic) => format!("panicked: {panic}"),
        };
        tracing::error!(target: "alk", "a statement could not be reset ({failure}); its connection is dropped");
        self.broken.store(true, Ordering::Release);
        if let Some((kept, map)) = &self.kept {
            lock(map).retain(|_, k| !Arc::ptr_eq(k, kept));
        }
    }
}

/// The rows of a run of a statement.
pub(crate) struct Rows {
    rows: turso::Rows,
    _lent: Lent,
}

impl Rows {
    /// The next row, or `None` once there are no more.
    pub(crate) async fn next(&mut self) -> Result<Option<turso::Row>, turso::Error> {
        self.rows.next().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::tests::FORMAT;
    use crate::retry::{RetryPolicy, exec, query};
    use crate::store::{Store, open_store};

    async fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let s = open_store(
            &dir.path().join("s.sqlite"),
            &FORMAT,
            RetryPolicy::default(),
        )
        .await
        .unwrap();
        (dir, s)
    }

    async fn all(rows: &mut Rows) -> Result<Vec<i64>, turso::Error> {
        let mut xs = Vec::new();
        while let Some(r) = rows.next().await? {
            xs.push(r.get::<i64>(0)?);
        }
        Ok(xs)
    }

    const INSERT: &str = "INSERT INTO t (x) VALUES (?1)";
    const SELECT: &str = "SELECT x FROM t ORDER BY x";

    #[tokio::test]
    async fn a_statement_is_kept_and_run_again_with_new_parameters() {
        let (_dir, s) = store().await;
        let (kept, xs) = s
            .run(|conn: Connection| {
                Box::pin(async move {
                    for x in [3, 1, 2] {
                        exec(&conn, INSERT, (x,)).await?;
                    }
                    let kept = conn.kept();
                    let xs = all(&mut query(&conn, SELECT, ()).await?).await?;
                    Ok((kept, xs))
                })
            })
            .await
            .unwrap();
        assert_eq!(kept, 1, "three runs of one statement keep one");
        assert_eq!(xs, [1, 2, 3]);
    }

    #[tokio::test]
    async fn rows_dropped_early_reset_their_statement() {
        let (_dir, s) = store().await;
        let (first, again, after) = s
            .run(|conn: Connection| {
                Box::pin(async move {
                    for x in [1, 2, 3] {
                        exec(&conn, INSERT, (x,)).await?;
                    }
                    let first = query(&conn, SELECT, ()).await?.next().await?.unwrap();
                    // The next run starts from the first row again.
                    let again = all(&mut query(&conn, SELECT, ()).await?).await?;
                    // A write statement with RETURNING left after its first
                    // row: unfinished, it would make the next write fail.
                    let sql = "INSERT INTO t (x) VALUES (?1), (?2) RETURNING x";
                    let mut rows = query(&conn, sql, (4, 5)).await?;
                    rows.next().await?.unwrap();
                    drop(rows);
                    exec(&conn, INSERT, (6,)).await?;
                    let after = all(&mut query(&conn, SELECT, ()).await?).await?;
                    Ok((first.get::<i64>(0)?, again, after))
                })
            })
            .await
            .unwrap();
        assert_eq!(first, 1);
        assert_eq!(again, [1, 2, 3]);
        // The unfinished insert wrote nothing, the next one its row.
        assert!(
            after == [1, 2, 3, 6] || after == [1, 2, 3, 4, 5, 6],
            "{after:?}"
        );
    }

    #[tokio::test]
    async fn two_runs_of_one_statement_at_once_do_not_share_it() {
        let (_dir, s) = store().await;
        let (outer, inner, kept) = s
            .run(|conn: Connection| {
                Box::pin(async move {
                    for x in [1, 2, 3] {
                        exec(&conn, INSERT, (x,)).await?;
                    }
                    let mut outer = query(&conn, SELECT, ()).await?;
                    let mut xs = vec![outer.next().await?.unwrap().get::<i64>(0)?];
                    let inner = all(&mut query(&conn, SELECT, ()).await?).await?;
                    xs.extend(all(&mut outer).await?);
                    Ok((xs, inner, conn.kept()))
                })
            })
            .await
            .unwrap();
        assert_eq!(outer, [1, 2, 3]);
        assert_eq!(inner, [1, 2, 3]);
        assert_eq!(kept, 2, "the insert and the select");
    }

    /// A new unique index, created by this connection or by another one,
    /// holds for the kept insert: the engine prepares it again.
    #[tokio::test]
    async fn a_kept_statement_follows_a_schema_change() {
        let (_dir, s) = store().await;
        let s2 = s.clone();
        let refused = s
            .run(move |conn: Connection| {
                let s2 = s2.clone();
                Box::pin(async move {
                    exec(&conn, INSERT, (1,)).await?;
                    exec(&conn, INSERT, (2,)).await?;
                    // Another connection (this one is lent out) adds one.
                    s2.run(|other: Connection| {
                        Box::pin(async move {
                            other
                                .execute("CREATE UNIQUE INDEX u1 ON t (x) WHERE x < 10", ())
                                .await?;
                            Ok(())
                        })
                    })
                    .await?;
                    let mut refused = vec![exec(&conn, INSERT, (1,)).await.is_err()];
                    conn.execute("CREATE UNIQUE INDEX u2 ON t (x) WHERE x >= 10", ())
                        .await?;
                    exec(&conn, INSERT, (10,)).await?;
                    refused.push(exec(&conn, INSERT, (10,)).await.is_err());
                    refused.push(exec(&conn, INSERT, (11,)).await.is_err());
                    let xs = all(&mut query(&conn, SELECT, ()).await?).await?;
                    Ok((refused, xs, conn.kept()))
                })
            })
            .await
            .unwrap();
        assert_eq!(
            refused,
            (vec![true, true, false], vec![1, 2, 10, 11], 2),
            "duplicates refused by both new indexes, one statement kept each"
        );
    }

    #[tokio::test]
    async fn a_broken_connection_does_not_go_back_to_the_pool() {
        let (_dir, s) = store().await;
        let mut seen = Vec::new();
        for broken in [false, true, false] {
            let kept = s
                .run(move |conn: Connection| {
                    Box::pin(async move {
                        let kept = conn.kept();
                        exec(&conn, INSERT, (1,)).await?;
                        if broken {
                            conn.break_for_test();
                        }
                        Ok(kept)
                    })
                })
                .await
                .unwrap();
            seen.push(kept);
        }
        // The first connection comes back to the second operation with its
        // statement; the third gets a new one.
        assert_eq!(seen, [0, 1, 0]);
    }
}
