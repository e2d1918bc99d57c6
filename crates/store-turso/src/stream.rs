//! `localstream.v1`: durable streams with consumer offsets, and the only
//! implementation of that format.
//!
//! One file holds every stream of a data directory:
//! `<data-dir>/stream/localstream.sqlite`. The schema and every statement
//! are defined here, once, and pinned by `docs/formats/localstream.v1.md`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use alk_store::stream::{Event, StreamEngine, StreamTxEngine, TxFailure};
use alk_store::{AlkError, AlkResult};
use async_trait::async_trait;
use futures::FutureExt as _;
use turso::{Connection, Value};

use crate::gate::WriteGuard;
use crate::open::{Format, Handle, Store, StoreOptions, open_store, panic_text};
use crate::retry::{Failure, exec, query};

/// The DDL of `localstream.v1`, run (idempotently) on every open.
pub const DDL: &str = "\
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT OR IGNORE INTO meta (key, value) VALUES ('format', 'localstream.v1');
CREATE TABLE IF NOT EXISTS streams (
    stream      TEXT PRIMARY KEY,
    last_offset INTEGER NOT NULL -- highest offset ever assigned in the stream; never decreases
);
CREATE TABLE IF NOT EXISTS events (
    stream     TEXT NOT NULL,
    seq        INTEGER NOT NULL, -- the event's offset: 1, 2, 3, ... per stream
    key        TEXT,             -- NULL when published without a key
    payload    BLOB NOT NULL,
    created_at INTEGER NOT NULL, -- unix epoch MILLISECONDS; informational, not an ordering
    PRIMARY KEY (stream, seq)
);
CREATE TABLE IF NOT EXISTS consumer_offsets (
    stream   TEXT NOT NULL,
    consumer TEXT NOT NULL,
    seq      INTEGER NOT NULL, -- the consumer's saved offset; never decreases
    PRIMARY KEY (stream, consumer)
);
";

/// The `localstream.v1` format.
pub static FORMAT: Format = Format {
    marker: "localstream.v1",
    ddl: DDL,
    also: &[],
};

/// Assigns the next offset of a stream (1 for a new stream).
pub const NEXT_OFFSET: &str = "INSERT INTO streams (stream, last_offset) VALUES (?1, 1) \
ON CONFLICT(stream) DO UPDATE SET last_offset = last_offset + 1 RETURNING last_offset";
/// Appends an event at an assigned offset.
pub const APPEND: &str =
    "INSERT INTO events (stream, seq, key, payload, created_at) VALUES (?1, ?2, ?3, ?4, ?5)";
/// Events after an offset, in offset order.
pub const READ_SINCE: &str = "SELECT seq, key, payload, created_at FROM events \
WHERE stream = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3";
/// The highest offset ever assigned in a stream.
pub const LAST_OFFSET: &str = "SELECT last_offset FROM streams WHERE stream = ?1";
/// Saves a consumer's offset unless that would move it back.
pub const SAVE_OFFSET: &str = "INSERT INTO consumer_offsets (stream, consumer, seq) VALUES (?1, ?2, ?3) \
ON CONFLICT(stream, consumer) DO UPDATE SET seq = excluded.seq WHERE excluded.seq > consumer_offsets.seq";
/// A consumer's saved offset.
pub const GET_OFFSET: &str = "SELECT seq FROM consumer_offsets WHERE stream = ?1 AND consumer = ?2";
/// Deletes the events at or below a horizon.
pub const TRIM: &str = "DELETE FROM events WHERE stream = ?1 AND seq <= ?2";

/// The stream store of a data directory.
#[derive(Debug, Clone)]
pub struct StreamStore {
    store: Store,
}

/// The stream store file under `data_dir`.
pub fn stream_path(data_dir: &Path) -> PathBuf {
    data_dir.join("stream").join("localstream.sqlite")
}

/// A row of `events` that breaks the format.
fn corrupt(path: &Path, stream: &str, column: &str, found: &Value) -> Failure {
    Failure::Alk(AlkError::Internal(format!(
        "{}: an event of stream {stream:?} has {found:?} in {column}, which localstream.v1 does not allow; the store is corrupt",
        path.display()
    )))
}

impl StreamStore {
    /// Opens (creating on first use) the stream store under `data_dir`.
    pub async fn open(data_dir: &Path, options: impl Into<StoreOptions>) -> AlkResult<Self> {
        let store = open_store(&stream_path(data_dir), &FORMAT, options).await?;
        Ok(StreamStore { store })
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        self.store.path()
    }
}

#[async_trait]
impl StreamEngine for StreamStore {
    async fn publish(
        &self,
        stream: &str,
        key: Option<&str>,
        payload: &[u8],
        now: i64,
    ) -> AlkResult<u64> {
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(async move { publish_on(&conn, stream, key, payload, now).await })
            })
            .await
    }

    async fn publish_batch(
        &self,
        stream: &str,
        events: &[(Option<String>, Vec<u8>)],
        now: i64,
    ) -> AlkResult<Vec<u64>> {
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(async move {
                    let mut offsets = Vec::with_capacity(events.len());
                    for (key, payload) in events {
                        offsets
                            .push(publish_on(&conn, stream, key.as_deref(), payload, now).await?);
                    }
                    Ok(offsets)
                })
            })
            .await
    }

    async fn read_since(
        &self,
        stream: &str,
        offset: u64,
        limit: u32,
        max_bytes: usize,
    ) -> AlkResult<Vec<Event>> {
        let (offset, limit) = (offset as i64, i64::from(limit));
        let path = self.store.path();
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, READ_SINCE, (stream, offset, limit)).await?;
                    let mut events = Vec::new();
                    let mut bytes = 0usize;
                    while let Some(row) = rows.next().await? {
                        let payload = match row.get_value(2)? {
                            Value::Blob(b) => b,
                            Value::Text(t) => t.into_bytes(),
                            other => return Err(corrupt(path, stream, "payload", &other)),
                        };
                        if !events.is_empty() && bytes + payload.len() > max_bytes {
                            break;
                        }
                        bytes += payload.len();
                        events.push(Event {
                            offset: row.get::<i64>(0)? as u64,
                            stream: stream.to_string(),
                            key: match row.get_value(1)? {
                                Value::Text(k) => Some(k),
                                Value::Null => None,
                                other => return Err(corrupt(path, stream, "key", &other)),
                            },
                            payload,
                            created_at: row.get::<i64>(3)?,
                        });
                    }
                    Ok(events)
                })
            })
            .await
    }

    async fn save_offset(&self, stream: &str, consumer: &str, offset: u64) -> AlkResult<()> {
        let offset = offset as i64;
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(async move { save_offset_on(&conn, stream, consumer, offset).await })
            })
            .await
    }

    async fn get_offset(&self, stream: &str, consumer: &str) -> AlkResult<Option<u64>> {
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, GET_OFFSET, (stream, consumer)).await?;
                    let mut found = None;
                    while let Some(row) = rows.next().await? {
                        found = Some(row.get::<i64>(0)? as u64);
                    }
                    Ok(found)
                })
            })
            .await
    }

    async fn trim_to(&self, stream: &str, horizon: u64) -> AlkResult<u64> {
        let horizon = horizon as i64;
        self.store
            .run_write(|conn: Connection| {
                Box::pin(async move { Ok(exec(&conn, TRIM, (stream, horizon)).await?) })
            })
            .await
    }

    async fn begin(&self) -> AlkResult<Box<dyn StreamTxEngine>> {
        let (handle, conn, turn) = self.store.begin().await?;
        Ok(Box::new(TursoTx {
            store: self.store.clone(),
            conn,
            handle,
            _turn: turn,
        }))
    }
}

async fn publish_on(
    conn: &Connection,
    stream: &str,
    key: Option<&str>,
    payload: &[u8],
    now: i64,
) -> Result<u64, Failure> {
    let mut rows = query(conn, NEXT_OFFSET, (stream,)).await?;
    let mut offset = None;
    // Drain: a live RETURNING statement blocks the next write.
    while let Some(row) = rows.next().await? {
        offset = Some(row.get::<i64>(0)?);
    }
    drop(rows);
    let offset =
        offset.ok_or_else(|| Failure::Alk(AlkError::Internal("no offset was assigned".into())))?;
    exec(conn, APPEND, (stream, offset, key, payload.to_vec(), now)).await?;
    Ok(offset as u64)
}

async fn save_offset_on(
    conn: &Connection,
    stream: &str,
    consumer: &str,
    offset: i64,
) -> Result<(), Failure> {
    let mut rows = query(conn, LAST_OFFSET, (stream,)).await?;
    let mut last = 0i64;
    while let Some(row) = rows.next().await? {
        last = row.get::<i64>(0)?;
    }
    drop(rows);
    if offset > last {
        return Err(Failure::Alk(AlkError::InvalidArgument(format!(
            "offset {offset} is beyond the last offset {last} of stream {stream:?}"
        ))));
    }
    exec(conn, SAVE_OFFSET, (stream, consumer, offset)).await?;
    Ok(())
}

/// An open transaction: `BEGIN IMMEDIATE` done on this connection of this
/// database, which stays open while the transaction is, and the store's
/// write gate, held until it ends.
struct TursoTx {
    store: Store,
    conn: Connection,
    handle: Arc<Handle>,
    _turn: WriteGuard,
}

impl TursoTx {
    /// Runs one operation of the transaction; an engine failure (or panic)
    /// rolls the transaction back.
    async fn op<T>(
        &mut self,
        op: impl std::future::Future<Output = Result<T, Failure>>,
    ) -> Result<T, TxFailure> {
        let result = std::panic::AssertUnwindSafe(op).catch_unwind().await;
        match result {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(Failure::Alk(e))) => Err(TxFailure::Refused(e)),
            Ok(Err(Failure::Db(e))) => {
                crate::retry::rollback(&self.conn, self.store.path()).await;
                Err(TxFailure::Failed(self.store.engine_error(e).to_string()))
            }
            Err(panic) => {
                // Its state is unknown: close the database (which drops the
                // uncommitted transaction and its lock) rather than use it.
                self.store.discard(&self.handle);
                Err(TxFailure::Failed(format!(
                    "the storage engine failed: {}",
                    panic_text(&*panic)
                )))
            }
        }
    }

    /// Ends the transaction with `sql` (`COMMIT` or `ROLLBACK`); the
    /// connection goes back to the pool when it did.
    async fn end(self, sql: &str) -> Result<(), String> {
        let result = std::panic::AssertUnwindSafe(exec(&self.conn, sql, ()))
            .catch_unwind()
            .await;
        match result {
            Ok(Ok(_)) => {
                self.store.check_in(&self.handle, self.conn);
                Ok(())
            }
            Ok(Err(e)) => {
                crate::retry::rollback(&self.conn, self.store.path()).await;
                Err(e.to_string())
            }
            Err(panic) => {
                self.store.discard(&self.handle);
                Err(format!(
                    "the storage engine failed: {}",
                    panic_text(&*panic)
                ))
            }
        }
    }
}

#[async_trait]
impl StreamTxEngine for TursoTx {
    async fn publish(
        &mut self,
        stream: &str,
        key: Option<&str>,
        payload: &[u8],
        now: i64,
    ) -> Result<u64, TxFailure> {
        let conn = self.conn.clone();
        self.op(async move { publish_on(&conn, stream, key, payload, now).await })
            .await
    }

    async fn save_offset(
        &mut self,
        stream: &str,
        consumer: &str,
        offset: u64,
    ) -> Result<(), TxFailure> {
        let conn = self.conn.clone();
        self.op(async move { save_offset_on(&conn, stream, consumer, offset as i64).await })
            .await
    }

    async fn commit(self: Box<Self>) -> Result<(), String> {
        self.end("COMMIT").await
    }

    async fn rollback(self: Box<Self>) {
        if let Err(e) = self.end("ROLLBACK").await {
            tracing::warn!("rolling back a stream transaction failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = include_str!("../../../docs/formats/localstream.v1.md");

    #[tokio::test]
    async fn an_engine_panic_inside_a_transaction_aborts_it_and_frees_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let s = StreamStore::open(dir.path(), crate::RetryPolicy::default())
            .await
            .unwrap();
        let (handle, conn, turn) = s.store.begin().await.unwrap();
        let mut tx = TursoTx {
            store: s.store.clone(),
            conn,
            handle,
            _turn: turn,
        };
        tx.publish("s", None, b"in tx", 0).await.unwrap();
        let failed = tx
            .op(async {
                if std::hint::black_box(true) {
                    panic!("simulated engine failure");
                }
                Ok::<(), Failure>(())
            })
            .await;
        assert!(
            matches!(&failed, Err(TxFailure::Failed(m)) if m.contains("simulated")),
            "{failed:?}"
        );
        drop(tx);
        // Nothing of it was applied, and the write lock is free.
        assert_eq!(s.publish("s", None, b"after", 0).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn a_row_that_breaks_the_format_is_an_internal_error_naming_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let s = StreamStore::open(dir.path(), crate::RetryPolicy::default())
            .await
            .unwrap();
        s.publish("s", None, b"x", 0).await.unwrap();
        for (column, value) in [("payload", "5"), ("created_at", "'soon'"), ("key", "x'00'")] {
            crate::write_sql(&s.store, &format!("UPDATE events SET {column} = {value}")).await;
            match s.read_since("s", 0, 10, 1 << 20).await {
                Err(AlkError::Internal(m)) => {
                    assert!(m.contains("localstream.sqlite"), "{column}: {m}")
                }
                other => panic!("{column}: expected internal, got {other:?}"),
            }
            crate::write_sql(
                &s.store,
                "UPDATE events SET payload = x'78', created_at = 0, key = NULL",
            )
            .await;
        }
    }

    #[test]
    fn the_format_document_pins_the_ddl_and_every_statement() {
        crate::assert_document_pins(
            "localstream.v1.md",
            DOC,
            &[
                ("DDL", DDL),
                ("NEXT_OFFSET", NEXT_OFFSET),
                ("APPEND", APPEND),
                ("READ_SINCE", READ_SINCE),
                ("LAST_OFFSET", LAST_OFFSET),
                ("SAVE_OFFSET", SAVE_OFFSET),
                ("GET_OFFSET", GET_OFFSET),
                ("TRIM", TRIM),
            ],
        );
    }
}
