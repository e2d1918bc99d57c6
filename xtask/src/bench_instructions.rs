//! `cargo xtask bench instructions [--baseline <alk-bench>]`: the
//! instructions one queue or stream operation costs, counted by valgrind's
//! callgrind rather than timed, so that two formats (or two builds) can be
//! compared on a busy machine: a count does not move with the machine's
//! load the way a rate does.
//!
//! Every row runs `alk-bench op <engine> relaxed <op> <n> t <dir>` (the
//! storage layer called from Rust, the same statements as a guest's, no
//! guest and no host glue) twice under callgrind, with `n` operations and
//! with `3 n`; the difference over `2 n` is the cost of one operation,
//! without the start-up, the untimed setup and the shutdown the two runs
//! share. Columns: new queues in `localqueue.v1` (`turso-v1`), in the
//! default format (`turso`), stock SQLite with the same statements
//! (`sqlite`), and the baseline `alk-bench` when one is given.
//!
//! Prints the table and puts it in place in `docs/benchmarks.md`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use crate::Result;
use crate::bench::{fresh_dir, machine};

const TITLE: &str = "Throughput — instructions per operation (callgrind), relaxed durability";

/// The rows: label, op, `n` (the longer run has `3 n`), whether the queue
/// format matters. A claim row's queue holds what its op says at the start
/// and must not run dry in `3 n` (the 3,000 of the second is exactly
/// `3 n`): the count is over claims from that depth down. The rows at 500
/// and at 10,000 waiting count the throughput table's two claims one at a
/// time: a claim whose cost does not grow with the queue shows the same
/// count at every depth.
const ROWS: &[(&str, &str, usize, bool)] = &[
    ("send", "queue-send", 1_000, true),
    (
        "claim + ack one at a time, 500 waiting at the start",
        "queue-claim-1-500",
        150,
        true,
    ),
    (
        "claim + ack one at a time, 3,000 waiting at the start",
        "queue-claim-1-3000",
        1_000,
        true,
    ),
    (
        "claim + ack one at a time, 10,000 waiting at the start",
        "queue-claim-1-10000",
        1_000,
        true,
    ),
    (
        "claim + ack-batch, batch 8, 5,000 waiting at the start (per message)",
        "queue-claim-8-5000",
        1_024,
        true,
    ),
    (
        "claim + ack-batch, batch 128, 5,000 waiting at the start (per message)",
        "queue-claim-128-5000",
        1_024,
        true,
    ),
    (
        "stream publish, one per call",
        "stream-publish",
        1_000,
        false,
    ),
];

/// One column: the `alk-bench` binary and its engine argument.
struct Column<'a> {
    bin: &'a Path,
    engine: &'static str,
}

/// Instructions callgrind counted for the whole run of `op` with `n`.
fn count(c: &Column, op: &str, n: usize) -> Result<u64> {
    let dir = fresh_dir("instructions")?;
    let out_file = dir.join("callgrind.out");
    let out = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(c.bin)
        .args(["op", c.engine, "relaxed", op, &n.to_string(), "t"])
        .arg(dir.join("data"))
        .output()
        .map_err(|e| format!("cannot start valgrind: {e}"))?;
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "{} op {} relaxed {op} {n} t <dir> failed under callgrind: {stderr}",
            c.bin.display(),
            c.engine
        ));
    }
    stderr
        .lines()
        .find_map(|l| {
            l.split_once("Collected :")
                .map(|(_, n)| n.trim().to_string())
        })
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| {
            format!(
                "callgrind printed no count for {} op {} {op}: {stderr}",
                c.bin.display(),
                c.engine
            )
        })
}

/// Instructions per operation of `op` on column `c`.
fn per_op(c: &Column, op: &str, n: usize) -> Result<f64> {
    let short = count(c, op, n)?;
    let long = count(c, op, 3 * n)?;
    Ok((long as f64 - short as f64) / (2 * n) as f64)
}

fn thousands(x: f64) -> String {
    format!("{:.0}k", x / 1000.0)
}

/// Whether valgrind can be run: checked before anything is built.
pub fn need_valgrind() -> Result<()> {
    let found = Command::new("valgrind").arg("--version").output();
    if !found.is_ok_and(|o| o.status.success()) {
        return Err(
            "cargo xtask bench instructions counts with valgrind, which is not installed \
             (Debian: apt-get install valgrind)"
                .into(),
        );
    }
    Ok(())
}

/// Runs the rows: `bench` is this build's `alk-bench`, `baseline` an
/// earlier one.
pub fn run(bench: &Path, baseline: Option<&Path>) -> Result<()> {
    let mut columns = vec![
        Column {
            bin: bench,
            engine: "turso-v1",
        },
        Column {
            bin: bench,
            engine: "turso",
        },
        Column {
            bin: bench,
            engine: "sqlite",
        },
    ];
    if let Some(b) = baseline {
        columns.push(Column {
            bin: b,
            engine: "turso",
        });
    }
    let mut md = String::new();
    writeln!(
        md,
        "### {TITLE}\n\n\
         `cargo xtask bench instructions{}` on {}: instructions per operation, counted by valgrind's callgrind \
         (`valgrind --tool=callgrind target/debug/alk-bench op <engine> relaxed <op> <n> t D`, each row run with \
         `n` and with `3 n` operations; the difference over `2 n`, so start-up and setup drop out). The storage \
         layer called from Rust, without a guest: what the queue format and the engine cost. **v1**: new queues \
         in `localqueue.v1`; **default**: the default format; **SQLite**: stock SQLite with the `localqueue.v2` \
         layout and statements (`alk-bench op sqlite`: its claim walks the round as a v2 file's does, its ack \
         is alk's){}. Each ratio is a speed, as in the \
         throughput table: the other column's count over the default's (above 1: the default runs fewer \
         instructions). A count is not a time: callgrind counts each step of a string instruction as one \
         (glibc zeroes and copies large blocks with `rep stosb` and `rep movsb`), so zeroing a 4 KiB page counts \
         about 4,000 instructions where it costs the CPU some hundred cycles, and waits (locks, the disk) count \
         nothing.\n",
        if baseline.is_some() {
            " --baseline <earlier alk-bench>"
        } else {
            ""
        },
        machine(),
        if baseline.is_some() {
            "; **before**: the earlier `alk-bench` given as the baseline, default format"
        } else {
            ""
        }
    )
    .unwrap();
    md.push_str("| operation | v1 | default | default ÷ v1 | SQLite | default ÷ SQLite |");
    if baseline.is_some() {
        md.push_str(" before | default ÷ before |\n|---|---|---|---|---|---|---|---|\n");
    } else {
        md.push_str("\n|---|---|---|---|---|---|\n");
    }
    for (label, op, n, formats) in ROWS {
        eprintln!("bench: {label}");
        let mut cells = Vec::new();
        for (i, c) in columns.iter().enumerate() {
            cells.push(if i == 0 && !formats {
                None
            } else {
                Some(per_op(c, op, *n)?)
            });
        }
        let cell = |i: usize| cells[i].map_or("—".to_string(), thousands);
        let ratio = |i: usize| match (cells[i], cells[1]) {
            (Some(a), Some(d)) => format!("{:.2}", a / d),
            _ => "—".to_string(),
        };
        write!(
            md,
            "| {label} | {} | {} | {} | {} | {} |",
            cell(0),
            cell(1),
            ratio(0),
            cell(2),
            ratio(2)
        )
        .unwrap();
        if baseline.is_some() {
            write!(md, " {} | {} |", cell(3), ratio(3)).unwrap();
        }
        md.push('\n');
    }
    md.push('\n');
    print!("{md}");
    let doc = crate::root().join("docs/benchmarks.md");
    crate::bench::put_section(&doc, TITLE, &md)?;
    eprintln!("bench: wrote the instruction counts into {}", doc.display());
    Ok(())
}
