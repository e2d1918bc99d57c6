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
            ("version".into(), "1".into())
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
                   INSERT INTO {s}.meta VALUES ('format', 'alk-postgres'), ('version', '2')"
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
                assert_eq!(supported, "alk-postgres.v1", "{what}");
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
