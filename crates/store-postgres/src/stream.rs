//! Streams: rows of `events`, offsets from the stream's row in `streams`
//! (locked until commit, so offsets of one stream become visible in order),
//! consumer offsets in `consumer_offsets`; transactions on one pooled
//! connection, which also carry sends to queues (by the queue store's own
//! send statement, so the jobs commit or roll back with the events and
//! offsets).

use std::sync::Arc;

use alk_store::jobs::Stamp;
use alk_store::limits::page;
use alk_store::queue::Payload;
use alk_store::stream::{Event, StreamEngine, TxEngine, TxFailure};
use alk_store::{AlkError, AlkResult};
use async_trait::async_trait;
use deadpool_postgres::GenericClient;

use crate::{Conn, Fail, Inner, describe_pg, sql};

/// The statements of the stream store, for one schema.
struct Statements {
    publish: String,
    read: String,
    last: String,
    save: String,
    get_offset: String,
    trim: String,
    /// The queue store's send, for sends inside a transaction.
    send: String,
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
            publish: s.get(sql::S_PUBLISH),
            read: s.get(sql::S_READ),
            last: s.get(sql::S_LAST),
            save: s.get(sql::S_SAVE),
            get_offset: s.get(sql::S_GET_OFFSET),
            trim: s.get(sql::S_TRIM),
            send: s.get(sql::Q_SEND),
        });
        PgStreams { inner, sql }
    }
}

fn offset(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Appends `events` to `stream` at `now` (database time); their offsets.
async fn publish_on<C: GenericClient + Sync>(
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
async fn save_on<C: GenericClient + Sync>(
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

    async fn begin(&self) -> AlkResult<Box<dyn TxEngine>> {
        let mut conn = self.inner.conn().await?;
        let key = format!("alk-stream-tx:{}", self.inner.sql.schema());
        let started = async {
            conn.begin().await?;
            conn.execute(sql::S_TX_LOCK, &[&key]).await
        };
        if let Err(e) = started.await {
            // The transaction is open: dropping the connection closes it.
            return Err(self.inner.error(Fail::Pg(e)));
        }
        Ok(Box::new(PgTx {
            inner: self.inner.clone(),
            sql: self.sql.clone(),
            conn: Some(conn),
        }))
    }
}

/// An open transaction on its own pooled connection. A connection leaves
/// the transaction by a `COMMIT` or `ROLLBACK` the server answered before
/// it goes back to the pool; one whose transaction is abandoned (dropped,
/// failed, or its end failed) is closed instead, which makes the server
/// roll back (see [`Conn`]).
struct PgTx {
    inner: Arc<Inner>,
    sql: Arc<Statements>,
    conn: Option<Conn>,
}

impl PgTx {
    /// The connection, or the failure of a transaction already over.
    fn conn(&self) -> Result<&deadpool_postgres::Object, TxFailure> {
        self.conn
            .as_deref()
            .ok_or_else(|| TxFailure::Failed("the transaction is over".into()))
    }

    /// Ends the transaction after a failed statement (closing the
    /// connection rolls it back) and says why.
    fn failed(&mut self, e: tokio_postgres::Error) -> TxFailure {
        self.abandon();
        TxFailure::Failed(format!("postgres: {}", describe_pg(&e)))
    }

    /// Closes the connection (its transaction is open), which makes the
    /// server roll back.
    fn abandon(&mut self) {
        drop(self.conn.take());
    }
}

#[async_trait]
impl TxEngine for PgTx {
    async fn publish(
        &mut self,
        stream: &str,
        key: Option<&str>,
        payload: &[u8],
        now: i64,
    ) -> Result<u64, TxFailure> {
        let now = self.inner.clock.to_db(now);
        let result = {
            let conn = self.conn()?;
            publish_on(conn, &self.sql.publish, stream, &[(key, payload)], now).await
        };
        match result {
            Ok(offsets) => offsets
                .first()
                .copied()
                .ok_or_else(|| TxFailure::Failed("publish returned no offset".into())),
            Err(e) => Err(self.failed(e)),
        }
    }

    async fn save_offset(
        &mut self,
        stream: &str,
        consumer: &str,
        to: u64,
    ) -> Result<(), TxFailure> {
        let result = {
            let conn = self.conn()?;
            save_on(conn, &self.sql, stream, consumer, to).await
        };
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(refused)) => Err(TxFailure::Refused(refused)),
            Err(e) => Err(self.failed(e)),
        }
    }

    async fn enqueue(
        &mut self,
        queue: &str,
        payloads: &[Payload],
        stamp: &Stamp,
        now: i64,
    ) -> Result<(), TxFailure> {
        // Everything was checked by the core: nothing is refused here, and
        // a failed statement has already aborted the server's transaction.
        let result = {
            let conn = self.conn()?;
            let clock = &*self.inner.clock;
            crate::queue::send_on(conn, &self.sql.send, clock, queue, payloads, stamp, now).await
        };
        match result {
            Ok(_) => Ok(()),
            Err(Fail::Pg(e) | Fail::CommitUnknown(e)) => Err(self.failed(e)),
            Err(Fail::Alk(e)) => {
                self.abandon();
                Err(TxFailure::Failed(e.to_string()))
            }
        }
    }

    async fn commit(mut self: Box<Self>) -> AlkResult<()> {
        let Some(mut conn) = self.conn.take() else {
            return Err(AlkError::TransactionAborted(
                "the transaction is over".into(),
            ));
        };
        // On failure `conn` is dropped with its transaction open: closed.
        match conn.end("COMMIT").await {
            Ok(()) => Ok(()),
            Err(e) if crate::commit_outcome_unknown(&e) => Err(AlkError::Internal(
                crate::unknown_commit_text(&self.inner.target, &e),
            )),
            Err(e) => Err(AlkError::TransactionAborted(format!(
                "postgres: the server refused the COMMIT, nothing was committed: {}",
                describe_pg(&e)
            ))),
        }
    }

    async fn rollback(mut self: Box<Self>) {
        if let Some(mut conn) = self.conn.take() {
            // Closed instead when the ROLLBACK fails.
            let _ = conn.end("ROLLBACK").await;
        }
    }
}
