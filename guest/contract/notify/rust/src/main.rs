//! The notify contract, checked from inside a Rust guest. See ../README.md.

use std::time::{SystemTime, UNIX_EPOCH};

use alk_guest::notify;
use alk_guest::{Contract, Error, ensure, ensure_matches, ok};

fn main() {
    let mut c = Contract::new();
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let fresh = |case: &str| format!("c{nonce}-{case}");

    c.case(
        "a-listener-sees-a-notification-sent-after-it-attached",
        || {
            let ch = fresh("after");
            let l = ok!(notify::listen(&ch));
            ensure!(l.channel() == ch);
            ok!(notify::notify(&ch));
            ensure!(l.wait(5_000), "no wake");
            Ok(())
        },
    );
    c.case(
        "a-listener-does-not-see-notifications-from-before-it-attached",
        || {
            let ch = fresh("before");
            ok!(notify::notify(&ch));
            let l = ok!(notify::listen(&ch));
            ensure!(!l.wait(30), "woke for an earlier notification");
            Ok(())
        },
    );
    c.case("a-wake-is-consumed", || {
        let ch = fresh("consumed");
        let l = ok!(notify::listen(&ch));
        ok!(notify::notify(&ch));
        ensure!(l.wait(5_000));
        ensure!(!l.wait(30), "woke twice for one notification");
        Ok(())
    });
    c.case("notifications-may-coalesce-but-are-never-lost", || {
        let ch = fresh("coalesce");
        let l = ok!(notify::listen(&ch));
        for _ in 0..5 {
            ok!(notify::notify(&ch));
        }
        ensure!(l.wait(5_000), "no wake for five notifications");
        Ok(())
    });
    c.case("channels-are-separate", || {
        let (a, b) = (fresh("sep-a"), fresh("sep-b"));
        let la = ok!(notify::listen(&a));
        ok!(notify::notify(&b));
        ensure!(!la.wait(30), "woke for another channel");
        Ok(())
    });
    c.case("every-listener-of-a-channel-wakes", || {
        let ch = fresh("fanout");
        let l1 = ok!(notify::listen(&ch));
        let l2 = ok!(notify::listen(&ch));
        ok!(notify::notify(&ch));
        ensure!(l1.wait(5_000) && l2.wait(5_000));
        Ok(())
    });
    c.case("a-timeout-is-false-not-an-error", || {
        let l = ok!(notify::listen(&fresh("quiet")));
        ensure!(!l.wait(20));
        ensure!(!l.wait(0));
        Ok(())
    });
    c.case("the-pollable-is-ready-after-a-notification", || {
        let ch = fresh("pollable");
        let l = ok!(notify::listen(&ch));
        let p = l.subscribe();
        ensure!(!p.ready(), "ready before any notification");
        ok!(notify::notify(&ch));
        p.block();
        ensure!(l.wait(0), "the wake was not there for wait");
        Ok(())
    });
    c.case("bad-channel-names-are-invalid-name", || {
        for bad in &alk_guest::bad_names() {
            ensure_matches!(notify::notify(bad), Err(Error::InvalidName(_)));
            ensure_matches!(notify::listen(bad).map(|_| ()), Err(Error::InvalidName(_)));
        }
        Ok(())
    });
    c.case("reserved-channel-name-is-reserved-name", || {
        ensure_matches!(
            notify::notify("__alkstore_listener_reconnected__"),
            Err(Error::ReservedName(_))
        );
        Ok(())
    });
    c.finish();
}
