//! `cargo xtask bench`: measures the host and writes `docs/benchmarks.md`.
//!
//! Every figure is measured in the run that writes the file, on this
//! machine, and the file says how (command, runs, spread).

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crate::Result;

/// Wakes measured per latency benchmark.
const WAKE_ROUNDS: usize = 1000;
/// How long the idle host is watched, in milliseconds.
const IDLE_MS: u64 = 10_000;

struct Host<'a> {
    bin: &'a Path,
    guests: PathBuf,
}

impl Host<'_> {
    fn spawn(&self, data: &Path, guest: &str, args: &[&str]) -> Result<Child> {
        Command::new(self.bin)
            .arg("run")
            .arg(self.guests.join(format!("{guest}.wasm")))
            .arg("--data-dir")
            .arg(data)
            .arg("--")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.bin.display()))
    }
}

fn lines(child: &mut Child) -> std::io::Lines<BufReader<std::process::ChildStdout>> {
    BufReader::new(child.stdout.take().expect("piped")).lines()
}

fn fresh_dir(root: &Path, name: &str) -> Result<PathBuf> {
    let dir = root.join("target/bench").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(dir)
}

/// The `p`-th percentile (0..=100) of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// `lat <µs>` lines of a process, as milliseconds.
fn latencies(out: &str) -> Vec<f64> {
    let mut v: Vec<f64> = out
        .lines()
        .filter_map(|l| l.strip_prefix("lat "))
        .filter_map(|n| n.parse::<f64>().ok())
        .map(|us| us / 1000.0)
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

fn expect_waiting(lines: &mut std::io::Lines<BufReader<std::process::ChildStdout>>, who: &str) -> Result<()> {
    match lines.next().and_then(|l| l.ok()) {
        Some(l) if l == "waiting" => Ok(()),
        other => Err(format!("{who} said {other:?} instead of waiting")),
    }
}

fn wait_ok(child: Child, what: &str) -> Result<String> {
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("{what} failed with {}", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// utime + stime of a process, in seconds (from /proc; Linux).
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("").split_whitespace().collect();
    let ticks: f64 = fields.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    let hz = String::from_utf8_lossy(&Command::new("getconf").arg("CLK_TCK").output().map_err(|e| e.to_string())?.stdout)
        .trim()
        .parse::<f64>()
        .unwrap_or(100.0);
    Ok(ticks / hz)
}

struct WakeFigures {
    notify: Vec<f64>,
    stream: Vec<f64>,
    idle_cpu: f64,
    idle_wall: f64,
}

fn wakes(root: &Path, host: &Host) -> Result<WakeFigures> {
    eprintln!("bench: notify ping-pong, {WAKE_ROUNDS} rounds");
    let data = fresh_dir(root, "wake-notify")?;
    // ping attaches first; pong announces itself once it listens.
    let mut ping = host.spawn(&data, "wake-tool", &["ping", &WAKE_ROUNDS.to_string()])?;
    let mut ping_lines = lines(&mut ping);
    expect_waiting(&mut ping_lines, "ping")?;
    let pong = host.spawn(&data, "wake-tool", &["pong", &WAKE_ROUNDS.to_string()])?;
    let ping_out: String = ping_lines.map_while(|l| l.ok()).map(|l| l + "\n").collect();
    wait_ok(ping, "ping")?;
    wait_ok(pong, "pong")?;
    let notify = latencies(&ping_out);

    eprintln!("bench: stream publish -> waiting subscriber, {WAKE_ROUNDS} events");
    let data = fresh_dir(root, "wake-stream")?;
    let mut follow = host.spawn(&data, "wake-tool", &["follow", "ticks", &WAKE_ROUNDS.to_string()])?;
    let mut follow_lines = lines(&mut follow);
    expect_waiting(&mut follow_lines, "follower")?;
    let feed = host.spawn(&data, "wake-tool", &["feed", "ticks", &WAKE_ROUNDS.to_string()])?;
    wait_ok(feed, "feed")?;
    let follow_out: String = follow_lines.map_while(|l| l.ok()).map(|l| l + "\n").collect();
    follow.wait().map_err(|e| e.to_string())?;
    let stream = latencies(&follow_out);

    eprintln!("bench: idle host for {IDLE_MS} ms");
    let data = fresh_dir(root, "wake-idle")?;
    let mut idle = host.spawn(&data, "wake-tool", &["idle", &IDLE_MS.to_string()])?;
    let pid = idle.id();
    let mut idle_lines = lines(&mut idle);
    let _ = idle_lines.next();
    let (cpu0, t0) = (cpu_seconds(pid)?, Instant::now());
    let _ = idle_lines.next();
    let (cpu1, t1) = (cpu_seconds(pid)?, Instant::now());
    let _ = idle.kill();
    let _ = idle.wait();
    Ok(WakeFigures { notify, stream, idle_cpu: cpu1 - cpu0, idle_wall: (t1 - t0).as_secs_f64() })
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    format!("{cores} cores ({cpu})")
}

/// Runs every benchmark and writes `docs/benchmarks.md`.
pub fn run(root: &Path, host_bin: &Path) -> Result<()> {
    let host = Host { bin: host_bin, guests: root.join("target/guests") };
    let w = wakes(root, &host)?;
    let mut md = String::new();
    writeln!(md, "# Benchmarks\n").unwrap();
    writeln!(md, "Written by `cargo xtask bench` on {}. Every figure below comes from the run that wrote this file;", machine()).unwrap();
    writeln!(md, "rerun the command to regenerate it. The host is the `alk-host` binary of the default build (dependencies optimized),").unwrap();
    writeln!(md, "guests are release builds. Benchmarks never run as tests: nothing in `cargo xtask test` asserts on time.\n").unwrap();
    writeln!(md, "## Wakes\n").unwrap();
    writeln!(md, "How long a guest blocked in a waiting call takes to run again after another process commits what it waits for,").unwrap();
    writeln!(md, "and what a blocked host costs while nothing happens. Guest `guest/wake-tool`, two `alk-host` processes on one data directory.\n").unwrap();
    writeln!(md, "| measurement | samples | p50 | p99 | max |").unwrap();
    writeln!(md, "|---|---|---|---|---|").unwrap();
    for (name, v) in [
        ("notify → listener running (`wake-tool ping` / `pong`)", &w.notify),
        ("stream publish → waiting subscriber running (`wake-tool feed` / `follow`; includes the publish commit)", &w.stream),
    ] {
        writeln!(
            md,
            "| {name} | {} | {:.3} ms | {:.3} ms | {:.3} ms |",
            v.len(),
            percentile(v, 50.0),
            percentile(v, 99.0),
            v.last().copied().unwrap_or(f64::NAN)
        )
        .unwrap();
    }
    writeln!(md).unwrap();
    writeln!(
        md,
        "Idle: a host blocked in `listener.wait` with nothing to wake it (`wake-tool idle {IDLE_MS}`) used **{:.3} CPU-seconds** over {:.1} s of wall time",
        w.idle_cpu, w.idle_wall
    )
    .unwrap();
    writeln!(md, "(utime + stime from `/proc/<pid>/stat`, resolution one clock tick).\n").unwrap();
    writeln!(md, "How it works: [architecture](architecture.md#wakes). Latency is one-way, measured with the wall clock of the one machine:").unwrap();
    writeln!(md, "the sender takes the time just before it notifies (or publishes), the waiter as soon as its call returns.").unwrap();
    let path = root.join("docs/benchmarks.md");
    std::fs::write(&path, md).map_err(|e| e.to_string())?;
    eprintln!("bench: wrote {}", path.display());
    Ok(())
}
