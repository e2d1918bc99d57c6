//! The multi-process mix: queue workers and producers (with kv, stream and
//! lock traffic mixed in) run as separate processes on one store, then
//! every message is checked to have been acknowledged exactly once.
//!
//! Shared by the soak (`tests/integration/soak.rs`, alk only) and by
//! `cargo xtask bench` (alk beside stock SQLite driven from Rust). Plain
//! `std`: it is compiled into both. The processes are the `soak` guest under
//! `alk-host`, or `alk-bench mix sqlite`, which print the same lines:
//! `sent <n>` / `got <payload> <attempt>` … `acked <n>`, then `ops <n>`,
//! `lat <p50> <p99> <max>` (µs), `write <max-µs>` and `busy <n>`.

#![allow(dead_code)]

use std::collections::HashMap;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub struct Mix {
    /// Worker processes.
    pub workers: usize,
    /// Producer processes.
    pub producers: usize,
    /// How long the producers produce.
    pub produce: Duration,
    /// Messages a worker receives per call.
    pub batch: u32,
}

/// A process role; the caller turns it into a command.
#[derive(Debug, Clone)]
pub enum Role {
    /// `producer <tag> <ms>`.
    Producer { tag: String, ms: u64 },
    /// `worker <batch> <name>`.
    Worker { batch: u32, name: String },
    /// Sends `count` `stop` messages.
    Stop { count: usize },
}

/// What one run did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Messages sent (and, when clean, acknowledged once each).
    pub messages: u64,
    /// Calls made by every process.
    pub ops: u64,
    /// From the first start to the last exit.
    pub elapsed: Duration,
    /// Median of the workers' per-process p50 call latency (µs).
    pub worker_p50: u64,
    /// Highest p99 call latency of any worker (µs).
    pub worker_p99: u64,
    /// Slowest writing call of any process (µs).
    pub worst_write: u64,
    /// Problems found; empty when the run was clean.
    pub problems: Vec<String>,
}

impl Outcome {
    /// Messages through the queue per second.
    pub fn messages_per_s(&self) -> f64 {
        self.messages as f64 / self.elapsed.as_secs_f64()
    }
}

/// The values after `key` on the last line starting with it.
fn field<'a>(out: &'a str, key: &str) -> Vec<&'a str> {
    out.lines()
        .rev()
        .find_map(|l| l.strip_prefix(key).map(|r| r.split_whitespace().collect()))
        .unwrap_or_default()
}

fn num(s: Option<&&str>) -> u64 {
    s.and_then(|s| s.parse().ok()).unwrap_or(0)
}

struct Done {
    who: String,
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

fn wait(who: String, child: std::process::Child) -> Done {
    let out = child.wait_with_output().expect("wait for a mix process");
    Done {
        who,
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs the mix once; `command` makes the process of a role.
pub fn run(mix: &Mix, command: &dyn Fn(&Role) -> Command) -> Outcome {
    let mut outcome = Outcome::default();
    let started = Instant::now();
    let spawn = |role: &Role| {
        command(role)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start a mix process")
    };
    let workers: Vec<(String, std::process::Child)> = (0..mix.workers)
        .map(|i| {
            let name = format!("w{i}");
            let role = Role::Worker {
                batch: mix.batch,
                name: name.clone(),
            };
            (name, spawn(&role))
        })
        .collect();
    let producers: Vec<(String, std::process::Child)> = (0..mix.producers)
        .map(|i| {
            let tag = format!("p{i}");
            let role = Role::Producer {
                tag: tag.clone(),
                ms: mix.produce.as_millis() as u64,
            };
            (tag, spawn(&role))
        })
        .collect();
    let mut done: Vec<Done> = Vec::new();
    let mut sent: HashMap<String, u64> = HashMap::new();
    for (tag, child) in producers {
        let d = wait(format!("producer {tag}"), child);
        sent.insert(tag, num(field(&d.stdout, "sent ").first()));
        done.push(d);
    }
    // One stop per worker, queued after everything the producers sent.
    let stop = wait("stop".into(), spawn(&Role::Stop { count: mix.workers }));
    if !stop.status.success() {
        outcome.problems.push(format!(
            "sending stop failed: {}{}",
            stop.stdout, stop.stderr
        ));
    }
    let mut seen: HashMap<String, u32> = HashMap::new();
    let mut p50s = Vec::new();
    for (name, child) in workers {
        let d = wait(format!("worker {name}"), child);
        for line in d.stdout.lines() {
            if let Some(rest) = line.strip_prefix("got ") {
                let mut parts = rest.split_whitespace();
                let payload = parts.next().unwrap_or("").to_string();
                if parts.next() != Some("1") {
                    outcome
                        .problems
                        .push(format!("{payload} was delivered more than once ({line})"));
                }
                *seen.entry(payload).or_default() += 1;
            }
        }
        let lat = field(&d.stdout, "lat ");
        p50s.push(num(lat.first()));
        outcome.worker_p99 = outcome.worker_p99.max(num(lat.get(1)));
        done.push(d);
    }
    outcome.elapsed = started.elapsed();
    p50s.sort_unstable();
    outcome.worker_p50 = p50s.get(p50s.len() / 2).copied().unwrap_or(0);
    for d in &done {
        if !d.status.success() {
            let tail: Vec<&str> = d.stdout.lines().rev().take(3).collect();
            outcome.problems.push(format!(
                "{} exited with {}: {tail:?} {}",
                d.who, d.status, d.stderr
            ));
        }
        if d.stderr.contains("panicked") || d.stderr.contains("internal failure") {
            outcome
                .problems
                .push(format!("{} reported a failure: {}", d.who, d.stderr));
        }
        let busy = num(field(&d.stdout, "busy ").first());
        if busy > 0 {
            outcome
                .problems
                .push(format!("{} got busy {busy} times", d.who));
        }
        outcome.ops += num(field(&d.stdout, "ops ").first());
        outcome.worst_write = outcome
            .worst_write
            .max(num(field(&d.stdout, "write ").first()));
    }
    // Exactly once: every message sent was acknowledged once, nothing else.
    for (tag, n) in &sent {
        outcome.messages += n;
        for i in 1..=*n {
            match seen.remove(&format!("{tag}-{i}")) {
                Some(1) => {}
                Some(k) => outcome
                    .problems
                    .push(format!("{tag}-{i} acknowledged {k} times")),
                None => outcome.problems.push(format!("{tag}-{i} was lost")),
            }
        }
    }
    if !seen.is_empty() {
        outcome.problems.push(format!(
            "{} acknowledged messages were never sent",
            seen.len()
        ));
    }
    outcome
}
