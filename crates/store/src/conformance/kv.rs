//! Conformance cases of key-value buckets: expiry, refusals, paged reads,
//! scan order and cursors, set-if-absent and swaps.

use crate::time::ManualClock;
use crate::engine::Engine;
use crate::error::AlkError;
use crate::kv::{Bucket, Expected};
use crate::limits::{KvLimits, MAX_READ_BYTES};

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
    assert_eq!(kv.increment("n", 5, range.clone(), &ManualClock::new(0)).await.unwrap(), 5);
    assert_eq!(kv.get("n", 0).await.unwrap().as_deref(), Some(&b"5"[..]));
    assert_eq!(
        kv.increment("n", -7, range.clone(), &ManualClock::new(0)).await.unwrap(),
        -2
    );
    let adds = (0..8).map(|_| {
        let (kv, range) = (kv.clone(), range.clone());
        async move {
            for _ in 0..10 {
                kv.increment("n", 1, range.clone(), &ManualClock::new(0)).await.unwrap();
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
            kv.increment(key, delta, range.clone(), &ManualClock::new(0)).await,
            Err(AlkError::InvalidArgument(_))
        ));
    }
    assert_eq!(
        kv.get("text", 0).await.unwrap().as_deref(),
        Some(&b"five"[..])
    );
    let unsigned = 0..=u64::MAX as i128;
    assert!(matches!(
        kv.increment("n", -100, unsigned, &ManualClock::new(0)).await,
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
