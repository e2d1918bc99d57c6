//! The `localstream.v1` contract, checked from inside a Rust guest. See ../README.md.

use std::time::{SystemTime, UNIX_EPOCH};

use alk_guest::stream::{self, Event, NewEvent, Transaction};
use alk_guest::{Contract, Error, ensure, ensure_matches, ok};

fn offsets(events: &[Event]) -> Vec<u64> {
    events.iter().map(|e| e.offset).collect()
}

fn main() {
    let mut c = Contract::new();
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    // Streams of their own per case: offsets in a fresh stream start at 1.
    let fresh = |case: &str| format!("c{nonce}-{case}");

    c.case("publish-returns-offsets-from-1-increasing", || {
        let s = fresh("offsets");
        ensure_matches!(stream::publish(&s, b"a"), Ok(1));
        ensure_matches!(stream::publish(&s, b"b"), Ok(2));
        ensure_matches!(stream::publish(&s, b"c"), Ok(3));
        Ok(())
    });
    c.case("offsets-are-per-stream", || {
        let (a, b) = (fresh("per-a"), fresh("per-b"));
        ok!(stream::publish(&a, b"x"));
        ok!(stream::publish(&a, b"y"));
        ensure_matches!(stream::publish(&b, b"z"), Ok(1));
        Ok(())
    });
    c.case("read-since-returns-every-field-in-offset-order", || {
        let s = fresh("read");
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        ok!(stream::publish(&s, b"one"));
        ok!(stream::publish(&s, &[0, 255, 7]));
        let events = ok!(stream::read_since(&s, 0, 100));
        ensure!(offsets(&events) == [1, 2]);
        ensure!(events[0].stream == s && events[0].key.is_none() && events[0].payload == b"one");
        ensure!(events[1].payload == [0, 255, 7]);
        ensure!(
            events[0].created_at + 5_000 >= before,
            "created-at {} before {before}",
            events[0].created_at
        );
        Ok(())
    });
    c.case("read-since-respects-offset-and-limit", || {
        let s = fresh("window");
        for i in 0..10u8 {
            ok!(stream::publish(&s, &[i]));
        }
        ensure!(offsets(&ok!(stream::read_since(&s, 3, 4))) == [4, 5, 6, 7]);
        ensure!(offsets(&ok!(stream::read_since(&s, 8, 100))) == [9, 10]);
        ensure_matches!(stream::read_since(&s, 10, 100), Ok(v) if v.is_empty());
        ensure_matches!(stream::read_since(&s, 0, 0), Ok(v) if offsets(&v) == [1]);
        Ok(())
    });
    c.case("unknown-stream-reads-empty", || {
        ensure_matches!(stream::read_since(&fresh("never"), 0, 10), Ok(v) if v.is_empty());
        ensure_matches!(stream::get_offset(&fresh("never"), "c"), Ok(None));
        Ok(())
    });
    c.case("keyed-and-unkeyed-interleave-in-one-order", || {
        let s = fresh("keys");
        ensure_matches!(stream::publish_with_key(&s, "user-1", b"a"), Ok(1));
        ensure_matches!(stream::publish(&s, b"b"), Ok(2));
        ensure_matches!(stream::publish_with_key(&s, "user-2", b"c"), Ok(3));
        ensure_matches!(stream::publish_with_key(&s, "user-1", b"d"), Ok(4));
        let events = ok!(stream::read_since(&s, 0, 100));
        let keys: Vec<Option<&str>> = events.iter().map(|e| e.key.as_deref()).collect();
        ensure!(
            keys == [Some("user-1"), None, Some("user-2"), Some("user-1")],
            "{keys:?}"
        );
        let user1: Vec<u64> = events
            .iter()
            .filter(|e| e.key.as_deref() == Some("user-1"))
            .map(|e| e.offset)
            .collect();
        ensure!(user1 == [1, 4]);
        Ok(())
    });
    c.case(
        "publish-batch-assigns-consecutive-offsets-all-or-nothing",
        || {
            let s = fresh("batch");
            ok!(stream::publish(&s, b"first"));
            let events = vec![
                NewEvent {
                    key: None,
                    payload: b"a".to_vec(),
                },
                NewEvent {
                    key: Some("k".into()),
                    payload: b"b".to_vec(),
                },
            ];
            ensure_matches!(stream::publish_batch(&s, &events), Ok(v) if v == [2, 3]);
            let bad = vec![
                NewEvent {
                    key: None,
                    payload: b"c".to_vec(),
                },
                NewEvent {
                    key: Some(String::new()),
                    payload: b"d".to_vec(),
                },
            ];
            ensure_matches!(
                stream::publish_batch(&s, &bad),
                Err(Error::InvalidArgument(_))
            );
            let read = ok!(stream::read_since(&s, 0, 10));
            ensure!(offsets(&read) == [1, 2, 3] && read[2].key.as_deref() == Some("k"));
            Ok(())
        },
    );
    c.case("next-wait-times-out-with-an-empty-list", || {
        let sub = ok!(stream::subscribe(&fresh("wait"), "c"));
        ensure_matches!(sub.next_wait(10, 30), Ok(v) if v.is_empty());
        Ok(())
    });
    c.case("empty-key-is-invalid-argument", || {
        let s = fresh("empty-key");
        ensure_matches!(
            stream::publish_with_key(&s, "", b"x"),
            Err(Error::InvalidArgument(_))
        );
        ensure_matches!(
            stream::publish_with_key(&s, "a\0b", b"x"),
            Err(Error::InvalidArgument(_))
        );
        ensure_matches!(
            stream::publish_with_key(&s, &"k".repeat(1025), b"x"),
            Err(Error::PayloadTooLarge(_))
        );
        ensure_matches!(stream::read_since(&s, 0, 10), Ok(v) if v.is_empty());
        Ok(())
    });
    c.case("oversized-payload-is-payload-too-large", || {
        let s = fresh("big");
        let big = vec![1u8; 1024 * 1024 + 1];
        ensure_matches!(stream::publish(&s, &big), Err(Error::PayloadTooLarge(t)) if t.limit == 1024 * 1024);
        ensure_matches!(stream::read_since(&s, 0, 10), Ok(v) if v.is_empty());
        ensure_matches!(stream::publish(&s, &big[1..]), Ok(1));
        Ok(())
    });
    c.case("save-and-get-offset", || {
        let s = fresh("save");
        for _ in 0..3 {
            ok!(stream::publish(&s, b"x"));
        }
        ensure_matches!(stream::get_offset(&s, "worker"), Ok(None));
        ok!(stream::save_offset(&s, "worker", 2));
        ensure_matches!(stream::get_offset(&s, "worker"), Ok(Some(2)));
        ensure_matches!(stream::get_offset(&s, "other-worker"), Ok(None));
        Ok(())
    });
    c.case("saves-are-monotone", || {
        let s = fresh("monotone");
        for _ in 0..5 {
            ok!(stream::publish(&s, b"x"));
        }
        ok!(stream::save_offset(&s, "w", 4));
        ok!(stream::save_offset(&s, "w", 1));
        ensure_matches!(stream::get_offset(&s, "w"), Ok(Some(4)));
        ok!(stream::save_offset(&s, "w", 5));
        ensure_matches!(stream::get_offset(&s, "w"), Ok(Some(5)));
        Ok(())
    });
    c.case("save-beyond-last-offset-is-invalid-argument", || {
        let s = fresh("beyond");
        ok!(stream::publish(&s, b"x"));
        ensure_matches!(
            stream::save_offset(&s, "w", 2),
            Err(Error::InvalidArgument(_))
        );
        ensure_matches!(
            stream::save_offset(&fresh("empty-stream"), "w", 1),
            Err(Error::InvalidArgument(_))
        );
        ensure_matches!(stream::get_offset(&s, "w"), Ok(None));
        Ok(())
    });
    c.case("trim-deletes-through-the-horizon-and-keeps-offsets", || {
        let s = fresh("trim");
        for _ in 0..6 {
            ok!(stream::publish(&s, b"x"));
        }
        ensure_matches!(stream::trim_to(&s, 3), Ok(3));
        ensure!(offsets(&ok!(stream::read_since(&s, 0, 100))) == [4, 5, 6]);
        ensure_matches!(stream::trim_to(&s, 3), Ok(0));
        ensure_matches!(stream::trim_to(&fresh("never-trimmed"), 10), Ok(0));
        Ok(())
    });
    c.case(
        "read-below-the-horizon-resumes-at-the-first-remaining-event",
        || {
            let s = fresh("below");
            for _ in 0..6 {
                ok!(stream::publish(&s, b"x"));
            }
            ok!(stream::trim_to(&s, 4));
            ensure!(offsets(&ok!(stream::read_since(&s, 2, 1))) == [5]);
            Ok(())
        },
    );
    c.case("saved-offset-below-the-horizon-stays-valid", || {
        let s = fresh("saved-below");
        for _ in 0..6 {
            ok!(stream::publish(&s, b"x"));
        }
        ok!(stream::save_offset(&s, "slow", 2));
        ok!(stream::trim_to(&s, 4));
        ensure_matches!(stream::get_offset(&s, "slow"), Ok(Some(2)));
        let sub = ok!(stream::subscribe(&s, "slow"));
        ensure!(offsets(&ok!(sub.next(100))) == [5, 6]);
        Ok(())
    });
    c.case("offsets-are-never-reused-after-trim", || {
        let s = fresh("no-reuse");
        for _ in 0..3 {
            ok!(stream::publish(&s, b"x"));
        }
        ok!(stream::trim_to(&s, 3));
        ensure_matches!(stream::publish(&s, b"y"), Ok(4));
        Ok(())
    });
    c.case("subscribe-replays-from-the-saved-offset", || {
        let s = fresh("replay");
        for _ in 0..5 {
            ok!(stream::publish(&s, b"x"));
        }
        ok!(stream::save_offset(&s, "c", 2));
        let sub = ok!(stream::subscribe(&s, "c"));
        ensure!(sub.position() == 2);
        ensure!(offsets(&ok!(sub.next(2))) == [3, 4]);
        ensure!(offsets(&ok!(sub.next(100))) == [5]);
        ensure!(sub.position() == 5);
        let fresh_consumer = ok!(stream::subscribe(&s, "new"));
        ensure!(offsets(&ok!(fresh_consumer.next(100))) == [1, 2, 3, 4, 5]);
        Ok(())
    });
    c.case(
        "subscription-yields-new-events-and-never-saves-by-itself",
        || {
            let s = fresh("live");
            ok!(stream::publish(&s, b"a"));
            let sub = ok!(stream::subscribe(&s, "c"));
            ensure!(offsets(&ok!(sub.next(100))) == [1]);
            ensure_matches!(sub.next(100), Ok(v) if v.is_empty());
            ok!(stream::publish(&s, b"b"));
            ensure!(offsets(&ok!(sub.next(100))) == [2]);
            ensure_matches!(stream::get_offset(&s, "c"), Ok(None));
            ok!(sub.save());
            ensure_matches!(stream::get_offset(&s, "c"), Ok(Some(2)));
            Ok(())
        },
    );
    c.case(
        "transaction-commit-applies-publishes-and-saves-together",
        || {
            let (input, output) = (fresh("tx-in"), fresh("tx-out"));
            ok!(stream::publish(&input, b"order-1"));
            let tx = Transaction::new();
            ensure_matches!(tx.publish(&output, b"invoice-1"), Ok(1));
            ensure_matches!(tx.publish_with_key(&output, "order-1", b"receipt-1"), Ok(2));
            ok!(tx.save_offset(&input, "billing", 1));
            ok!(tx.commit());
            ensure!(offsets(&ok!(stream::read_since(&output, 0, 10))) == [1, 2]);
            ensure_matches!(stream::get_offset(&input, "billing"), Ok(Some(1)));
            Ok(())
        },
    );
    c.case(
        "transaction-dropped-without-commit-rolls-back-event-and-save",
        || {
            let (input, output) = (fresh("drop-in"), fresh("drop-out"));
            ok!(stream::publish(&input, b"x"));
            {
                let tx = Transaction::new();
                ok!(tx.publish(&output, b"ghost"));
                ok!(tx.save_offset(&input, "w", 1));
            }
            ensure_matches!(stream::read_since(&output, 0, 10), Ok(v) if v.is_empty());
            ensure_matches!(stream::get_offset(&input, "w"), Ok(None));
            // The rolled-back offset is free again: nothing was ever published.
            ensure_matches!(stream::publish(&output, b"real"), Ok(1));
            Ok(())
        },
    );
    c.case("transaction-rollback-discards-everything", || {
        let s = fresh("rollback");
        let tx = Transaction::new();
        ok!(tx.publish(&s, b"ghost"));
        tx.rollback();
        ensure_matches!(tx.commit(), Err(Error::InvalidArgument(_)));
        ensure_matches!(stream::read_since(&s, 0, 10), Ok(v) if v.is_empty());
        Ok(())
    });
    c.case("transaction-refusals-leave-it-usable", || {
        let s = fresh("tx-refusal");
        let tx = Transaction::new();
        ok!(tx.publish(&s, b"kept"));
        ensure_matches!(
            tx.publish_with_key(&s, "", b"x"),
            Err(Error::InvalidArgument(_))
        );
        ensure_matches!(tx.save_offset(&s, "w", 99), Err(Error::InvalidArgument(_)));
        ensure_matches!(
            tx.publish("__alkstore_x", b"x"),
            Err(Error::ReservedName(_))
        );
        ok!(tx.commit());
        ensure!(offsets(&ok!(stream::read_since(&s, 0, 10))) == [1]);
        Ok(())
    });
    c.case("empty-transaction-commits", || {
        ok!(Transaction::new().commit());
        Ok(())
    });
    c.case("rollback-of-an-unused-transaction-finishes-it", || {
        let s = fresh("unused-rollback");
        let tx = Transaction::new();
        tx.rollback();
        ensure_matches!(tx.publish(&s, b"late"), Err(Error::InvalidArgument(_)));
        ensure_matches!(tx.commit(), Err(Error::InvalidArgument(_)));
        ensure_matches!(stream::read_since(&s, 0, 10), Ok(v) if v.is_empty());
        Ok(())
    });
    c.case("bad-stream-names-are-invalid-name", || {
        for bad in &alk_guest::bad_names() {
            ensure_matches!(stream::publish(bad, b"x"), Err(Error::InvalidName(_)));
            ensure_matches!(stream::read_since(bad, 0, 1), Err(Error::InvalidName(_)));
            ensure_matches!(
                stream::subscribe(bad, "c").map(|_| ()),
                Err(Error::InvalidName(_))
            );
        }
        Ok(())
    });
    c.case("reserved-stream-name-is-reserved-name", || {
        ensure_matches!(
            stream::publish("__alkstore_events", b"x"),
            Err(Error::ReservedName(_))
        );
        ensure_matches!(
            stream::trim_to("__alkstore_events", 1),
            Err(Error::ReservedName(_))
        );
        Ok(())
    });
    c.case("consumer-names-are-checked-but-not-reserved", || {
        let s = fresh("consumers");
        ok!(stream::publish(&s, b"x"));
        let long = "c".repeat(101);
        for bad in ["", "a/b", "with space", "ü", long.as_str()] {
            ensure_matches!(stream::save_offset(&s, bad, 1), Err(Error::InvalidName(_)));
            ensure_matches!(stream::get_offset(&s, bad), Err(Error::InvalidName(_)));
        }
        ok!(stream::save_offset(&s, "__alkstore_is_fine_here", 1));
        ok!(stream::save_offset(&s, ".dotted", 1));
        Ok(())
    });
    c.case("info-tells-offsets-and-lags", || {
        let s = fresh("info");
        let empty = ok!(stream::info(&s));
        ensure!(
            empty.first.is_none() && empty.last == 0 && empty.consumers.is_empty(),
            "{empty:?}"
        );
        for i in 0..5u8 {
            ok!(stream::publish(&s, &[i]));
        }
        ok!(stream::save_offset(&s, "slow", 1));
        ok!(stream::save_offset(&s, "fast", 5));
        ok!(stream::trim_to(&s, 2));
        let info = ok!(stream::info(&s));
        ensure!(info.first == Some(3) && info.last == 5, "{info:?}");
        let lags: Vec<_> = info
            .consumers
            .iter()
            .map(|c| (c.consumer.as_str(), c.offset, c.lag))
            .collect();
        ensure!(lags == [("fast", 5, 0), ("slow", 1, 4)], "{lags:?}");
        ok!(stream::trim_to(&s, 5));
        ensure_matches!(stream::info(&s), Ok(i) if i.first.is_none() && i.last == 5);
        for bad in &alk_guest::bad_names() {
            ensure_matches!(stream::info(bad), Err(Error::InvalidName(_)));
        }
        Ok(())
    });
    c.finish();
}
