//! The behaviour every engine must show, as a suite of cases any engine
//! runs (`alk_store::conformance_tests!`), clock-driven: every time is a
//! parameter, so expiry, visibility and leases are checked exactly and
//! without sleeping. The guest contracts check the same through the WIT;
//! these check it at the engine seam, per engine.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::Engine;
use crate::error::AlkError;
use crate::kv::{Bucket, Expected};
use crate::limits::{KvLimits, MAX_READ_BYTES, StreamLimits};
use crate::lock::{Acquired, Locks};
use crate::notify::Channels;
use crate::queue::{Payload, Queue, Settled};
use crate::stream::Streams;

mod coord;
mod jobs;
pub use coord::*;
pub use jobs::*;

/// An engine under test, and whatever must live as long as it (a
/// temporary directory, a database schema).
pub struct Subject {
    /// The engine.
    pub engine: Arc<dyn Engine>,
    /// Kept alive for the test.
    pub keep: Box<dyn std::any::Any + Send>,
}

/// Generates one `#[tokio::test]` per conformance case for the engine that
/// `$make` (an `async fn() -> Subject`) builds.
#[macro_export]
macro_rules! conformance_tests {
    ($make:path) => {
        $crate::conformance_tests!(@cases $make;
            kv_expiry_follows_the_clock,
            kv_refuses_oversized_and_bad_input_before_writing,
            kv_reads_of_many_large_values_come_in_pages,
            kv_scans_in_byte_order_of_the_key,
            kv_set_if_absent_has_exactly_one_winner,
            kv_scan_cursors_resume_after_their_key,
            kv_swaps_compare_in_one_step_and_increments_all_count,
            queue_visibility_and_redelivery_follow_the_clock,
            queue_claims_oldest_first_and_skips_in_flight,
            queue_ack_batch_reports_each_receipt,
            queue_receipts_of_another_queue_are_stale_there,
            queue_receive_wait_wakes_on_a_send,
            stream_offsets_survive_trim_and_saves_only_move_forward,
            stream_transactions_commit_all_or_nothing,
            stream_transactions_held_too_long_are_rolled_back,
            lock_expiry_renewal_and_takeover_follow_the_clock,
            lock_wait_is_granted_at_release,
            notify_wakes_a_listener_attached_before,
            payloads_round_trip_every_byte,
            stream_reads_of_large_events_come_in_pages,
            jobs_claim_by_priority_then_ready_time,
            jobs_retry_backs_off_and_ends_in_the_dead_letters,
            jobs_a_lapsed_last_attempt_goes_to_the_dead_letters,
            jobs_heartbeat_extends_only_a_live_delivery,
            jobs_expired_messages_end_in_the_dead_letters,
            jobs_cancel_and_fail,
            jobs_groups_take_turns_one_in_flight_each,
            jobs_claims_look_past_parked_groups_and_count_burials,
            tx_commit_applies_every_mechanism_at_once,
            tx_rollback_leaves_nothing_anywhere,
            tx_refusals_leave_the_transaction_usable,
            outbox_run_once_acks_success_and_retries_failure,
            schedules_fire_once_per_boundary_with_bounded_catch_up,
            scheduler_runners_elect_one_leader_and_report_loss,
        );
    };
    (@cases $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let subject = $make().await;
                $crate::conformance::$case(&*subject.engine).await;
            }
        )*
    };
}

fn text(s: &str) -> Payload {
    Payload::Text(s.into())
}

/// Expiry is decided by the given clock reading; `expires_at == now` is
/// expired; a found expired key is deleted by a read.
pub async fn kv_expiry_follows_the_clock(engine: &dyn Engine) {
    let kv = Bucket::open(engine, "expiry", KvLimits::default())
        .await
        .unwrap();
    kv.set("k", b"v", Some(100), 1_000).await.unwrap();
    assert_eq!(kv.get("k", 1_099).await.unwrap(), Some(b"v".to_vec()));
    assert!(!kv.set_if_absent("k", b"w", None, 1_099).await.unwrap());
    assert_eq!(
        kv.scan_prefix("", None, 10, 1_099)
            .await
            .unwrap()
            .entries
            .len(),
        1
    );
    assert_eq!(
        kv.scan_prefix("", None, 10, 1_100)
            .await
            .unwrap()
            .entries
            .len(),
        0
    );
    assert!(kv.set_if_absent("k", b"w", Some(50), 1_100).await.unwrap());
    assert_eq!(kv.get("k", 1_149).await.unwrap(), Some(b"w".to_vec()));
    assert!(!kv.exists("k", 1_150).await.unwrap());
    // The lazy delete removed the row: an earlier clock cannot revive it.
    assert_eq!(kv.get("k", 0).await.unwrap(), None);
    // Bytes round-trip exactly, NUL included.
    kv.set("nul", b"a\0b\xff", None, 0).await.unwrap();
    assert_eq!(kv.get("nul", 0).await.unwrap(), Some(b"a\0b\xff".to_vec()));
}

/// Bad names, keys, TTLs, cursors and oversized values are refused with
/// their typed errors and write nothing.
pub async fn kv_refuses_oversized_and_bad_input_before_writing(engine: &dyn Engine) {
    for bad in ["", "..", "a/b", "é"] {
        assert!(matches!(
            Bucket::open(engine, bad, KvLimits::default()).await,
            Err(AlkError::InvalidName(_))
        ));
    }
    assert!(matches!(
        Bucket::open(engine, "__alkstore_x", KvLimits::default()).await,
        Err(AlkError::ReservedName(_))
    ));
    let kv = Bucket::open(engine, "refusals", KvLimits::default())
        .await
        .unwrap();
    let big = vec![0u8; KvLimits::default().max_value_bytes + 1];
    assert!(matches!(
        kv.set("k", &big, None, 0).await,
        Err(AlkError::PayloadTooLarge { what: "value", .. })
    ));
    assert!(matches!(
        kv.set("", b"v", None, 0).await,
        Err(AlkError::InvalidArgument(_))
    ));
    assert!(matches!(
        kv.set("k\0", b"v", None, 0).await,
        Err(AlkError::InvalidArgument(_))
    ));
    assert!(matches!(
        kv.set("k", b"v", Some(0), 0).await,
        Err(AlkError::InvalidArgument(_))
    ));
    assert!(matches!(
        kv.set("k", b"v", Some(u64::MAX), 0).await,
        Err(AlkError::InvalidArgument(_))
    ));
    assert!(matches!(
        kv.scan_prefix("", Some("01"), 10, 0).await,
        Err(AlkError::InvalidArgument(_))
    ));
    // A batch with one bad entry writes nothing.
    let entries = vec![
        ("a".to_string(), b"1".to_vec()),
        (String::new(), b"2".to_vec()),
    ];
    assert!(kv.set_many(&entries, None, 0).await.is_err());
    assert_eq!(kv.get("a", 0).await.unwrap(), None);
    assert_eq!(kv.get("k", 0).await.unwrap(), None);
}

/// `get-many` and `scan-prefix` stop at the read cap and continue.
pub async fn kv_reads_of_many_large_values_come_in_pages(engine: &dyn Engine) {
    let kv = Bucket::open(engine, "large", KvLimits::default())
        .await
        .unwrap();
    let mib = vec![7u8; 1024 * 1024];
    let keys: Vec<String> = (0..40).map(|i| format!("k{i:02}")).collect();
    let entries: Vec<(String, Vec<u8>)> = keys.iter().map(|k| (k.clone(), mib.clone())).collect();
    kv.set_many(&entries, None, 0).await.unwrap();
    let cap = MAX_READ_BYTES / mib.len();
    let first = kv.get_many(&keys, 0).await.unwrap();
    assert_eq!(first.len(), cap);
    assert!(first.iter().all(|v| v.as_deref() == Some(mib.as_slice())));
    // Expired values read as absent and take no room in the page.
    let gone: Vec<String> = (0..10).map(|i| format!("x{i:02}")).collect();
    let expiring: Vec<(String, Vec<u8>)> = gone.iter().map(|k| (k.clone(), mib.clone())).collect();
    kv.set_many(&expiring, Some(1), 0).await.unwrap();
    let asked: Vec<String> = gone.iter().chain(&keys).cloned().collect();
    let page = kv.get_many(&asked, 10).await.unwrap();
    assert_eq!(page.len(), gone.len() + cap, "expired values counted");
    assert!(page[..gone.len()].iter().all(Option::is_none));
    let (mut seen, mut cursor) = (Vec::new(), None::<String>);
    loop {
        let page = kv
            .scan_prefix("k", cursor.as_deref(), 1000, 0)
            .await
            .unwrap();
        assert!(!page.entries.is_empty() && page.entries.len() <= cap);
        seen.extend(page.entries.into_iter().map(|(k, _)| k));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, keys);
    // A key listing reads no value: one page holds every key, and its
    // cursors are the scan's.
    let listed = kv.scan_keys("k", None, 1000, 10).await.unwrap();
    assert_eq!(
        listed.keys, keys,
        "expired keys are skipped, values not read"
    );
    assert_eq!(listed.next_cursor, None);
    let first = kv.scan_keys("", None, 25, 10).await.unwrap();
    assert_eq!(first.keys, keys[..25]);
    let cursor = first.next_cursor.expect("more keys follow");
    let rest = kv.scan_keys("", Some(&cursor), 1000, 10).await.unwrap();
    assert_eq!(rest.keys, keys[25..]);
    assert_eq!(rest.next_cursor, None);
    let scanned = kv.scan_prefix("", Some(&cursor), 1, 10).await.unwrap();
    assert_eq!(
        scanned.entries[0].0, keys[25],
        "scan cursors and listing cursors are one"
    );
    assert!(matches!(
        kv.scan_keys("k", Some(&cursor), 10, 10).await,
        Err(AlkError::InvalidArgument(_))
    ));
    assert!(matches!(
        kv.scan_keys("k\0", None, 10, 10).await,
        Err(AlkError::InvalidArgument(_))
    ));
}

/// Scans return keys in byte order of their UTF-8, whatever the engine's
/// collation, and only keys with the prefix.
pub async fn kv_scans_in_byte_order_of_the_key(engine: &dyn Engine) {
    let kv = Bucket::open(engine, "order", KvLimits::default())
        .await
        .unwrap();
    let keys = ["p/B", "p/a", "p/é", "p/Z", "p/", "p/_", "q/x", "p/ä", "o"];
    for k in keys {
        kv.set(k, k.as_bytes(), None, 0).await.unwrap();
    }
    let page = kv.scan_prefix("p/", None, 100, 0).await.unwrap();
    let got: Vec<&str> = page.entries.iter().map(|(k, _)| k.as_str()).collect();
    let mut want: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| k.starts_with("p/"))
        .collect();
    want.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    assert_eq!(got, want);
    // Paging with a limit gives the same sequence.
    let p1 = kv.scan_prefix("p/", None, 3, 0).await.unwrap();
    let p2 = kv
        .scan_prefix("p/", p1.next_cursor.as_deref(), 100, 0)
        .await
        .unwrap();
    let paged: Vec<String> = p1
        .entries
        .into_iter()
        .chain(p2.entries)
        .map(|(k, _)| k)
        .collect();
    assert_eq!(paged, want);
}

/// Of many callers racing on one key, exactly one wins.
pub async fn kv_set_if_absent_has_exactly_one_winner(engine: &dyn Engine) {
    let kv = Bucket::open(engine, "race", KvLimits::default())
        .await
        .unwrap();
    let mut wins = 0;
    for round in 0..20 {
        let key = format!("k{round}");
        let tries = (0..8).map(|i| {
            let kv = kv.clone();
            let key = key.clone();
            async move { kv.set_if_absent(&key, &[i], None, 5).await.unwrap() }
        });
        let won = futures::future::join_all(tries).await;
        assert_eq!(won.iter().filter(|w| **w).count(), 1, "round {round}");
        wins += 1;
    }
    assert_eq!(wins, 20);
}

/// A scan cursor resumes right after the last key it returned: writes
/// before it do not shift the next page, keys after it are seen, and a
/// cursor of another prefix or of the old offset form is refused.
pub async fn kv_scan_cursors_resume_after_their_key(engine: &dyn Engine) {
    let kv = Bucket::open(engine, "cursors", KvLimits::default())
        .await
        .unwrap();
    for k in ["w1", "w2", "w3", "w4", "x1"] {
        kv.set(k, k.as_bytes(), None, 0).await.unwrap();
    }
    let keys = |p: &crate::kv::ScanPage| -> Vec<String> {
        p.entries.iter().map(|(k, _)| k.clone()).collect()
    };
    let p1 = kv.scan_prefix("w", None, 2, 0).await.unwrap();
    assert_eq!(keys(&p1), ["w1", "w2"]);
    let cursor = p1.next_cursor.clone().expect("a cursor");
    kv.delete("w1").await.unwrap();
    kv.set("w0", b"0", None, 0).await.unwrap();
    kv.set("w5", b"5", None, 0).await.unwrap();
    // The key the cursor names may itself be gone.
    kv.delete("w2").await.unwrap();
    let p2 = kv.scan_prefix("w", Some(&cursor), 2, 0).await.unwrap();
    assert_eq!(keys(&p2), ["w3", "w4"]);
    let p3 = kv
        .scan_prefix("w", p2.next_cursor.as_deref(), 2, 0)
        .await
        .unwrap();
    assert_eq!(keys(&p3), ["w5"]);
    assert_eq!(p3.next_cursor, None);
    // Bound to its prefix: any other prefix refuses it, even one the key
    // it names starts with.
    for other in ["x", "w2x", "v", "", "w2"] {
        assert!(
            matches!(
                kv.scan_prefix(other, Some(&cursor), 2, 0).await,
                Err(AlkError::InvalidArgument(_))
            ),
            "cursor {cursor} with prefix {other}"
        );
    }
    let long = format!("k1.0.{}", "77".repeat(2 * 1024 * 1024));
    for bad in [
        "2",
        "0",
        "",
        "k1.",
        "k1.0.7",
        "k1.0.zz",
        "k1.0.ff",
        "K1.0.77",
        "k1.77",
        "abc",
        // Multibyte text where hex digits belong, a NUL, far too long.
        "k1.0.aéb",
        "k1.0.é",
        "k1.0.00",
        &long,
    ] {
        assert!(
            matches!(
                kv.scan_prefix("", Some(bad), 2, 0).await,
                Err(AlkError::InvalidArgument(_))
            ),
            "cursor {}",
            &bad[..bad.len().min(20)]
        );
    }
    // No key holds NUL, and a prefix with one is refused alike everywhere.
    assert!(matches!(
        kv.scan_prefix("k\0", None, 2, 0).await,
        Err(AlkError::InvalidArgument(_))
    ));
    // Cursors hold any key, multibyte ones included.
    kv.set("wé/ü", b"u", None, 0).await.unwrap();
    let mut seen = Vec::new();
    let mut cursor = None::<String>;
    loop {
        let page = kv.scan_prefix("w", cursor.as_deref(), 1, 0).await.unwrap();
        seen.extend(keys(&page));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, ["w0", "w3", "w4", "w5", "wé/ü"]);
}

/// A swap wins only when the key still holds what was read, in one step:
/// of racing swaps from one reading exactly one wins; increments built on
/// it all count, and a non-counter or an overflow changes nothing.
pub async fn kv_swaps_compare_in_one_step_and_increments_all_count(engine: &dyn Engine) {
    let kv = Bucket::open(engine, "swaps", KvLimits::default())
        .await
        .unwrap();
    let (v, absent) = kv.read_for_swap("k", 0).await.unwrap();
    assert_eq!((v, &absent), (None, &Expected::Absent));
    assert!(kv.swap("k", &absent, b"1", 0).await.unwrap());
    assert!(!kv.swap("k", &absent, b"2", 0).await.unwrap());
    let (v, one) = kv.read_for_swap("k", 0).await.unwrap();
    assert_eq!(v.as_deref(), Some(&b"1"[..]));
    assert!(kv.swap("k", &one, b"2", 0).await.unwrap());
    assert!(
        !kv.swap("k", &one, b"3", 0).await.unwrap(),
        "a stale reading"
    );
    assert_eq!(kv.get("k", 0).await.unwrap().as_deref(), Some(&b"2"[..]));
    // An expired key reads as absent, and a swap expecting absence takes it.
    kv.set("ttl", b"x", Some(10), 0).await.unwrap();
    let (v, e) = kv.read_for_swap("ttl", 10).await.unwrap();
    assert_eq!((v, &e), (None, &Expected::Absent));
    assert!(kv.swap("ttl", &e, b"y", 10).await.unwrap());
    assert_eq!(
        kv.get("ttl", 1_000).await.unwrap().as_deref(),
        Some(&b"y"[..])
    );
    // A reading of a live key does not win once that key has expired.
    kv.set("ttl2", b"x", Some(10), 0).await.unwrap();
    let (_, e) = kv.read_for_swap("ttl2", 5).await.unwrap();
    assert!(!kv.swap("ttl2", &e, b"y", 10).await.unwrap());
    // Races: every swap from the same reading, one winner per round.
    for round in 0..10 {
        let key = format!("race{round}");
        kv.set(&key, b"start", None, 0).await.unwrap();
        let (_, e) = kv.read_for_swap(&key, 0).await.unwrap();
        let tries = (0..8u8).map(|i| {
            let (kv, key, e) = (kv.clone(), key.clone(), e.clone());
            async move { kv.swap(&key, &e, &[i], 0).await.unwrap() }
        });
        let won = futures::future::join_all(tries).await;
        assert_eq!(won.iter().filter(|w| **w).count(), 1, "round {round}");
    }
    // Increments: decimal text, absent is 0, every concurrent one counts.
    let range = i64::MIN as i128..=i64::MAX as i128;
    assert_eq!(kv.increment("n", 5, range.clone(), || 0).await.unwrap(), 5);
    assert_eq!(kv.get("n", 0).await.unwrap().as_deref(), Some(&b"5"[..]));
    assert_eq!(
        kv.increment("n", -7, range.clone(), || 0).await.unwrap(),
        -2
    );
    let adds = (0..8).map(|_| {
        let (kv, range) = (kv.clone(), range.clone());
        async move {
            for _ in 0..10 {
                kv.increment("n", 1, range.clone(), || 0).await.unwrap();
            }
        }
    });
    futures::future::join_all(adds).await;
    assert_eq!(kv.get("n", 0).await.unwrap().as_deref(), Some(&b"78"[..]));
    kv.set("text", b"five", None, 0).await.unwrap();
    kv.set("max", i64::MAX.to_string().as_bytes(), None, 0)
        .await
        .unwrap();
    for (key, delta) in [("text", 1), ("max", 1)] {
        assert!(matches!(
            kv.increment(key, delta, range.clone(), || 0).await,
            Err(AlkError::InvalidArgument(_))
        ));
    }
    assert_eq!(
        kv.get("text", 0).await.unwrap().as_deref(),
        Some(&b"five"[..])
    );
    let unsigned = 0..=u64::MAX as i128;
    assert!(matches!(
        kv.increment("n", -100, unsigned, || 0).await,
        Err(AlkError::InvalidArgument(_))
    ));
    assert_eq!(kv.get("n", 0).await.unwrap().as_deref(), Some(&b"78"[..]));
    // Batch deletes: all keys, absent ones included.
    kv.delete_many(&["n".into(), "text".into(), "nothing".into()])
        .await
        .unwrap();
    assert_eq!(kv.get("n", 0).await.unwrap(), None);
    assert_eq!(kv.get("text", 0).await.unwrap(), None);
    assert_eq!(
        kv.get("max", 0).await.unwrap().as_deref(),
        Some(i64::MAX.to_string().as_bytes())
    );
}

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
    let ids: Vec<i64> = q.send_batch(&[text("x"), text("y")], 2_000).await.unwrap();
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
    let clock = || crate::time::Clock::now_ms(&crate::time::SystemClock);
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

/// Offsets are 1, 2, 3… per stream, never reused after a trim; saved
/// offsets only move forward and never beyond the last offset.
pub async fn stream_offsets_survive_trim_and_saves_only_move_forward(engine: &dyn Engine) {
    let s = Streams::open(engine, StreamLimits::default())
        .await
        .unwrap();
    for i in 1..=5u64 {
        assert_eq!(s.publish("s", None, b"x", 0).await.unwrap(), i);
    }
    assert_eq!(s.publish("other", Some("k"), b"y", 0).await.unwrap(), 1);
    assert_eq!(s.trim_to("s", 5).await.unwrap(), 5);
    assert_eq!(s.publish("s", None, b"x", 0).await.unwrap(), 6);
    s.save_offset("s", "c", 4).await.unwrap();
    s.save_offset("s", "c", 2).await.unwrap();
    assert_eq!(s.get_offset("s", "c").await.unwrap(), Some(4));
    assert!(matches!(
        s.save_offset("s", "c", 7).await,
        Err(AlkError::InvalidArgument(_))
    ));
    let read = s.read_since("s", 0, 10).await.unwrap();
    assert_eq!(read.iter().map(|e| e.offset).collect::<Vec<_>>(), [6]);
    let other = s.read_since("other", 0, 10).await.unwrap();
    assert_eq!(other[0].key.as_deref(), Some("k"));
    assert_eq!(other[0].payload, b"y");
    assert!(matches!(
        s.publish("s", Some(""), b"x", 0).await,
        Err(AlkError::InvalidArgument(_))
    ));
}

/// A transaction applies its publishes and saves together, or not at all;
/// a refusal inside it leaves it usable; after rollback it is finished.
pub async fn stream_transactions_commit_all_or_nothing(engine: &dyn Engine) {
    let s = Streams::open(engine, StreamLimits::default())
        .await
        .unwrap();
    s.publish("in", None, b"a", 0).await.unwrap();
    let tx = s.transaction();
    assert_eq!(tx.publish("out", None, b"derived", 0).await.unwrap(), 1);
    tx.save_offset("in", "worker", 1).await.unwrap();
    tx.rollback().await;
    assert!(s.read_since("out", 0, 10).await.unwrap().is_empty());
    assert_eq!(s.get_offset("in", "worker").await.unwrap(), None);
    assert!(matches!(
        tx.commit().await,
        Err(AlkError::InvalidArgument(_))
    ));
    let tx = s.transaction();
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
pub async fn stream_transactions_held_too_long_are_rolled_back(engine: &dyn Engine) {
    let limits = StreamLimits {
        max_transaction: Duration::from_millis(100),
        ..StreamLimits::default()
    };
    let s = Streams::open(engine, limits).await.unwrap();
    let tx = s.transaction();
    tx.publish("late", None, b"late", 0).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(matches!(
        tx.commit().await,
        Err(AlkError::TransactionAborted(_))
    ));
    assert_eq!(s.publish("late", None, b"next", 0).await.unwrap(), 1);
}

/// Lock deadlines, renewals, releases and takeovers follow the given clock
/// exactly; tokens only grow.
pub async fn lock_expiry_renewal_and_takeover_follow_the_clock(engine: &dyn Engine) {
    let s = Locks::open(engine).await.unwrap();
    let a = s.try_lock("l", "a", 100, 1_000).await.unwrap().unwrap();
    assert_eq!(a.token, 1);
    assert_eq!(s.try_lock("l", "b", 100, 1_099).await.unwrap(), None);
    assert!(s.renew(&a, 100, 1_099).await.unwrap());
    assert_eq!(
        s.holder("l", 1_198).await.unwrap().unwrap().expires_at,
        1_199
    );
    assert_eq!(s.holder("l", 1_199).await.unwrap(), None);
    assert!(
        !s.renew(&a, 100, 1_199).await.unwrap(),
        "late renew accepted"
    );
    let b = s.try_lock("l", "b", 100, 1_199).await.unwrap().unwrap();
    assert_eq!(b.token, 2);
    assert!(
        !s.release(&a, 1_200).await.unwrap(),
        "stale release accepted"
    );
    let stale = Acquired {
        token: 1,
        ..b.clone()
    };
    assert!(!s.release(&stale, 1_200).await.unwrap());
    assert!(s.release(&b, 1_200).await.unwrap());
    assert!(!s.release(&b, 1_200).await.unwrap());
    assert_eq!(
        s.try_lock("l", "c", 100, 1_201)
            .await
            .unwrap()
            .unwrap()
            .token,
        3
    );
    assert!(matches!(
        s.try_lock("l", "", 100, 0).await,
        Err(AlkError::InvalidArgument(_))
    ));
    assert!(matches!(
        s.try_lock("l", "o", 0, 0).await,
        Err(AlkError::InvalidArgument(_))
    ));
}

/// A waiting lock is granted when the holder releases it.
pub async fn lock_wait_is_granted_at_release(engine: &dyn Engine) {
    let s = Locks::open(engine).await.unwrap();
    let clock = || crate::time::Clock::now_ms(&crate::time::SystemClock);
    let held = s
        .try_lock("w", "first", 60_000, clock())
        .await
        .unwrap()
        .unwrap();
    let waiter = {
        let s = s.clone();
        tokio::spawn(async move {
            let clock = || crate::time::Clock::now_ms(&crate::time::SystemClock);
            s.lock_wait(
                "w",
                "second",
                1_000,
                &clock,
                tokio::time::Instant::now() + Duration::from_secs(30),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(s.release(&held, clock()).await.unwrap());
    let got = waiter.await.unwrap().unwrap().unwrap();
    assert_eq!(got.owner, "second");
    assert!(got.token > held.token);
}

/// A listener sees a notification sent after it attached, even before it
/// waits; a wait with nothing sent times out.
pub async fn notify_wakes_a_listener_attached_before(engine: &dyn Engine) {
    let c = Channels::open(engine).unwrap();
    let mut l = c.listen("ch").unwrap();
    c.notify("ch").unwrap();
    assert!(
        l.wait(Some(tokio::time::Instant::now() + Duration::from_secs(5)))
            .await
    );
    assert!(
        !l.wait(Some(
            tokio::time::Instant::now() + Duration::from_millis(30)
        ))
        .await
    );
    assert!(matches!(
        c.notify("__alkstore_x"),
        Err(AlkError::ReservedName(_))
    ));
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

/// A read of many large events stops at the read cap, after at least
/// one, and the next read goes on from there.
pub async fn stream_reads_of_large_events_come_in_pages(engine: &dyn Engine) {
    let s = Streams::open(engine, StreamLimits::default())
        .await
        .unwrap();
    let mib = vec![3u8; 1024 * 1024];
    let events: Vec<(Option<String>, Vec<u8>)> = (0..20).map(|_| (None, mib.clone())).collect();
    s.publish_batch("big", &events, 0).await.unwrap();
    let cap = MAX_READ_BYTES / mib.len();
    let first = s.read_since("big", 0, 1000).await.unwrap();
    assert_eq!(first.len(), cap);
    assert!(first.iter().all(|e| e.payload == mib));
    let rest = s.read_since("big", cap as u64, 1000).await.unwrap();
    let offsets: Vec<u64> = rest.iter().map(|e| e.offset).collect();
    assert_eq!(offsets, ((cap as u64 + 1)..=20).collect::<Vec<u64>>());
    // A single event larger than what is left still comes, alone.
    let one = s.read_since("big", 19, 1000).await.unwrap();
    assert_eq!(one.len(), 1);
}

#[cfg(test)]
mod memory_engine {
    use super::*;

    async fn make() -> Subject {
        Subject {
            engine: Arc::new(crate::memory::MemoryEngine::new()),
            keep: Box::new(()),
        }
    }

    crate::conformance_tests!(make);
}
