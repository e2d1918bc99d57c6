//! The `localkv.v1` contract, checked from inside a Rust guest. See ../README.md.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alk_guest::kv::{Bucket, Entry};
use alk_guest::{Contract, Error, ensure, ensure_matches, ok};

fn nonce() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Waits until a key set now with `ttl_ms` has expired by the host's clock.
fn outlive(ttl_ms: u64) {
    std::thread::sleep(Duration::from_millis(ttl_ms + 5));
}

fn keys(entries: &[Entry]) -> Vec<&str> {
    entries.iter().map(|e| e.key.as_str()).collect()
}

fn main() {
    let mut c = Contract::new();
    // A bucket of its own, so runs on a shared data directory never meet.
    let name = format!("contract-{}", nonce());
    let b = Bucket::open(&name).expect("open the contract bucket");

    c.case("open-returns-named-bucket", || {
        ensure!(b.name() == name);
        Ok(())
    });
    c.case("get-absent-is-none", || {
        ensure_matches!(b.get("missing"), Ok(None));
        Ok(())
    });
    c.case("set-then-get", || {
        ok!(b.set("a", b"1", None));
        ensure_matches!(b.get("a"), Ok(Some(v)) if v == b"1");
        Ok(())
    });
    c.case("set-overwrites-value", || {
        ok!(b.set("a", b"2", None));
        ensure_matches!(b.get("a"), Ok(Some(v)) if v == b"2");
        Ok(())
    });
    c.case("set-without-ttl-clears-ttl", || {
        ok!(b.set("ttl-cleared", b"x", Some(30)));
        ok!(b.set("ttl-cleared", b"y", None));
        outlive(30);
        ensure_matches!(b.get("ttl-cleared"), Ok(Some(v)) if v == b"y");
        Ok(())
    });
    c.case("binary-and-empty-values-round-trip", || {
        let all: Vec<u8> = (0..=255u8).collect();
        ok!(b.set("bin", &all, None));
        ensure_matches!(b.get("bin"), Ok(Some(v)) if v == all);
        ok!(b.set("empty", b"", None));
        ensure_matches!(b.get("empty"), Ok(Some(v)) if v.is_empty());
        Ok(())
    });
    c.case("unicode-keys-round-trip", || {
        ok!(b.set("ключ/日本/🔑", b"u", None));
        ensure_matches!(b.get("ключ/日本/🔑"), Ok(Some(v)) if v == b"u");
        Ok(())
    });
    c.case("set-if-absent-wins-on-absent-key", || {
        ensure_matches!(b.set_if_absent("once", b"first", None), Ok(true));
        ensure_matches!(b.get("once"), Ok(Some(v)) if v == b"first");
        Ok(())
    });
    c.case("set-if-absent-loses-on-live-key", || {
        ensure_matches!(b.set_if_absent("once", b"second", None), Ok(false));
        ensure_matches!(b.get("once"), Ok(Some(v)) if v == b"first");
        Ok(())
    });
    c.case("set-if-absent-loses-on-unexpired-ttl-key", || {
        ok!(b.set("lease", b"holder-1", Some(60_000)));
        ensure_matches!(b.set_if_absent("lease", b"holder-2", None), Ok(false));
        ensure_matches!(b.get("lease"), Ok(Some(v)) if v == b"holder-1");
        Ok(())
    });
    c.case("expired-key-reads-absent", || {
        // Only what holds however slow the machine is: once the TTL has
        // passed the key is gone (that it is there before is the lease
        // cases' check, with a TTL no machine outlives by accident).
        ok!(b.set("short", b"x", Some(20)));
        outlive(20);
        ensure_matches!(b.get("short"), Ok(None));
        Ok(())
    });
    c.case("exists-live-absent-expired", || {
        ok!(b.set("here", b"x", None));
        ensure_matches!(b.exists("here"), Ok(true));
        ensure_matches!(b.exists("not-here"), Ok(false));
        ok!(b.set("lasting", b"x", Some(600_000)));
        ensure_matches!(b.exists("lasting"), Ok(true));
        ok!(b.set("fading", b"x", Some(20)));
        outlive(20);
        ensure_matches!(b.exists("fading"), Ok(false));
        Ok(())
    });
    c.case("set-if-absent-takes-over-expired-key", || {
        ensure_matches!(b.set_if_absent("takeover", b"old", Some(20)), Ok(true));
        outlive(20);
        ensure_matches!(b.set_if_absent("takeover", b"new", None), Ok(true));
        ensure_matches!(b.get("takeover"), Ok(Some(v)) if v == b"new");
        // The new value has no TTL: it stays.
        ensure_matches!(b.set_if_absent("takeover", b"newer", None), Ok(false));
        Ok(())
    });
    c.case("delete-removes-and-absent-delete-is-ok", || {
        ok!(b.set("gone", b"x", None));
        ok!(b.delete("gone"));
        ensure_matches!(b.get("gone"), Ok(None));
        ok!(b.delete("gone"));
        ok!(b.delete("never-existed"));
        Ok(())
    });
    c.case("set-many-then-get-many", || {
        let entries: Vec<Entry> = ["m1", "m2", "m3"]
            .iter()
            .map(|k| Entry {
                key: k.to_string(),
                value: k.as_bytes().to_vec(),
            })
            .collect();
        ok!(b.set_many(&entries, None));
        let keys: Vec<String> = ["m1", "m2", "missing", "m3"]
            .iter()
            .map(|k| k.to_string())
            .collect();
        let got = ok!(b.get_many(&keys));
        ensure!(
            got == vec![
                Some(b"m1".to_vec()),
                Some(b"m2".to_vec()),
                None,
                Some(b"m3".to_vec())
            ],
            "{got:?}"
        );
        Ok(())
    });
    c.case("set-many-is-all-or-nothing", || {
        let entries = vec![
            Entry {
                key: "all-1".into(),
                value: b"x".to_vec(),
            },
            Entry {
                key: "all-2".into(),
                value: vec![0u8; 1024 * 1024 + 1],
            },
        ];
        ensure_matches!(b.set_many(&entries, None), Err(Error::PayloadTooLarge(_)));
        ensure_matches!(b.get("all-1"), Ok(None));
        let too_many: Vec<Entry> = (0..1001)
            .map(|i| Entry {
                key: format!("n{i}"),
                value: vec![],
            })
            .collect();
        ensure_matches!(b.set_many(&too_many, None), Err(Error::InvalidArgument(_)));
        ensure_matches!(b.get("n0"), Ok(None));
        Ok(())
    });
    c.case("handles-share-the-bucket", || {
        let again = ok!(Bucket::open(&name));
        ok!(again.set("shared", b"s", None));
        ensure_matches!(b.get("shared"), Ok(Some(v)) if v == b"s");
        Ok(())
    });
    c.case("buckets-are-isolated", || {
        let other = ok!(Bucket::open(&format!("{name}-other")));
        ensure_matches!(other.get("a"), Ok(None));
        ok!(other.set("a", b"other", None));
        ensure_matches!(b.get("a"), Ok(Some(v)) if v == b"2");
        Ok(())
    });

    // Scans run on a bucket of their own so the expected sets are exact.
    let s = Bucket::open(&format!("{name}-scan")).expect("open the scan bucket");
    c.case("scan-prefix-orders-by-key-and-filters-prefix", || {
        for k in [
            "user:3", "user:1", "user:2", "usex", "user", "admin:1", "user:10",
        ] {
            ok!(s.set(k, k.as_bytes(), None));
        }
        let page = ok!(s.scan_prefix("user:", None, 100));
        ensure!(
            keys(&page.entries) == ["user:1", "user:10", "user:2", "user:3"],
            "{:?}",
            keys(&page.entries)
        );
        ensure!(page.entries.iter().all(|e| e.value == e.key.as_bytes()));
        ensure!(page.next_cursor.is_none());
        Ok(())
    });
    c.case("scan-empty-prefix-returns-every-key", || {
        let page = ok!(s.scan_prefix("", None, 100));
        ensure!(page.entries.len() == 7, "{:?}", keys(&page.entries));
        ensure!(keys(&page.entries)[0] == "admin:1");
        Ok(())
    });
    c.case("scan-skips-expired-without-error", || {
        ok!(s.set("user:4", b"x", Some(20)));
        outlive(20);
        let page = ok!(s.scan_prefix("user:", None, 100));
        ensure!(!keys(&page.entries).contains(&"user:4"));
        ensure!(page.entries.len() == 4);
        Ok(())
    });
    c.case("scan-pages-with-cursor", || {
        let mut seen = Vec::new();
        let mut cursor = None;
        let mut pages = 0;
        loop {
            let page = ok!(s.scan_prefix("user:", cursor.as_deref(), 3));
            ensure!(page.entries.len() <= 3);
            seen.extend(page.entries.iter().map(|e| e.key.clone()));
            pages += 1;
            ensure!(pages < 10, "scan does not end");
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        ensure!(pages == 2, "pages = {pages}");
        ensure!(
            seen == ["user:1", "user:10", "user:2", "user:3"],
            "{seen:?}"
        );
        Ok(())
    });
    c.case("scan-limit-zero-is-clamped-to-one", || {
        let page = ok!(s.scan_prefix("user:", None, 0));
        ensure!(page.entries.len() == 1);
        ensure!(page.next_cursor.is_some());
        Ok(())
    });
    c.case("scan-prefix-without-matches-is-empty", || {
        let page = ok!(s.scan_prefix("zzz", None, 10));
        ensure!(page.entries.is_empty() && page.next_cursor.is_none());
        Ok(())
    });
    c.case("scan-rejects-foreign-cursors", || {
        for bad in ["abc", "-1", "01", "", "1.5", "99999999999999999999999", "3"] {
            ensure_matches!(
                s.scan_prefix("user:", Some(bad), 10),
                Err(Error::InvalidArgument(_))
            );
        }
        Ok(())
    });
    c.case("scan-cursor-is-bound-to-its-prefix", || {
        let page = ok!(s.scan_prefix("user:", None, 1));
        let cursor = page.next_cursor.expect("a cursor");
        for other in ["u", "v"] {
            ensure_matches!(
                s.scan_prefix(other, Some(&cursor), 10),
                Err(Error::InvalidArgument(_))
            );
        }
        Ok(())
    });
    c.case("scan-pages-survive-concurrent-writes", || {
        for k in ["w1", "w2", "w3", "w4"] {
            ok!(s.set(k, k.as_bytes(), None));
        }
        let first = ok!(s.scan_prefix("w", None, 2));
        ensure!(keys(&first.entries) == ["w1", "w2"]);
        ok!(s.delete("w1"));
        ok!(s.set("w0", b"w0", None));
        ok!(s.set("w5", b"w5", None));
        let second = ok!(s.scan_prefix("w", first.next_cursor.as_deref(), 2));
        ensure!(
            keys(&second.entries) == ["w3", "w4"],
            "{:?}",
            keys(&second.entries)
        );
        let third = ok!(s.scan_prefix("w", second.next_cursor.as_deref(), 2));
        ensure!(keys(&third.entries) == ["w5"] && third.next_cursor.is_none());
        Ok(())
    });

    c.case("empty-key-is-invalid-argument", || {
        ensure_matches!(b.set("", b"x", None), Err(Error::InvalidArgument(_)));
        ensure_matches!(b.get(""), Err(Error::InvalidArgument(_)));
        Ok(())
    });
    c.case("nul-in-key-is-invalid-argument", || {
        ensure_matches!(b.set("a\0b", b"x", None), Err(Error::InvalidArgument(_)));
        Ok(())
    });
    c.case("oversized-key-is-payload-too-large", || {
        let key = "k".repeat(1025);
        ensure_matches!(b.set(&key, b"x", None), Err(Error::PayloadTooLarge(t)) if t.size == 1025 && t.limit == 1024);
        Ok(())
    });
    c.case("oversized-value-is-payload-too-large-and-writes-nothing", || {
        let value = vec![7u8; 1024 * 1024 + 1];
        ensure_matches!(b.set("big", &value, None), Err(Error::PayloadTooLarge(t)) if t.limit == 1024 * 1024);
        ensure_matches!(b.set_if_absent("big", &value, None), Err(Error::PayloadTooLarge(_)));
        ensure_matches!(b.get("big"), Ok(None));
        // The largest allowed value is stored.
        let max = vec![7u8; 1024 * 1024];
        ok!(b.set("big", &max, None));
        ensure_matches!(b.get("big"), Ok(Some(v)) if v.len() == max.len());
        Ok(())
    });
    c.case("zero-or-overflowing-ttl-is-invalid-argument", || {
        ensure_matches!(b.set("t", b"x", Some(0)), Err(Error::InvalidArgument(_)));
        ensure_matches!(
            b.set("t", b"x", Some(u64::MAX)),
            Err(Error::InvalidArgument(_))
        );
        ensure_matches!(
            b.set_if_absent("t", b"x", Some(0)),
            Err(Error::InvalidArgument(_))
        );
        ensure_matches!(b.get("t"), Ok(None));
        Ok(())
    });
    c.case("bad-bucket-names-are-invalid-name", || {
        for bad in &alk_guest::bad_names() {
            ensure_matches!(Bucket::open(bad).map(|_| ()), Err(Error::InvalidName(_)));
        }
        ok!(Bucket::open(&"b".repeat(100)).map(|_| ()));
        Ok(())
    });
    c.case("reserved-bucket-name-is-reserved-name", || {
        ensure_matches!(
            Bucket::open("__alkstore_internal").map(|_| ()),
            Err(Error::ReservedName(_))
        );
        Ok(())
    });
    c.finish();
}
