//! The schema: the marker a new schema gets, newer and foreign schemas
//! refused untouched, a version-1 schema migrated in place, and rows that
//! break the schema's rules.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_schema_gets_the_marker_and_a_second_engine_shares_it() {
    let schema = fresh_schema();
    let (a, b) = tokio::join!(engine(&schema), engine(&schema));
    let db = raw().await;
    let rows = db
        .query(
            &format!("SELECT key, value FROM {schema}.meta ORDER BY key"),
            &[],
        )
        .await
        .unwrap();
    let meta: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        meta,
        [
            ("format".into(), "alk-postgres".into()),
            ("version".into(), "4".into())
        ]
    );
    let kv_a = Bucket::open(&a, "shared", KvLimits::default())
        .await
        .unwrap();
    let kv_b = Bucket::open(&b, "shared", KvLimits::default())
        .await
        .unwrap();
    kv_a.set("k", b"v", None, 0).await.unwrap();
    assert_eq!(kv_b.get("k", 0).await.unwrap(), Some(b"v".to_vec()));
    assert!(a.describe().contains(&schema) && !a.describe().contains("alk-test-secret"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_and_foreign_schemas_are_refused_untouched() {
    let db = raw().await;
    let cases: Vec<(&str, String)> = vec![
        (
            "newer",
            "CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL); \
                   INSERT INTO {s}.meta VALUES ('format', 'alk-postgres'), ('version', '5')"
                .into(),
        ),
        (
            "other marker",
            "CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL); \
                   INSERT INTO {s}.meta VALUES ('format', 'something-else'), ('version', '1')"
                .into(),
        ),
        (
            "no marker row",
            "CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL)".into(),
        ),
        (
            "garbled version",
            "CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL); \
                   INSERT INTO {s}.meta VALUES ('format', 'alk-postgres'), ('version', 'one')"
                .into(),
        ),
        (
            "foreign tables",
            "CREATE TABLE {s}.orders (id int PRIMARY KEY); INSERT INTO {s}.orders VALUES (1)"
                .into(),
        ),
    ];
    for (what, setup) in cases {
        let schema = fresh_schema();
        db.batch_execute(&format!(
            "CREATE SCHEMA {schema}; {}",
            setup.replace("{s}", &schema)
        ))
        .await
        .unwrap();
        let before = snapshot(&db, &schema).await;
        match PostgresEngine::connect(options(&schema)).await {
            Err(AlkError::StoreSetup {
                supported, message, ..
            }) => {
                assert_eq!(supported, "alk-postgres.v4", "{what}");
                assert!(
                    message.contains("schema") || message.contains("newer"),
                    "{what}: {message}"
                );
            }
            Err(other) => panic!("{what}: {other}"),
            Ok(_) => panic!("{what}: accepted"),
        }
        assert_eq!(snapshot(&db, &schema).await, before, "{what}: changed");
    }
    // An empty schema made by an operator (for its permissions) is used.
    let schema = fresh_schema();
    db.batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    engine(&schema).await;
}

/// A version-1 schema with a message in flight is brought to version 2 (and
/// on to the newest) in place: ids, attempts and receipts are kept (the receipt of the delivery
/// under way still acknowledges it), the counter goes on, and the
/// messages keep their claim order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_schema_migrates_in_place_keeping_messages_and_receipts() {
    use alk_store::jobs::{JobState, SendOptions};

    let schema = fresh_schema();
    let db = raw().await;
    let claim = uuid::Uuid::new_v4();
    db.batch_execute(&format!(
        "CREATE SCHEMA {schema}; {}",
        crate::sql::Sql::for_schema(&schema).get(crate::sql::MIGRATIONS[0])
    ))
    .await
    .unwrap();
    // What a version-1 engine leaves after sending three messages and
    // claiming the first (attempt 1, hidden until 60,000).
    db.batch_execute(&format!(
        "INSERT INTO {schema}.queues VALUES ('old', 3); \
         INSERT INTO {schema}.messages (queue, id, payload_type, payload_data, enqueued_at, visible_at, attempt, receipt_handle) VALUES \
         ('old', 1, 'text', 'first', 10, 60000, 1, '{claim}'), \
         ('old', 2, 'text', 'second', 30, 30, 0, NULL), \
         ('old', 3, 'json', '{{}}', 20, 20, 0, NULL)"
    ))
    .await
    .unwrap();
    let e = engine(&schema).await;
    let version: String = db
        .query_one(
            &format!("SELECT value FROM {schema}.meta WHERE key = 'version'"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, "4");
    let q = Queue::open(&e, "old").await.unwrap();
    let first = q.job(1, 1_000).await.unwrap().unwrap();
    assert_eq!(
        (first.state, first.attempt, first.enqueued_at, first.due_at),
        (JobState::InFlight, 1, 10, 60_000)
    );
    assert_eq!(first.payload, Payload::Text("first".into()));
    assert_eq!(
        (first.priority, first.group, first.max_attempts),
        (0, None, None)
    );
    // Oldest sent first, as before.
    let got = q.receive(10, Some(600_000), 1_000).await.unwrap();
    assert_eq!(got.iter().map(|d| d.id).collect::<Vec<_>>(), [3, 2]);
    // The receipt of the claim made before the migration is current.
    let receipt = format!("1:{claim}");
    q.ack(&receipt).await.unwrap();
    assert!(q.job(1, 1_000).await.unwrap().is_none());
    q.ack(&receipt).await.unwrap();
    // Ids go on from the counter; the new options work on the old queue.
    let grouped = SendOptions {
        group: Some("g".into()),
        ..Default::default()
    };
    assert_eq!(
        q.send_with(&Payload::Text("g1".into()), &grouped, 2_000)
            .await
            .unwrap(),
        4
    );
    let got = q.receive(10, Some(1_000), 2_000).await.unwrap();
    assert_eq!(got.iter().map(|d| d.id).collect::<Vec<_>>(), [4]);
    assert!(q.fail(&got[0].receipt, "no", 2_001).await.unwrap());
    assert_eq!(q.dead_letters(None, 10, 2_002).await.unwrap().len(), 1);
    // A second start finds the newest version and changes nothing.
    drop(engine(&schema).await);
    assert_eq!(
        q.job(4, 2_003).await.unwrap().unwrap().state,
        JobState::Dead
    );
}

/// Rows an operator broke by hand are `internal` errors naming what is
/// wrong; the engine neither panics nor guesses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_that_break_the_schema_are_internal_errors_naming_them() {
    let schema = fresh_schema();
    let e = engine(&schema).await;
    let q = Queue::open(&e, "broken").await.unwrap();
    q.send(&Payload::Text("fine".into()), 0).await.unwrap();
    raw()
        .await
        .batch_execute(&format!(
            "UPDATE {schema}.messages SET payload_data = '\\xff00'::bytea"
        ))
        .await
        .unwrap();
    match q.receive(1, Some(1_000), 0).await {
        Err(AlkError::Internal(m)) => {
            assert!(m.contains("\"broken\"") && m.contains("message 1"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    // The database refuses what would break the schema's own rules.
    let refused = raw()
        .await
        .batch_execute(&format!(
            "UPDATE {schema}.messages SET payload_type = 'xml'"
        ))
        .await;
    assert!(refused.is_err());
}

/// The statements whose work grows with what guests leave behind (buckets,
/// keys, limiters, delivered messages) can each be answered from an index
/// of their own: with sequential scans off, the plan names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeps_and_the_in_flight_count_use_their_indexes() {
    use crate::sql::{
        L_TOKENS_SWEEP, Q_BUCKETS_SWEEP, Q_IN_FLIGHT, Q_RESULTS_SWEEP, Q_UNIQUE_STALE,
    };
    let schema = fresh_schema();
    let _engine = engine(&schema).await;
    let db = raw().await;
    db.batch_execute("SET enable_seqscan = off").await.unwrap();
    let cases: [(&str, &str, &str, &[&str]); 5] = [
        (
            Q_IN_FLIGHT,
            "text, bigint, bigint",
            "'q', 0, 10",
            &["messages_in_flight"],
        ),
        (
            Q_BUCKETS_SWEEP,
            "text, bigint",
            "'q', 0",
            &["rate_buckets_since"],
        ),
        (
            Q_RESULTS_SWEEP,
            "text, bigint",
            "'q', 0",
            &["results_expiry"],
        ),
        (
            Q_UNIQUE_STALE,
            "text, bigint",
            "'q', 0",
            &["unique_keys_until", "unique_keys_live"],
        ),
        (L_TOKENS_SWEEP, "bigint", "0", &["limiters_full"]),
    ];
    for (i, (sql, types, args, indexes)) in cases.iter().enumerate() {
        let sql = sql.replace("alk.", &format!("{schema}."));
        db.batch_execute(&format!("PREPARE s{i} ({types}) AS {sql}"))
            .await
            .unwrap();
        let plan: Vec<String> = db
            .query(&format!("EXPLAIN EXECUTE s{i} ({args})"), &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let plan = plan.join("\n");
        for index in *indexes {
            assert!(plan.contains(index), "{sql}\n{plan}");
        }
        assert!(!plan.contains("Sort "), "{sql}\n{plan}");
    }
}
