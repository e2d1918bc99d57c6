//! `alk-host run --instances N`: N instances of one component at once in
//! one host process, each told its number; they share the stores, and one
//! that fails leaves the others running.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::common::*;

/// The lines of `out`, sorted (instances print in any order).
fn sorted_lines(out: &[u8]) -> Vec<String> {
    let mut lines: Vec<String> = text(out).lines().map(str::to_string).collect();
    lines.sort();
    lines
}

fn instances_are_numbered_and_counted(store: &Store) {
    let out = run_cli(
        "kv-tool",
        store,
        &["--instances", "3", "--env", "ALK_INSTANCE=9"],
        &["getenv", "ALK_INSTANCE"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The host's numbers replace one given with --env.
    assert_eq!(sorted_lines(&out.stdout), ["0", "1", "2"]);
    let out = run_cli(
        "kv-tool",
        store,
        &["--instances", "3"],
        &["getenv", "ALK_INSTANCES"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(sorted_lines(&out.stdout), ["3", "3", "3"]);
    // Without the flag the guest's environment is only what --env gives.
    let out = run_cli("kv-tool", store, &[], &["getenv", "ALK_INSTANCE"]);
    assert_eq!(text(&out.stdout).trim(), "(unset)");
}

fn instances_wait_at_once_and_share_the_stores(store: &Store) {
    let mut host = alk_host()
        .arg("run")
        .args(["--instances", "3"])
        .arg(guest("wake-tool"))
        .args(store.store_args())
        .args(["--", "receive-wait", "jobs", "60000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map(Killed)
        .expect("spawn alk-host");
    let mut lines = BufReader::new(host.0.stdout.take().unwrap()).lines();
    // All three wait before anything is sent: they run at once.
    for _ in 0..3 {
        assert_eq!(lines.next().unwrap().unwrap(), "waiting");
    }
    for m in ["m0", "m1", "m2"] {
        let out = run_cli("queue-tool", store, &[], &["send", "jobs", m]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let mut got: Vec<String> = lines.map(|l| l.unwrap()).collect();
    got.sort();
    assert_eq!(got, ["got m0 1", "got m1 1", "got m2 1"]);
    assert!(host.0.wait().unwrap().success());
}

on_every_engine! {
    instances_are_numbered_and_counted;
    instances_wait_at_once_and_share_the_stores;
}

#[test]
fn an_instance_that_traps_leaves_the_others_running() {
    let store = Store::dir();
    let out = run_cli(
        "misbehave",
        &store,
        &["--instances", "3"],
        &["trap-as-instance", "1"],
    );
    // The status of the first instance that did not succeed: a trap.
    assert_eq!(out.status.code(), Some(134), "{}", text(&out.stderr));
    assert_eq!(sorted_lines(&out.stdout), ["done", "done"]);
    let err = text(&out.stderr);
    assert!(
        err.contains("alk-host: instance 1: guest trapped:"),
        "{err}"
    );
    assert!(
        !err.contains("instance 0:") && !err.contains("instance 2:"),
        "{err}"
    );
}

#[test]
fn instances_that_compute_forever_do_not_hold_up_the_others() {
    // Two instances spin without calling the host (as many as the host's
    // runtime has threads); the two others write and finish.
    let store = Store::dir();
    let mut host = Killed(
        alk_host()
            .arg("run")
            .args(["--instances", "4"])
            .arg(guest("misbehave"))
            .args(store.store_args())
            .args(["--", "loop-below", "2"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn alk-host"),
    );
    let stdout = host.0.stdout.take().unwrap();
    // Ends the run if the others never finish, so the test fails rather
    // than hangs; told to stand down once they have.
    let pid = host.0.id();
    let (finished, watch) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let limit = std::time::Duration::from_secs(300);
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = watch.recv_timeout(limit) {
            let _ = std::process::Command::new("kill")
                .arg(pid.to_string())
                .status();
        }
    });
    let mut lines = BufReader::new(stdout).lines();
    for _ in 0..2 {
        assert_eq!(lines.next().unwrap().unwrap(), "done");
    }
    drop(finished);
    drop(host);
    let out = run_cli("kv-tool", &store, &[], &["scan", "misbehave", "instance-"]);
    let keys = text(&out.stdout);
    assert!(
        keys.contains("instance-2") && keys.contains("instance-3"),
        "{keys}"
    );
}

#[test]
fn a_component_no_instance_can_run_is_refused_once() {
    let store = Store::dir();
    let out = run_cli("no-export", &store, &["--instances", "3"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("alk-host: error: "), "{err}");
    assert!(!err.contains("instance"), "{err}");
}

#[test]
fn instance_counts_out_of_range_are_refused() {
    for n in ["0", "257", "many"] {
        let store = Store::dir();
        let out = run_cli("kv-tool", &store, &["--instances", n], &["getenv", "X"]);
        assert_eq!(out.status.code(), Some(2), "--instances {n}");
        let err = text(&out.stderr);
        assert!(err.contains("--instances"), "{err}");
        assert!(
            out.stdout.is_empty(),
            "--instances {n}: {}",
            text(&out.stdout)
        );
    }
}
