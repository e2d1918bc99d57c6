//! The database server cancels statements for a while — a server-wide
//! `statement_timeout` of 1 ms, set for two seconds and reset, four times —
//! under two producers and three consumers, each its own `alk-host`
//! process with two pooled connections. Meanwhile calls fail with `busy`;
//! after each reset every consumer works again at once: no pooled
//! connection is left in an aborted transaction (which would fail every
//! later call with `internal`). Nothing is lost or acknowledged twice.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::*;

const ROUNDS: usize = 4;
const PRODUCERS: usize = 2;
const CONSUMERS: usize = 3;
/// How long each round's timeout lasts.
const FAULT: Duration = Duration::from_secs(2);
/// How long the server runs normally after each reset.
const CALM: Duration = Duration::from_secs(5);
/// Longer than the run: nothing is handed out twice unless a claim that
/// went through was reported as failed.
const VISIBILITY_MS: &str = "120000";

/// `psql` as the cluster's superuser, without a statement timeout of its
/// own and stopping at the first error; stdin closed.
fn psql(cluster: &alk_pg_cluster::Cluster) -> Command {
    let mut cmd = Command::new(alk_pg_cluster::bin_dir().unwrap().join("psql"));
    cmd.arg(cluster.url())
        .args(["-w", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1"])
        .env("PGOPTIONS", "-c statement_timeout=0")
        .env("PGCONNECT_TIMEOUT", "10")
        .stdin(Stdio::null());
    cmd
}

/// Runs `sql` on the cluster as its superuser, in a session the
/// server-wide timeout does not cancel.
fn superuser(cluster: &alk_pg_cluster::Cluster, sql: &[&str]) {
    let mut cmd = psql(cluster);
    for s in sql {
        cmd.args(["-c", s]);
    }
    let out = cmd.output().expect("run psql");
    assert!(out.status.success(), "psql {sql:?}: {}", text(&out.stderr));
}

/// A setting the fault changes along with `statement_timeout`, which the
/// superuser's own session does not override: when that session sees it
/// back at its default, the server has passed the reset on to every
/// session (one signal to all of them), not only written it down.
const PROBE: &str = "log_min_duration_statement";

/// Resets the fault and returns once the server has passed the reset on
/// to every session (see [`PROBE`]): `pg_reload_conf()` itself returns
/// before it has.
fn reset_and_wait_until_every_session_has_it(cluster: &alk_pg_cluster::Cluster) {
    use std::io::Write;
    let mut session = psql(cluster)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run psql");
    let mut input = session.stdin.take().unwrap();
    let mut output = BufReader::new(session.stdout.take().unwrap()).lines();
    writeln!(
        input,
        "ALTER SYSTEM RESET statement_timeout; ALTER SYSTEM RESET {PROBE}; SELECT pg_reload_conf();"
    )
    .unwrap();
    assert_eq!(output.next().unwrap().unwrap(), "t", "pg_reload_conf()");
    // A session takes a reload in between statements, so each SHOW is a
    // statement of its own.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        writeln!(input, "SHOW {PROBE};").unwrap();
        let seen = output.next().unwrap().unwrap();
        if seen == "-1" {
            break;
        }
        assert!(Instant::now() < deadline, "the server still has {PROBE} = {seen}");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(input);
    assert!(session.wait().unwrap().success());
}

/// A spawned host whose output lines are read as they come, each with the
/// moment it arrived.
struct Watched {
    child: Child,
    lines: mpsc::Receiver<(Instant, String)>,
    seen: Vec<(Instant, String)>,
    stderr: std::thread::JoinHandle<String>,
}

impl Watched {
    fn spawn(store: &Store, args: &[&str]) -> Watched {
        let mut child = spawn_guest(store, "queue-tool", args);
        let stdout = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut s);
            s
        });
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        Watched {
            child,
            lines,
            seen: Vec::new(),
            stderr,
        }
    }

    /// Takes in what arrived so far.
    fn poll(&mut self) {
        self.seen.extend(self.lines.try_iter());
    }

    /// Waits (boundedly) for a line starting with `prefix`.
    fn wait_for(&mut self, prefix: &str, who: &str) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !self.seen.iter().any(|(_, l)| l.starts_with(prefix)) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "{who} printed no {prefix:?} line");
            if let Ok(line) = self.lines.recv_timeout(left) {
                self.seen.push(line);
            }
        }
    }

    /// Waits (boundedly) for a line starting with `prefix` printed after
    /// `since`.
    fn wait_for_after(&mut self, prefix: &str, since: Instant, who: &str) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !self
            .seen
            .iter()
            .any(|(t, l)| *t > since && l.starts_with(prefix))
        {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // What it did last tells a stall from a slow machine.
                let _ = self.child.kill();
                let tail: Vec<&str> = self.seen.iter().rev().take(8).map(|(_, l)| l.as_str()).collect();
                panic!("{who} printed no {prefix:?} line in time; its last lines, newest first: {tail:?}");
            }
            if let Ok(line) = self.lines.recv_timeout(left) {
                self.seen.push(line);
            }
        }
    }

    /// Waits for the process to end; every line it printed.
    fn finish(mut self, who: &str) -> Vec<(Instant, String)> {
        let status = self.child.wait().unwrap();
        // The reader ends with the output.
        self.seen.extend(self.lines.iter());
        let stderr = self.stderr.join().unwrap_or_default();
        let tail: Vec<&str> = self
            .seen
            .iter()
            .rev()
            .take(5)
            .map(|(_, l)| l.as_str())
            .collect();
        assert!(
            status.success(),
            "{who} failed ({status}): {tail:?}\n{stderr}"
        );
        self.seen
    }
}

#[test]
fn statements_cancelled_by_the_server_leave_every_host_working_once_it_stops() {
    // A server of its own: this test changes its settings.
    let cluster = alk_pg_cluster::Cluster::start().expect("start a throwaway postgres");
    let store = Store::Postgres(format!("{}?pool_size=2&schema=timeouts", cluster.url()));
    // Makes the schema and compiles the guest once, before the clock runs.
    let out = run_cli("queue-tool", &store, &[], &["purge", "jobs"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // A consumer stops after this long without a message. It must outlast
    // the producers' own recovery after a fault on a loaded machine: with
    // 3 s, a consumer once gave up ("done") during a round, and the test
    // then waited in vain for it to acknowledge again.
    let mut consumers: Vec<Watched> = (0..CONSUMERS)
        .map(|_| Watched::spawn(&store, &["work", "jobs", "5", VISIBILITY_MS, "20000"]))
        .collect();
    let mut producers: Vec<Watched> = (0..PRODUCERS)
        .map(|p| Watched::spawn(&store, &["feed", "jobs", &format!("p{p}"), "stop"]))
        .collect();
    for (p, producer) in producers.iter_mut().enumerate() {
        producer.wait_for("feeding", &format!("producer {p}"));
    }
    for (c, consumer) in consumers.iter_mut().enumerate() {
        consumer.wait_for("acked ", &format!("consumer {c}"));
    }

    // (reset, end of the calm after it) per round.
    let mut calms = Vec::new();
    for _ in 0..ROUNDS {
        superuser(
            &cluster,
            &[
                "ALTER SYSTEM SET statement_timeout = '1ms'",
                &format!("ALTER SYSTEM SET {PROBE} = '1h'"),
                "SELECT pg_reload_conf()",
            ],
        );
        std::thread::sleep(FAULT);
        reset_and_wait_until_every_session_has_it(&cluster);
        let reset = Instant::now();
        std::thread::sleep(CALM);
        for w in consumers.iter_mut().chain(producers.iter_mut()) {
            w.poll();
        }
        // The calm lasts at least CALM, and until every consumer has
        // acknowledged something since the reset (bounded): on a loaded
        // machine recovery may take longer than CALM, and how long it
        // takes is a figure, not a verdict.
        for (c, consumer) in consumers.iter_mut().enumerate() {
            consumer.wait_for_after("acked ", reset, &format!("consumer {c}"));
        }
        calms.push((reset, Instant::now()));
    }
    let out = run_cli("queue-tool", &store, &[], &["send", "stop", "stop"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run_cli("queue-tool", &store, &[], &["send", "stop", "stop"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let mut errors: HashMap<String, usize> = HashMap::new();
    let mut sent: Vec<String> = Vec::new();
    for (p, producer) in producers.into_iter().enumerate() {
        let lines = producer.finish(&format!("producer {p}"));
        for (_, line) in &lines {
            if let Some(kind) = line.strip_prefix("error ") {
                *errors.entry(format!("send: {kind}")).or_default() += 1;
            } else if let Some(n) = line.strip_prefix("sent ") {
                let n: usize = n.parse().unwrap();
                sent.extend((0..n).map(|i| format!("p{p}-{i}")));
            }
        }
    }
    let mut acked: HashMap<String, usize> = HashMap::new();
    let mut got: HashMap<String, usize> = HashMap::new();
    let mut stale = Vec::new();
    let mut slowest = Duration::ZERO;
    let mut late_errors = 0;
    for (c, consumer) in consumers.into_iter().enumerate() {
        let lines = consumer.finish(&format!("consumer {c}"));
        for (_, line) in &lines {
            if let Some(kind) = line.strip_prefix("error ") {
                *errors.entry(format!("consumer: {kind}")).or_default() += 1;
            } else if let Some(rest) = line.strip_prefix("got ") {
                let (payload, _) = rest.rsplit_once(' ').unwrap();
                *got.entry(payload.to_string()).or_default() += 1;
            } else if let Some(payload) = line.strip_prefix("acked ") {
                *acked.entry(payload.to_string()).or_default() += 1;
            } else if let Some(payload) = line.strip_prefix("stale ") {
                stale.push(payload.to_string());
            }
        }
        for (round, (reset, end)) in calms.iter().enumerate() {
            let calm = || lines.iter().filter(|(t, _)| t > reset && t < end);
            // It works again: it acknowledges messages after the reset.
            let first_ack = calm().find(|(_, l)| l.starts_with("acked "));
            let Some((at, _)) = first_ack else {
                panic!("consumer {c} acknowledged nothing after reset {round}");
            };
            // And its failures stop: after its last one in the calm it
            // acknowledges again (a connection left in an aborted
            // transaction would go on failing calls to the end). A call
            // may still fail just after the reset: one already running on
            // the 1 ms timeout, or one whose line was written before the
            // reset and read after it; how soon they stop is a figure,
            // not a verdict.
            let results: Vec<&(Instant, String)> = calm()
                .filter(|(_, l)| l.starts_with("error ") || l.starts_with("acked "))
                .collect();
            let last_error = results.iter().rposition(|(_, l)| l.starts_with("error "));
            if let Some(i) = last_error {
                assert!(
                    i + 1 < results.len(),
                    "consumer {c} was still failing at the end of the calm after reset {round}: {:?}",
                    &results[i.saturating_sub(4)..]
                );
                let (t, _) = results[i];
                late_errors += results[..=i]
                    .iter()
                    .filter(|(u, l)| l.starts_with("error ") && u > at)
                    .count();
                slowest = slowest.max(t.duration_since(*reset));
            }
            slowest = slowest.max(at.duration_since(*reset));
        }
    }
    eprintln!(
        "statement timeouts: errors {errors:?}; sent {}; slowest recovery after a reset {slowest:?}; \
         calls failed after a first acknowledgement in a calm {late_errors}",
        sent.len()
    );
    // The timeouts were felt, as `busy`: never `internal` (a connection
    // stuck in an aborted transaction) nor anything else.
    assert!(
        errors.keys().any(|k| k.starts_with("consumer")),
        "no consumer saw the timeouts: {errors:?}"
    );
    for kind in errors.keys() {
        assert!(
            kind.ends_with(": busy"),
            "unexpected error {kind:?}: {errors:?}"
        );
    }
    assert!(stale.is_empty(), "receipts gone stale: {stale:?}");
    for payload in &sent {
        assert_eq!(
            acked.get(payload),
            Some(&1),
            "{payload} acked {:?} times",
            acked.get(payload)
        );
        assert_eq!(
            got.get(payload),
            Some(&1),
            "{payload} delivered {:?} times",
            got.get(payload)
        );
    }
    assert_eq!(acked.len(), sent.len(), "acked messages nobody sent");
    let out = run_cli("queue-tool", &store, &[], &["receive", "jobs", "1000", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "", "messages left in the queue");
}
