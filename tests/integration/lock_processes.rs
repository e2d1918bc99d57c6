//! Locks shared by several `alk-host` processes: mutual exclusion with
//! fencing tokens, and takeover after the holder is killed.

use std::io::{BufRead, BufReader};
use std::process::Child;

use crate::common::*;

fn spawn(dir: &Store, args: &[&str]) -> Child {
    spawn_guest(dir, "lock-tool", args)
}

const PROCESSES: usize = 4;
const ROUNDS: usize = 40;

fn critical_sections_never_overlap_and_tokens_follow_acquisition_order(d: &Store) {
    let children: Vec<Child> = (0..PROCESSES)
        .map(|p| {
            spawn(
                d,
                &[
                    "contend",
                    "the-lock",
                    &format!("p{p}"),
                    &ROUNDS.to_string(),
                    // A TTL far above a section's length: exclusion must
                    // come from the lock, not lapse under a loaded machine.
                    "10000",
                    "2",
                ],
            )
        })
        .collect();
    for (p, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "p{p}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert_eq!(
            text(&out.stdout)
                .lines()
                .filter(|l| l.starts_with("section "))
                .count(),
            ROUNDS
        );
    }
    // The shared record, written inside each critical section, keyed by token.
    let out = run_cli("kv-tool", d, &[], &["scan", "sections", ""]);
    let mut sections: Vec<(u64, String, u128, u128)> = text(&out.stdout)
        .lines()
        .map(|l| {
            let (token, rest) = l.split_once('=').unwrap();
            let mut f = rest.split(' ');
            let owner = f.next().unwrap().to_string();
            let start: u128 = f.next().unwrap().parse().unwrap();
            let end: u128 = f.next().unwrap().parse().unwrap();
            (token.parse().unwrap(), owner, start, end)
        })
        .collect();
    sections.sort();
    assert_eq!(sections.len(), PROCESSES * ROUNDS);
    // Every acquisition got the next token: 1, 2, 3, … with none missing.
    for (i, s) in sections.iter().enumerate() {
        assert_eq!(s.0, i as u64 + 1, "token sequence broken at {s:?}");
    }
    // In token order, each section ends before the next one starts: no
    // overlap, and token order is acquisition order.
    for pair in sections.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(a.3 <= b.2, "sections overlap: {a:?} and {b:?}");
    }
}

fn a_killed_holders_lock_is_taken_over_after_its_deadline_with_a_larger_token(d: &Store) {
    const TTL: u64 = 1_000;
    let mut holder = spawn(d, &["hold", "job-7", "doomed", &TTL.to_string()]);
    let line = BufReader::new(holder.stdout.take().unwrap())
        .lines()
        .next()
        .unwrap()
        .unwrap();
    let mut f = line.strip_prefix("held ").expect(&line).split(' ');
    let held_token: u64 = f.next().unwrap().parse().unwrap();
    let deadline: u128 = f.next().unwrap().parse().unwrap();
    holder.kill().unwrap();
    holder.wait().unwrap();

    let out = run_cli(
        "lock-tool",
        d,
        &[],
        &["acquire", "job-7", "successor", "60000", "30000"],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let mut f = stdout
        .trim()
        .strip_prefix("acquired ")
        .expect(&stdout)
        .split(' ');
    let token: u64 = f.next().unwrap().parse().unwrap();
    let acquired_at: u128 = f.next().unwrap().parse().unwrap();
    assert!(token > held_token, "token {token} after {held_token}");
    // Exclusion held until the dead holder's deadline …
    assert!(
        acquired_at >= deadline,
        "taken at {acquired_at}, before the deadline {deadline}"
    );
    // … and the lock did not stay stuck after it (a generous bound: the
    // successor polls every 5 ms).
    assert!(
        acquired_at < deadline + 5_000,
        "taken at {acquired_at}, deadline was {deadline}"
    );
    let Some(dir) = d.path() else { return };
    let seen = sqlite_schema("store", &dir.join("lock/locallock.sqlite"));
    assert_eq!(seen["integrity"], "ok");
}

on_every_engine! {
    critical_sections_never_overlap_and_tokens_follow_acquisition_order;
    a_killed_holders_lock_is_taken_over_after_its_deadline_with_a_larger_token;
}
