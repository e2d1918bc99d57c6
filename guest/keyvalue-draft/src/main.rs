//! A `wasi:keyvalue@0.2.0-draft` guest: nothing in it knows alk.
//!
//! Usage: `keyvalue-draft <command> …`
//! - `main`: the steps of wasmtime's own `keyvalue_main` test program, in
//!   the same order, against the store `""` (where `atomics_key` holds `5`
//!   beforehand); prints `ok` at the end.
//! - `list <store>`: every key, one per line, paging with the `u64`
//!   cursor; then `listed <n>`.
//! - `increment <store> <key> <times>`: adds 1 that many times; prints the
//!   last value.
//! - `open <store>`: prints `opened`, or the error.
//!
//! A failed step panics with what it expected (exit status non-zero).

wit_bindgen::generate!({
    path: "../../wit",
    world: "wasi:keyvalue/imports@0.2.0-draft",
    generate_all,
});

// Both drafts are in alk's wit/ folder, so the module names carry the version.
use wasi::keyvalue0_2_0_draft::{atomics, batch, store};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["main"] => keyvalue_main(),
        ["list", id] => {
            let bucket = store::open(id).expect("open");
            let mut cursor = None;
            let mut n = 0;
            loop {
                let page = bucket.list_keys(cursor).expect("list-keys");
                for k in &page.keys {
                    println!("{k}");
                }
                n += page.keys.len();
                match page.cursor {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
            println!("listed {n}");
        }
        ["increment", id, key, times] => {
            let bucket = store::open(id).expect("open");
            let times: u64 = times.parse().expect("times is a number");
            let mut last = 0;
            for _ in 0..times {
                last = atomics::increment(&bucket, key, 1).expect("increment");
            }
            println!("{last}");
        }
        ["open", id] => match store::open(id) {
            Ok(_) => println!("opened"),
            Err(e) => println!("error: {e:?}"),
        },
        _ => {
            eprintln!(
                "usage: keyvalue-draft main | list <store> | increment <store> <key> <times> | open <store>"
            );
            std::process::exit(2);
        }
    }
}

/// wasmtime's `keyvalue_main`, step by step.
fn keyvalue_main() {
    let identifier = "";
    let bucket = store::open(identifier).expect("open the store \"\"");

    let result = atomics::increment(&bucket, "atomics_key", 1).expect("increment");
    assert_eq!(result, 6, "increment of the preset 5");

    let keys = bucket.list_keys(None).expect("list-keys").keys;
    assert_eq!(keys, &["atomics_key"], "list-keys");

    bucket.set("hello", "world".as_bytes()).expect("set");
    let v = bucket.get("hello").expect("get");
    assert_eq!(
        String::from_utf8(v.expect("a value")).unwrap(),
        "world",
        "get after set"
    );

    bucket.delete("hello").expect("delete");
    let exists = bucket.exists("hello").expect("exists");
    assert!(!exists, "exists after delete");

    batch::set_many(
        &bucket,
        &[
            ("a1".to_string(), "v1".as_bytes().to_vec()),
            ("b1".to_string(), "v1".as_bytes().to_vec()),
            ("c1".to_string(), "v1".as_bytes().to_vec()),
        ],
    )
    .expect("set-many");
    batch::delete_many(&bucket, &["a1".to_string(), "c1".to_string()]).expect("delete-many");
    let values = batch::get_many(
        &bucket,
        &["a1".to_string(), "b1".to_string(), "c1".to_string()],
    )
    .expect("get-many");
    assert_eq!(
        values,
        vec![
            None,
            Some(("b1".to_string(), "v1".as_bytes().to_vec())),
            None
        ],
        "get-many"
    );
    println!("ok");
}
