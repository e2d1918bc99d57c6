//! A guest that misbehaves on purpose, to test that the host contains it.
//!
//! Usage: `misbehave <mode> [args]` with mode one of:
//! - `write-then-trap [bucket]`: stores `before-trap` = `kept` in `bucket`,
//!   then panics;
//! - `trap-as-instance <n>`: panics when it is instance `n` of its host
//!   (`ALK_INSTANCE`, see `alk-host run --instances`), else prints `done`;
//! - `loop-below <k>`: an instance numbered below `k` spins forever; the
//!   others set a key in bucket `misbehave` and print `done`;
//! - `loop`: spins forever;
//! - `oom`: allocates until memory runs out;
//! - `exit <code>`: exits with that code;
//! - `sleep`: sleeps (in WASI) for a day;
//! - `wait-forever`: a waiting receive on an empty queue with the longest
//!   timeout there is;
//! - `buckets <n> keep|drop`: opens `n` distinct buckets and sets one key
//!   in each, keeping every handle (`keep`) or dropping each after use
//!   (`drop`). Prints `opened <k>` when done, or `refused at <k>: <error>`
//!   when the host refuses the next one; then `done`, and waits for a line
//!   on stdin before it exits (so a test can read the host's use of memory
//!   and descriptors while everything is still open);
//! - `streams <n>` / `channels <n>`: publishes to (notifies) `n` distinct
//!   streams (channels), then `done` and waits for a line on stdin;
//! - `pollables <n>`: makes `n` pollables of one queue without dropping
//!   any (the host traps it at its resource limit).

use std::io::BufRead;

use alk_guest::kv::Bucket;
use alk_guest::queue::Queue;
use alk_guest::{notify, stream};

fn arg(args: &[String], i: usize) -> &str {
    args.get(i).map(String::as_str).unwrap_or("")
}

fn count(args: &[String], i: usize) -> usize {
    arg(args, i).parse().unwrap_or_else(|_| {
        eprintln!("misbehave: expected a count, got {:?}", arg(args, i));
        std::process::exit(2)
    })
}

/// Computes forever without calling the host.
fn spin() -> ! {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

/// Says `done`, then waits for the test to let go.
fn done_and_hold() {
    println!("done");
    let _ = std::io::stdin().lock().lines().next();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match arg(&args, 1) {
        "write-then-trap" => {
            let name = args.get(2).map(String::as_str).unwrap_or("misbehave");
            let bucket = Bucket::open(name).expect("open bucket");
            bucket.set("before-trap", b"kept", None).expect("set");
            panic!("deliberate trap after a write");
        }
        "publish-then-loop" => {
            // Holds a stream transaction open while it computes forever.
            let tx = stream::Transaction::new();
            tx.publish(arg(&args, 2), b"held")
                .expect("publish in a transaction");
            println!("holding");
            std::io::Write::flush(&mut std::io::stdout()).unwrap();
            spin();
        }
        "trap-as-instance" => {
            if std::env::var("ALK_INSTANCE").as_deref() == Ok(arg(&args, 2)) {
                panic!("deliberate trap in instance {}", arg(&args, 2));
            }
            println!("done");
        }
        "loop-below" => {
            let me: usize = std::env::var("ALK_INSTANCE")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if me < count(&args, 2) {
                spin();
            }
            let bucket = Bucket::open("misbehave").expect("open bucket");
            bucket
                .set(&format!("instance-{me}"), b"done", None)
                .expect("set");
            println!("done");
        }
        "loop" => {
            spin();
        }
        "oom" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 16 * 1024 * 1024]);
                std::hint::black_box(&hoard);
            }
        }
        "exit" => {
            let code = args.get(2).and_then(|c| c.parse().ok()).unwrap_or(3);
            std::process::exit(code);
        }
        "sleep" => {
            std::thread::sleep(std::time::Duration::from_secs(24 * 3600));
            println!("woke up");
        }
        "wait-forever" => {
            let q = Queue::open("never-fed").expect("open queue");
            let got = q.receive_wait(1, None, u64::MAX).expect("receive-wait");
            println!("received {}", got.len());
        }
        "buckets" => {
            let n = count(&args, 2);
            let keep = arg(&args, 3) == "keep";
            let mut held = Vec::new();
            let mut refused = None;
            for i in 0..n {
                let bucket = match Bucket::open(&format!("b{i}")) {
                    Ok(b) => b,
                    Err(e) => {
                        refused = Some((i, e));
                        break;
                    }
                };
                if let Err(e) = bucket.set("k", format!("value {i}").as_bytes(), None) {
                    refused = Some((i, e));
                    break;
                }
                if keep {
                    held.push(bucket);
                }
            }
            match refused {
                Some((i, ref e)) => println!("refused at {i}: {e:?}"),
                None => println!("opened {n}"),
            }
            // Everything written is readable, through fresh handles.
            let last = refused.as_ref().map(|(i, _)| *i).unwrap_or(n);
            drop(held);
            for i in (0..last).step_by((last / 50).max(1)) {
                let b = Bucket::open(&format!("b{i}")).expect("reopen");
                let v = b.get("k").expect("get").expect("value present");
                assert_eq!(v, format!("value {i}").as_bytes());
            }
            done_and_hold();
        }
        "streams" => {
            for i in 0..count(&args, 2) {
                stream::publish(&format!("s{i}"), b"x").expect("publish");
            }
            done_and_hold();
        }
        "channels" => {
            for i in 0..count(&args, 2) {
                notify::notify(&format!("c{i}")).expect("notify");
            }
            done_and_hold();
        }
        "pollables" => {
            let q = Queue::open("polled").expect("open queue");
            let mut held = Vec::new();
            for i in 0..count(&args, 2) {
                held.push(q.subscribe());
                if i % 100 == 0 {
                    println!("pollables {i}");
                }
            }
            println!("made {}", held.len());
        }
        other => {
            eprintln!("misbehave: unknown mode {other:?}");
            std::process::exit(2);
        }
    }
}
