//! Queues shared by several `alk-host` processes: exactly-once claims under
//! load, and redelivery after a consumer is killed.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::common::*;

const PRODUCERS: usize = 2;
const CONSUMERS: usize = 2;
const PER_PRODUCER: usize = 5_000;

fn messages_cross_processes_exactly_once_with_none_lost(d: &Store) {
    let out = run_cli("queue-tool", d, &[], &["purge", "work"]);
    assert!(out.status.success(), "{}", text(&out.stdout));

    let consumers: Vec<Child> = (0..CONSUMERS)
        .map(|_| spawn_guest(d, "queue-tool", &["consume", "work", "10", "30000"]))
        .collect();
    let producers: Vec<Child> = (0..PRODUCERS)
        .map(|p| {
            spawn_guest(
                d,
                "queue-tool",
                &[
                    "produce",
                    "work",
                    &PER_PRODUCER.to_string(),
                    &format!("p{p}"),
                ],
            )
        })
        .collect();
    for (p, child) in producers.into_iter().enumerate() {
        let out = finish(child, &format!("producer {p}"));
        assert_eq!(out.trim(), format!("sent {PER_PRODUCER}"));
    }
    // Sent after every producer finished, so FIFO puts them behind all work.
    for _ in 0..CONSUMERS {
        let out = run_cli("queue-tool", d, &[], &["send", "work", "stop"]);
        assert!(out.status.success());
    }

    let mut delivered: HashMap<String, Vec<(usize, u32)>> = HashMap::new();
    let mut acked: HashMap<String, usize> = HashMap::new();
    let mut per_consumer = Vec::new();
    for (c, child) in consumers.into_iter().enumerate() {
        let out = finish(child, &format!("consumer {c}"));
        let mut n = 0;
        for line in out.lines() {
            if let Some(rest) = line.strip_prefix("got ") {
                let (payload, attempt) = rest.rsplit_once(' ').unwrap();
                delivered
                    .entry(payload.to_string())
                    .or_default()
                    .push((c, attempt.parse().unwrap()));
                n += 1;
            } else if let Some(payload) = line.strip_prefix("acked ") {
                *acked.entry(payload.to_string()).or_default() += 1;
            }
        }
        per_consumer.push(n);
    }

    let total = PRODUCERS * PER_PRODUCER;
    for p in 0..PRODUCERS {
        for i in 0..PER_PRODUCER {
            let payload = format!("p{p}-{i}");
            let got = delivered
                .get(&payload)
                .unwrap_or_else(|| panic!("{payload} was never delivered"));
            // 30 s visibility and no crashes: one delivery, to one consumer.
            assert_eq!(got.len(), 1, "{payload} delivered {got:?}");
            assert_eq!(got[0].1, 1, "{payload} attempt {}", got[0].1);
            assert_eq!(
                acked.get(&payload),
                Some(&1),
                "{payload} acked {:?} times",
                acked.get(&payload)
            );
        }
    }
    assert_eq!(delivered.len(), total, "unexpected payloads delivered");
    assert_eq!(per_consumer.iter().sum::<usize>(), total);
    // Nothing left behind.
    let out = run_cli("queue-tool", d, &[], &["receive", "work", "1000", "1"]);
    assert_eq!(text(&out.stdout), "", "messages left in the queue");
}

fn a_killed_consumers_messages_are_redelivered_and_nothing_is_lost(d: &Store) {
    const SENT: usize = 60;
    const HELD: usize = 20;
    let out = run_cli(
        "queue-tool",
        d,
        &[],
        &["produce", "jobs", &SENT.to_string(), "job"],
    );
    assert!(out.status.success(), "{}", text(&out.stdout));

    // A consumer takes 20 messages with a 1.5 s visibility and hangs.
    let mut holder = spawn_guest(
        d,
        "queue-tool",
        &["hold", "jobs", &HELD.to_string(), "1500"],
    );
    let mut held = Vec::new();
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("held ") {
            held.push(rest.rsplit_once(' ').unwrap().0.to_string());
        }
        if line.starts_with("holding") {
            break;
        }
    }
    assert_eq!(held.len(), HELD);
    let killed_at = Instant::now();
    // kill -9: no cleanup of any kind runs in the holder.
    holder.kill().unwrap();
    holder.wait().unwrap();

    // Others drain the queue: the held messages come back once their
    // visibility runs out, with attempt 2. The drainers keep going for 2.5 s
    // (past the 1.5 s visibility), then stop at the first empty receive.
    let drainers: Vec<Child> = (0..2)
        .map(|_| spawn_guest(d, "queue-tool", &["drain", "jobs", "2500", "20000"]))
        .collect();
    let mut seen: HashMap<String, Vec<u32>> = HashMap::new();
    for (i, child) in drainers.into_iter().enumerate() {
        let out = finish(child, &format!("drainer {i}"));
        for line in out.lines() {
            if let Some(rest) = line.strip_prefix("got ") {
                let (payload, attempt) = rest.rsplit_once(' ').unwrap();
                seen.entry(payload.to_string())
                    .or_default()
                    .push(attempt.parse().unwrap());
            }
        }
    }
    assert!(
        killed_at.elapsed() >= Duration::from_millis(1400),
        "drained before visibility could expire"
    );
    for i in 0..SENT {
        let payload = format!("job-{i}");
        let attempts = seen
            .get(&payload)
            .unwrap_or_else(|| panic!("{payload} lost"));
        assert_eq!(
            attempts.len(),
            1,
            "{payload} delivered {attempts:?} after the crash"
        );
        let want = if held.contains(&payload) { 2 } else { 1 };
        assert_eq!(attempts[0], want, "{payload}");
    }
    let out = run_cli("queue-tool", d, &[], &["receive", "jobs", "1000", "1"]);
    assert_eq!(text(&out.stdout), "", "messages left in the queue");
    if let Some(dir) = d.path() {
        let seen = sqlite_schema("store", &dir.join("queue/jobs/localqueue.sqlite"));
        assert_eq!(seen["integrity"], "ok");
    }
}

on_every_engine! {
    messages_cross_processes_exactly_once_with_none_lost;
    a_killed_consumers_messages_are_redelivered_and_nothing_is_lost;
}
