//! The soak: several `alk-host` processes (queue workers and producers,
//! with kv, stream and lock traffic mixed in) on one data directory for a
//! fixed time, repeated, at both durabilities. Every run checks that every
//! message was acknowledged exactly once, that no process failed or
//! panicked, that no call returned `busy`, and that every store file passes
//! an integrity check; it prints throughput and latency percentiles.
//!
//! The tests run a short form. `cargo xtask soak` runs the long form: the
//! same tests with `ALK_SOAK_RUNS` (runs per configuration), `ALK_SOAK_MS`
//! (how long producers produce) and `ALK_SOAK_BATCH` (worker batch) set.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::*;

#[path = "../shared/mix.rs"]
mod mix;

use mix::{Mix, Role};

/// The `alk-host run soak …` process of a role.
fn soak_command(dir: &Path, durability: &str, role: &Role) -> Command {
    let mut cmd = alk_host();
    cmd.arg("run")
        .arg(guest("soak"))
        .arg("--data-dir")
        .arg(dir)
        .args(["--durability", durability, "--"]);
    match role {
        Role::Producer { tag, ms } => cmd.args(["producer", "jobs", tag, &ms.to_string()]),
        Role::Worker { batch, name } => cmd.args(["worker", "jobs", &batch.to_string(), name]),
        Role::Stop { count } => cmd.args(["stop", "jobs", &count.to_string()]),
    };
    cmd
}

/// Runs `runs` soaks, printing a line per run and a summary; asserts every
/// run was clean and every store file whole.
fn repeat(mix: &Mix, durability: &str, runs: usize) {
    // One soak at a time: they measure, and they load every core.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let mut rates = Vec::new();
    let mut problems = Vec::new();
    for run_no in 1..=runs {
        let dir = tempfile::tempdir().unwrap();
        let mut r = mix::run(mix, &|role| soak_command(dir.path(), durability, role));
        // Every file is whole, read by stock SQLite once every process is gone.
        for file in sqlite_store_files(dir.path()) {
            let checked = sqlite_schema("store", &file);
            if checked["integrity"] != "ok" {
                r.problems.push(format!(
                    "{}: integrity {}",
                    file.display(),
                    checked["integrity"]
                ));
            }
        }
        eprintln!(
            "soak {durability} {}w+{}p batch {} run {run_no}/{runs}: {} messages, {:.0} msgs/s, {:.0} calls/s, worker p50 {} µs p99 {} µs, producer p99 {} µs, worst write {} µs, {} problems",
            mix.workers,
            mix.producers,
            mix.batch,
            r.messages,
            r.messages_per_s(),
            r.ops as f64 / r.elapsed.as_secs_f64(),
            r.worker_p50,
            r.worker_p99,
            r.producer_p99,
            r.worst_write,
            r.problems.len()
        );
        rates.push(r.messages_per_s());
        problems.extend(r.problems.into_iter().map(|p| format!("run {run_no}: {p}")));
    }
    rates.sort_by(f64::total_cmp);
    eprintln!(
        "soak {durability} {}w+{}p: {runs} runs, median {:.0} msgs/s, {} problems",
        mix.workers,
        mix.producers,
        rates[rates.len() / 2],
        problems.len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn mix(workers: usize, producers: usize) -> Mix {
    Mix {
        workers,
        producers,
        produce: Duration::from_millis(env("ALK_SOAK_MS", 2_000)),
        batch: env("ALK_SOAK_BATCH", 1) as u32,
    }
}

#[test]
fn soak_four_workers_two_producers_relaxed() {
    repeat(&mix(4, 2), "relaxed", env("ALK_SOAK_RUNS", 2) as usize);
}

#[test]
fn soak_four_workers_two_producers_full() {
    repeat(&mix(4, 2), "full", env("ALK_SOAK_RUNS", 2) as usize);
}

#[test]
fn soak_twelve_processes_relaxed() {
    repeat(&mix(8, 4), "relaxed", env("ALK_SOAK_RUNS", 1) as usize);
}

#[test]
fn soak_twelve_processes_full() {
    repeat(&mix(8, 4), "full", env("ALK_SOAK_RUNS", 1) as usize);
}
