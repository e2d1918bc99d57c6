//! `cargo xtask bench throughput [--baseline <alk-host>]`: the queue
//! formats side by side (`localqueue.v1` and the default), batch claims,
//! single publishes and the mixed workload at 1+1, 4+2 and 8+4 processes,
//! each against another `alk-host` binary (an earlier build) when one is
//! given, and the mix also on stock SQLite — all in one run, the
//! variants taking turns run by run, so a change in the machine's speed
//! touches every column alike.
//!
//! Prints the two tables and puts them in place in `docs/benchmarks.md`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::Result;
use crate::bench::{children_cpu, fmt_ops, fresh_dir, machine, mix, parse_ops, soak_args, wait_ok};

/// The titles of the two tables in `docs/benchmarks.md`.
const OPS_TITLE: &str =
    "Throughput — queue formats, batches, publish: one process, relaxed durability";
const MIX_TITLE: &str = "Throughput — the mixed workload by process count, relaxed durability";

/// Runs of every cell.
const RUNS: usize = 5;

/// One host to measure: its binary and the queue format of new queues.
struct Variant<'a> {
    bin: &'a Path,
    /// `--new-queues v1` when set.
    v1: bool,
    /// `--instances <n>` when set.
    instances: Option<usize>,
}

/// The single-process rows: label, bench-guest op, operations per run,
/// whether the queue format matters.
const OPS: &[(&str, &str, usize, bool)] = &[
    ("send", "queue-send", 2_000, true),
    (
        "claim + ack one at a time, 500 waiting",
        "queue-claim-1-500",
        500,
        true,
    ),
    (
        "claim + ack one at a time, 10,000 waiting",
        "queue-claim-1-10000",
        500,
        true,
    ),
    (
        "claim + ack-batch, batch 8, 5,000 waiting (messages)",
        "queue-claim-8-5000",
        5_000,
        true,
    ),
    (
        "claim + ack-batch, batch 128, 5,000 waiting (messages)",
        "queue-claim-128-5000",
        5_000,
        true,
    ),
    (
        "stream publish, one per call",
        "stream-publish",
        2_000,
        false,
    ),
];

/// The mixed workload's sizes: workers, producers, seconds.
const MIXES: &[(usize, usize, u64)] = &[(1, 1, 5), (4, 2, 10), (8, 4, 5)];

fn guest_command(v: &Variant, guest: &Path, data: &Path, args: &[String]) -> Command {
    let mut c = Command::new(v.bin);
    c.arg("run").args(["--durability", "relaxed"]);
    if v.v1 {
        c.args(["--new-queues", "v1"]);
    }
    if let Some(n) = v.instances {
        c.args(["--instances", &n.to_string()]);
    }
    c.arg("--cache-dir")
        .arg(crate::target_dir().join("bench-cache"))
        .arg(guest)
        .arg("--data-dir")
        .arg(data)
        .arg("--")
        .args(args);
    c
}

/// Ops per second of one run of `op` on a fresh data directory.
fn op_once(v: &Variant, guests: &Path, op: &str, n: usize) -> Result<f64> {
    let dir = fresh_dir("throughput")?;
    let child = guest_command(
        v,
        &guests.join("bench-guest.wasm"),
        &dir,
        &[op.to_string(), n.to_string(), "t".into()],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit())
    .spawn()
    .map_err(|e| format!("cannot start {}: {e}", v.bin.display()))?;
    let r = parse_ops(&wait_ok(child, op)?)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(r.n / (r.elapsed_us / 1e6))
}

/// What runs the mix: an `alk-host` (default queue format) or stock
/// SQLite through `alk-bench`.
enum Mixer<'a> {
    Alk(&'a Path),
    Sqlite(&'a Path),
    /// An `alk-host` running the workers as instances of one process and
    /// the producers as instances of another (`--instances`).
    Instances(&'a Path),
}

/// Messages per second and CPU seconds per 1,000 messages of one run of
/// the mix.
fn mix_once(mixer: &Mixer, guests: &Path, cfg: &mix::Mix) -> Result<(f64, f64)> {
    let dir = fresh_dir("throughput-mix")?;
    let soak = guests.join("soak.wasm");
    let (bin, sqlite) = match mixer {
        Mixer::Alk(bin) => (*bin, false),
        Mixer::Sqlite(native) => (*native, true),
        Mixer::Instances(host) => return mix_instances_once(host, &soak, &dir, cfg),
    };
    let command = |role: &mix::Role| {
        if sqlite {
            let mut c = Command::new(bin);
            c.args(["mix", "sqlite", "relaxed"])
                .args(soak_args(role, None))
                .arg(&dir);
            c
        } else {
            let v = Variant {
                bin,
                v1: false,
                instances: None,
            };
            guest_command(&v, &soak, &dir, &soak_args(role, Some("jobs")))
        }
    };
    let shown = if sqlite {
        format!("the SQLite mix ({})", bin.display())
    } else {
        format!("the mix on {}", bin.display())
    };
    let cpu0 = children_cpu();
    let out = mix::run(cfg, &command);
    let used = children_cpu() - cpu0;
    let _ = std::fs::remove_dir_all(&dir);
    if !out.problems.is_empty() {
        return Err(format!(
            "{shown} was not clean: {}",
            out.problems.join("; ")
        ));
    }
    Ok((out.messages_per_s(), used / (out.messages as f64 / 1000.0)))
}

/// A started process, killed if it is dropped before it is waited for (a
/// run that failed half-way must not leave workers behind to load the
/// runs after it).
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// [`mix_once`] with two processes: `alk-host run --instances <workers>`
/// of the worker and `--instances <producers>` of the producer, then the
/// stop sender. Checks, as the mix does, that every message sent was
/// received once and acknowledged.
fn mix_instances_once(host: &Path, soak: &Path, dir: &Path, cfg: &mix::Mix) -> Result<(f64, f64)> {
    // Output goes to files, read once a process has exited, as in the
    // mix: reading pipes as they fill would wake this process once per
    // message while the mix runs.
    let outputs = fresh_dir("throughput-mix-out")?;
    // `instances`: how many of the guest one process runs (`None`: one,
    // without the flag).
    let start = |instances: Option<usize>, role: &str, args: &[String]| {
        let out = std::fs::File::create(outputs.join(role)).map_err(|e| e.to_string())?;
        let v = Variant {
            bin: host,
            v1: false,
            instances,
        };
        guest_command(&v, soak, dir, args)
            .stdout(out)
            .stderr(Stdio::inherit())
            .spawn()
            .map(Running)
            .map_err(|e| format!("cannot start {}: {e}", host.display()))
    };
    let finish = |mut child: Running, role: &str| -> Result<String> {
        let status = child.0.wait().map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("the mix's {role} failed with {status}"));
        }
        std::fs::read_to_string(outputs.join(role)).map_err(|e| e.to_string())
    };
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let cpu0 = children_cpu();
    let started = std::time::Instant::now();
    let workers = start(
        Some(cfg.workers),
        "workers",
        &words(&["worker", "jobs", &cfg.batch.to_string(), "w"]),
    )?;
    let ms = cfg.produce.as_millis().to_string();
    let producers = start(
        Some(cfg.producers),
        "producers",
        &words(&["producer", "jobs", "p", &ms]),
    )?;
    let produced = finish(producers, "producers")?;
    let stop = start(
        None,
        "stop",
        &words(&["stop", "jobs", &cfg.workers.to_string()]),
    )?;
    finish(stop, "stop")?;
    let consumed = finish(workers, "workers")?;
    let elapsed = started.elapsed().as_secs_f64();
    let used = children_cpu() - cpu0;
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(&outputs);
    let sum = |out: &str, key: &str| -> u64 {
        out.lines()
            .filter_map(|l| l.strip_prefix(key)?.trim().parse::<u64>().ok())
            .sum()
    };
    let (sent, acked) = (sum(&produced, "sent "), sum(&consumed, "acked "));
    let mut got = std::collections::HashSet::new();
    for l in consumed.lines() {
        if let Some(rest) = l.strip_prefix("got ") {
            let (payload, attempt) = rest.split_once(' ').unwrap_or((rest, ""));
            if attempt != "1" {
                return Err(format!("the instances' mix delivered {payload} again: {l}"));
            }
            if !got.insert(payload) {
                return Err(format!("the instances' mix received {payload} twice"));
            }
        }
    }
    if acked != sent || got.len() as u64 != sent {
        return Err(format!(
            "the instances' mix sent {sent} messages, received {} and acknowledged {acked}",
            got.len()
        ));
    }
    Ok((sent as f64 / elapsed, used / (sent as f64 / 1000.0)))
}

fn median(v: &[f64]) -> f64 {
    crate::bench::median(v.to_vec()).0
}

fn sorted(v: &[f64]) -> Vec<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

/// Runs the benchmark: `host` is this build's `alk-host`, `native` its
/// `alk-bench`, `baseline` an earlier `alk-host`.
pub fn run(host: &Path, native: &Path, baseline: Option<&Path>) -> Result<()> {
    let guests = crate::target_dir().join("guests");
    for guest in ["bench-guest", "soak"] {
        let _ = Command::new(host)
            .arg("compile")
            .arg("--cache-dir")
            .arg(crate::target_dir().join("bench-cache"))
            .arg(guests.join(format!("{guest}.wasm")))
            .output();
    }
    // Variants: this build with v1 queues, with the default; the baseline
    // with v1 queues, with the default.
    let mut variants = vec![
        Variant {
            bin: host,
            v1: true,
            instances: None,
        },
        Variant {
            bin: host,
            v1: false,
            instances: None,
        },
    ];
    if let Some(b) = baseline {
        for v1 in [true, false] {
            variants.push(Variant {
                bin: b,
                v1,
                instances: None,
            });
        }
    }
    let mut md = String::new();
    writeln!(
        md,
        "### {OPS_TITLE}\n\n\
         `cargo xtask bench throughput{}` on {}: every cell is the median of {RUNS} runs (slowest–fastest), \
         the columns taking turns run by run. **v1**: new queues in `localqueue.v1` (`--new-queues v1`); \
         **default**: new queues in the default format.{}\n",
        if baseline.is_some() {
            " --baseline <earlier alk-host>"
        } else {
            ""
        },
        machine(),
        if baseline.is_some() {
            " **before**: the earlier `alk-host` given as the baseline, default format."
        } else {
            ""
        }
    )
    .unwrap();
    if baseline.is_some() {
        md.push_str("| operation | ops per run | v1 ops/s | default ops/s | default ÷ v1 | before ops/s | default ÷ before |\n|---|---|---|---|---|---|---|\n");
    } else {
        md.push_str("| operation | ops per run | v1 ops/s | default ops/s | default ÷ v1 |\n|---|---|---|---|---|\n");
    }
    for (label, op, n, formats) in OPS {
        eprintln!("bench: {label}");
        let mut cells: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
        for _ in 0..RUNS {
            for (i, v) in variants.iter().enumerate() {
                // The format does not matter to this row: v1 columns stay empty.
                if v.v1 && !formats {
                    continue;
                }
                cells[i].push(op_once(v, &guests, op, *n)?);
            }
        }
        let cell = |i: usize| {
            if cells[i].is_empty() {
                "—".to_string()
            } else {
                fmt_ops(&sorted(&cells[i]))
            }
        };
        let ratio = |a: usize, b: usize| {
            if cells[a].is_empty() || cells[b].is_empty() {
                "—".to_string()
            } else {
                format!("{:.2}", median(&cells[a]) / median(&cells[b]))
            }
        };
        write!(
            md,
            "| {label} | {n} | {} | {} | {} |",
            cell(0),
            cell(1),
            ratio(1, 0)
        )
        .unwrap();
        if baseline.is_some() {
            write!(md, " {} | {} |", cell(3), ratio(1, 3)).unwrap();
        }
        md.push('\n');
    }
    md.push('\n');
    let mut mixes = String::new();
    writeln!(
        mixes,
        "### {MIX_TITLE}\n\n\
         The same run, `cargo xtask bench throughput{}` on {}: the soak's mix (see *Mixed workload* below) at \
         three sizes, default queue format, and the same mix on stock SQLite (`alk-bench mix sqlite relaxed …`: \
         the same steps and statements from Rust, though a SQLite worker with nothing to receive polls every \
         millisecond instead of waiting to be woken), and alk's mix in two host processes, the workers as instances of \
         one and the producers as instances of the other (**instances**: `alk-host run --instances <workers> … \
         worker …` and `alk-host run --instances <producers> … producer …`), the columns taking turns run by run: messages per second \
         (median of {RUNS} runs, slowest–fastest), CPU seconds of all processes per 1,000 messages (median), the \
         rate over the rate at 1 worker + 1 producer (**rate ÷ 1+1**) and the CPU per message over that at 1 + 1 \
         (**CPU ÷ 1+1**).{}\n",
        if baseline.is_some() {
            " --baseline <earlier alk-host>"
        } else {
            ""
        },
        machine(),
        if baseline.is_some() {
            " **before**: the `alk-host` given as the baseline."
        } else {
            ""
        }
    )
    .unwrap();
    let mut columns: Vec<(&str, Mixer)> = vec![("", Mixer::Alk(host))];
    if let Some(b) = baseline {
        columns.push(("before ", Mixer::Alk(b)));
    }
    columns.push(("instances ", Mixer::Instances(host)));
    columns.push(("SQLite ", Mixer::Sqlite(native)));
    mixes.push_str("| processes |");
    for (prefix, _) in &columns {
        write!(
            mixes,
            " {prefix}messages/s | {prefix}CPU-s per 1,000 | {prefix}rate ÷ 1+1 | {prefix}CPU ÷ 1+1 |"
        )
        .unwrap();
    }
    mixes.push_str("\n|---|");
    mixes.push_str(&"---|---|---|---|".repeat(columns.len()));
    mixes.push('\n');
    // Each column's rate and CPU at the first size (1 + 1).
    let mut first: Vec<Option<(f64, f64)>> = vec![None; columns.len()];
    for (workers, producers, secs) in MIXES {
        eprintln!("bench: mix, {workers} workers + {producers} producers");
        let cfg = mix::Mix {
            workers: *workers,
            producers: *producers,
            produce: std::time::Duration::from_secs(*secs),
            batch: 1,
        };
        let mut rate: Vec<Vec<f64>> = vec![Vec::new(); columns.len()];
        let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); columns.len()];
        for _ in 0..RUNS {
            for (i, (_, mixer)) in columns.iter().enumerate() {
                let (r, c) = mix_once(mixer, &guests, &cfg)?;
                rate[i].push(r);
                cpu[i].push(c);
            }
        }
        write!(
            mixes,
            "| {workers} workers + {producers} producers, {secs} s |"
        )
        .unwrap();
        for i in 0..columns.len() {
            let (m, c) = (median(&rate[i]), median(&cpu[i]));
            let (m1, c1) = *first[i].get_or_insert((m, c));
            write!(
                mixes,
                " {} | {:.2} | {:.2} | {:.2} |",
                fmt_ops(&sorted(&rate[i])),
                c,
                m / m1,
                c / c1
            )
            .unwrap();
        }
        mixes.push('\n');
    }
    mixes.push('\n');
    print!("{md}{mixes}");
    let doc = crate::root().join("docs/benchmarks.md");
    crate::bench::put_section(&doc, OPS_TITLE, &md)?;
    crate::bench::put_section(&doc, MIX_TITLE, &mixes)?;
    eprintln!("bench: wrote the throughput rows into {}", doc.display());
    Ok(())
}
