//! Conformance cases of locks: deadlines, renewals, takeovers and waits.

use std::time::Duration;

use crate::engine::Engine;
use crate::error::AlkError;
use crate::lock::{Acquired, Locks};

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
    let clock = crate::time::SystemClock;
    let held = s
        .try_lock("w", "first", 60_000, crate::time::Clock::now_ms(&clock))
        .await
        .unwrap()
        .unwrap();
    let waiter = {
        let s = s.clone();
        tokio::spawn(async move {
            let clock = crate::time::SystemClock;
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
    assert!(s.release(&held, crate::time::Clock::now_ms(&clock)).await.unwrap());
    let got = waiter.await.unwrap().unwrap().unwrap();
    assert_eq!(got.owner, "second");
    assert!(got.token > held.token);
}

/// The locks held at a time, by name, in pages: released and expired ones
/// are not listed.
pub async fn lock_holders_list_the_live_locks_by_name(engine: &dyn Engine) {
    let s = Locks::open(engine).await.unwrap();
    assert!(s.holders(None, 10, 0).await.unwrap().is_empty());
    s.try_lock("b", "o1", 1_000, 0).await.unwrap().unwrap();
    s.try_lock("a", "o2", 5_000, 0).await.unwrap().unwrap();
    let c = s.try_lock("c", "o3", 5_000, 0).await.unwrap().unwrap();
    assert!(s.release(&c, 10).await.unwrap());
    let names = |held: Vec<(String, crate::lock::Holder)>| {
        held.into_iter()
            .map(|(name, h)| format!("{name}:{}", h.owner))
            .collect::<Vec<_>>()
    };
    assert_eq!(names(s.holders(None, 10, 10).await.unwrap()), ["a:o2", "b:o1"]);
    assert_eq!(names(s.holders(Some("a"), 10, 10).await.unwrap()), ["b:o1"]);
    assert_eq!(names(s.holders(None, 1, 10).await.unwrap()), ["a:o2"]);
    assert_eq!(names(s.holders(None, 10, 1_000).await.unwrap()), ["a:o2"]);
    let held = s.holders(None, 10, 10).await.unwrap();
    assert_eq!((held[0].1.expires_at, held[0].1.token), (5_000, 1));
}
