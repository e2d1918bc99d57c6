//! `localstream.v2`: durable streams with consumer offsets, the relay of
//! transactional sends to queues, and schedules; the only implementation of
//! that format (and of `localstream.v1`, which it upgrades on open).
//!
//! One file holds every stream of a data directory:
//! `<data-dir>/stream/localstream.sqlite`. The schema and every statement
//! are defined here, once, and pinned by `docs/formats/localstream.v1.md`
//! and `docs/formats/localstream.v2.md`.
//!
//! A transaction is one `BEGIN IMMEDIATE` on this file. A commit is atomic
//! within one file only, and every queue is a file of its own, so a send to
//! a queue inside a transaction is written here, as a row of `relay`, and
//! moved to the queue after the commit (the *relay*): by the committing
//! call, by the next open of the store, or by the background relayer of any
//! process that has the store open. Each queue records the highest relay id
//! it applied from this store, so a relay repeated after a crash applies
//! nothing twice. The relayed rows are deleted here by the next write
//! transaction of the process (or its background relayer), not by a commit
//! of their own.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use alk_store::jobs::{SendOptions, Stamp};
use alk_store::queue::Payload;
use alk_store::schedule::{ScheduleEngine, ScheduleRow};
use alk_store::stream::{Event, StreamEngine, TxEngine, TxFailure};
use alk_store::wake::Wakes;
use alk_store::{AlkError, AlkResult};
use async_trait::async_trait;
use turso::{Connection, Value};

use crate::gate::WriteGuard;
use crate::open::{Format, Handle, Store, StoreOptions, Upgrade, open_store};
use crate::queue::{QueueStore, Queues, RELAY_REFUSED, RelayMark, Relayed, relay_refused};
use crate::retry::{Failure, exec, query};

macro_rules! v1_ddl {
    () => {
        "\
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
"
    };
}

macro_rules! new_store_id {
    () => {
        "INSERT OR IGNORE INTO meta (key, value) VALUES ('store_id', lower(hex(randomblob(4)) || '-' || \
hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-' || substr('89ab', 1 + (random() & 3), 1) || \
substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))))"
    };
}

macro_rules! upgrade {
    () => {
        concat!(
            "\
CREATE TABLE IF NOT EXISTS relay (
    id           INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused, also after the row is deleted
    queue        TEXT NOT NULL,              -- the queue the message goes to
    payload_type TEXT NOT NULL,              -- \"json\" | \"text\", as in localqueue
    payload_data TEXT NOT NULL,              -- serialized JSON for \"json\", raw string for \"text\"
    priority     INTEGER NOT NULL,           -- the resolved options of the send, as localqueue.v2 keeps them
    due_at       INTEGER NOT NULL,           -- unix epoch MILLISECONDS
    max_attempts INTEGER,                    -- NULL: no limit
    backoff_ms   INTEGER,                    -- NULL: the default base
    expires_at   INTEGER,                    -- unix epoch MILLISECONDS; NULL: never
    group_key    TEXT,                       -- NULL: no group
    created_at   INTEGER NOT NULL            -- unix epoch MILLISECONDS; the send time
);
CREATE INDEX IF NOT EXISTS idx_relay_queue ON relay (queue, id);
CREATE TABLE IF NOT EXISTS schedules (
    name            TEXT PRIMARY KEY,
    spec            TEXT NOT NULL,           -- as given: @every <n><s|m|h|d>
    every_ms        INTEGER NOT NULL,        -- the interval the spec gives
    queue           TEXT NOT NULL,
    payload_type    TEXT NOT NULL,           -- \"json\" | \"text\"
    payload_data    TEXT NOT NULL,
    priority        INTEGER,                 -- the send options as given; NULL: not given
    delay_ms        INTEGER,
    run_at_ms       INTEGER,
    max_attempts    INTEGER,
    backoff_base_ms INTEGER,
    expires_in_ms   INTEGER,
    group_key       TEXT,
    next_due        INTEGER NOT NULL         -- unix epoch MILLISECONDS; the next boundary not fired yet
);
",
            new_store_id!(),
            ";
UPDATE meta SET value = 'localstream.v2' WHERE key = 'format';
"
        )
    };
}

/// The DDL of `localstream.v1`.
pub const DDL: &str = v1_ddl!();

/// What turns a `localstream.v1` file into a `localstream.v2` one, in one
/// `BEGIN IMMEDIATE` transaction.
pub const UPGRADE: &str = upgrade!();

/// The DDL of a new `localstream.v2` file: [`DDL`], then [`UPGRADE`].
pub const DDL_V2: &str = concat!(v1_ddl!(), upgrade!());

/// Gives the store its id, once (part of [`UPGRADE`]).
pub const NEW_STORE_ID: &str = new_store_id!();

/// The `localstream.v1` format (files of it are upgraded when opened).
pub static FORMAT_V1: Format = Format {
    marker: "localstream.v1",
    ddl: DDL,
    also: &[],
    upgrades: &[],
};

/// The `localstream.v2` format, which the store opens; a `localstream.v1`
/// file is upgraded to it in place.
pub static FORMAT: Format = Format {
    marker: "localstream.v2",
    ddl: DDL_V2,
    also: &[],
    upgrades: &[Upgrade {
        from: &FORMAT_V1,
        script: UPGRADE,
    }],
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

/// The store's id: names it in the queues' relay marks.
pub const STORE_ID: &str = "SELECT value FROM meta WHERE key = 'store_id'";
/// Records one message a transaction sends to a queue.
pub const RELAY_SEND: &str = "INSERT INTO relay (queue, payload_type, payload_data, priority, due_at, \
max_attempts, backoff_ms, expires_at, group_key, created_at) \
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
/// The oldest pending messages of a queue above an id, by id.
pub const RELAY_PAGE: &str = "SELECT id, payload_type, payload_data, priority, due_at, max_attempts, \
backoff_ms, expires_at, group_key, created_at FROM relay WHERE queue = ?1 AND id > ?2 ORDER BY id LIMIT ?3";
/// The highest pending message of a queue at or below a queue's relay mark:
/// the row the mark was written from, in the file it was written from.
pub const RELAY_MARKED: &str = "SELECT id, created_at, payload_data FROM relay WHERE queue = ?1 AND id <= ?2 \
ORDER BY id DESC LIMIT 1";
/// Forgets the messages of a queue up to an id, once the queue has them.
pub const RELAY_DONE: &str = "DELETE FROM relay WHERE queue = ?1 AND id <= ?2";
/// The first queue after `?1` (by name) with pending messages.
pub const RELAY_NEXT_QUEUE: &str =
    "SELECT queue FROM relay WHERE queue > ?1 ORDER BY queue LIMIT 1";

/// Stores a schedule, replacing one of the same name; a replacement with
/// the same interval keeps the stored next boundary.
pub const SCHEDULE_PUT: &str = "INSERT INTO schedules (name, spec, every_ms, queue, payload_type, payload_data, \
priority, delay_ms, run_at_ms, max_attempts, backoff_base_ms, expires_in_ms, group_key, next_due) \
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) \
ON CONFLICT(name) DO UPDATE SET spec = excluded.spec, every_ms = excluded.every_ms, queue = excluded.queue, \
payload_type = excluded.payload_type, payload_data = excluded.payload_data, priority = excluded.priority, \
delay_ms = excluded.delay_ms, run_at_ms = excluded.run_at_ms, max_attempts = excluded.max_attempts, \
backoff_base_ms = excluded.backoff_base_ms, expires_in_ms = excluded.expires_in_ms, \
group_key = excluded.group_key, next_due = CASE WHEN every_ms = excluded.every_ms THEN next_due ELSE excluded.next_due END";
/// Deletes a schedule.
pub const SCHEDULE_REMOVE: &str = "DELETE FROM schedules WHERE name = ?1";
/// A schedule.
pub const SCHEDULE_GET: &str = "SELECT name, spec, every_ms, queue, payload_type, payload_data, priority, \
delay_ms, run_at_ms, max_attempts, backoff_base_ms, expires_in_ms, group_key, next_due \
FROM schedules WHERE name = ?1";
/// Every schedule, by name.
pub const SCHEDULE_LIST: &str = "SELECT name, spec, every_ms, queue, payload_type, payload_data, priority, \
delay_ms, run_at_ms, max_attempts, backoff_base_ms, expires_in_ms, group_key, next_due \
FROM schedules ORDER BY name";
/// Moves a schedule's next boundary from `?2` to `?3`, if it is still at
/// `?2`; what its jobs are.
pub const SCHEDULE_FIRE: &str = "UPDATE schedules SET next_due = ?3 WHERE name = ?1 AND next_due = ?2 \
RETURNING queue, payload_type, payload_data";

/// Most relay rows of one queue moved in one queue transaction.
pub const RELAY_BATCH: i64 = 1000;

/// Most pages of one queue relayed by a committing call, and by the relay
/// run when the store opens: the rest of a backlog is the background
/// relayer's.
const RELAY_PAGES_INLINE: usize = 1;

/// How often the background relayer looks for messages left pending.
pub const RELAY_EVERY: Duration = Duration::from_secs(1);

/// The longest a queue whose relay keeps failing waits between attempts
/// of the background relayer.
const RELAY_MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The stream store of a data directory: streams, offsets, transactions,
/// schedules.
#[derive(Debug, Clone)]
pub struct StreamStore {
    store: Store,
    relay: Arc<Relay>,
}

/// What moves committed sends from the stream store to their queues.
pub(crate) struct Relay {
    store: Store,
    /// The stream store's id (its meta row `store_id`).
    store_id: String,
    queues: Arc<Queues>,
    wakes: Option<Wakes>,
    /// Per queue, the highest relay id this process relayed to it whose
    /// rows may still be here: they are deleted by the next write
    /// transaction of this store (see [`StreamStore::begin_tx`],
    /// [`Relay::flush_relayed`]), and skipped by relays meanwhile.
    relayed: std::sync::Mutex<HashMap<String, i64>>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("store_id", &self.store_id)
            .finish_non_exhaustive()
    }
}

/// The stream store file under `data_dir`.
pub fn stream_path(data_dir: &Path) -> PathBuf {
    data_dir.join("stream").join("localstream.sqlite")
}

/// A row of `events` that breaks the format.
fn corrupt(path: &Path, stream: &str, column: &str, found: &Value) -> Failure {
    Failure::Alk(AlkError::Internal(format!(
        "{}: an event of stream {stream:?} has {found:?} in {column}, which localstream.v2 does not allow; the store is corrupt",
        path.display()
    )))
}

/// A row of `relay` or `schedules` that breaks the format.
fn corrupt_row(path: &Path, table: &str, row: &str, column: &str, found: &Value) -> Failure {
    Failure::Alk(AlkError::Internal(format!(
        "{}: {table} row {row} has {found:?} in {column}, which localstream.v2 does not allow; the store is corrupt",
        path.display()
    )))
}

/// Reads the columns of one row of `relay` or `schedules`, naming the row in
/// the error of a value the format does not allow.
struct Columns<'a> {
    row: &'a turso::Row,
    path: &'a Path,
    table: &'static str,
    name: String,
}

impl Columns<'_> {
    fn fail(&self, column: &str, found: &Value) -> Failure {
        corrupt_row(self.path, self.table, &self.name, column, found)
    }

    fn int(&self, i: usize, column: &str) -> Result<i64, Failure> {
        match self.row.get_value(i)? {
            Value::Integer(n) => Ok(n),
            other => Err(self.fail(column, &other)),
        }
    }

    fn opt_int(&self, i: usize, column: &str) -> Result<Option<i64>, Failure> {
        match self.row.get_value(i)? {
            Value::Integer(n) => Ok(Some(n)),
            Value::Null => Ok(None),
            other => Err(self.fail(column, &other)),
        }
    }

    /// An integer that must fit `T`.
    fn fit<T: TryFrom<i64>>(&self, i: usize, column: &str) -> Result<T, Failure> {
        let n = self.int(i, column)?;
        T::try_from(n).map_err(|_| self.fail(column, &Value::Integer(n)))
    }

    /// An optional integer that must fit `T`.
    fn opt<T: TryFrom<i64>>(&self, i: usize, column: &str) -> Result<Option<T>, Failure> {
        self.opt_int(i, column)?
            .map(|n| T::try_from(n).map_err(|_| self.fail(column, &Value::Integer(n))))
            .transpose()
    }

    fn text(&self, i: usize, column: &str) -> Result<String, Failure> {
        match self.row.get_value(i)? {
            Value::Text(t) => Ok(t),
            other => Err(self.fail(column, &other)),
        }
    }

    fn opt_text(&self, i: usize, column: &str) -> Result<Option<String>, Failure> {
        match self.row.get_value(i)? {
            Value::Text(t) => Ok(Some(t)),
            Value::Null => Ok(None),
            other => Err(self.fail(column, &other)),
        }
    }

    /// The payload of columns `kind` and `kind + 1`.
    fn payload(&self, kind: usize) -> Result<Payload, Failure> {
        let data = self.text(kind + 1, "payload_data")?;
        match self.row.get_value(kind)? {
            Value::Text(k) if k == "json" => Ok(Payload::Json(data)),
            Value::Text(k) if k == "text" => Ok(Payload::Text(data)),
            other => Err(self.fail("payload_type", &other)),
        }
    }
}

/// A relay row from a row of [`RELAY_PAGE`].
fn relayed_at(row: &turso::Row, path: &Path) -> Result<Relayed, Failure> {
    let id = row.get::<i64>(0)?;
    let c = Columns {
        row,
        path,
        table: "relay",
        name: id.to_string(),
    };
    Ok(Relayed {
        id,
        payload: c.payload(1)?,
        stamp: Stamp {
            priority: c.fit(3, "priority")?,
            due_at: c.int(4, "due_at")?,
            max_attempts: c.opt(5, "max_attempts")?,
            backoff_base_ms: c.opt(6, "backoff_ms")?,
            expires_at: c.opt_int(7, "expires_at")?,
            group: c.opt_text(8, "group_key")?,
        },
        created_at: c.int(9, "created_at")?,
    })
}

/// A schedule from a row of [`SCHEDULE_GET`] or [`SCHEDULE_LIST`].
fn schedule_at(row: &turso::Row, path: &Path) -> Result<ScheduleRow, Failure> {
    let name = row.get::<String>(0)?;
    let c = Columns {
        row,
        path,
        table: "schedules",
        name: format!("{name:?}"),
    };
    Ok(ScheduleRow {
        spec: c.text(1, "spec")?,
        every_ms: c.fit(2, "every_ms")?,
        queue: c.text(3, "queue")?,
        payload: c.payload(4)?,
        options: SendOptions {
            priority: c.opt(6, "priority")?,
            delay_ms: c.opt(7, "delay_ms")?,
            run_at_ms: c.opt(8, "run_at_ms")?,
            max_attempts: c.opt(9, "max_attempts")?,
            backoff_base_ms: c.opt(10, "backoff_base_ms")?,
            expires_in_ms: c.opt(11, "expires_in_ms")?,
            group: c.opt_text(12, "group_key")?,
        },
        next_due: c.int(13, "next_due")?,
        name,
    })
}

/// A `u64` option as the format stores it (every value the core lets
/// through fits).
fn stored(what: &str, v: Option<u64>) -> AlkResult<Option<i64>> {
    v.map(|v| {
        i64::try_from(v)
            .map_err(|_| AlkError::InvalidArgument(format!("{what} {v} is out of range")))
    })
    .transpose()
}

/// Records one message sent to `queue` inside the caller's transaction.
async fn relay_send_on(
    conn: &Connection,
    queue: &str,
    payload: &Payload,
    stamp: &Stamp,
    now: i64,
) -> Result<(), Failure> {
    let (kind, data) = payload.parts();
    exec(
        conn,
        RELAY_SEND,
        (
            queue,
            kind,
            data,
            i64::from(stamp.priority),
            stamp.due_at,
            stamp.max_attempts.map(i64::from),
            stamp.backoff_base_ms.map(|b| b as i64),
            stamp.expires_at,
            stamp.group.as_deref(),
            now,
        ),
    )
    .await?;
    Ok(())
}

impl StreamStore {
    /// Opens (creating on first use, upgrading a `localstream.v1` file) the
    /// stream store under `data_dir`, relays what earlier transactions left
    /// pending, and starts this store's background relayer.
    pub async fn open(data_dir: &Path, options: impl Into<StoreOptions>) -> AlkResult<Self> {
        let options = options.into();
        let queues = Arc::new(Queues::new(data_dir, options));
        Self::open_with(data_dir, options, queues, true).await
    }

    /// [`StreamStore::open`] relaying through the engine's `queues`;
    /// `background`: with a background relayer.
    pub(crate) async fn open_with(
        data_dir: &Path,
        options: StoreOptions,
        queues: Arc<Queues>,
        background: bool,
    ) -> AlkResult<Self> {
        let store = open_store(&stream_path(data_dir), &FORMAT, options).await?;
        let store_id = store_id(&store).await?;
        let relay = Arc::new(Relay {
            store: store.clone(),
            store_id,
            queues,
            wakes: crate::wake_file::wakes_of(data_dir).ok(),
            relayed: Default::default(),
        });
        // A process that died right after its commit left its sends here
        // (a page per queue: a backlog is the background relayer's).
        relay
            .relay_pending(&mut HashMap::new(), RELAY_PAGES_INLINE)
            .await;
        if background {
            spawn_relayer(Arc::downgrade(&relay));
        }
        Ok(StreamStore { store, relay })
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        self.store.path()
    }

    /// Begins a transaction. Its first statements delete the relay rows
    /// this process relayed since its last write here: they commit or roll
    /// back with the transaction (and stay noted until they commit).
    async fn begin_tx(&self) -> AlkResult<TursoTx> {
        let (handle, conn, turn) = self.store.begin().await?;
        let forgot = self.relay.relayed_rows();
        let forgot = if forgot.is_empty() {
            forgot
        } else {
            let deleted = alk_store::panic::contain(forget_on(&conn, &forgot)).await;
            match deleted {
                Ok(Ok(())) => forgot,
                Ok(Err(e)) => {
                    // They stay noted; the transaction starts again
                    // without them (the write gate is still held).
                    tracing::debug!(target: "alk", store = %self.store.path().display(), "deleting relayed rows failed: {e}");
                    crate::retry::rollback(&conn, self.store.path()).await;
                    if let Err(e) = exec(&conn, "BEGIN IMMEDIATE", ()).await {
                        self.store.check_in(&handle, conn);
                        return Err(self.store.engine_error(e));
                    }
                    Vec::new()
                }
                Err(panic) => {
                    self.store.discard(&handle);
                    return Err(AlkError::Internal(format!(
                        "the storage engine failed on {}: {}",
                        self.store.path().display(),
                        panic
                    )));
                }
            }
        };
        Ok(TursoTx {
            store: self.store.clone(),
            conn,
            handle,
            _turn: turn,
            relay: self.relay.clone(),
            sent: Vec::new(),
            forgot,
            synced: false,
        })
    }
}

/// The store's id, made if the file lacks it.
async fn store_id(store: &Store) -> AlkResult<String> {
    let read = || {
        store.run(|conn: Connection| {
            Box::pin(async move {
                let mut rows = query(&conn, STORE_ID, ()).await?;
                let mut id = None;
                while let Some(row) = rows.next().await? {
                    id = row.get_value(0)?.as_text().cloned();
                }
                Ok(id)
            })
        })
    };
    if let Some(id) = read().await? {
        return Ok(id);
    }
    store
        .run_write(|conn: Connection| {
            Box::pin(async move {
                exec(&conn, NEW_STORE_ID, ()).await?;
                Ok(())
            })
        })
        .await?;
    read().await?.ok_or_else(|| {
        AlkError::Internal(format!(
            "{}: the store has no id and none could be given to it",
            store.path().display()
        ))
    })
}

/// Runs the background relayer of `relay` until the relay (the stream store
/// of an engine) is dropped: about once every [`RELAY_EVERY`] it looks for
/// pending messages (one indexed read) and relays them.
fn spawn_relayer(relay: Weak<Relay>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let mut backoff = HashMap::new();
        loop {
            tokio::time::sleep(RELAY_EVERY).await;
            let Some(relay) = relay.upgrade() else {
                return;
            };
            let pass =
                alk_store::panic::contain(relay.relay_pending(&mut backoff, usize::MAX)).await;
            if let Err(panic) = pass {
                tracing::warn!(target: "alk", "the background relay failed: {}", panic);
            }
        }
    });
}

impl Relay {
    /// Relays every queue with pending messages (at most `pages` pages of
    /// each), except those `backoff` says to leave alone for now; failures
    /// are logged, and back the queue off.
    /// Relayed rows this process has not deleted yet are deleted first
    /// (they are no longer pending), and what this pass relays is deleted
    /// at its end: each in one transaction here for all queues.
    async fn relay_pending(
        &self,
        backoff: &mut HashMap<String, (tokio::time::Instant, Duration)>,
        pages: usize,
    ) {
        self.flush_relayed().await;
        let mut after = String::new();
        loop {
            let next = self
                .store
                .run(|conn: Connection| {
                    let after = after.clone();
                    Box::pin(async move {
                        let mut rows = query(&conn, RELAY_NEXT_QUEUE, (after,)).await?;
                        let mut next = None;
                        while let Some(row) = rows.next().await? {
                            next = Some(row.get::<String>(0)?);
                        }
                        Ok(next)
                    })
                })
                .await;
            let queue = match next {
                Ok(Some(q)) => q,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(target: "alk", store = %self.store.path().display(), "looking for pending relays failed: {e}");
                    break;
                }
            };
            after = queue.clone();
            let now = tokio::time::Instant::now();
            if backoff.get(&queue).is_some_and(|(until, _)| *until > now) {
                continue;
            }
            match self.relay_pages(&queue, pages).await {
                Ok(_) => {
                    backoff.remove(&queue);
                }
                Err(e) => {
                    let wait = backoff
                        .get(&queue)
                        .map_or(RELAY_EVERY, |(_, w)| (*w * 2).min(RELAY_MAX_BACKOFF));
                    backoff.insert(queue.clone(), (now + wait, wait));
                    log_failed_relay(&queue, &e);
                }
            }
        }
        self.flush_relayed().await;
    }

    /// The locked map of relayed rows not deleted yet.
    fn relayed_map(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.relayed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The highest relay id of `queue` this process relayed and has not
    /// deleted yet (0: none); every row of `queue` up to it is in the queue.
    fn relayed_up_to(&self, queue: &str) -> i64 {
        self.relayed_map().get(queue).copied().unwrap_or(0)
    }

    /// Notes that `queue` has every row up to `id`: they are deleted by the
    /// next write transaction here.
    fn note_relayed(&self, queue: &str, id: i64) {
        let mut map = self.relayed_map();
        let up_to = map.entry(queue.to_string()).or_insert(id);
        *up_to = (*up_to).max(id);
    }

    /// The relayed rows to delete: (queue, highest id), by queue.
    fn relayed_rows(&self) -> Vec<(String, i64)> {
        let mut rows: Vec<_> = self
            .relayed_map()
            .iter()
            .map(|(q, id)| (q.clone(), *id))
            .collect();
        rows.sort();
        rows
    }

    /// After a commit that deleted `rows` ([`Relay::relayed_rows`]): forgets
    /// them, unless a queue was relayed further meanwhile.
    fn forgotten(&self, rows: &[(String, i64)]) {
        let mut map = self.relayed_map();
        for (queue, id) in rows {
            if map.get(queue) == Some(id) {
                map.remove(queue);
            }
        }
    }

    /// Deletes the relayed rows not deleted yet, in one transaction. A
    /// failure is logged; they are deleted later (or, if this process
    /// stops first, by the next relay, which skips them).
    pub(crate) async fn flush_relayed(&self) {
        let rows = self.relayed_rows();
        if rows.is_empty() {
            return;
        }
        let done = &rows;
        let deleted = self
            .store
            .run_immediate(|conn: Connection| {
                Box::pin(async move { Ok(forget_on(&conn, done).await?) })
            })
            .await;
        match deleted {
            Ok(()) => self.forgotten(&rows),
            Err(e) => {
                tracing::debug!(target: "alk", store = %self.store.path().display(), "deleting relayed rows failed, they are deleted later: {e}")
            }
        }
    }

    /// The pending messages of `queue` not relayed yet by this process.
    #[cfg(test)]
    async fn pending(&self, queue: &str) -> AlkResult<Vec<Relayed>> {
        self.page(queue, self.relayed_up_to(queue)).await
    }

    /// The oldest pending messages of `queue` above id `after`.
    async fn page(&self, queue: &str, after: i64) -> AlkResult<Vec<Relayed>> {
        let path = self.store.path();
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, RELAY_PAGE, (queue, after, RELAY_BATCH)).await?;
                    let mut out = Vec::new();
                    while let Some(row) = rows.next().await? {
                        out.push(relayed_at(&row, path)?);
                    }
                    Ok(out)
                })
            })
            .await
    }

    /// Moves the pending messages of `queue` into it: per page of at most
    /// [`RELAY_BATCH`], one transaction of the queue file (which skips what
    /// it already has, without the write lock when that is everything, see
    /// [`crate::queue::QueueStore::relay`]); the page is noted, to be
    /// deleted here by the next write transaction. Rows this process
    /// relayed before are not read again. The number of messages the queue
    /// received.
    #[cfg(test)]
    pub(crate) async fn relay_queue(&self, queue: &str) -> AlkResult<u64> {
        self.relay_pages(queue, usize::MAX).await
    }

    /// [`Relay::relay_queue`], at most `pages` pages.
    ///
    /// A page with rows at or below the queue's relay mark is relayed only
    /// if this file still has the row the mark was written from
    /// ([`Relay::marked_row_here`]); otherwise the relay is refused and
    /// nothing is noted (deleted).
    async fn relay_pages(&self, queue: &str, pages: usize) -> AlkResult<u64> {
        let mut total = 0;
        let mut after = self.relayed_up_to(queue);
        let (mut done, mut reread) = (0, 0);
        while done < pages {
            let rows = self.page(queue, after).await?;
            let (Some(first), Some(last)) = (rows.first().map(|r| r.id), rows.last().map(|r| r.id))
            else {
                break;
            };
            let q = self.queues.get(queue).await?;
            let mark = q.relay_mark(&self.store_id).await?;
            if first <= mark.id && !self.marked_row_here(&q, queue, &mark).await? {
                // The rows at or below the mark were deleted since the page
                // was read (another relayer): read it again.
                reread += 1;
                if reread > 3 {
                    return Err(AlkError::Busy(format!(
                        "{}: the relay rows of queue {queue} kept changing while being read",
                        self.store.path().display()
                    )));
                }
                continue;
            }
            let inserted = q.relay(&self.store_id, &rows).await?;
            self.note_relayed(queue, last);
            total += inserted;
            done += 1;
            if inserted > 0
                && let Some(w) = &self.wakes
            {
                w.signal(&format!("queue.{queue}"));
            }
            if (rows.len() as i64) < RELAY_BATCH {
                break;
            }
            after = last;
        }
        Ok(total)
    }

    /// Whether this file has the relay row queue `q`'s `mark` was written
    /// from, when pending rows of `queue` at or below the mark were read:
    /// `true` when it does; `false` when no row at or below the mark is
    /// pending any more (they were deleted since); refused when the highest
    /// such row is not the one the mark recorded. A stream file that never
    /// goes back in time has it: the rows of a queue at or below its mark
    /// that are still here end at the mark's row (deletes remove every row
    /// up to an id at or below the mark; ids are never reused).
    async fn marked_row_here(
        &self,
        q: &QueueStore,
        queue: &str,
        mark: &RelayMark,
    ) -> AlkResult<bool> {
        let marked = self
            .store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, RELAY_MARKED, (queue, mark.id)).await?;
                    let mut found = None;
                    while let Some(row) = rows.next().await? {
                        found = Some((
                            row.get::<i64>(0)?,
                            row.get::<i64>(1)?,
                            row.get::<String>(2)?,
                        ));
                    }
                    Ok(found)
                })
            })
            .await?;
        let found = match marked {
            None => return Ok(false),
            Some((id, created_at, data)) if id == mark.id => {
                if mark.matches(created_at, data.len()) {
                    return Ok(true);
                }
                format!(
                    "a different relay row {id} (sent at {created_at}, {} payload bytes)",
                    data.len()
                )
            }
            Some((id, _, _)) => format!("relay row {id} pending below it but no row {}", mark.id),
        };
        let stream = self.store.path().display().to_string();
        Err(relay_refused(
            &stream,
            &self.store_id,
            queue,
            q.path(),
            mark,
            &found,
        ))
    }

    /// Relays `queues` after a commit that sent to them, a page of each
    /// (the background relayer moves the rest of a backlog). The commit
    /// stands whatever happens here: a failure is logged, and the messages
    /// stay pending for the next relay.
    async fn after_commit(&self, queues: &[String]) {
        for queue in queues {
            if let Err(e) = self.relay_pages(queue, RELAY_PAGES_INLINE).await {
                log_failed_relay(queue, &e);
            }
        }
    }
}

/// Deletes the relay rows `rows` ([`Relay::relayed_rows`]) names, inside
/// the caller's transaction.
async fn forget_on(conn: &Connection, rows: &[(String, i64)]) -> Result<(), turso::Error> {
    for (queue, last) in rows {
        exec(conn, RELAY_DONE, (queue.as_str(), *last)).await?;
    }
    Ok(())
}

fn log_failed_relay(queue: &str, e: &AlkError) {
    if matches!(e, AlkError::Internal(m) if m.starts_with(RELAY_REFUSED)) {
        tracing::error!(target: "alk", queue, "relaying committed sends is refused, they stay pending: {e}");
    } else if matches!(e, AlkError::Busy(_)) {
        tracing::debug!(target: "alk", queue, "relaying committed sends is held up, they stay pending: {e}");
    } else {
        tracing::warn!(target: "alk", queue, "relaying committed sends failed, they stay pending and are relayed later: {e}");
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

    async fn begin(&self) -> AlkResult<Box<dyn TxEngine>> {
        Ok(Box::new(self.begin_tx().await?))
    }
}

#[async_trait]
impl ScheduleEngine for StreamStore {
    async fn put(&self, row: &ScheduleRow) -> AlkResult<()> {
        // Its jobs go through the relay, which needs a localqueue.v2 file.
        self.relay
            .queues
            .get(&row.queue)
            .await?
            .require_v2("scheduled jobs")
            .await?;
        let o = &row.options;
        let (kind, data) = row.payload.parts();
        let every_ms = stored("every-ms", Some(row.every_ms))?;
        let delay_ms = stored("delay-ms", o.delay_ms)?;
        let run_at_ms = stored("run-at-ms", o.run_at_ms)?;
        let backoff = stored("backoff-base-ms", o.backoff_base_ms)?;
        let expires = stored("expires-in-ms", o.expires_in_ms)?;
        self.store
            .run_write(|conn: Connection| {
                Box::pin(async move {
                    exec(
                        &conn,
                        SCHEDULE_PUT,
                        (
                            row.name.as_str(),
                            row.spec.as_str(),
                            every_ms,
                            row.queue.as_str(),
                            kind,
                            data,
                            o.priority.map(i64::from),
                            delay_ms,
                            run_at_ms,
                            o.max_attempts.map(i64::from),
                            backoff,
                            expires,
                            o.group.as_deref(),
                            row.next_due,
                        ),
                    )
                    .await?;
                    Ok(())
                })
            })
            .await
    }

    async fn remove(&self, name: &str) -> AlkResult<bool> {
        self.store
            .run_write(|conn: Connection| {
                Box::pin(async move { Ok(exec(&conn, SCHEDULE_REMOVE, (name,)).await? == 1) })
            })
            .await
    }

    async fn get(&self, name: &str) -> AlkResult<Option<ScheduleRow>> {
        let path = self.store.path();
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, SCHEDULE_GET, (name,)).await?;
                    let mut found = None;
                    while let Some(row) = rows.next().await? {
                        found = Some(schedule_at(&row, path)?);
                    }
                    Ok(found)
                })
            })
            .await
    }

    async fn list(&self) -> AlkResult<Vec<ScheduleRow>> {
        let path = self.store.path();
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, SCHEDULE_LIST, ()).await?;
                    let mut out = Vec::new();
                    while let Some(row) = rows.next().await? {
                        out.push(schedule_at(&row, path)?);
                    }
                    Ok(out)
                })
            })
            .await
    }

    async fn fire(
        &self,
        name: &str,
        due: i64,
        next: i64,
        stamps: &[Stamp],
        now: i64,
    ) -> AlkResult<bool> {
        let path = self.store.path();
        // Synced whatever the store's durability: its relay rows must be on
        // disk before a queue file records them as relayed (see
        // `TursoTx::commit`).
        let fired = self
            .store
            .synced()
            .run_immediate(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, SCHEDULE_FIRE, (name, due, next)).await?;
                    let mut found = None;
                    // Drain: a live RETURNING statement blocks the next write.
                    while let Some(row) = rows.next().await? {
                        let c = Columns {
                            row: &row,
                            path,
                            table: "schedules",
                            name: format!("{name:?}"),
                        };
                        found = Some((c.text(0, "queue")?, c.payload(1)?));
                    }
                    drop(rows);
                    let Some((queue, payload)) = found else {
                        return Ok(None);
                    };
                    for stamp in stamps {
                        relay_send_on(&conn, &queue, &payload, stamp, now).await?;
                    }
                    Ok(Some(queue))
                })
            })
            .await?;
        let Some(queue) = fired else {
            return Ok(false);
        };
        if !stamps.is_empty() {
            self.relay.after_commit(&[queue]).await;
        }
        Ok(true)
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
    relay: Arc<Relay>,
    /// The queues sent to, to relay after the commit.
    sent: Vec<String>,
    /// The relayed rows this transaction deleted ([`Relay::relayed_rows`]),
    /// forgotten when it commits.
    forgot: Vec<(String, i64)>,
    /// The connection was switched to `synchronous = FULL` for this
    /// commit (see [`TursoTx::commit`]).
    synced: bool,
}

impl TursoTx {
    /// Runs one operation of the transaction; an engine failure (or panic)
    /// rolls the transaction back.
    async fn op<T>(
        &mut self,
        op: impl std::future::Future<Output = Result<T, Failure>>,
    ) -> Result<T, TxFailure> {
        let result = alk_store::panic::contain(op).await;
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
                    panic
                )))
            }
        }
    }

    /// Ends the transaction with `sql` (`COMMIT` or `ROLLBACK`); the
    /// connection goes back to the pool when it did. The write gate is
    /// released when this returns.
    async fn end(self, sql: &str) -> AlkResult<()> {
        let result = alk_store::panic::contain(exec(&self.conn, sql, ())).await;
        let commit = sql == "COMMIT";
        match result {
            Ok(Ok(_)) => {
                if commit {
                    self.relay.forgotten(&self.forgot);
                }
                // Back to the pool only with the pool's setting.
                if !self.synced
                    || exec(&self.conn, "PRAGMA synchronous = NORMAL", ())
                        .await
                        .is_ok()
                {
                    self.store.check_in(&self.handle, self.conn);
                }
                Ok(())
            }
            Ok(Err(e))
                if commit
                    && !matches!(e, turso::Error::Busy(_) | turso::Error::BusySnapshot(_)) =>
            {
                // An I/O failure inside COMMIT may come after the commit
                // record reached the log.
                crate::retry::rollback(&self.conn, self.store.path()).await;
                self.store.discard(&self.handle);
                Err(self.store.outcome_unknown(&e.to_string()))
            }
            Ok(Err(e)) => {
                crate::retry::rollback(&self.conn, self.store.path()).await;
                Err(AlkError::TransactionAborted(format!(
                    "{sql} failed and the transaction was rolled back: {e}"
                )))
            }
            Err(panic) if commit => {
                self.store.discard(&self.handle);
                Err(self.store.outcome_unknown(&panic))
            }
            Err(panic) => {
                self.store.discard(&self.handle);
                Err(AlkError::Internal(format!(
                    "the storage engine failed while rolling back ({panic}); nothing was applied"
                )))
            }
        }
    }
}

#[async_trait]
impl TxEngine for TursoTx {
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

    async fn enqueue(
        &mut self,
        queue: &str,
        payloads: &[Payload],
        stamp: &Stamp,
        now: i64,
    ) -> Result<(), TxFailure> {
        // The queue must be able to take the messages when they are
        // relayed: opened (made, if new) and localqueue.v2. Refusals write
        // nothing.
        let q = self
            .relay
            .queues
            .get(queue)
            .await
            .map_err(TxFailure::Refused)?;
        q.require_v2("transactional sends")
            .await
            .map_err(TxFailure::Refused)?;
        let conn = self.conn.clone();
        self.op(async move {
            for p in payloads {
                relay_send_on(&conn, queue, p, stamp, now).await?;
            }
            Ok(())
        })
        .await?;
        if !self.sent.iter().any(|q| q == queue) {
            self.sent.push(queue.to_string());
        }
        Ok(())
    }

    async fn commit(self: Box<Self>) -> AlkResult<()> {
        let mut tx = *self;
        let sent = std::mem::take(&mut tx.sent);
        let relay = tx.relay.clone();
        // A commit that writes relay rows is synced whatever the store's
        // durability: a queue file records them as relayed once they are
        // committed, and a power cut must not leave the queue file with that
        // record and the stream file without the rows (the two files keep
        // their own prefixes of commits). The setting is the connection's
        // and is read at commit; `end` puts it back.
        if !sent.is_empty() && tx.store.durability() == crate::Durability::Relaxed {
            let conn = tx.conn.clone();
            tx.op(async move {
                exec(&conn, "PRAGMA synchronous = FULL", ()).await?;
                Ok(())
            })
            .await
            .map_err(|e| match e {
                TxFailure::Refused(e) => e,
                TxFailure::Failed(why) => AlkError::TransactionAborted(format!(
                    "commit failed and the transaction was rolled back: {why}"
                )),
            })?;
            tx.synced = true;
        }
        tx.end("COMMIT").await?;
        // Committed, and the write gate is free again: the sends go to
        // their queues now.
        relay.after_commit(&sent).await;
        Ok(())
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
    const DOC_V2: &str = include_str!("../../../docs/formats/localstream.v2.md");

    #[tokio::test]
    async fn an_engine_panic_inside_a_transaction_aborts_it_and_frees_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let s = StreamStore::open(dir.path(), crate::RetryPolicy::default())
            .await
            .unwrap();
        let mut tx = s.begin_tx().await.unwrap();
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

    #[test]
    fn the_v2_document_pins_the_ddl_and_every_statement() {
        crate::assert_document_pins(
            "localstream.v2.md",
            DOC_V2,
            &[
                ("DDL_V2", DDL_V2),
                ("UPGRADE", UPGRADE),
                ("STORE_ID", STORE_ID),
                ("NEW_STORE_ID", NEW_STORE_ID),
                ("RELAY_SEND", RELAY_SEND),
                ("RELAY_PAGE", RELAY_PAGE),
                ("RELAY_MARKED", RELAY_MARKED),
                ("RELAY_DONE", RELAY_DONE),
                ("RELAY_NEXT_QUEUE", RELAY_NEXT_QUEUE),
                ("SCHEDULE_PUT", SCHEDULE_PUT),
                ("SCHEDULE_REMOVE", SCHEDULE_REMOVE),
                ("SCHEDULE_GET", SCHEDULE_GET),
                ("SCHEDULE_LIST", SCHEDULE_LIST),
                ("SCHEDULE_FIRE", SCHEDULE_FIRE),
            ],
        );
        // A new v2 file is the v1 DDL followed by the upgrade, which gives
        // the store its id.
        assert_eq!(DDL_V2, format!("{DDL}{UPGRADE}"));
        assert!(UPGRADE.contains(NEW_STORE_ID));
    }

    use crate::queue::{QueueStore, Queues};
    use crate::{NewQueues, RetryPolicy, TursoEngine};
    use alk_store::queue::{Queue, QueueEngine};
    use alk_store::stream::Streams;

    fn text(s: &str) -> Payload {
        Payload::Text(s.into())
    }

    /// A stream store without a background relayer (the tests relay by
    /// hand).
    async fn quiet(dir: &Path) -> StreamStore {
        let options = StoreOptions::default();
        StreamStore::open_with(dir, options, Arc::new(Queues::new(dir, options)), false)
            .await
            .unwrap()
    }

    /// Commits a transaction that sends `payloads` to `queue`, without
    /// relaying them (as if the process died right after its commit).
    async fn commit_unrelayed(s: &StreamStore, queue: &str, payloads: &[&str]) {
        let mut tx = s.begin_tx().await.unwrap();
        let payloads: Vec<Payload> = payloads.iter().map(|p| text(p)).collect();
        tx.enqueue(queue, &payloads, &Stamp::plain(5), 5)
            .await
            .unwrap();
        tx.end("COMMIT").await.unwrap();
    }

    async fn claim_all(q: &QueueStore) -> Vec<Payload> {
        q.claim(1000, 1_000_000, 1_000, None)
            .await
            .unwrap()
            .into_iter()
            .map(|d| d.payload)
            .collect()
    }

    async fn sql_rows(store: &Store, sql: &'static str) -> Vec<String> {
        store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = conn.query(sql, ()).await?;
                    let mut out = Vec::new();
                    while let Some(row) = rows.next().await? {
                        let mut cols = Vec::new();
                        for i in 0..row.column_count() {
                            cols.push(format!("{:?}", row.get_value(i)?));
                        }
                        out.push(cols.join(" | "));
                    }
                    Ok(out)
                })
            })
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_relay_repeated_after_its_queue_commit_applies_nothing_twice() {
        let dir = tempfile::tempdir().unwrap();
        let s = quiet(dir.path()).await;
        commit_unrelayed(&s, "q", &["a", "b", "c"]).await;
        let q = s.relay.queues.get("q").await.unwrap();
        let rows = s.relay.pending("q").await.unwrap();
        assert_eq!(rows.len(), 3);
        // The queue's transaction committed, then the process died before
        // the relay rows were deleted: the next relay finds them again.
        assert_eq!(q.relay(&s.relay.store_id, &rows).await.unwrap(), 3);
        assert_eq!(q.relay(&s.relay.store_id, &rows).await.unwrap(), 0);
        // A later page overlapping what was applied applies only the rest.
        commit_unrelayed(&s, "q", &["d"]).await;
        let rows = s.relay.pending("q").await.unwrap();
        assert_eq!(rows.len(), 4);
        assert_eq!(q.relay(&s.relay.store_id, &rows).await.unwrap(), 1);
        // The full relay adds nothing, and notes the rows for deletion.
        assert_eq!(s.relay.relay_queue("q").await.unwrap(), 0);
        assert!(s.relay.pending("q").await.unwrap().is_empty());
        assert_eq!(
            claim_all(&q).await,
            [text("a"), text("b"), text("c"), text("d")]
        );
        let mark = sql_rows(
            q.store(),
            "SELECT key, value FROM meta WHERE key LIKE 'relayed:%'",
        )
        .await;
        // The mark: the highest id applied, and that row's send time and
        // payload length.
        assert_eq!(
            mark,
            [format!(
                "Text(\"relayed:{}\") | Text(\"4:5:1\")",
                s.relay.store_id
            )]
        );
    }

    #[tokio::test]
    async fn a_recreated_stream_store_relays_into_a_queue_marked_by_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let old = quiet(dir.path()).await;
        let tx = old.begin_tx().await.unwrap();
        let mut tx: Box<dyn TxEngine> = Box::new(tx);
        tx.enqueue("q", &[text("old-1"), text("old-2")], &Stamp::plain(0), 0)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let q = old.relay.queues.get("q").await.unwrap();
        let old_id = old.relay.store_id.clone();
        // Far above any id the new store will hand out.
        crate::write_sql(
            q.store(),
            &format!("UPDATE meta SET value = '1000000' WHERE key = 'relayed:{old_id}'"),
        )
        .await;
        old.store.close_for_test();
        drop(old);
        for suffix in ["", "-wal", "-tshm"] {
            let _ = std::fs::remove_file(crate::open::sibling(&stream_path(dir.path()), suffix));
        }
        let new = quiet(dir.path()).await;
        assert_ne!(new.relay.store_id, old_id);
        let tx = new.begin_tx().await.unwrap();
        let mut tx: Box<dyn TxEngine> = Box::new(tx);
        tx.enqueue("q", &[text("new")], &Stamp::plain(0), 0)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(
            claim_all(&q).await,
            [text("old-1"), text("old-2"), text("new")]
        );
        assert!(new.relay.pending("q").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn sends_left_pending_are_relayed_when_another_engine_opens_the_store() {
        let dir = tempfile::tempdir().unwrap();
        {
            let died = quiet(dir.path()).await;
            commit_unrelayed(&died, "q", &["left behind"]).await;
            assert_eq!(died.relay.pending("q").await.unwrap().len(), 1);
        }
        let engine = TursoEngine::new(dir.path(), RetryPolicy::default());
        let q = Queue::open(&engine, "q").await.unwrap();
        assert!(q.claim(10, None, None, 1_000).await.unwrap().is_empty());
        // Opening the stream store relays what was left.
        Streams::open(&engine, Default::default()).await.unwrap();
        let got = q.claim(10, None, None, 1_000).await.unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].payload, text("left behind"));
    }

    #[tokio::test]
    async fn sends_left_pending_are_relayed_by_the_background_relayer() {
        let dir = tempfile::tempdir().unwrap();
        let engine = TursoEngine::new(dir.path(), RetryPolicy::default());
        let running = engine.stream_store().await.unwrap();
        let q = Queue::open(&engine, "q").await.unwrap();
        // Another engine commits and dies before relaying.
        {
            let died = quiet(dir.path()).await;
            commit_unrelayed(&died, "q", &["x", "y"]).await;
        }
        let started = std::time::Instant::now();
        let mut got = Vec::new();
        while got.len() < 2 && started.elapsed() < std::time::Duration::from_secs(10) {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            got.extend(q.claim(10, None, None, 1_000).await.unwrap());
        }
        let got: Vec<Payload> = got.into_iter().map(|d| d.payload).collect();
        assert_eq!(got, [text("x"), text("y")], "after {:?}", started.elapsed());
        assert!(running.relay.pending("q").await.unwrap().is_empty());
        // The relayer does not keep the store alive.
        let weak = Arc::downgrade(&running.relay);
        drop(running);
        drop(engine);
        let started = std::time::Instant::now();
        while weak.upgrade().is_some() {
            assert!(started.elapsed() < std::time::Duration::from_secs(5));
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn a_transactional_send_to_a_v1_queue_is_refused_and_the_transaction_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = StoreOptions {
            new_queues: NewQueues::V1,
            ..StoreOptions::default()
        };
        QueueStore::open(dir.path(), "old", v1).await.unwrap();
        let engine = TursoEngine::new(dir.path(), RetryPolicy::default());
        let s = Streams::open(&engine, Default::default()).await.unwrap();
        let tx = s.transaction();
        tx.publish("s", None, b"e", 0).await.unwrap();
        let plain = alk_store::jobs::SendOptions::default();
        match tx.enqueue("old", &[text("x")], &plain, 0).await {
            Err(AlkError::InvalidArgument(m)) => {
                assert!(m.contains("alk-host migrate queue old"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        tx.enqueue("fresh", &[text("y")], &plain, 0).await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(s.read_since("s", 0, 10).await.unwrap().len(), 1);
        let fresh = Queue::open(&engine, "fresh").await.unwrap();
        assert_eq!(fresh.claim(10, None, None, 0).await.unwrap().len(), 1);
        let old = Queue::open(&engine, "old").await.unwrap();
        assert!(old.claim(10, None, None, 0).await.unwrap().is_empty());
        let store = engine.stream_store().await.unwrap();
        // The relayed rows go with the next write here.
        store.relay.flush_relayed().await;
        assert!(
            sql_rows(&store.store, "SELECT id FROM relay")
                .await
                .is_empty()
        );
    }

    /// Commits a transaction that sends `payloads` to `queue`, relaying
    /// them as the host does.
    async fn commit_sends(s: &StreamStore, queue: &str, payloads: &[&str]) {
        let mut tx: Box<dyn TxEngine> = Box::new(s.begin_tx().await.unwrap());
        let payloads: Vec<Payload> = payloads.iter().map(|p| text(p)).collect();
        tx.enqueue(queue, &payloads, &Stamp::plain(5), 5)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }

    #[tokio::test]
    async fn relayed_rows_are_deleted_by_the_next_transaction_not_a_commit_of_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let s = quiet(dir.path()).await;
        commit_sends(&s, "a", &["a1", "a2"]).await;
        let q = s.relay.queues.get("a").await.unwrap();
        let stream_commits = s.store.commits().await;
        let queue_commits = q.store().commits().await;
        commit_sends(&s, "a", &["a3"]).await;
        // The second send: one queue transaction, no delete committed alone.
        assert_eq!(q.store().commits().await, queue_commits + 1);
        assert_eq!(s.store.commits().await, stream_commits);
        // Only the last transaction's row is left; nothing is pending.
        let left = sql_rows(&s.store, "SELECT id FROM relay").await;
        assert_eq!(left, ["Integer(3)"]);
        assert!(s.relay.pending("a").await.unwrap().is_empty());
        // A transaction without sends takes it along.
        let mut tx: Box<dyn TxEngine> = Box::new(s.begin_tx().await.unwrap());
        tx.publish("s", None, b"e", 0).await.unwrap();
        tx.commit().await.unwrap();
        assert!(sql_rows(&s.store, "SELECT id FROM relay").await.is_empty());
        assert!(s.relay.relayed_rows().is_empty());
        assert_eq!(claim_all(&q).await, [text("a1"), text("a2"), text("a3")]);
        // Without further writes, the background relayer deletes them.
        let engine = TursoEngine::new(dir.path(), RetryPolicy::default());
        let running = engine.stream_store().await.unwrap();
        commit_sends(&running, "b", &["b1"]).await;
        assert_eq!(
            sql_rows(&running.store, "SELECT id FROM relay").await.len(),
            1
        );
        let started = std::time::Instant::now();
        while !sql_rows(&running.store, "SELECT id FROM relay")
            .await
            .is_empty()
        {
            assert!(started.elapsed() < std::time::Duration::from_secs(10));
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(running.relay.relayed_rows().is_empty());
    }

    #[tokio::test]
    async fn a_rolled_back_transaction_keeps_the_deletes_of_relayed_rows_for_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let s = quiet(dir.path()).await;
        let mut tx: Box<dyn TxEngine> = Box::new(s.begin_tx().await.unwrap());
        tx.enqueue("a", &[text("a1")], &Stamp::plain(5), 5)
            .await
            .unwrap();
        tx.enqueue("b", &[text("b1"), text("b2")], &Stamp::plain(5), 5)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let noted = s.relay.relayed_rows();
        assert_eq!(noted, [("a".to_string(), 1), ("b".to_string(), 3)]);
        // Rolled back by the guest.
        let mut tx: Box<dyn TxEngine> = Box::new(s.begin_tx().await.unwrap());
        tx.publish("s", None, b"gone", 0).await.unwrap();
        tx.rollback().await;
        assert_eq!(s.relay.relayed_rows(), noted);
        assert_eq!(sql_rows(&s.store, "SELECT id FROM relay").await.len(), 3);
        // Rolled back by an engine failure inside it.
        let mut tx = s.begin_tx().await.unwrap();
        let conn = tx.conn.clone();
        let failed = tx
            .op(async move { Ok(exec(&conn, "INSERT INTO nowhere VALUES (1)", ()).await?) })
            .await;
        assert!(matches!(failed, Err(TxFailure::Failed(_))), "{failed:?}");
        drop(tx);
        assert_eq!(s.relay.relayed_rows(), noted);
        assert_eq!(sql_rows(&s.store, "SELECT id FROM relay").await.len(), 3);
        // The next transaction that commits deletes them.
        let mut tx: Box<dyn TxEngine> = Box::new(s.begin_tx().await.unwrap());
        tx.publish("s", None, b"kept", 0).await.unwrap();
        tx.commit().await.unwrap();
        assert!(sql_rows(&s.store, "SELECT id FROM relay").await.is_empty());
        assert!(s.relay.relayed_rows().is_empty());
        let a = s.relay.queues.get("a").await.unwrap();
        let b = s.relay.queues.get("b").await.unwrap();
        assert_eq!(claim_all(&a).await, [text("a1")]);
        assert_eq!(claim_all(&b).await, [text("b1"), text("b2")]);
    }

    #[tokio::test]
    async fn relayed_rows_left_undeleted_are_never_inserted_twice() {
        let dir = tempfile::tempdir().unwrap();
        {
            let died = quiet(dir.path()).await;
            commit_sends(&died, "q", &["x", "y"]).await;
            // It relayed them, and stopped before deleting them.
            assert_eq!(sql_rows(&died.store, "SELECT id FROM relay").await.len(), 2);
        }
        let q = QueueStore::open(dir.path(), "q", StoreOptions::default())
            .await
            .unwrap();
        let queue_commits = q.store().commits().await;
        // Another instance opening the store relays nothing new, without a
        // transaction on the queue's file, and deletes the rows.
        let again = quiet(dir.path()).await;
        assert_eq!(q.store().commits().await, queue_commits);
        assert!(
            sql_rows(&again.store, "SELECT id FROM relay")
                .await
                .is_empty()
        );
        assert_eq!(again.relay.relay_queue("q").await.unwrap(), 0);
        // A relay of rows the queue has, however it is run, adds nothing.
        commit_unrelayed(&again, "q", &["z"]).await;
        let rows = again.relay.pending("q").await.unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(again.relay.relay_queue("q").await.unwrap(), 1);
        assert_eq!(q.relay(&again.relay.store_id, &rows).await.unwrap(), 0);
        let other = quiet(dir.path()).await;
        assert_eq!(other.relay.relay_queue("q").await.unwrap(), 0);
        assert_eq!(claim_all(&q).await, [text("x"), text("y"), text("z")]);
    }

    /// Commits a transaction that sends `payloads` to `queue` at `now`,
    /// relaying them as the host does.
    async fn commit_sends_at(s: &StreamStore, queue: &str, payloads: &[&str], now: i64) {
        let mut tx: Box<dyn TxEngine> = Box::new(s.begin_tx().await.unwrap());
        let payloads: Vec<Payload> = payloads.iter().map(|p| text(p)).collect();
        tx.enqueue(queue, &payloads, &Stamp::plain(now), now)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }

    /// Closes the stream store and copies its files into `to`, or back
    /// from it (replacing them).
    fn copy_stream_files(dir: &Path, to: &Path, back: bool) {
        let file = stream_path(dir);
        for suffix in ["", "-wal", "-tshm"] {
            let here = crate::open::sibling(&file, suffix);
            let there = to.join(format!("copy{suffix}"));
            let (from, into) = if back { (there, here) } else { (here, there) };
            let _ = std::fs::remove_file(&into);
            if from.exists() {
                std::fs::copy(&from, &into).unwrap();
            }
        }
    }

    fn refused(got: AlkResult<u64>, stream: &Path, queue: &Path, found: &str) {
        match got {
            Err(AlkError::Internal(m)) => {
                assert!(m.starts_with(RELAY_REFUSED), "{m}");
                assert!(m.contains(&stream.display().to_string()), "{m}");
                assert!(m.contains(&queue.display().to_string()), "{m}");
                assert!(m.contains(found), "{m}");
            }
            other => panic!("expected a refused relay, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_stream_file_restored_from_an_older_copy_is_refused_and_its_sends_stay_pending() {
        let dir = tempfile::tempdir().unwrap();
        let aside = tempfile::tempdir().unwrap();
        let s = quiet(dir.path()).await;
        commit_sends_at(&s, "q", &["a", "b"], 10).await;
        s.relay.flush_relayed().await;
        s.store.close_for_test();
        drop(s);
        // A backup: relay ids 1 and 2 handed out, none pending.
        copy_stream_files(dir.path(), aside.path(), false);
        let s = quiet(dir.path()).await;
        commit_sends_at(&s, "q", &["c", "d"], 20).await;
        s.relay.flush_relayed().await;
        let q = s.relay.queues.get("q").await.unwrap();
        s.store.close_for_test();
        drop(s);
        // The backup is put back: the queue's mark (4) is above its ids.
        copy_stream_files(dir.path(), aside.path(), true);
        let s = quiet(dir.path()).await;
        // The commit succeeds; its send (relay id 3) is not relayed.
        commit_sends_at(&s, "q", &["e"], 30).await;
        let path = stream_path(dir.path());
        refused(s.relay.relay_queue("q").await, &path, q.path(), "no row 4");
        s.relay.flush_relayed().await;
        assert_eq!(
            sql_rows(&s.store, "SELECT id FROM relay").await,
            ["Integer(3)"]
        );
        // Two more sends: relay id 4 is not the row the mark was written from.
        commit_sends_at(&s, "q", &["ff", "g"], 40).await;
        refused(
            s.relay.relay_queue("q").await,
            &path,
            q.path(),
            "a different relay row 4",
        );
        // The background relayer's pass, and a new open, refuse as well.
        s.relay.relay_pending(&mut HashMap::new(), usize::MAX).await;
        drop(quiet(dir.path()).await);
        assert_eq!(
            sql_rows(&s.store, "SELECT id FROM relay").await,
            ["Integer(3)", "Integer(4)", "Integer(5)"]
        );
        assert_eq!(
            claim_all(&q).await,
            [text("a"), text("b"), text("c"), text("d")]
        );
        // The remedy: the queue forgets its mark, and every pending send
        // is relayed.
        crate::write_sql(
            q.store(),
            &format!(
                "DELETE FROM meta WHERE key = 'relayed:{}'",
                s.relay.store_id
            ),
        )
        .await;
        assert_eq!(s.relay.relay_queue("q").await.unwrap(), 3);
        assert_eq!(claim_all(&q).await, [text("e"), text("ff"), text("g")]);
    }

    #[tokio::test]
    async fn a_mark_is_checked_against_the_row_it_was_written_from() {
        let dir = tempfile::tempdir().unwrap();
        let s = quiet(dir.path()).await;
        commit_unrelayed(&s, "q", &["a", "b", "c"]).await;
        let q = s.relay.queues.get("q").await.unwrap();
        let key = format!("relayed:{}", s.relay.store_id);
        // A mark of another row 2 (sent at 6, not 5): refused, by the
        // stream's check and by the queue's own.
        crate::write_sql(
            q.store(),
            &format!("INSERT INTO meta (key, value) VALUES ('{key}', '2:6:1')"),
        )
        .await;
        let path = stream_path(dir.path());
        refused(
            s.relay.relay_queue("q").await,
            &path,
            q.path(),
            "a different relay row 2",
        );
        let rows = s.relay.pending("q").await.unwrap();
        assert_eq!(rows.len(), 3);
        refused(
            q.relay(&s.relay.store_id, &rows).await,
            Path::new("stream file"),
            q.path(),
            "a different relay row 2",
        );
        // Rows below and above the mark without the mark's own.
        let gap = [rows[0].clone(), rows[2].clone()];
        refused(
            q.relay(&s.relay.store_id, &gap).await,
            Path::new("stream file"),
            q.path(),
            "but not 2",
        );
        assert!(claim_all(&q).await.is_empty());
        // A plain decimal mark (written before marks had fingerprints) is
        // read as an id alone: rows 1 and 2 are skipped.
        crate::write_sql(
            q.store(),
            &format!("UPDATE meta SET value = '2' WHERE key = '{key}'"),
        )
        .await;
        assert_eq!(s.relay.relay_queue("q").await.unwrap(), 1);
        assert_eq!(claim_all(&q).await, [text("c")]);
        let mark = sql_rows(
            q.store(),
            "SELECT value FROM meta WHERE key LIKE 'relayed:%'",
        )
        .await;
        assert_eq!(mark, ["Text(\"3:5:1\")"]);
    }

    #[tokio::test]
    async fn a_commit_and_an_open_relay_a_page_per_queue_and_leave_a_backlog_to_the_relayer() {
        let dir = tempfile::tempdir().unwrap();
        let batch = RELAY_BATCH as usize;
        let names: Vec<String> = (0..2 * batch + 500).map(|i| i.to_string()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        {
            let died = quiet(dir.path()).await;
            commit_unrelayed(&died, "q", &names).await;
        }
        let q = QueueStore::open(dir.path(), "q", StoreOptions::default())
            .await
            .unwrap();
        let commits = q.store().commits().await;
        // Opening the store relays a page.
        let s = quiet(dir.path()).await;
        assert_eq!(q.store().commits().await, commits + 1);
        assert_eq!(
            sql_rows(&s.store, "SELECT min(id), count(*) FROM relay").await,
            [format!("Integer({}) | Integer({})", batch + 1, batch + 500)]
        );
        // A commit relays a page of the queues it sent to.
        commit_sends(&s, "q", &["last"]).await;
        assert_eq!(q.store().commits().await, commits + 2);
        assert_eq!(s.relay.relayed_up_to("q"), 2 * RELAY_BATCH);
        // The rest is the background relayer's.
        s.relay.relay_pending(&mut HashMap::new(), usize::MAX).await;
        assert!(s.relay.pending("q").await.unwrap().is_empty());
        let got = q.claim(5000, 1_000_000, 1_000, None).await.unwrap();
        assert_eq!(got.len(), 2 * batch + 501);
        assert_eq!(got.last().unwrap().payload, text("last"));
    }

    #[tokio::test]
    async fn an_outbox_queue_is_v2_even_when_new_queues_are_v1() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = StoreOptions {
            new_queues: NewQueues::V1,
            ..StoreOptions::default()
        };
        let engine = TursoEngine::new(dir.path(), v1);
        let outbox = alk_store::outbox::Outbox::open(&engine, "mail")
            .await
            .unwrap();
        let backing = alk_store::outbox::backing_queue("mail").unwrap();
        assert!(
            QueueStore::open(dir.path(), &backing, v1)
                .await
                .unwrap()
                .is_v2()
                .await
                .unwrap()
        );
        let s = Streams::open(&engine, Default::default()).await.unwrap();
        let tx = s.transaction();
        let plain = alk_store::jobs::SendOptions::default();
        tx.outbox_enqueue("mail", &[text("m")], &plain, 0)
            .await
            .unwrap();
        // A plain queue made by this engine is v1: refused, without
        // suggesting a new queue (it would be v1 too).
        match tx.enqueue("plain", &[text("p")], &plain, 0).await {
            Err(AlkError::InvalidArgument(m)) => {
                assert!(m.contains("alk-host migrate queue plain"), "{m}");
                assert!(m.contains("--new-queues v2"), "{m}");
                assert!(!m.contains("use a new queue"), "{m}");
            }
            other => panic!("{other:?}"),
        }
        tx.commit().await.unwrap();
        assert_eq!(
            outbox.claim_one(None, 0).await.unwrap().unwrap().payload,
            text("m")
        );
    }

    #[tokio::test]
    async fn a_relay_that_fails_after_the_commit_leaves_the_sends_pending_until_it_can() {
        let dir = tempfile::tempdir().unwrap();
        let s = quiet(dir.path()).await;
        let mut tx: Box<dyn TxEngine> = Box::new(s.begin_tx().await.unwrap());
        tx.enqueue("q", &[text("kept")], &Stamp::plain(0), 0)
            .await
            .unwrap();
        // Before the commit, the queue's file is replaced by a v1 file.
        let q = s.relay.queues.get("q").await.unwrap();
        q.store().close_for_test();
        for suffix in ["", "-wal", "-tshm"] {
            let _ = std::fs::remove_file(crate::open::sibling(q.path(), suffix));
        }
        let v1 = StoreOptions {
            new_queues: NewQueues::V1,
            ..StoreOptions::default()
        };
        let replaced = QueueStore::open(dir.path(), "q", v1).await.unwrap();
        assert!(!replaced.is_v2().await.unwrap());
        // The commit stands; the send waits.
        tx.commit().await.unwrap();
        assert_eq!(s.relay.pending("q").await.unwrap().len(), 1);
        assert!(matches!(
            s.relay.relay_queue("q").await,
            Err(AlkError::InvalidArgument(_))
        ));
        replaced.store().close_for_test();
        drop(replaced);
        q.store().close_for_test();
        QueueStore::migrate(dir.path(), "q", StoreOptions::default())
            .await
            .unwrap();
        assert_eq!(s.relay.relay_queue("q").await.unwrap(), 1);
        assert_eq!(claim_all(&q).await, [text("kept")]);
    }

    #[tokio::test]
    async fn a_v1_stream_file_is_upgraded_on_open_keeping_its_events_and_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let path = stream_path(dir.path());
        {
            let v1 = open_store(&path, &FORMAT_V1, StoreOptions::default())
                .await
                .unwrap();
            v1.run_immediate(|conn: Connection| {
                Box::pin(async move {
                    publish_on(&conn, "s", None, b"one", 10).await?;
                    publish_on(&conn, "s", Some("k"), b"two", 11).await?;
                    save_offset_on(&conn, "s", "c", 1).await?;
                    Ok(())
                })
            })
            .await
            .unwrap();
            let marker = sql_rows(&v1, "SELECT value FROM meta").await;
            assert_eq!(marker, ["Text(\"localstream.v1\")"]);
            v1.close_for_test();
        }
        let s = StreamStore::open(dir.path(), StoreOptions::default())
            .await
            .unwrap();
        let events = s.read_since("s", 0, 10, 1 << 20).await.unwrap();
        assert_eq!(
            events
                .iter()
                .map(|e| (e.offset, e.key.clone(), e.payload.clone(), e.created_at))
                .collect::<Vec<_>>(),
            [
                (1, None, b"one".to_vec(), 10),
                (2, Some("k".into()), b"two".to_vec(), 11)
            ]
        );
        assert_eq!(s.get_offset("s", "c").await.unwrap(), Some(1));
        assert_eq!(s.publish("s", None, b"three", 12).await.unwrap(), 3);
        let marker = sql_rows(&s.store, "SELECT value FROM meta WHERE key = 'format'").await;
        assert_eq!(marker, ["Text(\"localstream.v2\")"]);
        let id = uuid::Uuid::parse_str(&s.relay.store_id).unwrap();
        assert_eq!(id.get_version_num(), 4);
        // The same schema as a file made as v2.
        let fresh_dir = tempfile::tempdir().unwrap();
        let fresh = StreamStore::open(fresh_dir.path(), StoreOptions::default())
            .await
            .unwrap();
        let schema = "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name";
        let upgraded = sql_rows(&s.store, schema).await;
        assert_eq!(upgraded, sql_rows(&fresh.store, schema).await);
        for object in ["relay", "idx_relay_queue", "schedules"] {
            assert!(
                upgraded
                    .iter()
                    .any(|r| r.contains(&format!("Text(\"{object}\")"))),
                "{object}: {upgraded:?}"
            );
        }
        assert_ne!(s.relay.store_id, fresh.relay.store_id);
        // Transactions send through it.
        let mut tx: Box<dyn TxEngine> = Box::new(s.begin_tx().await.unwrap());
        tx.enqueue("q", &[text("after")], &Stamp::plain(0), 0)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let q = s.relay.queues.get("q").await.unwrap();
        assert_eq!(claim_all(&q).await, [text("after")]);
        // A host that knows only v1 refuses the file and leaves it alone.
        s.store.close_for_test();
        match open_store(&path, &FORMAT_V1, StoreOptions::default()).await {
            Err(AlkError::StoreSetup { found, .. }) => {
                assert_eq!(found.as_deref(), Some("localstream.v2"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn schedules_keep_every_option_and_refuse_a_v1_queue() {
        let dir = tempfile::tempdir().unwrap();
        let s = quiet(dir.path()).await;
        let row = ScheduleRow {
            name: "full".into(),
            spec: "@every 5m".into(),
            every_ms: 300_000,
            queue: "jobs".into(),
            payload: Payload::Json("{\"a\":1}".into()),
            options: SendOptions {
                priority: Some(-3),
                delay_ms: Some(7),
                run_at_ms: None,
                max_attempts: Some(4),
                backoff_base_ms: Some(250),
                expires_in_ms: Some(60_000),
                group: Some("g".into()),
            },
            next_due: 1_234,
        };
        s.put(&row).await.unwrap();
        assert_eq!(s.get("full").await.unwrap(), Some(row.clone()));
        let mut other = row.clone();
        other.name = "bare".into();
        other.payload = text("t");
        other.options = SendOptions {
            run_at_ms: Some(99),
            ..SendOptions::default()
        };
        s.put(&other).await.unwrap();
        assert_eq!(s.list().await.unwrap(), [other.clone(), row.clone()]);
        // Firing: the stamps' jobs, once; a stale boundary does nothing.
        let mut stamp = Stamp::plain(2_000);
        stamp.group = Some("g".into());
        assert!(
            s.fire("full", 1_234, 301_234, &[stamp.clone(), stamp], 2_000)
                .await
                .unwrap()
        );
        assert!(
            !s.fire("full", 1_234, 601_234, &[Stamp::plain(0)], 2_000)
                .await
                .unwrap()
        );
        assert_eq!(s.get("full").await.unwrap().unwrap().next_due, 301_234);
        let jobs = s.relay.queues.get("jobs").await.unwrap();
        let got = jobs.claim(10, 100_000, 2_000, None).await.unwrap();
        // A group has one message in flight at a time.
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].group.as_deref(), Some("g"));
        assert!(s.remove("full").await.unwrap());
        assert!(!s.remove("full").await.unwrap());
        // A v1 queue cannot take scheduled jobs.
        let v1 = StoreOptions {
            new_queues: NewQueues::V1,
            ..StoreOptions::default()
        };
        QueueStore::open(dir.path(), "old", v1).await.unwrap();
        let mut to_old = row.clone();
        to_old.queue = "old".into();
        match s.put(&to_old).await {
            Err(AlkError::InvalidArgument(m)) => {
                assert!(m.contains("alk-host migrate queue old"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn relay_and_schedule_statements_use_their_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let s = quiet(dir.path()).await;
        for (sql, index) in [
            (RELAY_PAGE, "idx_relay_queue"),
            (RELAY_NEXT_QUEUE, "idx_relay_queue"),
            (RELAY_MARKED, "idx_relay_queue"),
            (RELAY_DONE, "idx_relay_queue"),
        ] {
            let plan = s
                .store
                .run(|conn: Connection| {
                    Box::pin(async move {
                        let params: Vec<Value> = match sql {
                            RELAY_NEXT_QUEUE => vec![Value::Text("q".into())],
                            RELAY_PAGE => vec![
                                Value::Text("q".into()),
                                Value::Integer(0),
                                Value::Integer(10),
                            ],
                            _ => vec![Value::Text("q".into()), Value::Integer(10)],
                        };
                        let mut rows = conn
                            .query(&format!("EXPLAIN QUERY PLAN {sql}"), params)
                            .await?;
                        let mut plan = Vec::new();
                        while let Some(row) = rows.next().await? {
                            plan.push(row.get::<String>(3)?);
                        }
                        Ok(plan.join(" | "))
                    })
                })
                .await
                .unwrap();
            assert!(plan.contains(index), "{sql}: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{sql}: {plan}");
        }
    }
}
