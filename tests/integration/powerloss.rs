//! Power loss: several `alk-host` processes write to a data directory on a
//! file system that drops unsynced writes on demand (`alk-powercut`, a FUSE
//! layer after LazyFS's model); at a random moment every process is killed
//! with SIGKILL and the power is cut (unsynced data dropped, the file
//! system mounted again with an empty page cache). Then the stores are read
//! back through `alk-host` and, on a copy, by stock SQLite:
//!
//! - at `--durability full` every acknowledged write is there (0 lost);
//! - at `relaxed` what is lost is only the end of each writer's
//!   acknowledged writes, and writes that were seen after an earlier cut
//!   are still there;
//! - at both, every store passes `PRAGMA integrity_check`, a transaction's
//!   stream event and its queue send are both there or both absent, no
//!   message is there twice, and a new writer succeeds afterwards, with no
//!   panic, `internal` or `busy` in any process's output.
//!
//! The cuts accumulate on one data directory. The tests make a few cuts;
//! `cargo xtask powerloss [cuts]` makes more (`ALK_POWERLOSS_CUTS`;
//! `ALK_POWERLOSS_SEED` repeats a run's random choices).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use alk_powercut::{PowerCut, Stats};

use crate::common::*;

const BUCKET: &str = "plkv";
const STREAM: &str = "plevents";
const JOBS: &str = "pljobs";
const TXQ: &str = "pltx";

/// An `alk-host run powerloss-tool …` process whose stdout lines are
/// collected as they come (only whole lines: a process killed in the
/// middle of one leaves it out).
struct Proc {
    who: String,
    /// Killed when dropped: a failing test must not leave processes
    /// holding the mount.
    child: Killed,
    lines: Arc<Mutex<Vec<String>>>,
    out: Option<JoinHandle<()>>,
    err: Option<JoinHandle<String>>,
}

fn host(data: &Path, durability: &str, args: &[&str]) -> Command {
    let mut cmd = alk_host();
    cmd.arg("run")
        .arg(guest("powerloss-tool"))
        .arg("--data-dir")
        .arg(data)
        .args(["--durability", durability, "--"])
        .args(args);
    cmd
}

impl Proc {
    fn spawn(who: &str, mut cmd: Command) -> Proc {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn alk-host");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let sink = lines.clone();
        let out = std::thread::spawn(move || {
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match stdout.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) if buf.ends_with(b"\n") => {
                        let l = String::from_utf8_lossy(&buf[..buf.len() - 1]).into_owned();
                        sink.lock().unwrap().push(l);
                    }
                    Ok(_) => break,
                }
            }
        });
        let mut stderr = child.stderr.take().unwrap();
        let err = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        Proc {
            who: who.to_string(),
            child: Killed(child),
            lines,
            out: Some(out),
            err: Some(err),
        }
    }

    fn line_count(&self) -> usize {
        self.lines.lock().unwrap().len()
    }

    /// Waits for the end (killing first when `kill`); its lines, its
    /// stderr, and whether it exited by itself with status 0.
    fn finish(mut self, kill: bool) -> (Vec<String>, String, Option<bool>) {
        let early = self.child.try_wait().ok().flatten();
        if kill && early.is_none() {
            let _ = self.child.kill();
        }
        let status = self.child.wait().expect("wait");
        self.out.take().unwrap().join().unwrap();
        let err = self.err.take().unwrap().join().unwrap();
        let lines = std::mem::take(&mut *self.lines.lock().unwrap());
        let exited = if kill {
            early.map(|s| s.success())
        } else {
            Some(status.success())
        };
        (lines, err, exited)
    }
}

/// Problems in a process's stderr: a panic, `internal`, `busy`, or a
/// guest's failed call.
fn stderr_problems(who: &str, err: &str) -> Vec<String> {
    let bad: Vec<&str> = err
        .lines()
        // The compilation cache's own log (`wasmtime_internal_cache`) when
        // two hosts store the same module at once: harmless.
        .filter(|l| !l.contains("wasmtime_internal_cache"))
        // The first open after a cut finding the coordination file out of
        // step with the log (it is memory state, synced only now and then)
        // and rebuilding it, which is the recovery: a warning, not a
        // failure.
        .filter(|l| !(l.contains("WARN") && l.contains("so it was rebuilt")))
        .filter(|l| {
            let lower = l.to_lowercase();
            ["panicked", "internal", "busy", "error:"]
                .iter()
                .any(|w| lower.contains(w))
        })
        .collect();
    match bad.as_slice() {
        [] => Vec::new(),
        [first, rest @ ..] => vec![format!(
            "{who}: stderr: {first}{}",
            if rest.is_empty() {
                String::new()
            } else {
                format!(" (and {} more such lines)", rest.len())
            }
        )],
    }
}

/// What the writers were told succeeded, over every round, and what the
/// checks after earlier cuts found.
#[derive(Default)]
struct History {
    /// kv writer → last acknowledged index (1..=n, each also set `last/`).
    kv: BTreeMap<String, u64>,
    /// send writer → (index, message id) per acknowledged send.
    sent: BTreeMap<String, Vec<(u64, u64)>>,
    /// Payloads whose claim returned (the ack may have committed).
    claimed: BTreeSet<String>,
    /// Payloads whose ack returned.
    acked: BTreeSet<String>,
    /// tx writer → last committed index.
    tx: BTreeMap<String, u64>,
    /// Found by the last check: `k/` keys, event keys, `pltx` payloads and
    /// `pljobs` payloads.
    seen_kv: BTreeSet<String>,
    seen_events: BTreeSet<String>,
    seen_txq: BTreeSet<String>,
    seen_jobs: BTreeSet<String>,
}

impl History {
    /// Takes in a process's lines; problems with them.
    fn absorb(&mut self, who: &str, lines: &[String]) -> Vec<String> {
        let mut problems = Vec::new();
        for l in lines {
            let f: Vec<&str> = l.split(' ').collect();
            let ok = match f.as_slice() {
                ["kv", w, i] => {
                    let i: u64 = i.parse().unwrap();
                    let n = self.kv.entry(w.to_string()).or_default();
                    let next = *n + 1 == i;
                    *n = i;
                    next
                }
                ["sent", w, i, id] => {
                    let v = self.sent.entry(w.to_string()).or_default();
                    let i: u64 = i.parse().unwrap();
                    let next = v.last().map_or(1, |x| x.0 + 1) == i;
                    v.push((i, id.parse().unwrap()));
                    next
                }
                // A claim lost at relaxed durability hands the message
                // out again: the same payload may be claimed twice.
                ["claimed", p] => {
                    self.claimed.insert(p.to_string());
                    true
                }
                ["acked", p] => {
                    self.acked.insert(p.to_string());
                    true
                }
                ["tx", w, i] => {
                    let i: u64 = i.parse().unwrap();
                    let n = self.tx.entry(w.to_string()).or_default();
                    let next = *n + 1 == i;
                    *n = i;
                    next
                }
                ["probe", "ok"] => true,
                _ => false,
            };
            if !ok {
                problems.push(format!("{who}: unexpected line {l:?}"));
            }
        }
        problems
    }
}

/// What the reader found after a cut.
#[derive(Default)]
struct Dump {
    /// Event key → how often.
    events: BTreeMap<String, usize>,
    /// `pljobs` payload → (id, state), and payloads seen twice.
    jobs: BTreeMap<String, (u64, String)>,
    /// `pltx` payload → how often.
    txq: BTreeMap<String, usize>,
    kv: BTreeMap<String, String>,
    duplicates: Vec<String>,
}

fn parse_dump(lines: &[String]) -> Result<Dump, String> {
    let mut d = Dump::default();
    let mut complete = false;
    for l in lines {
        let f: Vec<&str> = l.splitn(5, ' ').collect();
        match f.as_slice() {
            ["event", _, key] => *d.events.entry(key.to_string()).or_default() += 1,
            ["job", q, id, state, p] if *q == JOBS => {
                if d.jobs
                    .insert(p.to_string(), (id.parse().unwrap(), state.to_string()))
                    .is_some()
                {
                    d.duplicates.push(format!("{JOBS} message {p} twice"));
                }
            }
            ["job", q, _, _, p] if *q == TXQ => *d.txq.entry(p.to_string()).or_default() += 1,
            ["kv", k, v] => {
                d.kv.insert(k.to_string(), v.to_string());
            }
            ["dump", "ok"] => complete = true,
            _ => return Err(format!("reader: unexpected line {l:?}")),
        }
    }
    if complete {
        Ok(d)
    } else {
        Err("reader: no `dump ok` line".into())
    }
}

/// Indices present for writer `w` among `keys` shaped `<prefix><w><sep><i>`.
fn indices<'a>(keys: impl Iterator<Item = &'a String>, prefix: &str) -> BTreeSet<u64> {
    keys.filter_map(|k| k.strip_prefix(prefix)?.parse().ok())
        .collect()
}

/// The longest run 1..=m of `present`, and whether `present` is exactly
/// that run (a prefix: nothing after a gap).
fn prefix(present: &BTreeSet<u64>) -> (u64, bool) {
    let mut m = 0;
    while present.contains(&(m + 1)) {
        m += 1;
    }
    (m, present.len() as u64 == m)
}

/// Per round: acknowledged writes lost, and problems.
#[derive(Default)]
struct Checked {
    lost: u64,
    problems: Vec<String>,
}

/// Checks a dump against the history; at relaxed, forgets the lost writes
/// (they are counted once) and remembers what survived.
fn check(h: &mut History, d: &Dump, full: bool) -> Checked {
    let mut c = Checked::default();
    c.problems.extend(d.duplicates.iter().cloned());
    let lost = |c: &mut Checked, what: String, n: u64| {
        if n > 0 {
            c.lost += n;
            if full {
                c.problems.push(format!("lost at full durability: {what}"));
            }
        }
    };
    // kv: k/<w>/<i> for 1..=n, last/<w> = the last index set.
    let mut writers: BTreeSet<String> = h.kv.keys().cloned().collect();
    writers.extend(
        d.kv.keys()
            .filter_map(|k| Some(k.strip_prefix("k/")?.split('/').next()?.to_string())),
    );
    for w in writers {
        let n = h.kv.get(&w).copied().unwrap_or(0);
        let present = indices(d.kv.keys(), &format!("k/{w}/"));
        let (m, is_prefix) = prefix(&present);
        if !is_prefix {
            c.problems.push(format!(
                "kv writer {w}: keys present after a gap: {present:?}"
            ));
        }
        lost(
            &mut c,
            format!("kv writer {w}: {}..={n}", m + 1),
            n.saturating_sub(m),
        );
        let last: u64 =
            d.kv.get(&format!("last/{w}"))
                .map_or(0, |v| v.parse().unwrap_or(u64::MAX));
        if !(last == m || last + 1 == m) {
            c.problems.push(format!(
                "kv writer {w}: last/{w} = {last} but keys 1..={m} present"
            ));
        }
        if !full && n > m {
            h.kv.insert(w.clone(), m);
        }
    }
    for k in &h.seen_kv {
        if !d.kv.contains_key(k) {
            c.problems
                .push(format!("kv key {k} present after an earlier cut, now gone"));
        }
    }
    // Sends: each acknowledged one is in the queue, or was claimed (and
    // maybe acked); at relaxed only the end of a writer's sends is lost.
    for (w, sends) in h.sent.iter_mut() {
        let mut first_missing = None;
        let mut missing = Vec::new();
        for &(i, id) in sends.iter() {
            let p = format!("{w}-{i}");
            match d.jobs.get(&p) {
                Some((got, _)) => {
                    if *got != id {
                        c.problems
                            .push(format!("message {p}: id {got}, acknowledged as {id}"));
                    }
                    if let Some(f) = first_missing {
                        c.problems.push(format!(
                            "send writer {w}: {p} present but {w}-{f} lost (not a suffix)"
                        ));
                    }
                }
                None if h.claimed.contains(&p) => {}
                None => {
                    first_missing.get_or_insert(i);
                    missing.push(i);
                }
            }
        }
        lost(
            &mut c,
            format!("send writer {w}: {missing:?}"),
            missing.len() as u64,
        );
        if !full {
            sends.retain(|(i, _)| !missing.contains(i));
        }
    }
    let acks_lost: Vec<String> = h
        .acked
        .iter()
        .filter(|p| d.jobs.contains_key(*p))
        .cloned()
        .collect();
    lost(
        &mut c,
        format!("acks of {acks_lost:?}"),
        acks_lost.len() as u64,
    );
    if !full {
        for p in &acks_lost {
            h.acked.remove(p);
            h.claimed.remove(p);
        }
    }
    for p in &h.seen_jobs {
        if !d.jobs.contains_key(p) && !h.claimed.contains(p) {
            c.problems.push(format!(
                "message {p} present after an earlier cut, now gone unclaimed"
            ));
        }
    }
    // Transactions: the event and the send both, or neither.
    let keys: BTreeSet<&String> = d.events.keys().chain(d.txq.keys()).collect();
    for k in keys {
        let (e, q) = (
            d.events.get(k).copied().unwrap_or(0),
            d.txq.get(k).copied().unwrap_or(0),
        );
        if e != 1 || q != 1 {
            c.problems.push(format!(
                "transaction {k}: {e} events and {q} messages (want 1 and 1, or none)"
            ));
        }
    }
    for (w, n) in h.tx.iter_mut() {
        let present = indices(d.events.keys(), &format!("{w}-"));
        let (m, is_prefix) = prefix(&present);
        if !is_prefix {
            c.problems.push(format!(
                "tx writer {w}: transactions present after a gap: {present:?}"
            ));
        }
        lost(
            &mut c,
            format!("tx writer {w}: {}..={n}", m + 1),
            n.saturating_sub(m),
        );
        if !full && *n > m {
            *n = m;
        }
    }
    for k in &h.seen_events {
        if !d.events.contains_key(k) {
            c.problems
                .push(format!("event {k} present after an earlier cut, now gone"));
        }
    }
    for k in &h.seen_txq {
        if !d.txq.contains_key(k) {
            c.problems.push(format!(
                "message {k} of {TXQ} present after an earlier cut, now gone"
            ));
        }
    }
    h.seen_kv =
        d.kv.keys()
            .filter(|k| k.starts_with("k/"))
            .cloned()
            .collect();
    h.seen_events = d.events.keys().cloned().collect();
    h.seen_txq = d.txq.keys().cloned().collect();
    h.seen_jobs = d.jobs.keys().cloned().collect();
    c
}

/// Stock SQLite's `integrity_check` of a copy of `file` (and its WAL).
fn integrity(file: &Path) -> String {
    let out = Command::new(python())
        .arg(root().join("tests/tools/sqlite_schema.py"))
        .arg("store")
        .arg(file)
        .output()
        .expect("run python3");
    if !out.status.success() {
        return format!("stock SQLite cannot read it: {}", text(&out.stderr).trim());
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    v["integrity"].as_str().unwrap_or("?").to_string()
}

/// Runs the reader on the mount: its dump, or why it failed. Retried a
/// few times while a transaction's event has no send yet (the relay of a
/// send a cut left pending runs at open, or within a second).
fn read_back(data: &Path, durability: &str, h: &History) -> Result<Dump, Vec<String>> {
    let jobs_max = h
        .sent
        .values()
        .flatten()
        .map(|(_, id)| *id)
        .max()
        .unwrap_or(0)
        + 1_000;
    let jobs_max = jobs_max.to_string();
    let mut last = Vec::new();
    for attempt in 0..4 {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(1_500));
        }
        let p = Proc::spawn(
            "reader",
            host(
                data,
                durability,
                &["dump", BUCKET, STREAM, JOBS, &jobs_max, TXQ],
            ),
        );
        let (lines, err, ok) = p.finish(false);
        let mut problems = stderr_problems("reader", &err);
        if ok != Some(true) {
            problems.push(format!("reader failed: {}", err.trim()));
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let d = parse_dump(&lines).map_err(|e| vec![e])?;
        let atomic = d
            .events
            .keys()
            .chain(d.txq.keys())
            .all(|k| d.events.get(k) == d.txq.get(k));
        if atomic {
            return Ok(d);
        }
        last = vec![format!(
            "reader attempt {attempt}: transactions not atomic yet"
        )];
        if attempt == 3 {
            return Ok(d);
        }
    }
    Err(last)
}

/// Sums fsyncs per kind of file: the database, `-wal`, `-tshm`, other.
fn sync_summary(stats: &Stats) -> String {
    let mut kinds: BTreeMap<&str, [u64; 5]> = BTreeMap::new();
    for (name, s) in &stats.files {
        let kind = if name.ends_with("-wal") {
            "-wal"
        } else if name.ends_with("-tshm") {
            "-tshm"
        } else if name.ends_with(".sqlite") {
            "database"
        } else {
            "other"
        };
        let k = kinds.entry(kind).or_default();
        k[0] += s.fsyncs;
        k[1] += s.fdatasyncs;
        k[2] += s.writes;
        k[3] += s.bytes_dropped;
        k[4] += s.fallocates;
    }
    let mut out: Vec<String> = kinds
        .iter()
        .map(|(k, v)| {
            format!(
                "{k}: {} fsync + {} fdatasync, {} writes, {} fallocate, {} bytes dropped by cuts",
                v[0], v[1], v[2], v[4], v[3]
            )
        })
        .collect();
    let dirs: u64 = stats.dir_fsyncs.values().sum();
    out.push(format!("directories: {dirs} fsync"));
    out.join("; ")
}

/// `cuts` power cuts of a workload at `durability` on one data directory.
fn power_cuts(durability: &str, cuts: u64) {
    let full = durability == "full";
    let (mut rng, seed) = Rng::new("ALK_POWERLOSS_SEED");
    let base = tempfile::tempdir().unwrap();
    let mut fs = PowerCut::mount(&base.path().join("backing"), &base.path().join("mnt"))
        .unwrap_or_else(|e| panic!("{e}"));
    let data = fs.mountpoint().join("data");
    // Compiled once, before processes race to fill the cache.
    let compiled = alk_host()
        .arg("compile")
        .arg(guest("powerloss-tool"))
        .output()
        .expect("alk-host compile");
    assert!(compiled.status.success(), "{}", text(&compiled.stderr));
    let mut h = History::default();
    let mut problems: Vec<String> = Vec::new();
    let (mut lost_total, mut integrity_failures, mut acknowledged) = (0, 0, 0usize);
    for round in 1..=cuts {
        let mut round_problems = Vec::new();
        let r = format!("r{round}");
        let roles: Vec<(String, Vec<String>)> = vec![
            (format!("{r}kv1"), vec!["kv".into(), BUCKET.into()]),
            (format!("{r}kv2"), vec!["kv".into(), BUCKET.into()]),
            (format!("{r}s1"), vec!["send".into(), JOBS.into()]),
            (format!("{r}w1"), vec!["work".into(), JOBS.into()]),
            (
                format!("{r}tx1"),
                vec!["tx".into(), STREAM.into(), TXQ.into()],
            ),
            (
                format!("{r}tx2"),
                vec!["tx".into(), STREAM.into(), TXQ.into()],
            ),
        ];
        let procs: Vec<Proc> = roles
            .iter()
            .map(|(who, args)| {
                let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
                a.extend([who.as_str(), "0"]);
                Proc::spawn(who, host(&data, durability, &a))
            })
            .collect();
        // Every writer has acknowledged something (the worker may have
        // nothing to claim yet), then a random moment later: the cut.
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30)
            && procs
                .iter()
                .filter(|p| !p.who.contains('w'))
                .any(|p| p.line_count() == 0)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(200 + rng.below(1_800)));
        let mut lines_in_round = 0;
        for p in procs {
            let who = p.who.clone();
            let (lines, err, early) = p.finish(true);
            if let Some(ok) = early {
                round_problems.push(format!(
                    "{who} ended before the cut (success: {ok}): {}",
                    err.trim()
                ));
            }
            round_problems.extend(stderr_problems(&who, &err));
            round_problems.extend(h.absorb(&who, &lines));
            lines_in_round += lines.len();
        }
        acknowledged += lines_in_round;
        let dropped = fs.cut().unwrap_or_else(|e| panic!("{e}"));
        // Stock SQLite on a copy of each store, as the cut left it.
        let mut failing = 0;
        for file in sqlite_store_files(&fs.live_dir()) {
            let verdict = integrity(&file);
            if verdict != "ok" {
                failing += 1;
                round_problems.push(format!("{}: integrity {verdict}", file.display()));
            }
        }
        integrity_failures += failing;
        let checked = match read_back(&data, durability, &h) {
            Ok(d) => check(&mut h, &d, full),
            Err(p) => Checked {
                lost: 0,
                problems: p,
            },
        };
        lost_total += checked.lost;
        round_problems.extend(checked.problems);
        // A new writer on the recovered stores.
        let probe = format!("{r}probe");
        let (lines, err, ok) = Proc::spawn(
            &probe,
            host(
                &data,
                durability,
                &["probe", BUCKET, STREAM, JOBS, TXQ, &probe],
            ),
        )
        .finish(false);
        if ok != Some(true) || lines.last().map(String::as_str) != Some("probe ok") {
            round_problems.push(format!("{probe} failed: {}", err.trim()));
        }
        round_problems.extend(stderr_problems(&probe, &err));
        round_problems.extend(h.absorb(&probe, &lines));
        let dropped: u64 = dropped.values().sum();
        eprintln!(
            "powerloss {durability} cut {round}/{cuts}: {lines_in_round} acknowledged, {} lost, \
             {dropped} unsynced bytes dropped, {failing} stores failing integrity, {} problems",
            checked.lost,
            round_problems.len()
        );
        for p in &round_problems {
            eprintln!("  {p}");
        }
        problems.extend(
            round_problems
                .into_iter()
                .map(|p| format!("cut {round}: {p}")),
        );
    }
    let stats = fs.stats();
    fs.unmount().unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "powerloss {durability}: seed {seed}, {cuts} cuts, {acknowledged} acknowledged operations, \
         {} lost at full, {integrity_failures} stores failing integrity, {} lost at relaxed, {} problems",
        if full { lost_total } else { 0 },
        if full { 0 } else { lost_total },
        problems.len()
    );
    eprintln!("powerloss {durability}: syncs: {}", sync_summary(&stats));
    for (name, s) in &stats.files {
        if s.fsyncs + s.fdatasyncs > 0 {
            eprintln!(
                "  {name}: {} fsync, {} fdatasync, {} bytes synced, {} bytes dropped",
                s.fsyncs, s.fdatasyncs, s.bytes_synced, s.bytes_dropped
            );
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn cuts() -> u64 {
    std::env::var("ALK_POWERLOSS_CUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

#[test]
fn powerloss_full_loses_nothing_acknowledged() {
    power_cuts("full", cuts());
}

#[test]
fn powerloss_relaxed_loses_only_the_last_commits() {
    power_cuts("relaxed", cuts());
}

/// Two processes on the mount exclude each other with byte-range OFD
/// locks and `flock`, and share a writable mapping; the file system keeps
/// only what was synced across a cut (a synced write, an `msync`ed
/// mapping, a created file), and loses the rest.
#[test]
fn powerloss_file_system_locks_mmap_and_cuts() {
    const SCRIPT: &str = r#"
import fcntl, mmap, os, struct, subprocess, sys
path, role = sys.argv[1], sys.argv[2]
def ofd(fd, kind, start, length):
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", kind, 0, start, length, 0))
if role == "parent":
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, 4096)
    ofd(fd, fcntl.F_WRLCK, 100, 10)
    fcntl.flock(os.open(path, os.O_RDWR), fcntl.LOCK_EX | fcntl.LOCK_NB)
    m = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    m[0:5] = b"hello"
    subprocess.run([sys.executable, __file__, path, "child"], check=True)
    assert m[10:15] == b"world", m[10:15]
    m.flush()
    try:
        os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        raise SystemExit("O_EXCL opened an existing file")
    except FileExistsError:
        pass
    print("parent ok")
else:
    fd = os.open(path, os.O_RDWR)
    try:
        ofd(fd, fcntl.F_WRLCK, 105, 1)
        raise SystemExit("a byte-range lock held by another process was granted")
    except (BlockingIOError, PermissionError):
        pass
    ofd(fd, fcntl.F_WRLCK, 200, 1)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        raise SystemExit("flock held by another process was granted")
    except BlockingIOError:
        pass
    m = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    assert m[0:5] == b"hello", m[0:5]
    m[10:15] = b"world"
    print("child ok")
"#;
    let base = tempfile::tempdir().unwrap();
    let mut fs = PowerCut::mount(&base.path().join("backing"), &base.path().join("mnt"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mnt = fs.mountpoint().to_path_buf();
    let script = base.path().join("locks.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let out = Command::new(python())
        .arg(&script)
        .arg(mnt.join("shared"))
        .arg("parent")
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "lock/mmap check failed: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout), "child ok\nparent ok\n");

    // What survives a cut.
    use std::io::Write;
    let mut synced = std::fs::File::create(mnt.join("synced")).unwrap();
    synced.write_all(b"kept").unwrap();
    synced.sync_data().unwrap();
    synced.write_all(b" and lost").unwrap();
    drop(synced);
    std::fs::create_dir(mnt.join("dir")).unwrap();
    std::fs::write(mnt.join("dir/unsynced"), b"lost").unwrap();
    std::fs::rename(mnt.join("dir/unsynced"), mnt.join("dir/renamed")).unwrap();
    let stats = fs.stats();
    assert_eq!(stats.files["synced"].fdatasyncs, 1);
    let shared = &stats.files["shared"];
    assert!(
        shared.fsyncs + shared.fdatasyncs >= 1,
        "msync reaches the file system's fsync"
    );
    fs.cut().unwrap();
    assert_eq!(std::fs::read(mnt.join("synced")).unwrap(), b"kept");
    assert_eq!(std::fs::read(mnt.join("dir/renamed")).unwrap(), b"");
    let shared = std::fs::read(mnt.join("shared")).unwrap();
    assert_eq!(shared.len(), 4096);
    assert_eq!(&shared[0..15], b"hello\0\0\0\0\0world");
    fs.unmount().unwrap();
}
