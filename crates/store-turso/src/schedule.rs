//! Schedules, kept in the stream store file (`localstream.v2`): each names
//! an interval, a queue and the job sent to it at every boundary. Its
//! statements are defined here and pinned by
//! `docs/formats/localstream.v2.md`; the jobs of a boundary are written as
//! relay rows in the transaction that moves the boundary, and reach their
//! queue through the relay ([`crate::relay`]).

use std::path::Path;

use alk_store::jobs::{SendOptions, Stamp};
use alk_store::schedule::{ScheduleEngine, ScheduleRow};
use alk_store::{AlkError, AlkResult};
use async_trait::async_trait;

use crate::conn::Connection;
use crate::relay::{Columns, relay_send_on};
use crate::retry::{Failure, exec, query};
use crate::stream::StreamStore;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{NewQueues, StoreOptions};
    use crate::queue::QueueStore;
    use crate::stream::tests::{quiet, text};
    use alk_store::queue::{Payload, QueueEngine};

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
        let got = jobs.claim(10, 100_000, None, 2_000).await.unwrap();
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
}
