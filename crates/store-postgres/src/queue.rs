//! Queues: rows of `messages`, ids from the queue's row in `queues`,
//! claims with `FOR UPDATE SKIP LOCKED`.
//!
//! Receipts are `{id}:{uuid}` (the UUID of the claim), as on the file
//! engine; a receipt that does not parse was never issued and settles
//! nothing.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use alk_store::queue::{Delivery, Payload, QueueEngine, Settled};
use alk_store::{AlkError, AlkResult};
use async_trait::async_trait;
use uuid::Uuid;

use crate::{Fail, Inner, sql};

/// Receipts longer than this were never issued.
const MAX_RECEIPT_LEN: usize = 128;

fn parse_receipt(receipt: &str) -> Option<(i64, Uuid)> {
    if receipt.len() > MAX_RECEIPT_LEN {
        return None;
    }
    let (id, uuid) = receipt.split_once(':')?;
    let id: i64 = id.parse().ok().filter(|id| *id > 0)?;
    // Read like the file engine reads it: any spelling of the UUID.
    let uuid = Uuid::parse_str(uuid).ok()?;
    Some((id, uuid))
}

/// One queue.
pub(crate) struct PgQueue {
    inner: Arc<Inner>,
    name: String,
    send: String,
    claim: String,
    ack: String,
    nack: String,
    exists: String,
    ack_batch: String,
    existing: String,
    next_visible: String,
    purge: String,
}

impl PgQueue {
    pub(crate) fn new(inner: Arc<Inner>, name: &str) -> PgQueue {
        let s = &inner.sql;
        PgQueue {
            send: s.get(sql::Q_SEND),
            claim: s.get(sql::Q_CLAIM),
            ack: s.get(sql::Q_ACK),
            nack: s.get(sql::Q_NACK),
            exists: s.get(sql::Q_EXISTS),
            ack_batch: s.get(sql::Q_ACK_BATCH),
            existing: s.get(sql::Q_EXISTING),
            next_visible: s.get(sql::Q_NEXT_VISIBLE),
            purge: s.get(sql::Q_PURGE),
            name: name.to_string(),
            inner,
        }
    }

    /// Acks (`nack_at` = None) or nacks one receipt; what it found.
    async fn settle(&self, receipt: &str, nack_at: Option<i64>) -> AlkResult<Settled> {
        let Some((id, uuid)) = parse_receipt(receipt) else {
            return Ok(Settled::Gone);
        };
        let (queue, ack, nack, exists) = (&self.name, &self.ack, &self.nack, &self.exists);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let changed = match nack_at {
                        None => {
                            let stmt = c.prepare_cached(ack).await?;
                            c.execute(&stmt, &[queue, &id, &uuid]).await?
                        }
                        Some(at) => {
                            let stmt = c.prepare_cached(nack).await?;
                            c.execute(&stmt, &[queue, &id, &uuid, &at]).await?
                        }
                    };
                    if changed == 1 {
                        return Ok(Settled::Done);
                    }
                    let stmt = c.prepare_cached(exists).await?;
                    Ok(if c.query_opt(&stmt, &[queue, &id]).await?.is_some() {
                        Settled::Stale
                    } else {
                        Settled::Gone
                    })
                })
            })
            .await
    }
}

fn payload_of(queue: &str, id: i64, kind: &str, data: Vec<u8>) -> Result<Payload, Fail> {
    let corrupt = |what: &str| {
        Fail::Alk(AlkError::Internal(format!(
            "queue {queue:?}: message {id} has {what}, which the schema does not allow"
        )))
    };
    let text = String::from_utf8(data).map_err(|_| corrupt("a body that is not UTF-8"))?;
    match kind {
        "json" => Ok(Payload::Json(text)),
        "text" => Ok(Payload::Text(text)),
        other => Err(corrupt(&format!("payload type {other:?}"))),
    }
}

#[async_trait]
impl QueueEngine for PgQueue {
    async fn send(&self, payload: &Payload, now: i64) -> AlkResult<i64> {
        self.send_batch(std::slice::from_ref(payload), now)
            .await?
            .first()
            .copied()
            .ok_or_else(|| {
                AlkError::Internal(format!("queue {:?}: a send returned no id", self.name))
            })
    }

    async fn send_batch(&self, payloads: &[Payload], now: i64) -> AlkResult<Vec<i64>> {
        let now = self.inner.clock.to_db(now);
        let count = payloads.len() as i64;
        let kinds: Vec<&str> = payloads.iter().map(|p| p.parts().0).collect();
        let bodies: Vec<&[u8]> = payloads.iter().map(|p| p.parts().1.as_bytes()).collect();
        let (queue, send, kinds, bodies) = (&self.name, &self.send, &kinds, &bodies);
        let mut ids = self
            .inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(send).await?;
                    let rows = c
                        .query(&stmt, &[queue, &count, kinds, bodies, &now])
                        .await?;
                    rows.iter()
                        .map(|r| r.try_get::<_, i64>(0).map_err(Fail::from))
                        .collect::<Result<Vec<i64>, Fail>>()
                })
            })
            .await?;
        ids.sort_unstable();
        Ok(ids)
    }

    async fn receive(&self, max: u32, visible_until: i64, now: i64) -> AlkResult<Vec<Delivery>> {
        let now = self.inner.clock.to_db(now);
        let visible_until = self.inner.clock.to_db(visible_until);
        let max = i64::from(max);
        let (queue, claim) = (&self.name, &self.claim);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let uuid = Uuid::new_v4();
                    let stmt = c.prepare_cached(claim).await?;
                    let rows = c
                        .query(&stmt, &[queue, &now, &max, &visible_until, &uuid])
                        .await?;
                    let mut claimed = Vec::with_capacity(rows.len());
                    for row in rows {
                        let id: i64 = row.try_get(0)?;
                        let kind: &str = row.try_get(1)?;
                        let payload = payload_of(queue, id, kind, row.try_get(2)?)?;
                        let attempt: i32 = row.try_get(3)?;
                        let enqueued_at: i64 = row.try_get(4)?;
                        claimed.push((
                            enqueued_at,
                            Delivery {
                                id,
                                payload,
                                receipt: format!("{id}:{}", uuid.hyphenated()),
                                attempt: u32::try_from(attempt).unwrap_or(0),
                            },
                        ));
                    }
                    claimed.sort_by_key(|(at, d)| (*at, d.id));
                    Ok(claimed.into_iter().map(|(_, d)| d).collect())
                })
            })
            .await
    }

    async fn ack(&self, receipt: &str) -> AlkResult<Settled> {
        self.settle(receipt, None).await
    }

    async fn ack_batch(&self, receipts: &[String]) -> AlkResult<Vec<Settled>> {
        let parsed: Vec<Option<(i64, Uuid)>> = receipts.iter().map(|r| parse_receipt(r)).collect();
        // In id order: batches over the same messages lock them in the same
        // order, so they never deadlock.
        let mut pairs: Vec<(i64, Uuid)> = parsed.iter().flatten().copied().collect();
        pairs.sort_unstable();
        let ids: Vec<i64> = pairs.iter().map(|(id, _)| *id).collect();
        let uuids: Vec<Uuid> = pairs.iter().map(|(_, u)| *u).collect();
        if ids.is_empty() {
            return Ok(vec![Settled::Gone; receipts.len()]);
        }
        let unique: HashSet<i64> = ids.iter().copied().collect();
        let (queue, ack_batch, existing) = (&self.name, &self.ack_batch, &self.existing);
        let (ids, uuids, unique) = (&ids, &uuids, &unique);
        // One statement deletes every current receipt's message; only when
        // some receipt found nothing does a second one tell stale from gone
        // (like a single ack, as of that moment).
        let (deleted, present) = self
            .inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(ack_batch).await?;
                    let mut deleted: HashMap<i64, Uuid> = HashMap::new();
                    for row in c.query(&stmt, &[queue, ids, uuids]).await? {
                        deleted.insert(row.try_get(0)?, row.try_get(1)?);
                    }
                    let mut present = HashSet::new();
                    if deleted.len() < unique.len() {
                        let stmt = c.prepare_cached(existing).await?;
                        for row in c.query(&stmt, &[queue, ids]).await? {
                            present.insert(row.try_get::<_, i64>(0)?);
                        }
                    }
                    Ok((deleted, present))
                })
            })
            .await?;
        // As on every engine: the current receipt acks its message (its
        // first copy in the batch); another receipt of a message still
        // there is stale; the rest find their message gone.
        let mut acked = HashSet::new();
        Ok(parsed
            .iter()
            .map(|r| match r {
                None => Settled::Gone,
                Some((id, uuid)) if deleted.get(id) == Some(uuid) && acked.insert(*id) => {
                    Settled::Done
                }
                Some((id, _)) if present.contains(id) => Settled::Stale,
                Some(_) => Settled::Gone,
            })
            .collect())
    }

    async fn nack(&self, receipt: &str, now: i64) -> AlkResult<Settled> {
        let now = self.inner.clock.to_db(now);
        self.settle(receipt, Some(now)).await
    }

    async fn next_visible(&self) -> AlkResult<Option<i64>> {
        let (queue, next) = (&self.name, &self.next_visible);
        let at = self
            .inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(next).await?;
                    let row = c.query_one(&stmt, &[queue]).await?;
                    Ok(row.try_get::<_, Option<i64>>(0)?)
                })
            })
            .await?;
        Ok(at.map(|t| self.inner.clock.to_host(t)))
    }

    async fn purge(&self) -> AlkResult<()> {
        let (queue, purge) = (&self.name, &self.purge);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let stmt = c.prepare_cached(purge).await?;
                    c.execute(&stmt, &[queue]).await?;
                    Ok(())
                })
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::parse_receipt;

    #[test]
    fn only_issued_receipt_shapes_parse() {
        let u = "0f8e6a52-8c3e-4b8e-9d3a-2f7c1e5b9a10";
        assert!(parse_receipt(&format!("7:{u}")).is_some());
        for bad in [
            "".to_string(),
            "7".into(),
            format!("0:{u}"),
            format!("-1:{u}"),
            format!("x:{u}"),
            format!("7:{}", &u[1..]),
            format!("7:{u}{}", "0".repeat(200)),
        ] {
            assert!(parse_receipt(&bad).is_none(), "{bad:?} parsed");
        }
    }
}
