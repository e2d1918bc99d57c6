//! Stream transactions: one pooled connection each, which also carries
//! sends to queues (by the queue store's own send statements, so the jobs
//! commit or roll back with the events and offsets).

use std::sync::Arc;

use alk_store::jobs::{Stamp, Unique};
use alk_store::queue::Payload;
use alk_store::tx::{TxEngine, TxFailure};
use alk_store::{AlkError, AlkResult};
use async_trait::async_trait;

use crate::conn::{Conn, Fail, Inner, commit_outcome_unknown, describe_pg, unknown_commit_text};
use crate::queue::{send_on, send_unique_on};
use crate::stream::{Statements, publish_on, save_on};

// The statements of this module (each listed by name in
// `sql::STATEMENTS`, which a test checks against the format document).

/// Serializes the stream transactions of a schema (`$1` =
/// `alk-stream-tx:<schema>`) until commit or rollback, as the file engine's
/// store lock does: two transactions never wait for each other's streams
/// in opposite orders (a deadlock the server would break by aborting one).
pub const S_TX_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))";

/// An open transaction on its own pooled connection. A connection leaves
/// the transaction by a `COMMIT` or `ROLLBACK` the server answered before
/// it goes back to the pool; one whose transaction is abandoned (dropped,
/// failed, or its end failed) is closed instead, which makes the server
/// roll back (see [`Conn`]).
pub(crate) struct PgTx {
    inner: Arc<Inner>,
    sql: Arc<Statements>,
    conn: Option<Conn>,
}

impl PgTx {
    /// Begins a transaction on a connection of its own, serialized with the
    /// other stream transactions of the schema ([`S_TX_LOCK`]).
    pub(crate) async fn begin(inner: &Arc<Inner>, sql: &Arc<Statements>) -> AlkResult<PgTx> {
        let mut conn = inner.conn().await?;
        let key = format!("alk-stream-tx:{}", inner.sql.schema());
        let started = async {
            conn.begin().await?;
            conn.execute(S_TX_LOCK, &[&key]).await
        };
        if let Err(e) = started.await {
            // The transaction is open: dropping the connection closes it.
            return Err(inner.error(Fail::Pg(e)));
        }
        Ok(PgTx {
            inner: inner.clone(),
            sql: sql.clone(),
            conn: Some(conn),
        })
    }

    /// The connection, or the failure of a transaction already over.
    fn conn(&self) -> Result<&deadpool_postgres::Object, TxFailure> {
        self.conn
            .as_deref()
            .ok_or_else(|| {
                TxFailure::Failed(AlkError::Internal("the transaction is over".into()))
            })
    }

    /// Ends the transaction after a failed statement (closing the
    /// connection rolls it back) and says why.
    fn failed(&mut self, e: tokio_postgres::Error) -> TxFailure {
        self.abandon();
        TxFailure::Failed(self.inner.error(Fail::Pg(e)))
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
                .ok_or_else(|| {
                    TxFailure::Failed(AlkError::Internal("publish returned no offset".into()))
                }),
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
            send_on(conn, &self.sql.send, clock, queue, payloads, stamp, now).await
        };
        match result {
            Ok(_) => Ok(()),
            Err(Fail::Pg(e) | Fail::CommitUnknown(e)) => Err(self.failed(e)),
            Err(Fail::Alk(e)) => {
                self.abandon();
                Err(TxFailure::Failed(e))
            }
        }
    }

    async fn enqueue_unique(
        &mut self,
        queue: &str,
        payload: &Payload,
        stamp: &Stamp,
        unique: &Unique,
        now: i64,
    ) -> Result<(), TxFailure> {
        // As `enqueue`, by the statements of the queue store's own
        // `send_unique`: the key's row stays held until the end of the
        // transaction, so senders of the key in other transactions wait
        // for it and then see its message.
        let result = {
            let conn = self.conn()?;
            let clock = &*self.inner.clock;
            send_unique_on(
                conn,
                &self.sql.unique,
                clock,
                queue,
                payload,
                stamp,
                unique,
                now,
            )
            .await
        };
        match result {
            Ok(_) => Ok(()),
            Err(Fail::Pg(e) | Fail::CommitUnknown(e)) => Err(self.failed(e)),
            Err(Fail::Alk(e)) => {
                self.abandon();
                Err(TxFailure::Failed(e))
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
            Err(e) if commit_outcome_unknown(&e) => Err(AlkError::Internal(unknown_commit_text(
                &self.inner.target,
                &e,
            ))),
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
