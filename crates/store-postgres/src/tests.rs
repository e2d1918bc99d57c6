//! The conformance suite on a real server, and what only this engine has:
//! migrations and refusals, ordering under concurrent publishers, exactly
//! one winner across connections, the database's clock, wakes between
//! engines, unreachable servers.

use std::sync::Arc;
use std::time::Duration;

use alk_store::conformance::Subject;
use alk_store::kv::Bucket;
use alk_store::limits::{KvLimits, StreamLimits};
use alk_store::lock::Locks;
use alk_store::notify::Channels;
use alk_store::queue::{Payload, Queue};
use alk_store::stream::Streams;
use alk_store::{AlkError, Engine};

use crate::{PostgresEngine, PostgresOptions};

mod coord;
mod timeout;

/// A schema no other test uses.
fn fresh_schema() -> String {
    format!("t_{}", &uuid::Uuid::new_v4().simple().to_string()[..16])
}

fn options(schema: &str) -> PostgresOptions {
    PostgresOptions::from_url(&alk_pg_cluster::test_url())
        .unwrap()
        .schema(schema)
        .unwrap()
        .pool_size(4)
}

async fn engine(schema: &str) -> PostgresEngine {
    PostgresEngine::connect(options(schema)).await.unwrap()
}

/// A plain client for looking at (and tampering with) the database.
async fn raw() -> tokio_postgres::Client {
    let (client, conn) =
        tokio_postgres::connect(&alk_pg_cluster::test_url(), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(conn);
    client
}

mod conformance {
    use super::*;

    async fn make() -> Subject {
        let schema = fresh_schema();
        Subject {
            engine: Arc::new(engine(&schema).await),
            keep: Box::new(schema),
        }
    }

    alk_store::conformance_tests!(make);
}

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
            ("version".into(), "3".into())
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

/// What a refused schema holds, to check that nothing changed.
async fn snapshot(db: &tokio_postgres::Client, schema: &str) -> Vec<String> {
    let tables: Vec<String> = db
        .query(
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 ORDER BY 1",
            &[&schema],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut out = tables.clone();
    for t in tables.iter().filter(|t| !t.contains("pkey")) {
        if let Ok(rows) = db
            .query(
                &format!("SELECT t::text FROM {schema}.{t} t ORDER BY 1"),
                &[],
            )
            .await
        {
            out.extend(
                rows.iter()
                    .map(|r| format!("{t}: {}", r.get::<_, String>(0))),
            );
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_and_foreign_schemas_are_refused_untouched() {
    let db = raw().await;
    let cases: Vec<(&str, String)> = vec![
        (
            "newer",
            "CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL); \
                   INSERT INTO {s}.meta VALUES ('format', 'alk-postgres'), ('version', '4')"
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
                assert_eq!(supported, "alk-postgres.v3", "{what}");
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
    assert_eq!(version, "3");
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

/// Claimers racing on several engines over messages of many groups and
/// without one: every message is delivered exactly once, and a group never
/// has two messages in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_claimers_keep_groups_one_in_flight_and_deliver_once() {
    use alk_store::jobs::SendOptions;

    let schema = fresh_schema();
    let mut engines = Vec::new();
    for _ in 0..3 {
        engines.push(Arc::new(engine(&schema).await));
    }
    let q = Queue::open(&*engines[0], "groups").await.unwrap();
    let mut total = 0;
    for g in 0..6 {
        let opts = SendOptions {
            group: Some(format!("g{g}")),
            ..Default::default()
        };
        let bodies: Vec<Payload> = (0..10)
            .map(|i| Payload::Text(format!("g{g}/{i}")))
            .collect();
        q.send_batch_with(&bodies, &opts, 0).await.unwrap();
        total += bodies.len();
    }
    let plain: Vec<Payload> = (0..30).map(|i| Payload::Text(format!("u/{i}"))).collect();
    q.send_batch(&plain, 0).await.unwrap();
    total += plain.len();
    let in_flight = Arc::new(std::sync::Mutex::new(
        std::collections::HashSet::<String>::new(),
    ));
    let mut claimers = Vec::new();
    for i in 0..6 {
        let e = engines[i % engines.len()].clone();
        let in_flight = in_flight.clone();
        claimers.push(tokio::spawn(async move {
            let q = Queue::open(&*e, "groups").await.unwrap();
            let mut got = Vec::new();
            let mut idle = 0;
            while idle < 20 {
                let batch = q.receive(3, Some(600_000), 0).await.unwrap();
                if batch.is_empty() {
                    idle += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                idle = 0;
                for d in &batch {
                    if let Some(g) = &d.group {
                        assert!(
                            in_flight.lock().unwrap().insert(g.clone()),
                            "two messages of group {g} in flight"
                        );
                    }
                }
                for d in batch {
                    if let Some(g) = &d.group {
                        in_flight.lock().unwrap().remove(g);
                    }
                    q.ack(&d.receipt).await.unwrap();
                    got.push(d.id);
                }
            }
            got
        }));
    }
    let mut all = Vec::new();
    for c in claimers {
        all.extend(c.await.unwrap());
    }
    all.sort_unstable();
    assert_eq!(
        all,
        (1..=total as i64).collect::<Vec<i64>>(),
        "a message was claimed twice or never"
    );
}

/// Senders and claimers that acknowledge at once, on several engines,
/// racing on one group that empties again and again: the group keeps its
/// row while it has a message, whoever commits first (a message of a
/// group without its row could never be claimed), and loses it once empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_keeps_its_row_while_senders_and_ackers_race() {
    use alk_store::jobs::SendOptions;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let schema = fresh_schema();
    let per_sender = 150;
    let senders = 2;
    let acked = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for s in 0..senders {
        let e = engine(&schema).await;
        tasks.push(tokio::spawn(async move {
            let q = Queue::open(&e, "race").await.unwrap();
            let opts = SendOptions {
                group: Some("g".into()),
                ..Default::default()
            };
            for i in 0..per_sender {
                q.send_with(&Payload::Text(format!("{s}/{i}")), &opts, 0)
                    .await
                    .unwrap();
            }
        }));
    }
    for _ in 0..3 {
        let e = engine(&schema).await;
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            let q = Queue::open(&e, "race").await.unwrap();
            while acked.load(Ordering::SeqCst) < senders * per_sender {
                for d in q.receive(1, Some(600_000), 0).await.unwrap() {
                    q.ack(&d.receipt).await.unwrap();
                    acked.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(120), t)
            .await
            .expect("a message of the group was never delivered")
            .unwrap();
    }
    let db = raw().await;
    let left: i64 = db
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM {schema}.messages) + \
                 (SELECT count(*) FROM {schema}.groups WHERE group_key <> ''::bytea)"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}

/// The last message of a group is acknowledged while a send to the group
/// is under way in another transaction: the ack waits for the group's row,
/// then finds the new message and leaves the group in the round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_that_empties_a_group_waits_for_a_send_to_it() {
    use alk_store::jobs::SendOptions;

    let schema = fresh_schema();
    let e = Arc::new(engine(&schema).await);
    let q = Queue::open(&*e, "last").await.unwrap();
    let opts = SendOptions {
        group: Some("g".into()),
        ..Default::default()
    };
    q.send_with(&Payload::Text("first".into()), &opts, 0)
        .await
        .unwrap();
    let first = q.receive(1, Some(600_000), 0).await.unwrap().remove(0);
    // Another host's send, held open after its statement.
    let mut db = raw().await;
    let tx = db.transaction().await.unwrap();
    let send = crate::sql::Sql::for_schema(&schema).get(crate::sql::Q_SEND);
    let none_i32: Option<i32> = None;
    let none_i64: Option<i64> = None;
    tx.query(
        &send,
        &[
            &"last",
            &1i64,
            &vec!["text"],
            &vec![b"second".as_slice()],
            &0i64,
            &b"g".as_slice(),
            &0i32,
            &0i64,
            &none_i32,
            &none_i64,
            &none_i64,
        ],
    )
    .await
    .unwrap();
    let acker = {
        let q = q.clone();
        tokio::spawn(async move { q.ack(&first.receipt).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!acker.is_finished(), "the ack did not wait for the group");
    tx.commit().await.unwrap();
    acker.await.unwrap().unwrap();
    let got = q.receive(1, Some(600_000), 0).await.unwrap();
    assert_eq!(got.len(), 1, "the group left the round with a message");
    assert_eq!(got[0].payload, Payload::Text("second".into()));
}

/// A small deterministic random source for the operation mix below.
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<T: Clone>(&mut self, from: &[T]) -> T {
        from[self.below(from.len() as u64) as usize].clone()
    }
}

/// An outcome with the receipts and error texts left out: `Err` is the
/// error's kind.
fn outcome<T: std::fmt::Debug>(r: Result<T, AlkError>) -> String {
    match r {
        Ok(v) => format!("{v:?}"),
        Err(AlkError::StaleReceipt(_)) => "stale-receipt".into(),
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// Random sends, claims (with floors), acks, nacks, heartbeats, retries,
/// failures, cancels, sweeps and redrives on one queue, each applied to
/// this engine and to the in-memory one with the same clock: every answer
/// is the same, and so is every message at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_answers_as_the_memory_engine_does_over_random_operations() {
    use alk_store::jobs::{RetryDelay, SendOptions};
    use alk_store::memory::MemoryEngine;
    use alk_store::queue::Delivery;

    for seed in [0x9e37_79b9_7f4a_7c15_u64, 0xdead_beef_1234_5678, 42, 7] {
        let pg = engine(&fresh_schema()).await;
        let mem = MemoryEngine::new();
        let (qp, qm) = (
            Queue::open(&pg, "diff").await.unwrap(),
            Queue::open(&mem, "diff").await.unwrap(),
        );
        let (ep, em) = (
            pg.queue("diff").await.unwrap(),
            mem.queue("diff").await.unwrap(),
        );
        let mut dice = Dice(seed);
        let mut now: i64 = 1_000_000;
        // Receipts handed out, as (memory's, this engine's).
        let mut receipts: Vec<(String, String)> = vec![("garbage".into(), "garbage".into())];
        let mut last_id: u64 = 0;
        let shown = |d: &[Delivery]| {
            d.iter()
                .map(|d| {
                    format!(
                        "{} {:?} {} {} {:?} {:?}",
                        d.id, d.payload, d.attempt, d.priority, d.group, d.max_attempts
                    )
                })
                .collect::<Vec<_>>()
        };
        for step in 0..1_200 {
            now += dice.below(40) as i64;
            let what = dice.below(100);
            let ctx = format!("seed {seed:x} step {step} op {what} at {now}");
            let receipt = dice.pick(&receipts);
            match what {
                0..=24 => {
                    let o = SendOptions {
                        priority: dice.pick(&[None, Some(0), Some(3), Some(-1)]),
                        delay_ms: dice.pick(&[None, None, Some(0), Some(25), Some(120)]),
                        max_attempts: dice.pick(&[None, None, Some(1), Some(2), Some(3)]),
                        backoff_base_ms: dice.pick(&[None, Some(10), Some(40)]),
                        expires_in_ms: dice.pick(&[None, None, None, Some(60), Some(400)]),
                        group: dice
                            .pick(&[None, None, Some("a"), Some("b"), Some("c")])
                            .map(String::from),
                        ..Default::default()
                    };
                    let n = 1 + dice.below(3) as usize;
                    let bodies: Vec<Payload> = (0..n)
                        .map(|i| Payload::Text(format!("{step}.{i}")))
                        .collect();
                    let a = qm.send_batch_with(&bodies, &o, now).await.unwrap();
                    let b = qp.send_batch_with(&bodies, &o, now).await.unwrap();
                    assert_eq!(a, b, "{ctx}");
                    last_id = last_id.max(*a.last().unwrap() as u64);
                }
                25..=49 => {
                    let max = 1 + dice.below(4) as u32;
                    let vis = dice.pick(&[10, 50, 200]);
                    let floor = dice.pick(&[None, None, Some(0), Some(3)]);
                    let a = qm.claim(max, Some(vis), floor, now).await.unwrap();
                    let b = qp.claim(max, Some(vis), floor, now).await.unwrap();
                    assert_eq!(shown(&a), shown(&b), "{ctx}");
                    for (x, y) in a.iter().zip(&b) {
                        receipts.push((x.receipt.clone(), y.receipt.clone()));
                    }
                }
                50..=57 => {
                    let a = outcome(qm.ack(&receipt.0).await);
                    let b = outcome(qp.ack(&receipt.1).await);
                    assert_eq!(a, b, "{ctx}");
                }
                58..=61 => {
                    let a = outcome(qm.nack(&receipt.0, now).await);
                    let b = outcome(qp.nack(&receipt.1, now).await);
                    assert_eq!(a, b, "{ctx}");
                }
                62..=65 => {
                    let ext = dice.pick(&[5, 60]);
                    let a = outcome(qm.heartbeat(&receipt.0, ext, now).await);
                    let b = outcome(qp.heartbeat(&receipt.1, ext, now).await);
                    assert_eq!(a, b, "{ctx}");
                }
                66..=73 => {
                    let delay = if dice.below(2) == 0 {
                        RetryDelay::Fixed(dice.pick(&[0, 30]))
                    } else {
                        RetryDelay::Backoff(dice.next())
                    };
                    let a = outcome(qm.retry_with(&receipt.0, "boom", delay, now).await);
                    let b = outcome(qp.retry_with(&receipt.1, "boom", delay, now).await);
                    assert_eq!(a, b, "{ctx}");
                }
                74..=77 => {
                    let a = outcome(qm.fail(&receipt.0, "bad", now).await);
                    let b = outcome(qp.fail(&receipt.1, "bad", now).await);
                    assert_eq!(a, b, "{ctx}");
                }
                78..=80 => {
                    let id = 1 + dice.below(last_id + 1);
                    assert_eq!(
                        qm.cancel(id).await.unwrap(),
                        qp.cancel(id).await.unwrap(),
                        "{ctx}"
                    );
                }
                81..=84 => {
                    let id = 1 + dice.below(last_id + 1);
                    assert_eq!(
                        qm.job(id, now).await.unwrap(),
                        qp.job(id, now).await.unwrap(),
                        "{ctx}"
                    );
                }
                85..=86 => {
                    assert_eq!(
                        qm.sweep_expired(now).await.unwrap(),
                        qp.sweep_expired(now).await.unwrap(),
                        "{ctx}"
                    );
                }
                87..=89 => {
                    let from = dice.below(last_id + 1);
                    let after = dice.pick(&[None, Some(from)]);
                    let max = 1 + dice.below(5) as u32;
                    assert_eq!(
                        qm.dead_letters(after, max, now).await.unwrap(),
                        qp.dead_letters(after, max, now).await.unwrap(),
                        "{ctx}"
                    );
                }
                90..=93 => {
                    let ids: Vec<u64> = (0..1 + dice.below(3))
                        .map(|_| 1 + dice.below(last_id + 1))
                        .collect();
                    assert_eq!(
                        qm.redrive(&ids, now).await.unwrap(),
                        qp.redrive(&ids, now).await.unwrap(),
                        "{ctx}"
                    );
                }
                94..=96 => {
                    let picked: Vec<(String, String)> = (0..1 + dice.below(3))
                        .map(|_| dice.pick(&receipts))
                        .collect();
                    let a: Vec<String> = picked.iter().map(|r| r.0.clone()).collect();
                    let b: Vec<String> = picked.iter().map(|r| r.1.clone()).collect();
                    assert_eq!(
                        qm.ack_batch(&a).await.unwrap(),
                        qp.ack_batch(&b).await.unwrap(),
                        "{ctx}"
                    );
                }
                97 => {
                    assert_eq!(
                        em.next_visible().await.unwrap(),
                        ep.next_visible().await.unwrap(),
                        "{ctx}"
                    );
                }
                98 => {
                    if dice.below(4) == 0 {
                        qm.purge().await.unwrap();
                        qp.purge().await.unwrap();
                    }
                }
                _ => {
                    if dice.below(4) == 0 {
                        assert_eq!(
                            qm.purge_dead().await.unwrap(),
                            qp.purge_dead().await.unwrap(),
                            "{ctx}"
                        );
                    }
                }
            }
        }
        for id in 1..=last_id {
            assert_eq!(
                qm.job(id, now).await.unwrap(),
                qp.job(id, now).await.unwrap(),
                "seed {seed:x}: message {id} at the end"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_one_busy_line_without_the_password() {
    let url = "postgres://alk:hunter2-secret@127.0.0.1:1/postgres";
    match PostgresEngine::connect_url(url).await {
        Err(AlkError::Busy(m)) => {
            assert!(
                m.starts_with("cannot reach postgres at 127.0.0.1:1: "),
                "{m}"
            );
            assert!(!m.contains("hunter2") && !m.contains('\n'), "{m}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("connected to port 1"),
    }
    let wrong = alk_pg_cluster::test_url().replace("alk-test-secret", "wrong-secret");
    match PostgresEngine::connect_url(&wrong).await {
        Err(AlkError::Busy(m)) => {
            assert!(m.contains("password authentication failed"), "{m}");
            assert!(!m.contains("wrong-secret"), "{m}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("logged in with a wrong password"),
    }
}

/// Two publishers of one stream interleave their commits: the second's
/// offset is assigned only after the first commits, so a reader never sees
/// a higher offset before a lower one (it would skip it for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interleaved_publishers_never_let_a_reader_skip_an_offset() {
    let schema = fresh_schema();
    let (a, b) = (engine(&schema).await, engine(&schema).await);
    let (sa, sb) = (
        Streams::open(&a, StreamLimits::default()).await.unwrap(),
        Streams::open(&b, StreamLimits::default()).await.unwrap(),
    );
    sa.publish("s", None, b"0", 0).await.unwrap();
    let first = sa.transaction();
    assert_eq!(first.publish("s", None, b"1", 0).await.unwrap(), 2);
    // The second publisher commits on its own while the first is open.
    let second = tokio::spawn(async move { sb.publish("s", None, b"2", 0).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Whatever the second publisher did meanwhile, a reader sees only
    // offset 1: offset 3 is not visible ahead of the open offset 2.
    let seen: Vec<u64> = sa
        .read_since("s", 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.offset)
        .collect();
    assert_eq!(seen, [1]);
    first.commit().await.unwrap();
    assert_eq!(second.await.unwrap().unwrap(), 3);
    let seen: Vec<u64> = sa
        .read_since("s", 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.offset)
        .collect();
    assert_eq!(seen, [1, 2, 3]);
}

/// Many publishers on several engines, each committing after a random
/// pause inside its transaction, and a reader that follows the stream: it
/// sees every offset, each exactly once, in order, without a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_following_reader_sees_every_offset_of_racing_publishers() {
    let schema = fresh_schema();
    let publishers = 6;
    let per = 40;
    let mut tasks = Vec::new();
    for p in 0..publishers {
        let e = engine(&schema).await;
        tasks.push(tokio::spawn(async move {
            let s = Streams::open(&e, StreamLimits::default()).await.unwrap();
            for i in 0..per {
                let tx = s.transaction();
                tx.publish("race", None, format!("{p}/{i}").as_bytes(), 0)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(rand_ms(p * 1000 + i))).await;
                tx.commit().await.unwrap();
            }
        }));
    }
    let reader = engine(&schema).await;
    let s = Streams::open(&reader, StreamLimits::default())
        .await
        .unwrap();
    let total = publishers * per;
    let mut last = 0;
    while last < total {
        for e in s.read_since("race", last, 7).await.unwrap() {
            assert_eq!(
                e.offset,
                last + 1,
                "the reader skipped or repeated an offset"
            );
            last = e.offset;
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// A small deterministic pause (0–3 ms) per step.
fn rand_ms(seed: u64) -> u64 {
    (seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        >> 33)
        % 4
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_if_absent_and_claims_have_exactly_one_winner_across_connections() {
    let schema = fresh_schema();
    let mut engines = Vec::new();
    for _ in 0..4 {
        engines.push(Arc::new(engine(&schema).await));
    }
    for round in 0..20 {
        let mut racers = Vec::new();
        for i in 0..16 {
            let e = engines[i % engines.len()].clone();
            racers.push(tokio::spawn(async move {
                let kv = Bucket::open(&*e, "race", KvLimits::default())
                    .await
                    .unwrap();
                kv.set_if_absent(&format!("r{round}"), b"x", None, 0)
                    .await
                    .unwrap()
            }));
        }
        let mut winners = 0;
        for r in racers {
            winners += usize::from(r.await.unwrap());
        }
        assert_eq!(winners, 1, "round {round}");
    }
    let q = Queue::open(&*engines[0], "once").await.unwrap();
    let bodies: Vec<Payload> = (0..400).map(|i| Payload::Text(i.to_string())).collect();
    for chunk in bodies.chunks(100) {
        q.send_batch(chunk, 0).await.unwrap();
    }
    let mut claimers = Vec::new();
    for i in 0..8 {
        let e = engines[i % engines.len()].clone();
        claimers.push(tokio::spawn(async move {
            let q = Queue::open(&*e, "once").await.unwrap();
            let mut got = Vec::new();
            loop {
                let batch = q.receive(7, Some(600_000), 0).await.unwrap();
                if batch.is_empty() {
                    return got;
                }
                got.extend(batch.into_iter().map(|d| d.id));
            }
        }));
    }
    let mut all = Vec::new();
    for c in claimers {
        all.extend(c.await.unwrap());
    }
    all.sort_unstable();
    assert_eq!(
        all,
        (1..=400).collect::<Vec<i64>>(),
        "a message was claimed twice or never"
    );
}

/// Expiry is judged by the database's clock: a host whose clock runs an
/// hour ahead still sees a lock held and a message in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_clock_judges_across_skewed_hosts() {
    let schema = fresh_schema();
    let (right, ahead) = (engine(&schema).await, engine(&schema).await);
    let hour = 3_600_000;
    // The host of `ahead` reads its clock an hour fast; its measurement of
    // the database's clock says so (the test sets what it would measure).
    let measured = right
        .inner
        .clock
        .0
        .load(std::sync::atomic::Ordering::Relaxed);
    ahead
        .inner
        .clock
        .0
        .store(measured - hour, std::sync::atomic::Ordering::Relaxed);
    let now = super::host_now();
    let locks = Locks::open(&right).await.unwrap();
    let held = locks
        .try_lock("l", "right", 10_000, now)
        .await
        .unwrap()
        .unwrap();
    let skewed = Locks::open(&ahead).await.unwrap();
    assert!(
        skewed
            .try_lock("l", "ahead", 10_000, now + hour)
            .await
            .unwrap()
            .is_none()
    );
    let holder = skewed.holder("l", now + hour).await.unwrap().unwrap();
    assert_eq!(holder.owner, "right");
    // The deadline reads in each host's own clock.
    assert_eq!(
        holder.expires_at - hour,
        locks.holder("l", now).await.unwrap().unwrap().expires_at
    );
    assert!(locks.release(&held, now).await.unwrap());
    let q = Queue::open(&right, "skew").await.unwrap();
    q.send(&Payload::Text("m".into()), now).await.unwrap();
    assert_eq!(q.receive(1, Some(10_000), now).await.unwrap().len(), 1);
    let q_ahead = Queue::open(&ahead, "skew").await.unwrap();
    assert!(
        q_ahead
            .receive(1, Some(10_000), now + hour)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notify_on_one_engine_wakes_a_listener_on_another() {
    let schema = fresh_schema();
    let (a, b) = (engine(&schema).await, engine(&schema).await);
    let mut listener = Channels::open(&a).unwrap().listen("c").unwrap();
    // Waiting starts the listening side; give it a moment, then notify
    // until woken (a notification before LISTEN took effect is lost, as
    // any wake may be; the waiter re-reads).
    let notifier = Channels::open(&b).unwrap();
    let woke = tokio::spawn(async move {
        listener
            .wait(Some(tokio::time::Instant::now() + Duration::from_secs(20)))
            .await
    });
    for _ in 0..100 {
        notifier.notify("c").unwrap();
        if woke.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        woke.await.unwrap(),
        "the listener was not woken by the other engine"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clocks_that_agree_within_the_noise_are_not_corrected() {
    // Host and database run on one machine here: no skew to correct, so
    // times pass through unchanged and every host judges by its own clock.
    let e = engine(&fresh_schema()).await;
    assert_eq!(e.inner.clock.to_db(1_000), 1_000);
    assert_eq!(e.inner.clock.to_host(1_000), 1_000);
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

/// `relaxed` is the sessions' `synchronous_commit = off`; `full` leaves the
/// server's setting (on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relaxed_durability_turns_synchronous_commit_off_for_the_engines_sessions() {
    for (relaxed, want) in [(true, "off"), (false, "on")] {
        let e = PostgresEngine::connect(options(&fresh_schema()).relaxed(relaxed))
            .await
            .unwrap();
        let conn = e.inner.conn().await.unwrap();
        let row = conn
            .query_one("SHOW synchronous_commit", &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), want, "relaxed = {relaxed}");
    }
}
