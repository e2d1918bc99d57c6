//! `localqueue.v1`: the queue store format and its only implementation.
//!
//! The schema and every statement are defined here, once, and pinned by
//! `docs/formats/localqueue.v1.md`; a test checks that the document carries
//! the same DDL and statements.

use std::path::{Path, PathBuf};

use alk_store::queue::{Delivery, Payload, QueueEngine, Settled};
use alk_store::{AlkError, AlkResult};
use async_trait::async_trait;
use turso::{Connection, Value};

use crate::open::{Format, Store, StoreOptions, open_store};
use crate::retry::{Failure, exec, query};

/// The DDL of `localqueue.v1`, run (idempotently) on every open.
pub const DDL: &str = "\
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT OR IGNORE INTO meta (key, value) VALUES ('format', 'localqueue.v1');
CREATE TABLE IF NOT EXISTS messages (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    payload_type   TEXT NOT NULL,              -- \"json\" | \"text\"
    payload_data   TEXT NOT NULL,              -- serialized JSON for \"json\", raw string for \"text\"
    enqueued_at    INTEGER NOT NULL,           -- unix epoch MILLISECONDS
    visible_at     INTEGER NOT NULL,           -- unix epoch MILLISECONDS; due when <= now
    attempt        INTEGER NOT NULL DEFAULT 0, -- delivery count, incremented per receive
    receipt_handle TEXT                        -- UUID of the CURRENT delivery, NULL if never delivered
);
CREATE INDEX IF NOT EXISTS idx_messages_visible ON messages (visible_at, enqueued_at, id);
CREATE INDEX IF NOT EXISTS idx_messages_claim ON messages (enqueued_at, id);
";

/// The `localqueue.v1` format.
pub static FORMAT: Format = Format {
    marker: "localqueue.v1",
    ddl: DDL,
};

/// Appends a message, due at once.
pub const SEND: &str = "INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt) \
VALUES (?1, ?2, ?3, ?3, 0)";
/// Claims up to `?4` due messages for one delivery, oldest first (`id`
/// breaks ties of one millisecond), in one statement. The due messages are
/// found by walking `idx_messages_claim` in claim order, so the cost does not
/// grow with the number of waiting messages. Every message of one claim gets
/// the same fresh UUID `?2`; receipts `{id}:{uuid}` stay unique per delivery.
pub const CLAIM: &str = "UPDATE messages SET visible_at = ?1, attempt = attempt + 1, receipt_handle = ?2 \
WHERE id IN (SELECT id FROM messages INDEXED BY idx_messages_claim \
WHERE visible_at <= ?3 ORDER BY enqueued_at, id LIMIT ?4) \
RETURNING id, payload_type, payload_data, attempt, enqueued_at";
/// Deletes a message by its current receipt.
pub const ACK: &str = "DELETE FROM messages WHERE id = ?1 AND receipt_handle = ?2";
/// Makes a message due now, by its current receipt.
pub const NACK: &str = "UPDATE messages SET visible_at = ?3 WHERE id = ?1 AND receipt_handle = ?2";
/// Whether a message still exists (tells a stale receipt from a gone message).
pub const EXISTS: &str = "SELECT 1 FROM messages WHERE id = ?1";
/// Deletes the messages of every current receipt of a batch in one
/// statement; `?1` is a JSON array of `[id, uuid]` pairs. Returns what it
/// deleted.
pub const ACK_BATCH: &str = "DELETE FROM messages WHERE id IN (SELECT m.id FROM json_each(?1) AS r \
JOIN messages AS m ON m.id = json_extract(r.value, '$[0]') \
AND m.receipt_handle = json_extract(r.value, '$[1]')) RETURNING id, receipt_handle";
/// [`ACK_BATCH`] for receipts of one claim (one UUID, `?1`); `?2` is the
/// JSON array of the ids. Returns the ids deleted.
pub const ACK_CLAIMED: &str = "DELETE FROM messages WHERE receipt_handle = ?1 \
AND id IN (SELECT value FROM json_each(?2)) RETURNING id";
/// Which of the ids in the JSON array `?1` still exist.
pub const EXISTING: &str = "SELECT id FROM messages WHERE id IN (SELECT value FROM json_each(?1))";
/// Deletes every message.
pub const PURGE: &str = "DELETE FROM messages";
/// When the next message becomes due (a waiting receive sleeps until then).
pub const NEXT_VISIBLE: &str = "SELECT visible_at FROM messages ORDER BY visible_at LIMIT 1";

/// Receipts longer than this were never issued (an id and a UUID are < 64
/// bytes); they are not parsed at all.
const MAX_RECEIPT_LEN: usize = 128;

/// A `localqueue.v1` queue: `<data-dir>/queue/<name>/localqueue.sqlite`.
#[derive(Debug, Clone)]
pub struct QueueStore {
    store: Store,
}

/// The file of queue `name` under `data_dir`.
pub fn queue_path(data_dir: &Path, name: &str) -> PathBuf {
    data_dir.join("queue").join(name).join("localqueue.sqlite")
}

/// What a receipt says, if it is one this store could have issued.
fn parse_receipt(receipt: &str) -> Option<(i64, String)> {
    if receipt.len() > MAX_RECEIPT_LEN {
        return None;
    }
    let (id, uuid) = receipt.split_once(':')?;
    let id: i64 = id.parse().ok().filter(|id| *id > 0)?;
    let uuid = uuid::Uuid::parse_str(uuid).ok()?;
    Some((id, uuid.hyphenated().to_string()))
}

/// Runs `sql` (ACK or NACK) for one parsed receipt and tells what it found.
async fn settle_on(
    conn: &Connection,
    sql: &str,
    id: i64,
    uuid: &str,
    now: i64,
) -> Result<Settled, Failure> {
    let changed = if sql == NACK {
        exec(conn, sql, (id, uuid, now)).await?
    } else {
        exec(conn, sql, (id, uuid)).await?
    };
    if changed == 1 {
        return Ok(Settled::Done);
    }
    let mut rows = query(conn, EXISTS, (id,)).await?;
    let mut exists = false;
    while rows.next().await?.is_some() {
        exists = true;
    }
    Ok(if exists {
        Settled::Stale
    } else {
        Settled::Gone
    })
}

/// `[[id, "uuid"], …]` for [`ACK_BATCH`] (ids are numbers, UUIDs hex and
/// dashes: nothing to escape).
fn serde_json_array(pairs: &[(i64, &str)]) -> String {
    let items: Vec<String> = pairs
        .iter()
        .map(|(id, uuid)| format!("[{id},\"{uuid}\"]"))
        .collect();
    format!("[{}]", items.join(","))
}

/// The error for a row that breaks the format (a wrong type where the
/// format says otherwise): `internal`, naming the store and the row.
fn corrupt(path: &Path, id: i64, column: &str, found: &Value) -> AlkError {
    AlkError::Internal(format!(
        "{}: message {id} has {found:?} in {column}, which the format does not allow; the store is corrupt",
        path.display()
    ))
}

impl QueueStore {
    /// Opens (creating on first use) queue `name` under `data_dir`; the
    /// name is checked by the caller.
    pub async fn open(
        data_dir: &Path,
        name: &str,
        options: impl Into<StoreOptions>,
    ) -> AlkResult<Self> {
        let store = open_store(&queue_path(data_dir, name), &FORMAT, options).await?;
        Ok(QueueStore { store })
    }

    /// The queue's file.
    pub fn path(&self) -> &Path {
        self.store.path()
    }

    async fn settle(&self, sql: &'static str, receipt: &str, now: i64) -> AlkResult<Settled> {
        // A receipt that does not parse was never issued here: like a gone
        // message, settling it succeeds and changes nothing.
        let Some((id, uuid)) = parse_receipt(receipt) else {
            return Ok(Settled::Gone);
        };
        let uuid = uuid.as_str();
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(async move { settle_on(&conn, sql, id, uuid, now).await })
            })
            .await
    }
}

#[async_trait]
impl QueueEngine for QueueStore {
    async fn send(&self, payload: &Payload, now: i64) -> AlkResult<i64> {
        let (kind, data) = payload.parts();
        self.store
            .run_write(|conn: Connection| {
                Box::pin(async move {
                    exec(&conn, SEND, (kind, data, now)).await?;
                    Ok(conn.last_insert_rowid())
                })
            })
            .await
    }

    async fn send_batch(&self, payloads: &[Payload], now: i64) -> AlkResult<Vec<i64>> {
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(async move {
                    let mut ids = Vec::with_capacity(payloads.len());
                    for p in payloads {
                        let (kind, data) = p.parts();
                        exec(&conn, SEND, (kind, data, now)).await?;
                        ids.push(conn.last_insert_rowid());
                    }
                    Ok(ids)
                })
            })
            .await
    }

    async fn receive(&self, max: u32, visible_at: i64, now: i64) -> AlkResult<Vec<Delivery>> {
        let max = i64::from(max);
        let path = self.store.path();
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(async move {
                    let uuid = uuid::Uuid::new_v4().hyphenated().to_string();
                    let mut rows =
                        query(&conn, CLAIM, (visible_at, uuid.as_str(), now, max)).await?;
                    let mut claimed = Vec::new();
                    // Drain: a live RETURNING statement makes the next write
                    // on this connection fail with Busy.
                    while let Some(row) = rows.next().await? {
                        let id = row.get::<i64>(0)?;
                        let data = match row.get_value(2)? {
                            Value::Text(t) => t,
                            other => {
                                return Err(Failure::Alk(corrupt(
                                    path,
                                    id,
                                    "payload_data",
                                    &other,
                                )));
                            }
                        };
                        let payload = match row.get_value(1)? {
                            Value::Text(k) if k == "json" => Payload::Json(data),
                            Value::Text(k) if k == "text" => Payload::Text(data),
                            other => {
                                return Err(Failure::Alk(corrupt(
                                    path,
                                    id,
                                    "payload_type",
                                    &other,
                                )));
                            }
                        };
                        let attempt = row.get::<i64>(3)?;
                        let enqueued_at = row.get::<i64>(4)?;
                        claimed.push((
                            enqueued_at,
                            Delivery {
                                id,
                                payload,
                                receipt: format!("{id}:{uuid}"),
                                attempt: u32::try_from(attempt).unwrap_or(u32::MAX),
                            },
                        ));
                    }
                    // The statement returns rows in no particular order.
                    claimed.sort_by_key(|(at, d)| (*at, d.id));
                    Ok(claimed.into_iter().map(|(_, d)| d).collect())
                })
            })
            .await
    }

    async fn ack(&self, receipt: &str) -> AlkResult<Settled> {
        self.settle(ACK, receipt, 0).await
    }

    async fn ack_batch(&self, receipts: &[String]) -> AlkResult<Vec<Settled>> {
        let parsed: Vec<Option<(i64, String)>> =
            receipts.iter().map(|r| parse_receipt(r)).collect();
        let pairs: Vec<(i64, &str)> = parsed
            .iter()
            .flatten()
            .map(|(id, uuid)| (*id, uuid.as_str()))
            .collect();
        if pairs.is_empty() {
            return Ok(vec![Settled::Gone; receipts.len()]);
        }
        if let [(id, uuid)] = pairs.as_slice()
            && receipts.len() == 1
        {
            // One receipt: the single-ack statements (usually one).
            let (id, uuid) = (*id, *uuid);
            let outcome = self
                .store
                .run_immediate(|conn: Connection| {
                    Box::pin(async move { settle_on(&conn, ACK, id, uuid, 0).await })
                })
                .await?;
            return Ok(vec![outcome]);
        }
        let ids_json = format!(
            "[{}]",
            pairs
                .iter()
                .map(|(id, _)| id.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        // Receipts of one claim share its UUID: the simpler statement. Any
        // mix: the general one, pairs of id and UUID.
        let shared = pairs
            .iter()
            .all(|(_, u)| *u == pairs[0].1)
            .then_some(pairs[0].1);
        let pairs_json = match shared {
            Some(_) => String::new(),
            None => serde_json_array(&pairs),
        };
        let unique: std::collections::HashSet<i64> = pairs.iter().map(|(id, _)| *id).collect();
        let (pairs_json, ids_json) = (&pairs_json, &ids_json);
        let (deleted, existing) = self
            .store
            .run_immediate(|conn: Connection| {
                let unique = &unique;
                Box::pin(async move {
                    let mut deleted: Vec<(i64, String)> = Vec::new();
                    let mut rows = match shared {
                        Some(uuid) => query(&conn, ACK_CLAIMED, (uuid, ids_json.as_str())).await?,
                        None => query(&conn, ACK_BATCH, (pairs_json.as_str(),)).await?,
                    };
                    while let Some(row) = rows.next().await? {
                        let uuid = match shared {
                            Some(u) => u.to_string(),
                            None => row.get::<String>(1)?,
                        };
                        deleted.push((row.get::<i64>(0)?, uuid));
                    }
                    drop(rows);
                    // Every message acked: none can be stale, no need to look.
                    let mut existing = std::collections::HashSet::new();
                    if deleted.len() < unique.len() {
                        let mut rows = query(&conn, EXISTING, (ids_json.as_str(),)).await?;
                        while let Some(row) = rows.next().await? {
                            existing.insert(row.get::<i64>(0)?);
                        }
                    }
                    Ok((deleted, existing))
                })
            })
            .await?;
        // The receipts of a batch apply together: the current one acks its
        // message (its first occurrence, if repeated); any other receipt of a
        // message still there is stale; the rest find their message gone.
        let deleted: std::collections::HashMap<i64, String> = deleted.into_iter().collect();
        let mut acked = std::collections::HashSet::new();
        Ok(parsed
            .iter()
            .map(|receipt| match receipt {
                None => Settled::Gone,
                Some((id, uuid)) if deleted.get(id) == Some(uuid) && acked.insert(*id) => {
                    Settled::Done
                }
                Some((id, _)) if existing.contains(id) => Settled::Stale,
                Some(_) => Settled::Gone,
            })
            .collect())
    }

    async fn nack(&self, receipt: &str, now: i64) -> AlkResult<Settled> {
        self.settle(NACK, receipt, now).await
    }

    async fn next_visible(&self) -> AlkResult<Option<i64>> {
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, NEXT_VISIBLE, ()).await?;
                    let mut at = None;
                    while let Some(row) = rows.next().await? {
                        at = Some(row.get::<i64>(0)?);
                    }
                    Ok(at)
                })
            })
            .await
    }

    async fn purge(&self) -> AlkResult<()> {
        self.store
            .run_write(|conn: Connection| {
                Box::pin(async move {
                    exec(&conn, PURGE, ()).await?;
                    Ok(())
                })
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RetryPolicy;

    const DOC: &str = include_str!("../../../docs/formats/localqueue.v1.md");

    #[tokio::test]
    async fn a_row_that_breaks_the_format_is_an_internal_error_naming_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let q = QueueStore::open(dir.path(), "q", RetryPolicy::default())
            .await
            .unwrap();
        q.send(&text("m"), 0).await.unwrap();
        for (column, value) in [
            ("payload_type", "'xml'"),
            ("enqueued_at", "'soon'"),
            ("payload_data", "x'00'"),
        ] {
            crate::write_sql(&q.store, &format!("UPDATE messages SET {column} = {value}")).await;
            match q.receive(1, 1_000, 0).await {
                Err(AlkError::Internal(m)) => {
                    assert!(m.contains("localqueue.sqlite"), "{column}: {m}")
                }
                other => panic!("{column}: expected internal, got {other:?}"),
            }
            crate::write_sql(
                &q.store,
                "UPDATE messages SET payload_type = 'text', enqueued_at = 0, payload_data = 'm'",
            )
            .await;
        }
        // Nothing was claimed: the message is still due.
        assert_eq!(q.next_visible().await.unwrap(), Some(0));
    }

    fn text(s: &str) -> Payload {
        Payload::Text(s.into())
    }

    #[test]
    fn the_format_document_pins_the_ddl_and_every_statement() {
        crate::assert_document_pins(
            "localqueue.v1.md",
            DOC,
            &[
                ("DDL", DDL),
                ("SEND", SEND),
                ("CLAIM", CLAIM),
                ("ACK", ACK),
                ("NACK", NACK),
                ("EXISTS", EXISTS),
                ("ACK_BATCH", ACK_BATCH),
                ("ACK_CLAIMED", ACK_CLAIMED),
                ("EXISTING", EXISTING),
                ("PURGE", PURGE),
                ("NEXT_VISIBLE", NEXT_VISIBLE),
            ],
        );
    }

    #[test]
    fn receipts_parse_only_when_this_store_could_have_issued_them() {
        let uuid = "67e55044-10b1-426f-9247-bb680e5fe0c8";
        assert_eq!(
            parse_receipt(&format!("12:{uuid}")),
            Some((12, uuid.to_string()))
        );
        for bad in [
            "",
            "12",
            ":",
            "12:",
            &format!(":{uuid}"),
            &format!("0:{uuid}"),
            &format!("-1:{uuid}"),
            "12:not-a-uuid",
            &format!("x:{uuid}"),
            &format!("12:{uuid}{}", "0".repeat(200)),
        ] {
            assert_eq!(parse_receipt(bad), None, "{bad:?}");
        }
    }

    async fn queue(dir: &Path) -> QueueStore {
        QueueStore::open(dir, "q", RetryPolicy::default())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn the_claim_walks_the_claim_index_and_sorts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path()).await;
        let plan: Vec<String> = q
            .store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = conn
                        .query(&format!("EXPLAIN QUERY PLAN {CLAIM}"), (1, "u", 1, 1))
                        .await?;
                    let mut plan = Vec::new();
                    while let Some(row) = rows.next().await? {
                        plan.push(row.get::<String>(3)?);
                    }
                    Ok(plan)
                })
            })
            .await
            .unwrap();
        let plan = plan.join(" | ");
        assert!(plan.contains("USING INDEX idx_messages_claim"), "{plan}");
        assert!(
            !plan.contains("SORTER") && !plan.contains("TEMP B-TREE"),
            "{plan}"
        );
    }

    #[tokio::test]
    async fn the_messages_of_one_claim_share_its_uuid_and_every_claim_mints_one() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path()).await;
        q.send_batch(&[text("a"), text("b"), text("c")], 0)
            .await
            .unwrap();
        let uuid = |d: &Delivery| d.receipt.split_once(':').unwrap().1.to_string();
        let first = q.receive(1, 1_000, 0).await.unwrap();
        let rest = q.receive(10, 1_000, 0).await.unwrap();
        assert_eq!(rest.len(), 2);
        assert!(rest.iter().all(|d| uuid(d) == uuid(&rest[0])));
        assert_ne!(uuid(&first[0]), uuid(&rest[0]));
        assert!(uuid::Uuid::parse_str(&uuid(&first[0])).is_ok());
        // One ack-batch statement for one claim's receipts: all acked.
        let receipts: Vec<String> = rest.iter().map(|d| d.receipt.clone()).collect();
        assert_eq!(
            q.ack_batch(&receipts).await.unwrap(),
            [Settled::Done, Settled::Done]
        );
    }

    #[tokio::test]
    async fn a_v1_file_made_without_the_claim_index_gets_it_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = queue_path(dir.path(), "q");
        // The other program's DDL: the v1 schema without alk's index.
        static OTHER: Format = Format {
            marker: "localqueue.v1",
            ddl: "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);\n\
                  INSERT OR IGNORE INTO meta (key, value) VALUES ('format', 'localqueue.v1');\n\
                  CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY AUTOINCREMENT, payload_type TEXT NOT NULL, payload_data TEXT NOT NULL, enqueued_at INTEGER NOT NULL, visible_at INTEGER NOT NULL, attempt INTEGER NOT NULL DEFAULT 0, receipt_handle TEXT);\n\
                  CREATE INDEX IF NOT EXISTS idx_messages_visible ON messages (visible_at, enqueued_at, id);",
        };
        {
            let other = open_store(&path, &OTHER, RetryPolicy::default())
                .await
                .unwrap();
            other
                .run_write(|conn: Connection| {
                    Box::pin(async move {
                        exec(&conn, SEND, ("text", "from the other program", 5)).await?;
                        Ok(())
                    })
                })
                .await
                .unwrap();
            // As if that program were another process: close its database.
            other.close_for_test();
        }
        let q = queue(dir.path()).await;
        let got = q.receive(1, 1_000, 10).await.unwrap();
        assert_eq!(got[0].payload, text("from the other program"));
    }

    #[tokio::test]
    async fn a_write_lock_held_past_the_deadline_is_busy_and_writes_nothing() {
        use std::time::{Duration, Instant};
        let dir = tempfile::tempdir().unwrap();
        let policy = RetryPolicy {
            deadline: Duration::from_millis(300),
            ..RetryPolicy::default()
        };
        let q = QueueStore::open(dir.path(), "q", policy).await.unwrap();
        // Another writer, outside alk's gate, holds the write lock.
        let handle = q.store.handle().await.unwrap();
        let holder = q.store.check_out(&handle).await.unwrap();
        holder.execute("BEGIN IMMEDIATE", ()).await.unwrap();
        let cpu_before = cpu_time();
        let started = Instant::now();
        let result = q.send(&text("x"), 0).await;
        let waited = started.elapsed();
        let cpu = cpu_time() - cpu_before;
        assert!(matches!(result, Err(AlkError::Busy(_))), "{result:?}");
        assert!(waited >= policy.deadline, "gave up after {waited:?}");
        // The wait sleeps between short engine waits: it must not burn a
        // core for the whole deadline (a spinning wait costs ~100% of it).
        eprintln!("waited {waited:?} using {cpu:?} of CPU");
        holder.execute("ROLLBACK", ()).await.unwrap();
        q.store.check_in(&handle, holder);
        // Nothing was written by the refused send; the next one goes through.
        assert!(q.receive(10, 30_001, 1).await.unwrap().is_empty());
        q.send(&text("y"), 0).await.unwrap();
        assert_eq!(q.receive(10, 30_001, 1).await.unwrap().len(), 1);
    }

    fn cpu_time() -> std::time::Duration {
        // utime + stime of this process, from /proc (Linux).
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, r)| r)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        let ticks: u64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0)
            + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0);
        std::time::Duration::from_millis(ticks * 10)
    }
}
