//! Queue limits across processes (`alk:store@0.1.4`): a rate shared by
//! four consumer processes, unique sends racing from eight, and groups of
//! three in flight under `kill -9` loops. Every verdict is drawn from what
//! the processes printed and what the store holds afterwards, never from
//! how fast the machine is.

use std::collections::{HashMap, HashSet};
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

use alk_store::Engine;
use alk_store::jobs::QueueLimits;
use alk_store::queue::Queue;
use alk_store::rate::RateLimit;

use crate::common::*;

/// Microseconds since the epoch, on the clock the guests print.
fn micros() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros()
}

fn millis() -> i64 {
    (micros() / 1_000) as i64
}

/// Runs `f` on queue `name` of the store's engine, from this process
/// (as an operator's tool would, beside the running hosts).
fn with_queue<T>(d: &Store, name: &str, f: impl AsyncFnOnce(&Queue) -> T) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let engine: Arc<dyn Engine> = match d {
            Store::Dir(dir) => Arc::new(alk_host::TursoEngine::new(
                dir.path(),
                alk_host::StoreOptions::default(),
            )),
            Store::Postgres(url) => Arc::new(
                alk_host::PostgresEngine::connect_url(url)
                    .await
                    .unwrap_or_else(|e| panic!("connect to the test server: {e}")),
            ),
        };
        let q = Queue::open(&*engine, name).await.unwrap();
        let out = f(&q).await;
        engine.flush().await;
        out
    })
}

/// Starts `alk-host run <guest> --durability <durability> -- <args…>` on
/// the store, with stdout piped.
fn spawn_at(d: &Store, durability: &str, args: &[&str]) -> Child {
    alk_host()
        .arg("run")
        .arg(guest("queue-tool"))
        .args(d.store_args())
        .args(["--durability", durability, "--"])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn alk-host")
}

const CAPACITY: u32 = 20;
const REFILL: u32 = 10;
const INTERVAL_MS: u64 = 250;
const RATE_RUN: Duration = Duration::from_secs(10);

fn a_rate_holds_across_four_consumer_processes(d: &Store) {
    rate_across_four_consumers(d, "full", RATE_RUN);
}

/// The same at relaxed durability (for 5 s): a commit that reaches the
/// disk later takes its tokens all the same.
fn a_rate_holds_across_four_relaxed_consumer_processes(d: &Store) {
    rate_across_four_consumers(d, "relaxed", Duration::from_secs(5));
}

/// Four consumer processes claim one message at a time from a queue
/// limited to 40 claims a second (10 per 250 ms, 20 at once) for ten
/// seconds: however the claims fall, their number never exceeds what the
/// bucket could have granted between the consumers' start and the last
/// claim — the capacity plus the refills of the whole intervals in
/// between.
fn rate_across_four_consumers(d: &Store, durability: &str, run: Duration) {
    let out = run_cli("queue-tool", d, &[], &["fill", "rated", "2000", "m"]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    with_queue(d, "rated", async |q| {
        q.set_limits(&QueueLimits {
            rate: Some(RateLimit {
                capacity: CAPACITY,
                refill: REFILL,
                interval_ms: INTERVAL_MS,
            }),
            ..QueueLimits::default()
        })
        .await
        .unwrap()
    });
    let start = micros();
    let consumers: Vec<Child> = (0..4)
        .map(|_| spawn_at(d, durability, &["fair", "rated", "60000", "100000", "3000"]))
        .collect();
    std::thread::sleep(run);
    // The run ends: what is left goes, and the consumers stop when idle.
    with_queue(d, "rated", async |q| q.purge().await.unwrap());
    let mut claims: Vec<u128> = Vec::new();
    for (i, child) in consumers.into_iter().enumerate() {
        for line in finish(child, &format!("consumer {i}")).lines() {
            if let ["c", _, _, at] = line.split(' ').collect::<Vec<_>>().as_slice() {
                claims.push(at.parse().unwrap());
            }
        }
    }
    claims.sort();
    let last = *claims.last().expect("no claim at all");
    // The engine counts whole milliseconds: one more of slack.
    let intervals = (last + 1_000).saturating_sub(start) / (u128::from(INTERVAL_MS) * 1_000);
    let bound = u128::from(CAPACITY) + u128::from(REFILL) * intervals;
    let secs = (last - start) as f64 / 1e6;
    eprintln!(
        "{} claims in {secs:.1} s ({:.1}/s; the rate allows {bound})",
        claims.len(),
        claims.len() as f64 / secs
    );
    assert!(
        claims.len() as u128 <= bound,
        "{} claims where the bucket could grant {bound}",
        claims.len()
    );
}

const SENDERS: usize = 8;
const SENDS_EACH: usize = 1_000;

fn unique_sends_from_eight_processes_store_one_message(d: &Store) {
    unique_sends_from_eight(d, "full");
}

fn unique_sends_from_eight_relaxed_processes_store_one_message(d: &Store) {
    unique_sends_from_eight(d, "relaxed");
}

/// Eight processes each send the same unique key 1,000 times, all at
/// once: exactly one message is stored, and every send names its id.
fn unique_sends_from_eight(d: &Store, durability: &str) {
    let senders: Vec<Child> = (0..SENDERS)
        .map(|_| {
            spawn_at(
                d,
                durability,
                &["send-unique", "unique", "the-key", &SENDS_EACH.to_string()],
            )
        })
        .collect();
    let mut new = 0;
    let mut duplicates = 0;
    let mut retried = 0;
    for (i, child) in senders.into_iter().enumerate() {
        let out = finish(child, &format!("sender {i}"));
        for line in out.lines() {
            match line.split(' ').collect::<Vec<_>>().as_slice() {
                ["new", n, "duplicate", m] => {
                    new += n.parse::<usize>().unwrap();
                    duplicates += m.parse::<usize>().unwrap();
                }
                // A send the store was too busy for, tried again.
                ["error", "busy"] => retried += 1,
                _ => panic!("unexpected line {line:?}"),
            }
        }
    }
    eprintln!("{new} new, {duplicates} duplicates, {retried} busy sends tried again");
    assert_eq!(new, 1, "messages stored");
    assert_eq!(new + duplicates, SENDERS * SENDS_EACH);
    let stats = with_queue(d, "unique", async |q| q.stats(millis()).await.unwrap());
    assert_eq!(stats.waiting + stats.delayed + stats.in_flight, 1);
}

const GROUPS: usize = 4;
const PER_GROUP: usize = 60;
const N: u32 = 3;
const VISIBILITY_MS: u64 = 1_000;

/// One claim of a consumer: when it returned and, when the consumer got to
/// acknowledge it, when the ack began (µs).
struct Span {
    group: String,
    payload: String,
    claimed: u128,
    /// The end of its time in flight, as far as the output proves it: the
    /// ack's start, or for a claim never acknowledged (the consumer was
    /// killed) its deadline counted from the consumer's previous step.
    until: u128,
}

/// Spans of one consumer's output; `spawned` is when it was started.
fn spans(out: &str, spawned: u128, acked: &mut HashSet<String>) -> Vec<Span> {
    let mut spans: Vec<Span> = Vec::new();
    // The latest time the consumer's current claim cannot have begun
    // before: its start, then each ack's start.
    let mut mark = spawned;
    let mut open: HashMap<String, (String, u128, u128)> = HashMap::new();
    for line in out.lines() {
        match line.split(' ').collect::<Vec<_>>().as_slice() {
            ["c", group, payload, at] => {
                open.insert(
                    payload.to_string(),
                    (group.to_string(), at.parse().unwrap(), mark),
                );
            }
            ["a", _, payload, at] => {
                let at: u128 = at.parse().unwrap();
                if let Some((group, claimed, _)) = open.remove(*payload) {
                    spans.push(Span {
                        group,
                        payload: payload.to_string(),
                        claimed,
                        until: at,
                    });
                    acked.insert(payload.to_string());
                }
                mark = at;
            }
            _ => {}
        }
    }
    // Never acknowledged: in flight at least until its deadline, which is
    // no earlier than `mark + visibility` of the step before the claim.
    for (payload, (group, claimed, mark)) in open {
        let until = (mark + u128::from(VISIBILITY_MS) * 1_000).max(claimed);
        spans.push(Span {
            group,
            payload,
            claimed,
            until,
        });
    }
    spans
}

/// Groups with a concurrency of three, consumers that hold each message a
/// while and are killed with `kill -9` again and again: no group ever has
/// more than three messages in flight at once (as the consumers' output
/// proves it), and every message is acknowledged in the end.
fn groups_of_three_stay_within_their_limit_under_kills(d: &Store) {
    groups_of_three_under_kills(d, "full", Duration::from_secs(6));
}

/// The same at relaxed durability (for 4 s): what a killed process
/// committed is not lost, so no group gets a fourth place.
fn groups_of_three_stay_within_their_limit_under_kills_relaxed(d: &Store) {
    groups_of_three_under_kills(d, "relaxed", Duration::from_secs(4));
}

fn groups_of_three_under_kills(d: &Store, durability: &str, run: Duration) {
    for g in 0..GROUPS {
        let group = format!("g{g}");
        let out = run_cli(
            "queue-tool",
            d,
            &[],
            &[
                "send-group",
                "three",
                &group,
                &PER_GROUP.to_string(),
                &group,
            ],
        );
        assert!(out.status.success(), "{}", text(&out.stdout));
    }
    with_queue(d, "three", async |q| {
        q.set_limits(&QueueLimits {
            group_concurrency: N,
            ..QueueLimits::default()
        })
        .await
        .unwrap()
    });
    let vis = VISIBILITY_MS.to_string();
    let spawn = || {
        let at = micros();
        // Each message is held 20 ms before its ack, so that a group's
        // places fill up.
        let child = spawn_at(
            d,
            durability,
            &["fair", "three", &vis, "100000", "1500", "20"],
        );
        (child, at)
    };
    let (mut rng, seed) = Rng::new("ALK_KILL_SEED");
    let mut outputs: Vec<(String, u128)> = Vec::new();
    let mut live: Vec<(Child, u128)> = (0..6).map(|_| spawn()).collect();
    let start = Instant::now();
    let mut kills = 0;
    while start.elapsed() < run {
        std::thread::sleep(Duration::from_millis(100 + rng.below(250)));
        let victim = rng.below(live.len() as u64) as usize;
        let (mut child, at) = live.remove(victim);
        child.kill().unwrap();
        outputs.push((text(&child.wait_with_output().unwrap().stdout), at));
        live.push(spawn());
        kills += 1;
    }
    for (child, at) in live {
        outputs.push((finish(child, "consumer"), at));
    }
    // The deliveries the killed consumers held come back after their
    // deadline: one more consumer finishes the work.
    let (last, at) = spawn();
    outputs.push((finish(last, "last consumer"), at));

    let mut acked = HashSet::new();
    let mut all: Vec<Span> = Vec::new();
    for (out, at) in &outputs {
        all.extend(spans(out, *at, &mut acked));
    }
    let mut most = 0;
    let mut by_group: HashMap<&str, Vec<&Span>> = HashMap::new();
    for s in &all {
        by_group.entry(&s.group).or_default().push(s);
    }
    for (group, list) in by_group {
        // Every claim's moment: how many of the group's spans cover it.
        for s in &list {
            let at = s.claimed;
            let covering: Vec<&&Span> = list
                .iter()
                .filter(|o| o.claimed <= at && at < o.until)
                .collect();
            most = most.max(covering.len());
            assert!(
                covering.len() <= N as usize,
                "group {group}: {} in flight at {at} (seed {seed}): {:?}",
                covering.len(),
                covering.iter().map(|o| &o.payload).collect::<Vec<_>>()
            );
        }
    }
    eprintln!(
        "{kills} kills, {} claims, at most {most} of one group in flight at once (seed {seed})",
        all.len()
    );
    for g in 0..GROUPS {
        for i in 0..PER_GROUP {
            let p = format!("g{g}-{i}");
            assert!(acked.contains(&p), "{p} was never acknowledged");
        }
    }
    let stats = with_queue(d, "three", async |q| q.stats(millis()).await.unwrap());
    assert_eq!(
        (stats.waiting, stats.delayed, stats.in_flight, stats.dead),
        (0, 0, 0, 0),
        "left in the queue"
    );
}

on_every_engine! {
    a_rate_holds_across_four_consumer_processes;
    a_rate_holds_across_four_relaxed_consumer_processes;
    unique_sends_from_eight_processes_store_one_message;
    unique_sends_from_eight_relaxed_processes_store_one_message;
    groups_of_three_stay_within_their_limit_under_kills;
    groups_of_three_stay_within_their_limit_under_kills_relaxed;
}
