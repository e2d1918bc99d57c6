//! Job queues across processes and versions: a guest built against
//! `alk:store@0.1.0`, fair groups under four consumer processes, retries
//! and dead letters under `kill -9`, and the `localqueue.v1` → v4
//! migration checked with stock SQLite.

use std::collections::{HashMap, HashSet};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::common::*;

fn a_guest_built_against_0_1_0_runs_unchanged(d: &Store) {
    let out = run_cli("queue-v010", d, &[], &["fixture"]);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout).trim(), "v0.1.0 guest ok");
    // The new interface sees what the old guest left: nothing in flight.
    let out = run_cli("queue-tool", d, &[], &["inspect", "fixture", "1", "3"]);
    assert_eq!(text(&out.stdout), "none 1\nnone 2\nnone 3\n");
}

#[test]
fn a_guest_built_against_0_1_0_runs_on_a_v1_queue() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_cli("queue-v010", dir.path(), &["--new-queues", "v1"], &["old"]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    let seen = sqlite_schema("store", &dir.path().join("queue/old/localqueue.sqlite"));
    assert_eq!(
        seen["meta"],
        serde_json::json!([["format", "localqueue.v1"]])
    );
}

const BIG: usize = 10_000;
const SMALL_GROUPS: usize = 100;
const SMALL: usize = 10;
const CONSUMERS: usize = 4;
/// Claims each consumer makes: 1,600 in all, room for every small message
/// and the 300 big ones the fairness bound allows before the last of them.
/// The consumers stop by work done, not by time, so a slow machine gives
/// the same verdict.
const CLAIMS_EACH: usize = 400;

/// One group of 10,000 messages and 100 groups of 10, four consumer
/// processes claiming one message at a time: every small group is served
/// to the end before the big group has had a few hundred claims, and no
/// group ever has two messages in flight, across processes.
fn groups_are_served_in_turn_across_processes(d: &Store) {
    // The big group is sent first: it has the head start.
    let out = run_cli(
        "queue-tool",
        d,
        &[],
        &["send-group", "fair", "big", &BIG.to_string(), "big"],
    );
    assert!(out.status.success(), "{}", text(&out.stdout));
    for g in 0..SMALL_GROUPS {
        let group = format!("g{g}");
        let out = run_cli(
            "queue-tool",
            d,
            &[],
            &["send-group", "fair", &group, &SMALL.to_string(), &group],
        );
        assert!(out.status.success(), "{}", text(&out.stdout));
    }
    let consumers: Vec<Child> = (0..CONSUMERS)
        .map(|_| {
            spawn_guest(
                d,
                "queue-tool",
                &["fair", "fair", "60000", &CLAIMS_EACH.to_string(), "5000"],
            )
        })
        .collect();
    // (group, payload, claimed µs, ack µs)
    let mut claims: HashMap<String, (String, u128)> = HashMap::new();
    let mut spans: Vec<(String, String, u128, u128)> = Vec::new();
    for (i, child) in consumers.into_iter().enumerate() {
        let out = finish(child, &format!("consumer {i}"));
        for line in out.lines() {
            let parts: Vec<&str> = line.split(' ').collect();
            match parts.as_slice() {
                ["c", group, payload, at] => {
                    let old = claims.insert(
                        payload.to_string(),
                        (group.to_string(), at.parse().unwrap()),
                    );
                    assert!(old.is_none(), "{payload} claimed twice");
                }
                ["a", group, payload, at] => {
                    let claimed = claims[*payload].1;
                    spans.push((
                        group.to_string(),
                        payload.to_string(),
                        claimed,
                        at.parse().unwrap(),
                    ));
                }
                _ => panic!("unexpected line {line:?}"),
            }
        }
    }
    // Every small message was served.
    let small: Vec<&(String, String, u128, u128)> = spans.iter().filter(|s| s.0 != "big").collect();
    assert_eq!(small.len(), SMALL_GROUPS * SMALL, "small messages served");
    let last_small = small.iter().map(|s| s.2).max().unwrap();
    let big_before = spans
        .iter()
        .filter(|s| s.0 == "big" && s.2 < last_small)
        .count();
    eprintln!(
        "{} claims in all; the big group had {big_before} before the last small message",
        spans.len()
    );
    assert!(
        big_before <= 300,
        "the big group had {big_before} claims first"
    );
    // Never two of one group in flight: per group, each claim returned
    // after the previous delivery's ack began. In send order, too.
    let mut by_group: HashMap<&str, Vec<(u128, u128, usize)>> = HashMap::new();
    for (group, payload, claimed, acked) in &spans {
        let n: usize = payload.rsplit_once('-').unwrap().1.parse().unwrap();
        by_group
            .entry(group)
            .or_default()
            .push((*claimed, *acked, n));
    }
    for (group, mut list) in by_group {
        list.sort();
        for pair in list.windows(2) {
            assert!(
                pair[1].0 >= pair[0].1,
                "group {group}: a claim at {} while the one claimed at {} was in flight until {}",
                pair[1].0,
                pair[0].0,
                pair[0].1
            );
            assert!(pair[1].2 > pair[0].2, "group {group}: out of send order");
        }
    }
}

const JOBS: usize = 300;
const MAX_ATTEMPTS: u32 = 3;

/// Consumers that fail some deliveries on purpose are killed with `kill -9`
/// again and again; afterwards every message was acked once or is in the
/// dead letters with its attempt count at the limit, and none is lost.
fn retries_and_dead_letters_survive_killed_consumers(d: &Store) {
    let out = run_cli(
        "queue-tool",
        d,
        &[],
        &[
            "send-jobs",
            "crash",
            &JOBS.to_string(),
            "job",
            &MAX_ATTEMPTS.to_string(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stdout));
    let spawn = || {
        spawn_guest(
            d,
            "queue-tool",
            &["jobs", "crash", "5", "300", "60000", "4"],
        )
    };
    let mut outputs = Vec::new();
    let mut live: Vec<Child> = (0..3).map(|_| spawn()).collect();
    let start = Instant::now();
    let mut round = 0u64;
    while start.elapsed() < Duration::from_secs(6) {
        std::thread::sleep(Duration::from_millis(150 + (round * 37) % 200));
        // kill -9 one consumer, chosen in turn, and start another.
        let victim = (round as usize) % live.len();
        let mut child = live.remove(victim);
        child.kill().unwrap();
        outputs.push(text(&child.wait_with_output().unwrap().stdout));
        live.push(spawn());
        round += 1;
    }
    for mut child in live {
        child.kill().unwrap();
        outputs.push(text(&child.wait_with_output().unwrap().stdout));
    }
    // A last consumer, never killed, finishes the work: deliveries the
    // killed ones held come back when their 300 ms run out.
    let last = spawn_guest(d, "queue-tool", &["jobs", "crash", "5", "300", "2000", "4"]);
    outputs.push(finish(last, "last consumer"));

    let mut acked: HashMap<String, usize> = HashMap::new();
    for out in &outputs {
        for line in out.lines() {
            if let Some(p) = line.strip_prefix("acked ") {
                *acked.entry(p.to_string()).or_default() += 1;
            }
        }
    }
    let out = run_cli(
        "queue-tool",
        d,
        &[],
        &["inspect", "crash", "1", &JOBS.to_string()],
    );
    let mut dead = HashSet::new();
    for line in text(&out.stdout).lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts.as_slice() {
            ["none", _] => {}
            ["job", _, "dead", attempt, max, payload] => {
                assert_eq!(*max, MAX_ATTEMPTS.to_string());
                assert_eq!(
                    *attempt,
                    MAX_ATTEMPTS.to_string(),
                    "{payload} died after {attempt}"
                );
                dead.insert(payload.to_string());
            }
            _ => panic!("left in the queue: {line}"),
        }
    }
    for i in 0..JOBS {
        let p = format!("job-{i}");
        let n = acked.get(&p).copied().unwrap_or(0);
        assert!(n <= 1, "{p} acked {n} times");
        assert!(!(n == 1 && dead.contains(&p)), "{p} acked and dead");
    }
    eprintln!(
        "{round} kills; {} acked as seen by the consumers, {} dead",
        acked.len(),
        dead.len()
    );
    assert!(
        !dead.is_empty(),
        "the failure rule never used up a message's attempts"
    );
    if let Some(dir) = d.path() {
        let seen = sqlite_schema("store", &dir.join("queue/crash/localqueue.sqlite"));
        assert_eq!(seen["integrity"], "ok");
    }
}

on_every_engine! {
    a_guest_built_against_0_1_0_runs_unchanged;
    groups_are_served_in_turn_across_processes;
    retries_and_dead_letters_survive_killed_consumers;
}

fn migrate(dir: &std::path::Path, name: &str) -> std::process::Output {
    alk_host()
        .args(["migrate", "queue", name, "--data-dir"])
        .arg(dir)
        .output()
        .unwrap()
}

/// A v1 queue with due, delayed-by-visibility and in-flight messages is
/// migrated by `alk-host migrate` to the newest format: stock SQLite then
/// reads exactly the v4 document's schema, and every message, attempt and
/// receipt is kept.
#[test]
fn a_v1_queue_migrates_to_v4_keeping_every_message() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = ["--new-queues", "v1"];
    let out = run_cli("queue-tool", dir.path(), &v1, &["produce", "old", "6", "m"]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    // Two in flight for a long time, one received and given back.
    let out = run_cli(
        "queue-tool",
        dir.path(),
        &v1,
        &["receive", "old", "2", "600000"],
    );
    let held: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(held.len(), 2);
    let out = run_cli(
        "queue-tool",
        dir.path(),
        &v1,
        &["receive", "old", "1", "600000"],
    );
    let receipt = text(&out.stdout).split(' ').next().unwrap().to_string();
    let out = run_cli("queue-tool", dir.path(), &v1, &["nack", "old", &receipt]);
    assert!(out.status.success());
    // Job options on the v1 queue name the migration.
    let out = run_cli(
        "queue-tool",
        dir.path(),
        &[],
        &["send-jobs", "old", "1", "x", "3"],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stdout).contains("alk-host migrate queue old"),
        "{}",
        text(&out.stdout)
    );

    let out = migrate(dir.path(), "old");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "queue old: migrated from localqueue.v1 to localqueue.v4"
    );
    let out = migrate(dir.path(), "old");
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("already localqueue.v4"));

    let file = dir.path().join("queue/old/localqueue.sqlite");
    let seen = sqlite_schema("store", &file);
    let expected = sqlite_schema("ddl", &root().join("docs/formats/localqueue.v4.md"));
    assert_eq!(seen["integrity"], "ok");
    assert_eq!(seen["tables"], expected["tables"]);
    assert_eq!(seen["indexes"], expected["indexes"]);
    assert_eq!(seen["meta"], expected["meta"]);
    assert_eq!(
        seen["meta"],
        serde_json::json!([["format", "localqueue.v4"]])
    );

    // In flight: attempt 1, still in flight; the given-back one waits with
    // attempt 1; the rest wait with attempt 0.
    let out = run_cli("queue-tool", dir.path(), &[], &["inspect", "old", "1", "7"]);
    assert_eq!(
        text(&out.stdout),
        "job 1 in-flight 1 - m-0\njob 2 in-flight 1 - m-1\njob 3 waiting 1 - m-2\n\
         job 4 waiting 0 - m-3\njob 5 waiting 0 - m-4\njob 6 waiting 0 - m-5\nnone 7\n"
    );
    // A receipt from before the migration still acks.
    let out = run_cli("queue-tool", dir.path(), &[], &["ack", "old", &held[0]]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    let out = run_cli("queue-tool", dir.path(), &[], &["inspect", "old", "1", "1"]);
    assert_eq!(text(&out.stdout), "none 1\n");
    // New ids continue above the old ones; the order of the rest is kept.
    let out = run_cli("queue-tool", dir.path(), &[], &["send", "old", "new"]);
    assert_eq!(text(&out.stdout).trim(), "7");
    let out = run_cli(
        "queue-tool",
        dir.path(),
        &[],
        &["receive", "old", "10", "600000"],
    );
    let order: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(order, ["m-2", "m-3", "m-4", "m-5", "new"]);
}

/// The migration refuses to run while another process has the queue open,
/// and changes nothing.
#[test]
fn migration_is_refused_while_another_process_has_the_queue_open() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = ["--new-queues", "v1"];
    let out = run_cli(
        "queue-tool",
        dir.path(),
        &v1,
        &["produce", "busy", "3", "m"],
    );
    assert!(out.status.success());
    let file = dir.path().join("queue/busy/localqueue.sqlite");
    // A consumer holds one message and keeps the store open.
    let mut holder = alk_host()
        .arg("run")
        .arg(guest("queue-tool"))
        .args(["--data-dir"])
        .arg(dir.path())
        .args(["--new-queues", "v1", "--", "hold", "busy", "1", "600000"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(holder.stdout.take().unwrap()));
    for line in lines.by_ref() {
        if line.unwrap().starts_with("holding") {
            break;
        }
    }
    let out = migrate(dir.path(), "busy");
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(err.contains("stop every process using the store"), "{err}");
    assert!(!err.contains('\n') || err.lines().count() == 1, "{err}");
    let seen = sqlite_schema("store", &file);
    assert_eq!(
        seen["meta"],
        serde_json::json!([["format", "localqueue.v1"]])
    );
    // Once nobody has it open, it goes through.
    let out = migrate(dir.path(), "busy");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // A queue that does not exist is an error, and nothing is created.
    let out = migrate(dir.path(), "missing");
    assert_eq!(out.status.code(), Some(2));
    assert!(!dir.path().join("queue/missing").exists());
}

/// `alk-host migrate` killed with `kill -9` at several points of a long
/// migration (100,000 messages): every time, the file is a valid store of
/// v1 or of v4 — each exactly as its document says — with every message;
/// the migration then completes.
#[test]
fn a_migration_killed_at_any_point_leaves_a_valid_store() {
    const MESSAGES: u64 = 100_000;
    let dir = tempfile::tempdir().unwrap();
    let out = run_cli(
        "queue-tool",
        dir.path(),
        &["--new-queues", "v1", "--durability", "relaxed"],
        &["fill", "big", &MESSAGES.to_string(), "m"],
    );
    assert!(out.status.success(), "{}", text(&out.stdout));
    let file = dir.path().join("queue/big/localqueue.sqlite");
    let docs = [
        (
            "localqueue.v1",
            sqlite_schema("ddl", &root().join("docs/formats/localqueue.v1.md")),
        ),
        (
            "localqueue.v4",
            sqlite_schema("ddl", &root().join("docs/formats/localqueue.v4.md")),
        ),
    ];
    let check = |when: &str| -> &'static str {
        let seen = sqlite_schema("store", &file);
        assert_eq!(seen["integrity"], "ok", "{when}");
        assert_eq!(seen["rows"]["messages"], MESSAGES, "{when}");
        let marker = seen["meta"][0][1].as_str().unwrap().to_string();
        let (name, doc) = docs
            .iter()
            .find(|(name, _)| *name == marker)
            .unwrap_or_else(|| panic!("{when}: marker {marker}"));
        assert_eq!(seen["tables"], doc["tables"], "{when}: {name}");
        assert_eq!(seen["indexes"], doc["indexes"], "{when}: {name}");
        name
    };
    let mut killed_before_the_end = 0;
    for delay in [1u64, 10, 40, 120, 300, 700] {
        let mut child = alk_host()
            .args(["migrate", "queue", "big", "--data-dir"])
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        let found = check(&format!("killed after {delay} ms"));
        if found == "localqueue.v1" {
            killed_before_the_end += 1;
        } else {
            eprintln!("the migration finished within {delay} ms ({status})");
            break;
        }
    }
    eprintln!("{killed_before_the_end} migrations killed before they committed");
    let out = migrate(dir.path(), "big");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(check("after the last migration"), "localqueue.v4");
    // The queue works: the oldest message comes first.
    let out = run_cli(
        "queue-tool",
        dir.path(),
        &[],
        &["receive", "big", "1", "60000"],
    );
    assert!(
        text(&out.stdout).trim_end().ends_with(" 1 m-0"),
        "{}",
        text(&out.stdout)
    );
}
