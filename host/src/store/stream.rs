//! `localstream.v1`: durable streams with consumer offsets, and the only
//! implementation of that format.
//!
//! One file holds every stream of a data directory:
//! `<data-dir>/stream/localstream.sqlite`. The schema and every statement
//! are defined here, once, and pinned by `docs/formats/localstream.v1.md`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use tokio::time::Instant;
use turso::{Connection, Value};

use super::names::{check_identifier, check_key, check_name, check_size};
use super::gate::WriteGuard;
use super::open::{Format, Handle, Store, open_store, panic_text};
use super::retry::{Failure, exec, query};
use super::wake::{Check, Wakes};
use crate::error::{AlkError, AlkResult};

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

/// Size limits of stream input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// Largest payload, in bytes.
    pub max_payload_bytes: usize,
    /// Longest event key, in bytes.
    pub max_key_bytes: usize,
    /// Longest a transaction may hold the stream store's write lock before
    /// the host rolls it back.
    pub max_transaction: Duration,
}

impl Default for StreamLimits {
    fn default() -> Self {
        StreamLimits {
            max_payload_bytes: 1024 * 1024,
            max_key_bytes: 1024,
            max_transaction: Duration::from_secs(10),
        }
    }
}

/// The most events one read returns.
pub const MAX_READ: u32 = 1000;
pub use super::MAX_READ_BYTES;

/// One stored event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Its offset in the stream.
    pub offset: u64,
    /// The stream.
    pub stream: String,
    /// The key it was published with, if any.
    pub key: Option<String>,
    /// The payload.
    pub payload: Vec<u8>,
    /// When it was published, unix epoch milliseconds.
    pub created_at: i64,
}

/// The stream store of a data directory.
#[derive(Debug, Clone)]
pub struct StreamStore {
    store: Store,
    limits: StreamLimits,
    wakes: Wakes,
}

fn topic(stream: &str) -> String {
    format!("stream.{stream}")
}

/// The stream store file under `data_dir`.
pub fn stream_path(data_dir: &Path) -> PathBuf {
    data_dir.join("stream").join("localstream.sqlite")
}

fn to_i64(what: &str, v: u64) -> AlkResult<i64> {
    i64::try_from(v).map_err(|_| AlkError::InvalidArgument(format!("{what} {v} is out of range")))
}

impl StreamStore {
    /// Opens (creating on first use) the stream store under `data_dir`.
    pub async fn open(
        data_dir: &Path,
        limits: StreamLimits,
        policy: impl Into<super::StoreOptions>,
    ) -> AlkResult<Self> {
        let store = open_store(&stream_path(data_dir), &FORMAT, policy).await?;
        Ok(StreamStore {
            store,
            limits,
            wakes: Wakes::for_data_dir(data_dir),
        })
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        self.store.path()
    }

    /// The limits in force.
    pub fn limits(&self) -> StreamLimits {
        self.limits
    }

    fn check_publish(&self, stream: &str, key: Option<&str>, payload: &[u8]) -> AlkResult<()> {
        check_name("stream", stream)?;
        if let Some(key) = key {
            check_key("event key", key, self.limits.max_key_bytes)?;
        }
        check_size("payload", payload.len(), self.limits.max_payload_bytes)
    }

    /// Appends an event; returns its offset.
    pub async fn publish(
        &self,
        stream: &str,
        key: Option<&str>,
        payload: &[u8],
        now: i64,
    ) -> AlkResult<u64> {
        self.check_publish(stream, key, payload)?;
        let offset = self
            .store
            .run_immediate(|conn: Connection| {
                Box::pin(async move { publish_on(&conn, stream, key, payload, now).await })
            })
            .await?;
        self.wakes.signal(&topic(stream));
        Ok(offset)
    }

    /// Appends every `(key, payload)` to `stream` in one transaction; their
    /// offsets.
    pub async fn publish_batch(
        &self,
        stream: &str,
        events: &[(Option<String>, Vec<u8>)],
        now: i64,
    ) -> AlkResult<Vec<u64>> {
        super::check_batch("events", events.len())?;
        for (key, payload) in events {
            self.check_publish(stream, key.as_deref(), payload)?;
        }
        check_name("stream", stream)?;
        let offsets = self
            .store
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
            .await?;
        if !offsets.is_empty() {
            self.wakes.signal(&topic(stream));
        }
        Ok(offsets)
    }

    /// Like [`StreamStore::read_since`], but waits (without holding
    /// anything open) until there is at least one event after `offset`, or
    /// `deadline`; `None` means there is still nothing. With `limit` 0 it
    /// only waits and returns an empty list when there is something.
    pub async fn read_wait(
        &self,
        stream: &str,
        offset: u64,
        limit: u32,
        deadline: Option<Instant>,
    ) -> AlkResult<Option<Vec<Event>>> {
        check_name("stream", stream)?;
        self.wakes
            .wait_for(&topic(stream), deadline, || {
                Box::pin(async move {
                    let events = self.read_since(stream, offset, limit.max(1)).await?;
                    Ok(match (events.is_empty(), limit) {
                        (true, _) => Check::NotYet(None),
                        (false, 0) => Check::Ready(Vec::new()),
                        (false, _) => Check::Ready(events),
                    })
                })
            })
            .await
    }

    /// Up to `limit` events with offsets above `offset`, in offset order.
    pub async fn read_since(&self, stream: &str, offset: u64, limit: u32) -> AlkResult<Vec<Event>> {
        check_name("stream", stream)?;
        let offset = to_i64("offset", offset)?;
        let limit = i64::from(limit.clamp(1, MAX_READ));
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
                            _ => Vec::new(),
                        };
                        if !events.is_empty() && bytes + payload.len() > MAX_READ_BYTES {
                            break;
                        }
                        bytes += payload.len();
                        events.push(Event {
                            offset: row.get::<i64>(0)? as u64,
                            stream: stream.to_string(),
                            key: match row.get_value(1)? {
                                Value::Text(k) => Some(k),
                                _ => None,
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

    /// Saves `consumer`'s offset in `stream`; a lower offset than the saved
    /// one changes nothing.
    pub async fn save_offset(&self, stream: &str, consumer: &str, offset: u64) -> AlkResult<()> {
        check_save(stream, consumer)?;
        let offset = to_i64("offset", offset)?;
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(async move { save_offset_on(&conn, stream, consumer, offset).await })
            })
            .await
    }

    /// `consumer`'s saved offset in `stream`, if it ever saved one.
    pub async fn get_offset(&self, stream: &str, consumer: &str) -> AlkResult<Option<u64>> {
        check_save(stream, consumer)?;
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

    /// Deletes the events of `stream` with offsets at or below `horizon`;
    /// returns how many were deleted.
    pub async fn trim_to(&self, stream: &str, horizon: u64) -> AlkResult<u64> {
        check_name("stream", stream)?;
        let horizon = to_i64("horizon", horizon)?;
        self.store
            .run_write(|conn: Connection| {
                Box::pin(async move { Ok(exec(&conn, TRIM, (stream, horizon)).await?) })
            })
            .await
    }

    /// A transaction on this store; it takes the write lock at its first
    /// operation.
    pub fn transaction(&self) -> StreamTx {
        StreamTx {
            store: self.clone(),
            state: Arc::new(tokio::sync::Mutex::new(TxState::NotStarted)),
            published: Default::default(),
        }
    }
}

fn check_save(stream: &str, consumer: &str) -> AlkResult<()> {
    check_name("stream", stream)?;
    check_identifier("consumer", consumer)
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

/// Where a transaction stands.
enum TxState {
    /// No operation yet: no lock held.
    NotStarted,
    /// `BEGIN IMMEDIATE` done on this connection of this database: the
    /// write lock is held. The watchdog rolls it back when it is held too
    /// long.
    Open(Open),
    /// Committed or rolled back by its owner.
    Finished,
    /// Rolled back by the host; the reason.
    Aborted(String),
}

/// An open transaction: its connection, the database that connection
/// belongs to (kept open while the transaction is), and its watchdog.
struct Open {
    conn: Connection,
    handle: Arc<Handle>,
    watchdog: tokio::task::AbortHandle,
    /// The store's write gate, held until the transaction ends.
    _turn: WriteGuard,
}

impl Open {
    /// Ends the transaction with `sql` (`COMMIT` or `ROLLBACK`); the
    /// connection goes back to the pool when it did.
    async fn end(self, store: &Store, sql: &str) -> Result<(), String> {
        self.watchdog.abort();
        let result = std::panic::AssertUnwindSafe(exec(&self.conn, sql, ()))
            .catch_unwind()
            .await;
        match result {
            Ok(Ok(_)) => {
                store.check_in(&self.handle, self.conn);
                Ok(())
            }
            Ok(Err(e)) => {
                let _ = exec(&self.conn, "ROLLBACK", ()).await;
                Err(e.to_string())
            }
            Err(panic) => {
                store.discard(&self.handle);
                Err(format!("the engine failed: {}", panic_text(&*panic)))
            }
        }
    }
}

/// A transaction on the stream store: publishes and offset saves made in it
/// become visible together at [`StreamTx::commit`], or not at all.
///
/// It holds the store's write lock from its first operation until commit or
/// rollback, which blocks every other writer of the store (in every
/// process), so the host rolls it back once it has been open for
/// [`StreamLimits::max_transaction`]. Dropping it without committing rolls
/// it back.
pub struct StreamTx {
    store: StreamStore,
    state: Arc<tokio::sync::Mutex<TxState>>,
    /// Streams published to, to wake their waiters after commit.
    published: std::sync::Mutex<Vec<String>>,
}

impl std::fmt::Debug for StreamTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamTx")
            .field("store", &self.store.path())
            .finish_non_exhaustive()
    }
}

impl StreamTx {
    /// Runs `op` on the transaction's connection, beginning it if needed.
    /// An engine failure rolls the whole transaction back.
    async fn with_conn<T>(
        &self,
        op: impl AsyncFnOnce(&Connection) -> Result<T, Failure>,
    ) -> AlkResult<T> {
        let mut state = self.state.lock().await;
        if matches!(*state, TxState::NotStarted) {
            let (handle, conn, turn) = self.store.store.begin().await?;
            *state = TxState::Open(Open {
                conn,
                handle,
                watchdog: self.arm_watchdog(),
                _turn: turn,
            });
        }
        let conn = match &*state {
            TxState::Open(open) => open.conn.clone(),
            TxState::Finished => {
                return Err(AlkError::InvalidArgument(
                    "the transaction is already finished".into(),
                ));
            }
            TxState::Aborted(why) => return Err(AlkError::TransactionAborted(why.clone())),
            TxState::NotStarted => unreachable!("begun above"),
        };
        let result = std::panic::AssertUnwindSafe(op(&conn))
            .catch_unwind()
            .await
            .map_err(|panic| format!("the engine failed: {}", panic_text(&*panic)));
        let why = match result {
            Ok(Ok(v)) => return Ok(v),
            // A refused request wrote nothing: the transaction goes on.
            Ok(Err(Failure::Alk(e))) => return Err(e),
            Ok(Err(Failure::Db(e))) => e.to_string(),
            Err(panicked) => panicked,
        };
        if let TxState::Open(open) = std::mem::replace(&mut *state, TxState::Finished) {
            if why.starts_with("the engine failed") {
                // Its state is unknown: close the database (which drops the
                // uncommitted transaction and its lock) rather than use it.
                open.watchdog.abort();
                self.store.store.discard(&open.handle);
            } else {
                let _ = open.end(&self.store.store, "ROLLBACK").await;
            }
        }
        let why = format!("an operation failed and the transaction was rolled back: {why}");
        *state = TxState::Aborted(why.clone());
        Err(AlkError::TransactionAborted(why))
    }

    /// Rolls the transaction back once it has held the lock too long; the
    /// task is aborted when the transaction ends first.
    fn arm_watchdog(&self) -> tokio::task::AbortHandle {
        let state = Arc::downgrade(&self.state);
        let limit = self.store.limits.max_transaction;
        let store = self.store.store.clone();
        tokio::spawn(async move {
            tokio::time::sleep(limit).await;
            let Some(state) = state.upgrade() else { return };
            let mut state = state.lock().await;
            if !matches!(*state, TxState::Open(_)) {
                return;
            }
            if let TxState::Open(open) = std::mem::replace(&mut *state, TxState::Finished) {
                let _ = open.end(&store, "ROLLBACK").await;
                *state = TxState::Aborted(format!(
                    "the transaction was open longer than {limit:?} and was rolled back"
                ));
            }
        })
        .abort_handle()
    }

    /// Appends an event inside the transaction; returns its offset.
    pub async fn publish(
        &self,
        stream: &str,
        key: Option<&str>,
        payload: &[u8],
        now: i64,
    ) -> AlkResult<u64> {
        self.store.check_publish(stream, key, payload)?;
        let offset = self
            .with_conn(async |conn: &Connection| publish_on(conn, stream, key, payload, now).await)
            .await?;
        let mut published = self.published.lock().unwrap_or_else(|p| p.into_inner());
        if !published.iter().any(|s| s == stream) {
            published.push(stream.to_string());
        }
        Ok(offset)
    }

    /// Saves a consumer offset inside the transaction.
    pub async fn save_offset(&self, stream: &str, consumer: &str, offset: u64) -> AlkResult<()> {
        check_save(stream, consumer)?;
        let offset = to_i64("offset", offset)?;
        self.with_conn(async |conn: &Connection| {
            save_offset_on(conn, stream, consumer, offset).await
        })
        .await
    }

    /// Makes everything done in the transaction durable and visible.
    pub async fn commit(&self) -> AlkResult<()> {
        let mut state = self.state.lock().await;
        match std::mem::replace(&mut *state, TxState::Finished) {
            TxState::NotStarted => Ok(()),
            TxState::Open(open) => match open.end(&self.store.store, "COMMIT").await {
                Ok(()) => {
                    let published = std::mem::take(
                        &mut *self.published.lock().unwrap_or_else(|p| p.into_inner()),
                    );
                    for stream in published {
                        self.store.wakes.signal(&topic(&stream));
                    }
                    Ok(())
                }
                Err(e) => {
                    let why = format!("commit failed and the transaction was rolled back: {e}");
                    *state = TxState::Aborted(why.clone());
                    Err(AlkError::TransactionAborted(why))
                }
            },
            TxState::Finished => Err(AlkError::InvalidArgument(
                "the transaction is already finished".into(),
            )),
            TxState::Aborted(why) => {
                *state = TxState::Aborted(why.clone());
                Err(AlkError::TransactionAborted(why))
            }
        }
    }

    /// Discards everything done in the transaction.
    pub async fn rollback(&self) {
        let mut state = self.state.lock().await;
        if let TxState::Open(open) = std::mem::replace(&mut *state, TxState::Finished) {
            let _ = open.end(&self.store.store, "ROLLBACK").await;
        }
    }
}

impl Drop for StreamTx {
    fn drop(&mut self) {
        // Dropped while open (a guest that trapped or was torn down): roll
        // back on the runtime, since a drop cannot wait.
        let Ok(mut state) = self.state.try_lock() else {
            return;
        };
        if let TxState::Open(open) = std::mem::replace(&mut *state, TxState::Finished)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let store = self.store.store.clone();
            runtime.spawn(async move {
                let _ = open.end(&store, "ROLLBACK").await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::RetryPolicy;

    const DOC: &str = include_str!("../../../docs/formats/localstream.v1.md");

    #[test]
    fn the_format_document_pins_the_ddl_and_every_statement() {
        crate::store::assert_document_pins(
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

    async fn store(dir: &Path) -> StreamStore {
        StreamStore::open(dir, StreamLimits::default(), RetryPolicy::default())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn offsets_survive_trim_and_reopen_and_saves_only_move_forward() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path()).await;
        for i in 1..=5u64 {
            assert_eq!(s.publish("s", None, b"x", 0).await.unwrap(), i);
        }
        assert_eq!(s.publish("other", Some("k"), b"y", 0).await.unwrap(), 1);
        assert_eq!(s.trim_to("s", 5).await.unwrap(), 5);
        assert_eq!(s.publish("s", None, b"x", 0).await.unwrap(), 6);
        s.save_offset("s", "c", 4).await.unwrap();
        s.save_offset("s", "c", 2).await.unwrap();
        assert_eq!(s.get_offset("s", "c").await.unwrap(), Some(4));
        assert!(matches!(
            s.save_offset("s", "c", 7).await,
            Err(AlkError::InvalidArgument(_))
        ));
        let read = s.read_since("s", 0, 10).await.unwrap();
        assert_eq!(read.iter().map(|e| e.offset).collect::<Vec<_>>(), [6]);
        let other = s.read_since("other", 0, 10).await.unwrap();
        assert_eq!(other[0].key.as_deref(), Some("k"));
    }

    #[tokio::test]
    async fn a_transaction_commits_all_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path()).await;
        s.publish("in", None, b"a", 0).await.unwrap();
        let tx = s.transaction();
        assert_eq!(tx.publish("out", None, b"derived", 0).await.unwrap(), 1);
        tx.save_offset("in", "worker", 1).await.unwrap();
        tx.rollback().await;
        assert!(s.read_since("out", 0, 10).await.unwrap().is_empty());
        assert_eq!(s.get_offset("in", "worker").await.unwrap(), None);
        let tx = s.transaction();
        assert_eq!(tx.publish("out", None, b"derived", 0).await.unwrap(), 1);
        tx.save_offset("in", "worker", 1).await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(s.read_since("out", 0, 10).await.unwrap().len(), 1);
        assert_eq!(s.get_offset("in", "worker").await.unwrap(), Some(1));
        assert!(matches!(
            tx.commit().await,
            Err(AlkError::InvalidArgument(_))
        ));
    }

    #[tokio::test]
    async fn an_engine_panic_inside_a_transaction_aborts_it_and_frees_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path()).await;
        let tx = s.transaction();
        tx.publish("s", None, b"in tx", 0).await.unwrap();
        let failed = tx
            .with_conn(async |_conn: &Connection| -> Result<(), Failure> {
                panic!("simulated engine failure")
            })
            .await;
        assert!(
            matches!(&failed, Err(AlkError::TransactionAborted(m)) if m.contains("simulated")),
            "{failed:?}"
        );
        assert!(matches!(
            tx.commit().await,
            Err(AlkError::TransactionAborted(_))
        ));
        // Nothing of it was applied, and the write lock is free.
        assert_eq!(s.publish("s", None, b"after", 0).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn a_transaction_held_past_its_limit_is_rolled_back() {
        let dir = tempfile::tempdir().unwrap();
        let limits = StreamLimits {
            max_transaction: Duration::from_millis(100),
            ..StreamLimits::default()
        };
        let s = StreamStore::open(dir.path(), limits, RetryPolicy::default())
            .await
            .unwrap();
        let tx = s.transaction();
        tx.publish("s", None, b"late", 0).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(matches!(
            tx.commit().await,
            Err(AlkError::TransactionAborted(_))
        ));
        // The lock is free again and nothing was applied.
        assert_eq!(s.publish("s", None, b"next", 0).await.unwrap(), 1);
    }
}
