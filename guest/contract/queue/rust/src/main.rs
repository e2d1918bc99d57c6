//! The `localqueue.v1` contract, checked from inside a Rust guest. See ../README.md.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alk_guest::queue::{AckOutcome, Message, Payload, Queue};
use alk_guest::{Contract, Error, ensure, ensure_matches, ok};

fn text(m: &Message) -> &str {
    match &m.payload {
        Payload::Text(t) | Payload::Json(t) => t,
    }
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
    c.finish();
}
