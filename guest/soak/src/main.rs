//! One process of the multi-process soak: a producer or a worker on one
//! queue, with kv, stream and lock traffic mixed in.
//!
//! Usage: `soak <role> …`
//! - `producer <queue> <tag> <ms>`: for `ms` milliseconds, sends `<tag>-1`,
//!   `<tag>-2`, … one per call; every 10th send also sets a key in bucket
//!   `soak`, every 20th publishes to stream `soak`, every 50th takes and
//!   releases lock `soak`. Prints `sent <n>` at the end.
//! - `worker <queue> <batch> <name>`: receives up to `batch` messages at a time
//!   (waiting when there are none) and acknowledges them in one call,
//!   printing `got <payload> <attempt>` for each, until it receives a
//!   `stop` message (extra `stop`s of the same batch are given back); every
//!   10th batch also reads the `soak` bucket, every 20th reads the `soak`
//!   stream, every 50th takes and releases lock `soak`. Prints `acked <n>`.
//!
//! Run as one of several instances of one host (`alk-host run
//! --instances`), a producer or worker appends its number (`ALK_INSTANCE`)
//! to its `tag` or `name`.
//!
//! - `stop <queue> <count>`: sends `count` `stop` messages.
//!
//! All print `ops <n>` (every alk call made), `lat <p50> <p99> <max>` (µs
//! per call, all calls, a worker's waiting receives included), `write <max>`
//! (µs, slowest call that writes, a worker's receives left out: they also
//! wait for messages) and `busy <n>` (calls that returned `busy`, which are
//! retried). Any other error ends the process with `error: …` and status 1.

use std::io::Write;
use std::time::Instant;

use alk_guest::kv::Bucket;
use alk_guest::queue::{Payload, Queue};
use alk_guest::tool::{fail, num};
use alk_guest::{Error, lock, stream};

/// Timings of the calls made.
#[derive(Default)]
struct Stats {
    lat: Vec<u32>,
    write_max: u32,
    busy: u64,
}

impl Stats {
    /// Runs one call, timing it; `busy` is counted and retried.
    fn call<T>(&mut self, writes: bool, mut f: impl FnMut() -> Result<T, Error>) -> T {
        loop {
            let start = Instant::now();
            let result = f();
            let us = start.elapsed().as_micros().min(u32::MAX as u128) as u32;
            self.lat.push(us);
            if writes {
                self.write_max = self.write_max.max(us);
            }
            match result {
                Ok(v) => return v,
                Err(Error::Busy(_)) => self.busy += 1,
                Err(e) => fail(e),
            }
        }
    }

    fn report(mut self, out: &mut impl Write) {
        self.lat.sort_unstable();
        let at = |q: f64| {
            self.lat
                .get(((self.lat.len() as f64 * q) as usize).min(self.lat.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0)
        };
        writeln!(out, "ops {}", self.lat.len()).unwrap();
        writeln!(
            out,
            "lat {} {} {}",
            at(0.5),
            at(0.99),
            self.lat.last().copied().unwrap_or(0)
        )
        .unwrap();
        writeln!(out, "write {}", self.write_max).unwrap();
        writeln!(out, "busy {}", self.busy).unwrap();
    }
}

fn body(p: &Payload) -> &str {
    match p {
        Payload::Text(t) | Payload::Json(t) => t,
    }
}

fn lock_once(stats: &mut Stats, owner: &str) {
    if let Some(l) = stats.call(true, || lock::try_lock("soak", owner, 5_000)) {
        stats.call(true, || l.release());
    }
}

/// This instance's number when the host runs several, else empty.
fn instance() -> String {
    std::env::var("ALK_INSTANCE").unwrap_or_default()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut out = std::io::stdout().lock();
    let mut stats = Stats::default();
    match a.as_slice() {
        ["producer", queue, tag, ms] => {
            let tag = &format!("{tag}{}", instance());
            let q = stats.call(false, || Queue::open(queue));
            let bucket = stats.call(false, || Bucket::open("soak"));
            let until = Instant::now() + std::time::Duration::from_millis(num(ms));
            let mut n = 0u64;
            while Instant::now() < until {
                n += 1;
                let payload = Payload::Text(format!("{tag}-{n}"));
                stats.call(true, || q.send(&payload));
                if n % 10 == 0 {
                    stats.call(true, || bucket.set(tag, n.to_string().as_bytes(), None));
                }
                if n % 20 == 0 {
                    stats.call(true, || stream::publish("soak", body(&payload).as_bytes()));
                }
                if n % 50 == 0 {
                    lock_once(&mut stats, tag);
                }
            }
            writeln!(out, "sent {n}").unwrap();
        }
        ["worker", queue, batch, name] => {
            let q = stats.call(false, || Queue::open(queue));
            let bucket = stats.call(false, || Bucket::open("soak"));
            let me = format!("{name}{}", instance());
            let sub = stats.call(false, || stream::subscribe("soak", &me));
            let (mut acked, mut rounds, mut stopped) = (0u64, 0u64, false);
            while !stopped {
                // Not counted as a write: the call waits for messages too.
                let got = stats.call(false, || {
                    q.receive_wait(num(batch) as u32, Some(60_000), 1_000)
                });
                if got.is_empty() {
                    continue;
                }
                rounds += 1;
                let mut receipts = Vec::new();
                for m in &got {
                    if body(&m.payload) == "stop" {
                        if stopped {
                            stats.call(true, || q.nack(&m.receipt));
                            continue;
                        }
                        stopped = true;
                    } else {
                        writeln!(out, "got {} {}", body(&m.payload), m.attempt).unwrap();
                        acked += 1;
                    }
                    receipts.push(m.receipt.clone());
                }
                stats.call(true, || q.ack_batch(&receipts));
                if rounds % 10 == 0 {
                    stats.call(false, || bucket.get("p0"));
                }
                if rounds % 20 == 0 {
                    stats.call(false, || sub.next(10));
                }
                if rounds % 50 == 0 {
                    lock_once(&mut stats, &me);
                }
            }
            writeln!(out, "acked {acked}").unwrap();
        }
        ["stop", queue, count] => {
            let q = stats.call(false, || Queue::open(queue));
            for _ in 0..num(count) {
                stats.call(true, || q.send(&Payload::Text("stop".into())));
            }
            writeln!(out, "stopped").unwrap();
        }
        _ => {
            eprintln!(
                "usage: soak <producer <queue> <tag> <ms> | worker <queue> <batch> <name> | stop <queue> <count>>"
            );
            std::process::exit(2);
        }
    }
    stats.report(&mut out);
}
