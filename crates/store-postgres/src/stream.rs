//! Streams: rows of `events`, offsets from the stream's row in `streams`
//! (locked until commit, so offsets of one stream become visible in order),
//! consumer offsets in `consumer_offsets`; transactions are in `tx`.

use std::sync::Arc;

use alk_store::limits::page;
use alk_store::stream::{ConsumerLag, Event, StreamEngine, StreamInfo};
use alk_store::{AlkError, AlkResult};
use async_trait::async_trait;
use deadpool_postgres::GenericClient;

use crate::conn::Inner;
use crate::queue::Q_SEND;

// The statements of this module (each listed by name in
// `sql::STATEMENTS`, which a test checks against the format document).

/// Appends events: `$2` of them, keys `$3`, payloads `$4`, at `$5`. The
/// stream's counter row stays locked until commit: a publisher of the same
/// stream waits, so offsets become visible in order and a reader that saw
/// offset n never later finds a lower one appear.
pub const S_PUBLISH: &str = "WITH n AS (INSERT INTO alk.streams AS s (stream, last_offset) VALUES ($1, $2) \
ON CONFLICT (stream) DO UPDATE SET last_offset = s.last_offset + $2 RETURNING last_offset) \
INSERT INTO alk.events (stream, seq, key, payload, created_at) \
SELECT $1, n.last_offset - $2 + t.ord, t.key, t.payload, $5 FROM n, \
unnest($3::text[], $4::bytea[]) WITH ORDINALITY AS t(key, payload, ord) RETURNING seq";
/// Events after an offset, in offset order, at most `$3`, with each
/// payload's size; a payload itself only while the sizes up to it stay
/// within `$4` bytes (or it is the first).
pub const S_READ: &str = "SELECT seq, key, size, CASE WHEN running <= $4 OR running = size THEN payload END, created_at FROM (\
SELECT seq, key, payload, created_at, length(payload)::bigint AS size, \
sum(length(payload)) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) AS running \
FROM (SELECT seq, key, payload, created_at FROM alk.events WHERE stream = $1 AND seq > $2 ORDER BY seq LIMIT $3) AS page) AS sized ORDER BY seq";
/// The highest offset ever assigned in a stream.
pub const S_LAST: &str = "SELECT last_offset FROM alk.streams WHERE stream = $1";
/// Saves a consumer's offset unless that would move it back.
pub const S_SAVE: &str = "INSERT INTO alk.consumer_offsets AS c (stream, consumer, seq) VALUES ($1, $2, $3) \
ON CONFLICT (stream, consumer) DO UPDATE SET seq = EXCLUDED.seq WHERE EXCLUDED.seq > c.seq";
/// A consumer's saved offset.
pub const S_GET_OFFSET: &str =
    "SELECT seq FROM alk.consumer_offsets WHERE stream = $1 AND consumer = $2";
/// Deletes the events at or below a horizon.
pub const S_TRIM: &str = "DELETE FROM alk.events WHERE stream = $1 AND seq <= $2";
/// A stream's last assigned and lowest stored offsets, each from a primary
/// key.
pub const S_INFO: &str = "SELECT (SELECT last_offset FROM alk.streams WHERE stream = $1), (SELECT min(seq) FROM alk.events WHERE stream = $1)";
/// Up to `$2` saved offsets of a stream, by consumer.
/// Up to `$2` stream names after `$1` (`''` for the first page): a range
/// of the primary key of `streams`.
pub const S_NAMES: &str = "SELECT stream::text FROM alk.streams WHERE stream > $1 ORDER BY stream LIMIT $2";
/// Up to `$2` saved offsets of a stream, by consumer.
pub const S_CONSUMERS: &str = "SELECT consumer, seq FROM alk.consumer_offsets WHERE stream = $1 ORDER BY consumer LIMIT $2";

/// The statements of the stream store, for one schema.
pub(crate) struct Statements {
    pub(crate) publish: String,
    read: String,
    last: String,
    save: String,
    get_offset: String,
    trim: String,
    info: String,
    consumers: String,
    names: String,
    /// The queue store's send, for sends inside a transaction.
    pub(crate) send: String,
    /// The queue store's send with a unique key, likewise.
    pub(crate) unique: crate::queue::UniqueStatements,
}

/// The streams of a schema.
pub(crate) struct PgStreams {
    inner: Arc<Inner>,
    sql: Arc<Statements>,
}

impl PgStreams {
    pub(crate) fn new(inner: Arc<Inner>) -> PgStreams {
        let s = &inner.sql;
        let sql = Arc::new(Statements {
            publish: s.get(S_PUBLISH),
            read: s.get(S_READ),
            last: s.get(S_LAST),
            save: s.get(S_SAVE),
            get_offset: s.get(S_GET_OFFSET),
            trim: s.get(S_TRIM),
            info: s.get(S_INFO),
            consumers: s.get(S_CONSUMERS),
            names: s.get(S_NAMES),
            send: s.get(Q_SEND),
            unique: crate::queue::UniqueStatements::new(s),
        });
        PgStreams { inner, sql }
    }

    /// The statements, which transactions ([`crate::tx`]) run too.
    pub(crate) fn statements(&self) -> &Arc<Statements> {
        &self.sql
    }
}

fn offset(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Appends `events` to `stream` at `now` (database time); their offsets.
pub(crate) async fn publish_on<C: GenericClient + Sync>(
    c: &C,
    sql: &str,
    stream: &str,
    events: &[(Option<&str>, &[u8])],
    now: i64,
) -> Result<Vec<u64>, tokio_postgres::Error> {
    let count = events.len() as i64;
    let keys: Vec<Option<&str>> = events.iter().map(|(k, _)| *k).collect();
    let payloads: Vec<&[u8]> = events.iter().map(|(_, p)| *p).collect();
    let stmt = c.prepare_cached(sql).await?;
    let rows = c
        .query(&stmt, &[&stream, &count, &keys, &payloads, &now])
        .await?;
    let mut offsets = rows
        .iter()
        .map(|r| r.try_get::<_, i64>(0).map(offset))
        .collect::<Result<Vec<u64>, _>>()?;
    offsets.sort_unstable();
    Ok(offsets)
}

/// Saves an offset unless it is beyond the stream's last: `Ok(Err(…))` is
/// that refusal, made before anything was written.
pub(crate) async fn save_on<C: GenericClient + Sync>(
    c: &C,
    sql: &Statements,
    stream: &str,
    consumer: &str,
    to: u64,
) -> Result<Result<(), AlkError>, tokio_postgres::Error> {
    let stmt = c.prepare_cached(&sql.last).await?;
    let last = match c.query_opt(&stmt, &[&stream]).await? {
        Some(row) => offset(row.try_get(0)?),
        None => 0,
    };
    if to > last {
        return Ok(Err(AlkError::InvalidArgument(format!(
            "offset {to} is beyond the last offset {last} of stream {stream:?}"
        ))));
    }
    let stmt = c.prepare_cached(&sql.save).await?;
    c.execute(&stmt, &[&stream, &consumer, &to_i64(to)]).await?;
    Ok(Ok(()))
}

#[async_trait]
impl StreamEngine for PgStreams {
    async fn publish(
        &self,
        stream: &str,
        key: Option<&str>,
        payload: &[u8],
        now: i64,
    ) -> AlkResult<u64> {
        let now = self.inner.clock.to_db(now);
        let sql = &self.sql.publish;
        let offsets = self
            .inner
            .run(|c| {
                Box::pin(
                    async move { Ok(publish_on(&*c, sql, stream, &[(key, payload)], now).await?) },
                )
            })
            .await?;
        offsets
            .first()
            .copied()
            .ok_or_else(|| AlkError::Internal("publish returned no offset".into()))
    }

    async fn publish_batch(
        &self,
        stream: &str,
        events: &[(Option<String>, Vec<u8>)],
        now: i64,
    ) -> AlkResult<Vec<u64>> {
        let now = self.inner.clock.to_db(now);
        let events: Vec<(Option<&str>, &[u8])> = events
            .iter()
            .map(|(k, p)| (k.as_deref(), p.as_slice()))
            .collect();
        let (sql, events) = (&self.sql.publish, &events);
        self.inner
            .run(|c| Box::pin(async move { Ok(publish_on(&*c, sql, stream, events, now).await?) }))
            .await
    }

    async fn read_since(
        &self,
        stream: &str,
        after: u64,
        limit: u32,
        max_bytes: usize,
    ) -> AlkResult<Vec<Event>> {
        let (sql, after, limit) = (&self.sql.read, to_i64(after), i64::from(limit));
        let cap = i64::try_from(max_bytes).unwrap_or(i64::MAX);
        let clock = self.inner.clock.clone();
        let clock = &clock;
        let rows = self
            .inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(sql).await?;
                    let mut rows = Vec::new();
                    for row in c.query(&stmt, &[&stream, &after, &limit, &cap]).await? {
                        let size: i64 = row.try_get(2)?;
                        let payload: Option<Vec<u8>> = row.try_get(3)?;
                        let event = Event {
                            offset: offset(row.try_get(0)?),
                            stream: stream.to_string(),
                            key: row.try_get(1)?,
                            payload: Vec::new(),
                            created_at: clock.to_host(row.try_get(4)?),
                        };
                        rows.push((usize::try_from(size).unwrap_or(0), payload, event));
                    }
                    Ok(rows)
                })
            })
            .await?;
        let (taken, _) = page(rows, |(size, _, _)| *size, usize::MAX, max_bytes);
        taken
            .into_iter()
            .map(|(_, payload, mut event)| {
                event.payload = payload.ok_or_else(|| {
                    AlkError::Internal(
                        "read: the server left out a payload within the read cap".into(),
                    )
                })?;
                Ok(event)
            })
            .collect()
    }

    async fn save_offset(&self, stream: &str, consumer: &str, to: u64) -> AlkResult<()> {
        let sql = &*self.sql;
        self.inner
            .run(|c| Box::pin(async move { Ok(save_on(&*c, sql, stream, consumer, to).await?) }))
            .await?
    }

    async fn get_offset(&self, stream: &str, consumer: &str) -> AlkResult<Option<u64>> {
        let sql = &self.sql.get_offset;
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(sql).await?;
                    Ok(match c.query_opt(&stmt, &[&stream, &consumer]).await? {
                        Some(row) => Some(offset(row.try_get(0)?)),
                        None => None,
                    })
                })
            })
            .await
    }

    async fn info(&self, stream: &str, max_consumers: u32) -> AlkResult<StreamInfo> {
        let (info, consumers) = (&self.sql.info, &self.sql.consumers);
        let limit = i64::from(max_consumers);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(info).await?;
                    let row = c.query_one(&stmt, &[&stream]).await?;
                    let mut out = StreamInfo {
                        last: row.try_get::<_, Option<i64>>(0)?.unwrap_or(0).max(0) as u64,
                        first: row.try_get::<_, Option<i64>>(1)?.map(|n| n.max(0) as u64),
                        consumers: Vec::new(),
                    };
                    let stmt = c.prepare_cached(consumers).await?;
                    for row in c.query(&stmt, &[&stream, &limit]).await? {
                        out.consumers.push(ConsumerLag {
                            consumer: row.try_get(0)?,
                            offset: row.try_get::<_, i64>(1)?.max(0) as u64,
                            lag: 0,
                        });
                    }
                    Ok(out)
                })
            })
            .await
    }

    async fn names(&self, after: Option<&str>, max: u32) -> AlkResult<Vec<String>> {
        let (sql, after, limit) = (&self.sql.names, after.unwrap_or(""), i64::from(max));
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(sql).await?;
                    c.query(&stmt, &[&after, &limit])
                        .await?
                        .iter()
                        .map(|r| r.try_get::<_, String>(0).map_err(Into::into))
                        .collect()
                })
            })
            .await
    }

    async fn trim_to(&self, stream: &str, horizon: u64) -> AlkResult<u64> {
        let (sql, horizon) = (&self.sql.trim, to_i64(horizon));
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(sql).await?;
                    Ok(c.execute(&stmt, &[&stream, &horizon]).await?)
                })
            })
            .await
    }
}
