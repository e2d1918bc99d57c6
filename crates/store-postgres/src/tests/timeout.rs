//! Statements cancelled by the server (`statement_timeout`, SQLSTATE 57014)
//! in and around transactions: `busy` while it lasts, and the pool holds no
//! connection stuck in an aborted transaction afterwards.

use std::time::Instant;

use super::*;

/// The superuser's own session on `cluster`, never cancelled by the
/// server-wide timeout it sets.
async fn superuser(cluster: &alk_pg_cluster::Cluster) -> tokio_postgres::Client {
    let mut config: tokio_postgres::Config = cluster.url().parse().unwrap();
    config.options("-c statement_timeout=0");
    let (client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

async fn statement_timeout(db: &tokio_postgres::Client, set: Option<&str>) {
    let change = match set {
        Some(v) => format!("ALTER SYSTEM SET statement_timeout = '{v}'"),
        None => "ALTER SYSTEM RESET statement_timeout".into(),
    };
    db.batch_execute(&change).await.unwrap();
    db.batch_execute("SELECT pg_reload_conf()").await.unwrap();
}

/// One round of work that opens transactions on every path that has one
/// (a purge, a sweep, a stream transaction), besides plain statements;
/// the first error.
async fn work(q: &Queue, e: &PostgresEngine, n: u64) -> Result<(), AlkError> {
    q.send(&Payload::Text(format!("m{n}")), 0).await?;
    q.purge().await?;
    q.sweep_expired(0).await?;
    let tx = tx_of(e);
    tx.publish("s", None, b"e", 0).await?;
    tx.commit().await?;
    Ok(())
}

/// With a server-wide `statement_timeout` of 1 ms, calls fail with `busy`
/// (never `internal`); once it is reset, every call succeeds again at
/// once: no pooled connection was left in an aborted transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_cancelled_by_the_server_leave_no_aborted_transaction_in_the_pool() {
    let cluster = alk_pg_cluster::Cluster::start().expect("start a throwaway postgres");
    let admin = superuser(&cluster).await;
    let options = PostgresOptions::from_url(&cluster.url())
        .unwrap()
        .schema("timeouts")
        .unwrap()
        .pool_size(2);
    let e = PostgresEngine::connect(options).await.unwrap();
    let q = Queue::open(&e, "q").await.unwrap();
    let mut busy = 0;
    for round in 0..4 {
        statement_timeout(&admin, Some("1ms")).await;
        let until = Instant::now() + Duration::from_millis(1_500);
        let mut n = 0;
        while Instant::now() < until {
            // Three calls at once on two connections: some wait for one.
            let (a, b, c) = tokio::join!(work(&q, &e, n), work(&q, &e, n + 1), work(&q, &e, n + 2));
            n += 3;
            for r in [a, b, c] {
                match r {
                    Ok(()) => {}
                    // A cancelled statement inside a stream transaction
                    // rolls it back.
                    Err(AlkError::Busy(_) | AlkError::TransactionAborted(_)) => busy += 1,
                    Err(other) => panic!("round {round}: with the timeout set: {other:?}"),
                }
            }
        }
        statement_timeout(&admin, None).await;
        // The sessions take the reset at their next command; a moment
        // for the reload to reach them, then nothing fails.
        tokio::time::sleep(Duration::from_millis(200)).await;
        for k in 0..30 {
            if let Err(err) = work(&q, &e, k).await {
                panic!("round {round}, call {k} after the reset: {err:?}");
            }
        }
    }
    assert!(busy > 0, "the timeout never cancelled a statement");
}

/// The guard of a pooled connection: clean after a committed or rolled
/// back transaction (the same session comes back), closed after one that
/// ended otherwise — dropped, or aborted by a statement the server
/// cancelled (`SET LOCAL statement_timeout`) — so the next call gets a new
/// session outside any transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_transaction_did_not_end_cleanly_is_never_pooled_again() {
    let e = PostgresEngine::connect(options(&fresh_schema()).pool_size(1))
        .await
        .unwrap();
    let pid = || async {
        let c = e.inner.conn().await.unwrap();
        // One statement of the simple protocol outside a transaction is
        // its own transaction: it started when the statement did.
        let rows = c
            .simple_query("SELECT pg_backend_pid(), now() = statement_timestamp()")
            .await
            .unwrap();
        let row = rows
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => Some(row),
                _ => None,
            })
            .expect("a row");
        assert_eq!(row.get(1), Some("t"), "handed out inside a transaction");
        row.get(0).unwrap().parse::<i32>().unwrap()
    };
    let first = pid().await;
    {
        let mut c = e.inner.conn().await.unwrap();
        let committed = c.transaction().await.unwrap().commit().await;
        assert!(committed.is_ok());
        let rolled_back = c.transaction().await.unwrap().rollback().await;
        assert!(rolled_back.is_ok());
    }
    assert_eq!(
        pid().await,
        first,
        "a cleanly ended transaction keeps its session"
    );
    {
        let mut c = e.inner.conn().await.unwrap();
        let _dropped = c.transaction().await.unwrap();
    }
    let second = pid().await;
    assert_ne!(second, first, "a dropped transaction's session came back");
    {
        let mut c = e.inner.conn().await.unwrap();
        let tx = c.transaction().await.unwrap();
        tx.batch_execute("SET LOCAL statement_timeout = 1")
            .await
            .unwrap();
        let cancelled = tx.batch_execute("SELECT pg_sleep(1)").await.unwrap_err();
        assert_eq!(cancelled.code().map(|c| c.code()), Some("57014"));
        assert!(matches!(
            e.inner.error(crate::Fail::Pg(cancelled)),
            AlkError::Busy(_)
        ));
        let aborted = tx.batch_execute("SELECT 1").await.unwrap_err();
        assert_eq!(aborted.code().map(|c| c.code()), Some("25P02"));
        assert!(matches!(
            e.inner.error(crate::Fail::Pg(aborted)),
            AlkError::Busy(_)
        ));
    }
    assert_ne!(
        pid().await,
        second,
        "an aborted transaction's session came back"
    );
    // And the engine works on.
    let q = Queue::open(&e, "q").await.unwrap();
    q.send(&Payload::Text("m".into()), 0).await.unwrap();
    assert_eq!(q.receive(1, Some(1_000), 0).await.unwrap().len(), 1);
}
