//! The `locallock.v1` contract, checked from inside a Rust guest. See ../README.md.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alk_guest::lock;
use alk_guest::{Contract, Error, ensure, ensure_matches, ok};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn main() {
    let mut c = Contract::new();
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let fresh = |case: &str| format!("c{nonce}-{case}");
    let pause = |ms: u64| std::thread::sleep(Duration::from_millis(ms));

    c.case("try-lock-acquires-a-free-lock", || {
        let name = fresh("free");
        let l = ok!(lock::try_lock(&name, "alice", 60_000)).ok_or("not acquired")?;
        ensure!(l.name() == name && l.owner() == "alice");
        ensure!(l.token() == 1, "first token {}", l.token());
        Ok(())
    });
    c.case("a-held-lock-is-not-acquired-by-anyone-else", || {
        let name = fresh("held");
        let _l = ok!(lock::try_lock(&name, "alice", 60_000)).ok_or("not acquired")?;
        ensure_matches!(
            lock::try_lock(&name, "bob", 60_000).map(|l| l.is_some()),
            Ok(false)
        );
        Ok(())
    });
    c.case("locks-are-not-re-entrant", || {
        let name = fresh("reentrant");
        let _l = ok!(lock::try_lock(&name, "alice", 60_000)).ok_or("not acquired")?;
        ensure_matches!(
            lock::try_lock(&name, "alice", 60_000).map(|l| l.is_some()),
            Ok(false)
        );
        Ok(())
    });
    c.case("holder-reports-owner-deadline-and-token", || {
        let name = fresh("holder");
        let before = now_ms();
        let l = ok!(lock::try_lock(&name, "alice", 60_000)).ok_or("not acquired")?;
        let h = ok!(lock::holder(&name)).ok_or("no holder")?;
        ensure!(h.owner == "alice" && h.token == l.token());
        ensure!(
            h.expires_at >= before + 59_000 && h.expires_at <= now_ms() + 61_000,
            "{}",
            h.expires_at
        );
        Ok(())
    });
    c.case("holder-of-a-free-lock-is-none", || {
        ensure_matches!(lock::holder(&fresh("nobody")), Ok(None));
        Ok(())
    });
    c.case("renew-resets-the-deadline-from-now", || {
        let name = fresh("renew");
        let l = ok!(lock::try_lock(&name, "alice", 60_000)).ok_or("not acquired")?;
        ensure_matches!(l.renew(120_000), Ok(true));
        let h = ok!(lock::holder(&name)).ok_or("no holder")?;
        ensure!(h.expires_at >= now_ms() + 110_000, "{}", h.expires_at);
        // Absolute, not additive: a shorter TTL moves the deadline closer.
        ensure_matches!(l.renew(30_000), Ok(true));
        let h = ok!(lock::holder(&name)).ok_or("no holder")?;
        ensure!(h.expires_at <= now_ms() + 31_000, "{}", h.expires_at);
        Ok(())
    });
    c.case("a-late-renew-is-refused", || {
        let name = fresh("late");
        let l = ok!(lock::try_lock(&name, "alice", 30)).ok_or("not acquired")?;
        pause(50);
        ensure_matches!(l.renew(60_000), Ok(false));
        ensure_matches!(lock::holder(&name), Ok(None));
        Ok(())
    });
    c.case("release-frees-the-lock", || {
        let name = fresh("release");
        let l = ok!(lock::try_lock(&name, "alice", 60_000)).ok_or("not acquired")?;
        ensure_matches!(l.release(), Ok(true));
        ensure_matches!(lock::holder(&name), Ok(None));
        let b = ok!(lock::try_lock(&name, "bob", 60_000)).ok_or("not re-acquired")?;
        ensure!(b.token() == 2);
        Ok(())
    });
    c.case("release-twice-is-false", || {
        let name = fresh("twice");
        let l = ok!(lock::try_lock(&name, "alice", 60_000)).ok_or("not acquired")?;
        ensure_matches!(l.release(), Ok(true));
        ensure_matches!(l.release(), Ok(false));
        ensure_matches!(l.renew(1000), Ok(false));
        Ok(())
    });
    c.case(
        "an-expired-lock-is-taken-over-and-the-old-holder-loses-it",
        || {
            let name = fresh("expiry");
            let old = ok!(lock::try_lock(&name, "alice", 30)).ok_or("not acquired")?;
            pause(50);
            let new = ok!(lock::try_lock(&name, "bob", 60_000)).ok_or("not taken over")?;
            ensure!(new.token() > old.token());
            ensure_matches!(old.renew(60_000), Ok(false));
            ensure_matches!(old.release(), Ok(false));
            let h = ok!(lock::holder(&name)).ok_or("no holder")?;
            ensure!(h.owner == "bob" && h.token == new.token());
            Ok(())
        },
    );
    c.case("the-same-owner-cannot-act-on-an-older-acquisition", || {
        let name = fresh("same-owner");
        let old = ok!(lock::try_lock(&name, "alice", 30)).ok_or("not acquired")?;
        pause(50);
        let new = ok!(lock::try_lock(&name, "alice", 60_000)).ok_or("not re-acquired")?;
        ensure_matches!(old.release(), Ok(false));
        ensure_matches!(lock::holder(&name), Ok(Some(h)) if h.token == new.token());
        Ok(())
    });
    c.case("tokens-strictly-increase-with-every-acquisition", || {
        let name = fresh("tokens");
        let mut last = 0;
        for owner in ["a", "b", "a", "c", "b"] {
            let l = ok!(lock::try_lock(&name, owner, 60_000)).ok_or("not acquired")?;
            ensure!(l.token() > last, "{} after {last}", l.token());
            last = l.token();
            ensure_matches!(l.release(), Ok(true));
        }
        ensure!(last == 5);
        // Tokens are per name.
        ensure_matches!(
            lock::try_lock(&fresh("tokens-other"), "a", 60_000).map(|l| l.map(|l| l.token())),
            Ok(Some(1))
        );
        Ok(())
    });
    c.case("dropping-the-handle-releases-the-lock", || {
        let name = fresh("drop");
        {
            let _l = ok!(lock::try_lock(&name, "alice", 60_000)).ok_or("not acquired")?;
        }
        ensure_matches!(lock::holder(&name), Ok(None));
        ensure_matches!(
            lock::try_lock(&name, "bob", 60_000).map(|l| l.is_some()),
            Ok(true)
        );
        Ok(())
    });
    c.case(
        "wait-lock-takes-an-expired-lock-and-times-out-on-a-held-one",
        || {
            let name = fresh("wait");
            let held = ok!(lock::try_lock(&name, "alice", 30)).ok_or("not acquired")?;
            // Held for 30 ms more: a 10 s wait gets it once it expires.
            let next =
                ok!(lock::wait_lock(&name, "bob", 60_000, 10_000)).ok_or("wait-lock timed out")?;
            ensure!(next.token() > held.token());
            ensure_matches!(
                lock::wait_lock(&name, "carol", 60_000, 20).map(|l| l.is_some()),
                Ok(false)
            );
            Ok(())
        },
    );
    c.case("zero-or-overflowing-ttl-is-invalid-argument", || {
        let name = fresh("ttl");
        ensure_matches!(
            lock::try_lock(&name, "alice", 0).map(|_| ()),
            Err(Error::InvalidArgument(_))
        );
        ensure_matches!(
            lock::try_lock(&name, "alice", u64::MAX).map(|_| ()),
            Err(Error::InvalidArgument(_))
        );
        let l = ok!(lock::try_lock(&name, "alice", 60_000)).ok_or("not acquired")?;
        ensure_matches!(l.renew(0), Err(Error::InvalidArgument(_)));
        ensure_matches!(lock::holder(&name), Ok(Some(_)));
        Ok(())
    });
    c.case("bad-owners-are-invalid-argument", || {
        let name = fresh("owner");
        let long = "o".repeat(257);
        for bad in ["", "a\0b", long.as_str()] {
            ensure_matches!(
                lock::try_lock(&name, bad, 1000).map(|_| ()),
                Err(Error::InvalidArgument(_))
            );
        }
        ensure_matches!(
            lock::try_lock(&name, "worker 7 @ host:42 ✓", 1000).map(|l| l.is_some()),
            Ok(true)
        );
        Ok(())
    });
    c.case("bad-lock-names-are-invalid-name", || {
        for bad in &alk_guest::bad_names() {
            ensure_matches!(
                lock::try_lock(bad, "alice", 1000).map(|_| ()),
                Err(Error::InvalidName(_))
            );
            ensure_matches!(lock::holder(bad), Err(Error::InvalidName(_)));
        }
        Ok(())
    });
    c.case("reserved-lock-name-is-reserved-name", || {
        ensure_matches!(
            lock::try_lock("__alkstore_scheduler", "alice", 1000).map(|_| ()),
            Err(Error::ReservedName(_))
        );
        Ok(())
    });
    c.case("holders-list-held-locks-by-name-in-pages", || {
        let prefix = fresh("holders-");
        let name = |k: &str| format!("{prefix}{k}");
        let before = now_ms();
        let a = ok!(lock::try_lock(&name("a"), "alice", 60_000)).ok_or("a")?;
        let _b = ok!(lock::try_lock(&name("b"), "bob", 60_000)).ok_or("b")?;
        let c2 = ok!(lock::try_lock(&name("c"), "carol", 60_000)).ok_or("c")?;
        let _gone = ok!(lock::try_lock(&name("d"), "dave", 30)).ok_or("d")?;
        ensure!(ok!(c2.release()));
        pause(60);
        let first = ok!(lock::holders(Some(&prefix), 1));
        ensure!(first.len() == 1 && first[0].name == name("a"), "{first:?}");
        ensure!(
            first[0].owner == "alice"
                && first[0].token == a.token()
                && first[0].expires_at >= before + 59_000,
            "{first:?}"
        );
        let rest: Vec<_> = ok!(lock::holders(Some(&first[0].name), 1000))
            .into_iter()
            .filter(|h| h.name.starts_with(&prefix))
            .map(|h| (h.name, h.owner))
            .collect();
        // Released and expired locks are not listed.
        ensure!(rest == [(name("b"), "bob".to_string())], "{rest:?}");
        ensure_matches!(lock::holders(Some("a/b"), 1), Err(Error::InvalidName(_)));
        Ok(())
    });
    c.finish();
}
