//! Conformance cases of rate limits: a queue's claims taking from its
//! token bucket (one for the queue, or one per group), `try-take` on the
//! same bucket, and the free-standing named buckets.

use std::sync::Arc;

use super::text;
use crate::engine::Engine;
use crate::error::AlkError;
use crate::jobs::{QueueLimits, SendOptions};
use crate::queue::Queue;
use crate::rate::{Limiters, RateLimit, Taken};

fn rate(capacity: u32, refill: u32, interval_ms: u64) -> RateLimit {
    RateLimit {
        capacity,
        refill,
        interval_ms,
    }
}

fn grouped(g: &str) -> SendOptions {
    SendOptions {
        group: Some(g.into()),
        ..SendOptions::default()
    }
}

/// A queue with a rate hands out at most its bucket's tokens: a full
/// bucket at first, then `refill` per whole interval; a claim with no
/// token gets nothing (the messages stay waiting), `throttled-until` says
/// when the next token comes, and the tokens of a claim are only those of
/// the messages it took.
pub async fn rate_claims_take_one_token_per_message(engine: &dyn Engine) {
    let q = Queue::open(engine, "rate-claims").await.unwrap();
    assert!(q.limits().await.unwrap().is_default());
    let limits = QueueLimits {
        rate: Some(rate(3, 2, 1_000)),
        ..QueueLimits::default()
    };
    q.set_limits(&limits).await.unwrap();
    assert_eq!(q.limits().await.unwrap(), limits);
    for i in 0..20 {
        q.send(&text(&format!("m{i}")), 0).await.unwrap();
    }
    let t = 10_000;
    assert_eq!(
        q.claim(10, Some(1_000_000), None, t).await.unwrap().len(),
        3
    );
    assert!(
        q.claim(10, Some(1_000_000), None, t)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        q.claim(10, Some(1_000_000), None, t + 999)
            .await
            .unwrap()
            .is_empty()
    );
    // Two tokens after one interval; a claim of one leaves one.
    assert_eq!(
        q.claim(1, Some(1_000_000), None, t + 1_000)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        q.claim(10, Some(1_000_000), None, t + 1_500)
            .await
            .unwrap()
            .len(),
        1
    );
    // Long idle: full again, never more than the capacity.
    assert_eq!(
        q.claim(10, Some(1_000_000), None, t + 100_000)
            .await
            .unwrap()
            .len(),
        3
    );
    let stats = q.stats(t + 100_000).await.unwrap();
    assert_eq!((stats.in_flight, stats.waiting), (8, 12));
    // try-take takes from the same bucket.
    assert_eq!(
        q.try_take(1, None, t + 100_000).await.unwrap(),
        Taken::WaitMs(1_000)
    );
    assert_eq!(
        q.try_take(2, None, t + 101_000).await.unwrap(),
        Taken::Granted(0)
    );
    assert!(
        q.claim(10, Some(1_000_000), None, t + 101_000)
            .await
            .unwrap()
            .is_empty()
    );
    // Bad takes are refused and take nothing.
    for n in [0, 4] {
        assert!(matches!(
            q.try_take(n, None, t + 102_000).await,
            Err(AlkError::InvalidArgument(_))
        ));
    }
    assert_eq!(
        q.try_take(2, None, t + 102_000).await.unwrap(),
        Taken::Granted(0)
    );
    // The rate removed: claims are free again, and try-take has no bucket.
    q.set_limits(&QueueLimits::default()).await.unwrap();
    assert_eq!(
        q.claim(100, Some(1_000_000), None, t + 102_000)
            .await
            .unwrap()
            .len(),
        12
    );
    assert!(matches!(
        q.try_take(1, None, t + 102_000).await,
        Err(AlkError::InvalidArgument(_))
    ));
    // Bad limits are refused and change nothing.
    for bad in [
        QueueLimits {
            group_concurrency: 0,
            ..QueueLimits::default()
        },
        QueueLimits {
            max_in_flight: Some(0),
            ..QueueLimits::default()
        },
        QueueLimits {
            max_in_flight: Some(crate::jobs::MAX_IN_FLIGHT + 1),
            ..QueueLimits::default()
        },
        QueueLimits {
            rate: Some(rate(0, 1, 1)),
            ..QueueLimits::default()
        },
        QueueLimits {
            rate_per_group: true,
            ..QueueLimits::default()
        },
    ] {
        assert!(matches!(
            q.set_limits(&bad).await,
            Err(AlkError::InvalidArgument(_))
        ));
    }
    assert!(q.limits().await.unwrap().is_default());
}

/// An empty bucket says when its next token comes; a waiting claim on a
/// throttled queue gets its message once the clock reaches it.
pub async fn rate_throttled_until_names_the_next_token(engine: &dyn Engine) {
    let q = Queue::open(engine, "rate-throttled").await.unwrap();
    q.set_limits(&QueueLimits {
        rate: Some(rate(1, 1, 500)),
        ..QueueLimits::default()
    })
    .await
    .unwrap();
    q.send(&text("a"), 0).await.unwrap();
    q.send(&text("b"), 0).await.unwrap();
    assert_eq!(
        q.claim(5, Some(1_000_000), None, 1_000)
            .await
            .unwrap()
            .len(),
        1
    );
    // What the waiting claim asks when due messages were held back.
    let engine_q = engine.queue("rate-throttled").await.unwrap();
    assert_eq!(engine_q.throttled_until(1_000).await.unwrap(), Some(1_500));
    assert_eq!(engine_q.throttled_until(1_600).await.unwrap(), None);
}

/// With a rate per group each group has its bucket (and the messages
/// without a group one more); one busy group does not use up another's.
pub async fn rate_per_group_buckets_are_separate(engine: &dyn Engine) {
    let q = Queue::open(engine, "rate-groups").await.unwrap();
    q.set_limits(&QueueLimits {
        group_concurrency: 10,
        rate: Some(rate(2, 1, 1_000)),
        rate_per_group: true,
        ..QueueLimits::default()
    })
    .await
    .unwrap();
    for i in 0..5 {
        q.send_with(&text(&format!("a{i}")), &grouped("A"), 0)
            .await
            .unwrap();
        q.send_with(&text(&format!("b{i}")), &grouped("B"), 0)
            .await
            .unwrap();
        q.send(&text(&format!("u{i}")), 0).await.unwrap();
    }
    let got = q.claim(100, Some(1_000_000), None, 1).await.unwrap();
    let count = |g: Option<&str>| got.iter().filter(|d| d.group.as_deref() == g).count();
    assert_eq!((count(Some("A")), count(Some("B")), count(None)), (2, 2, 2));
    assert!(
        q.claim(100, Some(1_000_000), None, 1)
            .await
            .unwrap()
            .is_empty()
    );
    // A's bucket taken from by a worker leaves B's alone.
    assert_eq!(
        q.try_take(1, Some("A"), 1_001).await.unwrap(),
        Taken::Granted(0)
    );
    let got = q.claim(100, Some(1_000_000), None, 1_001).await.unwrap();
    let count = |g: Option<&str>| got.iter().filter(|d| d.group.as_deref() == g).count();
    assert_eq!((count(Some("A")), count(Some("B")), count(None)), (0, 1, 1));
}

/// With a rate per group, groups whose bucket is empty are passed over
/// without counting toward a claim's work: a group with tokens behind more
/// throttled groups than one claim looks at is still reached.
pub async fn rate_groups_with_tokens_are_reached_past_throttled_ones(engine: &dyn Engine) {
    let q = Queue::open(engine, "rate-past-throttled").await.unwrap();
    q.set_limits(&QueueLimits {
        group_concurrency: 2,
        rate: Some(rate(1, 1, 60_000)),
        rate_per_group: true,
        ..QueueLimits::default()
    })
    .await
    .unwrap();
    let groups = 1_050;
    for i in 0..groups {
        q.send_batch_with(
            &[text("first"), text("second")],
            &grouped(&format!("g{i:04}")),
            0,
        )
        .await
        .unwrap();
    }
    // Each group gives its first message; every bucket is then empty and
    // every group still has a due message, ahead of the late one.
    let mut claimed = 0;
    loop {
        let got = q.claim(1_000, Some(1_000_000), None, 1).await.unwrap();
        if got.is_empty() {
            break;
        }
        assert!(got.iter().all(|d| d.payload == text("first")));
        claimed += got.len();
    }
    assert_eq!(claimed, groups);
    q.send_with(&text("late"), &grouped("late"), 2)
        .await
        .unwrap();
    let got = q.claim(1, Some(1_000_000), None, 3).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload, text("late"));
    // When the interval ends, every group has a token again.
    let mut second = 0;
    loop {
        let got = q.claim(1_000, Some(1_000_000), None, 60_001).await.unwrap();
        if got.is_empty() {
            break;
        }
        second += got.len();
    }
    assert_eq!(second, groups);
}

/// Claimers racing on one rate-limited queue share one bucket: together
/// they never get more than it holds.
pub async fn rate_racing_claimers_share_one_bucket(engine: &dyn Engine) {
    let q = Queue::open(engine, "rate-race").await.unwrap();
    q.set_limits(&QueueLimits {
        rate: Some(rate(7, 1, 60_000)),
        ..QueueLimits::default()
    })
    .await
    .unwrap();
    let payloads: Vec<_> = (0..50).map(|i| text(&format!("m{i}"))).collect();
    q.send_batch(&payloads, 0).await.unwrap();
    let q = Arc::new(q);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = 0;
            for _ in 0..5 {
                got += q.claim(2, Some(1_000_000), None, 10).await.unwrap().len();
            }
            got
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, 7);
}

/// Free-standing buckets are named, start full, refill by whole
/// intervals, and take all of `n` or nothing.
pub async fn rate_limiters_take_tokens_by_name(engine: &dyn Engine) {
    let l = Limiters::open(engine).await.unwrap();
    let r = rate(5, 5, 60_000);
    assert_eq!(
        l.try_take("api", &r, 3, 0).await.unwrap(),
        Taken::Granted(2)
    );
    assert_eq!(
        l.try_take("api", &r, 3, 10).await.unwrap(),
        Taken::WaitMs(59_990)
    );
    assert_eq!(
        l.try_take("api", &r, 2, 10).await.unwrap(),
        Taken::Granted(0)
    );
    // Another name is another bucket.
    assert_eq!(
        l.try_take("mail", &r, 5, 10).await.unwrap(),
        Taken::Granted(0)
    );
    assert_eq!(
        l.try_take("api", &r, 5, 60_000).await.unwrap(),
        Taken::Granted(0)
    );
    // A lowered capacity cuts what the bucket holds.
    let small = rate(2, 1, 60_000);
    assert_eq!(
        l.try_take("api", &small, 1, 600_000).await.unwrap(),
        Taken::Granted(1)
    );
    for (name, n, r) in [
        ("api", 0, r),
        ("api", 6, r),
        ("api", 1, rate(0, 1, 1)),
        ("bad/name", 1, r),
    ] {
        assert!(l.try_take(name, &r, n, 0).await.is_err(), "{name} {n}");
    }
}

/// Buckets are forgotten only once they are full again (then they are
/// what a bucket never taken from is): neither `sweep-expired` on a queue
/// nor takes from many other named buckets give back a token early.
pub async fn rate_buckets_are_forgotten_only_when_full(engine: &dyn Engine) {
    let q = Queue::open(engine, "rate-sweep").await.unwrap();
    q.set_limits(&QueueLimits {
        group_concurrency: 100,
        rate: Some(rate(4, 1, 1_000)),
        rate_per_group: true,
        ..QueueLimits::default()
    })
    .await
    .unwrap();
    for i in 0..10 {
        for g in ["A", "B"] {
            q.send_with(&text(&format!("{g}{i}")), &grouped(g), 0)
                .await
                .unwrap();
        }
    }
    let claim = |at: i64| {
        let q = &q;
        async move { q.claim(100, Some(1_000_000), None, at).await.unwrap().len() }
    };
    assert_eq!(claim(1).await, 8);
    // Two intervals later each bucket holds 2 of 4: a sweep keeps them.
    q.sweep_expired(2_001).await.unwrap();
    assert_eq!(claim(2_001).await, 4);
    // Long after, both are full: swept or not, each gives its capacity.
    q.sweep_expired(100_000).await.unwrap();
    assert_eq!(claim(100_000).await, 8);

    let l = Limiters::open(engine).await.unwrap();
    let r = rate(5, 1, 1_000);
    assert_eq!(
        l.try_take("held", &r, 5, 0).await.unwrap(),
        Taken::Granted(0)
    );
    for i in 0..300 {
        let name = format!("other-{i}");
        assert_eq!(
            l.try_take(&name, &r, 1, i).await.unwrap(),
            Taken::Granted(4)
        );
    }
    // At 3 s every "other" bucket is full again and "held" has 3 tokens:
    // takes from new names then may forget the former, not the latter.
    for i in 0..300 {
        l.try_take(&format!("later-{i}"), &r, 1, 3_000)
            .await
            .unwrap();
    }
    assert_eq!(
        l.try_take("held", &r, 4, 3_000).await.unwrap(),
        Taken::WaitMs(1_000)
    );
    assert_eq!(
        l.try_take("held", &r, 3, 3_000).await.unwrap(),
        Taken::Granted(0)
    );
}
