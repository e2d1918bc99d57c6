//! Stream transactions: one `BEGIN IMMEDIATE` on the stream store file,
//! holding the store's write gate until it ends. Its publishes and offsets
//! are the stream store's own statements; its sends to queues are written
//! as relay rows and relayed after the commit (see [`crate::relay`]).

use std::sync::Arc;

use alk_store::jobs::Stamp;
use alk_store::queue::Payload;
use alk_store::tx::{TxEngine, TxFailure};
use alk_store::{AlkError, AlkResult};
use async_trait::async_trait;

use crate::conn::Connection;
use crate::gate::WriteGuard;
use crate::pool::Handle;
use crate::relay::{Relay, forget_on, relay_send_on, relay_send_unique_on};
use crate::retry::{Failure, exec};
use crate::store::Store;
use crate::stream::{StreamStore, publish_on, save_offset_on};

impl StreamStore {
    /// Begins a transaction. Its first statements delete the relay rows
    /// this process relayed since its last write here: they commit or roll
    /// back with the transaction (and stay noted until they commit).
    pub(crate) async fn begin_tx(&self) -> AlkResult<TursoTx> {
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

/// An open transaction: `BEGIN IMMEDIATE` done on this connection of this
/// database, which stays open while the transaction is, and the store's
/// write gate, held until it ends.
pub(crate) struct TursoTx {
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
    /// Opens (making it, if new) the queue a send of this transaction
    /// will be relayed to, and refuses (writing nothing) unless it is
    /// `localqueue.v3` (`v3`) or at least v2: what `what` needs.
    async fn relay_to(&self, queue: &str, v3: bool, what: &str) -> Result<(), TxFailure> {
        let q = self
            .relay
            .queues
            .get(queue)
            .await
            .map_err(TxFailure::Refused)?;
        let ready = if v3 {
            q.require_v3(what).await
        } else {
            q.require_v2(what).await
        };
        ready.map_err(TxFailure::Refused)
    }

    /// Remembers that the transaction sent to `queue` (its relay runs
    /// after the commit).
    fn mark_sent(&mut self, queue: &str) {
        if !self.sent.iter().any(|q| q == queue) {
            self.sent.push(queue.to_string());
        }
    }

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
                Err(TxFailure::Failed(self.store.engine_error(e)))
            }
            Err(panic) => {
                // Its state is unknown: close the database (which drops the
                // uncommitted transaction and its lock) rather than use it.
                self.store.discard(&self.handle);
                Err(TxFailure::Failed(AlkError::Internal(format!(
                    "the storage engine failed: {panic}"
                ))))
            }
        }
    }

    /// Ends the transaction with `sql` (`COMMIT` or `ROLLBACK`); the
    /// connection goes back to the pool when it did. The write gate is
    /// released when this returns.
    pub(crate) async fn end(self, sql: &str) -> AlkResult<()> {
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
        self.relay_to(queue, false, "transactional sends").await?;
        let conn = self.conn.clone();
        self.op(async move {
            for p in payloads {
                relay_send_on(&conn, queue, p, stamp, now).await?;
            }
            Ok(())
        })
        .await?;
        self.mark_sent(queue);
        Ok(())
    }

    async fn enqueue_unique(
        &mut self,
        queue: &str,
        payload: &Payload,
        stamp: &Stamp,
        unique: &alk_store::jobs::Unique,
        now: i64,
    ) -> Result<(), TxFailure> {
        // The key is checked when the message reaches the queue, which
        // must be localqueue.v3 to hold it. Refusals write nothing.
        self.relay_to(queue, true, "unique sends").await?;
        let conn = self.conn.clone();
        self.op(async move {
            relay_send_unique_on(&conn, queue, payload, stamp, Some(unique), now).await
        })
        .await?;
        self.mark_sent(queue);
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
pub(crate) mod tests {
    use super::*;
    use crate::options::{NewQueues, StoreOptions};
    use crate::queue::QueueStore;
    use crate::stream::tests::{claim_all, quiet, sql_rows, text};
    use crate::{RetryPolicy, TursoEngine};
    use alk_store::queue::Queue;
    use alk_store::stream::{StreamEngine, Streams};
    use alk_store::tx::Tx;

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
            matches!(&failed, Err(TxFailure::Failed(AlkError::Internal(m))) if m.contains("simulated")),
            "{failed:?}"
        );
        drop(tx);
        // Nothing of it was applied, and the write lock is free.
        assert_eq!(s.publish("s", None, b"after", 0).await.unwrap(), 1);
    }

    #[tokio::test]
    async fn a_transactional_send_to_a_v1_queue_is_refused_and_the_transaction_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = StoreOptions {
            new_queues: NewQueues::V1,
            ..StoreOptions::default()
        };
        QueueStore::open(dir.path(), "old", v1).await.unwrap();
        let turso = Arc::new(TursoEngine::new(dir.path(), RetryPolicy::default()));
        let engine: Arc<dyn alk_store::Engine> = turso.clone();
        let s = Streams::open(&*engine, Default::default()).await.unwrap();
        let tx = Tx::new(engine.clone(), Default::default()).unwrap();
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
        let store = turso.stream_store().await.unwrap();
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
    pub(crate) async fn commit_sends(s: &StreamStore, queue: &str, payloads: &[&str]) {
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
    async fn an_outbox_queue_is_v3_even_when_new_queues_are_v1() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = StoreOptions {
            new_queues: NewQueues::V1,
            ..StoreOptions::default()
        };
        let engine: Arc<dyn alk_store::Engine> = Arc::new(TursoEngine::new(dir.path(), v1));
        let outbox = alk_store::outbox::Outbox::open(&*engine, "mail")
            .await
            .unwrap();
        let backing = alk_store::outbox::backing_queue("mail").unwrap();
        assert!(
            QueueStore::open(dir.path(), &backing, v1)
                .await
                .unwrap()
                .is_v3()
                .await
                .unwrap()
        );
        let tx = Tx::new(engine.clone(), Default::default()).unwrap();
        let plain = alk_store::jobs::SendOptions::default();
        tx.outbox_enqueue("mail", &[text("m")], &plain, 0)
            .await
            .unwrap();
        // A plain queue made by this engine is v1: refused, without
        // suggesting a new queue (it would be v1 too).
        match tx.enqueue("plain", &[text("p")], &plain, 0).await {
            Err(AlkError::InvalidArgument(m)) => {
                assert!(m.contains("alk-host migrate queue plain"), "{m}");
                assert!(m.contains("without `--new-queues v1`"), "{m}");
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
    async fn a_unique_send_in_a_transaction_is_checked_when_it_reaches_the_queue() {
        let dir = tempfile::tempdir().unwrap();
        let s = quiet(dir.path()).await;
        let unique = alk_store::jobs::Unique {
            key: "k".into(),
            until: None,
        };
        for payload in ["first", "second"] {
            let mut tx: Box<dyn TxEngine> = Box::new(s.begin_tx().await.unwrap());
            tx.enqueue_unique("q", &text(payload), &Stamp::plain(5), &unique, 5)
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
        let q = s.relay.queues.get("q").await.unwrap();
        // The second found the key taken: nothing stored, the row relayed.
        assert_eq!(claim_all(&q).await, [text("first")]);
        assert!(s.relay.pending("q").await.unwrap().is_empty());
        // A v1 queue refuses the send inside the transaction.
        let v1 = StoreOptions {
            new_queues: NewQueues::V1,
            ..StoreOptions::default()
        };
        QueueStore::open(dir.path(), "old", v1).await.unwrap();
        let mut tx: Box<dyn TxEngine> = Box::new(s.begin_tx().await.unwrap());
        match tx
            .enqueue_unique("old", &text("x"), &Stamp::plain(5), &unique, 5)
            .await
        {
            Err(TxFailure::Refused(AlkError::InvalidArgument(m))) => {
                assert!(m.contains("alk-host migrate queue old"), "{m}")
            }
            other => panic!("{:?}", other.err().map(|_| "another failure")),
        }
        tx.rollback().await;
        assert!(
            sql_rows(&s.store, "SELECT id FROM relay WHERE queue = 'old'")
                .await
                .is_empty()
        );
    }
}
