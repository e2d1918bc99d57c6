//! `alk-host run --scheduling`: the kernel policy the host's threads run
//! under, read from `/proc` while a guest waits.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::common::*;

/// The scheduling policy of every thread of process `pid` (field 41 of
/// `/proc/PID/task/TID/stat`: 0 normal, 3 batch).
fn policies(pid: u32) -> Vec<u32> {
    let mut all = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let stat = std::fs::read_to_string(task.unwrap().path().join("stat")).unwrap();
        // The fields after the command name (in parentheses) start at field 3.
        let after = &stat[stat.rfind(')').unwrap() + 1..];
        let fields: Vec<&str> = after.split_whitespace().collect();
        all.push(fields[41 - 3].parse().unwrap());
    }
    all
}

/// This process's nice value (field 19 of `/proc/self/stat`); the host
/// inherits it.
fn nice() -> i32 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 1..];
    after
        .split_whitespace()
        .nth(19 - 3)
        .unwrap()
        .parse()
        .unwrap()
}

/// The policies of a host waiting in a guest's call, run with `flags`.
fn policies_of_a_waiting_host(flags: &[&str]) -> Vec<u32> {
    let store = Store::dir();
    let mut child = alk_host()
        .arg("run")
        .arg(guest("wake-tool"))
        .args(store.store_args())
        .args(flags)
        .args(["--", "receive-wait", "jobs", "60000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn alk-host");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "waiting");
    let seen = policies(child.id());
    let out = run_cli("queue-tool", &store, &[], &["send", "jobs", "hello"]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert_eq!(lines.next().unwrap().unwrap(), "got hello 1");
    assert!(child.wait().unwrap().success());
    seen
}

#[test]
fn run_puts_every_thread_under_the_batch_policy_unless_told_normal() {
    let batch = policies_of_a_waiting_host(&[]);
    assert!(batch.len() > 1, "{batch:?}");
    // A host started at another nice value keeps the normal policy.
    let expected = if nice() == 0 { 3 } else { 0 };
    assert!(batch.iter().all(|p| *p == expected), "default: {batch:?}");
    let normal = policies_of_a_waiting_host(&["--scheduling", "normal"]);
    assert!(
        normal.iter().all(|p| *p == 0),
        "--scheduling normal: {normal:?}"
    );
}
