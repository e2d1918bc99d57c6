//! Conformance cases of plain queues: visibility, redelivery, claim order,
//! receipts and waiting receives; and payloads of every kind round-tripping
//! every byte.

use std::time::Duration;

use super::text;
use crate::engine::Engine;
use crate::error::AlkError;
use crate::kv::Bucket;
use crate::limits::{KvLimits, StreamLimits};
use crate::queue::{Payload, Queue, QueueStats, Settled};
use crate::stream::Streams;

/// Visibility, redelivery, attempts, stale receipts and nack follow the
/// given clock exactly.
pub async fn queue_visibility_and_redelivery_follow_the_clock(engine: &dyn Engine) {
    let q = Queue::open(engine, "visibility").await.unwrap();
    q.send(&text("a"), 1_000).await.unwrap();
    let first = q.receive(10, Some(500), 1_000).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].attempt, 1);
    assert!(q.receive(10, Some(500), 1_499).await.unwrap().is_empty());
    let second = q.receive(10, Some(500), 1_500).await.unwrap();
    assert_eq!(second[0].attempt, 2);
    assert_ne!(second[0].receipt, first[0].receipt);
    assert!(matches!(
        q.ack(&first[0].receipt).await,
        Err(AlkError::StaleReceipt(_))
    ));
    q.nack(&second[0].receipt, 1_600).await.unwrap();
    let third = q.receive(10, None, 1_600).await.unwrap();
    assert_eq!(third[0].attempt, 3);
    q.ack(&third[0].receipt).await.unwrap();
    // Acknowledging twice, or something that is not a receipt, is harmless.
    q.ack(&third[0].receipt).await.unwrap();
    q.ack("not a receipt").await.unwrap();
    assert!(q.receive(10, None, i64::MAX / 2).await.unwrap().is_empty());
    // Payloads round-trip, JSON as written; bad input is refused.
    q.send(&Payload::Json("{ \"a\" : 1e999 }".into()), 0)
        .await
        .unwrap();
    let got = q.receive(1, None, 0).await.unwrap();
    assert_eq!(got[0].payload, Payload::Json("{ \"a\" : 1e999 }".into()));
    assert!(matches!(
        q.send(&Payload::Json("{".into()), 0).await,
        Err(AlkError::InvalidArgument(_))
    ));
    assert!(matches!(
        q.send(&text(&"x".repeat(65_537)), 0).await,
        Err(AlkError::PayloadTooLarge { .. })
    ));
    assert!(matches!(
        q.receive(1, Some(0), 0).await,
        Err(AlkError::InvalidArgument(_))
    ));
}

/// A receipt is only ever current for the message it was issued for: the
/// same message id in another queue does not make it valid there.
pub async fn queue_receipts_of_another_queue_are_stale_there(engine: &dyn Engine) {
    let mine = Queue::open(engine, "mine").await.unwrap();
    let theirs = Queue::open(engine, "theirs").await.unwrap();
    assert_eq!(mine.send(&text("m"), 0).await.unwrap(), 1);
    assert_eq!(theirs.send(&text("t"), 0).await.unwrap(), 1);
    let m = mine.receive(1, None, 0).await.unwrap();
    let t = theirs.receive(1, None, 0).await.unwrap();
    assert_ne!(m[0].receipt, t[0].receipt);
    assert!(matches!(
        mine.ack(&t[0].receipt).await,
        Err(AlkError::StaleReceipt(_))
    ));
    assert_eq!(
        mine.ack_batch(std::slice::from_ref(&t[0].receipt))
            .await
            .unwrap(),
        [Settled::Stale]
    );
    mine.ack(&m[0].receipt).await.unwrap();
    theirs.ack(&t[0].receipt).await.unwrap();
}

/// Claims take the oldest due messages first (send time, then id), skip
/// messages in flight, and a redelivered message keeps its place.
pub async fn queue_claims_oldest_first_and_skips_in_flight(engine: &dyn Engine) {
    let q = Queue::open(engine, "order").await.unwrap();
    for (t, at) in [("c", 30), ("a", 10), ("b", 10), ("d", 40)] {
        q.send(&text(t), at).await.unwrap();
    }
    let first = q.receive(1, Some(1_000), 100).await.unwrap();
    assert_eq!(first[0].payload, text("a"));
    let rest = q.receive(10, Some(1_000), 100).await.unwrap();
    let order: Vec<_> = rest.iter().map(|d| d.payload.clone()).collect();
    assert_eq!(order, vec![text("b"), text("c"), text("d")]);
    let again = q.receive(10, Some(1_000), 1_100).await.unwrap();
    assert_eq!(again[0].payload, text("a"));
    assert_eq!(again[0].attempt, 2);
    // Ids only grow.
    let ids: Vec<u64> = q.send_batch(&[text("x"), text("y")], 2_000).await.unwrap();
    assert!(ids[0] < ids[1] && ids[0] > again.iter().map(|d| d.id).max().unwrap());
    q.purge().await.unwrap();
    assert!(q.receive(10, None, i64::MAX / 2).await.unwrap().is_empty());
}

/// `ack-batch` reports acked, stale and gone per receipt, applied together.
pub async fn queue_ack_batch_reports_each_receipt(engine: &dyn Engine) {
    let q = Queue::open(engine, "acks").await.unwrap();
    for i in 0..4 {
        q.send(&text(&format!("m{i}")), 0).await.unwrap();
    }
    let old = q.receive(4, Some(10), 0).await.unwrap();
    let new = q.receive(2, Some(1_000), 10).await.unwrap();
    let outcomes = q
        .ack_batch(&[
            old[0].receipt.clone(),
            old[2].receipt.clone(),
            new[1].receipt.clone(),
            "garbage".into(),
            new[1].receipt.clone(),
            old[1].receipt.clone(),
        ])
        .await
        .unwrap();
    assert_eq!(
        outcomes,
        [
            Settled::Stale,
            Settled::Done,
            Settled::Done,
            Settled::Gone,
            Settled::Gone,
            Settled::Gone
        ]
    );
    q.ack(&new[0].receipt).await.unwrap();
    let left = q.receive(10, None, 20).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].payload, text("m3"));
}

/// A waiting receive wakes when a message is sent, and times out empty.
pub async fn queue_receive_wait_wakes_on_a_send(engine: &dyn Engine) {
    let q = Queue::open(engine, "waits").await.unwrap();
    let clock = crate::time::SystemClock;
    let empty = q
        .receive_wait(
            1,
            None,
            &clock,
            tokio::time::Instant::now() + Duration::from_millis(50),
        )
        .await
        .unwrap();
    assert!(empty.is_empty());
    let sender = {
        let q = q.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            q.send(
                &text("late"),
                crate::time::Clock::now_ms(&crate::time::SystemClock),
            )
            .await
            .unwrap();
        })
    };
    let got = q
        .receive_wait(
            1,
            None,
            &clock,
            tokio::time::Instant::now() + Duration::from_secs(30),
        )
        .await
        .unwrap();
    assert_eq!(got[0].payload, text("late"));
    sender.await.unwrap();
}

/// Message bodies, event payloads and values come back exactly as given:
/// NUL, every byte value, and text beyond ASCII.
pub async fn payloads_round_trip_every_byte(engine: &dyn Engine) {
    let every: Vec<u8> = (0..=255u8).collect();
    let kv = Bucket::open(engine, "bytes", KvLimits::default())
        .await
        .unwrap();
    kv.set("every", &every, None, 0).await.unwrap();
    assert_eq!(kv.get("every", 0).await.unwrap(), Some(every.clone()));
    let q = Queue::open(engine, "bytes").await.unwrap();
    let bodies = [
        Payload::Text("a\0b\0".into()),
        Payload::Text("\u{1}é\u{10FFFF}\r\n".into()),
        Payload::Json("\"\\u0000 é\"".into()),
    ];
    for body in &bodies {
        q.send(body, 0).await.unwrap();
    }
    let got = q.receive(10, Some(1_000), 0).await.unwrap();
    let got: Vec<Payload> = got.into_iter().map(|d| d.payload).collect();
    assert_eq!(got, bodies);
    let streams = Streams::open(engine, StreamLimits::default())
        .await
        .unwrap();
    streams
        .publish("bytes", Some("k\u{e9}"), &every, 0)
        .await
        .unwrap();
    let events = streams.read_since("bytes", 0, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].payload, every);
    assert_eq!(events[0].key.as_deref(), Some("k\u{e9}"));
}

/// The counts follow the clock: sent messages wait, a claimed one is in
/// flight until its deadline and waiting again after it, an acked one is
/// gone; the oldest waiting message is the one sent first.
pub async fn queue_stats_count_waiting_and_in_flight(engine: &dyn Engine) {
    let q = Queue::open(engine, "stats-plain").await.unwrap();
    assert_eq!(q.stats(0).await.unwrap(), QueueStats::default());
    q.send_batch(&[text("a"), text("b")], 1_000).await.unwrap();
    q.send(&text("c"), 1_500).await.unwrap();
    let got = q.receive(1, Some(10_000), 2_000).await.unwrap();
    let s = q.stats(2_000).await.unwrap();
    assert_eq!((s.waiting, s.delayed, s.in_flight, s.dead), (2, 0, 1, 0), "{s:?}");
    assert_eq!(s.oldest_waiting_enqueued_at, Some(1_000), "{s:?}");
    assert_eq!((s.groups, s.groups_in_flight), (0, 0), "{s:?}");
    // Past its deadline the delivered message is waiting again.
    let s = q.stats(12_000).await.unwrap();
    assert_eq!((s.waiting, s.in_flight), (3, 0), "{s:?}");
    q.ack(&got[0].receipt).await.unwrap();
    let s = q.stats(12_000).await.unwrap();
    assert_eq!((s.waiting, s.in_flight), (2, 0), "{s:?}");
    assert_eq!(s.oldest_waiting_enqueued_at, Some(1_000), "{s:?}");
}

/// Counts read while other writers send add up: each read sees a moment
/// (never more messages than were sent, never fewer than an earlier read),
/// and once the writers are done, every message.
pub async fn queue_stats_hold_under_concurrent_writers(engine: &dyn Engine) {
    const WRITERS: usize = 4;
    const EACH: usize = 25;
    let q = Queue::open(engine, "stats-race").await.unwrap();
    let writers = futures::future::join_all((0..WRITERS).map(|w| {
        let q = q.clone();
        async move {
            for i in 0..EACH {
                q.send(&text(&format!("{w}/{i}")), 1_000).await.unwrap();
            }
        }
    }));
    let reader = async {
        let mut last = 0;
        for _ in 0..20 {
            let s = q.stats(2_000).await.unwrap();
            assert!(s.waiting >= last && s.waiting <= (WRITERS * EACH) as u64, "{s:?}");
            assert_eq!((s.delayed, s.in_flight), (0, 0), "{s:?}");
            last = s.waiting;
            tokio::task::yield_now().await;
        }
    };
    futures::future::join(writers, reader).await;
    assert_eq!(q.stats(2_000).await.unwrap().waiting, (WRITERS * EACH) as u64);
}
