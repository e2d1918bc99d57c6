//! Schedules: one row each in `schedules`, every send option in its own
//! column, the next boundary on the database's clock (moved from and to
//! the host's as every other time the engine keeps). A firing moves the row's next boundary with a conditional
//! update and sends the jobs with the queue store's send statement, in one
//! transaction: two runners firing the same boundary send its jobs once.

use std::sync::Arc;

use alk_store::jobs::{SendOptions, Stamp};
use alk_store::queue::Payload;
use alk_store::schedule::{ScheduleEngine, ScheduleRow};
use alk_store::{AlkError, AlkResult};
use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use crate::clock::Clockwork;
use crate::conn::{Fail, Inner};
use crate::queue::{Q_SEND, send_on};

// The statements of this module (each listed by name in
// `sql::STATEMENTS`, which a test checks against the format document).

/// Creates schedule `$1`, or replaces every column of the one of that name:
/// spec `$2`, interval `$3`, queue `$4`, payload kind `$5` and body `$6`,
/// the send options priority `$7`, delay `$8`, run-at `$9`, attempt limit
/// `$10`, backoff base `$11`, expiry `$12`, group `$13` (each NULL when not
/// given), and the next boundary `$14`.
pub const SC_PUT: &str = "INSERT INTO alk.schedules (name, spec, every_ms, queue, payload_type, payload_data, \
priority, delay_ms, run_at_ms, max_attempts, backoff_base_ms, expires_in_ms, group_key, next_due) \
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) ON CONFLICT (name) DO UPDATE SET \
spec = EXCLUDED.spec, every_ms = EXCLUDED.every_ms, queue = EXCLUDED.queue, payload_type = EXCLUDED.payload_type, \
payload_data = EXCLUDED.payload_data, priority = EXCLUDED.priority, delay_ms = EXCLUDED.delay_ms, \
run_at_ms = EXCLUDED.run_at_ms, max_attempts = EXCLUDED.max_attempts, backoff_base_ms = EXCLUDED.backoff_base_ms, \
expires_in_ms = EXCLUDED.expires_in_ms, group_key = EXCLUDED.group_key, next_due = CASE WHEN alk.schedules.every_ms = EXCLUDED.every_ms THEN alk.schedules.next_due ELSE EXCLUDED.next_due END";
/// Deletes a schedule.
pub const SC_REMOVE: &str = "DELETE FROM alk.schedules WHERE name = $1";
/// One schedule (columns in the order of the table).
pub const SC_GET: &str = "SELECT name, spec, every_ms, queue, payload_type, payload_data, priority, delay_ms, \
run_at_ms, max_attempts, backoff_base_ms, expires_in_ms, group_key, next_due FROM alk.schedules WHERE name = $1";
/// Every schedule, in the byte order of their names (columns as
/// [`SC_GET`]'s).
pub const SC_LIST: &str = "SELECT name, spec, every_ms, queue, payload_type, payload_data, priority, delay_ms, \
run_at_ms, max_attempts, backoff_base_ms, expires_in_ms, group_key, next_due FROM alk.schedules ORDER BY name";
/// Moves schedule `$1` from boundary `$2` to `$3`, only while `$2` is its
/// next boundary; its queue and payload when it did. The row stays locked
/// until the firing transaction ends, so a racing firing of the same
/// boundary waits, then finds the boundary moved and changes nothing.
pub const SC_FIRE: &str = "UPDATE alk.schedules SET next_due = $3 WHERE name = $1 AND next_due = $2 \
RETURNING queue, payload_type, payload_data";

/// The most messages one send statement of a firing carries (the largest
/// batch a queue's `send-batch` takes).
const SEND_CHUNK: usize = 1_000;

/// The schedules of a schema.
pub(crate) struct PgSchedules {
    inner: Arc<Inner>,
    put: String,
    remove: String,
    get: String,
    list: String,
    fire: String,
    send: String,
}

impl PgSchedules {
    pub(crate) fn new(inner: Arc<Inner>) -> PgSchedules {
        let s = &inner.sql;
        PgSchedules {
            put: s.get(SC_PUT),
            remove: s.get(SC_REMOVE),
            get: s.get(SC_GET),
            list: s.get(SC_LIST),
            fire: s.get(SC_FIRE),
            send: s.get(Q_SEND),
            inner,
        }
    }
}

fn corrupt(name: &str, what: &str) -> Fail {
    Fail::Alk(AlkError::Internal(format!(
        "schedule {name:?} has {what}, which the schema does not allow"
    )))
}

/// A payload from its kind and UTF-8 bytes.
fn payload_of(name: &str, kind: &str, data: Vec<u8>) -> Result<Payload, Fail> {
    let text = String::from_utf8(data).map_err(|_| corrupt(name, "a payload that is not UTF-8"))?;
    match kind {
        "json" => Ok(Payload::Json(text)),
        "text" => Ok(Payload::Text(text)),
        other => Err(corrupt(name, &format!("payload type {other:?}"))),
    }
}

/// A stored count or duration: never negative.
fn unsigned(name: &str, column: &str, v: Option<i64>) -> Result<Option<u64>, Fail> {
    v.map(|v| u64::try_from(v).map_err(|_| corrupt(name, &format!("{column} {v}"))))
        .transpose()
}

/// A schedule from a row of [`SC_GET`] or [`SC_LIST`], its next
/// boundary on the host's clock.
fn row_of(clock: &Clockwork, row: &Row) -> Result<ScheduleRow, Fail> {
    let name: String = row.try_get(0)?;
    let n = name.as_str();
    let every_ms = unsigned(n, "every_ms", Some(row.try_get(2)?))?.unwrap_or(0);
    let kind: String = row.try_get(4)?;
    let payload = payload_of(n, &kind, row.try_get(5)?)?;
    let max_attempts = unsigned(n, "max_attempts", row.try_get(9)?)?
        .map(|v| u32::try_from(v).map_err(|_| corrupt(n, &format!("max_attempts {v}"))))
        .transpose()?;
    let group = row
        .try_get::<_, Option<Vec<u8>>>(12)?
        .map(|g| String::from_utf8(g).map_err(|_| corrupt(n, "a group that is not UTF-8")))
        .transpose()?;
    let options = SendOptions {
        priority: row.try_get(6)?,
        delay_ms: unsigned(n, "delay_ms", row.try_get(7)?)?,
        run_at_ms: unsigned(n, "run_at_ms", row.try_get(8)?)?,
        max_attempts,
        backoff_base_ms: unsigned(n, "backoff_base_ms", row.try_get(10)?)?,
        expires_in_ms: unsigned(n, "expires_in_ms", row.try_get(11)?)?,
        group,
    };
    Ok(ScheduleRow {
        spec: row.try_get(1)?,
        every_ms,
        queue: row.try_get(3)?,
        payload,
        options,
        next_due: clock.to_host(row.try_get(13)?),
        name,
    })
}

/// A value to store in a `bigint` column: refused when it does not fit.
fn signed(name: &str, what: &str, v: Option<u64>) -> AlkResult<Option<i64>> {
    v.map(|v| {
        i64::try_from(v).map_err(|_| {
            AlkError::InvalidArgument(format!(
                "schedule {name:?}: {what} {v} is too large to store"
            ))
        })
    })
    .transpose()
}

#[async_trait]
impl ScheduleEngine for PgSchedules {
    async fn put(&self, row: &ScheduleRow) -> AlkResult<()> {
        let n = row.name.as_str();
        let o = &row.options;
        let every_ms = signed(n, "every-ms", Some(row.every_ms))?;
        let delay = signed(n, "delay-ms", o.delay_ms)?;
        let run_at = signed(n, "run-at-ms", o.run_at_ms)?;
        let max_attempts = o.max_attempts.map(i64::from);
        let backoff = signed(n, "backoff-base-ms", o.backoff_base_ms)?;
        let expires_in = signed(n, "expires-in-ms", o.expires_in_ms)?;
        let group: Option<&[u8]> = o.group.as_deref().map(str::as_bytes);
        let next_due = self.inner.clock.to_db(row.next_due);
        let (kind, text) = row.payload.parts();
        let data = text.as_bytes();
        let sql = &self.put;
        let (every_ms, delay, run_at, max_attempts, backoff, expires_in, group) = (
            &every_ms,
            &delay,
            &run_at,
            &max_attempts,
            &backoff,
            &expires_in,
            &group,
        );
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(sql).await?;
                    c.execute(
                        &stmt,
                        &[
                            &row.name,
                            &row.spec,
                            every_ms,
                            &row.queue,
                            &kind,
                            &data,
                            &o.priority,
                            delay,
                            run_at,
                            max_attempts,
                            backoff,
                            expires_in,
                            group,
                            &next_due,
                        ],
                    )
                    .await?;
                    Ok(())
                })
            })
            .await
    }

    async fn remove(&self, name: &str) -> AlkResult<bool> {
        let sql = &self.remove;
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(sql).await?;
                    Ok(c.execute(&stmt, &[&name]).await? > 0)
                })
            })
            .await
    }

    async fn get(&self, name: &str) -> AlkResult<Option<ScheduleRow>> {
        let (sql, clock) = (&self.get, &*self.inner.clock);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(sql).await?;
                    match c.query_opt(&stmt, &[&name]).await? {
                        Some(row) => Ok(Some(row_of(clock, &row)?)),
                        None => Ok(None),
                    }
                })
            })
            .await
    }

    async fn list(&self) -> AlkResult<Vec<ScheduleRow>> {
        let (sql, clock) = (&self.list, &*self.inner.clock);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(sql).await?;
                    let rows = c.query(&stmt, &[]).await?;
                    rows.iter().map(|r| row_of(clock, r)).collect()
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
        let (fire, send, clock) = (&self.fire, &self.send, &*self.inner.clock);
        let (due, next) = (clock.to_db(due), clock.to_db(next));
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let mut c = c;
                    let tx = c.transaction().await?;
                    let stmt = tx.prepare_cached(fire).await?;
                    let Some(row) = tx.query_opt(&stmt, &[&name, &due, &next]).await? else {
                        // Gone, or another runner moved it first.
                        tx.rollback().await?;
                        return Ok(false);
                    };
                    let queue: String = row.try_get(0)?;
                    let kind: String = row.try_get(1)?;
                    let payload = payload_of(name, &kind, row.try_get(2)?)?;
                    // One send per run of equal stamps (a catch-up sends
                    // its copies with one stamp): the same rows as a send
                    // per stamp, in the same order.
                    let mut rest = stamps;
                    while let Some(stamp) = rest.first() {
                        let run = rest
                            .iter()
                            .take(SEND_CHUNK)
                            .take_while(|s| *s == stamp)
                            .count();
                        let copies = vec![payload.clone(); run];
                        send_on(&*tx, send, clock, &queue, &copies, stamp, now).await?;
                        rest = &rest[run..];
                    }
                    tx.commit().await?;
                    Ok(true)
                })
            })
            .await
    }
}
