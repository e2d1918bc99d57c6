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
//! - `feed <q> <tag> <stop-q>`: prints `feeding`, then sends `<tag>-0`,
//!   `<tag>-1`, … one at a time until it receives a message from queue
//!   `<stop-q>` (and acks it, once), riding out store failures like `work`: a
//!   failed call prints `error <variant>` and is tried again (a send with
//!   the same payload); finally prints `sent <n>`
//! - `fill <q> <count> <tag>`: sends `<tag>-0` … as plain messages in
//!   batches of 1,000, then `sent <count>`
//! - `send-group <q> <group> <count> <tag>`: sends `<tag>-0` … to group
//!   `<group>` in batches, then `sent <count>`
//! - `fair <q> <visibility-ms> <claims> <idle-ms>`: claims one message at a
//!   time and acks it, printing `c <group> <payload> <µs>` when the claim
//!   returned and `a <group> <payload> <µs>` just before the ack (wall
//!   clock, microseconds); stops after `claims` messages, after `idle-ms`
//!   without work, or after two minutes in all. `fair … <hold-ms>` keeps
//!   each message that long between the two lines
//! - `send-jobs <q> <count> <tag> <max-attempts>`: sends `<tag>-0` … with
//!   an attempt limit, in batches, then `sent <count>`
//! - `jobs <q> <batch> <visibility-ms> <idle-ms> <fail-every>`: claims and
//!   acks, except that some deliveries are retried at once (`retried
//!   <payload> <attempt>`, or `dead <payload> <attempt>` when that was its
//!   last attempt): every delivery of a message whose payload hash is a
//!   multiple of `<fail-every>`, and of the others those whose hash
//!   quotient plus attempt is; prints `acked <payload>` and `stale
//!   <payload>`; stops after `idle-ms` without work
//! - `inspect <q> <first-id> <last-id>`: `job <id> <state> <attempt>
//!   <max-attempts> <payload>` per message (dead ones included), `none <id>`
//!   for ids with no message
//! - `limit <q> [--rate CAP/REFILL/INTERVAL_MS] [--group-concurrency N]
//!   [--max-in-flight M] [--per-group]`: sets the queue's limits (what is
//!   not given is the default: group concurrency 1, no cap, no rate, a rate
//!   for the whole queue), then prints them as read back: `limits
//!   <group-concurrency> <max-in-flight or -> <CAP/REFILL/INTERVAL_MS or ->
//!   <per-group or queue>`
//! - `work <q> [--max N] [--visibility-ms V] [--hold-ms H] [--idle-ms I]
//!   [--count C]` (the form with options): claims up to `N` (default 1)
//!   messages at a time, following the queue's limits, for `V` ms (default
//!   30,000); prints `claimed <epoch-ms> <id>,<id>,…` per claim that got
//!   something, keeps the messages `H` ms (default 0), then acks each,
//!   printing `acked <epoch-ms> <id>`; rides out store failures as the
//!   positional `work` does (`error <variant>`); stops after `I` ms
//!   (default 3,000) of empty claims or once `C` messages are acked,
//!   printing `done <acked>`
//! - `send-unique <q> <key> <count> [--for-ms MS]`: sends `<key>-0` …
//!   `<key>-<count-1>`, each with unique key `<key>` (held `MS` after the
//!   send when given), riding out store failures; prints `new <n>
//!   duplicate <m>`
//!
//! An alk error is printed as `error: <variant>` with exit status 1.

use std::io::Write;

use alk_guest::tool::{fail, num};
use std::time::{Duration, Instant};

use alk_guest::queue::{
    ClaimOptions, JobState, Message, Payload, Queue, QueueLimits, RateLimit, Retried, SendOptions,
    UniqueOptions,
};

fn options(group: Option<&str>, max_attempts: Option<u32>) -> SendOptions {
    SendOptions {
        priority: None,
        delay_ms: None,
        run_at_ms: None,
        max_attempts,
        backoff_base_ms: None,
        expires_in_ms: None,
        group: group.map(str::to_string),
    }
}

fn millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// Options `--name value` and flags `--name` after a command's
/// positional arguments.
struct Flags<'a> {
    args: &'a [&'a str],
}

impl<'a> Flags<'a> {
    /// Checks that every argument is one of `with_value` (followed by its
    /// value) or of `bare`; exits with status 2 otherwise.
    fn new(args: &'a [&'a str], with_value: &[&str], bare: &[&str]) -> Flags<'a> {
        let mut i = 0;
        while i < args.len() {
            let a = args[i];
            if with_value.contains(&a) && i + 1 < args.len() {
                i += 2;
            } else if bare.contains(&a) {
                i += 1;
            } else {
                eprintln!("queue-tool: unexpected argument {a:?} (or a missing value)");
                std::process::exit(2);
            }
        }
        Flags { args }
    }

    fn value(&self, name: &str) -> Option<&'a str> {
        self.args
            .iter()
            .position(|a| *a == name)
            .and_then(|i| self.args.get(i + 1).copied())
    }

    fn num(&self, name: &str) -> Option<u64> {
        self.value(name).map(num)
    }

    fn has(&self, name: &str) -> bool {
        self.args.contains(&name)
    }
}

/// `CAP/REFILL/INTERVAL_MS`.
fn rate(spec: &str) -> RateLimit {
    let parts: Vec<&str> = spec.split('/').collect();
    let [cap, refill, interval] = parts.as_slice() else {
        eprintln!("queue-tool: --rate takes CAP/REFILL/INTERVAL_MS, not {spec:?}");
        std::process::exit(2);
    };
    RateLimit {
        capacity: num(cap) as u32,
        refill: num(refill) as u32,
        interval_ms: num(interval),
    }
}

fn micros() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros()
}

/// A stable hash of a payload (FNV-1a), to choose failures repeatably.
fn hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn send_tagged(q: &Queue, count: usize, tag: &str, opts: Option<&SendOptions>) {
    let mut i = 0;
    while i < count {
        let n = (count - i).min(1000);
        let batch: Vec<Payload> = (i..i + n)
            .map(|k| Payload::Text(format!("{tag}-{k}")))
            .collect();
        match opts {
            Some(o) => q.send_batch_with(&batch, o),
            None => q.send_batch(&batch),
        }
        .unwrap_or_else(|e| fail(e));
        i += n;
    }
}

/// The variant of an alk error, lower case: `Error::Busy("…")` → `busy`.
fn variant(e: &alk_guest::Error) -> String {
    let text = format!("{e:?}");
    let head = text.split(['(', ' ', '{']).next().unwrap_or_default();
    head.rsplit("::").next().unwrap_or_default().to_lowercase()
}

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
            "usage: queue-tool <send|send-json|receive|ack|nack|purge|produce|consume|hold|drain|work|feed|fill|send-group|fair|send-jobs|jobs|inspect|limit|send-unique> <queue> …"
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
        ["limit", _, rest @ ..] => {
            let f = Flags::new(
                rest,
                &["--rate", "--group-concurrency", "--max-in-flight"],
                &["--per-group"],
            );
            let limits = QueueLimits {
                group_concurrency: f.num("--group-concurrency").unwrap_or(1) as u32,
                max_in_flight: f.num("--max-in-flight").map(|m| m as u32),
                rate: f.value("--rate").map(rate),
                rate_per_group: f.has("--per-group"),
            };
            q.set_limits(limits).unwrap_or_else(|e| fail(e));
            let l = q.limits().unwrap_or_else(|e| fail(e));
            let cap = l.max_in_flight.map(|m| m.to_string()).unwrap_or("-".into());
            let rate = l
                .rate
                .map(|r| format!("{}/{}/{}", r.capacity, r.refill, r.interval_ms))
                .unwrap_or("-".into());
            let per = if l.rate_per_group {
                "per-group"
            } else {
                "queue"
            };
            writeln!(out, "limits {} {cap} {rate} {per}", l.group_concurrency).unwrap();
        }
        ["work", _, rest @ ..] if rest.first().is_none_or(|a| a.starts_with("--")) => {
            let f = Flags::new(
                rest,
                &[
                    "--max",
                    "--visibility-ms",
                    "--hold-ms",
                    "--idle-ms",
                    "--count",
                ],
                &[],
            );
            let max = f.num("--max").unwrap_or(1) as u32;
            let vis = f.num("--visibility-ms").unwrap_or(30_000);
            let hold = Duration::from_millis(f.num("--hold-ms").unwrap_or(0));
            let idle = Duration::from_millis(f.num("--idle-ms").unwrap_or(3_000));
            let count = f.num("--count");
            let mut idle_since = Instant::now();
            let mut acked = 0u64;
            while idle_since.elapsed() < idle && count.is_none_or(|c| acked < c) {
                let got = match q.claim(ClaimOptions {
                    max,
                    visibility_ms: Some(vis),
                    min_priority: None,
                    wait_ms: None,
                }) {
                    Ok(got) => got,
                    Err(e) => {
                        writeln!(out, "error {}", variant(&e)).unwrap();
                        std::thread::sleep(Duration::from_millis(50));
                        idle_since = Instant::now();
                        continue;
                    }
                };
                if got.is_empty() {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                let ids: Vec<String> = got.iter().map(|j| j.id.to_string()).collect();
                writeln!(out, "claimed {} {}", millis(), ids.join(",")).unwrap();
                out.flush().unwrap();
                std::thread::sleep(hold);
                for j in got {
                    loop {
                        match q.ack(&j.receipt) {
                            Ok(()) => {
                                writeln!(out, "acked {} {}", millis(), j.id).unwrap();
                                acked += 1;
                                break;
                            }
                            Err(alk_guest::Error::StaleReceipt(_)) => {
                                writeln!(out, "stale {}", j.id).unwrap();
                                break;
                            }
                            Err(e) => {
                                writeln!(out, "error {}", variant(&e)).unwrap();
                                std::thread::sleep(Duration::from_millis(50));
                            }
                        }
                    }
                }
                out.flush().unwrap();
                idle_since = Instant::now();
            }
            writeln!(out, "done {acked}").unwrap();
        }
        ["send-unique", _, key, count, rest @ ..] => {
            let f = Flags::new(rest, &["--for-ms"], &[]);
            let unique = UniqueOptions {
                key: key.to_string(),
                for_ms: f.num("--for-ms"),
            };
            let (mut new, mut duplicate) = (0, 0);
            for i in 0..num(count) {
                let payload = Payload::Text(format!("{key}-{i}"));
                loop {
                    match q.send_unique(&payload, &options(None, None), &unique) {
                        Ok(sent) if sent.duplicate => duplicate += 1,
                        Ok(_) => new += 1,
                        Err(e) => {
                            writeln!(out, "error {}", variant(&e)).unwrap();
                            std::thread::sleep(Duration::from_millis(50));
                            continue;
                        }
                    }
                    break;
                }
            }
            writeln!(out, "new {new} duplicate {duplicate}").unwrap();
        }
        ["work", _, batch, vis, idle] => {
            let (batch, vis, idle) = (
                num(batch) as u32,
                num(vis),
                Duration::from_millis(num(idle)),
            );
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
        ["feed", _, tag, stop] => {
            let stop = Queue::open(stop).unwrap_or_else(|e| fail(e));
            writeln!(out, "feeding").unwrap();
            let mut sent = 0;
            loop {
                let step = stop
                    .receive(1, Some(60_000))
                    .and_then(|got| match got.first() {
                        // Told to stop: whether or not the ack goes through.
                        Some(m) => Ok(Some(stop.ack(&m.receipt))),
                        None => q
                            .send(&Payload::Text(format!("{tag}-{sent}")))
                            .map(|_| None),
                    });
                match step {
                    Ok(Some(_)) => break,
                    Ok(None) => sent += 1,
                    Err(e) => {
                        writeln!(out, "error {}", variant(&e)).unwrap();
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
            writeln!(out, "sent {sent}").unwrap();
        }
        ["send-group", _, group, count, tag] => {
            let count = num(count) as usize;
            send_tagged(&q, count, tag, Some(&options(Some(group), None)));
            writeln!(out, "sent {count}").unwrap();
        }
        ["fill", _, count, tag] => {
            let count = num(count) as usize;
            send_tagged(&q, count, tag, None);
            writeln!(out, "sent {count}").unwrap();
        }
        ["send-jobs", _, count, tag, max] => {
            let count = num(count) as usize;
            send_tagged(&q, count, tag, Some(&options(None, Some(num(max) as u32))));
            writeln!(out, "sent {count}").unwrap();
        }
        ["fair", _, vis, claims, idle, hold @ ..] => {
            let (vis, claims, idle) = (num(vis), num(claims), Duration::from_millis(num(idle)));
            let hold = Duration::from_millis(hold.first().map_or(0, |h| num(h)));
            // A bound only: the work decides when a consumer is done.
            let run = Duration::from_secs(120);
            let start = Instant::now();
            let mut idle_since = Instant::now();
            let mut claimed_in_all = 0u64;
            while claimed_in_all < claims && start.elapsed() < run && idle_since.elapsed() < idle {
                let got = q
                    .claim(ClaimOptions {
                        max: 1,
                        visibility_ms: Some(vis),
                        min_priority: None,
                        wait_ms: Some(100),
                    })
                    .unwrap_or_else(|e| fail(e));
                let claimed = micros();
                for j in got {
                    idle_since = Instant::now();
                    claimed_in_all += 1;
                    let group = j.group.as_deref().unwrap_or("-");
                    let payload = match &j.payload {
                        Payload::Text(t) | Payload::Json(t) => t.clone(),
                    };
                    writeln!(out, "c {group} {payload} {claimed}").unwrap();
                    std::thread::sleep(hold);
                    writeln!(out, "a {group} {payload} {}", micros()).unwrap();
                    q.ack(&j.receipt).unwrap_or_else(|e| fail(e));
                }
            }
        }
        ["jobs", _, batch, vis, idle, every] => {
            let (batch, vis, idle, every) = (
                num(batch) as u32,
                num(vis),
                Duration::from_millis(num(idle)),
                num(every).max(1),
            );
            let mut idle_since = Instant::now();
            while idle_since.elapsed() < idle {
                let got = q
                    .claim(ClaimOptions {
                        max: batch,
                        visibility_ms: Some(vis),
                        min_priority: None,
                        wait_ms: Some(100),
                    })
                    .unwrap_or_else(|e| fail(e));
                for j in got {
                    idle_since = Instant::now();
                    let payload = match &j.payload {
                        Payload::Text(t) | Payload::Json(t) => t.clone(),
                    };
                    let h = hash(&payload);
                    // A quarter of the messages (for `every` 4) always
                    // fail; the others fail now and then.
                    let failing = h.is_multiple_of(every)
                        || (h / every + u64::from(j.attempt)).is_multiple_of(every);
                    let outcome = if failing {
                        match q.retry(&j.receipt, "chosen to fail", Some(0)) {
                            Ok(Retried::DeadLettered) => format!("dead {payload} {}", j.attempt),
                            Ok(_) => format!("retried {payload} {}", j.attempt),
                            Err(alk_guest::Error::StaleReceipt(_)) => format!("stale {payload}"),
                            Err(e) => fail(e),
                        }
                    } else {
                        match q.ack(&j.receipt) {
                            Ok(()) => format!("acked {payload}"),
                            Err(alk_guest::Error::StaleReceipt(_)) => format!("stale {payload}"),
                            Err(e) => fail(e),
                        }
                    };
                    writeln!(out, "{outcome}").unwrap();
                }
            }
        }
        ["inspect", _, first, last] => {
            for id in num(first)..=num(last) {
                match q.get_job(id).unwrap_or_else(|e| fail(e)) {
                    None => writeln!(out, "none {id}").unwrap(),
                    Some(j) => {
                        let state = match j.state {
                            JobState::Waiting => "waiting",
                            JobState::Delayed => "delayed",
                            JobState::InFlight => "in-flight",
                            JobState::Dead => "dead",
                        };
                        let payload = match &j.payload {
                            Payload::Text(t) | Payload::Json(t) => t.clone(),
                        };
                        let max = j.max_attempts.map(|m| m.to_string()).unwrap_or("-".into());
                        writeln!(out, "job {id} {state} {} {max} {payload}", j.attempt).unwrap();
                    }
                }
            }
        }
        _ => {
            eprintln!("queue-tool: unknown command or wrong arguments: {a:?}");
            std::process::exit(2);
        }
    }
}
