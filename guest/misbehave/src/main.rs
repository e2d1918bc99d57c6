//! A guest that misbehaves on purpose, to test that the host contains it.
//!
//! Usage: `misbehave <mode> [bucket]` with mode one of:
//! - `write-then-trap`: stores `before-trap` = `kept` in `bucket`, then panics;
//! - `loop`: spins forever;
//! - `oom`: allocates until memory runs out;
//! - `exit <code>`: exits with that code.

use alk_guest::kv::Bucket;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("write-then-trap") => {
            let bucket = Bucket::open(args.get(2).map(String::as_str).unwrap_or("misbehave"))
                .expect("open bucket");
            bucket.set("before-trap", b"kept", None).expect("set");
            panic!("deliberate trap after a write");
        }
        Some("loop") => {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        Some("oom") => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 16 * 1024 * 1024]);
                std::hint::black_box(&hoard);
            }
        }
        Some("exit") => {
            let code = args.get(2).and_then(|c| c.parse().ok()).unwrap_or(3);
            std::process::exit(code);
        }
        other => {
            eprintln!("misbehave: unknown mode {other:?}");
            std::process::exit(2);
        }
    }
}
