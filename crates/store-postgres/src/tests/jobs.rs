//! What queues gained with `alk:store@0.1.4`, as only a shared database
//! can show it: the move from version 3, unique keys, group windows, caps
//! and rates held exactly by claimers and senders on many engines.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use alk_store::jobs::{QueueLimits, SendOptions, UniqueOptions};
use alk_store::rate::{Limiters, RateLimit, Taken};

use super::*;

fn text(s: &str) -> Payload {
    Payload::Text(s.into())
}

fn unique(key: &str) -> UniqueOptions {
    UniqueOptions {
        key: key.into(),
        for_ms: None,
    }
}

/// A rate that never refills within a test.
const DAILY: RateLimit = RateLimit {
    capacity: 10,
    refill: 10,
    interval_ms: 86_400_000,
};

/// A version-3 schema with rows in every table is brought to version 4 in
/// place by the first of two engines starting at once: every row stays as
/// it was, the new tables start empty, and the old queue takes limits,
/// unique keys and results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_schema_migrates_to_version_4_keeping_every_row() {
    let schema = fresh_schema();
    let db = raw().await;
    let sql = crate::sql::Sql::for_schema(&schema);
    db.batch_execute(&format!(
        "CREATE SCHEMA {schema}; {} {} {} UPDATE {schema}.meta SET value = '3' WHERE key = 'version';",
        sql.get(crate::sql::MIGRATIONS[0]),
        sql.get(crate::sql::MIGRATIONS[1]),
        sql.get(crate::sql::MIGRATIONS[2]),
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
         INSERT INTO {schema}.locks VALUES ('l', 'owner', 7, 0, 9000000000000); \
         INSERT INTO {schema}.schedules (name, spec, every_ms, queue, payload_type, payload_data, next_due) \
           VALUES ('tick', '@every 1s', 1000, 'q', 'text', 'tick', 5000);"
    ))
    .await
    .unwrap();
    let before = snapshot(&db, &schema).await;
    let (e, _other) = tokio::join!(engine(&schema), engine(&schema));
    let after = snapshot(&db, &schema).await;
    let added = [
        "meta",
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
    for table in &added[1..] {
        assert!(after.iter().any(|r| r == table), "{table}: {after:?}");
        assert!(
            !after.iter().any(|r| r.starts_with(&format!("{table}: "))),
            "{table} is not empty: {after:?}"
        );
    }
    let meta: Vec<String> = after
        .iter()
        .filter(|r| r.starts_with("meta: "))
        .cloned()
        .collect();
    assert_eq!(meta, ["meta: (format,alk-postgres)", "meta: (version,4)"]);

    // The old queue has the default limits and is claimed as before: the
    // group's second message waits for the first, in flight.
    let q = Queue::open(&e, "q").await.unwrap();
    assert_eq!(q.limits().await.unwrap(), QueueLimits::default());
    let got = q.receive(10, Some(600_000), 1_000).await.unwrap();
    assert_eq!(got.iter().map(|d| d.id).collect::<Vec<_>>(), [3]);
    // A window of two lets it go.
    q.set_limits(&QueueLimits {
        group_concurrency: 2,
        ..Default::default()
    })
    .await
    .unwrap();
    let got = q.receive(10, Some(600_000), 1_000).await.unwrap();
    assert_eq!(got.iter().map(|d| d.id).collect::<Vec<_>>(), [2]);
    // The delivery made before the migration completes with a result.
    assert!(
        q.complete(&format!("1:{claim}"), &text("done"), None, 1_000)
            .await
            .unwrap()
    );
    assert_eq!(
        q.result(1, 1_001).await.unwrap().unwrap().payload,
        text("done")
    );
    let sent = q
        .send_unique(&text("u"), &SendOptions::default(), &unique("k"), 1_000)
        .await
        .unwrap();
    assert_eq!((sent.id, sent.duplicate), (5, false));
    let again = q
        .send_unique(&text("u"), &SendOptions::default(), &unique("k"), 1_000)
        .await
        .unwrap();
    assert_eq!((again.id, again.duplicate), (5, true));
    let limiters = Limiters::open(&e).await.unwrap();
    assert_eq!(
        limiters.try_take("api", &DAILY, 4, 0).await.unwrap(),
        Taken::Granted(6)
    );
    // A later start finds version 4 and changes nothing.
    let settled = snapshot(&db, &schema).await;
    drop(engine(&schema).await);
    assert_eq!(snapshot(&db, &schema).await, settled);
}

/// Eight engines (eight pools of connections, as eight hosts would have)
/// sending one unique key 125 times each at once store exactly one
/// message, and every send names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_unique_key_sent_from_eight_engines_stores_one_message() {
    let schema = fresh_schema();
    let mut tasks = Vec::new();
    for s in 0..8 {
        let e = engine(&schema).await;
        tasks.push(tokio::spawn(async move {
            let q = Queue::open(&e, "u").await.unwrap();
            let mut out = Vec::new();
            for i in 0..125 {
                let sent = q
                    .send_unique(
                        &text(&format!("{s}/{i}")),
                        &SendOptions::default(),
                        &unique("the-key"),
                        0,
                    )
                    .await
                    .unwrap();
                out.push(sent);
            }
            out
        }));
    }
    let mut sent = Vec::new();
    for t in tasks {
        sent.extend(t.await.unwrap());
    }
    assert_eq!(sent.len(), 1_000);
    assert_eq!(sent.iter().filter(|s| !s.duplicate).count(), 1);
    let id = sent.iter().find(|s| !s.duplicate).unwrap().id;
    assert!(sent.iter().all(|s| s.id == id));
    let e = engine(&schema).await;
    let q = Queue::open(&e, "u").await.unwrap();
    let live = q.jobs(None, 100, 0).await.unwrap();
    assert_eq!(live.iter().map(|j| j.id).collect::<Vec<_>>(), [id]);
    let db = raw().await;
    let keys: i64 = db
        .query_one(&format!("SELECT count(*) FROM {schema}.unique_keys"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(keys, 1);
}

/// Senders of one key and consumers that acknowledge at once, on several
/// engines: the key is taken anew each time its message leaves, and the
/// queue never holds two live messages of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_unique_key_is_taken_anew_once_its_message_leaves_never_twice_at_once() {
    let schema = fresh_schema();
    let done = Arc::new(AtomicUsize::new(0));
    let fresh = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for s in 0..4 {
        let e = engine(&schema).await;
        let (done, fresh) = (done.clone(), fresh.clone());
        tasks.push(tokio::spawn(async move {
            let q = Queue::open(&e, "u").await.unwrap();
            let mut i = 0;
            while done.load(Ordering::SeqCst) < 2 {
                let sent = q
                    .send_unique(
                        &text(&format!("{s}/{i}")),
                        &SendOptions::default(),
                        &unique("k"),
                        0,
                    )
                    .await
                    .unwrap();
                if !sent.duplicate {
                    fresh.fetch_add(1, Ordering::SeqCst);
                }
                i += 1;
                // Other tests share the server: race, but do not flood it.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }));
    }
    for _ in 0..2 {
        let e = engine(&schema).await;
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let q = Queue::open(&e, "u").await.unwrap();
            let mut acked = 0;
            while acked < 25 {
                let got = q.receive(5, Some(600_000), 0).await.unwrap();
                assert!(got.len() <= 1, "two live messages of one key: {got:?}");
                let live = q.jobs(None, 10, 0).await.unwrap();
                assert!(live.len() <= 1, "two live messages of one key: {live:?}");
                for d in got {
                    q.ack(&d.receipt).await.unwrap();
                    acked += 1;
                }
            }
            done.fetch_add(1, Ordering::SeqCst);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Every fresh send was a message of its own: 50 acknowledged, at most
    // one left.
    let e = engine(&schema).await;
    let q = Queue::open(&e, "u").await.unwrap();
    let left = q.jobs(None, 10, 0).await.unwrap().len();
    assert!(left <= 1);
    assert_eq!(fresh.load(Ordering::SeqCst), 50 + left);
}

/// Claimers on three engines over groups with a window of three: every
/// message is delivered once, and a group never has more than three in
/// flight (it does have more than one).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn group_windows_hold_for_claimers_on_many_engines() {
    let schema = fresh_schema();
    let mut engines = Vec::new();
    for _ in 0..3 {
        engines.push(Arc::new(engine(&schema).await));
    }
    let q = Queue::open(&*engines[0], "w").await.unwrap();
    q.set_limits(&QueueLimits {
        group_concurrency: 3,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut total = 0;
    for g in 0..4 {
        let opts = SendOptions {
            group: Some(format!("g{g}")),
            ..Default::default()
        };
        let bodies: Vec<Payload> = (0..25).map(|i| text(&format!("g{g}/{i}"))).collect();
        q.send_batch_with(&bodies, &opts, 0).await.unwrap();
        total += bodies.len();
    }
    let plain: Vec<Payload> = (0..20).map(|i| text(&format!("u/{i}"))).collect();
    q.send_batch(&plain, 0).await.unwrap();
    total += plain.len();
    let in_flight = Arc::new(Mutex::new(HashMap::<String, usize>::new()));
    let most = Arc::new(AtomicUsize::new(0));
    let mut claimers = Vec::new();
    for i in 0..6 {
        let e = engines[i % engines.len()].clone();
        let (in_flight, most) = (in_flight.clone(), most.clone());
        claimers.push(tokio::spawn(async move {
            let q = Queue::open(&*e, "w").await.unwrap();
            let mut got = Vec::new();
            let mut idle = 0;
            while idle < 20 {
                let batch = q.receive(4, Some(600_000), 0).await.unwrap();
                if batch.is_empty() {
                    idle += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                idle = 0;
                for d in &batch {
                    if let Some(g) = &d.group {
                        let mut m = in_flight.lock().unwrap();
                        let n = m.entry(g.clone()).or_default();
                        *n += 1;
                        assert!(*n <= 3, "{n} messages of group {g} in flight");
                        most.fetch_max(*n, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                for d in batch {
                    if let Some(g) = &d.group {
                        *in_flight.lock().unwrap().get_mut(g).unwrap() -= 1;
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
    assert_eq!(all, (1..=total as u64).collect::<Vec<u64>>());
    assert!(most.load(Ordering::SeqCst) > 1, "the window was never used");
}

/// A cap of five in flight holds for claimers on three engines, and a rate
/// of ten tokens gives exactly ten messages to claimers and takers racing
/// on three engines.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn caps_and_rates_hold_exactly_across_engines() {
    let schema = fresh_schema();
    let mut engines = Vec::new();
    for _ in 0..3 {
        engines.push(Arc::new(engine(&schema).await));
    }
    let q = Queue::open(&*engines[0], "cap").await.unwrap();
    q.set_limits(&QueueLimits {
        max_in_flight: Some(5),
        ..Default::default()
    })
    .await
    .unwrap();
    let bodies: Vec<Payload> = (0..60).map(|i| text(&format!("m{i}"))).collect();
    q.send_batch(&bodies, 0).await.unwrap();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let e = engines[i % engines.len()].clone();
        let (in_flight, most) = (in_flight.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            let q = Queue::open(&*e, "cap").await.unwrap();
            let mut got = 0;
            let mut idle = 0;
            while idle < 30 {
                let batch = q.receive(3, Some(600_000), 0).await.unwrap();
                if batch.is_empty() {
                    idle += 1;
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    continue;
                }
                idle = 0;
                let n = in_flight.fetch_add(batch.len(), Ordering::SeqCst) + batch.len();
                assert!(n <= 5, "{n} in flight with a cap of 5");
                most.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                in_flight.fetch_sub(batch.len(), Ordering::SeqCst);
                for d in batch {
                    q.ack(&d.receipt).await.unwrap();
                    got += 1;
                }
            }
            got
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, 60);
    assert!(most.load(Ordering::SeqCst) > 1);

    // A rate: claims and takes share ten tokens, exactly.
    let r = Queue::open(&*engines[0], "rate").await.unwrap();
    r.set_limits(&QueueLimits {
        rate: Some(DAILY),
        ..Default::default()
    })
    .await
    .unwrap();
    let bodies: Vec<Payload> = (0..40).map(|i| text(&format!("r{i}"))).collect();
    r.send_batch(&bodies, 0).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..6 {
        let e = engines[i % engines.len()].clone();
        tasks.push(tokio::spawn(async move {
            let q = Queue::open(&*e, "rate").await.unwrap();
            let mut got = 0;
            for _ in 0..10 {
                if i % 3 == 0 {
                    if let Taken::Granted(_) = q.try_take(1, None, 0).await.unwrap() {
                        got += 1;
                    }
                } else {
                    got += q.receive(2, Some(600_000), 0).await.unwrap().len();
                }
            }
            got
        }));
    }
    let mut used = 0;
    for t in tasks {
        used += t.await.unwrap();
    }
    assert_eq!(used, 10);
    let until = engines[1]
        .queue("rate")
        .await
        .unwrap()
        .throttled_until(0)
        .await
        .unwrap();
    assert_eq!(until, Some(86_400_000));

    // Free-standing buckets: twenty tokens, eight engines, exactly twenty
    // granted.
    let granted = Arc::new(AtomicUsize::new(0));
    let rate = RateLimit {
        capacity: 20,
        refill: 1,
        interval_ms: 86_400_000,
    };
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let e = engine(&schema).await;
        let granted = granted.clone();
        tasks.push(tokio::spawn(async move {
            let l = Limiters::open(&e).await.unwrap();
            for _ in 0..10 {
                if let Taken::Granted(_) = l.try_take("shared", &rate, 1, 0).await.unwrap() {
                    granted.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(granted.load(Ordering::SeqCst), 20);
}

/// Rows of buckets do not pile up: named buckets taken from ever new names
/// are forgotten once full again, and a queue's group buckets by
/// `sweep-expired`; a refused take writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_rows_are_forgotten_once_full_again() {
    let schema = fresh_schema();
    let e = engine(&schema).await;
    let db = raw().await;
    let count = async |table: &str| -> i64 {
        db.query_one(&format!("SELECT count(*) FROM {schema}.{table}"), &[])
            .await
            .unwrap()
            .get(0)
    };
    let l = Limiters::open(&e).await.unwrap();
    let rate = RateLimit {
        capacity: 2,
        refill: 1,
        interval_ms: 100,
    };
    for i in 0..200 {
        let taken = l.try_take(&format!("user-{i}"), &rate, 2, i * 1_000).await;
        assert_eq!(taken.unwrap(), Taken::Granted(0));
    }
    let rows = count("limiters").await;
    assert!(rows <= 2, "{rows} limiter rows left");
    // The newest row version: a write makes a new one.
    let newest = async || -> i64 {
        db.query_one(
            &format!("SELECT max(xmin::text::bigint) FROM {schema}.limiters"),
            &[],
        )
        .await
        .unwrap()
        .get(0)
    };
    let before = newest().await;
    assert_eq!(
        l.try_take("user-199", &rate, 2, 199_050).await.unwrap(),
        Taken::WaitMs(150)
    );
    let after = newest().await;
    assert_eq!(before, after, "a refused take wrote its row");

    let q = Queue::open(&e, "swept").await.unwrap();
    q.set_limits(&QueueLimits {
        rate: Some(rate),
        rate_per_group: true,
        ..QueueLimits::default()
    })
    .await
    .unwrap();
    for g in 0..50 {
        let options = SendOptions {
            group: Some(format!("g{g}")),
            ..SendOptions::default()
        };
        q.send_with(&text("m"), &options, 0).await.unwrap();
    }
    assert_eq!(q.claim(100, Some(60_000), None, 1).await.unwrap().len(), 50);
    // A bucket per group, and the lane's (held by every claim).
    assert_eq!(count("rate_buckets").await, 51);
    // Not full yet at 150 ms (one token of two back): kept.
    q.sweep_expired(150).await.unwrap();
    assert!(count("rate_buckets").await >= 50);
    q.sweep_expired(201).await.unwrap();
    assert_eq!(count("rate_buckets").await, 0);
}
