//! Conformance cases of schedules and of the runners that fire them.

use std::sync::Arc;
use std::time::Duration;

use super::{drain, priority, text};
use crate::engine::Engine;
use crate::error::AlkError;
use crate::jobs::SendOptions;
use crate::queue::Queue;
use crate::schedule::{RunnerOptions, SCHEDULER_LOCK, Schedules, parse_spec};
use crate::time::{Clock, ManualClock};

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
