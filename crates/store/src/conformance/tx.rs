//! Conformance cases of transactions, of streams alone and across
//! mechanisms (streams, queues, outboxes, channels).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{drain, priority, text};
use crate::engine::Engine;
use crate::error::AlkError;
use crate::jobs::SendOptions;
use crate::limits::StreamLimits;
use crate::notify::{Channels, Listener};
use crate::outbox::Outbox;
use crate::queue::{Payload, Queue};
use crate::stream::Streams;
use crate::tx::Tx;

async fn woke(listener: &mut Listener) -> bool {
    listener
        .wait(Some(Instant::now() + Duration::from_millis(50)))
        .await
}

/// Offsets stay consecutive across single publishes, batches and
/// publishes inside transactions; a rolled-back transaction's offsets are
/// handed out again.
pub async fn stream_offsets_run_on_across_batches_and_transactions(engine: &Arc<dyn Engine>) {
    let s = Streams::open(engine, StreamLimits::default())
        .await
        .unwrap();
    let batch = |n: usize, tag: &str| -> Vec<(Option<String>, Vec<u8>)> {
        (0..n)
            .map(|i| (Some(format!("{tag}{i}")), format!("{tag}{i}").into_bytes()))
            .collect()
    };
    assert_eq!(
        s.publish_batch("run", &batch(3, "a"), 0).await.unwrap(),
        [1, 2, 3]
    );
    assert_eq!(s.publish("run", None, b"b", 0).await.unwrap(), 4);
    assert_eq!(
        s.publish_batch("run", &batch(2, "c"), 0).await.unwrap(),
        [5, 6]
    );
    let tx = Tx::new(engine.clone(), s.limits()).unwrap();
    assert_eq!(tx.publish("run", None, b"gone", 0).await.unwrap(), 7);
    assert_eq!(tx.publish("fresh", None, b"gone", 0).await.unwrap(), 1);
    tx.rollback().await;
    let tx = Tx::new(engine.clone(), s.limits()).unwrap();
    assert_eq!(tx.publish("run", None, b"d", 0).await.unwrap(), 7);
    assert_eq!(tx.publish("run", Some("e"), b"e", 0).await.unwrap(), 8);
    tx.commit().await.unwrap();
    assert_eq!(s.publish("run", None, b"f", 0).await.unwrap(), 9);
    assert_eq!(s.publish("fresh", None, b"g", 0).await.unwrap(), 1);
    let events = s.read_since("run", 0, 100).await.unwrap();
    let got: Vec<(u64, Option<String>, Vec<u8>)> = events
        .into_iter()
        .map(|e| (e.offset, e.key, e.payload))
        .collect();
    let want: Vec<(u64, Option<String>, Vec<u8>)> = [
        (1, Some("a0"), "a0"),
        (2, Some("a1"), "a1"),
        (3, Some("a2"), "a2"),
        (4, None, "b"),
        (5, Some("c0"), "c0"),
        (6, Some("c1"), "c1"),
        (7, None, "d"),
        (8, Some("e"), "e"),
        (9, None, "f"),
    ]
    .into_iter()
    .map(|(o, k, p)| (o, k.map(String::from), p.as_bytes().to_vec()))
    .collect();
    assert_eq!(got, want);
    assert_eq!(s.info("run").await.unwrap().last, 9);
    assert!(s.publish_batch("run", &[], 0).await.unwrap().is_empty());
    assert_eq!(s.publish("run", None, b"h", 0).await.unwrap(), 10);
}

/// A transaction applies its publishes and saves together, or not at all;
/// a refusal inside it leaves it usable; after rollback it is finished.
pub async fn stream_transactions_commit_all_or_nothing(engine: &Arc<dyn Engine>) {
    let s = Streams::open(engine, StreamLimits::default())
        .await
        .unwrap();
    s.publish("in", None, b"a", 0).await.unwrap();
    let tx = Tx::new(engine.clone(), s.limits()).unwrap();
    assert_eq!(tx.publish("out", None, b"derived", 0).await.unwrap(), 1);
    tx.save_offset("in", "worker", 1).await.unwrap();
    tx.rollback().await;
    assert!(s.read_since("out", 0, 10).await.unwrap().is_empty());
    assert_eq!(s.get_offset("in", "worker").await.unwrap(), None);
    assert!(matches!(
        tx.commit().await,
        Err(AlkError::InvalidArgument(_))
    ));
    let tx = Tx::new(engine.clone(), s.limits()).unwrap();
    assert_eq!(tx.publish("out", None, b"derived", 0).await.unwrap(), 1);
    assert!(matches!(
        tx.save_offset("in", "worker", 99).await,
        Err(AlkError::InvalidArgument(_))
    ));
    tx.save_offset("in", "worker", 1).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(s.read_since("out", 0, 10).await.unwrap().len(), 1);
    assert_eq!(s.get_offset("in", "worker").await.unwrap(), Some(1));
    assert!(matches!(
        tx.commit().await,
        Err(AlkError::InvalidArgument(_))
    ));
}

/// A transaction held past its limit is rolled back and the store freed.
pub async fn stream_transactions_held_too_long_are_rolled_back(engine: &Arc<dyn Engine>) {
    let limits = StreamLimits {
        max_transaction: Duration::from_millis(100),
        ..StreamLimits::default()
    };
    let s = Streams::open(engine, limits).await.unwrap();
    let tx = Tx::new(engine.clone(), s.limits()).unwrap();
    tx.publish("late", None, b"late", 0).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(matches!(
        tx.commit().await,
        Err(AlkError::TransactionAborted(_))
    ));
    assert_eq!(s.publish("late", None, b"next", 0).await.unwrap(), 1);
}

/// A transaction's publish, keyed publish, offset save, queue send (with
/// options), outbox send and notification are all invisible until commit
/// and all there after it; the notification is delivered after commit.
pub async fn tx_commit_applies_every_mechanism_at_once(engine: &Arc<dyn Engine>) {
    let s = Streams::open(engine, StreamLimits::default())
        .await
        .unwrap();
    let jobs = Queue::open(engine, "tx-jobs").await.unwrap();
    let outbox = Outbox::open(engine, "tx-mail").await.unwrap();
    let mut listener = Channels::open(engine).unwrap().listen("tx-done").unwrap();
    s.publish("tx-in", None, b"source", 1_000).await.unwrap();

    let tx = Tx::new(engine.clone(), s.limits()).unwrap();
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
pub async fn tx_rollback_leaves_nothing_anywhere(engine: &Arc<dyn Engine>) {
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
        let tx = Tx::new(engine.clone(), s.limits()).unwrap();
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
        let probe = Tx::new(engine.clone(), s.limits()).unwrap();
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
    let tx = Tx::new(engine.clone(), s.limits()).unwrap();
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
pub async fn tx_refusals_leave_the_transaction_usable(engine: &Arc<dyn Engine>) {
    let s = Streams::open(engine, StreamLimits::default())
        .await
        .unwrap();
    let tx = Tx::new(engine.clone(), s.limits()).unwrap();
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

/// A unique send inside a transaction reaches the queue at commit, and its
/// key is checked there: two sends with one key in one transaction, and
/// one more after it, store one message; a rolled-back one stores nothing.
pub async fn tx_enqueue_unique_stores_one_message_per_key(engine: &Arc<dyn Engine>) {
    use crate::jobs::UniqueOptions;
    let s = Streams::open(engine, StreamLimits::default())
        .await
        .unwrap();
    let q = Queue::open(engine, "tx-unique").await.unwrap();
    let key = UniqueOptions {
        key: "once".into(),
        for_ms: None,
    };
    let plain = SendOptions::default();
    let rolled = Tx::new(engine.clone(), s.limits()).unwrap();
    rolled
        .enqueue_unique("tx-unique", &text("never"), &plain, &key, 1_000)
        .await
        .unwrap();
    rolled.rollback().await;
    let tx = Tx::new(engine.clone(), s.limits()).unwrap();
    tx.publish("tx-unique-events", None, b"e", 1_000)
        .await
        .unwrap();
    tx.enqueue_unique("tx-unique", &text("first"), &plain, &key, 1_000)
        .await
        .unwrap();
    tx.enqueue_unique("tx-unique", &text("second"), &plain, &key, 1_000)
        .await
        .unwrap();
    // Refused before anything is written; the transaction goes on.
    let bad = UniqueOptions {
        key: String::new(),
        for_ms: None,
    };
    assert!(matches!(
        tx.enqueue_unique("tx-unique", &text("bad"), &plain, &bad, 1_000)
            .await,
        Err(AlkError::InvalidArgument(_))
    ));
    tx.commit().await.unwrap();
    let after = q
        .send_unique(&text("third"), &plain, &key, 1_001)
        .await
        .unwrap();
    assert!(after.duplicate);
    assert_eq!(drain(&q, 1_002).await, ["first"]);
    assert_eq!(
        s.read_since("tx-unique-events", 0, 10).await.unwrap().len(),
        1
    );
}
