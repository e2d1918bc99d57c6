//! Waiting across processes: a waiter in one `alk-host` process wakes when
//! another process commits what it waits for. Nothing here sleeps: every
//! step waits for a line a process prints.

use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Stdio};

use alk_host::RunOptions;

use crate::common::*;

struct Proc {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Proc {
    fn spawn(store: &Store, guest_name: &str, args: &[&str]) -> Proc {
        let mut child = alk_host()
            .arg("run")
            .arg(guest(guest_name))
            .args(store.store_args())
            .arg("--")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn alk-host");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Proc { child, lines }
    }

    fn line(&mut self) -> String {
        self.lines.next().expect("the process ended early").unwrap()
    }

    fn finish(mut self) {
        assert!(self.child.wait().unwrap().success());
    }
}

fn cli_ok(store: &Store, guest_name: &str, args: &[&str]) {
    let out = run_cli(guest_name, store, &[], args);
    assert!(
        out.status.success(),
        "{guest_name} {args:?}: {}",
        text(&out.stdout)
    );
}

fn a_waiting_receive_gets_a_message_sent_by_another_process(store: &Store) {
    let mut waiter = Proc::spawn(store, "wake-tool", &["receive-wait", "jobs", "60000"]);
    assert_eq!(waiter.line(), "waiting");
    cli_ok(store, "queue-tool", &["send", "jobs", "hello"]);
    assert_eq!(waiter.line(), "got hello 1");
    waiter.finish();
}

/// The pids in a queue's waiting registry (the file engine's).
fn registered(dir: &std::path::Path, queue: &str) -> Vec<u32> {
    std::fs::read(dir.join("wake/waiting").join(format!("queue.{queue}")))
        .unwrap_or_default()
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .filter(|pid| *pid != 0)
        .collect()
}

/// A queue's signal wakes one waiting process; a waiter that takes a
/// message and sees more due wakes the next. Two waiters, two messages:
/// each gets one, and neither is left behind.
fn waiting_receivers_in_two_processes_each_get_one_of_two_messages(store: &Store) {
    let spawn = || {
        let mut p = Proc::spawn(store, "wake-tool", &["receive-wait", "pair", "60000"]);
        assert_eq!(p.line(), "waiting");
        p
    };
    let (a, b) = (spawn(), spawn());
    if let Store::Dir(d) = store {
        // Both say they wait before anything is sent (so the sends below
        // find them in the registry).
        let pids = [a.child.id(), b.child.id()];
        while !pids
            .iter()
            .all(|p| registered(d.path(), "pair").contains(p))
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    cli_ok(store, "queue-tool", &["send", "pair", "one"]);
    cli_ok(store, "queue-tool", &["send", "pair", "two"]);
    let got: Vec<String> = [a, b]
        .into_iter()
        .map(|mut p| {
            let line = p.line();
            p.finish();
            line
        })
        .collect();
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(sorted, ["got one 1", "got two 1"], "{got:?}");
    if let Store::Dir(d) = store {
        assert!(
            registered(d.path(), "pair").is_empty(),
            "both left the registry"
        );
    }
}

fn a_subscription_wakes_on_a_publish_in_another_process(store: &Store) {
    let mut waiter = Proc::spawn(store, "wake-tool", &["next-wait", "events", "c", "60000"]);
    assert_eq!(waiter.line(), "waiting");
    cli_ok(store, "stream-tool", &["publish", "events", "1", "news"]);
    assert_eq!(waiter.line(), "ev 1 news-0");
    waiter.finish();
}

fn a_waiting_lock_is_granted_when_the_holder_releases(store: &Store) {
    let mut holder = Proc::spawn(
        store,
        "lock-tool",
        &["hold-until", "l", "a", "60000", "let-go"],
    );
    assert_eq!(holder.line(), "held 1");
    let mut waiter = Proc::spawn(
        store,
        "wake-tool",
        &["wait-lock", "l", "b", "60000", "60000"],
    );
    assert_eq!(waiter.line(), "waiting");
    cli_ok(store, "wake-tool", &["notify", "let-go"]);
    assert_eq!(holder.line(), "released true");
    assert_eq!(waiter.line(), "acquired 2");
    holder.finish();
    waiter.finish();
}

/// The pids listed in the listening files (the file engine's), each once
/// per entry.
fn listening(dir: &std::path::Path) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir(dir.join("wake/listening"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let bytes = std::fs::read(entry.path()).unwrap();
        pids.extend(
            bytes
                .chunks_exact(8)
                .map(|c| u32::from_le_bytes(c[..4].try_into().unwrap()))
                .filter(|pid| *pid != 0),
        );
    }
    pids
}

fn a_notification_reaches_a_listener_in_another_process(store: &Store) {
    let mut listener = Proc::spawn(store, "wake-tool", &["listen", "deploys", "60000"]);
    assert_eq!(listener.line(), "waiting");
    let pid = listener.child.id();
    if let Store::Dir(d) = store {
        assert_eq!(listening(d.path()), [pid], "the listener is listed");
    }
    cli_ok(store, "wake-tool", &["notify", "deploys"]);
    assert_eq!(listener.line(), "woken");
    listener.finish();
    if let Store::Dir(d) = store {
        assert!(listening(d.path()).is_empty(), "and leaves the list");
    }
}

/// A signal nobody in another process listens to is not written anywhere
/// another process would see it (the file engine's files); one that
/// somebody listens to reaches that process's inbox only.
fn a_signal_reaches_only_the_processes_that_listen(store: &Store) {
    let Store::Dir(d) = store else {
        // The database server's engine announces to every process.
        return;
    };
    let wake = d.path().join("wake");
    // The signal files under wake/, by path below it.
    let signal_files = || -> Vec<String> {
        let mut found = Vec::new();
        let mut dirs = vec![wake.clone()];
        while let Some(dir) = dirs.pop() {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if e.file_type().unwrap().is_dir() {
                    dirs.push(e.path());
                } else if name.contains('@') {
                    let path = e.path();
                    let below = path.strip_prefix(&wake).unwrap();
                    found.push(below.to_string_lossy().into_owned());
                }
            }
        }
        found.sort();
        found
    };
    cli_ok(store, "stream-tool", &["publish", "unread", "1", "news"]);
    cli_ok(store, "wake-tool", &["notify", "deploys"]);
    assert!(signal_files().is_empty(), "{:?}", signal_files());
    // A subscriber in another process is woken by the next publish, which
    // writes to its inbox and nowhere else (the file goes again when the
    // subscriber stops listening).
    let mut waiter = Proc::spawn(store, "wake-tool", &["next-wait", "events", "c", "60000"]);
    assert_eq!(waiter.line(), "waiting");
    let inbox = format!("inbox/{}/", waiter.child.id());
    cli_ok(store, "stream-tool", &["publish", "events", "1", "more"]);
    assert_eq!(waiter.line(), "ev 1 more-0");
    let files = signal_files();
    assert!(
        files
            .iter()
            .all(|f| f == &format!("{inbox}stream.events@0")),
        "{files:?}"
    );
    waiter.finish();
}

fn poll_reports_which_of_several_pollables_a_remote_commit_made_ready(store: &Store) {
    let mut poller = Proc::spawn(
        store,
        "wake-tool",
        &["poll", "jobs", "events", "deploys", "60000"],
    );
    assert_eq!(poller.line(), "waiting");
    cli_ok(store, "queue-tool", &["send", "jobs", "x"]);
    assert_eq!(poller.line(), "queue");
    poller.finish();
}

fn timeouts_are_values_not_errors(store: &Store) {
    let run = |args: &[&str]| {
        let out = run_lib_with(
            "wake-tool",
            store.ctx(),
            RunOptions {
                args: args.iter().map(|s| s.to_string()).collect(),
                capture_output: true,
                ..Default::default()
            },
        );
        assert_eq!(out.exit_code(), 0, "{}", text(&out.stdout));
        text(&out.stdout)
    };
    assert_eq!(run(&["receive-wait", "empty", "30"]), "waiting\ntimeout\n");
    assert_eq!(
        run(&["next-wait", "quiet", "c", "30"]),
        "waiting\ntimeout\n"
    );
    assert_eq!(run(&["listen", "silent", "30"]), "waiting\ntimeout\n");
    assert_eq!(
        run(&["poll", "empty", "quiet", "silent", "30"]),
        "waiting\ntimer\n"
    );
    // A held lock: the waiter times out with none.
    let mut holder = Proc::spawn(store, "lock-tool", &["hold", "busy-lock", "a", "60000"]);
    assert!(holder.line().starts_with("held 1 "));
    assert_eq!(
        run(&["wait-lock", "busy-lock", "b", "1000", "30"]),
        "waiting\ntimeout\n"
    );
    holder.child.kill().unwrap();
    holder.child.wait().unwrap();
}

on_every_engine! {
    a_waiting_receive_gets_a_message_sent_by_another_process;
    waiting_receivers_in_two_processes_each_get_one_of_two_messages;
    a_subscription_wakes_on_a_publish_in_another_process;
    a_waiting_lock_is_granted_when_the_holder_releases;
    a_notification_reaches_a_listener_in_another_process;
    a_signal_reaches_only_the_processes_that_listen;
    poll_reports_which_of_several_pollables_a_remote_commit_made_ready;
    timeouts_are_values_not_errors;
}
