//! The relay: how a send to a queue inside a stream transaction (or a
//! scheduled job) reaches its queue.
//!
//! A commit is atomic within one file only, and every queue is a file of
//! its own, so a send to a queue inside a transaction is written to the
//! stream store file, as a row of `relay`, and moved to the queue after the
//! commit (the *relay*): by the committing call, by the next open of the
//! store, or by the background relayer of any process that has the store
//! open. Each queue records the highest relay id it applied from this
//! store, so a relay repeated after a crash applies nothing twice. The
//! relayed rows are deleted from the stream store by the next write
//! transaction of the process (or its background relayer), not by a commit
//! of their own.
//!
//! Both sides are here: the stream store's (the statements of its `relay`
//! table, part of `localstream.v2` and `localstream.v3`; the relay after a
//! commit and at open; the background relayer) and the queue's (the
//! statements of its relay marks, part of `localqueue.v2`, and the
//! transaction of a queue file that applies a page of relay rows).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

use alk_store::jobs::{Stamp, Unique};
use alk_store::queue::Payload;
use alk_store::wake::{Wakes, topics};
use alk_store::{AlkError, AlkResult};
use turso::Value;

use crate::conn::Connection;
use crate::queue::{QueueStore, Queues, send_unique_on, send_v2_on};
use crate::retry::{Failure, exec, query};
use crate::store::Store;

/// Records one message a transaction sends to a queue.
pub const RELAY_SEND: &str = "INSERT INTO relay (queue, payload_type, payload_data, priority, due_at, \
max_attempts, backoff_ms, expires_at, group_key, created_at) \
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
/// Records one message a transaction sends to a queue with a unique key
/// (`localstream.v3`): `?11` the key, `?12` until when it is held (`NULL`:
/// while the message is live).
pub const RELAY_SEND_UNIQUE: &str = "INSERT INTO relay (queue, payload_type, payload_data, priority, due_at, \
max_attempts, backoff_ms, expires_at, group_key, created_at, unique_key, unique_until) \
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";
/// The oldest pending messages of a queue above an id, by id
/// (`localstream.v2`).
pub const RELAY_PAGE: &str = "SELECT id, payload_type, payload_data, priority, due_at, max_attempts, \
backoff_ms, expires_at, group_key, created_at FROM relay WHERE queue = ?1 AND id > ?2 ORDER BY id LIMIT ?3";
/// [`RELAY_PAGE`] with the unique keys (`localstream.v3`).
pub const RELAY_PAGE_V3: &str = "SELECT id, payload_type, payload_data, priority, due_at, max_attempts, \
backoff_ms, expires_at, group_key, created_at, unique_key, unique_until FROM relay \
WHERE queue = ?1 AND id > ?2 ORDER BY id LIMIT ?3";
/// The highest pending message of a queue at or below a queue's relay mark:
/// the row the mark was written from, in the file it was written from.
pub const RELAY_MARKED: &str = "SELECT id, created_at, payload_data FROM relay WHERE queue = ?1 AND id <= ?2 \
ORDER BY id DESC LIMIT 1";
/// Forgets the messages of a queue up to an id, once the queue has them.
pub const RELAY_DONE: &str = "DELETE FROM relay WHERE queue = ?1 AND id <= ?2";
/// The first queue after `?1` (by name) with pending messages.
pub const RELAY_NEXT_QUEUE: &str =
    "SELECT queue FROM relay WHERE queue > ?1 ORDER BY queue LIMIT 1";

/// The relay mark of stream store `?1` (the key `relayed:<store_id>`): the
/// highest relay id already applied to this queue and that row's
/// fingerprint (see [`RelayMark`], `localstream.v2`).
pub const RELAYED: &str = "SELECT value FROM meta WHERE key = ?1";
/// Records the relay mark of a stream store.
pub const SET_RELAYED: &str = "INSERT INTO meta (key, value) VALUES (?1, ?2) \
ON CONFLICT(key) DO UPDATE SET value = excluded.value";

/// Most relay rows of one queue moved in one queue transaction.
pub const RELAY_BATCH: i64 = 1000;

/// Most pages of one queue relayed by a committing call, and by the relay
/// run when the store opens: the rest of a backlog is the background
/// relayer's.
pub(crate) const RELAY_PAGES_INLINE: usize = 1;

/// How often the background relayer looks for messages left pending.
pub const RELAY_EVERY: Duration = Duration::from_secs(1);

/// The longest a queue whose relay keeps failing waits between attempts
/// of the background relayer.
const RELAY_MAX_BACKOFF: Duration = Duration::from_secs(60);

/// What moves committed sends from the stream store to their queues.
pub(crate) struct Relay {
    pub(crate) store: Store,
    /// The stream store's id (its meta row `store_id`).
    pub(crate) store_id: String,
    pub(crate) queues: Arc<Queues>,
    pub(crate) wakes: Option<Wakes>,
    /// Per queue, the highest relay id this process relayed to it whose
    /// rows may still be here: they are deleted by the next write
    /// transaction of this store (see [`crate::stream::StreamStore::begin_tx`],
    /// [`Relay::flush_relayed`]), and skipped by relays meanwhile.
    pub(crate) relayed: std::sync::Mutex<HashMap<String, i64>>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("store_id", &self.store_id)
            .finish_non_exhaustive()
    }
}

/// A row of `relay` or `schedules` that breaks the format.
fn corrupt_row(path: &Path, table: &str, row: &str, column: &str, found: &Value) -> Failure {
    Failure::Alk(AlkError::Internal(format!(
        "{}: {table} row {row} has {found:?} in {column}, which localstream.v3 does not allow; the store is corrupt",
        path.display()
    )))
}

/// Reads the columns of one row of `relay` or `schedules`, naming the row in
/// the error of a value the format does not allow.
pub(crate) struct Columns<'a> {
    pub(crate) row: &'a turso::Row,
    pub(crate) path: &'a Path,
    pub(crate) table: &'static str,
    pub(crate) name: String,
}

impl Columns<'_> {
    fn fail(&self, column: &str, found: &Value) -> Failure {
        corrupt_row(self.path, self.table, &self.name, column, found)
    }

    pub(crate) fn int(&self, i: usize, column: &str) -> Result<i64, Failure> {
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
    pub(crate) fn fit<T: TryFrom<i64>>(&self, i: usize, column: &str) -> Result<T, Failure> {
        let n = self.int(i, column)?;
        T::try_from(n).map_err(|_| self.fail(column, &Value::Integer(n)))
    }

    /// An optional integer that must fit `T`.
    pub(crate) fn opt<T: TryFrom<i64>>(
        &self,
        i: usize,
        column: &str,
    ) -> Result<Option<T>, Failure> {
        self.opt_int(i, column)?
            .map(|n| T::try_from(n).map_err(|_| self.fail(column, &Value::Integer(n))))
            .transpose()
    }

    pub(crate) fn text(&self, i: usize, column: &str) -> Result<String, Failure> {
        match self.row.get_value(i)? {
            Value::Text(t) => Ok(t),
            other => Err(self.fail(column, &other)),
        }
    }

    pub(crate) fn opt_text(&self, i: usize, column: &str) -> Result<Option<String>, Failure> {
        match self.row.get_value(i)? {
            Value::Text(t) => Ok(Some(t)),
            Value::Null => Ok(None),
            other => Err(self.fail(column, &other)),
        }
    }

    /// The payload of columns `kind` and `kind + 1`.
    pub(crate) fn payload(&self, kind: usize) -> Result<Payload, Failure> {
        let data = self.text(kind + 1, "payload_data")?;
        match self.row.get_value(kind)? {
            Value::Text(k) if k == "json" => Ok(Payload::Json(data)),
            Value::Text(k) if k == "text" => Ok(Payload::Text(data)),
            other => Err(self.fail("payload_type", &other)),
        }
    }
}

/// A relay row from a row of [`RELAY_PAGE_V3`].
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
        unique: match c.opt_text(10, "unique_key")? {
            Some(key) => Some(Unique {
                key,
                until: c.opt_int(11, "unique_until")?,
            }),
            None => None,
        },
    })
}

/// Records one message sent to `queue` inside the caller's transaction.
pub(crate) async fn relay_send_on(
    conn: &Connection,
    queue: &str,
    payload: &Payload,
    stamp: &Stamp,
    now: i64,
) -> Result<(), Failure> {
    relay_send_unique_on(conn, queue, payload, stamp, None, now).await
}

/// Records one message sent to `queue` inside the caller's transaction,
/// with a unique key when `unique` says.
pub(crate) async fn relay_send_unique_on(
    conn: &Connection,
    queue: &str,
    payload: &Payload,
    stamp: &Stamp,
    unique: Option<&Unique>,
    now: i64,
) -> Result<(), Failure> {
    let (kind, data) = payload.parts();
    let mut params = vec![
        Value::Text(queue.to_string()),
        Value::Text(kind.to_string()),
        Value::Text(data.to_string()),
        Value::Integer(i64::from(stamp.priority)),
        Value::Integer(stamp.due_at),
        stamp
            .max_attempts
            .map_or(Value::Null, |n| Value::Integer(i64::from(n))),
        stamp
            .backoff_base_ms
            .map_or(Value::Null, |b| Value::Integer(b as i64)),
        stamp.expires_at.map_or(Value::Null, Value::Integer),
        stamp
            .group
            .as_ref()
            .map_or(Value::Null, |g| Value::Text(g.clone())),
        Value::Integer(now),
    ];
    let sql = match unique {
        None => RELAY_SEND,
        Some(u) => {
            params.push(Value::Text(u.key.clone()));
            params.push(u.until.map_or(Value::Null, Value::Integer));
            RELAY_SEND_UNIQUE
        }
    };
    exec(conn, sql, params).await?;
    Ok(())
}

/// Runs the background relayer of `relay` until the relay (the stream store
/// of an engine) is dropped: about once every [`RELAY_EVERY`] it looks for
/// pending messages (one indexed read) and relays them.
pub(crate) fn spawn_relayer(relay: Weak<Relay>) {
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
    pub(crate) async fn relay_pending(
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
    pub(crate) fn relayed_rows(&self) -> Vec<(String, i64)> {
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
    pub(crate) fn forgotten(&self, rows: &[(String, i64)]) {
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
    pub(crate) async fn pending(&self, queue: &str) -> AlkResult<Vec<Relayed>> {
        self.page(queue, self.relayed_up_to(queue)).await
    }

    /// The oldest pending messages of `queue` above id `after`.
    async fn page(&self, queue: &str, after: i64) -> AlkResult<Vec<Relayed>> {
        let path = self.store.path();
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, RELAY_PAGE_V3, (queue, after, RELAY_BATCH)).await?;
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
                w.signal(&topics::queue(queue));
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
    pub(crate) async fn after_commit(&self, queues: &[String]) {
        for queue in queues {
            if let Err(e) = self.relay_pages(queue, RELAY_PAGES_INLINE).await {
                log_failed_relay(queue, &e);
            }
        }
    }
}

/// Deletes the relay rows `rows` ([`Relay::relayed_rows`]) names, inside
/// the caller's transaction.
pub(crate) async fn forget_on(
    conn: &Connection,
    rows: &[(String, i64)],
) -> Result<(), turso::Error> {
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

/// A queue's relay mark for one stream store: the highest relay id of that
/// store applied to the queue, and a fingerprint of the relay row with that
/// id, by which a relay tells whether the stream file it reads is the one
/// the mark was written from. Stored as `<id>:<created_at>:<payload bytes>`;
/// a plain decimal `<id>` (written before fingerprints) has none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RelayMark {
    /// The highest relay id applied (0: none).
    pub id: i64,
    /// The relay row `id`'s `created_at` and the length in bytes of its
    /// `payload_data`; `None`: not recorded (an older mark).
    pub row: Option<(i64, usize)>,
}

impl RelayMark {
    /// The mark of relay row `r` applied last.
    fn of(r: &Relayed) -> RelayMark {
        RelayMark {
            id: r.id,
            row: Some((r.created_at, r.payload.parts().1.len())),
        }
    }

    /// The meta value: `<id>:<created_at>:<payload bytes>`.
    fn value(&self) -> String {
        match self.row {
            Some((created_at, len)) => format!("{}:{created_at}:{len}", self.id),
            None => self.id.to_string(),
        }
    }

    /// A meta value: `<id>:<created_at>:<payload bytes>`, or `<id>` alone.
    fn parse(value: &str) -> Option<RelayMark> {
        let mut parts = value.split(':');
        let id = parts.next()?.parse().ok()?;
        let row = match (parts.next(), parts.next(), parts.next()) {
            (None, _, _) => None,
            (Some(c), Some(len), None) => Some((c.parse().ok()?, len.parse().ok()?)),
            _ => return None,
        };
        Some(RelayMark { id, row })
    }

    /// Whether the relay row with the mark's id, sent at `created_at` with
    /// `len` bytes of `payload_data`, is the row the mark was written from
    /// (an older mark without a fingerprint matches any).
    pub(crate) fn matches(&self, created_at: i64, len: usize) -> bool {
        self.row.is_none_or(|row| row == (created_at, len))
    }
}

/// Starts the message of a relay refused because the stream file is not the
/// one the queue's mark was written from.
pub(crate) const RELAY_REFUSED: &str = "relay refused";

/// The error of a relay refused because `stream` (the stream file of store
/// `source`) is not the file queue `name`'s mark was written from; `found`
/// says what it has instead.
pub(crate) fn relay_refused(
    stream: &str,
    source: &str,
    name: &str,
    queue_path: &Path,
    mark: &RelayMark,
    found: &str,
) -> AlkError {
    let q = queue_path.display();
    let sent = match mark.row {
        Some((created_at, len)) => format!(" (sent at {created_at}, {len} payload bytes)"),
        None => String::new(),
    };
    AlkError::Internal(format!(
        "{RELAY_REFUSED}: {stream} is not the stream file the relay mark of queue {name} was written from: \
         {q} has every message of stream store {source} up to relay id {}{sent}, but {stream} has {found}. \
         The stream file was restored from an older copy, copied or rolled back; its pending sends to {name} \
         are not relayed and nothing is deleted (they stay pending). To resolve: stop every host using the \
         data directory; if {q} is the newer file (the stream file was restored), delete the queue's meta row \
         `relayed:{source}` (DELETE FROM meta WHERE key = 'relayed:{source}') to have every pending send \
         relayed. Sends both in the restored stream file and already in the queue are then delivered twice \
         (at least once, never lost)",
        mark.id
    ))
}

/// What in `rows` (a page of relay rows, by increasing id) shows that they
/// are not from the stream file `mark` was written from, if anything: the
/// row with the mark's id differs from the one the mark recorded, or the
/// page has rows below and above the mark but not the mark's own (in that
/// file, rows at or below the mark still pending end at the mark's row).
fn contradicts(mark: &RelayMark, rows: &[Relayed]) -> Option<String> {
    if mark.id == 0 {
        return None;
    }
    if let Some(r) = rows.iter().find(|r| r.id == mark.id) {
        let len = r.payload.parts().1.len();
        return (!mark.matches(r.created_at, len)).then(|| {
            format!(
                "a different relay row {} (sent at {}, {len} payload bytes)",
                r.id, r.created_at
            )
        });
    }
    let below = rows.iter().any(|r| r.id < mark.id);
    let above = rows.iter().any(|r| r.id > mark.id);
    (below && above).then(|| format!("relay rows below and above {} but not {}", mark.id, mark.id))
}

/// The relay mark `key` (`relayed:<store_id>`) of the queue on `conn` (none:
/// id 0).
async fn relay_mark_on(conn: &Connection, key: &str, path: &Path) -> Result<RelayMark, Failure> {
    let mut found = query(conn, RELAYED, (key,)).await?;
    let mut mark = RelayMark::default();
    while let Some(row) = found.next().await? {
        let value = row.get_value(0)?;
        mark = match &value {
            Value::Integer(n) => Some(RelayMark { id: *n, row: None }),
            Value::Text(t) => RelayMark::parse(t),
            _ => None,
        }
        .ok_or_else(|| {
            Failure::Alk(AlkError::Internal(format!(
                "{}: the meta row {key:?} holds {value:?}, which is not a relay mark; the store is corrupt",
                path.display()
            )))
        })?;
    }
    Ok(mark)
}

/// One message sent by a committed transaction of a stream store (a row of
/// its `relay` table), to be applied to this queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Relayed {
    /// The relay row's id: increasing in commit order, never reused.
    pub id: i64,
    /// The message.
    pub payload: Payload,
    /// Its options, resolved when it was sent.
    pub stamp: Stamp,
    /// When it was sent.
    pub created_at: i64,
    /// Its unique key, if it was sent with one (`localstream.v3`).
    pub unique: Option<Unique>,
}

impl QueueStore {
    /// The relay mark of stream store `source` (none: id 0), read without
    /// the write lock.
    pub(crate) async fn relay_mark(&self, source: &str) -> AlkResult<RelayMark> {
        let key = format!("relayed:{source}");
        let (key, path) = (key.as_str(), self.store.path());
        self.store
            .run(|conn: Connection| Box::pin(async move { relay_mark_on(&conn, key, path).await }))
            .await
    }

    /// Applies the messages of `rows` (relay rows of the stream store
    /// `source`, by increasing id) that this queue has not received yet, in
    /// one transaction that also records the mark of the highest row applied
    /// under the meta key `relayed:<source>`: rows at or below the mark were
    /// applied before and are skipped, so a relay that is repeated (its
    /// rows were not deleted) applies nothing twice. The number of
    /// messages inserted (a unique send whose key is taken inserts nothing,
    /// and counts as applied). Refused on a `localqueue.v1` file, on a
    /// `localqueue.v2` file when `rows` have a unique send, and when
    /// `rows` show they are not from the stream file the mark was written
    /// from (the mark's row differs, or is missing between rows below and
    /// above it): then nothing is written.
    ///
    /// The mark is read first without the write lock: when it already
    /// covers every row (a repeated relay), nothing is written and the
    /// write lock is not taken. The transaction reads it again.
    pub(crate) async fn relay(&self, source: &str, rows: &[Relayed]) -> AlkResult<u64> {
        let Some(last) = rows.iter().map(|r| r.id).max() else {
            return Ok(0);
        };
        if rows.iter().any(|r| r.unique.is_some()) {
            self.require_v3("unique sends").await?;
        } else {
            self.require_v2("transactional or scheduled sends").await?;
        }
        let key = format!("relayed:{source}");
        let (key, path, name) = (key.as_str(), self.store.path(), self.name.as_str());
        let refused = |mark: &RelayMark| {
            contradicts(mark, rows).map(|found| {
                let stream = format!("the stream file of store {source}");
                relay_refused(&stream, source, name, path, mark, &found)
            })
        };
        let mark = self.relay_mark(source).await?;
        if let Some(e) = refused(&mark) {
            return Err(e);
        }
        if last <= mark.id {
            return Ok(0);
        }
        // Synced whatever the queue's durability: the stream file forgets
        // the rows relayed here once this returns, and must never keep that
        // while a power cut takes the messages from this file.
        self.store
            .synced()
            .run_immediate(|conn: Connection| {
                Box::pin(async move {
                    let mark = relay_mark_on(&conn, key, path).await?;
                    if let Some(e) = refused(&mark) {
                        return Err(Failure::Alk(e));
                    }
                    let mut inserted = 0u64;
                    let mut top = None::<&Relayed>;
                    for r in rows.iter().filter(|r| r.id > mark.id) {
                        match &r.unique {
                            None => {
                                send_v2_on(&conn, &r.payload, &r.stamp, r.created_at, true).await?;
                                inserted += 1;
                            }
                            // The key as of the send's time, held as the
                            // queue holds it now.
                            Some(u) => {
                                let sent = send_unique_on(
                                    &conn,
                                    &r.payload,
                                    &r.stamp,
                                    u,
                                    r.created_at,
                                    r.created_at,
                                )
                                .await?;
                                inserted += u64::from(!sent.duplicate);
                            }
                        }
                        top = top.filter(|t| t.id > r.id).or(Some(r));
                    }
                    if let Some(r) = top {
                        exec(&conn, SET_RELAYED, (key, RelayMark::of(r).value())).await?;
                    }
                    Ok(inserted)
                })
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{NewQueues, StoreOptions};
    use crate::stream::tests::{claim_all, quiet, sql_rows, text};
    use crate::stream::{StreamStore, stream_path};
    use crate::tx::tests::commit_sends;
    use crate::{RetryPolicy, TursoEngine};
    use alk_store::queue::{Queue, QueueEngine};
    use alk_store::stream::Streams;
    use alk_store::tx::TxEngine;

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
        let got = q.claim(5000, 1_000_000, None, 1_000).await.unwrap();
        assert_eq!(got.len(), 2 * batch + 501);
        assert_eq!(got.last().unwrap().payload, text("last"));
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
    async fn relay_and_schedule_statements_use_their_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let s = quiet(dir.path()).await;
        for (sql, index) in [
            (RELAY_PAGE, "idx_relay_queue"),
            (RELAY_NEXT_QUEUE, "idx_relay_queue"),
            (RELAY_MARKED, "idx_relay_queue"),
            (RELAY_DONE, "idx_relay_queue"),
        ] {
            let params: Vec<Value> = match sql {
                RELAY_NEXT_QUEUE => vec![Value::Text("q".into())],
                RELAY_PAGE => vec![
                    Value::Text("q".into()),
                    Value::Integer(0),
                    Value::Integer(10),
                ],
                _ => vec![Value::Text("q".into()), Value::Integer(10)],
            };
            let plan = crate::plan_of(&s.store, sql, params).await;
            assert!(plan.contains(index), "{sql}: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{sql}: {plan}");
        }
    }
}
