//! The database server goes away in the middle of a multi-process queue run
//! and comes back: the hosts report typed errors meanwhile and carry on
//! without being restarted; nothing acknowledged is lost and nothing is
//! delivered twice inside its visibility window.

use std::collections::HashMap;
use std::process::Child;
use std::time::Duration;

use crate::common::*;

const SENT: usize = 3_000;
const WORKERS: usize = 3;
/// Longer than the outage: a message claimed just before it is not handed
/// out again while its first worker still holds it.
const VISIBILITY_MS: u64 = 6_000;

#[test]
fn a_server_restart_mid_run_loses_nothing_and_the_hosts_carry_on() {
    // A server of its own: this test stops it.
    let cluster = alk_pg_cluster::Cluster::start().expect("start a throwaway postgres");
    let store = Store::Postgres(format!("{}?schema=fault", cluster.url()));
    let out = run_cli(
        "queue-tool",
        &store,
        &[],
        &["produce", "jobs", &SENT.to_string(), "job"],
    );
    assert!(out.status.success(), "{}", text(&out.stdout));

    let workers: Vec<Child> = (0..WORKERS)
        .map(|_| {
            spawn_guest(
                &store,
                "queue-tool",
                // Idle for longer than a visibility timeout: what a lost
                // reply left claimed comes back before the workers stop.
                &["work", "jobs", "5", &VISIBILITY_MS.to_string(), "9000"],
            )
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    cluster.stop().expect("stop the server");
    std::thread::sleep(Duration::from_millis(2_000));
    cluster.restart().expect("start the server again");

    let mut deliveries: HashMap<String, Vec<u32>> = HashMap::new();
    let mut acked: HashMap<String, usize> = HashMap::new();
    let mut errors: HashMap<String, usize> = HashMap::new();
    let mut stale = Vec::new();
    for (w, child) in workers.into_iter().enumerate() {
        let out = finish(child, &format!("worker {w}"));
        assert!(
            out.lines().any(|l| l.starts_with("done ")),
            "worker {w} did not finish"
        );
        for line in out.lines() {
            if let Some(rest) = line.strip_prefix("got ") {
                let (payload, attempt) = rest.rsplit_once(' ').unwrap();
                deliveries
                    .entry(payload.to_string())
                    .or_default()
                    .push(attempt.parse().unwrap());
            } else if let Some(payload) = line.strip_prefix("acked ") {
                *acked.entry(payload.to_string()).or_default() += 1;
            } else if let Some(payload) = line.strip_prefix("stale ") {
                stale.push(payload.to_string());
            } else if let Some(kind) = line.strip_prefix("error ") {
                *errors.entry(kind.to_string()).or_default() += 1;
            }
        }
    }
    // The outage was seen, as typed errors a guest can act on.
    assert!(!errors.is_empty(), "no worker saw the outage");
    for kind in errors.keys() {
        assert!(
            kind == "busy" || kind == "internal",
            "unexpected error kind {kind:?}: {errors:?}"
        );
    }
    // A worker acks what it got as soon as the server answers, well within
    // the visibility timeout: had the message been handed to another worker
    // meanwhile, that ack would have found its receipt stale.
    assert!(
        stale.is_empty(),
        "messages handed out again while their worker held them: {stale:?}"
    );
    for i in 0..SENT {
        let payload = format!("job-{i}");
        assert_eq!(
            acked.get(&payload),
            Some(&1),
            "{payload} acked {:?} times (delivered {:?})",
            acked.get(&payload),
            deliveries.get(&payload)
        );
        // Every delivery is a new attempt: a message is handed out again
        // only after its visibility ran out.
        let mut attempts = deliveries[&payload].clone();
        let n = attempts.len();
        attempts.sort_unstable();
        attempts.dedup();
        assert_eq!(
            attempts.len(),
            n,
            "{payload} delivered twice in one attempt"
        );
    }
    let out = run_cli("queue-tool", &store, &[], &["receive", "jobs", "1000", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "", "messages left in the queue");
    eprintln!(
        "outage: errors {errors:?}; redelivered {}",
        deliveries.values().filter(|d| d.len() > 1).count()
    );
}

/// A guest that computes forever inside a stream transaction shares its
/// host's one thread with the transaction's watchdog: it is made to yield,
/// so the transaction is rolled back on time and another host's publish
/// to the same stream goes through.
#[test]
fn a_guest_computing_inside_a_transaction_is_rolled_back_on_time() {
    use std::io::{BufRead, BufReader};
    let store = Store::postgres();
    let mut holder = spawn_guest(&store, "misbehave", &["publish-then-loop", "s"]);
    let line = BufReader::new(holder.stdout.take().unwrap())
        .lines()
        .next()
        .expect("the holder printed nothing")
        .unwrap();
    assert_eq!(line, "holding");
    // Waits for the held transaction; bounded, so a regression fails
    // instead of hanging.
    let out = run_cli(
        "stream-tool",
        &store,
        &["--timeout", "60"],
        &["publish", "s", "1", "after"],
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout).trim(), "published 1");
    // The held event was rolled back with its offset.
    let out = run_cli(
        "stream-tool",
        &store,
        &[],
        &["follow", "s", "c", "1", "10000"],
    );
    assert!(
        text(&out.stdout).contains("ev 1 after-0"),
        "{}",
        text(&out.stdout)
    );
}
