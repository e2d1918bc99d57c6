//! The transactions, outboxes and schedules contract, checked from inside a
//! Rust guest. See ../README.md.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alk_guest::outbox::Outbox;
use alk_guest::queue::{
    ClaimOptions, Job, JobState, Payload, Queue, Retried, SendOptions, UniqueOptions,
};
use alk_guest::schedule::{self, ScheduleError};
use alk_guest::tx::Transaction;
use alk_guest::{Contract, Error, bad_names, ensure, ensure_matches, notify, ok, stream};

fn plain() -> SendOptions {
    SendOptions {
        priority: None,
        delay_ms: None,
        run_at_ms: None,
        max_attempts: None,
        backoff_base_ms: None,
        expires_in_ms: None,
        group: None,
    }
}

fn text(s: &str) -> Payload {
    Payload::Text(s.into())
}

fn body(j: &Job) -> &str {
    match &j.payload {
        Payload::Text(t) | Payload::Json(t) => t,
    }
}

/// Everything claimable now, for a minute.
fn claim_all(q: &Queue) -> Result<Vec<Job>, Error> {
    q.claim(ClaimOptions {
        max: 1000,
        visibility_ms: Some(60_000),
        min_priority: None,
        wait_ms: None,
    })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn pause(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

fn main() {
    let mut c = Contract::new();
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let fresh = |case: &str| format!("c{nonce}-{case}");

    // The same operations, on names of the case's own.
    let all_in = |tx: &Transaction, n: &str| -> Result<(), String> {
        ok!(stream::publish(&format!("{n}-in"), b"source"));
        ensure_matches!(tx.publish(&format!("{n}-out"), b"plain"), Ok(1));
        ensure_matches!(
            tx.publish_with_key(&format!("{n}-out"), "k", b"keyed"),
            Ok(2)
        );
        ok!(tx.save_offset(&format!("{n}-in"), "worker", 1));
        let mut o = plain();
        o.priority = Some(4);
        ok!(tx.enqueue(&format!("{n}-q"), &[text("job-a"), text("job-b")], &o));
        ok!(tx.outbox_enqueue(&format!("{n}-o"), &[text("mail")], &plain()));
        ok!(tx.notify(&format!("{n}-c")));
        Ok(())
    };
    // Nothing of `all_in` is visible.
    let nothing = |n: &str, listener: &notify::Listener| -> Result<(), String> {
        ensure_matches!(stream::read_since(&format!("{n}-out"), 0, 10), Ok(v) if v.is_empty());
        ensure_matches!(stream::get_offset(&format!("{n}-in"), "worker"), Ok(None));
        let q = ok!(Queue::open(&format!("{n}-q")));
        ensure_matches!(claim_all(&q), Ok(v) if v.is_empty());
        let o = ok!(Outbox::open(&format!("{n}-o")));
        ensure_matches!(o.next(None), Ok(None));
        ensure!(!listener.wait(50), "notified without a commit");
        Ok(())
    };

    c.case("commit-applies-every-operation-together", || {
        let n = fresh("commit");
        let listener = ok!(notify::listen(&format!("{n}-c")));
        let tx = Transaction::new();
        all_in(&tx, &n)?;
        nothing(&n, &listener)?;
        ok!(tx.commit());
        let events = ok!(stream::read_since(&format!("{n}-out"), 0, 10));
        let got: Vec<_> = events
            .iter()
            .map(|e| (e.key.clone(), e.payload.clone()))
            .collect();
        ensure!(
            got == [
                (None, b"plain".to_vec()),
                (Some("k".into()), b"keyed".to_vec())
            ],
            "{got:?}"
        );
        ensure_matches!(
            stream::get_offset(&format!("{n}-in"), "worker"),
            Ok(Some(1))
        );
        let q = ok!(Queue::open(&format!("{n}-q")));
        let jobs = ok!(claim_all(&q));
        let bodies: Vec<_> = jobs.iter().map(|j| (body(j), j.priority)).collect();
        ensure!(bodies == [("job-a", 4), ("job-b", 4)], "{bodies:?}");
        let o = ok!(Outbox::open(&format!("{n}-o")));
        ensure_matches!(o.next(None), Ok(Some(j)) if body(&j) == "mail");
        ensure!(listener.wait(5_000), "the commit did not notify");
        ensure_matches!(tx.commit(), Err(Error::InvalidArgument(_)));
        Ok(())
    });
    c.case("rollback-leaves-nothing", || {
        let n = fresh("rollback");
        let listener = ok!(notify::listen(&format!("{n}-c")));
        let tx = Transaction::new();
        all_in(&tx, &n)?;
        tx.rollback();
        nothing(&n, &listener)?;
        ensure_matches!(tx.commit(), Err(Error::InvalidArgument(_)));
        ensure_matches!(
            tx.enqueue(&format!("{n}-q"), &[text("late")], &plain()),
            Err(Error::InvalidArgument(_))
        );
        ensure_matches!(tx.notify(&format!("{n}-c")), Err(Error::InvalidArgument(_)));
        Ok(())
    });
    c.case("dropping-an-open-transaction-rolls-it-back", || {
        let n = fresh("drop");
        let listener = ok!(notify::listen(&format!("{n}-c")));
        let tx = Transaction::new();
        all_in(&tx, &n)?;
        drop(tx);
        nothing(&n, &listener)?;
        let next = Transaction::new();
        ok!(next.publish(&format!("{n}-out"), b"after"));
        ok!(next.commit());
        ensure_matches!(stream::read_since(&format!("{n}-out"), 0, 10), Ok(v) if v.len() == 1);
        Ok(())
    });
    c.case("refused-operations-keep-the-transaction", || {
        let n = fresh("refused");
        let q = format!("{n}-q");
        let tx = Transaction::new();
        ensure_matches!(
            tx.enqueue("__alkstore_x", &[text("x")], &plain()),
            Err(Error::ReservedName(_))
        );
        ensure_matches!(
            tx.outbox_enqueue("", &[text("x")], &plain()),
            Err(Error::InvalidName(_))
        );
        let mut both = plain();
        both.delay_ms = Some(1);
        both.run_at_ms = Some(1);
        ensure_matches!(
            tx.enqueue(&q, &[text("x")], &both),
            Err(Error::InvalidArgument(_))
        );
        ensure_matches!(
            tx.save_offset(&format!("{n}-never"), "w", 5),
            Err(Error::InvalidArgument(_))
        );
        let many: Vec<Payload> = (0..1001).map(|i| text(&i.to_string())).collect();
        ensure_matches!(
            tx.enqueue(&q, &many, &plain()),
            Err(Error::InvalidArgument(_))
        );
        ensure_matches!(
            tx.enqueue(&q, &[text("ok"), Payload::Json("{".into())], &plain()),
            Err(Error::InvalidArgument(_))
        );
        ok!(tx.enqueue(&q, &[text("kept")], &plain()));
        ok!(tx.commit());
        let got = ok!(claim_all(&ok!(Queue::open(&q))));
        ensure!(got.len() == 1 && body(&got[0]) == "kept", "{got:?}");
        Ok(())
    });
    c.case("sent-jobs-keep-their-options", || {
        let n = fresh("options");
        let q = ok!(Queue::open(&format!("{n}-q")));
        let tx = Transaction::new();
        let mut o = plain();
        o.priority = Some(7);
        o.max_attempts = Some(3);
        o.group = Some("g".into());
        ok!(tx.enqueue(&format!("{n}-q"), &[text("grouped")], &o));
        let mut later = plain();
        later.delay_ms = Some(60);
        ok!(tx.enqueue(&format!("{n}-q"), &[text("later")], &later));
        ok!(tx.commit());
        let got = ok!(claim_all(&q));
        ensure!(got.len() == 1, "{got:?}");
        let j = &got[0];
        ensure!(
            body(j) == "grouped"
                && j.priority == 7
                && j.max_attempts == Some(3)
                && j.group.as_deref() == Some("g"),
            "{j:?}"
        );
        pause(100);
        ensure_matches!(claim_all(&q), Ok(v) if v.len() == 1 && body(&v[0]) == "later");
        Ok(())
    });
    c.case("enqueue-unique-in-a-transaction-stores-one", || {
        let n = fresh("unique");
        let q = ok!(Queue::open(&n));
        let once = UniqueOptions {
            key: "k".into(),
            for_ms: None,
        };
        let tx = Transaction::new();
        ok!(tx.enqueue_unique(&n, &text("first"), &plain(), &once));
        ok!(tx.enqueue_unique(&n, &text("second"), &plain(), &once));
        ok!(tx.commit());
        let tx = Transaction::new();
        ok!(tx.enqueue_unique(&n, &text("third"), &plain(), &once));
        ok!(tx.commit());
        let sent = ok!(q.send_unique(&text("fourth"), &plain(), &once));
        let got = ok!(claim_all(&q));
        ensure!(got.len() == 1 && body(&got[0]) == "first", "{got:?}");
        ensure!(sent.duplicate && sent.id == got[0].id, "{sent:?}");
        // A bad key is refused and the transaction goes on.
        let tx = Transaction::new();
        let empty = UniqueOptions {
            key: String::new(),
            for_ms: None,
        };
        ensure_matches!(
            tx.enqueue_unique(&n, &text("bad"), &plain(), &empty),
            Err(Error::InvalidArgument(_))
        );
        let other = UniqueOptions {
            key: "other".into(),
            for_ms: None,
        };
        ok!(tx.enqueue_unique(&n, &text("fifth"), &plain(), &other));
        ok!(tx.commit());
        ensure_matches!(claim_all(&q), Ok(v) if v.len() == 1 && body(&v[0]) == "fifth");
        Ok(())
    });
    c.case("notify-only-transaction-notifies-at-commit", || {
        let ch = fresh("only-notify");
        let listener = ok!(notify::listen(&ch));
        let tx = Transaction::new();
        ok!(tx.notify(&ch));
        ok!(tx.notify(&ch));
        ensure!(!listener.wait(50), "notified before the commit");
        ok!(tx.commit());
        ensure!(listener.wait(5_000), "the commit did not notify");
        Ok(())
    });
    c.case("outbox-names-follow-the-rules", || {
        let name = fresh("outbox");
        let o = ok!(Outbox::open(&name));
        ensure!(o.name() == name);
        for bad in bad_names() {
            ensure_matches!(Outbox::open(&bad), Err(Error::InvalidName(_)));
        }
        ensure_matches!(Outbox::open("__alkstore_x"), Err(Error::ReservedName(_)));
        ensure_matches!(
            Queue::open(&format!("__alkstore_outbox_{name}")),
            Err(Error::ReservedName(_))
        );
        Ok(())
    });
    c.case("outbox-job-is-done-once", || {
        let o = ok!(Outbox::open(&fresh("done")));
        let id = ok!(o.enqueue(&text("work"), &plain()));
        let j = ok!(o.next(None));
        let Some(j) = j else {
            return Err("no job".into());
        };
        ensure!(j.id == id && j.attempt == 1 && body(&j) == "work", "{j:?}");
        ok!(o.done(&j.receipt));
        ensure_matches!(o.next(None), Ok(None));
        ensure_matches!(o.get_job(id), Ok(None));
        Ok(())
    });
    c.case("outbox-failure-backs-off", || {
        let o = ok!(Outbox::open(&fresh("backoff")));
        let id = ok!(o.enqueue(&text("work"), &plain()));
        let Some(j) = ok!(o.next(None)) else {
            return Err("no job".into());
        };
        let before = now_ms();
        let r = ok!(o.failed(&j.receipt, "smtp down"));
        let after = now_ms();
        ensure_matches!(r, Retried::Scheduled(at) if at >= before + 500 && at <= after + 1_000);
        ensure_matches!(o.next(None), Ok(None));
        let info = ok!(o.get_job(id));
        ensure_matches!(
            info,
            Some(i) if i.state == JobState::Delayed && i.last_error.as_deref() == Some("smtp down")
        );
        Ok(())
    });
    c.case("outbox-last-failure-dead-letters", || {
        let o = ok!(Outbox::open(&fresh("dead")));
        let mut once = plain();
        once.max_attempts = Some(1);
        let id = ok!(o.enqueue(&text("work"), &once));
        let Some(j) = ok!(o.next(None)) else {
            return Err("no job".into());
        };
        ensure_matches!(o.failed(&j.receipt, "gave up"), Ok(Retried::DeadLettered));
        let dead = ok!(o.dead_letters(None, 10));
        ensure!(
            dead.len() == 1 && dead[0].id == id && dead[0].last_error.as_deref() == Some("gave up"),
            "{dead:?}"
        );
        Ok(())
    });
    c.case("outbox-job-comes-back-after-its-visibility", || {
        let o = ok!(Outbox::open(&fresh("visibility")));
        ok!(o.enqueue(&text("work"), &plain()));
        let Some(first) = ok!(o.next(Some(40))) else {
            return Err("no job".into());
        };
        ensure_matches!(o.next(None), Ok(None));
        pause(60);
        let Some(second) = ok!(o.next(None)) else {
            return Err("not handed out again".into());
        };
        ensure!(second.id == first.id && second.attempt == 2, "{second:?}");
        ensure_matches!(o.done(&first.receipt), Err(Error::StaleReceipt(_)));
        ok!(o.done(&second.receipt));
        ensure_matches!(o.next(None), Ok(None));
        Ok(())
    });
    c.case("bad-specs-are-invalid-spec", || {
        let name = fresh("specs");
        for bad in [
            "*/5 * * * *",
            "@daily",
            "@every 0s",
            "@every 5",
            "@every 5x",
            "@every -1s",
            "@every 1.5s",
            "",
        ] {
            ensure_matches!(
                schedule::schedule(&name, bad, &fresh("q"), &text("x"), &plain()),
                Err(ScheduleError::InvalidSpec(_))
            );
        }
        ensure_matches!(schedule::get(&name), Ok(None));
        Ok(())
    });
    c.case("bad-schedule-names-are-store-errors", || {
        let q = fresh("q");
        for bad in bad_names() {
            ensure_matches!(
                schedule::schedule(&bad, "@every 1s", &q, &text("x"), &plain()),
                Err(ScheduleError::Store(Error::InvalidName(_)))
            );
            ensure_matches!(
                schedule::schedule(&fresh("s"), "@every 1s", &bad, &text("x"), &plain()),
                Err(ScheduleError::Store(Error::InvalidName(_)))
            );
        }
        ensure_matches!(
            schedule::schedule("__alkstore_x", "@every 1s", &q, &text("x"), &plain()),
            Err(ScheduleError::Store(Error::ReservedName(_)))
        );
        let mut both = plain();
        both.delay_ms = Some(1);
        both.run_at_ms = Some(1);
        ensure_matches!(
            schedule::schedule(&fresh("s"), "@every 1s", &q, &text("x"), &both),
            Err(ScheduleError::Store(Error::InvalidArgument(_)))
        );
        Ok(())
    });
    c.case("schedule-is-stored-replaced-and-removed", || {
        let (name, q) = (fresh("stored"), fresh("stored-q"));
        let mut o = plain();
        o.priority = Some(3);
        let before = now_ms();
        ok!(schedule::schedule(&name, "@every 10m", &q, &Payload::Json("{\"n\":1}".into()), &o));
        let after = now_ms();
        let Some(s) = ok!(schedule::get(&name)) else {
            return Err("not stored".into());
        };
        ensure!(
            s.spec == "@every 10m"
                && s.every_ms == 600_000
                && s.queue == q
                && matches!(&s.payload, Payload::Json(j) if j == "{\"n\":1}")
                && format!("{:?}", s.options) == format!("{o:?}")
                && s.next_fire_ms >= before + 600_000
                && s.next_fire_ms <= after + 600_000,
            "{s:?}"
        );
        ensure!(ok!(schedule::list()).iter().any(|l| l.name == name));
        ok!(schedule::schedule(&name, "@every 10m", &q, &text("new"), &plain()));
        ensure_matches!(schedule::get(&name), Ok(Some(t)) if t.next_fire_ms == s.next_fire_ms && matches!(&t.payload, Payload::Text(x) if x == "new"));
        ok!(schedule::schedule(&name, "@every 1h", &q, &text("new"), &plain()));
        ensure_matches!(schedule::get(&name), Ok(Some(t)) if t.next_fire_ms >= before + 3_600_000);
        ensure_matches!(schedule::unschedule(&name), Ok(true));
        ensure_matches!(schedule::unschedule(&name), Ok(false));
        ensure_matches!(schedule::get(&name), Ok(None));
        Ok(())
    });
    c.case("run-fires-each-boundary-while-leading", || {
        let (name, q) = (fresh("run"), fresh("run-q"));
        let mut o = plain();
        o.priority = Some(2);
        ok!(schedule::schedule(
            &name,
            "@every 1s",
            &q,
            &text("tick"),
            &o
        ));
        let Some(first) = ok!(schedule::get(&name)) else {
            return Err("not stored".into());
        };
        let report = match schedule::run(1_200) {
            Ok(r) => r,
            Err(e) => return Err(format!("run failed: {e:?}")),
        };
        ensure!(report.led && report.fired >= 1, "{report:?}");
        let jobs = ok!(claim_all(&ok!(Queue::open(&q))));
        ensure!(
            jobs.len() as u64 == report.fired,
            "{} jobs, {report:?}",
            jobs.len()
        );
        ensure!(jobs.iter().all(|j| body(j) == "tick" && j.priority == 2));
        // Each boundary fired once: the next one is as many intervals on.
        ensure_matches!(
            schedule::get(&name),
            Ok(Some(s)) if s.next_fire_ms == first.next_fire_ms + 1_000 * report.fired
        );
        ok!(schedule::unschedule(&name));
        Ok(())
    });
    c.finish();
}
