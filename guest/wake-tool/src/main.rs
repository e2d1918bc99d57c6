//! Waiting forms from the command line, for the wake tests and benchmark.
//!
//! Usage: `wake-tool <command> …`; every waiting command first prints
//! `waiting` (so a test knows it is attached), then its result:
//! - `receive-wait <queue> <timeout-ms>`: `got <payload> <attempt>` or `timeout`
//! - `next-wait <stream> <consumer> <timeout-ms>`: `ev <offset> <payload>` lines or `timeout`
//! - `wait-lock <lock> <owner> <ttl-ms> <timeout-ms>`: `acquired <token>` or `timeout`
//! - `listen <channel> <timeout-ms>`: `woken` or `timeout`
//! - `listen-late <channel> wait|poll <timeout-ms>`: attaches a listener,
//!   prints `listening`, reads a line from stdin, then waits (or polls the
//!   listener's pollable): `woken` or `timeout`
//! - `notify <channel>`: notifies, prints `notified`
//! - `poll <queue> <stream> <channel> <timeout-ms>`: waits on a queue, a
//!   stream subscription, a listener and a timer at once; prints the ready
//!   ones (`queue`, `stream`, `channel`, `timer`)
//! - `ping <rounds>` / `pong <rounds>`: notify ping-pong; `ping` prints one
//!   `lat <µs>` line per round (one-way, ping's notify to pong running)
//! - `feed <stream> <rounds>` / `follow <stream> <rounds>`: `feed` publishes
//!   one event every 2 ms carrying the wall-clock µs after its commit
//!   returned; `follow` waits for each and prints `lat <µs>` (that time to
//!   the follower running)
//! - `idle <ms>`: prints `waiting`, waits on a silent channel, prints `done`,
//!   then waits as long again (so CPU use can be read while it is idle)

use std::io::Write;

use alk_guest::tool::{fail, num};
use std::time::{SystemTime, UNIX_EPOCH};

use alk_guest::queue::{Payload, Queue};
use alk_guest::{lock, notify, poll, stream};

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["receive-wait", q, timeout] => {
            let q = Queue::open(q).unwrap_or_else(|e| fail(e));
            say("waiting");
            match q
                .receive_wait(1, None, num(timeout))
                .unwrap_or_else(|e| fail(e))
                .first()
            {
                Some(m) => {
                    let body = match &m.payload {
                        Payload::Text(t) | Payload::Json(t) => t.clone(),
                    };
                    q.ack(&m.receipt).unwrap_or_else(|e| fail(e));
                    say(&format!("got {body} {}", m.attempt));
                }
                None => say("timeout"),
            }
        }
        ["next-wait", s, consumer, timeout] => {
            let sub = stream::subscribe(s, consumer).unwrap_or_else(|e| fail(e));
            say("waiting");
            let events = sub.next_wait(100, num(timeout)).unwrap_or_else(|e| fail(e));
            if events.is_empty() {
                say("timeout");
            }
            for e in events {
                say(&format!(
                    "ev {} {}",
                    e.offset,
                    String::from_utf8_lossy(&e.payload)
                ));
            }
        }
        ["wait-lock", name, owner, ttl, timeout] => {
            say("waiting");
            match lock::wait_lock(name, owner, num(ttl), num(timeout)).unwrap_or_else(|e| fail(e)) {
                Some(l) => say(&format!("acquired {}", l.token())),
                None => say("timeout"),
            }
        }
        ["notify", channel] => {
            notify::notify(channel).unwrap_or_else(|e| fail(e));
            say("notified");
        }
        ["listen", channel, timeout] => {
            let l = notify::listen(channel).unwrap_or_else(|e| fail(e));
            say("waiting");
            say(if l.wait(num(timeout)) {
                "woken"
            } else {
                "timeout"
            });
        }
        ["listen-late", channel, how, timeout] => {
            // Attaches, then lets the test notify (it writes a line to our
            // stdin once the notification was sent), and only then waits:
            // the notification came before the first wait.
            let l = notify::listen(channel).unwrap_or_else(|e| fail(e));
            say("listening");
            let _ = std::io::stdin().lines().next();
            let woken = match *how {
                "poll" => {
                    let timer = alk_guest::wasi::clocks::monotonic_clock::subscribe_duration(
                        num(timeout) * 1_000_000,
                    );
                    let listener = l.subscribe();
                    poll::poll(&[&listener, &timer]).contains(&0)
                }
                _ => l.wait(num(timeout)),
            };
            say(if woken { "woken" } else { "timeout" });
        }
        ["poll", q, s, channel, timeout] => {
            let q = Queue::open(q).unwrap_or_else(|e| fail(e));
            let sub = stream::subscribe(s, "poller").unwrap_or_else(|e| fail(e));
            let l = notify::listen(channel).unwrap_or_else(|e| fail(e));
            let pollables = [
                q.subscribe(),
                sub.subscribe(),
                l.subscribe(),
                alk_guest::wasi::clocks::monotonic_clock::subscribe_duration(
                    num(timeout) * 1_000_000,
                ),
            ];
            say("waiting");
            let ready = poll::poll(&pollables.iter().collect::<Vec<_>>());
            let names = ["queue", "stream", "channel", "timer"];
            let ready: Vec<&str> = ready.iter().map(|i| names[*i as usize]).collect();
            say(&ready.join(" "));
        }
        ["ping", rounds] => {
            let pong = notify::listen("pong").unwrap_or_else(|e| fail(e));
            say("waiting");
            // Wait for the other side to attach.
            if !pong.wait(30_000) {
                fail(alk_guest::Error::Internal("pong never attached".into()));
            }
            for _ in 0..num(rounds) {
                let sent = now_us();
                notify::notify("ping").unwrap_or_else(|e| fail(e));
                if !pong.wait(30_000) {
                    fail(alk_guest::Error::Internal("no pong".into()));
                }
                // pong notified us with its wake time in the kv bucket.
                let woke = alk_guest::kv::Bucket::open("wake-bench")
                    .and_then(|b| b.get("pong-woke"))
                    .unwrap_or_else(|e| fail(e))
                    .map(|v| String::from_utf8_lossy(&v).parse::<u64>().unwrap_or(0))
                    .unwrap_or(0);
                say(&format!("lat {}", woke.saturating_sub(sent)));
            }
        }
        ["pong", rounds] => {
            let ping = notify::listen("ping").unwrap_or_else(|e| fail(e));
            let bucket = alk_guest::kv::Bucket::open("wake-bench").unwrap_or_else(|e| fail(e));
            notify::notify("pong").unwrap_or_else(|e| fail(e));
            for _ in 0..num(rounds) {
                if !ping.wait(30_000) {
                    fail(alk_guest::Error::Internal("no ping".into()));
                }
                let woke = now_us();
                bucket
                    .set("pong-woke", woke.to_string().as_bytes(), None)
                    .unwrap_or_else(|e| fail(e));
                notify::notify("pong").unwrap_or_else(|e| fail(e));
            }
        }
        ["feed", s, rounds] => {
            for _ in 0..num(rounds) {
                // The timestamp goes in the payload, so it is taken before
                // the publish: the figure includes the commit.
                let t = now_us();
                stream::publish(s, t.to_string().as_bytes()).unwrap_or_else(|e| fail(e));
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
        ["follow", s, rounds] => {
            let sub = stream::subscribe(s, "bench-follower").unwrap_or_else(|e| fail(e));
            say("waiting");
            let mut seen = 0;
            while seen < num(rounds) {
                for e in sub.next_wait(1, 30_000).unwrap_or_else(|e| fail(e)) {
                    let woke = now_us();
                    let sent: u64 = String::from_utf8_lossy(&e.payload).parse().unwrap_or(woke);
                    say(&format!("lat {}", woke.saturating_sub(sent)));
                    seen += 1;
                }
            }
        }
        ["idle", ms] => {
            let l = notify::listen("silence").unwrap_or_else(|e| fail(e));
            say("waiting");
            l.wait(num(ms));
            say("done");
            l.wait(num(ms));
        }
        _ => {
            eprintln!(
                "usage: wake-tool <receive-wait|next-wait|wait-lock|listen|listen-late|poll|ping|pong|feed|follow|idle> …"
            );
            std::process::exit(2);
        }
    }
}
