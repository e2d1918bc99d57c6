//! What holds between engines on one schema: exactly one winner across
//! connections, the database's clock judging skewed hosts, and wakes from
//! one engine to another.

use super::*;

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
        (1..=400).collect::<Vec<u64>>(),
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
    let now = crate::clock::host_now();
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
