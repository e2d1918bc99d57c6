//! Guests that trap, loop or exhaust memory are contained, lose nothing
//! they committed, and the CLI reports each case clearly.

use std::time::Duration;

use alk_host::{RunOptions, RunStatus};

use crate::common::*;

#[test]
fn a_trapping_guest_keeps_what_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_lib("misbehave", ctx(dir.path()), &["write-then-trap", "b"]);
    assert!(
        matches!(out.status, RunStatus::Trapped(_)),
        "{:?}",
        out.status
    );
    let out = run_lib("kv-tool", ctx(dir.path()), &["get", "b", "before-trap"]);
    assert_eq!(text(&out.stdout), "kept\n");
}

#[test]
fn a_trapping_guest_exits_134_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_cli("misbehave", dir.path(), &[], &["write-then-trap", "b"]);
    assert_eq!(out.status.code(), Some(134));
    assert!(
        text(&out.stderr).contains("alk-host: guest trapped"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_looping_guest_is_stopped_at_its_time_limit() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_lib_with(
        "misbehave",
        ctx(dir.path()),
        RunOptions {
            args: vec!["loop".into()],
            timeout: Some(Duration::from_millis(300)),
            capture_output: true,
            ..Default::default()
        },
    );
    match out.status {
        RunStatus::Trapped(msg) => assert!(msg.contains("time limit"), "{msg}"),
        other => panic!("{other:?}"),
    }
    let out = run_cli("misbehave", dir.path(), &["--timeout", "0.3"], &["loop"]);
    assert_eq!(out.status.code(), Some(134));
    assert!(
        text(&out.stderr).contains("time limit"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_guest_exhausting_memory_is_stopped_at_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_lib_with(
        "misbehave",
        ctx(dir.path()),
        RunOptions {
            args: vec!["oom".into()],
            max_memory_bytes: Some(64 << 20),
            capture_output: true,
            ..Default::default()
        },
    );
    match out.status {
        RunStatus::Trapped(msg) => assert!(msg.contains("memory"), "{msg}"),
        other => panic!("{other:?}"),
    }
    let out = run_cli(
        "misbehave",
        dir.path(),
        &["--max-memory-mib", "64"],
        &["oom"],
    );
    assert_eq!(out.status.code(), Some(134));
    assert!(
        text(&out.stderr).contains("memory"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_cli_passes_the_guest_exit_status_through() {
    // WASI 0.2's exit carries success or failure: a guest exiting with 7
    // reports failure, which the host turns into 1.
    let dir = tempfile::tempdir().unwrap();
    let out = run_cli("misbehave", dir.path(), &[], &["exit", "0"]);
    assert_eq!(out.status.code(), Some(0));
    let out = run_cli("misbehave", dir.path(), &[], &["exit", "7"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn host_failures_print_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.wasm");
    let not_wasm = dir.path().join("not.wasm");
    std::fs::write(&not_wasm, b"hello").unwrap();
    for (component, needle) in [
        (&missing, "cannot read component"),
        (&not_wasm, "not a loadable"),
    ] {
        let out = alk_host().arg("run").arg(component).output().unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with("alk-host: error: ") && stderr.contains(needle),
            "{stderr}"
        );
    }
}

#[test]
fn the_cli_passes_env_args_and_dirs() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("note.txt"), "from the host").unwrap();
    let out = run_cli(
        "kv-tool",
        dir.path(),
        &["--env", "GREETING=hi there"],
        &["getenv", "GREETING"],
    );
    assert_eq!(text(&out.stdout), "hi there\n");
    let out = run_cli("kv-tool", dir.path(), &[], &["getenv", "HOME"]);
    assert_eq!(
        text(&out.stdout),
        "(unset)\n",
        "the host environment leaked"
    );
    let mount = format!("{}::/data", shared.display());
    let out = run_cli(
        "kv-tool",
        dir.path(),
        &["--dir", &mount],
        &["read", "/data/note.txt"],
    );
    assert_eq!(
        text(&out.stdout),
        "from the host\n",
        "{}",
        text(&out.stderr)
    );
    let out = run_cli("kv-tool", dir.path(), &[], &["read", "/data/note.txt"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a file was readable without --dir"
    );
}

#[test]
fn rust_log_traces_every_host_call_and_the_default_log_is_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let quiet = run_cli("hello", dir.path(), &[], &[]);
    assert!(quiet.status.success(), "{}", text(&quiet.stderr));
    assert_eq!(text(&quiet.stderr), "", "nothing is logged by default");
    let traced = alk_host()
        .env("RUST_LOG", "alk_host=trace")
        .arg("run")
        .arg(guest("hello"))
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(traced.status.success(), "{}", text(&traced.stderr));
    let log = text(&traced.stderr);
    for call in [
        "[static]bucket.open",
        "[method]bucket.get",
        "[method]bucket.set",
    ] {
        assert!(log.contains(call), "no trace of {call}:\n{log}");
    }
    assert!(
        !log.contains('\x1b'),
        "colours in a log that is not a terminal"
    );
}

#[test]
fn help_documents_every_flag() {
    let out = alk_host().args(["run", "--help"]).output().unwrap();
    let help = text(&out.stdout);
    for flag in [
        "--data-dir",
        "--env",
        "--dir",
        "--max-memory-mib",
        "--timeout",
        "[ARGS]",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

#[test]
fn compile_fills_the_cache_that_run_then_uses() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let out = alk_host()
        .arg("compile")
        .arg(guest("hello"))
        .arg("--cache-dir")
        .arg(&cache)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Compiled modules; wasmtime's cache also keeps usage statistics
    // (`.stats`) next to them, written by a background worker on a hit.
    let entries = |d: &std::path::Path| {
        walk(d)
            .iter()
            .filter(|p| p.extension().is_none_or(|e| e != "stats"))
            .count()
    };
    let after_compile = entries(&cache);
    assert!(after_compile > 0, "compile left the cache empty");
    // A run finds the entry: nothing new is compiled.
    let out = alk_host()
        .args(["run", "--cache-dir"])
        .arg(&cache)
        .arg(guest("hello"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(entries(&cache), after_compile);
    // Without a cache it still runs, and writes nothing there.
    let out = alk_host()
        .args(["run", "--no-cache"])
        .arg(guest("kv-tool"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--", "get", "b", "k"])
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout), "(absent)\n");
    assert_eq!(entries(&cache), after_compile);
}

fn relaxed_durability_keeps_the_contract(store: &Store) {
    for guest in ["kv-contract", "queue-contract", "stream-contract"] {
        let out = run_cli(guest, store, &["--durability", "relaxed"], &[]);
        assert!(out.status.success(), "{guest}: {}", text(&out.stdout));
    }
}

on_every_engine! {
    relaxed_durability_keeps_the_contract;
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}
