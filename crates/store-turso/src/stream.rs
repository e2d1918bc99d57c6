//! `localstream.v3`: durable streams with consumer offsets; the only
//! implementation of that format (and of `localstream.v1` and
//! `localstream.v2`, which it upgrades on open).
//!
//! One file holds every stream of a data directory:
//! `<data-dir>/stream/localstream.sqlite`. The schema and every statement
//! of streams and offsets are defined here, once; those of the relay and of
//! schedules, which the same file holds, in [`crate::relay`] and
//! [`crate::schedule`]. All are pinned by `docs/formats/localstream.v1.md`,
//! `docs/formats/localstream.v2.md` and `docs/formats/localstream.v3.md`.
//!
//! The same file holds the store's transactions: a transaction is one
//! `BEGIN IMMEDIATE` on this file (`tx.rs`), and its sends to queues wait
//! here, as rows of `relay`, until they are relayed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use alk_store::limits::Pager;
use alk_store::stream::{ConsumerLag, Event, StreamEngine, StreamInfo};
use alk_store::{AlkError, AlkResult};
use async_trait::async_trait;
use turso::Value;

use crate::conn::Connection;
use crate::format::{Format, Upgrade};
use crate::options::StoreOptions;
use crate::queue::Queues;
use crate::relay::{RELAY_PAGES_INLINE, Relay, spawn_relayer};
use crate::retry::{Failure, exec, query};
use crate::store::{Store, open_store};

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

macro_rules! upgrade_v3 {
    () => {
        "\
ALTER TABLE relay ADD COLUMN unique_key TEXT;       -- NULL: a send without a unique key
ALTER TABLE relay ADD COLUMN unique_until INTEGER;  -- unix epoch MILLISECONDS; NULL: the key is held while the message is live
UPDATE meta SET value = 'localstream.v3' WHERE key = 'format';
"
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

/// What turns a `localstream.v2` file into a `localstream.v3` one, in one
/// `BEGIN IMMEDIATE` transaction.
pub const UPGRADE_V3: &str = upgrade_v3!();

/// What turns a `localstream.v1` file into a `localstream.v3` one:
/// [`UPGRADE`], then [`UPGRADE_V3`].
pub const UPGRADE_V1_V3: &str = concat!(upgrade!(), upgrade_v3!());

/// The DDL of a new `localstream.v3` file: [`DDL`], [`UPGRADE`], then
/// [`UPGRADE_V3`].
pub const DDL_V3: &str = concat!(v1_ddl!(), upgrade!(), upgrade_v3!());

/// The `localstream.v1` format (files of it are upgraded when opened).
pub static FORMAT_V1: Format = Format {
    marker: "localstream.v1",
    ddl: DDL,
    also: &[],
    upgrades: &[],
};

/// The `localstream.v2` format (files of it are upgraded when opened).
pub static FORMAT_V2: Format = Format {
    marker: "localstream.v2",
    ddl: DDL_V2,
    also: &[],
    upgrades: &[],
};

/// The `localstream.v3` format, which the store opens; a `localstream.v1`
/// or `localstream.v2` file is upgraded to it in place.
pub static FORMAT: Format = Format {
    marker: "localstream.v3",
    ddl: DDL_V3,
    also: &[],
    upgrades: &[
        Upgrade {
            from: &FORMAT_V1,
            script: UPGRADE_V1_V3,
        },
        Upgrade {
            from: &FORMAT_V2,
            script: UPGRADE_V3,
        },
    ],
};

/// Records the first offsets assigned in a stream never published to.
pub const NEW_STREAM: &str = "INSERT INTO streams (stream, last_offset) VALUES (?1, ?2)";
/// Records the highest offset assigned in a stream published to before.
pub const SET_LAST_OFFSET: &str = "UPDATE streams SET last_offset = ?2 WHERE stream = ?1";
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
/// A stream's last assigned offset and its lowest stored one, each a
/// lookup of a primary key (`streams`; the first key of the stream in
/// `events`).
pub const INFO: &str = "SELECT (SELECT last_offset FROM streams WHERE stream = ?1), (SELECT MIN(seq) FROM events WHERE stream = ?1)";
/// Up to `?2` saved offsets of a stream, by consumer (the primary key's
/// range of the stream).
pub const CONSUMERS: &str =
    "SELECT consumer, seq FROM consumer_offsets WHERE stream = ?1 ORDER BY consumer LIMIT ?2";

/// Up to `?2` stream names after `?1` (`''` for the first page), by name:
/// a range of the primary key of `streams`.
pub const STREAM_NAMES: &str =
    "SELECT stream FROM streams WHERE stream > ?1 ORDER BY stream LIMIT ?2";

/// The store's id: names it in the queues' relay marks.
pub const STORE_ID: &str = "SELECT value FROM meta WHERE key = 'store_id'";

/// The stream store of a data directory: streams, offsets, transactions,
/// schedules.
#[derive(Debug, Clone)]
pub struct StreamStore {
    pub(crate) store: Store,
    pub(crate) relay: Arc<Relay>,
}

/// The stream store file under `data_dir`.
pub fn stream_path(data_dir: &Path) -> PathBuf {
    data_dir.join("stream").join("localstream.sqlite")
}

/// A row of `events` that breaks the format.
fn corrupt(path: &Path, stream: &str, column: &str, found: &Value) -> Failure {
    Failure::Alk(AlkError::Internal(format!(
        "{}: an event of stream {stream:?} has {found:?} in {column}, which localstream.v3 does not allow; the store is corrupt",
        path.display()
    )))
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
            wakes: crate::wake::wakes_of(data_dir).ok(),
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
                    let events: Vec<(Option<&str>, &[u8])> = events
                        .iter()
                        .map(|(k, p)| (k.as_deref(), p.as_slice()))
                        .collect();
                    publish_all_on(&conn, stream, &events, now).await
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
                    let mut pager = Pager::new(usize::MAX, max_bytes);
                    while let Some(row) = rows.next().await? {
                        let payload = match row.get_value(2)? {
                            Value::Blob(b) => b,
                            Value::Text(t) => t.into_bytes(),
                            other => return Err(corrupt(path, stream, "payload", &other)),
                        };
                        if !pager.admit(payload.len()) {
                            break;
                        }
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

    async fn info(&self, stream: &str, max_consumers: u32) -> AlkResult<StreamInfo> {
        let path = self.store.path();
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut info = StreamInfo::default();
                    let mut rows = query(&conn, INFO, (stream,)).await?;
                    while let Some(row) = rows.next().await? {
                        let offset = |i: usize| -> Result<Option<u64>, Failure> {
                            match row.get_value(i)? {
                                Value::Null => Ok(None),
                                Value::Integer(n) if n >= 0 => Ok(Some(n as u64)),
                                other => Err(corrupt(path, stream, "offset", &other)),
                            }
                        };
                        info.last = offset(0)?.unwrap_or(0);
                        info.first = offset(1)?;
                    }
                    drop(rows);
                    let mut rows =
                        query(&conn, CONSUMERS, (stream, i64::from(max_consumers))).await?;
                    while let Some(row) = rows.next().await? {
                        let consumer = match row.get_value(0)? {
                            Value::Text(c) => c,
                            other => return Err(corrupt(path, stream, "consumer", &other)),
                        };
                        info.consumers.push(ConsumerLag {
                            consumer,
                            offset: row.get::<i64>(1)?.max(0) as u64,
                            lag: 0,
                        });
                    }
                    Ok(info)
                })
            })
            .await
    }

    async fn names(&self, after: Option<&str>, max: u32) -> AlkResult<Vec<String>> {
        let path = self.store.path();
        let after = after.unwrap_or("");
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut names = Vec::new();
                    let mut rows = query(&conn, STREAM_NAMES, (after, i64::from(max))).await?;
                    while let Some(row) = rows.next().await? {
                        match row.get_value(0)? {
                            Value::Text(name) => names.push(name),
                            other => {
                                return Err(Failure::Alk(AlkError::Internal(format!(
                                    "{}: the streams table has {other:?} as a stream name, which localstream.v3 does not allow; the store is corrupt",
                                    path.display()
                                ))));
                            }
                        }
                    }
                    Ok(names)
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
}

pub(crate) async fn publish_on(
    conn: &Connection,
    stream: &str,
    key: Option<&str>,
    payload: &[u8],
    now: i64,
) -> Result<u64, Failure> {
    let offsets = publish_all_on(conn, stream, &[(key, payload)], now).await?;
    Ok(offsets[0])
}

/// Publishes `events` to `stream` at consecutive offsets, inside the
/// caller's write transaction: reads the last offset, appends, and writes
/// the last offset once. (No `RETURNING`: turso builds a temporary table
/// for every statement that has one.)
pub(crate) async fn publish_all_on(
    conn: &Connection,
    stream: &str,
    events: &[(Option<&str>, &[u8])],
    now: i64,
) -> Result<Vec<u64>, Failure> {
    let mut rows = query(conn, LAST_OFFSET, (stream,)).await?;
    let mut last = None;
    while let Some(row) = rows.next().await? {
        last = Some(row.get::<i64>(0)?);
    }
    drop(rows);
    let known = last.is_some();
    let mut offset = last.unwrap_or(0);
    let mut offsets = Vec::with_capacity(events.len());
    for &(key, payload) in events {
        offset += 1;
        exec(conn, APPEND, (stream, offset, key, payload.to_vec(), now)).await?;
        offsets.push(offset as u64);
    }
    if offsets.is_empty() {
        return Ok(offsets);
    }
    let counter = if known { SET_LAST_OFFSET } else { NEW_STREAM };
    exec(conn, counter, (stream, offset)).await?;
    Ok(offsets)
}

pub(crate) async fn save_offset_on(
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::queue::QueueStore;
    use crate::relay::{RELAY_DONE, RELAY_MARKED, RELAY_NEXT_QUEUE, RELAY_PAGE, RELAY_SEND};
    use crate::schedule::{
        SCHEDULE_FIRE, SCHEDULE_GET, SCHEDULE_LIST, SCHEDULE_PUT, SCHEDULE_REMOVE,
    };
    use alk_store::jobs::Stamp;
    use alk_store::queue::{Payload, QueueEngine};
    use alk_store::tx::TxEngine;

    const DOC: &str = include_str!("../../../docs/formats/localstream.v1.md");
    const DOC_V2: &str = include_str!("../../../docs/formats/localstream.v2.md");

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
                ("LAST_OFFSET", LAST_OFFSET),
                ("APPEND", APPEND),
                ("NEW_STREAM", NEW_STREAM),
                ("SET_LAST_OFFSET", SET_LAST_OFFSET),
                ("READ_SINCE", READ_SINCE),
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
                ("INFO", INFO),
                ("CONSUMERS", CONSUMERS),
                ("STREAM_NAMES", STREAM_NAMES),
            ],
        );
        // A new v2 file is the v1 DDL followed by the upgrade, which gives
        // the store its id.
        assert_eq!(DDL_V2, format!("{DDL}{UPGRADE}"));
        assert!(UPGRADE.contains(NEW_STORE_ID));
    }

    const DOC_V3: &str = include_str!("../../../docs/formats/localstream.v3.md");

    #[test]
    fn the_v3_document_pins_the_ddl_and_every_statement() {
        use crate::relay::{RELAY_PAGE_V3, RELAY_SEND_UNIQUE};
        crate::assert_document_pins(
            "localstream.v3.md",
            DOC_V3,
            &[
                ("DDL_V3", DDL_V3),
                ("UPGRADE_V3", UPGRADE_V3),
                ("RELAY_SEND_UNIQUE", RELAY_SEND_UNIQUE),
                ("RELAY_PAGE_V3", RELAY_PAGE_V3),
            ],
        );
        assert_eq!(DDL_V3, format!("{DDL}{UPGRADE}{UPGRADE_V3}"));
        assert_eq!(UPGRADE_V1_V3, format!("{UPGRADE}{UPGRADE_V3}"));
    }

    #[tokio::test]
    async fn a_v2_stream_file_is_upgraded_on_open_keeping_its_pending_sends() {
        let dir = tempfile::tempdir().unwrap();
        let path = stream_path(dir.path());
        let store_id = {
            let v2 = open_store(&path, &FORMAT_V2, StoreOptions::default())
                .await
                .unwrap();
            v2.run_immediate(|conn: Connection| {
                Box::pin(async move {
                    publish_on(&conn, "s", None, b"one", 10).await?;
                    exec(
                        &conn,
                        "INSERT INTO relay (queue, payload_type, payload_data, priority, due_at, \
                         created_at) VALUES ('q', 'text', 'pending', 0, 0, 5)",
                        (),
                    )
                    .await?;
                    Ok(())
                })
            })
            .await
            .unwrap();
            let id = sql_rows(&v2, "SELECT value FROM meta WHERE key = 'store_id'").await;
            v2.close_for_test();
            id
        };
        let s = quiet(dir.path()).await;
        let marker = sql_rows(&s.store, "SELECT value FROM meta WHERE key = 'format'").await;
        assert_eq!(marker, ["Text(\"localstream.v3\")"]);
        assert_eq!(
            sql_rows(&s.store, "SELECT value FROM meta WHERE key = 'store_id'").await,
            store_id
        );
        assert_eq!(s.read_since("s", 0, 10, 1 << 20).await.unwrap().len(), 1);
        // The pending send is relayed as it was (by the open), without a
        // key.
        let q = s.relay.queues.get("q").await.unwrap();
        s.relay.relay_queue("q").await.unwrap();
        assert_eq!(claim_all(&q).await, [text("pending")]);
        // The same schema as a file made as v3.
        let fresh_dir = tempfile::tempdir().unwrap();
        let fresh = quiet(fresh_dir.path()).await;
        let schema = "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name";
        assert_eq!(
            sql_rows(&s.store, schema).await,
            sql_rows(&fresh.store, schema).await
        );
    }

    pub(crate) fn text(s: &str) -> Payload {
        Payload::Text(s.into())
    }

    /// A stream store without a background relayer (the tests relay by
    /// hand).
    pub(crate) async fn quiet(dir: &Path) -> StreamStore {
        let options = StoreOptions::default();
        StreamStore::open_with(dir, options, Arc::new(Queues::new(dir, options)), false)
            .await
            .unwrap()
    }

    pub(crate) async fn claim_all(q: &QueueStore) -> Vec<Payload> {
        q.claim(1000, 1_000_000, None, 1_000)
            .await
            .unwrap()
            .into_iter()
            .map(|d| d.payload)
            .collect()
    }

    pub(crate) async fn sql_rows(store: &Store, sql: &'static str) -> Vec<String> {
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
        assert_eq!(marker, ["Text(\"localstream.v3\")"]);
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
                assert_eq!(found.as_deref(), Some("localstream.v3"))
            }
            other => panic!("{other:?}"),
        }
    }
}
