//! Queues across engines: racing claimers and the groups' rows, and the
//! same answers as the memory engine over random operations.

use super::*;

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
        (1..=total as u64).collect::<Vec<u64>>(),
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
                        em.next_visible(0).await.unwrap(),
                        ep.next_visible(0).await.unwrap(),
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
