//! Queue operations from the command line, for tests and for poking at a
//! data directory.
//!
//! Usage: `queue-tool <command> <queue> …`
//! - `send <q> <text>` / `send-json <q> <json>`: prints the message id
//! - `receive <q> <max> [visibility-ms]`: prints `<receipt> <attempt> <payload>` lines
//! - `ack <q> <receipt>` / `nack <q> <receipt>` / `purge <q>`: print `ok`
//! - `produce <q> <count> <tag>`: sends `<tag>-0` … `<tag>-<count-1>`, then `sent <count>`
//! - `consume <q> <batch> <visibility-ms>`: receives and acks, printing
//!   `got <payload> <attempt>` and `acked <payload>`, until it receives a
//!   `stop` message (which it acks; extra `stop`s in the same batch are
//!   given back with nack)
//! - `hold <q> <max> <visibility-ms>`: receives once, prints
//!   `held <payload> <attempt>` lines and `holding <n>`, then sleeps forever
//! - `drain <q> <min-ms> <max-ms>`: receives and acks, printing
//!   `got <payload> <attempt>`, for at least `min-ms` and then until a
//!   receive comes back empty (or `max-ms` is up); finally `drained <n>`
//! - `work <q> <batch> <visibility-ms> <idle-ms>`: receives and acks like
//!   `consume`, riding out store failures: a failed call prints
//!   `error <variant>` and is tried again (an ack until it succeeds, or
//!   until its receipt is stale: `stale <payload>`). Prints
//!   `got <payload> <attempt>` and `acked <payload>`; stops after `idle-ms`
//!   of empty receives, printing `done <acked>`
//!
//! An alk error is printed as `error: <variant>` with exit status 1.

use std::io::Write;

use alk_guest::tool::{fail, num};
use std::time::{Duration, Instant};

use alk_guest::queue::{Message, Payload, Queue};

fn body(m: &Message) -> &str {
    match &m.payload {
        Payload::Text(t) | Payload::Json(t) => t,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    if a.len() < 2 {
        eprintln!(
            "usage: queue-tool <send|send-json|receive|ack|nack|purge|produce|consume|hold|drain|work> <queue> …"
        );
        std::process::exit(2);
    }
    let q = Queue::open(a[1]).unwrap_or_else(|e| fail(e));
    let mut out = std::io::stdout().lock();
    match a.as_slice() {
        ["send", _, text] => {
            let id = q
                .send(&Payload::Text(text.to_string()))
                .unwrap_or_else(|e| fail(e));
            writeln!(out, "{id}").unwrap();
        }
        ["send-json", _, json] => {
            let id = q
                .send(&Payload::Json(json.to_string()))
                .unwrap_or_else(|e| fail(e));
            writeln!(out, "{id}").unwrap();
        }
        ["receive", _, max, rest @ ..] => {
            let vis = rest.first().map(|v| num(v));
            for m in q.receive(num(max) as u32, vis).unwrap_or_else(|e| fail(e)) {
                writeln!(out, "{} {} {}", m.receipt, m.attempt, body(&m)).unwrap();
            }
        }
        ["ack", _, receipt] => {
            q.ack(receipt).unwrap_or_else(|e| fail(e));
            writeln!(out, "ok").unwrap();
        }
        ["nack", _, receipt] => {
            q.nack(receipt).unwrap_or_else(|e| fail(e));
            writeln!(out, "ok").unwrap();
        }
        ["purge", _] => {
            q.purge().unwrap_or_else(|e| fail(e));
            writeln!(out, "ok").unwrap();
        }
        ["produce", _, count, tag] => {
            let count = num(count);
            for i in 0..count {
                q.send(&Payload::Text(format!("{tag}-{i}")))
                    .unwrap_or_else(|e| fail(e));
            }
            writeln!(out, "sent {count}").unwrap();
        }
        ["consume", _, batch, vis] => {
            let (batch, vis) = (num(batch) as u32, num(vis));
            let mut stopped = false;
            while !stopped {
                let got = q.receive(batch, Some(vis)).unwrap_or_else(|e| fail(e));
                if got.is_empty() {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                }
                for m in got {
                    if body(&m) == "stop" {
                        if stopped {
                            q.nack(&m.receipt).unwrap_or_else(|e| fail(e));
                        } else {
                            q.ack(&m.receipt).unwrap_or_else(|e| fail(e));
                            stopped = true;
                        }
                        continue;
                    }
                    writeln!(out, "got {} {}", body(&m), m.attempt).unwrap();
                    q.ack(&m.receipt).unwrap_or_else(|e| fail(e));
                    writeln!(out, "acked {}", body(&m)).unwrap();
                }
            }
        }
        ["hold", _, max, vis] => {
            let got = q
                .receive(num(max) as u32, Some(num(vis)))
                .unwrap_or_else(|e| fail(e));
            for m in &got {
                writeln!(out, "held {} {}", body(m), m.attempt).unwrap();
            }
            writeln!(out, "holding {}", got.len()).unwrap();
            out.flush().unwrap();
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        ["drain", _, min, max] => {
            let (min, max) = (
                Duration::from_millis(num(min)),
                Duration::from_millis(num(max)),
            );
            let start = Instant::now();
            let mut n = 0;
            while start.elapsed() < max {
                let got = q.receive(50, Some(30_000)).unwrap_or_else(|e| fail(e));
                if got.is_empty() {
                    if start.elapsed() >= min {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                for m in got {
                    writeln!(out, "got {} {}", body(&m), m.attempt).unwrap();
                    q.ack(&m.receipt).unwrap_or_else(|e| fail(e));
                    n += 1;
                }
            }
            writeln!(out, "drained {n}").unwrap();
        }
        ["work", _, batch, vis, idle] => {
            let (batch, vis, idle) = (
                num(batch) as u32,
                num(vis),
                Duration::from_millis(num(idle)),
            );
            let variant = |e: &alk_guest::Error| {
                // `Error::Busy("…")` or `Busy("…")` → `busy`.
                let text = format!("{e:?}");
                let head = text.split(['(', ' ', '{']).next().unwrap_or_default();
                head.rsplit("::").next().unwrap_or_default().to_lowercase()
            };
            let mut idle_since = Instant::now();
            let mut acked = 0;
            while idle_since.elapsed() < idle {
                let got = match q.receive(batch, Some(vis)) {
                    Ok(got) => got,
                    Err(e) => {
                        writeln!(out, "error {}", variant(&e)).unwrap();
                        std::thread::sleep(Duration::from_millis(50));
                        idle_since = Instant::now();
                        continue;
                    }
                };
                if got.is_empty() {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                idle_since = Instant::now();
                for m in got {
                    writeln!(out, "got {} {}", body(&m), m.attempt).unwrap();
                    loop {
                        match q.ack(&m.receipt) {
                            Ok(()) => {
                                writeln!(out, "acked {}", body(&m)).unwrap();
                                acked += 1;
                                break;
                            }
                            Err(alk_guest::Error::StaleReceipt(_)) => {
                                writeln!(out, "stale {}", body(&m)).unwrap();
                                break;
                            }
                            Err(e) => {
                                writeln!(out, "error {}", variant(&e)).unwrap();
                                std::thread::sleep(Duration::from_millis(50));
                            }
                        }
                    }
                }
            }
            writeln!(out, "done {acked}").unwrap();
        }
        _ => {
            eprintln!("queue-tool: unknown command or wrong arguments: {a:?}");
            std::process::exit(2);
        }
    }
}
