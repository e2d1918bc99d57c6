//! Conformance cases of transactions across mechanisms, outboxes and
//! schedules.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::Engine;
use crate::error::AlkError;
use crate::jobs::{JobState, Retried, SendOptions};
use crate::limits::StreamLimits;
use crate::notify::{Channels, Listener};
use crate::outbox::{Outbox, RunOnce};
use crate::queue::{Payload, Queue};
use crate::schedule::{RunnerOptions, SCHEDULER_LOCK, Schedules, parse_spec};
use crate::stream::Streams;
use crate::time::{Clock, ManualClock};

fn text(s: &str) -> Payload {
    Payload::Text(s.into())
}

fn priority(p: i32) -> SendOptions {
    SendOptions {
        priority: Some(p),
        ..SendOptions::default()
    }
}

async fn woke(listener: &mut Listener) -> bool {
    listener
        .wait(Some(Instant::now() + Duration::from_millis(50)))
        .await
}

/// Everything in the claimable part of `queue` at `now`, claimed.
async fn drain(queue: &Queue, now: i64) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let got = queue.claim(1000, Some(60_000), None, now).await.unwrap();
        if got.is_empty() {
            return out;
        }
        for d in got {
            out.push(match d.payload {
                Payload::Text(t) | Payload::Json(t) => t,
            });
            queue.ack(&d.receipt).await.unwrap();
        }
    }
}

/// A transaction's publish, keyed publish, offset save, queue send (with
/// options), outbox send and notification are all invisible until commit
/// and all there after it; the notification is delivered after commit.
pub async fn tx_commit_applies_every_mechanism_at_once(engine: &dyn Engine) {
    let s = Streams::open(engine, StreamLimits::default())
        .await
        .unwrap();
    let jobs = Queue::open(engine, "tx-jobs").await.unwrap();
    let outbox = Outbox::open(engine, "tx-mail").await.unwrap();
    let mut listener = Channels::open(engine).unwrap().listen("tx-done").unwrap();
    s.publish("tx-in", None, b"source", 1_000).await.unwrap();

    let tx = s.transaction();
    assert_eq!(
        tx.publish("tx-out", None, b"plain", 1_000).await.unwrap(),
        1
    );
    assert_eq!(
        tx.publish("tx-out", Some("k"), b"keyed", 1_000)
            .await
            .unwrap(),
        2
    );
    tx.save_offset("tx-in", "worker", 1).await.unwrap();
    tx.enqueue(
        "tx-jobs",
        &[text("job-a"), text("job-b")],
        &priority(3),
        1_000,
    )
    .await
    .unwrap();
    tx.outbox_enqueue("tx-mail", &[text("mail")], &SendOptions::default(), 1_000)
        .await
        .unwrap();
    tx.notify("tx-done").await.unwrap();

    // Nothing is visible before the commit.
    assert!(s.read_since("tx-out", 0, 10).await.unwrap().is_empty());
    assert_eq!(s.get_offset("tx-in", "worker").await.unwrap(), None);
    assert!(jobs.claim(10, None, None, 1_000).await.unwrap().is_empty());
    assert_eq!(outbox.claim_one(None, 1_000).await.unwrap(), None);
    assert!(!woke(&mut listener).await, "notified before the commit");

    tx.commit().await.unwrap();
    let out = s.read_since("tx-out", 0, 10).await.unwrap();
    assert_eq!(
        out.iter()
            .map(|e| (e.key.clone(), e.payload.clone()))
            .collect::<Vec<_>>(),
        [
            (None, b"plain".to_vec()),
            (Some("k".into()), b"keyed".to_vec())
        ]
    );
    assert_eq!(s.get_offset("tx-in", "worker").await.unwrap(), Some(1));
    let got = jobs.claim(10, None, None, 1_000).await.unwrap();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|d| d.priority == 3));
    let mail = outbox.claim_one(None, 1_000).await.unwrap().unwrap();
    assert_eq!(mail.payload, text("mail"));
    assert!(woke(&mut listener).await, "the commit did not notify");
    // Committing again is refused; so is any later operation.
    assert!(matches!(
        tx.commit().await,
        Err(AlkError::InvalidArgument(_))
    ));
    assert!(matches!(
        tx.enqueue("tx-jobs", &[text("late")], &SendOptions::default(), 1_000)
            .await,
        Err(AlkError::InvalidArgument(_))
    ));
    assert!(matches!(
        tx.notify("tx-done").await,
        Err(AlkError::InvalidArgument(_))
    ));
}

/// Rolled back, dropped or held past its limit, a transaction leaves no
/// event, no offset, no job, no outbox job and no notification.
pub async fn tx_rollback_leaves_nothing_anywhere(engine: &dyn Engine) {
    let limits = StreamLimits {
        max_transaction: Duration::from_millis(300),
        ..StreamLimits::default()
    };
    let s = Streams::open(engine, limits).await.unwrap();
    let jobs = Queue::open(engine, "rb-jobs").await.unwrap();
    let outbox = Outbox::open(engine, "rb-mail").await.unwrap();
    let mut listener = Channels::open(engine).unwrap().listen("rb-done").unwrap();
    s.publish("rb-in", None, b"source", 0).await.unwrap();
    for ending in ["rollback", "drop", "watchdog"] {
        let tx = s.transaction();
        tx.publish("rb-out", Some("k"), b"x", 0).await.unwrap();
        tx.save_offset("rb-in", "worker", 1).await.unwrap();
        tx.enqueue("rb-jobs", &[text("ghost")], &priority(1), 0)
            .await
            .unwrap();
        tx.outbox_enqueue("rb-mail", &[text("ghost")], &SendOptions::default(), 0)
            .await
            .unwrap();
        tx.notify("rb-done").await.unwrap();
        match ending {
            "rollback" => tx.rollback().await,
            "drop" => drop(tx),
            _ => {
                tokio::time::sleep(Duration::from_millis(600)).await;
                assert!(matches!(
                    tx.commit().await,
                    Err(AlkError::TransactionAborted(_))
                ));
            }
        }
        // A dropped transaction is rolled back on the runtime: the next
        // transaction's first operation waits for it.
        let probe = s.transaction();
        probe.publish("rb-probe", None, b"p", 0).await.unwrap();
        probe.rollback().await;
        assert!(
            s.read_since("rb-out", 0, 10).await.unwrap().is_empty(),
            "{ending}"
        );
        assert_eq!(
            s.get_offset("rb-in", "worker").await.unwrap(),
            None,
            "{ending}"
        );
        assert!(
            jobs.claim(10, None, None, 0).await.unwrap().is_empty(),
            "{ending}"
        );
        assert_eq!(outbox.claim_one(None, 0).await.unwrap(), None, "{ending}");
        assert!(!woke(&mut listener).await, "{ending} notified");
    }
    // The same operations committed are all there.
    let tx = s.transaction();
    tx.enqueue("rb-jobs", &[text("real")], &SendOptions::default(), 0)
        .await
        .unwrap();
    tx.notify("rb-done").await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(drain(&jobs, 0).await, ["real"]);
    assert!(woke(&mut listener).await);
}

/// Bad names, options and payloads inside a transaction are refused with
/// their typed errors, write nothing and leave the transaction usable;
/// outbox backing queues cannot be named directly.
pub async fn tx_refusals_leave_the_transaction_usable(engine: &dyn Engine) {
    let s = Streams::open(engine, StreamLimits::default())
        .await
        .unwrap();
    let tx = s.transaction();
    let plain = SendOptions::default();
    assert!(matches!(
        tx.enqueue("__alkstore_outbox_x", &[text("x")], &plain, 0)
            .await,
        Err(AlkError::ReservedName(_))
    ));
    assert!(matches!(
        tx.enqueue("", &[text("x")], &plain, 0).await,
        Err(AlkError::InvalidName(_))
    ));
    assert!(matches!(
        tx.outbox_enqueue("a/b", &[text("x")], &plain, 0).await,
        Err(AlkError::InvalidName(_))
    ));
    assert!(matches!(
        tx.notify("__alkstore_x").await,
        Err(AlkError::ReservedName(_))
    ));
    let both = SendOptions {
        delay_ms: Some(1),
        run_at_ms: Some(1),
        ..SendOptions::default()
    };
    assert!(matches!(
        tx.enqueue("ok", &[text("x")], &both, 0).await,
        Err(AlkError::InvalidArgument(_))
    ));
    let big = Payload::Text("x".repeat(crate::limits::MAX_PAYLOAD_BYTES + 1));
    assert!(matches!(
        tx.enqueue("ok", &[big], &plain, 0).await,
        Err(AlkError::PayloadTooLarge { .. })
    ));
    assert!(matches!(
        tx.enqueue("ok", &[Payload::Json("{".into())], &plain, 0)
            .await,
        Err(AlkError::InvalidArgument(_))
    ));
    // Notifications are bounded per transaction; a repeated channel counts
    // once.
    for i in 0..crate::tx::MAX_TX_CHANNELS {
        tx.notify(&format!("ch-{i}")).await.unwrap();
    }
    tx.notify("ch-0").await.unwrap();
    assert!(matches!(
        tx.notify("one-too-many").await,
        Err(AlkError::InvalidArgument(_))
    ));
    tx.enqueue("ok", &[text("kept")], &plain, 0).await.unwrap();
    tx.commit().await.unwrap();
    let q = Queue::open(engine, "ok").await.unwrap();
    assert_eq!(drain(&q, 0).await, ["kept"]);
    assert!(matches!(
        Outbox::open(engine, "__alkstore_x").await,
        Err(AlkError::ReservedName(_))
    ));
    assert!(matches!(
        Queue::open(engine, "__alkstore_outbox_ok").await,
        Err(AlkError::ReservedName(_))
    ));
}

/// `run_once` acknowledges a job its worker succeeded with, and retries one
/// it failed with on the backoff curve; an idle outbox says so.
pub async fn outbox_run_once_acks_success_and_retries_failure(engine: &dyn Engine) {
    let outbox = Outbox::open(engine, "runs").await.unwrap();
    assert_eq!(outbox.name(), "runs");
    let clock = ManualClock::new(10_000);
    let now = || clock.now_ms();
    assert_eq!(
        outbox
            .run_once(None, &now, |_| async { Ok(()) })
            .await
            .unwrap(),
        RunOnce::Idle
    );
    let first = outbox
        .enqueue(&text("first"), &SendOptions::default(), 10_000)
        .await
        .unwrap();
    let second = outbox
        .enqueue(&text("second"), &SendOptions::default(), 10_000)
        .await
        .unwrap();
    let failed = outbox
        .run_once(None, &now, |job| async move {
            assert_eq!(job.payload, text("first"));
            Err("smtp down".to_string())
        })
        .await
        .unwrap();
    let RunOnce::Failed(id, Retried::Scheduled(at)) = failed else {
        panic!("{failed:?}")
    };
    assert_eq!(id, first);
    // The default backoff base is 1 s: the first retry waits 0.5 to 1 s.
    assert!((10_500..=11_000).contains(&at), "{at}");
    let info = outbox
        .queue()
        .job(first as u64, 10_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.last_error.as_deref(), Some("smtp down"));
    assert_eq!(info.state, JobState::Delayed);
    assert_eq!(
        outbox
            .run_once(None, &now, |job| async move {
                assert_eq!(job.payload, text("second"));
                Ok(())
            })
            .await
            .unwrap(),
        RunOnce::Done(second)
    );
    assert_eq!(
        outbox
            .run_once(None, &now, |_| async { Ok(()) })
            .await
            .unwrap(),
        RunOnce::Idle
    );
    clock.set(at);
    assert_eq!(
        outbox
            .run_once(None, &now, |job| async move {
                assert_eq!(job.attempt, 2);
                Ok(())
            })
            .await
            .unwrap(),
        RunOnce::Done(first)
    );
    assert_eq!(outbox.queue().job(first as u64, at).await.unwrap(), None);
}

/// Specs other than `@every <n><s|m|h|d>` are `invalid-spec`; a schedule
/// fires once per boundary however the clock steps, a downtime sends at
/// most the catch-up cap, replacing keeps the boundary when the interval is
/// kept, and two runners ticking together still send each boundary once.
pub async fn schedules_fire_once_per_boundary_with_bounded_catch_up(engine: &dyn Engine) {
    assert_eq!(parse_spec("@every 90s").unwrap(), 90_000);
    assert_eq!(parse_spec("@every 2d").unwrap(), 172_800_000);
    let schedules = Schedules::open(engine).await.unwrap();
    let payload = text("tick");
    for bad in [
        "*/5 * * * *",
        "@daily",
        "@every 0s",
        "@every 5",
        "@every 5x",
        "@every -1s",
        "@every  5s",
        "@every 1.5s",
        "@every 99999999999999999d",
        "@every 1é",
        "@every é",
        "@every ٣s",
        "",
    ] {
        assert!(
            matches!(
                schedules
                    .schedule("s", bad, "ticks", &payload, &SendOptions::default(), 0)
                    .await,
                Err(AlkError::InvalidSpec(_))
            ),
            "{bad:?}"
        );
    }
    assert!(matches!(
        schedules
            .schedule(
                "__alkstore_s",
                "@every 1s",
                "ticks",
                &payload,
                &SendOptions::default(),
                0
            )
            .await,
        Err(AlkError::ReservedName(_))
    ));
    assert!(matches!(
        schedules
            .schedule(
                "s",
                "@every 1s",
                "__alkstore_q",
                &payload,
                &SendOptions::default(),
                0
            )
            .await,
        Err(AlkError::ReservedName(_))
    ));
    assert!(schedules.list().await.unwrap().is_empty());

    let t0 = 1_000_000;
    schedules
        .schedule("ticker", "@every 1s", "ticks", &payload, &priority(2), t0)
        .await
        .unwrap();
    let row = schedules.get("ticker").await.unwrap().unwrap();
    assert_eq!((row.every_ms, row.next_due), (1_000, t0 + 1_000));
    assert_eq!(row.options, priority(2));
    let ticks = Queue::open(engine, "ticks").await.unwrap();
    assert_eq!(schedules.tick(t0 + 999, 64).await.unwrap(), 0);
    // Ten minutes of a one-second schedule, the runner looking in at
    // uneven steps (0.25 s to 1.75 s): one job per boundary.
    let mut now = t0;
    let mut sent = 0;
    let steps = [250, 1_750, 1_000, 500, 1_250, 1_000];
    let mut i = 0;
    while now < t0 + 600_000 {
        now = (now + steps[i % steps.len()]).min(t0 + 600_000);
        i += 1;
        sent += schedules.tick(now, 64).await.unwrap();
    }
    assert_eq!(sent, 600);
    let got = ticks.claim(1000, Some(60_000), None, now).await.unwrap();
    assert_eq!(got.len(), 600);
    assert!(got.iter().all(|d| d.priority == 2 && d.payload == payload));
    // A downtime of 1,000 boundaries: the cap, then the next boundary is
    // the first one after the downtime.
    now += 1_000_000;
    assert_eq!(schedules.tick(now, 64).await.unwrap(), 64);
    assert_eq!(schedules.tick(now, 64).await.unwrap(), 0);
    let next = schedules.get("ticker").await.unwrap().unwrap().next_due;
    assert_eq!(next, now + 1_000);
    // A writer that read the schedule before a firing and stores it back
    // with the same interval does not move its boundary back (the engine
    // keeps the stored one): nothing fires twice.
    let stale = schedules.get("ticker").await.unwrap().unwrap();
    assert_eq!(schedules.tick(next, 64).await.unwrap(), 1);
    engine.schedules().await.unwrap().put(&stale).await.unwrap();
    assert_eq!(
        schedules.get("ticker").await.unwrap().unwrap().next_due,
        next + 1_000
    );
    assert_eq!(schedules.tick(next, 64).await.unwrap(), 0);
    let next = next + 1_000;
    // Two runners ticking at once: each boundary still fires once.
    let other = Schedules::open(engine).await.unwrap();
    now = next + 2_500;
    let (a, b) = tokio::join!(schedules.tick(now, 64), other.tick(now, 64));
    assert_eq!(a.unwrap() + b.unwrap(), 3);
    // Replacing with the same interval keeps the boundary; another
    // interval starts over from now.
    schedules
        .schedule(
            "ticker",
            "@every 1s",
            "ticks",
            &text("new"),
            &SendOptions::default(),
            now,
        )
        .await
        .unwrap();
    assert_eq!(
        schedules.get("ticker").await.unwrap().unwrap().next_due,
        next + 3_000
    );
    schedules
        .schedule(
            "ticker",
            "@every 1m",
            "ticks",
            &text("new"),
            &SendOptions::default(),
            now,
        )
        .await
        .unwrap();
    let row = schedules.get("ticker").await.unwrap().unwrap();
    assert_eq!(
        (row.next_due, row.spec.as_str()),
        (now + 60_000, "@every 1m")
    );
    assert!(schedules.unschedule("ticker").await.unwrap());
    assert!(!schedules.unschedule("ticker").await.unwrap());
    assert_eq!(schedules.tick(now + 10_000_000, 64).await.unwrap(), 0);
}

/// Of three runners one leads and fires; when it dies without releasing,
/// another takes over once the lock's TTL has passed; a leader that
/// cannot renew in time reports the loss.
pub async fn scheduler_runners_elect_one_leader_and_report_loss(engine: &dyn Engine) {
    let schedules = Schedules::open(engine).await.unwrap();
    // The leadership lock has a reserved name: only the engine's lock
    // store itself can look at it.
    let locks = engine.locks().await.unwrap();
    let clock = Arc::new(ManualClock::new(5_000_000));
    schedules
        .schedule(
            "lead",
            "@every 1s",
            "lead-q",
            &text("x"),
            &SendOptions::default(),
            clock.now_ms(),
        )
        .await
        .unwrap();
    let ttl = 3_000;
    let mut runners = Vec::new();
    for i in 0..3 {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let s = schedules.clone();
        let c: Arc<dyn Clock> = clock.clone();
        let options = RunnerOptions {
            owner: format!("runner-{i}"),
            leader_ttl_ms: ttl,
            catch_up: 64,
            poll: Duration::from_millis(5),
            events: None,
        };
        let task = tokio::spawn(async move {
            s.run(&options, c, async {
                let _ = stopped.await;
            })
            .await
        });
        runners.push((format!("runner-{i}"), Some(stop), task));
    }
    let holder = async || {
        for _ in 0..400 {
            if let Some(h) = locks.holder(SCHEDULER_LOCK, clock.now_ms()).await.unwrap() {
                return h;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("no runner took the leadership");
    };
    let first = holder().await;
    // The leader fires; boundaries pass in steps the others see too.
    let q = Queue::open(engine, "lead-q").await.unwrap();
    for _ in 0..3 {
        clock.advance(1_000);
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    assert_eq!(drain(&q, clock.now_ms()).await.len(), 3);
    assert_eq!(
        locks
            .holder(SCHEDULER_LOCK, clock.now_ms())
            .await
            .unwrap()
            .unwrap()
            .owner,
        first.owner
    );
    // The leader dies without releasing: nobody leads until its TTL has
    // passed, then another runner does.
    let at = runners.iter().position(|r| r.0 == first.owner).unwrap();
    runners[at].2.abort();
    let died_at = clock.now_ms();
    let expires = locks
        .holder(SCHEDULER_LOCK, died_at)
        .await
        .unwrap()
        .unwrap()
        .expires_at;
    assert!(expires <= died_at + ttl as i64);
    clock.set(expires);
    let second = holder().await;
    assert_ne!(second.owner, first.owner);
    assert!(second.token > first.token);
    // Boundaries missed while nobody led are caught up by the new leader.
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(!drain(&q, clock.now_ms()).await.is_empty());
    // A leader that cannot renew before its TTL runs out reports the loss.
    clock.advance(10 * ttl as i64);
    let at = runners.iter().position(|r| r.0 == second.owner).unwrap();
    let (_, stop, task) = runners.remove(at);
    let lost = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the leader did not notice it lost the leadership")
        .unwrap();
    drop(stop);
    assert!(matches!(lost, Err(AlkError::LeadershipLost(_))), "{lost:?}");
    // A stopped runner returns its report and releases what it holds.
    for (_, stop, task) in runners {
        if let Some(stop) = stop {
            let _ = stop.send(());
        }
        let _ = task.await;
    }
}
