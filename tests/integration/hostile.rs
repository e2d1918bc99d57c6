//! A hostile guest and a hostile operator: what a guest can make the host
//! hold is bounded, foreign and damaged files are refused or repaired
//! without being changed, a full disk is an error, and time limits hold.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use alk_host::{RunOptions, RunStatus};

use crate::common::*;

/// A host process whose guest talks through stdin/stdout lines.
struct Interactive {
    child: Child,
    lines: std::io::Lines<BufReader<ChildStdout>>,
}

impl Interactive {
    fn spawn(cmd: &mut Command) -> Interactive {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn alk-host");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Interactive { child, lines }
    }

    fn line(&mut self) -> String {
        match self.lines.next() {
            Some(Ok(l)) => l,
            _ => {
                let _ = self.child.kill();
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                panic!("the guest ended early: {err}");
            }
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Lets go and waits; the exit code and stderr.
    fn finish(mut self) -> (Option<i32>, String) {
        drop(self.child.stdin.take());
        for _ in self.lines.by_ref().map_while(Result::ok) {}
        let out = self.child.wait_with_output().unwrap();
        (out.status.code(), text(&out.stderr))
    }
}

fn host_run(dir: &Path, guest_name: &str, extra: &[&str], args: &[&str]) -> Command {
    let mut cmd = alk_host();
    cmd.arg("run")
        .arg(guest(guest_name))
        .arg("--data-dir")
        .arg(dir)
        .args(extra)
        .arg("--")
        .args(args);
    cmd
}

// ---------------------------------------------------------------------------
// 1. Notifications sent before the listener's first wait.

fn notified_before_first_wait(how: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut listener = Interactive::spawn(&mut host_run(
        dir.path(),
        "wake-tool",
        &[],
        &["listen-late", "ch", how, "10000"],
    ));
    assert_eq!(listener.line(), "listening");
    // Another process notifies; only then does the listener wait.
    let out = run_cli("wake-tool", dir.path(), &[], &["notify", "ch"]);
    assert_eq!(text(&out.stdout), "notified\n");
    listener.send("go");
    assert_eq!(listener.line(), "woken");
    assert_eq!(listener.finish().0, Some(0));
}

#[test]
fn a_notification_from_another_process_before_the_first_wait_is_seen() {
    notified_before_first_wait("wait");
}

#[test]
fn a_notification_from_another_process_before_the_first_poll_is_seen() {
    notified_before_first_wait("poll");
}

// ---------------------------------------------------------------------------
// 2. Foreign files are refused byte for byte untouched: no header switch, no
//    sibling files.

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// Makes `file` with stock SQLite in rollback-journal mode (the default).
fn sqlite_file(file: &Path, script: &str) {
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let py = format!(
        "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\nc.executescript({script:?})\nc.commit()\nc.close()\n"
    );
    let out = Command::new(python())
        .arg("-c")
        .arg(py)
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn every_kind_of_foreign_database_is_refused_and_left_byte_for_byte() {
    let foreign = [
        ("own tables", "CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL); INSERT INTO orders VALUES (1, 9.5);"),
        ("another marker", "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL); INSERT INTO meta VALUES ('format', 'otherapp.v3');"),
        ("no marker row", "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL); INSERT INTO meta VALUES ('owner', 'me');"),
        ("a NULL marker", "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT); INSERT INTO meta VALUES ('format', NULL);"),
        ("an empty meta", "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"),
        ("many tables", &(0..60).map(|i| format!("CREATE TABLE t{i} (a TEXT, b TEXT, c TEXT, d BLOB, e INTEGER, f REAL, g TEXT, h TEXT);")).collect::<String>()),
    ];
    let places = [
        ("kv/b/localkv.sqlite", "kv-tool", &["get", "b", "k"][..]),
        (
            "queue/q/localqueue.sqlite",
            "queue-tool",
            &["receive", "q", "1"][..],
        ),
        (
            "stream/localstream.sqlite",
            "stream-tool",
            &["get-offset", "s", "c"][..],
        ),
    ];
    for (what, script) in foreign {
        for (rel, tool, args) in places {
            let dir = tempfile::tempdir().unwrap();
            sqlite_file(&dir.path().join(rel), script);
            let before = snapshot(dir.path());
            let out = run_cli(tool, dir.path(), &[], args);
            let stdout = text(&out.stdout);
            assert_eq!(out.status.code(), Some(1), "{what} at {rel}: {stdout}");
            assert!(
                stdout.contains("StoreSetup") && stdout.contains("untouched"),
                "{what} at {rel}: {stdout}"
            );
            assert_eq!(
                snapshot(dir.path()),
                before,
                "{what} at {rel}: the directory changed"
            );
        }
    }
    // A foreign database in WAL mode with its newest pages only in the WAL
    // (a live database of another program): refused, untouched.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kv/b/localkv.sqlite");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let py = "import sqlite3, sys, os\nc = sqlite3.connect(sys.argv[1])\nc.execute('PRAGMA journal_mode=WAL')\nc.execute('PRAGMA wal_autocheckpoint=0')\nc.execute('CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)')\nc.execute(\"INSERT INTO meta VALUES ('format', 'elsewhere.v1')\")\nc.commit()\nos._exit(0)\n";
    let out = Command::new(python())
        .arg("-c")
        .arg(py)
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let before = snapshot(dir.path());
    let out = run_cli("kv-tool", dir.path(), &[], &["get", "b", "k"]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("elsewhere.v1"), "{stdout}");
    assert_eq!(snapshot(dir.path()), before, "the directory changed");
}

#[test]
fn a_store_made_by_stock_sqlite_with_the_marker_opens() {
    // The marker decides, not who wrote the file: a bucket restored with
    // stock SQLite (rollback-journal mode) is accepted.
    let dir = tempfile::tempdir().unwrap();
    let ddl = std::fs::read_to_string(root().join("docs/formats/localkv.v1.md")).unwrap();
    let ddl = ddl
        .split("```sql")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .unwrap()
        .to_string();
    sqlite_file(
        &dir.path().join("kv/b/localkv.sqlite"),
        &format!("{ddl}\nINSERT INTO kv (key, value, expires_at) VALUES ('k', X'6869', NULL);"),
    );
    let out = run_cli("kv-tool", dir.path(), &[], &["get", "b", "k"]);
    assert_eq!(text(&out.stdout), "hi\n", "{}", text(&out.stderr));
}

// ---------------------------------------------------------------------------
// 3. What one guest can make the host hold.

/// Peak resident memory (KiB) and open descriptors of a process now.
fn usage(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0);
    (hwm, fds)
}

/// When process `pid` started (clock ticks after boot), if it is running.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Runs `misbehave <args>` under `--max-memory-mib 32`, sampling the host's
/// descriptors while it runs; its result line, peak RSS (MiB) and the most
/// descriptors seen.
fn hostile_run(args: &[&str]) -> (String, u64, usize) {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Interactive::spawn(&mut host_run(
        dir.path(),
        "misbehave",
        &["--max-memory-mib", "32"],
        args,
    ));
    let pid = p.pid();
    // Sample only this process: once it is reaped its pid may be reused (by
    // a thread of this test binary, say), so every sample checks the
    // process's start time, and sampling stops before the reaping.
    let started = start_time(pid).expect("the host is running");
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = std::thread::spawn({
        let sampling = sampling.clone();
        move || {
            let mut most = 0;
            while sampling.load(Ordering::Acquire) {
                let fds = usage(pid).1;
                if start_time(pid) != Some(started) {
                    break;
                }
                most = most.max(fds);
                std::thread::sleep(Duration::from_millis(20));
            }
            most
        }
    });
    let mut result = String::new();
    loop {
        let l = p.line();
        if l == "done" {
            break;
        }
        result = l;
    }
    let (hwm_kib, fds_now) = usage(pid);
    sampling.store(false, Ordering::Release);
    let most = sampler.join().unwrap();
    let (code, stderr) = p.finish();
    assert_eq!(code, Some(0), "{stderr}");
    let most = most.max(fds_now);
    eprintln!(
        "misbehave {args:?}: {result}; peak RSS {} MiB; most descriptors {most}",
        hwm_kib / 1024
    );
    (result, hwm_kib / 1024, most)
}

#[test]
fn a_guest_holding_thousands_of_buckets_is_stopped_at_the_resource_limit_with_bounded_memory() {
    let (result, rss_mib, fds) = hostile_run(&["buckets", "3000", "keep"]);
    assert!(
        result.starts_with("refused at 1024: ")
            && result.contains("InvalidArgument(")
            && result.contains("limit"),
        "{result}"
    );
    assert!(rss_mib < 200, "peak RSS {rss_mib} MiB");
    assert!(fds < 1024, "{fds} descriptors");
}

#[test]
fn a_guest_cycling_through_thousands_of_buckets_keeps_memory_and_descriptors_bounded() {
    let (result, rss_mib, fds) = hostile_run(&["buckets", "3000", "drop"]);
    assert_eq!(result, "opened 3000");
    assert!(rss_mib < 200, "peak RSS {rss_mib} MiB");
    assert!(fds < 512, "{fds} descriptors");
}

#[test]
fn thousands_of_streams_and_channels_keep_descriptors_bounded() {
    for mode in ["streams", "channels"] {
        let (_, rss_mib, fds) = hostile_run(&[mode, "3000"]);
        assert!(rss_mib < 200, "{mode}: peak RSS {rss_mib} MiB");
        assert!(fds < 256, "{mode}: {fds} descriptors");
    }
}

#[test]
fn a_guest_hoarding_pollables_traps_at_the_resource_limit() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_cli("misbehave", dir.path(), &[], &["pollables", "5000"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(134), "{stderr}");
    assert!(stderr.contains("limit"), "{stderr}");
    assert!(!text(&out.stdout).contains("made"), "{}", text(&out.stdout));
}

#[test]
fn running_out_of_descriptors_is_reported_as_such() {
    // A descriptor limit far below what the guest wants: the host closes
    // idle stores to stay within it, and what it cannot do is a `busy`
    // error that says why, never a claim that the file is foreign.
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "ulimit -n 48 && exec \"$0\" run {} --data-dir {} -- buckets 300 keep",
        guest("misbehave").display(),
        dir.path().display()
    );
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_alk-host"))
        .env("ALK_CACHE_DIR", cache_dir());
    let mut p = Interactive::spawn(&mut cmd);
    let mut result = String::new();
    loop {
        let l = p.line();
        if l == "done" {
            break;
        }
        result = l;
    }
    let (code, stderr) = p.finish();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!result.contains("StoreSetup"), "{result}");
    assert!(
        result == "opened 300" || (result.contains("Busy(") && result.contains("file descriptors")),
        "{result}"
    );
}

// ---------------------------------------------------------------------------
// 4. A full disk.

/// A small tmpfs mounted at a new directory, unmounted on drop; `None` (with
/// the reason printed) when this process may not mount.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    fn mount(size: &str) -> Option<SmallFs> {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(SmallFs { dir }),
            Ok(o) => {
                eprintln!(
                    "SKIPPED the full-disk test: cannot mount a tmpfs ({})",
                    text(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("SKIPPED the full-disk test: cannot run mount ({e})");
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the file system to the last byte.
    fn fill(&self) -> PathBuf {
        let filler = self.path().join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0xaa_u8; 64 * 1024];
        while f.write_all(&block).is_ok() {}
        let small = vec![0xaa_u8; 512];
        while f.write_all(&small).is_ok() {}
        while f.write_all(&[1]).is_ok() {}
        let _ = f.sync_all();
        filler
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).output();
    }
}

#[test]
fn a_full_disk_is_an_error_for_new_stores_and_loses_nothing_acknowledged() {
    let Some(fs) = SmallFs::mount("6m") else {
        return;
    };
    let data = fs.path().join("data");
    let cli = |tool: &str, args: &[&str]| run_cli(tool, &data, &["--durability", "full"], args);
    // Committed before the disk fills: a bucket, and a queue of which half
    // was acknowledged.
    assert!(cli("kv-tool", &["set", "b", "k", "kept"]).status.success());
    for i in 0..10 {
        assert!(
            cli("queue-tool", &["send", "q", &format!("m{i}")])
                .status
                .success()
        );
    }
    let got = text(&cli("queue-tool", &["receive", "q", "5", "60000"]).stdout);
    for line in got.lines() {
        let receipt = line.split_whitespace().next().unwrap();
        assert!(cli("queue-tool", &["ack", "q", receipt]).status.success());
    }
    let filler = fs.fill();
    // New stores of every kind: a typed error, the process survives.
    for (tool, args) in [
        ("queue-tool", &["send", "new-queue", "x"][..]),
        ("kv-tool", &["set", "new-bucket", "k", "v"][..]),
        ("stream-tool", &["publish", "s", "1", "x"][..]),
        ("lock-tool", &["acquire", "l", "me", "1000", "10"][..]),
    ] {
        let out = cli(tool, args);
        let stdout = text(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{tool} {args:?}: {stdout}{}",
            text(&out.stderr)
        );
        assert!(stdout.contains("error:"), "{tool}: {stdout}");
        assert!(
            stdout.contains("no space") || stdout.contains("Busy"),
            "{tool}: {stdout}"
        );
    }
    // What was acknowledged is still there, and still gone where acked.
    assert_eq!(text(&cli("kv-tool", &["get", "b", "k"]).stdout), "kept\n");
    std::fs::remove_file(filler).unwrap();
    let rest = text(&cli("queue-tool", &["receive", "q", "10", "60000"]).stdout);
    assert_eq!(rest.lines().count(), 5, "{rest}");
    // No half-made store is left behind: with space again, the new stores
    // are created normally.
    assert_eq!(
        text(&cli("kv-tool", &["set", "new-bucket", "k", "v"]).stdout),
        "ok\n"
    );
    assert_eq!(
        text(&cli("kv-tool", &["get", "new-bucket", "k"]).stdout),
        "v\n"
    );
    assert!(
        cli("queue-tool", &["send", "new-queue", "x"])
            .status
            .success()
    );
}

// ---------------------------------------------------------------------------
// 5. A damaged coordination file.

fn damage(file: &Path, from: usize) {
    let mut bytes = std::fs::read(file).unwrap();
    let mut x: u32 = 0x9e37_79b9;
    for b in bytes.iter_mut().skip(from) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    std::fs::write(file, bytes).unwrap();
}

#[test]
fn a_damaged_coordination_file_of_an_unused_store_is_rebuilt() {
    for from in [0, 4096, 64] {
        let dir = tempfile::tempdir().unwrap();
        let set = run_cli("kv-tool", dir.path(), &[], &["set", "b", "k", "v1"]);
        assert!(set.status.success(), "{}", text(&set.stdout));
        let tshm = dir.path().join("kv/b/localkv.sqlite-tshm");
        assert!(tshm.exists());
        damage(&tshm, from);
        let out = run_cli("kv-tool", dir.path(), &[], &["get", "b", "k"]);
        let stderr = text(&out.stderr);
        assert_eq!(
            text(&out.stdout),
            "v1\n",
            "damaged from byte {from}: {stderr}"
        );
        // Told as what it is: a warning naming the rebuilt file, not a
        // panic inside the engine.
        assert!(
            !stderr.contains("internal failure") && !stderr.contains("panicked at"),
            "damaged from byte {from}: {stderr}"
        );
        if stderr.contains("WARN") {
            assert!(
                stderr.contains("localkv.sqlite-tshm") && stderr.contains("rebuilt"),
                "damaged from byte {from}: {stderr}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// 6, 7. Time limits and numeric flags.

#[test]
fn the_time_limit_stops_a_guest_blocked_in_a_host_call_or_asleep() {
    for mode in ["sleep", "wait-forever"] {
        let dir = tempfile::tempdir().unwrap();
        let out = run_lib_with(
            "misbehave",
            ctx(dir.path()),
            RunOptions {
                args: vec![mode.into()],
                timeout: Some(Duration::from_millis(300)),
                capture_output: true,
                ..Default::default()
            },
        );
        match out.status {
            RunStatus::Trapped(msg) => assert!(msg.contains("time limit"), "{mode}: {msg}"),
            other => panic!("{mode}: {other:?}"),
        }
        let out = run_cli("misbehave", dir.path(), &["--timeout", "0.3"], &[mode]);
        assert_eq!(out.status.code(), Some(134), "{mode}");
        assert!(
            text(&out.stderr).contains("time limit"),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn a_tiny_time_limit_is_a_trap_not_a_host_failure() {
    let dir = tempfile::tempdir().unwrap();
    for t in ["0.001", "0.002", "0.005"] {
        let out = run_cli("kv-contract", dir.path(), &["--timeout", t], &[]);
        let code = out.status.code();
        // Either it finished in time (it cannot: the contract takes longer)
        // or it was stopped as a trap; never exit 2.
        assert_eq!(code, Some(134), "--timeout {t}: {}", text(&out.stderr));
    }
}

#[test]
fn out_of_range_numeric_flags_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, value) in [
        ("--timeout", "1e20"),
        ("--timeout", "-1"),
        ("--timeout", "0"),
        ("--timeout", "nan"),
        ("--timeout", "inf"),
        ("--timeout", "soon"),
        ("--max-memory-mib", "0"),
        ("--max-memory-mib", "99999999999999999999"),
        ("--max-memory-mib", "-5"),
        ("--max-memory-mib", "1000000"),
    ] {
        let out = run_cli("hello", dir.path(), &[flag, value], &[]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{flag} {value}: {stderr}");
        assert!(
            stderr.starts_with("alk-host: error: ") && stderr.contains(flag),
            "{flag} {value}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn a_damaged_coordination_file_of_a_store_in_use_is_reported_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    // Another process has the bucket open (and keeps it so until told).
    let mut holder = Interactive::spawn(&mut host_run(
        dir.path(),
        "misbehave",
        &[],
        &["buckets", "1", "keep"],
    ));
    assert_eq!(holder.line(), "opened 1");
    assert_eq!(holder.line(), "done");
    let tshm = dir.path().join("kv/b0/localkv.sqlite-tshm");
    damage(&tshm, 64);
    let out = run_cli("kv-tool", dir.path(), &[], &["get", "b0", "k"]);
    let stdout = text(&out.stdout);
    eprintln!("opener: {stdout}{}", text(&out.stderr));
    // Never a crash: an answer, or a store-setup error naming the file.
    match out.status.code() {
        Some(0) => assert_eq!(stdout, "value 0\n"),
        Some(1) => assert!(
            stdout.contains("StoreSetup") && stdout.contains("localkv.sqlite-tshm"),
            "{stdout}"
        ),
        other => panic!(
            "the opener ended with {other:?}: {stdout}{}",
            text(&out.stderr)
        ),
    }
    holder.finish();
    // Once nobody uses the store, the next open rebuilds the file.
    let out = run_cli("kv-tool", dir.path(), &[], &["get", "b0", "k"]);
    assert_eq!(text(&out.stdout), "value 0\n", "{}", text(&out.stderr));
}
