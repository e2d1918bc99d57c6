//! Sends inside transactions, schedules, and the move to version 3, as
//! the database sees them.

use std::time::Duration;

use alk_store::jobs::{JobState, SendOptions, Stamp};
use alk_store::schedule::{ScheduleRow, Schedules};

use super::*;

fn text(s: &str) -> Payload {
    Payload::Text(s.into())
}

/// `SELECT count(*) FROM <schema>.<from>`.
async fn count(db: &tokio_postgres::Client, schema: &str, from: &str) -> i64 {
    db.query_one(&format!("SELECT count(*) FROM {schema}.{from}"), &[])
        .await
        .unwrap()
        .get(0)
}

/// Waits until the stream transactions before it have ended (a dropped one
/// is rolled back on the runtime): transactions run one at a time.
async fn settle(e: &PostgresEngine) {
    let probe = tx_of(e);
    probe.publish("probe", None, b"p", 0).await.unwrap();
    probe.rollback().await;
}

/// Rolled back or dropped, a transaction's sends leave no message, no
/// group and no counter row, and take their ids back; committed, the same
/// sends are all there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_enqueue_leaves_no_message_group_or_counter_row() {
    let schema = fresh_schema();
    let e = engine(&schema).await;
    let db = raw().await;
    let grouped = SendOptions {
        group: Some("g".into()),
        priority: Some(2),
        ..SendOptions::default()
    };
    for ending in ["rollback", "drop"] {
        let tx = tx_of(&e);
        tx.publish("ev", None, b"x", 0).await.unwrap();
        tx.enqueue("rbq", &[text("a"), text("b")], &grouped, 0)
            .await
            .unwrap();
        tx.outbox_enqueue("mail", &[text("m")], &SendOptions::default(), 0)
            .await
            .unwrap();
        // Another connection sees nothing of it while it is open.
        assert_eq!(count(&db, &schema, "messages").await, 0, "{ending}");
        match ending {
            "rollback" => tx.rollback().await,
            _ => drop(tx),
        }
        settle(&e).await;
        for table in ["messages", "groups", "queues", "events", "streams"] {
            assert_eq!(count(&db, &schema, table).await, 0, "{ending}: {table}");
        }
    }
    let tx = tx_of(&e);
    tx.enqueue("rbq", &[text("a"), text("b")], &grouped, 0)
        .await
        .unwrap();
    tx.outbox_enqueue("mail", &[text("m")], &SendOptions::default(), 0)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(count(&db, &schema, "messages").await, 3);
    assert_eq!(
        count(
            &db,
            &schema,
            "groups WHERE queue = 'rbq' AND group_key = 'g'"
        )
        .await,
        1
    );
    assert_eq!(
        count(
            &db,
            &schema,
            "messages WHERE queue = '__alkstore_outbox_mail'"
        )
        .await,
        1
    );
    // The ids rolled back were handed out again.
    let q = Queue::open(&e, "rbq").await.unwrap();
    assert_eq!(q.job(1, 0).await.unwrap().unwrap().payload, text("a"));
    assert_eq!(q.job(2, 0).await.unwrap().unwrap().payload, text("b"));
}

/// A send statement that fails inside a transaction aborts it: what it
/// published and sent before is rolled back, the commit is refused, and the
/// engine goes on with its other connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_send_inside_a_transaction_aborts_it_and_rolls_back_everything() {
    let schema = fresh_schema();
    let e = engine(&schema).await;
    let db = raw().await;
    db.batch_execute(&format!(
        "ALTER TABLE {schema}.messages ADD CONSTRAINT no_boom \
         CHECK (payload_data <> convert_to('boom', 'UTF8'))"
    ))
    .await
    .unwrap();
    let plain = SendOptions::default();
    let tx = tx_of(&e);
    tx.publish("ev", None, b"x", 0).await.unwrap();
    tx.enqueue("q", &[text("fine")], &plain, 0).await.unwrap();
    match tx.enqueue("q", &[text("boom")], &plain, 0).await {
        Err(AlkError::TransactionAborted(why)) => assert!(why.contains("no_boom"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        tx.commit().await,
        Err(AlkError::TransactionAborted(_))
    ));
    for table in ["messages", "queues", "events", "streams"] {
        assert_eq!(count(&db, &schema, table).await, 0, "{table}");
    }
    let q = Queue::open(&e, "q").await.unwrap();
    assert_eq!(q.send(&text("fine"), 0).await.unwrap(), 1);
    let tx = tx_of(&e);
    tx.enqueue("q", &[text("also fine")], &plain, 0)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        q.job(2, 0).await.unwrap().unwrap().payload,
        text("also fine")
    );
}

/// Jobs sent in a transaction on one engine are claimable on another from
/// the commit on, with their options; until then the transaction holds the
/// queue's counter, so a send elsewhere waits and takes the next id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_enqueue_is_claimable_from_another_engine() {
    let schema = fresh_schema();
    let (a, b) = tokio::join!(engine(&schema), engine(&schema));
    let qb = Queue::open(&b, "jobs").await.unwrap();
    let options = SendOptions {
        priority: Some(5),
        group: Some("g1".into()),
        max_attempts: Some(3),
        ..SendOptions::default()
    };
    let tx = tx_of(&a);
    tx.enqueue("jobs", &[text("one"), text("two")], &options, 1_000)
        .await
        .unwrap();
    assert!(qb.claim(10, None, None, 1_000).await.unwrap().is_empty());
    let other = qb.clone();
    let sender = tokio::spawn(async move { other.send(&text("three"), 1_000).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !sender.is_finished(),
        "a send did not wait for the transaction holding the queue's counter"
    );
    tx.commit().await.unwrap();
    assert_eq!(sender.await.unwrap().unwrap(), 3);
    let mut got = qb.claim(10, None, None, 1_000).await.unwrap();
    got.sort_by_key(|d| d.id);
    let seen: Vec<_> = got
        .iter()
        .map(|d| {
            (
                d.id,
                d.payload.clone(),
                d.priority,
                d.group.clone(),
                d.max_attempts,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (1, text("one"), 5, Some("g1".to_string()), Some(3)),
            (3, text("three"), 0, None, None)
        ]
    );
    qb.ack(&got[0].receipt).await.unwrap();
    let next = qb.claim(10, None, None, 1_000).await.unwrap();
    assert_eq!(next.iter().map(|d| d.id).collect::<Vec<_>>(), [2]);
}

fn row(name: &str, options: SendOptions, next_due: i64) -> ScheduleRow {
    ScheduleRow {
        name: name.into(),
        spec: "@every 5s".into(),
        every_ms: 5_000,
        queue: "sq".into(),
        payload: Payload::Json(r#"{"n":1}"#.into()),
        options,
        next_due,
    }
}

/// A schedule reads back exactly as stored, every option included; the
/// list is in byte order; a firing moves the boundary and sends its jobs
/// together, once even when two engines fire the same boundary at once,
/// and never when the boundary moved or a send fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_keep_every_option_and_fire_each_boundary_once_across_engines() {
    let schema = fresh_schema();
    let (a, b) = tokio::join!(engine(&schema), engine(&schema));
    let db = raw().await;
    let (ea, eb) = (a.schedules().await.unwrap(), b.schedules().await.unwrap());
    let full = row(
        "a-1",
        SendOptions {
            priority: Some(-3),
            delay_ms: Some(250),
            run_at_ms: Some(123),
            max_attempts: Some(7),
            backoff_base_ms: Some(40),
            expires_in_ms: Some(60_000),
            group: Some("g\0x".into()),
        },
        10_000,
    );
    ea.put(&full).await.unwrap();
    assert_eq!(eb.get("a-1").await.unwrap(), Some(full.clone()));
    let mut bare = row("B", SendOptions::default(), 7);
    bare.payload = text("t\0nul");
    ea.put(&bare).await.unwrap();
    ea.put(&row("z", SendOptions::default(), 9)).await.unwrap();
    assert_eq!(eb.get("B").await.unwrap(), Some(bare.clone()));
    let names: Vec<String> = eb
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["B", "a-1", "z"]);
    // Replacing replaces every column.
    let mut changed = row("a-1", SendOptions::default(), 3);
    (changed.queue, changed.spec, changed.every_ms) = ("sq2".into(), "@every 1m".into(), 60_000);
    ea.put(&changed).await.unwrap();
    assert_eq!(eb.get("a-1").await.unwrap(), Some(changed));
    ea.put(&full).await.unwrap();

    // Two engines fire each boundary at once: one sends.
    let stamp = Stamp {
        priority: 4,
        due_at: 10_000,
        max_attempts: Some(2),
        backoff_base_ms: None,
        expires_at: None,
        group: Some("grp".into()),
    };
    let stamps = vec![stamp.clone(); 3];
    let mut due = 10_000;
    for _ in 0..5 {
        let (x, y) = tokio::join!(
            ea.fire("a-1", due, due + 5_000, &stamps, 10_000),
            eb.fire("a-1", due, due + 5_000, &stamps, 10_000)
        );
        assert!(x.unwrap() ^ y.unwrap(), "boundary {due}");
        due += 5_000;
        assert_eq!(ea.get("a-1").await.unwrap().unwrap().next_due, due);
    }
    assert_eq!(count(&db, &schema, "messages WHERE queue = 'sq'").await, 15);
    assert_eq!(count(&db, &schema, "groups WHERE queue = 'sq'").await, 1);
    // A boundary already moved, or a schedule that is gone: nothing.
    assert!(
        !ea.fire("a-1", 10_000, 99_000, &stamps, 10_000)
            .await
            .unwrap()
    );
    assert!(!ea.fire("nope", 0, 5_000, &stamps, 0).await.unwrap());
    assert_eq!(ea.get("a-1").await.unwrap().unwrap().next_due, due);
    assert_eq!(count(&db, &schema, "messages").await, 15);
    // Different stamps: one job each, in order, as separate sends.
    let one = Stamp {
        priority: 1,
        ..Stamp::plain(20_000)
    };
    let two = Stamp {
        priority: 2,
        ..Stamp::plain(20_000)
    };
    let mixed = [one.clone(), one, two];
    assert!(
        ea.fire("a-1", due, due + 5_000, &mixed, 20_000)
            .await
            .unwrap()
    );
    due += 5_000;
    let q = Queue::open(&a, "sq").await.unwrap();
    let priorities: Vec<i32> = futures::future::join_all((16..=18).map(|id| q.job(id, 20_000)))
        .await
        .into_iter()
        .map(|j| j.unwrap().unwrap().priority)
        .collect();
    assert_eq!(priorities, [1, 1, 2]);
    let first = q.job(1, 20_000).await.unwrap().unwrap();
    assert_eq!(
        (
            first.priority,
            first.group.as_deref(),
            first.max_attempts,
            first.state
        ),
        (4, Some("grp"), Some(2), JobState::Waiting)
    );
    assert_eq!(first.payload, full.payload);
    // No stamps: the boundary moves, nothing is sent.
    assert!(ea.fire("a-1", due, due + 5_000, &[], 20_000).await.unwrap());
    assert_eq!(ea.get("a-1").await.unwrap().unwrap().next_due, due + 5_000);
    assert_eq!(count(&db, &schema, "messages").await, 18);
    // A send that fails leaves the boundary where it was.
    let mut boom = row("boom", SendOptions::default(), 0);
    boom.payload = text("boom");
    ea.put(&boom).await.unwrap();
    db.batch_execute(&format!(
        "ALTER TABLE {schema}.messages ADD CONSTRAINT no_boom \
         CHECK (payload_data <> convert_to('boom', 'UTF8'))"
    ))
    .await
    .unwrap();
    assert!(
        ea.fire("boom", 0, 5_000, &[Stamp::plain(0)], 0)
            .await
            .is_err()
    );
    assert_eq!(ea.get("boom").await.unwrap().unwrap().next_due, 0);
    assert_eq!(count(&db, &schema, "messages").await, 18);
    // Removal.
    assert!(eb.remove("a-1").await.unwrap());
    assert!(!ea.remove("a-1").await.unwrap());
    assert_eq!(ea.get("a-1").await.unwrap(), None);
    assert_eq!(ea.get("z").await.unwrap().unwrap().next_due, 9);
}

/// A version-2 schema with rows in every table is brought to version 3 (and
/// on to the newest) in place by the first of two engines starting at
/// once: every row stays as it was, a delivery under way is still settled
/// by its receipt, and the schedules work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_schema_migrates_to_version_3_keeping_every_row() {
    let schema = fresh_schema();
    let db = raw().await;
    let sql = crate::sql::Sql::for_schema(&schema);
    db.batch_execute(&format!(
        "CREATE SCHEMA {schema}; {} {} UPDATE {schema}.meta SET value = '2' WHERE key = 'version';",
        sql.get(crate::sql::MIGRATIONS[0]),
        sql.get(crate::sql::MIGRATIONS[1]),
    ))
    .await
    .unwrap();
    let claim = uuid::Uuid::new_v4();
    db.batch_execute(&format!(
        "INSERT INTO {schema}.kv VALUES ('b', 'k', 'v1', NULL); \
         INSERT INTO {schema}.queues VALUES ('q', 4); \
         INSERT INTO {schema}.messages (queue, id, payload_type, payload_data, enqueued_at, visible_at, ready_at, \
           attempt, receipt_handle, priority, group_key) VALUES \
           ('q', 1, 'text', 'one', 10, 60000, 10, 1, '{claim}', 0, 'g'), \
           ('q', 2, 'text', 'two', 20, 20, 20, 0, NULL, 0, 'g'), \
           ('q', 3, 'json', '{{}}', 30, 30, 30, 0, NULL, 5, NULL); \
         INSERT INTO {schema}.groups (queue, group_key, priority, served) VALUES ('q', 'g', 0, 0); \
         INSERT INTO {schema}.dead (queue, id, payload_type, payload_data, enqueued_at, visible_at, ready_at, attempt, \
           priority, last_error, died_at) VALUES ('q', 4, 'text', 'four', 5, 5, 5, 3, 0, 'bad', 40); \
         INSERT INTO {schema}.streams VALUES ('s', 2); \
         INSERT INTO {schema}.events VALUES ('s', 1, NULL, 'e1', 5), ('s', 2, 'k', 'e2', 6); \
         INSERT INTO {schema}.consumer_offsets VALUES ('s', 'c', 1); \
         INSERT INTO {schema}.locks VALUES ('l', 'owner', 7, 0, 9000000000000);"
    ))
    .await
    .unwrap();
    let before = snapshot(&db, &schema).await;
    let (e, _other) = tokio::join!(engine(&schema), engine(&schema));
    let after = snapshot(&db, &schema).await;
    // The tables of version 3 and later are new (and empty).
    let added = [
        "meta",
        "schedules",
        "queue_limits",
        "rate_buckets",
        "unique_keys",
        "results",
        "limiters",
        "messages_in_flight",
    ];
    let kept = |rows: &[String]| -> Vec<String> {
        rows.iter()
            .filter(|r| !added.iter().any(|a| r.starts_with(a)))
            .cloned()
            .collect()
    };
    assert_eq!(kept(&after), kept(&before));
    assert!(after.iter().any(|r| r == "schedules"), "{after:?}");
    let meta: Vec<String> = after
        .iter()
        .filter(|r| r.starts_with("meta: "))
        .cloned()
        .collect();
    assert_eq!(meta, ["meta: (format,alk-postgres)", "meta: (version,4)"]);

    // The rows mean what they meant.
    let kv = Bucket::open(&e, "b", KvLimits::default()).await.unwrap();
    assert_eq!(kv.get("k", 0).await.unwrap(), Some(b"v1".to_vec()));
    let q = Queue::open(&e, "q").await.unwrap();
    q.ack(&format!("1:{claim}")).await.unwrap();
    let mut got = q.receive(10, None, 1_000).await.unwrap();
    got.sort_by_key(|d| d.id);
    assert_eq!(got.iter().map(|d| d.id).collect::<Vec<_>>(), [2, 3]);
    let dead = q.dead_letters(None, 10, 1_000).await.unwrap();
    assert_eq!(
        dead.iter()
            .map(|j| (j.id, j.last_error.clone()))
            .collect::<Vec<_>>(),
        [(4, Some("bad".to_string()))]
    );
    assert_eq!(q.send(&text("five"), 1_000).await.unwrap(), 5);
    let s = Streams::open(&e, StreamLimits::default()).await.unwrap();
    assert_eq!(s.read_since("s", 0, 10).await.unwrap().len(), 2);
    assert_eq!(s.get_offset("s", "c").await.unwrap(), Some(1));
    let holder = Locks::open(&e)
        .await
        .unwrap()
        .holder("l", 0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((holder.owner.as_str(), holder.token), ("owner", 7));
    let schedules = Schedules::open(&e).await.unwrap();
    schedules
        .schedule(
            "every",
            "@every 1s",
            "q",
            &text("tick"),
            &SendOptions::default(),
            0,
        )
        .await
        .unwrap();
    assert_eq!(schedules.tick(1_000, 64).await.unwrap(), 1);
    // A later start finds the newest version and changes nothing.
    let settled = snapshot(&db, &schema).await;
    drop(engine(&schema).await);
    assert_eq!(snapshot(&db, &schema).await, settled);
}
