//! `localqueue.v1`: the queue store format and its only implementation.
//!
//! The schema and every statement are defined here, once, and pinned by
//! `docs/formats/localqueue.v1.md`; a test checks that the document carries
//! the same DDL and statements.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;
use turso::{Connection, Value};

use super::names::check_name;
use super::open::{Format, Store, open_store};
use super::retry::{Failure, exec, query};
use super::wake::{Check, Wakes};
use crate::error::{AlkError, AlkResult};

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
pub const EXISTING: &str =
    "SELECT id FROM messages WHERE id IN (SELECT value FROM json_each(?1))";
/// Deletes every message.
pub const PURGE: &str = "DELETE FROM messages";
/// When the next message becomes due (a waiting receive sleeps until then).
pub const NEXT_VISIBLE: &str = "SELECT visible_at FROM messages ORDER BY visible_at LIMIT 1";

/// The largest payload, in bytes of its stored text.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;
/// The visibility timeout of a receive that names none.
pub const DEFAULT_VISIBILITY_MS: u64 = 30_000;
/// The most messages one receive claims; larger requests are clamped so a
/// guest cannot make one transaction hold the write lock unboundedly.
pub const MAX_RECEIVE: u32 = 1000;
/// Receipts longer than this were never issued (an id and a UUID are < 64
/// bytes); they are not parsed at all.
const MAX_RECEIPT_LEN: usize = 128;

/// A message body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// JSON text (validated on send).
    Json(String),
    /// Plain text.
    Text(String),
}

/// One delivery of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The message id.
    pub id: i64,
    /// The body.
    pub payload: Payload,
    /// `"{id}:{uuid}"` of this delivery.
    pub receipt: String,
    /// Deliveries so far, this one included.
    pub attempt: u32,
}

/// A `localqueue.v1` queue: `<data-dir>/queue/<name>/localqueue.sqlite`.
#[derive(Debug, Clone)]
pub struct QueueStore {
    store: Store,
    wakes: Wakes,
    topic: String,
}

/// The file of queue `name` under `data_dir`.
pub fn queue_path(data_dir: &Path, name: &str) -> PathBuf {
    data_dir.join("queue").join(name).join("localqueue.sqlite")
}

/// The instant `ms` milliseconds from now (at least now).
pub(crate) fn instant_in(ms: i64) -> Instant {
    Instant::now() + Duration::from_millis(ms.max(0) as u64)
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

/// How an ack or nack found the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Acknowledged (or given back) now.
    Done,
    /// Already gone, or never issued.
    Gone,
    /// Stale: the message was delivered again since.
    Stale,
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

/// Checks and stores the text of a payload.
fn payload_parts(payload: &Payload) -> AlkResult<(&'static str, &str)> {
    let (kind, data) = match payload {
        Payload::Json(text) => ("json", text.as_str()),
        Payload::Text(text) => ("text", text.as_str()),
    };
    if data.len() > MAX_PAYLOAD_BYTES {
        return Err(AlkError::PayloadTooLarge {
            what: "payload",
            size: data.len() as u64,
            limit: MAX_PAYLOAD_BYTES as u64,
        });
    }
    if kind == "json"
        && let Err(e) = super::json::check(data)
    {
        return Err(AlkError::InvalidArgument(format!(
            "payload is not valid JSON: {e}"
        )));
    }
    Ok((kind, data))
}

impl QueueStore {
    /// Opens (creating on first use) queue `name` under `data_dir`.
    pub async fn open(
        data_dir: &Path,
        name: &str,
        policy: impl Into<super::StoreOptions>,
    ) -> AlkResult<Self> {
        check_name("queue", name)?;
        let store = open_store(&queue_path(data_dir, name), &FORMAT, policy).await?;
        Ok(QueueStore {
            store,
            wakes: Wakes::for_data_dir(data_dir),
            topic: format!("queue.{name}"),
        })
    }

    /// The queue's file.
    pub fn path(&self) -> &Path {
        self.store.path()
    }

    /// Appends a message at time `now`; returns its id.
    pub async fn send(&self, payload: &Payload, now: i64) -> AlkResult<i64> {
        let (kind, data) = payload_parts(payload)?;
        let id = self
            .store
            .run_write(|conn: Connection| {
                Box::pin(async move {
                    exec(&conn, SEND, (kind, data, now)).await?;
                    Ok(conn.last_insert_rowid())
                })
            })
            .await?;
        self.wakes.signal(&self.topic);
        Ok(id)
    }

    /// Appends every payload at time `now` in one transaction; their ids.
    pub async fn send_batch(&self, payloads: &[Payload], now: i64) -> AlkResult<Vec<i64>> {
        super::check_batch("payloads", payloads.len())?;
        let parts = payloads
            .iter()
            .map(payload_parts)
            .collect::<AlkResult<Vec<_>>>()?;
        let parts = &parts;
        let ids = self
            .store
            .run_immediate(|conn: Connection| {
                Box::pin(async move {
                    let mut ids = Vec::with_capacity(parts.len());
                    for (kind, data) in parts {
                        exec(&conn, SEND, (*kind, *data, now)).await?;
                        ids.push(conn.last_insert_rowid());
                    }
                    Ok(ids)
                })
            })
            .await?;
        if !ids.is_empty() {
            self.wakes.signal(&self.topic);
        }
        Ok(ids)
    }

    /// Acknowledges every receipt in one transaction (two statements,
    /// whatever the count); what each found.
    pub async fn ack_batch(&self, receipts: &[String]) -> AlkResult<Vec<Settled>> {
        super::check_batch("receipts", receipts.len())?;
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
        let shared = pairs.iter().all(|(_, u)| *u == pairs[0].1).then_some(pairs[0].1);
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
                Some((id, uuid))
                    if deleted.get(id) == Some(uuid) && acked.insert(*id) =>
                {
                    Settled::Done
                }
                Some((id, _)) if existing.contains(id) => Settled::Stale,
                Some(_) => Settled::Gone,
            })
            .collect())
    }

    /// When the next message is due, if there is any message.
    pub async fn next_visible(&self) -> AlkResult<Option<i64>> {
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

    /// Waits until some message is due (by `clock`), or `deadline`. True
    /// when one is. A hint: another receiver may take it first.
    pub async fn wait_due(
        &self,
        clock: &(dyn Fn() -> i64 + Send + Sync),
        deadline: Option<Instant>,
    ) -> AlkResult<bool> {
        let found = self
            .wakes
            .wait_for(&self.topic, deadline, || {
                Box::pin(async move {
                    let now = clock();
                    Ok(match self.next_visible().await? {
                        Some(at) if at <= now => Check::Ready(()),
                        Some(at) => Check::NotYet(Some(instant_in(at - now))),
                        None => Check::NotYet(None),
                    })
                })
            })
            .await?;
        Ok(found.is_some())
    }

    /// Like [`QueueStore::receive`], but waits (without holding anything
    /// open) until at least one message can be claimed or `deadline`
    /// passes; an empty list means the deadline passed.
    pub async fn receive_wait(
        &self,
        max: u32,
        visibility_ms: Option<u64>,
        clock: &(dyn Fn() -> i64 + Send + Sync),
        deadline: Instant,
    ) -> AlkResult<Vec<Delivery>> {
        let got = self
            .wakes
            .wait_for(&self.topic, Some(deadline), || {
                Box::pin(async move {
                    let now = clock();
                    match self.next_visible().await? {
                        Some(at) if at <= now => {}
                        Some(at) => return Ok(Check::NotYet(Some(instant_in(at - now)))),
                        None => return Ok(Check::NotYet(None)),
                    }
                    let got = self.receive(max, visibility_ms, now).await?;
                    // Empty: another receiver was faster; wait again.
                    Ok(if got.is_empty() {
                        Check::NotYet(None)
                    } else {
                        Check::Ready(got)
                    })
                })
            })
            .await?;
        Ok(got.unwrap_or_default())
    }

    /// Claims up to `max` due messages at `now` for `visibility_ms`.
    pub async fn receive(
        &self,
        max: u32,
        visibility_ms: Option<u64>,
        now: i64,
    ) -> AlkResult<Vec<Delivery>> {
        let visibility = visibility_ms.unwrap_or(DEFAULT_VISIBILITY_MS);
        if visibility == 0 {
            return Err(AlkError::InvalidArgument(
                "visibility-ms is 0; it must be at least 1".into(),
            ));
        }
        let visible_at = i64::try_from(visibility)
            .ok()
            .and_then(|v| now.checked_add(v))
            .ok_or_else(|| {
                AlkError::InvalidArgument(format!("visibility-ms {visibility} overflows the clock"))
            })?;
        let max = i64::from(max.clamp(1, MAX_RECEIVE));
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
                                return Err(Failure::Alk(corrupt(self.path(), id, "payload_data", &other)));
                            }
                        };
                        let payload = match row.get_value(1)? {
                            Value::Text(k) if k == "json" => Payload::Json(data),
                            Value::Text(k) if k == "text" => Payload::Text(data),
                            other => {
                                return Err(Failure::Alk(corrupt(self.path(), id, "payload_type", &other)));
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

    async fn settle(&self, sql: &'static str, receipt: &str, now: i64) -> AlkResult<()> {
        // A receipt that does not parse was never issued here: like a gone
        // message, acknowledging it succeeds and changes nothing.
        let Some((id, uuid)) = parse_receipt(receipt) else {
            return Ok(());
        };
        let uuid = uuid.as_str();
        let outcome = self
            .store
            .run_immediate(|conn: Connection| {
                Box::pin(async move { settle_on(&conn, sql, id, uuid, now).await })
            })
            .await?;
        match outcome {
            Settled::Done | Settled::Gone => Ok(()),
            Settled::Stale => Err(AlkError::StaleReceipt(format!(
                "receipt {receipt} is stale: message {id} was delivered again since"
            ))),
        }
    }

    /// Deletes the message of a current receipt.
    pub async fn ack(&self, receipt: &str) -> AlkResult<()> {
        self.settle(ACK, receipt, 0).await
    }

    /// Makes the message of a current receipt due at `now`.
    pub async fn nack(&self, receipt: &str, now: i64) -> AlkResult<()> {
        self.settle(NACK, receipt, now).await?;
        self.wakes.signal(&self.topic);
        Ok(())
    }

    /// Deletes every message.
    pub async fn purge(&self) -> AlkResult<()> {
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
    use crate::store::RetryPolicy;

    const DOC: &str = include_str!("../../../docs/formats/localqueue.v1.md");

    #[test]
    fn the_format_document_pins_the_ddl_and_every_statement() {
        crate::store::assert_document_pins(
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
    async fn visibility_and_redelivery_follow_the_given_clock() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path()).await;
        q.send(&Payload::Text("a".into()), 1_000).await.unwrap();
        let first = q.receive(10, Some(500), 1_000).await.unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].attempt, 1);
        assert!(q.receive(10, Some(500), 1_499).await.unwrap().is_empty());
        let second = q.receive(10, Some(500), 1_500).await.unwrap();
        assert_eq!(second[0].attempt, 2);
        assert_ne!(second[0].receipt, first[0].receipt);
        assert!(matches!(
            q.ack(&first[0].receipt).await,
            Err(AlkError::StaleReceipt(_))
        ));
        q.nack(&second[0].receipt, 1_600).await.unwrap();
        let third = q.receive(10, None, 1_600).await.unwrap();
        assert_eq!(third[0].attempt, 3);
        q.ack(&third[0].receipt).await.unwrap();
        q.ack(&third[0].receipt).await.unwrap();
        assert!(q.receive(10, None, i64::MAX / 2).await.unwrap().is_empty());
    }
}

#[cfg(test)]
mod claim_tests {
    use super::*;
    use crate::store::RetryPolicy;

    #[tokio::test]
    async fn the_claim_walks_the_claim_index_and_sorts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let q = QueueStore::open(dir.path(), "q", RetryPolicy::default())
            .await
            .unwrap();
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
    async fn a_batch_claim_is_in_send_order_skips_in_flight_and_shares_one_uuid() {
        let dir = tempfile::tempdir().unwrap();
        let q = QueueStore::open(dir.path(), "q", RetryPolicy::default())
            .await
            .unwrap();
        // Sent out of time order: the claim order is enqueued_at, then id.
        for (text, at) in [("c", 30), ("a", 10), ("b", 10), ("d", 40)] {
            q.send(&Payload::Text(text.into()), at).await.unwrap();
        }
        let first = q.receive(1, Some(1_000), 100).await.unwrap();
        assert_eq!(first[0].payload, Payload::Text("a".into()));
        let rest = q.receive(10, Some(1_000), 100).await.unwrap();
        let texts: Vec<_> = rest.iter().map(|d| d.payload.clone()).collect();
        assert_eq!(
            texts,
            ["b", "c", "d"].map(|t| Payload::Text(t.into())).to_vec()
        );
        let uuid = |d: &Delivery| d.receipt.split_once(':').unwrap().1.to_string();
        assert!(rest.iter().all(|d| uuid(d) == uuid(&rest[0])));
        assert_ne!(uuid(&first[0]), uuid(&rest[0]));
        // Redelivered after its visibility: a new UUID, the same place.
        let again = q.receive(10, Some(1_000), 1_100).await.unwrap();
        assert_eq!(again[0].payload, Payload::Text("a".into()));
        assert_eq!(again[0].attempt, 2);
        assert_ne!(uuid(&again[0]), uuid(&first[0]));
    }

    #[tokio::test]
    async fn ack_batch_reports_each_receipt_and_applies_them_together() {
        let dir = tempfile::tempdir().unwrap();
        let q = QueueStore::open(dir.path(), "q", RetryPolicy::default())
            .await
            .unwrap();
        for i in 0..4 {
            q.send(&Payload::Text(format!("m{i}")), 0).await.unwrap();
        }
        let old = q.receive(4, Some(10), 0).await.unwrap();
        let new = q.receive(2, Some(1_000), 10).await.unwrap();
        // m0 and m1 were delivered again (their old receipts are stale); m2
        // and m3 are still on their first delivery.
        let outcomes = q
            .ack_batch(&[
                old[0].receipt.clone(), // m0, delivered again: stale
                old[2].receipt.clone(), // m2: acked
                new[1].receipt.clone(), // m1: acked
                "garbage".into(),       // never a receipt: gone
                "999:00000000-0000-4000-8000-000000000000".into(), // no such message: gone
                new[1].receipt.clone(), // repeated: gone
                old[1].receipt.clone(), // stale copy of m1, acked in this batch: gone
            ])
            .await
            .unwrap();
        assert_eq!(
            outcomes,
            [
                Settled::Stale,
                Settled::Done,
                Settled::Done,
                Settled::Gone,
                Settled::Gone,
                Settled::Gone,
                Settled::Gone
            ]
        );
        // m0 is in flight under its new receipt; m3 is claimable once its
        // first visibility ended.
        assert!(q.ack(&new[0].receipt).await.is_ok());
        // Only m3 is left, claimable once its old visibility ends.
        let left = q.receive(10, None, 20).await.unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].payload, Payload::Text("m3".into()));
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
        let q = QueueStore::open(dir.path(), "q", RetryPolicy::default())
            .await
            .unwrap();
        let got = q.receive(1, None, 10).await.unwrap();
        assert_eq!(got[0].payload, Payload::Text("from the other program".into()));
    }
}

#[cfg(test)]
mod contention_tests {
    use std::time::{Duration, Instant};

    use crate::store::RetryPolicy;

    use super::*;

    #[tokio::test]
    async fn a_write_lock_held_past_the_deadline_is_busy_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let policy = RetryPolicy {
            deadline: Duration::from_millis(300),
            ..RetryPolicy::default()
        };
        let q = QueueStore::open(dir.path(), "q", policy).await.unwrap();
        // Another writer holds the write lock.
        let handle = q.store.handle().await.unwrap();
        let holder = q.store.check_out(&handle).await.unwrap();
        holder.execute("BEGIN IMMEDIATE", ()).await.unwrap();
        let cpu_before = cpu_time();
        let started = Instant::now();
        let result = q.send(&Payload::Text("x".into()), 0).await;
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
        assert!(q.receive(10, None, 1).await.unwrap().is_empty());
        q.send(&Payload::Text("y".into()), 0).await.unwrap();
        assert_eq!(q.receive(10, None, 1).await.unwrap().len(), 1);
    }

    fn cpu_time() -> Duration {
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
        Duration::from_millis(ticks * 10)
    }
}
