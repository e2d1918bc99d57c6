//! A `wasi:keyvalue@0.2.0-draft2` guest: nothing in it knows alk.
//!
//! Usage: `keyvalue-draft2 <command> …`
//! - `check <store>`: the draft2 behaviour alk documents (signed
//!   increments, compare-and-swap, `get-many` with one entry per key,
//!   string cursors, errors), one `ok <step>` line each; panics on the
//!   first step that does not hold.
//! - `cas-race <store> <rounds> <id>`: for each round r, compare-and-swaps
//!   key `race-<r>` from `start` (or absent) to `<id>`; prints `won <r>`
//!   for each round it won, then `done`.
//! - `list <store> [page-delay-ms]`: every key, one per line, paging with
//!   the string cursor (sleeping between pages); then `listed <n>`.
//! - `increment <store> <key> <times> <delta>`: adds `delta` that many
//!   times; prints the last value.
//! - `fill <store> <n>`: stores keys `s-00000` … (value `s`), 1,000 per
//!   `set-many`; prints `filled <n>`.
//! - `churn <store> <n> <seed>`: `n` times, stores and deletes a key that
//!   sorts among the `fill` keys (`s-<i>-churn`); prints `churned <n>`.

wit_bindgen::generate!({
    path: "../../wit",
    world: "wasi:keyvalue/imports@0.2.0-draft2",
    generate_all,
});

use wasi::keyvalue0_2_0_draft2::atomics::{self, Cas, CasError};
use wasi::keyvalue0_2_0_draft2::batch;
use wasi::keyvalue0_2_0_draft2::store::{self, Error};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["check", id] => check(id),
        ["cas-race", id, rounds, me] => {
            let bucket = store::open(id).expect("open");
            let rounds: u32 = rounds.parse().expect("rounds is a number");
            for r in 0..rounds {
                let key = format!("race-{r}");
                let cas = Cas::new(&bucket, &key).expect("cas new");
                let current = cas.current().expect("current");
                if current.is_some() && current.as_deref() != Some(b"start".as_slice()) {
                    continue;
                }
                match atomics::swap(cas, me.as_bytes()) {
                    Ok(()) => println!("won {r}"),
                    Err(CasError::CasFailed(_)) => {}
                    Err(CasError::StoreError(e)) => panic!("swap {key}: {e:?}"),
                }
            }
            println!("done");
        }
        ["list", id, rest @ ..] => {
            let delay: u64 = rest.first().map_or(0, |d| d.parse().expect("a delay"));
            let bucket = store::open(id).expect("open");
            let mut cursor: Option<String> = None;
            let mut n = 0;
            loop {
                let page = bucket.list_keys(cursor.as_deref()).expect("list-keys");
                for k in &page.keys {
                    println!("{k}");
                }
                n += page.keys.len();
                match page.cursor {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
                std::thread::sleep(std::time::Duration::from_millis(delay));
            }
            println!("listed {n}");
        }
        ["increment", id, key, times, delta] => {
            let bucket = store::open(id).expect("open");
            let times: u64 = times.parse().expect("times is a number");
            let delta: i64 = delta.parse().expect("delta is a number");
            let mut last = 0;
            for _ in 0..times {
                last = atomics::increment(&bucket, key, delta).expect("increment");
            }
            println!("{last}");
        }
        ["fill", id, n] => {
            let bucket = store::open(id).expect("open");
            let n: usize = n.parse().expect("n is a number");
            let keys: Vec<(String, Vec<u8>)> = (0..n)
                .map(|i| (format!("s-{i:05}"), b"s".to_vec()))
                .collect();
            for chunk in keys.chunks(1000) {
                batch::set_many(&bucket, chunk).expect("set-many");
            }
            println!("filled {n}");
        }
        ["churn", id, n, seed] => {
            let bucket = store::open(id).expect("open");
            let n: u64 = n.parse().expect("n is a number");
            let seed: u64 = seed.parse().expect("seed is a number");
            for i in 0..n {
                let key = format!("s-{:05}-churn", (i * 7919 + seed * 104_729) % 3000);
                bucket.set(&key, b"c").expect("set");
                bucket.delete(&key).expect("delete");
            }
            println!("churned {n}");
        }
        _ => {
            eprintln!(
                "usage: keyvalue-draft2 check <store> | cas-race <store> <rounds> <id> | list <store> [delay-ms] | increment <store> <key> <times> <delta> | fill <store> <n> | churn <store> <n> <seed>"
            );
            std::process::exit(2);
        }
    }
}

fn other_starting(e: Error, prefix: &str) -> bool {
    matches!(e, Error::Other(m) if m.starts_with(prefix))
}

fn check(id: &str) {
    let step = |name: &str| println!("ok {name}");
    let bucket = store::open(id).expect("open");

    bucket.set("k", b"v").expect("set");
    assert_eq!(
        bucket.get("k").expect("get").as_deref(),
        Some(b"v".as_slice())
    );
    assert!(bucket.exists("k").expect("exists"));
    bucket.delete("k").expect("delete");
    assert_eq!(bucket.get("k").expect("get"), None);
    step("set-get-exists-delete");

    assert_eq!(atomics::increment(&bucket, "n", 5).unwrap(), 5);
    assert_eq!(atomics::increment(&bucket, "n", -8).unwrap(), -3);
    assert_eq!(bucket.get("n").unwrap().as_deref(), Some(b"-3".as_slice()));
    bucket.set("text", b"five").unwrap();
    let e = atomics::increment(&bucket, "text", 1).unwrap_err();
    assert!(other_starting(e, "invalid-argument: "), "a non-number");
    assert_eq!(
        bucket.get("text").unwrap().as_deref(),
        Some(b"five".as_slice())
    );
    bucket.set("max", i64::MAX.to_string().as_bytes()).unwrap();
    let e = atomics::increment(&bucket, "max", 1).unwrap_err();
    assert!(other_starting(e, "invalid-argument: "), "an overflow");
    assert_eq!(
        bucket.get("max").unwrap().as_deref(),
        Some(i64::MAX.to_string().as_bytes())
    );
    step("increment-is-signed-decimal-text");

    // A swap from a reading of an absent key creates it.
    let cas = Cas::new(&bucket, "c").unwrap();
    assert_eq!(cas.current().unwrap(), None);
    atomics::swap(cas, b"1").expect("swap on absent");
    // Two readings; the first swap wins, the second fails with a fresh
    // reading that wins on retry.
    let first = Cas::new(&bucket, "c").unwrap();
    let second = Cas::new(&bucket, "c").unwrap();
    assert_eq!(first.current().unwrap().as_deref(), Some(b"1".as_slice()));
    atomics::swap(first, b"2").expect("the first swap");
    let fresh = match atomics::swap(second, b"3") {
        Err(CasError::CasFailed(fresh)) => fresh,
        other => panic!("a stale swap: {:?}", other.map_err(|e| format!("{e:?}"))),
    };
    assert_eq!(fresh.current().unwrap().as_deref(), Some(b"2".as_slice()));
    atomics::swap(fresh, b"3").expect("the retry");
    assert_eq!(bucket.get("c").unwrap().as_deref(), Some(b"3".as_slice()));
    step("compare-and-swap-wins-once-and-retries");

    batch::set_many(
        &bucket,
        &[
            ("a1".to_string(), b"v1".to_vec()),
            ("b1".to_string(), b"v1".to_vec()),
        ],
    )
    .unwrap();
    batch::delete_many(&bucket, &["a1".to_string()]).unwrap();
    let got = batch::get_many(&bucket, &["a1".to_string(), "b1".to_string()]).unwrap();
    assert_eq!(
        got,
        vec![
            ("a1".to_string(), None),
            ("b1".to_string(), Some(b"v1".to_vec()))
        ]
    );
    step("get-many-answers-every-key");

    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = bucket.list_keys(cursor.as_deref()).unwrap();
        all.extend(page.keys);
        match page.cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(all, ["b1", "c", "max", "n", "text"]);
    let e = bucket.list_keys(Some("3")).unwrap_err();
    assert!(other_starting(e, "invalid-argument: "), "an offset cursor");
    step("list-keys-pages-with-string-cursors");

    assert!(matches!(store::open("a/b"), Err(Error::NoSuchStore)));
    assert!(matches!(
        store::open("__alkstore_x"),
        Err(Error::AccessDenied)
    ));
    let e = bucket.set("", b"v").unwrap_err();
    assert!(other_starting(e, "invalid-argument: "), "an empty key");
    let e = bucket.set("big", &vec![0u8; 1024 * 1024 + 1]).unwrap_err();
    assert!(
        other_starting(e, "payload-too-large: "),
        "an oversized value"
    );
    step("errors-name-the-alk-case");
    println!("done");
}
