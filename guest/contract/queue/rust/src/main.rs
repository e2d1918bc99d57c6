//! The `localqueue.v1` contract, checked from inside a Rust guest. See ../README.md.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alk_guest::limiter;
use alk_guest::queue::{
    AckOutcome, ClaimOptions, Job, JobState, Message, Payload, Queue, QueueLimits, RateLimit,
    Retried, SendOptions, Taken, UniqueOptions,
};
use alk_guest::{Contract, Error, ensure, ensure_matches, ok};

fn text(m: &Message) -> &str {
    match &m.payload {
        Payload::Text(t) | Payload::Json(t) => t,
    }
}

fn job_text(j: &Job) -> &str {
    match &j.payload {
        Payload::Text(t) | Payload::Json(t) => t,
    }
}

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

fn take(max: u32) -> ClaimOptions {
    ClaimOptions {
        max,
        visibility_ms: None,
        min_priority: None,
        wait_ms: None,
    }
}

/// The limits of a queue that has none set.
fn no_limits() -> QueueLimits {
    QueueLimits {
        group_concurrency: 1,
        max_in_flight: None,
        rate: None,
        rate_per_group: false,
    }
}

/// Whether two queue limits are the same.
fn same(a: &QueueLimits, b: &QueueLimits) -> bool {
    let rate = |l: &QueueLimits| l.rate.map(|r| (r.capacity, r.refill, r.interval_ms));
    (
        a.group_concurrency,
        a.max_in_flight,
        rate(a),
        a.rate_per_group,
    ) == (
        b.group_concurrency,
        b.max_in_flight,
        rate(b),
        b.rate_per_group,
    )
}

fn key(k: &str, for_ms: Option<u64>) -> UniqueOptions {
    UniqueOptions {
        key: k.into(),
        for_ms,
    }
}

fn ids(jobs: &[Job]) -> Vec<u64> {
    jobs.iter().map(|j| j.id).collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn main() {
    let mut c = Contract::new();
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    // Every case gets a queue of its own, so cases never see each other's
    // messages and runs on a shared data directory never meet.
    let fresh = |case: &str| Queue::open(&format!("c{nonce}-{case}")).expect("open queue");
    let pause = |ms: u64| std::thread::sleep(Duration::from_millis(ms));

    c.case("open-returns-named-queue", || {
        let name = format!("c{nonce}-named");
        let q = ok!(Queue::open(&name));
        ensure!(q.name() == name);
        Ok(())
    });
    c.case("receive-on-empty-queue-is-empty", || {
        let q = fresh("empty");
        ensure_matches!(q.receive(10, None), Ok(v) if v.is_empty());
        Ok(())
    });
    c.case("send-returns-increasing-ids", || {
        let q = fresh("ids");
        let a = ok!(q.send(&Payload::Text("a".into())));
        let b = ok!(q.send(&Payload::Text("b".into())));
        ensure!(b > a, "{a} then {b}");
        Ok(())
    });
    c.case("receive-is-fifo", || {
        let q = fresh("fifo");
        for t in ["1", "2", "3", "4"] {
            ok!(q.send(&Payload::Text(t.into())));
        }
        let got = ok!(q.receive(10, None));
        let order: Vec<&str> = got.iter().map(text).collect();
        ensure!(order == ["1", "2", "3", "4"], "{order:?}");
        Ok(())
    });
    c.case("json-and-text-payloads-round-trip", || {
        let q = fresh("payloads");
        let json = r#"{"order": 17, "items": ["a", "b"], "note": "naïve ☕"}"#;
        ok!(q.send(&Payload::Json(json.into())));
        ok!(q.send(&Payload::Text("plain text, not JSON: {".into())));
        let got = ok!(q.receive(10, None));
        ensure_matches!(&got[0].payload, Payload::Json(j) if j == json);
        ensure_matches!(&got[1].payload, Payload::Text(t) if t == "plain text, not JSON: {");
        Ok(())
    });
    c.case("first-delivery-has-attempt-1", || {
        let q = fresh("attempt");
        ok!(q.send(&Payload::Text("x".into())));
        let got = ok!(q.receive(1, None));
        ensure!(got.len() == 1 && got[0].attempt == 1);
        Ok(())
    });
    c.case("received-messages-are-invisible", || {
        let q = fresh("invisible");
        ok!(q.send(&Payload::Text("x".into())));
        ensure_matches!(q.receive(10, None), Ok(v) if v.len() == 1);
        ensure_matches!(q.receive(10, None), Ok(v) if v.is_empty());
        Ok(())
    });
    c.case("batch-receive-respects-max", || {
        let q = fresh("batch");
        for i in 0..5 {
            ok!(q.send(&Payload::Text(i.to_string())));
        }
        let first = ok!(q.receive(2, None));
        let rest = ok!(q.receive(10, None));
        ensure!(first.len() == 2 && rest.len() == 3);
        ensure!(text(&first[0]) == "0" && text(&rest[0]) == "2");
        Ok(())
    });
    c.case("receive-max-zero-is-clamped-to-one", || {
        let q = fresh("max-zero");
        ok!(q.send(&Payload::Text("a".into())));
        ok!(q.send(&Payload::Text("b".into())));
        ensure_matches!(q.receive(0, None), Ok(v) if v.len() == 1);
        Ok(())
    });
    c.case("redelivery-after-visibility-increments-attempt", || {
        let q = fresh("redeliver");
        ok!(q.send(&Payload::Text("x".into())));
        let first = ok!(q.receive(1, Some(40)));
        pause(60);
        let second = ok!(q.receive(1, Some(60_000)));
        ensure!(second.len() == 1 && second[0].attempt == 2);
        ensure!(second[0].receipt != first[0].receipt);
        Ok(())
    });
    c.case("stale-receipt-after-redelivery-is-rejected", || {
        let q = fresh("stale");
        ok!(q.send(&Payload::Text("x".into())));
        let first = ok!(q.receive(1, Some(40)));
        pause(60);
        let second = ok!(q.receive(1, Some(60_000)));
        ensure_matches!(q.ack(&first[0].receipt), Err(Error::StaleReceipt(_)));
        ensure_matches!(q.nack(&first[0].receipt), Err(Error::StaleReceipt(_)));
        // The stale ack deleted nothing: the current receipt still works.
        ok!(q.ack(&second[0].receipt));
        Ok(())
    });
    c.case("ack-deletes-the-message", || {
        let q = fresh("ack");
        ok!(q.send(&Payload::Text("x".into())));
        let got = ok!(q.receive(1, Some(40)));
        ok!(q.ack(&got[0].receipt));
        pause(60);
        ensure_matches!(q.receive(10, None), Ok(v) if v.is_empty());
        Ok(())
    });
    c.case("double-ack-is-ok", || {
        let q = fresh("double-ack");
        ok!(q.send(&Payload::Text("x".into())));
        let got = ok!(q.receive(1, None));
        ok!(q.ack(&got[0].receipt));
        ok!(q.ack(&got[0].receipt));
        ok!(q.nack(&got[0].receipt));
        Ok(())
    });
    c.case("malformed-receipt-is-a-no-op", || {
        let q = fresh("malformed");
        ok!(q.send(&Payload::Text("x".into())));
        let long = "9".repeat(500);
        for bad in ["", "garbage", "1", "1:", "1:not-a-uuid", ":", long.as_str()] {
            ok!(q.ack(bad));
            ok!(q.nack(bad));
        }
        // Nothing was deleted.
        ensure_matches!(q.receive(10, None), Ok(v) if v.len() == 1);
        Ok(())
    });
    c.case("nack-makes-visible-now-and-keeps-attempt", || {
        let q = fresh("nack");
        ok!(q.send(&Payload::Text("x".into())));
        let got = ok!(q.receive(1, Some(60_000)));
        ok!(q.nack(&got[0].receipt));
        let again = ok!(q.receive(1, Some(60_000)));
        ensure!(again.len() == 1, "not visible after nack");
        ensure!(again[0].attempt == 2, "attempt {}", again[0].attempt);
        Ok(())
    });
    c.case("send-batch-and-ack-batch", || {
        let q = fresh("batches");
        let ids = ok!(q.send_batch(&[
            Payload::Text("a".into()),
            Payload::Json("[1]".into()),
            Payload::Text("c".into())
        ]));
        ensure!(
            ids.len() == 3 && ids[0] < ids[1] && ids[1] < ids[2],
            "{ids:?}"
        );
        let got = ok!(q.receive(2, None));
        let receipts = vec![
            got[0].receipt.clone(),
            got[1].receipt.clone(),
            "garbage".to_string(),
        ];
        let outcomes = ok!(q.ack_batch(&receipts));
        ensure!(
            outcomes == [AckOutcome::Acked, AckOutcome::Acked, AckOutcome::Gone],
            "{outcomes:?}"
        );
        ensure_matches!(q.receive(10, None), Ok(v) if v.len() == 1 && text(&v[0]) == "c");
        Ok(())
    });
    c.case("ack-batch-reports-stale-receipts-and-acks-the-rest", || {
        let q = fresh("batch-stale");
        ok!(q.send_batch(&[Payload::Text("x".into()), Payload::Text("y".into())]));
        let first = ok!(q.receive(1, Some(40)));
        pause(60);
        let again = ok!(q.receive(2, Some(60_000)));
        ensure!(again.len() == 2);
        let outcomes = ok!(q.ack_batch(&[first[0].receipt.clone(), again[1].receipt.clone()]));
        ensure!(
            outcomes == [AckOutcome::Stale, AckOutcome::Acked],
            "{outcomes:?}"
        );
        ok!(q.ack(&again[0].receipt));
        Ok(())
    });
    c.case("send-batch-is-all-or-nothing", || {
        let q = fresh("batch-atomic");
        ensure_matches!(
            q.send_batch(&[Payload::Text("ok".into()), Payload::Json("{".into())]),
            Err(Error::InvalidArgument(_))
        );
        let too_many: Vec<Payload> = (0..1001).map(|i| Payload::Text(i.to_string())).collect();
        ensure_matches!(q.send_batch(&too_many), Err(Error::InvalidArgument(_)));
        ensure_matches!(q.receive(10, None), Ok(v) if v.is_empty());
        Ok(())
    });
    c.case(
        "receive-wait-returns-at-once-when-a-message-is-there",
        || {
            let q = fresh("wait-now");
            ok!(q.send(&Payload::Text("x".into())));
            ensure_matches!(q.receive_wait(10, None, 60_000), Ok(v) if v.len() == 1);
            Ok(())
        },
    );
    c.case("receive-wait-times-out-with-an-empty-list", || {
        let q = fresh("wait-timeout");
        ensure_matches!(q.receive_wait(10, None, 30), Ok(v) if v.is_empty());
        Ok(())
    });
    c.case("purge-removes-visible-and-in-flight", || {
        let q = fresh("purge");
        ok!(q.send(&Payload::Text("a".into())));
        ok!(q.send(&Payload::Text("b".into())));
        let inflight = ok!(q.receive(1, Some(40)));
        ok!(q.purge());
        pause(60);
        ensure_matches!(q.receive(10, None), Ok(v) if v.is_empty());
        // The purged message's receipt acks as gone.
        ok!(q.ack(&inflight[0].receipt));
        Ok(())
    });
    c.case("payload-over-64kib-is-payload-too-large", || {
        let q = fresh("too-large");
        let over = "x".repeat(65_537);
        ensure_matches!(q.send(&Payload::Text(over.clone())), Err(Error::PayloadTooLarge(t)) if t.size == 65_537 && t.limit == 65_536);
        let json_over = format!("\"{}\"", "y".repeat(65_535));
        ensure_matches!(q.send(&Payload::Json(json_over)), Err(Error::PayloadTooLarge(_)));
        ensure_matches!(q.receive(10, None), Ok(v) if v.is_empty());
        ok!(q.send(&Payload::Text("x".repeat(65_536))));
        ensure_matches!(q.receive(10, None), Ok(v) if v.len() == 1 && text(&v[0]).len() == 65_536);
        Ok(())
    });
    c.case("invalid-json-is-invalid-argument", || {
        let q = fresh("bad-json");
        for bad in ["", "{", "{\"a\":}", "not json", "[1,]"] {
            ensure_matches!(
                q.send(&Payload::Json(bad.into())),
                Err(Error::InvalidArgument(_))
            );
        }
        ensure_matches!(q.receive(10, None), Ok(v) if v.is_empty());
        Ok(())
    });
    c.case("valid-json-beyond-a-value-parser-is-accepted", || {
        let q = fresh("odd-json");
        let deep = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
        for good in ["1e999", "\"\\ud800\"", deep.as_str()] {
            ok!(q.send(&Payload::Json(good.into())));
        }
        let got = ok!(q.receive(10, None));
        ensure!(got.len() == 3);
        ensure!(text(&got[1]) == "\"\\ud800\"", "stored as sent");
        Ok(())
    });
    c.case("receipt-never-issued-by-this-queue", || {
        let q = fresh("foreign-receipt");
        let other = fresh("foreign-receipt-other");
        ok!(q.send(&Payload::Text("x".into())));
        ok!(other.send(&Payload::Text("y".into())));
        let mine = ok!(q.receive(1, Some(60_000)));
        let theirs = ok!(other.receive(1, Some(60_000)));
        // Same id (1) in both queues: the other queue's receipt is not this
        // message's current one, so it is stale here and changes nothing.
        ensure!(mine[0].receipt.split(':').next() == theirs[0].receipt.split(':').next());
        ensure_matches!(q.ack(&theirs[0].receipt), Err(Error::StaleReceipt(_)));
        let made_up = format!("{}:00000000-0000-4000-8000-000000000000", 1);
        ensure_matches!(q.nack(&made_up), Err(Error::StaleReceipt(_)));
        // A well-formed receipt of a message that does not exist: no-op.
        ok!(q.ack("999:00000000-0000-4000-8000-000000000000"));
        ok!(q.ack(&mine[0].receipt));
        ok!(other.ack(&theirs[0].receipt));
        Ok(())
    });
    c.case("zero-visibility-is-invalid-argument", || {
        let q = fresh("zero-vis");
        ok!(q.send(&Payload::Text("x".into())));
        ensure_matches!(q.receive(1, Some(0)), Err(Error::InvalidArgument(_)));
        ensure_matches!(q.receive(1, Some(u64::MAX)), Err(Error::InvalidArgument(_)));
        // Nothing was claimed.
        ensure_matches!(q.receive(1, None), Ok(v) if v.len() == 1 && v[0].attempt == 1);
        Ok(())
    });
    c.case("queues-are-isolated", || {
        let a = fresh("iso-a");
        let b = fresh("iso-b");
        ok!(a.send(&Payload::Text("for a".into())));
        ensure_matches!(b.receive(10, None), Ok(v) if v.is_empty());
        ensure_matches!(a.receive(10, None), Ok(v) if v.len() == 1);
        Ok(())
    });
    c.case("bad-queue-names-are-invalid-name", || {
        for bad in &alk_guest::bad_names() {
            ensure_matches!(Queue::open(bad).map(|_| ()), Err(Error::InvalidName(_)));
        }
        Ok(())
    });
    c.case("reserved-queue-name-is-reserved-name", || {
        ensure_matches!(
            Queue::open("__alkstore_outbox").map(|_| ()),
            Err(Error::ReservedName(_))
        );
        Ok(())
    });
    c.case("priority-is-claimed-first", || {
        let q = fresh("priority");
        for (t, p) in [("low", 0), ("high", 9), ("mid", 5), ("low2", 0)] {
            ok!(q.send_with(
                &Payload::Text(t.into()),
                &SendOptions {
                    priority: Some(p),
                    ..plain()
                }
            ));
        }
        let got = ok!(q.claim(take(10)));
        let order: Vec<&str> = got.iter().map(job_text).collect();
        ensure!(order == ["high", "mid", "low", "low2"], "{order:?}");
        ensure!(got[0].priority == 9 && got[0].attempt == 1);
        Ok(())
    });
    c.case("min-priority-leaves-lower-priorities-alone", || {
        let q = fresh("floor");
        ok!(q.send_with(&Payload::Text("low".into()), &SendOptions { priority: Some(1), ..plain() }));
        ok!(q.send_with(&Payload::Text("urgent".into()), &SendOptions { priority: Some(5), ..plain() }));
        let got = ok!(q.claim(ClaimOptions { min_priority: Some(5), ..take(10) }));
        ensure!(got.len() == 1 && job_text(&got[0]) == "urgent");
        ensure_matches!(q.claim(ClaimOptions { min_priority: Some(5), ..take(10) }), Ok(v) if v.is_empty());
        ensure_matches!(q.claim(take(10)), Ok(v) if v.len() == 1 && job_text(&v[0]) == "low");
        Ok(())
    });
    c.case("delayed-message-is-claimed-when-due", || {
        let q = fresh("delay");
        let id = ok!(q.send_with(&Payload::Text("later".into()), &SendOptions { delay_ms: Some(50), ..plain() }));
        ensure_matches!(q.claim(take(1)), Ok(v) if v.is_empty());
        ensure_matches!(q.get_job(id), Ok(Some(j)) if j.state == JobState::Delayed && j.attempt == 0);
        pause(80);
        ensure_matches!(q.get_job(id), Ok(Some(j)) if j.state == JobState::Waiting);
        ensure_matches!(q.claim(take(1)), Ok(v) if v.len() == 1 && v[0].id == id);
        ensure_matches!(q.get_job(id), Ok(Some(j)) if j.state == JobState::InFlight);
        // A run-at time already past is due at once.
        ok!(q.send_with(&Payload::Text("now".into()), &SendOptions { run_at_ms: Some(1), ..plain() }));
        ensure_matches!(q.claim(take(1)), Ok(v) if v.len() == 1);
        Ok(())
    });
    c.case("claim-wait-returns-a-delayed-message-when-due", || {
        let q = fresh("claim-wait");
        ok!(q.send_with(&Payload::Text("soon".into()), &SendOptions { delay_ms: Some(60), ..plain() }));
        let got = ok!(q.claim(ClaimOptions { wait_ms: Some(5_000), ..take(1) }));
        ensure!(got.len() == 1 && job_text(&got[0]) == "soon");
        ensure_matches!(q.claim(ClaimOptions { wait_ms: Some(30), ..take(1) }), Ok(v) if v.is_empty());
        Ok(())
    });
    c.case("retry-then-dead-letters-then-redrive", || {
        let q = fresh("retry");
        let opts = SendOptions {
            max_attempts: Some(2),
            ..plain()
        };
        let id = ok!(q.send_with(&Payload::Text("job".into()), &opts));
        let first = ok!(q.claim(take(1)));
        ensure!(first[0].max_attempts == Some(2));
        ensure_matches!(
            q.retry(&first[0].receipt, "e1", Some(0)),
            Ok(Retried::Scheduled(_))
        );
        // The retried delivery's receipt is over.
        ensure_matches!(q.ack(&first[0].receipt), Err(Error::StaleReceipt(_)));
        let second = ok!(q.claim(take(1)));
        ensure!(second.len() == 1 && second[0].attempt == 2);
        ensure_matches!(
            q.retry(&second[0].receipt, "e2", Some(0)),
            Ok(Retried::DeadLettered)
        );
        ensure_matches!(q.claim(take(1)), Ok(v) if v.is_empty());
        let dead = ok!(q.get_job(id)).ok_or("no job")?;
        ensure!(
            dead.state == JobState::Dead && dead.attempt == 2,
            "{dead:?}"
        );
        ensure!(dead.last_error.as_deref() == Some("e2") && dead.died_at_ms.is_some());
        ensure_matches!(q.dead_letters(None, 10), Ok(v) if v.len() == 1 && v[0].id == id);
        let back = ok!(q.redrive(&[id, id + 1_000]));
        ensure!(back.len() == 2 && back[1].is_none(), "{back:?}");
        let new = back[0].ok_or("not redriven")?;
        ensure!(new > id, "{new} after {id}");
        ensure_matches!(q.get_job(id), Ok(None));
        let again = ok!(q.claim(take(1)));
        ensure!(again.len() == 1 && again[0].id == new && again[0].attempt == 1);
        ensure!(job_text(&again[0]) == "job" && again[0].max_attempts == Some(2));
        ok!(q.ack(&again[0].receipt));
        ensure_matches!(q.get_job(new), Ok(None));
        Ok(())
    });
    c.case("retry-without-delay-follows-the-backoff-curve", || {
        let q = fresh("backoff");
        let opts = SendOptions {
            backoff_base_ms: Some(1_000),
            ..plain()
        };
        ok!(q.send_with(&Payload::Text("x".into()), &opts));
        let d = ok!(q.claim(take(1)));
        let before = now_ms();
        let at = match ok!(q.retry(&d[0].receipt, "boom", None)) {
            Retried::Scheduled(at) => at,
            other => return Err(format!("{other:?}")),
        };
        let after = now_ms();
        // Attempt 1 of base 1,000: half of 1,000 plus up to the other half.
        ensure!(
            at >= before + 500 && at <= after + 1_000,
            "{before} {at} {after}"
        );
        ensure_matches!(q.claim(take(1)), Ok(v) if v.is_empty());
        Ok(())
    });
    c.case("fail-goes-straight-to-the-dead-letters", || {
        let q = fresh("fail");
        let id = ok!(q.send(&Payload::Text("bad".into())));
        let d = ok!(q.claim(take(1)));
        ensure_matches!(q.fail(&d[0].receipt, "cannot parse"), Ok(true));
        ensure_matches!(q.fail(&d[0].receipt, "again"), Ok(false));
        ensure_matches!(q.get_job(id), Ok(Some(j)) if j.state == JobState::Dead && j.last_error.as_deref() == Some("cannot parse"));
        ensure_matches!(q.purge_dead_letters(), Ok(1));
        ensure_matches!(q.get_job(id), Ok(None));
        Ok(())
    });
    c.case("heartbeat-extends-a-live-delivery-only", || {
        let q = fresh("heartbeat");
        ok!(q.send(&Payload::Text("long".into())));
        // Live until the heartbeat however loaded the machine is.
        let d = ok!(q.claim(ClaimOptions {
            visibility_ms: Some(2_000),
            ..take(1)
        }));
        ensure_matches!(q.heartbeat(&d[0].receipt, 10_000), Ok(true));
        pause(60);
        // Still hidden: the deadline moved.
        ensure_matches!(q.claim(take(1)), Ok(v) if v.is_empty());
        ensure_matches!(q.heartbeat(&d[0].receipt, 40), Ok(true));
        pause(60);
        // The deadline passed: refused, and the message is due again.
        ensure_matches!(q.heartbeat(&d[0].receipt, 10_000), Ok(false));
        let again = ok!(q.claim(take(1)));
        ensure!(again.len() == 1 && again[0].attempt == 2);
        ensure_matches!(q.heartbeat(&d[0].receipt, 100), Err(Error::StaleReceipt(_)));
        ensure_matches!(
            q.heartbeat(&again[0].receipt, 0),
            Err(Error::InvalidArgument(_))
        );
        Ok(())
    });
    c.case("a-lapsed-last-attempt-goes-to-the-dead-letters", || {
        let q = fresh("lapse");
        let id = ok!(q.send_with(
            &Payload::Text("slow".into()),
            &SendOptions {
                max_attempts: Some(1),
                ..plain()
            }
        ));
        ok!(q.claim(ClaimOptions {
            visibility_ms: Some(40),
            ..take(1)
        }));
        pause(60);
        ensure_matches!(q.claim(take(1)), Ok(v) if v.is_empty());
        ensure_matches!(q.get_job(id), Ok(Some(j)) if j.state == JobState::Dead && j.attempt == 1);
        Ok(())
    });
    c.case("expired-messages-go-to-the-dead-letters", || {
        let q = fresh("expiry");
        // Long enough that both are claimed before they expire however
        // loaded the machine is; short enough to wait for.
        let brief = SendOptions {
            expires_in_ms: Some(2_000),
            ..plain()
        };
        let waiting = ok!(q.send_with(&Payload::Text("a".into()), &brief));
        let held = ok!(q.send_with(&Payload::Text("b".into()), &brief));
        let d = ok!(q.claim(ClaimOptions {
            visibility_ms: Some(60_000),
            ..take(1)
        }));
        ensure!(d.len() == 1 && d[0].id == waiting);
        let h = ok!(q.claim(ClaimOptions {
            visibility_ms: Some(60_000),
            ..take(1)
        }));
        ensure!(h.len() == 1 && h[0].id == held, "{h:?}");
        ok!(q.nack(&d[0].receipt));
        pause(2_100);
        // The due one is buried by the claim, the one in flight by the sweep.
        ensure_matches!(q.claim(take(10)), Ok(v) if v.is_empty());
        ensure_matches!(q.get_job(waiting), Ok(Some(j)) if j.state == JobState::Dead);
        ensure_matches!(q.sweep_expired(), Ok(1));
        ensure_matches!(q.get_job(held), Ok(Some(j)) if j.state == JobState::Dead);
        Ok(())
    });
    c.case("cancel-deletes-in-any-state", || {
        let q = fresh("cancel");
        let a = ok!(q.send(&Payload::Text("a".into())));
        let b = ok!(q.send_with(
            &Payload::Text("b".into()),
            &SendOptions {
                delay_ms: Some(60_000),
                ..plain()
            }
        ));
        ensure_matches!(q.cancel(a), Ok(true));
        ensure_matches!(q.cancel(b), Ok(true));
        ensure_matches!(q.cancel(a), Ok(false));
        ensure_matches!(q.get_job(a), Ok(None));
        ensure_matches!(q.claim(take(10)), Ok(v) if v.is_empty());
        Ok(())
    });
    c.case("groups-have-one-message-in-flight-in-send-order", || {
        let q = fresh("groups");
        let g = |k: &str| SendOptions {
            group: Some(k.into()),
            ..plain()
        };
        ok!(q.send_with(&Payload::Text("g1".into()), &g("g")));
        ok!(q.send_with(&Payload::Text("g2".into()), &g("g")));
        ok!(q.send_with(&Payload::Text("h1".into()), &g("h")));
        let got = ok!(q.claim(take(10)));
        let order: Vec<&str> = got.iter().map(job_text).collect();
        ensure!(order == ["g1", "h1"], "{order:?}");
        ensure!(got[0].group.as_deref() == Some("g"));
        ensure_matches!(q.claim(take(10)), Ok(v) if v.is_empty());
        ok!(q.ack(&got[0].receipt));
        ensure_matches!(q.claim(take(10)), Ok(v) if v.len() == 1 && job_text(&v[0]) == "g2");
        Ok(())
    });
    c.case("groups-take-turns", || {
        let q = fresh("turns");
        for (k, n) in [("big", 4), ("a", 1), ("b", 1)] {
            for i in 0..n {
                ok!(q.send_with(
                    &Payload::Text(format!("{k}{i}")),
                    &SendOptions {
                        group: Some(k.into()),
                        ..plain()
                    }
                ));
            }
        }
        let mut order = Vec::new();
        for _ in 0..6 {
            let got = ok!(q.claim(take(1)));
            ensure!(got.len() == 1, "{order:?}");
            order.push(job_text(&got[0]).to_string());
            ok!(q.ack(&got[0].receipt));
        }
        ensure!(
            order == ["big0", "a0", "b0", "big1", "big2", "big3"],
            "{order:?}"
        );
        Ok(())
    });
    c.case("bad-send-options-are-invalid-argument", || {
        let q = fresh("bad-options");
        let bad = [
            SendOptions {
                delay_ms: Some(1),
                run_at_ms: Some(1),
                ..plain()
            },
            SendOptions {
                max_attempts: Some(0),
                ..plain()
            },
            SendOptions {
                max_attempts: Some(10_001),
                ..plain()
            },
            SendOptions {
                backoff_base_ms: Some(0),
                ..plain()
            },
            SendOptions {
                expires_in_ms: Some(0),
                ..plain()
            },
            SendOptions {
                delay_ms: Some(u64::MAX),
                ..plain()
            },
            SendOptions {
                run_at_ms: Some(u64::MAX),
                ..plain()
            },
            SendOptions {
                group: Some(String::new()),
                ..plain()
            },
            SendOptions {
                group: Some("g".repeat(257)),
                ..plain()
            },
        ];
        for o in &bad {
            ensure_matches!(
                q.send_with(&Payload::Text("x".into()), o),
                Err(Error::InvalidArgument(_))
            );
        }
        ensure_matches!(q.claim(take(10)), Ok(v) if v.is_empty());
        ensure_matches!(q.dead_letters(None, 0), Ok(v) if v.is_empty());
        ensure_matches!(q.redrive(&vec![1; 1_001]), Err(Error::InvalidArgument(_)));
        Ok(())
    });
    c.case("stats-count-messages-by-state", || {
        let q = fresh("stats");
        let empty = ok!(q.stats());
        ensure!(
            (
                empty.waiting,
                empty.delayed,
                empty.in_flight,
                empty.dead,
                empty.groups
            ) == (0, 0, 0, 0, 0)
                && empty.oldest_waiting_enqueued_at_ms.is_none(),
            "{empty:?}"
        );
        let before = now_ms();
        ok!(q.send(&Payload::Text("a".into())));
        ok!(q.send(&Payload::Text("b".into())));
        ok!(q.send_with(
            &Payload::Text("later".into()),
            &SendOptions {
                delay_ms: Some(3_600_000),
                ..plain()
            }
        ));
        let grouped = SendOptions {
            group: Some("g".into()),
            ..plain()
        };
        ok!(q.send_with(&Payload::Text("g1".into()), &grouped));
        ok!(q.send_with(&Payload::Text("g2".into()), &grouped));
        let s = ok!(q.stats());
        ensure!(
            (
                s.waiting,
                s.delayed,
                s.in_flight,
                s.dead,
                s.groups,
                s.groups_in_flight
            ) == (4, 1, 0, 0, 1, 0),
            "{s:?}"
        );
        ensure!(
            s.oldest_waiting_enqueued_at_ms
                .is_some_and(|t| t + 1_000 >= before && t <= now_ms() + 1_000),
            "{s:?}"
        );
        // The claim takes "a", "b" and the group's first message; the
        // group's second waits behind it.
        let jobs = ok!(q.claim(take(10)));
        ensure!(jobs.len() == 3, "{jobs:?}");
        let s = ok!(q.stats());
        ensure!(
            (s.waiting, s.delayed, s.in_flight, s.groups_in_flight) == (1, 1, 3, 1),
            "{s:?}"
        );
        for j in &jobs {
            ensure!(ok!(q.fail(&j.receipt, "no")));
        }
        let s = ok!(q.stats());
        ensure!(
            (
                s.waiting,
                s.delayed,
                s.in_flight,
                s.dead,
                s.groups_in_flight
            ) == (1, 1, 0, 3, 0),
            "{s:?}"
        );
        ok!(q.purge_dead_letters());
        ensure_matches!(q.stats(), Ok(s) if s.dead == 0 && s.waiting == 1 && s.delayed == 1);
        Ok(())
    });
    c.case("group-concurrency-hands-out-n-in-send-order", || {
        let q = fresh("group-n");
        ensure_matches!(q.limits(), Ok(l) if same(&l, &no_limits()));
        let limits = QueueLimits {
            group_concurrency: 3,
            ..no_limits()
        };
        ok!(q.set_limits(limits));
        ensure_matches!(q.limits(), Ok(l) if same(&l, &limits));
        let g = SendOptions {
            group: Some("g".into()),
            ..plain()
        };
        let mut sent = Vec::new();
        for i in 0..5 {
            sent.push(ok!(q.send_with(&Payload::Text(format!("g{i}")), &g)));
        }
        let got = ok!(q.claim(take(10)));
        ensure!(ids(&got) == sent[..3], "{:?} of {sent:?}", ids(&got));
        ensure_matches!(q.claim(take(10)), Ok(v) if v.is_empty());
        ok!(q.ack(&got[0].receipt));
        let next = ok!(q.claim(take(10)));
        ensure!(ids(&next) == [sent[3]], "{:?} of {sent:?}", ids(&next));
        Ok(())
    });
    c.case("max-in-flight-caps-the-queue", || {
        let q = fresh("max-in-flight");
        let limits = QueueLimits {
            max_in_flight: Some(2),
            ..no_limits()
        };
        ok!(q.set_limits(limits));
        ensure_matches!(q.limits(), Ok(l) if same(&l, &limits));
        let mut sent = Vec::new();
        for i in 0..4 {
            sent.push(ok!(q.send(&Payload::Text(format!("m{i}")))));
        }
        let got = ok!(q.claim(take(10)));
        ensure!(ids(&got) == sent[..2], "{:?} of {sent:?}", ids(&got));
        ensure_matches!(q.claim(take(10)), Ok(v) if v.is_empty());
        ok!(q.ack(&got[1].receipt));
        let next = ok!(q.claim(take(10)));
        ensure!(ids(&next) == [sent[2]], "{:?} of {sent:?}", ids(&next));
        ensure_matches!(
            q.set_limits(QueueLimits {
                max_in_flight: Some(0),
                ..no_limits()
            }),
            Err(Error::InvalidArgument(_))
        );
        ensure_matches!(q.limits(), Ok(l) if same(&l, &limits));
        Ok(())
    });
    c.case("rate-limit-grants-capacity-then-waits", || {
        let q = fresh("rate");
        ensure_matches!(q.try_take(1, None), Err(Error::InvalidArgument(_)));
        let rate = RateLimit {
            capacity: 3,
            refill: 1,
            interval_ms: 60_000,
        };
        let limits = QueueLimits {
            rate: Some(rate),
            ..no_limits()
        };
        ok!(q.set_limits(limits));
        ensure_matches!(q.limits(), Ok(l) if same(&l, &limits));
        let mut sent = Vec::new();
        for i in 0..5 {
            sent.push(ok!(q.send(&Payload::Text(format!("r{i}")))));
        }
        let got = ok!(q.claim(take(10)));
        ensure!(ids(&got) == sent[..3], "{:?} of {sent:?}", ids(&got));
        ensure_matches!(q.claim(take(10)), Ok(v) if v.is_empty());
        ensure_matches!(q.try_take(1, None), Ok(Taken::WaitMs(ms)) if ms > 0 && ms <= 60_000);
        ensure_matches!(q.try_take(0, None), Err(Error::InvalidArgument(_)));
        ensure_matches!(q.try_take(4, None), Err(Error::InvalidArgument(_)));
        ensure_matches!(
            q.set_limits(QueueLimits {
                group_concurrency: 0,
                ..limits
            }),
            Err(Error::InvalidArgument(_))
        );
        ensure_matches!(
            q.set_limits(QueueLimits {
                rate: Some(RateLimit {
                    interval_ms: 0,
                    ..rate
                }),
                ..limits
            }),
            Err(Error::InvalidArgument(_))
        );
        ensure_matches!(
            q.set_limits(QueueLimits {
                rate_per_group: true,
                ..no_limits()
            }),
            Err(Error::InvalidArgument(_))
        );
        ensure_matches!(q.limits(), Ok(l) if same(&l, &limits));
        Ok(())
    });
    c.case("unique-send-returns-the-live-job", || {
        let q = fresh("unique");
        let first = ok!(q.send_unique(&Payload::Text("a".into()), &plain(), &key("k", None)));
        ensure!(!first.duplicate, "{first:?}");
        let again = ok!(q.send_unique(&Payload::Text("b".into()), &plain(), &key("k", None)));
        ensure!(
            again.duplicate && again.id == first.id,
            "{first:?} then {again:?}"
        );
        let got = ok!(q.claim(take(10)));
        ensure!(got.len() == 1 && job_text(&got[0]) == "a", "{got:?}");
        // In flight, the key is still held.
        let held = ok!(q.send_unique(&Payload::Text("c".into()), &plain(), &key("k", None)));
        ensure!(held.duplicate && held.id == first.id, "{held:?}");
        ok!(q.ack(&got[0].receipt));
        let free = ok!(q.send_unique(&Payload::Text("d".into()), &plain(), &key("k", None)));
        ensure!(
            !free.duplicate && free.id > first.id,
            "{first:?} then {free:?}"
        );
        // Held for an hour after the send, whatever becomes of the message.
        let hour = Some(3_600_000);
        let timed = ok!(q.send_unique(&Payload::Text("e".into()), &plain(), &key("t", hour)));
        ensure!(!timed.duplicate, "{timed:?}");
        ok!(q.cancel(free.id));
        let got = ok!(q.claim(take(10)));
        ensure!(ids(&got) == [timed.id], "{got:?}");
        ok!(q.ack(&got[0].receipt));
        let after = ok!(q.send_unique(&Payload::Text("f".into()), &plain(), &key("t", hour)));
        ensure!(
            after.duplicate && after.id == timed.id,
            "{timed:?} then {after:?}"
        );
        ensure_matches!(q.claim(take(10)), Ok(v) if v.is_empty());
        ensure_matches!(
            q.send_unique(&Payload::Text("g".into()), &plain(), &key("", None)),
            Err(Error::InvalidArgument(_))
        );
        ensure_matches!(
            q.send_unique(
                &Payload::Text("g".into()),
                &plain(),
                &key(&"k".repeat(257), None)
            ),
            Err(Error::InvalidArgument(_))
        );
        ensure_matches!(q.claim(take(10)), Ok(v) if v.is_empty());
        Ok(())
    });
    c.case("complete-keeps-a-result", || {
        let q = fresh("results");
        let id = ok!(q.send(&Payload::Text("work".into())));
        let got = ok!(q.claim(take(1)));
        ensure!(ids(&got) == [id], "{got:?}");
        let before = now_ms();
        let result = Payload::Json("{\"pages\":3}".into());
        ensure_matches!(q.complete(&got[0].receipt, &result, None), Ok(true));
        let r = ok!(q.get_result(id)).ok_or("no result after complete")?;
        ensure!(
            r.id == id && matches!(&r.payload, Payload::Json(t) if t == "{\"pages\":3}"),
            "{r:?}"
        );
        ensure!(
            r.completed_at_ms + 1_000 >= before && r.completed_at_ms <= now_ms() + 1_000,
            "{r:?}"
        );
        ensure!(r.expires_at_ms == r.completed_at_ms + 86_400_000, "{r:?}");
        // Completing acknowledged the message.
        ensure_matches!(q.get_job(id), Ok(None));
        ensure_matches!(q.claim(take(10)), Ok(v) if v.is_empty());
        ensure_matches!(q.complete(&got[0].receipt, &result, None), Ok(false));
        ensure_matches!(q.delete_result(id), Ok(true));
        ensure_matches!(q.get_result(id), Ok(None));
        ensure_matches!(q.delete_result(id), Ok(false));
        // An oversized result, or a keep of 0, keeps nothing and leaves the
        // delivery in flight.
        let id = ok!(q.send(&Payload::Text("more".into())));
        let got = ok!(q.claim(take(1)));
        ensure_matches!(
            q.complete(&got[0].receipt, &Payload::Text("x".repeat(65_537)), None),
            Err(Error::PayloadTooLarge(t)) if t.size == 65_537 && t.limit == 65_536
        );
        ensure_matches!(
            q.complete(&got[0].receipt, &result, Some(0)),
            Err(Error::InvalidArgument(_))
        );
        ensure_matches!(q.get_result(id), Ok(None));
        ensure_matches!(q.get_job(id), Ok(Some(j)) if j.state == JobState::InFlight);
        ensure_matches!(q.complete(&got[0].receipt, &Payload::Text("x".repeat(65_536)), Some(60_000)), Ok(true));
        ensure_matches!(q.get_result(id), Ok(Some(r)) if r.expires_at_ms == r.completed_at_ms + 60_000);
        Ok(())
    });
    c.case("limiter-take-tokens", || {
        let name = format!("c{nonce}-limiter");
        let rate = RateLimit {
            capacity: 2,
            refill: 1,
            interval_ms: 60_000,
        };
        ensure_matches!(limiter::try_take(&name, 1, rate), Ok(Taken::Granted(1)));
        ensure_matches!(limiter::try_take(&name, 1, rate), Ok(Taken::Granted(0)));
        ensure_matches!(limiter::try_take(&name, 1, rate), Ok(Taken::WaitMs(ms)) if ms > 0 && ms <= 60_000);
        // Buckets are separate by name.
        let other = format!("c{nonce}-limiter-2");
        ensure_matches!(limiter::try_take(&other, 2, rate), Ok(Taken::Granted(0)));
        ensure_matches!(limiter::try_take(&name, 0, rate), Err(Error::InvalidArgument(_)));
        ensure_matches!(limiter::try_take(&name, 3, rate), Err(Error::InvalidArgument(_)));
        ensure_matches!(
            limiter::try_take(&name, 1, RateLimit { capacity: 0, ..rate }),
            Err(Error::InvalidArgument(_))
        );
        for bad in &alk_guest::bad_names() {
            ensure_matches!(limiter::try_take(bad, 1, rate), Err(Error::InvalidName(_)));
        }
        Ok(())
    });
    c.finish();
}
