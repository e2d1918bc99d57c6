//! Kill loops: a writer killed with `kill -9` in the middle of its work must
//! never make the next one fail or lie. Each loop kills a process at a
//! random point of a large write (a format migration of a 60,000-message
//! queue or a 200,000-key bucket, one 60 MB `set-many`) or of a mix of
//! small writers, then runs the next writer alone and checks it: no panic
//! in any process's output, no `internal`, no `busy` (nobody else is alive
//! to hold a lock), and what it reported is what the store then holds.
//!
//! The tests run a short form (`ALK_KILLS`, default 3 kills per loop);
//! `cargo xtask soak` runs the long form (20 kills per loop), at both
//! durabilities.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::common::*;

/// Kills per loop.
fn kills() -> usize {
    std::env::var("ALK_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// The random points of a loop (the seed is printed, to replay a run).
fn rng(what: &str) -> Rng {
    let (rng, seed) = Rng::new("ALK_KILL_SEED");
    eprintln!("{what}: seed {seed} (ALK_KILL_SEED replays it)");
    rng
}

/// `alk-host run <guest> --data-dir <dir> --durability <d> -- args`.
fn guest_cmd(dir: &Path, durability: &str, name: &str, args: &[&str]) -> Command {
    let mut cmd = alk_host();
    cmd.arg("run")
        .arg(guest(name))
        .arg("--data-dir")
        .arg(dir)
        .args(["--durability", durability, "--"])
        .args(args);
    cmd
}

/// What no process may ever print: a panic (contained or not), an
/// internal failure, a `busy` (the next writer runs alone).
fn check_clean(who: &str, out: &Output, problems: &mut Vec<String>) {
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    for bad in [
        "panicked",
        "internal failure",
        "Internal",
        "internal:",
        "Busy",
        "busy:",
    ] {
        if all.contains(bad) {
            problems.push(format!("{who} printed {bad:?}: {}", all.trim()));
            return;
        }
    }
    if !out.status.success() {
        problems.push(format!("{who} failed ({}): {}", out.status, all.trim()));
    }
}

/// Every store file under `dir` passes stock SQLite's integrity check
/// (read from a copy, once every process is gone).
fn check_files(dir: &Path, problems: &mut Vec<String>) {
    for p in sqlite_store_files(dir) {
        let checked = sqlite_schema("store", &p);
        if checked["integrity"] != "ok" {
            problems.push(format!(
                "{}: integrity {}",
                p.display(),
                checked["integrity"]
            ));
        }
    }
}

/// Runs `cmd` to its end, checked by [`check_clean`]; its stdout.
fn next_writer(who: &str, mut cmd: Command, problems: &mut Vec<String>) -> String {
    let out = cmd.output().expect("start alk-host");
    check_clean(who, &out, problems);
    text(&out.stdout)
}

/// Starts `victim`, kills it with SIGKILL after `after`, and checks that
/// whatever it printed before dying shows no panic. Whether it finished
/// first (it was quicker than the chosen point) is returned.
fn kill_after(mut victim: Command, after: Duration, problems: &mut Vec<String>) -> bool {
    let mut child = victim
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn alk-host");
    std::thread::sleep(after);
    let finished = matches!(child.try_wait(), Ok(Some(_)));
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    if all.contains("panicked") || all.contains("internal failure") {
        problems.push(format!("the victim printed a failure: {}", all.trim()));
    }
    finished
}

/// A copy of the store files of `from` in a fresh directory.
fn copy_dir(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    let mut stack = vec![(from.to_path_buf(), to.path().to_path_buf())];
    while let Some((a, b)) = stack.pop() {
        std::fs::create_dir_all(&b).unwrap();
        for e in std::fs::read_dir(&a).unwrap().flatten() {
            let (src, dst) = (e.path(), b.join(e.file_name()));
            if src.is_dir() {
                stack.push((src, dst));
            } else {
                std::fs::copy(&src, &dst).unwrap();
            }
        }
    }
    to
}

/// A data directory prepared once per test binary, copied for every kill.
fn prepared(key: &'static str, make: impl FnOnce(&Path)) -> PathBuf {
    static DIRS: OnceLock<std::sync::Mutex<Vec<(&'static str, tempfile::TempDir)>>> =
        OnceLock::new();
    let dirs = DIRS.get_or_init(Default::default);
    let mut dirs = dirs.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, d)) = dirs.iter().find(|(k, _)| *k == key) {
        return d.path().to_path_buf();
    }
    let d = tempfile::tempdir().unwrap();
    make(d.path());
    let path = d.path().to_path_buf();
    dirs.push((key, d));
    path
}

/// How long `cmd` takes on a copy of `base` (where to aim the kills).
fn duration_of(base: &Path, make: impl Fn(&Path) -> Command) -> Duration {
    let copy = copy_dir(base);
    let start = Instant::now();
    let out = make(copy.path()).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    start.elapsed()
}

/// Messages in the migrated queue.
const QUEUE_MESSAGES: usize = 60_000;

/// A data directory with a v1 queue `bq` of [`QUEUE_MESSAGES`] messages,
/// sent in batches of 1,000.
fn v1_queue() -> PathBuf {
    prepared("v1-queue", |dir| {
        let mut cmd = alk_host();
        cmd.arg("run")
            .arg(guest("queue-tool"))
            .arg("--data-dir")
            .arg(dir)
            .args(["--new-queues", "v1", "--durability", "relaxed", "--"])
            .args(["fill", "bq", &QUEUE_MESSAGES.to_string(), "m"]);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
    })
}

fn migrate(dir: &Path, what: &str, name: &str) -> Command {
    let mut cmd = alk_host();
    cmd.args(["migrate", what, name, "--data-dir"]).arg(dir);
    cmd
}

/// Kill loop: `migrate queue` killed mid-way, then a claim of 1,000.
fn migrate_queue_killed(durability: &str) {
    let base = v1_queue();
    let took = duration_of(&base, |d| migrate(d, "queue", "bq"));
    let mut rng = rng("migrate queue");
    let mut problems = Vec::new();
    let mut landed = 0;
    for kill in 1..=kills() {
        let dir = copy_dir(&base);
        let after = took.mul_f64(rng.between(0.1, 0.9));
        if !kill_after(migrate(dir.path(), "queue", "bq"), after, &mut problems) {
            landed += 1;
        }
        let who = format!("kill {kill} ({after:?}): the next claim");
        let claimed = next_writer(
            &who,
            guest_cmd(
                dir.path(),
                durability,
                "queue-tool",
                &["receive", "bq", "1000", "600000"],
            ),
            &mut problems,
        );
        let claimed = claimed.lines().count();
        // Its answer is what the store holds: exactly the 1,000 it
        // reported are in flight, and not one message is lost.
        let out = next_writer(
            &format!("kill {kill}: the inspection"),
            guest_cmd(
                dir.path(),
                durability,
                "queue-tool",
                &["inspect", "bq", "1", &QUEUE_MESSAGES.to_string()],
            ),
            &mut problems,
        );
        let in_flight = out.lines().filter(|l| l.contains(" in-flight ")).count();
        let waiting = out.lines().filter(|l| l.contains(" waiting ")).count();
        check_files(dir.path(), &mut problems);
        if claimed != 1000 || in_flight != claimed || in_flight + waiting != QUEUE_MESSAGES {
            problems.push(format!(
                "kill {kill}: claimed {claimed}, the store holds {in_flight} in flight and {waiting} waiting"
            ));
        }
    }
    eprintln!(
        "migrate queue {durability}: {} kills ({landed} mid-migration, migration {took:?}), {} problems",
        kills(),
        problems.len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Keys in the migrated bucket.
const BUCKET_KEYS: usize = 200_000;

/// A data directory with a v1 bucket `bk` of [`BUCKET_KEYS`] keys.
fn v1_bucket() -> PathBuf {
    prepared("v1-bucket", |dir| {
        let out = guest_cmd(
            dir,
            "relaxed",
            "kv-tool",
            &["fill", "bk", &BUCKET_KEYS.to_string(), "8", "1000"],
        )
        .output()
        .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
    })
}

/// Kill loop: `migrate kv` killed mid-way, then a `wasi:keyvalue`
/// increment, read back.
fn migrate_kv_killed(durability: &str) {
    let base = v1_bucket();
    let took = duration_of(&base, |d| migrate(d, "kv", "bk"));
    let mut rng = rng("migrate kv");
    let mut problems = Vec::new();
    let mut landed = 0;
    for kill in 1..=kills() {
        let dir = copy_dir(&base);
        let after = took.mul_f64(rng.between(0.1, 0.9));
        if !kill_after(migrate(dir.path(), "kv", "bk"), after, &mut problems) {
            landed += 1;
        }
        let who = format!("kill {kill} ({after:?}): the next increment");
        let got = next_writer(
            &who,
            guest_cmd(
                dir.path(),
                durability,
                "keyvalue-draft2",
                &["increment", "bk", "counter", "1", "5"],
            ),
            &mut problems,
        );
        let read = next_writer(
            &format!("kill {kill}: the read"),
            guest_cmd(dir.path(), durability, "kv-tool", &["get", "bk", "counter"]),
            &mut problems,
        );
        if got.trim() != "5" || read.trim() != "5" {
            problems.push(format!(
                "kill {kill}: the increment reported {:?}, the store holds {:?}",
                got.trim(),
                read.trim()
            ));
        }
        check_files(dir.path(), &mut problems);
        for key in ["k-000000", "k-199999"] {
            let read = next_writer(
                &format!("kill {kill}: reading {key}"),
                guest_cmd(dir.path(), durability, "kv-tool", &["get", "bk", key]),
                &mut problems,
            );
            if read.trim() != "vvvvvvvv" {
                problems.push(format!("kill {kill}: {key} reads {:?}", read.trim()));
            }
        }
    }
    eprintln!(
        "migrate kv {durability}: {} kills ({landed} mid-migration, migration {took:?}), {} problems",
        kills(),
        problems.len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Kill loop: one `set-many` of 1,000 × 60 KB values (60 MB in one
/// transaction) killed while committing, then one small writer: it does
/// not wait for a holder that is gone, and the big batch is all or
/// nothing.
fn big_set_many_killed(durability: &str) {
    let mut rng = rng("60 MB set-many");
    let mut problems = Vec::new();
    let big = |d: &Path| {
        guest_cmd(
            d,
            durability,
            "kv-tool",
            &["fill", "big", "1000", "61440", "1000"],
        )
    };
    let empty = tempfile::tempdir().unwrap();
    let took = duration_of(empty.path(), big);
    let mut finished = 0;
    for kill in 1..=kills() {
        let dir = tempfile::tempdir().unwrap();
        // The bucket exists before the victim starts: its time goes to
        // the batch.
        next_writer(
            "the bucket's creation",
            guest_cmd(dir.path(), durability, "kv-tool", &["set", "big", "a", "b"]),
            &mut problems,
        );
        let after = took.mul_f64(rng.between(0.1, 0.95));
        if kill_after(big(dir.path()), after, &mut problems) {
            finished += 1;
        }
        let who = format!("kill {kill} ({after:?}): the next small write");
        let out = next_writer(
            &who,
            guest_cmd(
                dir.path(),
                durability,
                "kv-tool",
                &["set", "big", "small", "v"],
            ),
            &mut problems,
        );
        let read = next_writer(
            &format!("kill {kill}: the read"),
            guest_cmd(dir.path(), durability, "kv-tool", &["get", "big", "small"]),
            &mut problems,
        );
        if out.trim() != "ok" || read.trim() != "v" {
            problems.push(format!(
                "kill {kill}: the write reported {:?}, the store holds {:?}",
                out.trim(),
                read.trim()
            ));
        }
        let first = next_writer(
            &format!("kill {kill}: exists"),
            guest_cmd(
                dir.path(),
                durability,
                "kv-tool",
                &["exists", "big", "k-000000"],
            ),
            &mut problems,
        );
        let last = next_writer(
            &format!("kill {kill}: exists"),
            guest_cmd(
                dir.path(),
                durability,
                "kv-tool",
                &["exists", "big", "k-000999"],
            ),
            &mut problems,
        );
        check_files(dir.path(), &mut problems);
        if first.trim() != last.trim() {
            problems.push(format!(
                "kill {kill}: half a batch: first key {}, last key {}",
                first.trim(),
                last.trim()
            ));
        }
    }
    eprintln!(
        "60 MB set-many {durability}: {} kills ({finished} finished first, batch {took:?}), {} problems",
        kills(),
        problems.len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Kill loop: several small writers (queue sends, increments, kv sets) on
/// one data directory, all killed at a random point; then one writer of
/// each kind, checked against the store.
fn small_writers_killed(durability: &str) {
    let mut rng = rng("small writers");
    let mut problems = Vec::new();
    let dir = tempfile::tempdir().unwrap();
    let mut expected_counter = 0u64;
    for kill in 1..=kills() {
        let writers: Vec<Command> = vec![
            guest_cmd(
                dir.path(),
                durability,
                "queue-tool",
                &["produce", "q", "100000", &format!("p{kill}")],
            ),
            guest_cmd(
                dir.path(),
                durability,
                "keyvalue-draft2",
                &["increment", "s", "spin", "100000", "1"],
            ),
            guest_cmd(
                dir.path(),
                durability,
                "keyvalue-draft2",
                &["churn", "s", "100000", &kill.to_string()],
            ),
            guest_cmd(
                dir.path(),
                durability,
                "queue-tool",
                &["consume", "q", "8", "600000"],
            ),
        ];
        let mut children: Vec<std::process::Child> = writers
            .into_iter()
            .map(|mut c| {
                c.stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("spawn alk-host")
            })
            .collect();
        std::thread::sleep(Duration::from_millis(
            (rng.between(0.3, 1.5) * 1000.0) as u64,
        ));
        for c in &mut children {
            let _ = c.kill();
        }
        for c in children {
            let out = c.wait_with_output().unwrap();
            let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
            if all.contains("panicked") || all.contains("internal failure") {
                problems.push(format!(
                    "kill {kill}: a victim printed a failure: {}",
                    all.trim()
                ));
            }
        }
        expected_counter += 3;
        let got = next_writer(
            &format!("kill {kill}: the next increment"),
            guest_cmd(
                dir.path(),
                durability,
                "keyvalue-draft2",
                &["increment", "s", "checked", "1", "3"],
            ),
            &mut problems,
        );
        let read = next_writer(
            &format!("kill {kill}: the read"),
            guest_cmd(dir.path(), durability, "kv-tool", &["get", "s", "checked"]),
            &mut problems,
        );
        let want = expected_counter.to_string();
        if got.trim() != want || read.trim() != want {
            problems.push(format!(
                "kill {kill}: the increment reported {:?}, the store holds {:?}, expected {want}",
                got.trim(),
                read.trim()
            ));
        }
        let sent = next_writer(
            &format!("kill {kill}: the next send"),
            guest_cmd(
                dir.path(),
                durability,
                "queue-tool",
                &["send", "q", &format!("checked-{kill}")],
            ),
            &mut problems,
        );
        let id = sent.trim().to_string();
        let job = next_writer(
            &format!("kill {kill}: the job"),
            guest_cmd(
                dir.path(),
                durability,
                "queue-tool",
                &["inspect", "q", &id, &id],
            ),
            &mut problems,
        );
        if !job.trim().ends_with(&format!("checked-{kill}")) {
            problems.push(format!(
                "kill {kill}: the send reported id {id:?}, the store holds {:?}",
                job.trim()
            ));
        }
    }
    check_files(dir.path(), &mut problems);
    eprintln!(
        "small writers {durability}: {} kills, {} problems",
        kills(),
        problems.len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn kill_loop_migrate_queue_full() {
    migrate_queue_killed("full");
}

#[test]
fn kill_loop_migrate_queue_relaxed() {
    migrate_queue_killed("relaxed");
}

#[test]
fn kill_loop_migrate_kv_full() {
    migrate_kv_killed("full");
}

#[test]
fn kill_loop_migrate_kv_relaxed() {
    migrate_kv_killed("relaxed");
}

#[test]
fn kill_loop_big_set_many_full() {
    big_set_many_killed("full");
}

#[test]
fn kill_loop_big_set_many_relaxed() {
    big_set_many_killed("relaxed");
}

#[test]
fn kill_loop_small_writers_full() {
    small_writers_killed("full");
}

#[test]
fn kill_loop_small_writers_relaxed() {
    small_writers_killed("relaxed");
}
