//! The operations of the benchmark, run in a loop inside a guest.
//!
//! Usage: `bench-guest <op> <n> <tag>`. Runs the setup of `op`, then `n`
//! operations, and prints `ops <n> <elapsed-µs> <start-µs> <end-µs>` (the
//! last two are wall-clock times, to combine several processes). `tag`
//! keeps the keys of concurrent processes apart.
//!
//! Ops: `kv-get`, `kv-set`, `kv-set-if-absent`, `kv-scan100`, `queue-send`,
//! `queue-recv-ack-1`, `queue-recv-ack-100`, `queue-preload` (sends `n`
//! messages in batches, untimed use), `queue-drain-100` (receives and acks
//! in batches of 100 until the queue is empty; `n` is ignored and the count
//! is what it drained), `queue-claim-<batch>-<depth>` (sends `depth`
//! messages untimed, then receives and acks `n` of them, `batch` at a time:
//! one at a time with `ack`, more with `ack-batch`), `queue-gclaim-<depth>`
//! (sends `depth` messages untimed, spread evenly over 100 groups one group
//! after the other, then claims and acks `n` of them one at a time),
//! `stream-publish`,
//! `stream-read100`, `stream-replay` (publishes `n` events untimed, then
//! reads them all from the start in pages of 1,000), `lock-cycle`. A queue
//! op ending in `-rate` runs on a queue whose rate never runs dry, one
//! ending in `-n3` on a queue whose groups have three in flight at once.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use alk_guest::kv::Bucket;
use alk_guest::queue::{Payload, Queue, QueueLimits, RateLimit, SendOptions};
use alk_guest::{lock, stream};

fn wall_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros()
}

/// Groups the messages of a grouped claim benchmark are spread over.
const GROUPS: usize = 100;

/// `queue-gclaim-<depth>` as `depth`.
fn group_claim_op(op: &str) -> Option<usize> {
    op.strip_prefix("queue-gclaim-")?.parse().ok()
}

/// An op with a limits suffix (as `alk-bench`): `<op>-rate` on a queue
/// whose rate never runs dry, `<op>-n3` on one whose groups have three
/// messages in flight at once; the op without its suffix, and the limits.
fn limited_op(op: &str) -> (&str, Option<QueueLimits>) {
    let plain = QueueLimits {
        group_concurrency: 1,
        max_in_flight: None,
        rate: None,
        rate_per_group: false,
    };
    if let Some(base) = op.strip_suffix("-rate") {
        let rate = RateLimit {
            capacity: 1_000_000,
            refill: 1_000_000,
            interval_ms: 1,
        };
        (
            base,
            Some(QueueLimits {
                rate: Some(rate),
                ..plain
            }),
        )
    } else if let Some(base) = op.strip_suffix("-n3") {
        (
            base,
            Some(QueueLimits {
                group_concurrency: 3,
                ..plain
            }),
        )
    } else {
        (op, None)
    }
}

/// `queue-claim-<batch>-<depth>` as `(batch, depth)`.
fn claim_op(op: &str) -> Option<(u32, usize)> {
    let (batch, depth) = op.strip_prefix("queue-claim-")?.split_once('-')?;
    Some((batch.parse().ok()?, depth.parse().ok()?))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [op, n, tag] = args.as_slice() else {
        eprintln!("usage: bench-guest <op> <n> <tag>");
        std::process::exit(2);
    };
    let n: usize = n.parse().expect("n");
    let value = vec![7u8; 100];
    let text = "x".repeat(100);
    let b = Bucket::open("bench").unwrap();
    let q = Queue::open("bench").unwrap();
    let (op, limits) = limited_op(op);
    if let Some(limits) = limits {
        q.set_limits(limits).unwrap();
    }
    let op = &op.to_string();
    // Setup, untimed.
    match op.as_str() {
        "kv-get" => b.set("k", &value, None).unwrap(),
        "kv-scan100" => {
            let entries: Vec<_> = (0..100)
                .map(|i| alk_guest::kv::Entry {
                    key: format!("s/{i:03}"),
                    value: value.clone(),
                })
                .collect();
            b.set_many(&entries, None).unwrap();
        }
        "queue-recv-ack-1" | "queue-recv-ack-100" | "queue-preload" => {
            let batch: Vec<Payload> = (0..1000).map(|_| Payload::Text(text.clone())).collect();
            for _ in 0..n.div_ceil(1000) {
                q.send_batch(&batch).unwrap();
            }
        }
        op if claim_op(op).is_some() => {
            let (_, depth) = claim_op(op).unwrap();
            for start in (0..depth).step_by(1000) {
                let batch: Vec<Payload> = (start..depth.min(start + 1000))
                    .map(|_| Payload::Text(text.clone()))
                    .collect();
                q.send_batch(&batch).unwrap();
            }
        }
        op if group_claim_op(op).is_some() => {
            let per_group = group_claim_op(op).unwrap() / GROUPS;
            for g in 0..GROUPS {
                let options = SendOptions {
                    priority: None,
                    delay_ms: None,
                    run_at_ms: None,
                    max_attempts: None,
                    backoff_base_ms: None,
                    expires_in_ms: None,
                    group: Some(format!("g{g}")),
                };
                for start in (0..per_group).step_by(1000) {
                    let batch: Vec<Payload> = (start..per_group.min(start + 1000))
                        .map(|_| Payload::Text(text.clone()))
                        .collect();
                    q.send_batch_with(&batch, &options).unwrap();
                }
            }
        }
        "stream-replay" => {
            for _ in 0..n.div_ceil(1000) {
                let events: Vec<_> = (0..1000)
                    .map(|_| alk_guest::stream::NewEvent {
                        key: None,
                        payload: value.clone(),
                    })
                    .collect();
                stream::publish_batch("replay", &events).unwrap();
            }
        }
        "stream-read100" => {
            let events: Vec<_> = (0..1000)
                .map(|_| alk_guest::stream::NewEvent {
                    key: None,
                    payload: value.clone(),
                })
                .collect();
            stream::publish_batch("bench", &events).unwrap();
        }
        _ => {}
    }
    let start_wall = wall_us();
    let start = Instant::now();
    let mut done = n;
    match op.as_str() {
        "kv-get" => (0..n).for_each(|_| assert!(b.get("k").unwrap().is_some())),
        "kv-set" => {
            (0..n).for_each(|i| b.set(&format!("{tag}/{}", i % 1000), &value, None).unwrap())
        }
        "kv-set-if-absent" => (0..n).for_each(|i| {
            assert!(
                b.set_if_absent(&format!("{tag}/c{i}"), &value, None)
                    .unwrap()
            )
        }),
        "kv-scan100" => (0..n)
            .for_each(|_| assert_eq!(b.scan_prefix("s/", None, 100).unwrap().entries.len(), 100)),
        "queue-send" => (0..n).for_each(|_| {
            q.send(&Payload::Text(text.clone())).unwrap();
        }),
        "queue-recv-ack-1" => (0..n).for_each(|_| {
            let got = q.receive(1, None).unwrap();
            q.ack(&got[0].receipt).unwrap();
        }),
        "queue-recv-ack-100" => {
            done = 0;
            while done < n {
                let got = q.receive(100, None).unwrap();
                let receipts: Vec<String> = got.iter().map(|m| m.receipt.clone()).collect();
                q.ack_batch(&receipts).unwrap();
                done += got.len();
            }
        }
        "queue-preload" => {}
        op if claim_op(op).is_some() || group_claim_op(op).is_some() => {
            let batch = claim_op(op).map(|(b, _)| b).unwrap_or(1);
            done = 0;
            while done < n {
                let got = q.receive(batch, None).unwrap();
                assert!(!got.is_empty(), "the queue ran dry");
                if batch == 1 {
                    q.ack(&got[0].receipt).unwrap();
                } else {
                    let receipts: Vec<String> = got.iter().map(|m| m.receipt.clone()).collect();
                    q.ack_batch(&receipts).unwrap();
                }
                done += got.len();
            }
        }
        "stream-replay" => {
            let mut offset = 0;
            done = 0;
            while done < n {
                let events = stream::read_since("replay", offset, 1000).unwrap();
                assert!(!events.is_empty(), "the stream ended early");
                offset = events.last().unwrap().offset;
                done += events.len();
            }
        }
        "queue-drain-100" => {
            done = 0;
            loop {
                let got = q.receive(100, None).unwrap();
                if got.is_empty() {
                    break;
                }
                let receipts: Vec<String> = got.iter().map(|m| m.receipt.clone()).collect();
                q.ack_batch(&receipts).unwrap();
                done += got.len();
            }
        }
        "stream-publish" => (0..n).for_each(|_| {
            stream::publish("bench", &value).unwrap();
        }),
        "stream-read100" => (0..n).for_each(|i| {
            assert_eq!(
                stream::read_since("bench", ((i * 100) % 900) as u64, 100)
                    .unwrap()
                    .len(),
                100
            );
        }),
        "lock-cycle" => (0..n).for_each(|_| {
            let l = lock::try_lock(&format!("bench-{tag}"), tag, 10_000)
                .unwrap()
                .expect("free");
            assert!(l.release().unwrap());
        }),
        other => {
            eprintln!("unknown op {other}");
            std::process::exit(2);
        }
    }
    let elapsed = start.elapsed().as_micros();
    println!("ops {done} {elapsed} {start_wall} {}", wall_us());
}
