//! Streams shared by several `alk-host` processes: concurrent publishers
//! and consumers, and a consumer that is killed and resumes.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::Child;

use crate::common::*;

fn spawn(dir: &Store, args: &[&str]) -> Child {
    spawn_guest(dir, "stream-tool", args)
}

/// `(offset, payload)` of every `ev` line.
fn events(stdout: &str) -> Vec<(u64, String)> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ev "))
        .map(|rest| {
            let (offset, payload) = rest.split_once(' ').unwrap();
            (offset.parse().unwrap(), payload.to_string())
        })
        .collect()
}

const PUBLISHERS: usize = 4;
const PER_PUBLISHER: usize = 2_500;

fn every_consumer_sees_every_event_once_in_offset_order(d: &Store) {
    let total = (PUBLISHERS * PER_PUBLISHER) as u64;
    let until = total.to_string();
    let consumers: Vec<Child> = ["c1", "c2"]
        .iter()
        .map(|c| spawn(d, &["follow", "s", c, &until, "120000"]))
        .collect();
    let publishers: Vec<Child> = (0..PUBLISHERS)
        .map(|p| {
            spawn(
                d,
                &["publish", "s", &PER_PUBLISHER.to_string(), &format!("p{p}")],
            )
        })
        .collect();
    for (p, child) in publishers.into_iter().enumerate() {
        assert_eq!(
            finish(child, &format!("publisher {p}")).trim(),
            format!("published {PER_PUBLISHER}")
        );
    }
    for (c, child) in consumers.into_iter().enumerate() {
        let seen = events(&finish(child, &format!("consumer {c}")));
        assert_eq!(
            seen.len() as u64,
            total,
            "consumer {c} saw {} events",
            seen.len()
        );
        // Offsets 1..=total, each once, strictly increasing.
        for (i, (offset, _)) in seen.iter().enumerate() {
            assert_eq!(*offset, i as u64 + 1, "consumer {c}: event #{i}");
        }
        // Each publisher's events appear in its own order.
        let mut next: HashMap<&str, usize> = HashMap::new();
        for (offset, payload) in &seen {
            let (publisher, i) = payload.rsplit_once('-').unwrap();
            let want = next.entry(publisher).or_insert(0);
            assert_eq!(
                i.parse::<usize>().unwrap(),
                *want,
                "consumer {c}: {payload} at {offset}"
            );
            *want += 1;
        }
        assert!(next.values().all(|n| *n == PER_PUBLISHER), "{next:?}");
    }
}

fn a_killed_consumer_resumes_from_its_saved_offset_without_skipping(d: &Store) {
    const TOTAL: u64 = 2_000;
    let out = finish(
        spawn(d, &["publish", "s", &TOTAL.to_string(), "e"]),
        "publisher",
    );
    assert_eq!(out.trim(), format!("published {TOTAL}"));

    // A slow consumer (50 ms between batches of 100) is killed mid-stream.
    let mut first = spawn(d, &["follow", "s", "c", &TOTAL.to_string(), "60000", "50"]);
    let mut lines = BufReader::new(first.stdout.take().unwrap()).lines();
    let mut seen_before = 0;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line.starts_with("ev ") {
            seen_before += 1;
        }
        if line.starts_with("saved ") && seen_before >= 500 {
            break;
        }
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let saved: u64 = text(&run_cli("stream-tool", d, &[], &["get-offset", "s", "c"]).stdout)
        .trim()
        .parse()
        .unwrap();
    assert!((500..TOTAL).contains(&saved), "saved {saved}");

    let second = finish(
        spawn(d, &["follow", "s", "c", &TOTAL.to_string(), "60000"]),
        "resumed consumer",
    );
    let resumed: Vec<u64> = events(&second).into_iter().map(|(o, _)| o).collect();
    // It starts right after its saved offset and reaches the end, no gaps.
    assert_eq!(resumed.first(), Some(&(saved + 1)));
    let want: Vec<u64> = (saved + 1..=TOTAL).collect();
    assert_eq!(resumed, want);
    assert_eq!(
        second.lines().last(),
        Some(format!("done {TOTAL}").as_str())
    );
    let Some(dir) = d.path() else { return };
    let seen = sqlite_schema("store", &dir.join("stream/localstream.sqlite"));
    assert_eq!(seen["integrity"], "ok");
}

on_every_engine! {
    every_consumer_sees_every_event_once_in_offset_order;
    a_killed_consumer_resumes_from_its_saved_offset_without_skipping;
}
