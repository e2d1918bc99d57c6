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
use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Median of the workers' per-process p50 call latency (µs); a
    /// worker's waiting receive counts, time waiting for messages included.
    pub worker_p50: u64,
    /// Highest p99 call latency of any worker (µs), counted the same way.
    pub worker_p99: u64,
    /// Highest p99 call latency of any producer (µs): every producer call
    /// writes and none waits for anything but the store.
    pub producer_p99: u64,
    /// Slowest writing call of any process (µs), workers' receives left
    /// out (they wait for messages too).
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

/// The processes of one run, each writing its output to two files of
/// `dir`; whatever is still running when this is dropped (a panic) is
/// killed, and `dir` is removed.
struct Procs {
    dir: PathBuf,
    running: Vec<Option<(String, Child)>>,
}

impl Procs {
    fn new() -> Procs {
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "alk-mix-{}-{}",
            std::process::id(),
            RUNS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the mix's output folder");
        Procs {
            dir,
            running: Vec::new(),
        }
    }

    fn file(&self, i: usize, stream: &str) -> PathBuf {
        self.dir.join(format!("{i}.{stream}"))
    }

    /// Starts `cmd` as process `who`; its number, for [`Procs::wait`].
    fn start(&mut self, who: String, mut cmd: Command) -> usize {
        let i = self.running.len();
        let create = |path: PathBuf| File::create(path).expect("create a mix output file");
        let child = cmd
            .stdout(create(self.file(i, "out")))
            .stderr(create(self.file(i, "err")))
            .spawn()
            .expect("start a mix process");
        self.running.push(Some((who, child)));
        i
    }

    /// Waits for process `i` to exit and reads what it wrote.
    fn wait(&mut self, i: usize) -> Done {
        let (who, mut child) = self.running[i].take().expect("a process waited for once");
        let status = child.wait().expect("wait for a mix process");
        let read = |path: PathBuf| {
            String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
        };
        Done {
            who,
            status,
            stdout: read(self.file(i, "out")),
            stderr: read(self.file(i, "err")),
        }
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, child) in self.running.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs the mix once; `command` makes the process of a role.
pub fn run(mix: &Mix, command: &dyn Fn(&Role) -> Command) -> Outcome {
    let mut outcome = Outcome::default();
    let started = Instant::now();
    // Output goes to files, read when a process has exited: a worker
    // prints a line per message, and a pipe nobody reads until the end
    // would fill and stop it; nor does reading it as it comes wake this
    // process once per message while the mix runs.
    let mut procs = Procs::new();
    let workers: Vec<usize> = (0..mix.workers)
        .map(|i| {
            let name = format!("w{i}");
            let who = format!("worker {name}");
            procs.start(
                who,
                command(&Role::Worker {
                    batch: mix.batch,
                    name,
                }),
            )
        })
        .collect();
    let producers: Vec<(String, usize)> = (0..mix.producers)
        .map(|i| {
            let tag = format!("p{i}");
            let role = Role::Producer {
                tag: tag.clone(),
                ms: mix.produce.as_millis() as u64,
            };
            let n = procs.start(format!("producer {tag}"), command(&role));
            (tag, n)
        })
        .collect();
    let mut done: Vec<Done> = Vec::new();
    let mut sent: HashMap<String, u64> = HashMap::new();
    for (tag, n) in producers {
        let d = procs.wait(n);
        sent.insert(tag, num(field(&d.stdout, "sent ").first()));
        let lat = field(&d.stdout, "lat ");
        outcome.producer_p99 = outcome.producer_p99.max(num(lat.get(1)));
        done.push(d);
    }
    // One stop per worker, queued after everything the producers sent.
    let n = procs.start("stop".into(), command(&Role::Stop { count: mix.workers }));
    let stop = procs.wait(n);
    if !stop.status.success() {
        outcome.problems.push(format!(
            "sending stop failed: {}{}",
            stop.stdout, stop.stderr
        ));
    }
    let mut seen: HashMap<String, u32> = HashMap::new();
    let mut p50s = Vec::new();
    for n in workers {
        let d = procs.wait(n);
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
