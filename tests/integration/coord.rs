//! Transactions across mechanisms under `kill -9`, rolled-back transactions
//! seen from another process, and scheduler runners electing a leader
//! across processes — on every engine.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use alk_host::Engine;
use alk_host::store::outbox::Outbox;
use alk_store::queue::{Payload, Queue};
use alk_store::schedule::Schedules;
use alk_store::stream::Streams;
use alk_store::{StreamLimits, jobs::SendOptions};

use crate::common::*;

/// The engine of `d`, in this process, with a runtime to drive it.
fn engine(d: &Store) -> (Arc<dyn Engine>, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // The Postgres engine is connected on a runtime of its own (see
    // `Store::ctx`); the file engine needs this one entered to start.
    let ctx = match d {
        Store::Postgres(_) => d.ctx(),
        Store::Dir(_) => {
            let _entered = runtime.enter();
            d.ctx()
        }
    };
    (ctx.engine().clone(), runtime)
}

fn body(p: &Payload) -> String {
    match p {
        Payload::Text(t) | Payload::Json(t) => t.clone(),
    }
}

/// Every payload claimable from `queue` now, claimed and acked.
async fn drain(queue: &Queue) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let got = queue
            .claim(1000, Some(60_000), None, now_ms())
            .await
            .unwrap();
        if got.is_empty() {
            return out;
        }
        for d in got {
            out.push(body(&d.payload));
            queue.ack(&d.receipt).await.unwrap();
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// How many times each value occurs.
fn counts(values: impl IntoIterator<Item = String>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for v in values {
        *m.entry(v).or_default() += 1;
    }
    m
}

/// A small deterministic generator (the seed is printed, so a failing run
/// can be repeated).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

const WORK: [&str; 6] = ["src", "out", "jobs", "mail", "worker", "done"];

/// A guest loop doing read → (publish, send a job, send to an outbox, save
/// the offset, notify) in one transaction per event is killed with
/// `kill -9` at random points 50 times; afterwards every source event
/// produced exactly one event, one job and one outbox job, the offset is at
/// the end, and the store files pass stock SQLite's integrity check.
fn transactions_are_exactly_once_under_kill_9(d: &Store) {
    exactly_once_under_kill_9(d, "full");
}

/// The same at relaxed durability: a killed process loses nothing the
/// operating system has, which is every commit.
fn relaxed_transactions_are_exactly_once_under_kill_9(d: &Store) {
    exactly_once_under_kill_9(d, "relaxed");
}

/// `tx-tool` with `args` at `durability`, stdout and stderr piped.
fn spawn_tx(d: &Store, durability: &str, args: &[&str]) -> Child {
    alk_host()
        .arg("run")
        .arg(guest("tx-tool"))
        .args(d.store_args())
        .args(["--durability", durability])
        .arg("--")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn alk-host")
}

fn exactly_once_under_kill_9(d: &Store, durability: &str) {
    // Enough events that every kill lands while there is work left.
    let events: u64 = if durability == "relaxed" {
        5_000
    } else {
        2_000
    };
    let out = run_cli("tx-tool", d, &[], &["produce", "src", &events.to_string()]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    let seed = now_ms() as u64;
    eprintln!("kill schedule seed {seed}");
    let mut rng = Lcg(seed);
    let work: Vec<&str> = std::iter::once("work").chain(WORK).collect();
    let mut killed_mid_work = 0;
    let mut committed_before_kills = 0;
    for _ in 0..50 {
        // Each kill lands after the worker committed at least once, at a
        // random point of what follows: inside a transaction, during a
        // commit, between a commit and its relay, or between two events.
        let mut child = spawn_tx(d, durability, &work);
        let out = collect(&mut child);
        wait_until("the worker committing", Duration::from_secs(60), || {
            out.has("done ").is_some() || out.has("idle").is_some()
        });
        std::thread::sleep(Duration::from_millis(rng.next(40)));
        child.kill().unwrap();
        child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let lines = out.lines.lock().unwrap();
        committed_before_kills += lines.iter().filter(|(_, l)| l.starts_with("done ")).count();
        if !lines.iter().any(|(_, l)| l == "idle") {
            killed_mid_work += 1;
        }
    }
    // A last worker, never killed, finishes the events.
    let last = finish(spawn_tx(d, durability, &work), "last worker");
    assert!(last.ends_with("idle\n"), "{last}");
    eprintln!(
        "{durability}: 50 kills, {killed_mid_work} of them while the worker was working; {committed_before_kills} commits reported before the kills"
    );
    assert!(
        killed_mid_work >= 25,
        "only {killed_mid_work} kills landed while work was going on: raise events"
    );

    let (engine, rt) = engine(d);
    rt.block_on(async {
        let streams = Streams::open(&*engine, StreamLimits::default())
            .await
            .unwrap();
        let want: BTreeMap<String, usize> = (1..=events).map(|k| (k.to_string(), 1)).collect();
        let mut keys = Vec::new();
        let mut after = 0;
        loop {
            let page = streams.read_since("out", after, 1000).await.unwrap();
            let Some(last) = page.last() else { break };
            after = last.offset;
            for e in page {
                let key = e.key.clone().expect("a keyed event");
                assert_eq!(e.payload, format!("e{key}").into_bytes(), "event of {key}");
                keys.push(key);
            }
        }
        assert_eq!(counts(keys), want, "published events per source event");
        assert_eq!(
            streams.get_offset("src", "worker").await.unwrap(),
            Some(events)
        );
        let jobs = Queue::open(&*engine, "jobs").await.unwrap();
        assert_eq!(counts(drain(&jobs).await), want, "jobs per source event");
        let mail = Outbox::open(&*engine, "mail").await.unwrap();
        assert_eq!(
            counts(drain(mail.queue()).await),
            want,
            "outbox jobs per source event"
        );
    });
    if let Some(dir) = d.path() {
        for file in [
            "stream/localstream.sqlite",
            "queue/jobs/localqueue.sqlite",
            "queue/__alkstore_outbox_mail/localqueue.sqlite",
        ] {
            let seen = sqlite_schema("store", &dir.join(file));
            assert_eq!(seen["integrity"], "ok", "{file}");
        }
    }
}

/// A transaction rolled back, dropped, or left open by a guest that traps
/// leaves no event, offset, job or outbox job, and wakes no listener in
/// another process; the same transaction committed does all of it.
fn a_rolled_back_transaction_leaves_nothing_anywhere(d: &Store) {
    let out = run_cli("tx-tool", d, &[], &["produce", "src", "1"]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    let listener = spawn_guest(d, "wake-tool", &["listen", "done", "60000"]);
    let mut listener = wait_for_line(listener, "waiting");
    for ending in ["rollback", "drop", "trap"] {
        let mut args: Vec<&str> = std::iter::once("abandon").chain(WORK).collect();
        args.push(ending);
        let out = run_cli("tx-tool", d, &[], &args);
        let expected = if ending == "trap" { 134 } else { 0 };
        assert_eq!(
            out.status.code(),
            Some(expected),
            "{ending}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
    // Long enough for a wake to cross processes, had there been one.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        listener.try_wait().unwrap().is_none(),
        "the listener woke for a rolled-back transaction"
    );
    listener.kill().unwrap();
    let heard = text(&listener.wait_with_output().unwrap().stdout);
    assert!(!heard.contains("woken"), "{heard}");

    let (engine, rt) = engine(d);
    let check = |expect: usize| {
        rt.block_on(async {
            let streams = Streams::open(&*engine, StreamLimits::default())
                .await
                .unwrap();
            assert_eq!(
                streams.read_since("out", 0, 10).await.unwrap().len(),
                expect
            );
            assert_eq!(
                streams.get_offset("src", "worker").await.unwrap(),
                (expect > 0).then_some(1)
            );
            let jobs = Queue::open(&*engine, "jobs").await.unwrap();
            assert_eq!(drain(&jobs).await.len(), expect);
            let mail = Outbox::open(&*engine, "mail").await.unwrap();
            assert_eq!(drain(mail.queue()).await.len(), expect);
        })
    };
    check(0);
    // Committed, the same operations are all there and the listener wakes.
    let listener = wait_for_line(
        spawn_guest(d, "wake-tool", &["listen", "done", "20000"]),
        "waiting",
    );
    let work: Vec<&str> = std::iter::once("work").chain(WORK).collect();
    let out = run_cli("tx-tool", d, &[], &work);
    assert_eq!(text(&out.stdout), "done 1\nidle\n");
    let heard = finish(listener, "listener");
    assert!(heard.contains("woken"), "{heard}");
    check(1);
}

/// Starts reading `child`'s stdout and returns once it printed `line`.
fn wait_for_line(mut child: Child, line: &str) -> Child {
    use std::io::BufRead;
    let stdout = child.stdout.take().unwrap();
    let mut reader = std::io::BufReader::new(stdout);
    let mut got = String::new();
    loop {
        got.clear();
        let n = reader.read_line(&mut got).unwrap();
        assert!(n > 0, "the child ended before printing {line:?}");
        if got.trim_end() == line {
            break;
        }
    }
    // The rest of its output stays readable through the child.
    child.stdout = Some(reader.into_inner());
    child
}

/// A scheduler runner process: `alk-host schedules run`.
fn runner(d: &Store, name: &str, ttl_ms: u64, seconds: f64) -> Child {
    alk_host()
        .args(["schedules", "run"])
        .args(d.store_args())
        .args(["--leader-ttl-ms", &ttl_ms.to_string()])
        .args(["--name", name])
        .args(["--for", &seconds.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn alk-host schedules run")
}

/// Lines a runner printed so far, collected by a thread.
struct Output {
    lines: Arc<std::sync::Mutex<Vec<(Instant, String)>>>,
    err: Arc<std::sync::Mutex<Vec<String>>>,
}

fn collect(child: &mut Child) -> Output {
    use std::io::BufRead;
    let lines: Arc<std::sync::Mutex<Vec<(Instant, String)>>> = Default::default();
    let err: Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let out = child.stdout.take().unwrap();
    let l = lines.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            l.lock().unwrap().push((Instant::now(), line));
        }
    });
    let stderr = child.stderr.take().unwrap();
    let e = err.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            e.lock().unwrap().push(line);
        }
    });
    Output { lines, err }
}

impl Output {
    fn has(&self, prefix: &str) -> Option<Instant> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .find(|(_, l)| l.starts_with(prefix))
            .map(|(at, _)| *at)
    }

    /// Jobs this runner reports it fired.
    fn fired(&self) -> u64 {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(_, l)| l.strip_prefix("fired "))
            .map(|l| {
                let n = l.split(": ").nth(1).unwrap().split(' ').next().unwrap();
                n.parse::<u64>().unwrap()
            })
            .sum()
    }
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < limit,
            "{what} did not happen within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

/// Three runner processes: one leads and fires; a leader paused past its
/// TTL reports the loss; a leader killed with `kill -9` is replaced once
/// its TTL has run out. Every boundary that passed was fired exactly once
/// over all of it: the jobs in the queue, the firings the runners report
/// and the schedule's next boundary agree.
fn scheduler_runners_elect_one_leader_across_processes(d: &Store) {
    const TTL: u64 = 1_500;
    let (engine, rt) = engine(d);
    let schedules = rt.block_on(Schedules::open(&*engine)).unwrap();
    let plain = SendOptions::default();
    rt.block_on(schedules.schedule(
        "beat",
        "@every 1s",
        "beats",
        &Payload::Text("beat".into()),
        &plain,
        now_ms(),
    ))
    .unwrap();
    let first_due = rt
        .block_on(schedules.get("beat"))
        .unwrap()
        .unwrap()
        .next_due;

    let mut children: Vec<Child> = (0..3)
        .map(|i| runner(d, &format!("r{i}"), TTL, 14.0))
        .collect();
    let outputs: Vec<Output> = children.iter_mut().map(collect).collect();
    let leader_of = |outputs: &[Output], skip: &[usize]| {
        (0..3)
            .filter(|i| !skip.contains(i))
            .filter_map(|i| {
                outputs[i]
                    .lines
                    .lock()
                    .unwrap()
                    .iter()
                    .rev()
                    .find(|(_, l)| l.starts_with("leading as"))
                    .map(|(at, _)| (*at, i))
            })
            .max()
            .map(|(_, i)| i)
    };
    wait_until("a runner leading", Duration::from_secs(30), || {
        outputs.iter().any(|o| o.has("leading as").is_some())
    });
    let leaders: Vec<usize> = (0..3)
        .filter(|i| outputs[*i].has("leading as").is_some())
        .collect();
    assert_eq!(leaders.len(), 1, "more than one runner leads");
    let first = leaders[0];
    wait_until("the leader firing", Duration::from_secs(10), || {
        outputs[first].fired() >= 2
    });
    for (i, o) in outputs.iter().enumerate() {
        if i != first {
            assert_eq!(o.fired(), 0, "runner r{i} fired while r{first} led");
        }
    }

    // Paused past its TTL, the leader loses the leadership to another
    // runner; resumed, it says so and stands by.
    let pid = children[first].id().to_string();
    let signal = |sig: &str| {
        let ok = Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {pid}");
    };
    signal("-STOP");
    let paused = Instant::now();
    wait_until("another runner leading", Duration::from_secs(20), || {
        leader_of(&outputs, &[first]).is_some()
    });
    eprintln!("takeover from a paused leader after {:?}", paused.elapsed());
    signal("-CONT");
    wait_until(
        "the paused leader reporting the loss",
        Duration::from_secs(20),
        || {
            outputs[first]
                .err
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains("leadership lost"))
        },
    );

    // Killed, the second leader is replaced by another runner.
    let second = leader_of(&outputs, &[first]).unwrap();
    let fired_before = outputs[second].fired();
    wait_until("the second leader firing", Duration::from_secs(10), || {
        outputs[second].fired() > fired_before
    });
    children[second].kill().unwrap();
    let killed = Instant::now();
    wait_until("a third leadership", Duration::from_secs(20), || {
        (0..3).filter(|i| *i != second).any(|i| {
            outputs[i]
                .lines
                .lock()
                .unwrap()
                .iter()
                .any(|(at, l)| *at > killed && l.starts_with("leading as"))
        })
    });
    eprintln!(
        "takeover from a killed leader after {:?} (TTL {TTL} ms)",
        killed.elapsed()
    );
    for (i, mut child) in children.into_iter().enumerate() {
        if i != second {
            let status = child.wait().unwrap();
            assert!(
                status.success(),
                "runner r{i}: {status}; {:?}",
                outputs[i].err.lock().unwrap()
            );
        } else {
            let _ = child.wait();
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    let reported: u64 = outputs.iter().map(Output::fired).sum();
    let (queued, next_due) = rt.block_on(async {
        let q = Queue::open(&*engine, "beats").await.unwrap();
        let jobs = drain(&q).await;
        assert!(jobs.iter().all(|b| b == "beat"));
        (
            jobs.len() as u64,
            schedules.get("beat").await.unwrap().unwrap().next_due,
        )
    });
    eprintln!(
        "{queued} jobs fired by three runners over {} boundaries",
        (next_due - first_due) / 1000
    );
    // A runner killed between a firing's commit and its report line fired
    // one job it did not report.
    assert!(
        (reported..=reported + 1).contains(&queued),
        "{queued} jobs in the queue, {reported} firings reported by the runners"
    );
    assert_eq!(
        (next_due - first_due) as u64,
        1_000 * queued,
        "every boundary passed fired exactly once"
    );
}

/// A runner stopped with SIGTERM (or SIGINT) fires what is due and gives
/// the leadership back before it exits: nobody holds the lock afterwards,
/// so another runner can take over at once.
fn a_stopped_runner_gives_the_leadership_back(d: &Store) {
    let (engine, rt) = engine(d);
    for signal in ["-TERM", "-INT"] {
        let mut child = runner(d, "stopping", 60_000, 600.0);
        let out = collect(&mut child);
        wait_until("the runner leading", Duration::from_secs(30), || {
            out.has("leading as").is_some()
        });
        let locks = rt.block_on(engine.locks()).unwrap();
        let held = rt
            .block_on(locks.holder(alk_store::schedule::SCHEDULER_LOCK, now_ms()))
            .unwrap();
        assert_eq!(held.map(|h| h.owner).as_deref(), Some("stopping"));
        let ok = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let status = child.wait().unwrap();
        assert!(
            status.success(),
            "{signal}: {status}; {:?}",
            out.err.lock().unwrap()
        );
        wait_until("the last lines", Duration::from_secs(5), || {
            out.has("runner stopping stopped").is_some()
        });
        let held = rt
            .block_on(locks.holder(alk_store::schedule::SCHEDULER_LOCK, now_ms()))
            .unwrap();
        assert_eq!(held, None, "{signal}: the lock is still held");
    }
}

on_every_engine! {
    a_stopped_runner_gives_the_leadership_back;
    transactions_are_exactly_once_under_kill_9;
    relaxed_transactions_are_exactly_once_under_kill_9;
    a_rolled_back_transaction_leaves_nothing_anywhere;
    scheduler_runners_elect_one_leader_across_processes;
}
