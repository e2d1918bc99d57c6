//! Conformance cases of the job options: priorities, delays, retries with
//! backoff, dead letters, heartbeats, expiry and message groups.

use super::text;
use crate::engine::Engine;
use crate::error::AlkError;
use crate::jobs::{EXPIRED_ERROR, JobState, Retried, RetryDelay, SendOptions, lapsed_error};
use crate::queue::{Delivery, Payload, Queue, QueueStats};

fn names(got: &[Delivery]) -> Vec<String> {
    got.iter()
        .map(|d| match &d.payload {
            Payload::Text(t) | Payload::Json(t) => t.clone(),
        })
        .collect()
}

fn with(f: impl FnOnce(&mut SendOptions)) -> SendOptions {
    let mut o = SendOptions::default();
    f(&mut o);
    o
}

/// Claims take the highest priority first, then the time a message became
/// ready (its send time plus its delay), then the id; a delayed message is
/// not claimed before it is due; a priority floor leaves lower priorities
/// alone.
pub async fn jobs_claim_by_priority_then_ready_time(engine: &dyn Engine) {
    let q = Queue::open(engine, "jobs-order").await.unwrap();
    let t = 1_000;
    q.send_with(&text("a"), &SendOptions::default(), t)
        .await
        .unwrap();
    q.send_with(&text("b"), &with(|o| o.priority = Some(5)), t)
        .await
        .unwrap();
    q.send_with(&text("c"), &with(|o| o.delay_ms = Some(100)), t)
        .await
        .unwrap();
    q.send_with(&text("d"), &with(|o| o.priority = Some(5)), t + 1)
        .await
        .unwrap();
    q.send_with(
        &text("e"),
        &with(|o| o.run_at_ms = Some((t + 50) as u64)),
        t + 2,
    )
    .await
    .unwrap();
    q.send_with(&text("f"), &with(|o| o.priority = Some(-3)), t + 3)
        .await
        .unwrap();
    // The floor: only priority 5 and up.
    let urgent = q.claim(10, Some(10_000), Some(5), t + 10).await.unwrap();
    assert_eq!(names(&urgent), ["b", "d"]);
    assert_eq!(urgent[0].priority, 5);
    let rest = q.claim(10, Some(10_000), None, t + 10).await.unwrap();
    assert_eq!(names(&rest), ["a", "f"]);
    // "e" became ready at +50, "c" at +100; "a" (ready at +0) came first.
    assert!(
        q.claim(10, Some(10_000), None, t + 49)
            .await
            .unwrap()
            .is_empty()
    );
    let later = q.claim(10, Some(10_000), None, t + 100).await.unwrap();
    assert_eq!(names(&later), ["e", "c"]);
    // Inspection tells the states apart.
    let id = q
        .send_with(&text("g"), &with(|o| o.delay_ms = Some(10)), t + 200)
        .await
        .unwrap();
    let job = q.job(id, t + 200).await.unwrap().unwrap();
    assert_eq!(
        (job.state, job.due_at, job.attempt),
        (JobState::Delayed, t + 210, 0)
    );
    assert_eq!(
        q.job(id, t + 210).await.unwrap().unwrap().state,
        JobState::Waiting
    );
    let in_flight = q.job(later[0].id, t + 200).await.unwrap().unwrap();
    assert_eq!(in_flight.state, JobState::InFlight);
    assert!(q.job(999_999, t).await.unwrap().is_none());
    // Bad options are refused and store nothing.
    let before = q.job(id + 1, t).await.unwrap();
    assert!(before.is_none());
    assert!(matches!(
        q.send_with(&text("x"), &with(|o| o.max_attempts = Some(0)), t)
            .await,
        Err(AlkError::InvalidArgument(_))
    ));
    assert!(q.job(id + 1, t).await.unwrap().is_none());
}

/// `retry` without a delay waits the backoff curve of the message's
/// attempt — the same for a given random word on every engine — and the
/// attempt after the last one goes to the dead letters with its error.
pub async fn jobs_retry_backs_off_and_ends_in_the_dead_letters(engine: &dyn Engine) {
    let q = Queue::open(engine, "jobs-retry").await.unwrap();
    let opts = with(|o| {
        o.max_attempts = Some(3);
        o.backoff_base_ms = Some(1_000);
    });
    let id = q.send_with(&text("job"), &opts, 0).await.unwrap();
    let first = q.claim(1, Some(100), None, 0).await.unwrap();
    assert_eq!((first[0].attempt, first[0].max_attempts), (1, Some(3)));
    // Attempt 1, random 0: half of 1,000.
    let r = q
        .retry_with(&first[0].receipt, "boom 1", RetryDelay::Backoff(0), 10)
        .await;
    assert_eq!(r.unwrap(), Retried::Scheduled(510));
    // The receipt of the retried delivery is no longer current.
    assert!(matches!(
        q.ack(&first[0].receipt).await,
        Err(AlkError::StaleReceipt(_))
    ));
    let job = q.job(id, 10).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Delayed);
    assert_eq!(job.last_error.as_deref(), Some("boom 1"));
    assert!(q.claim(1, Some(100), None, 509).await.unwrap().is_empty());
    let second = q.claim(1, Some(100), None, 510).await.unwrap();
    assert_eq!(second[0].attempt, 2);
    // Attempt 2: curve 2,000; 1,000 plus the random word modulo 1,001.
    let r = q
        .retry_with(
            &second[0].receipt,
            "boom 2",
            RetryDelay::Backoff(u64::MAX),
            600,
        )
        .await;
    assert_eq!(
        r.unwrap(),
        Retried::Scheduled(600 + 1_000 + (u64::MAX % 1_001) as i64)
    );
    let third = q.claim(1, Some(100), None, 10_000).await.unwrap();
    assert_eq!(third[0].attempt, 3);
    // A fixed delay overrides the curve — but this was the last attempt.
    let r = q
        .retry_with(&third[0].receipt, "boom 3", RetryDelay::Fixed(5), 10_010)
        .await;
    assert_eq!(r.unwrap(), Retried::Dead);
    let dead = q.job(id, 10_020).await.unwrap().unwrap();
    assert_eq!(dead.state, JobState::Dead);
    assert_eq!(dead.attempt, 3);
    assert_eq!(dead.max_attempts, Some(3));
    assert_eq!(dead.last_error.as_deref(), Some("boom 3"));
    assert_eq!(dead.died_at, Some(10_010));
    assert_eq!(dead.payload, text("job"));
    assert!(
        q.claim(1, Some(100), None, 20_000)
            .await
            .unwrap()
            .is_empty()
    );
    // Retrying what is gone changes nothing.
    let r = q
        .retry_with(&third[0].receipt, "x", RetryDelay::Fixed(0), 10_030)
        .await;
    assert_eq!(r.unwrap(), Retried::Gone);
    // A fixed retry of a message with attempts left.
    let other = q.send(&text("other"), 20_000).await.unwrap();
    let got = q.claim(1, Some(100), None, 20_000).await.unwrap();
    assert_eq!(got[0].id, other);
    let r = q
        .retry_with(&got[0].receipt, "later", RetryDelay::Fixed(7), 20_001)
        .await;
    assert_eq!(r.unwrap(), Retried::Scheduled(20_008));
    // Dead letters are listed by id, and come back with redrive.
    let listed = q.dead_letters(None, 10, 30_000).await.unwrap();
    assert_eq!(listed.iter().map(|j| j.id).collect::<Vec<_>>(), [id]);
    assert!(
        q.dead_letters(Some(id), 10, 30_000)
            .await
            .unwrap()
            .is_empty()
    );
    let redriven = q
        .redrive(&[id, 424_242, u64::MAX, id], 30_000)
        .await
        .unwrap();
    // A new message, with an id above every one so far.
    let new = redriven[0].unwrap();
    assert_eq!(redriven, [Some(new), None, None, None]);
    assert!(new > other);
    assert!(q.job(id, 30_000).await.unwrap().is_none());
    let back = q.job(new, 30_000).await.unwrap().unwrap();
    assert_eq!(
        (back.state, back.attempt, back.max_attempts),
        (JobState::Waiting, 0, Some(3))
    );
    assert_eq!(
        (back.payload.clone(), back.last_error.as_deref()),
        (text("job"), Some("boom 3"))
    );
    // "other" became ready at 20,008, the redriven one at 30,000.
    let again = q.claim(10, Some(100), None, 30_000).await.unwrap();
    assert_eq!(again.iter().map(|d| d.id).collect::<Vec<_>>(), [other, new]);
    assert_eq!(again[1].attempt, 1);
    q.fail(&again[1].receipt, "given up", 30_001).await.unwrap();
    assert_eq!(q.purge_dead().await.unwrap(), 1);
    assert!(q.job(new, 30_002).await.unwrap().is_none());
}

/// A claim whose deadline passes costs an attempt: after the last one the
/// message goes to the dead letters at the next claim (which goes on to
/// the next message) instead of being delivered again.
pub async fn jobs_a_lapsed_last_attempt_goes_to_the_dead_letters(engine: &dyn Engine) {
    let q = Queue::open(engine, "jobs-lapse").await.unwrap();
    let id = q
        .send_with(&text("slow"), &with(|o| o.max_attempts = Some(2)), 0)
        .await
        .unwrap();
    assert_eq!(q.claim(1, Some(100), None, 0).await.unwrap()[0].attempt, 1);
    assert_eq!(
        q.claim(1, Some(100), None, 100).await.unwrap()[0].attempt,
        2
    );
    let next = q.send(&text("next"), 150).await.unwrap();
    let got = q.claim(1, Some(100), None, 200).await.unwrap();
    assert_eq!(got.iter().map(|d| d.id).collect::<Vec<_>>(), [next]);
    let dead = q.job(id, 200).await.unwrap().unwrap();
    assert_eq!(dead.state, JobState::Dead);
    assert_eq!(dead.attempt, 2);
    assert_eq!(dead.last_error, Some(lapsed_error(2)));
}

/// `heartbeat` resets the deadline to the new extension from now; it is
/// refused once the deadline has passed; a redelivery makes it stale. An
/// ack after the deadline still lands while nobody received the message
/// again.
pub async fn jobs_heartbeat_extends_only_a_live_delivery(engine: &dyn Engine) {
    let q = Queue::open(engine, "jobs-beat").await.unwrap();
    q.send(&text("long"), 1_000).await.unwrap();
    let d = q.claim(1, Some(100), None, 1_000).await.unwrap().remove(0);
    assert!(q.heartbeat(&d.receipt, 500, 1_050).await.unwrap());
    // The deadline is now 1,550, not 1,100 + 500.
    assert!(q.claim(1, Some(100), None, 1_549).await.unwrap().is_empty());
    assert!(!q.heartbeat(&d.receipt, 500, 1_550).await.unwrap());
    assert!(matches!(
        q.heartbeat(&d.receipt, 0, 1_000).await,
        Err(AlkError::InvalidArgument(_))
    ));
    let again = q.claim(1, Some(100), None, 1_600).await.unwrap().remove(0);
    assert_eq!(again.attempt, 2);
    assert!(matches!(
        q.heartbeat(&d.receipt, 500, 1_600).await,
        Err(AlkError::StaleReceipt(_))
    ));
    // Past its deadline, but not received again: the ack lands.
    q.ack(&again.receipt).await.unwrap();
    assert!(q.job(again.id, 1_800).await.unwrap().is_none());
    assert!(!q.heartbeat(&again.receipt, 500, 1_800).await.unwrap());
}

/// An expired message goes to the dead letters instead of being
/// delivered; `sweep-expired` moves expired messages in any state.
pub async fn jobs_expired_messages_end_in_the_dead_letters(engine: &dyn Engine) {
    let q = Queue::open(engine, "jobs-expiry").await.unwrap();
    let brief = with(|o| o.expires_in_ms = Some(100));
    let a = q.send_with(&text("a"), &brief, 0).await.unwrap();
    let b = q.send_with(&text("b"), &brief, 0).await.unwrap();
    let keep = q.send(&text("keep"), 0).await.unwrap();
    // "b" is claimed before it expires and stays in flight.
    let got = q.claim(1, Some(1_000), None, 0).await.unwrap();
    assert_eq!(got[0].id, a);
    q.nack(&got[0].receipt, 1).await.unwrap();
    let got = q.claim(1, Some(1_000), None, 50).await.unwrap();
    assert_eq!(got[0].id, a);
    let got_b = q.claim(1, Some(1_000), None, 50).await.unwrap();
    assert_eq!(got_b[0].id, b);
    q.nack(&got[0].receipt, 60).await.unwrap();
    // At 100 "a" (due) has expired: the claim buries it and goes on.
    let got = q.claim(5, Some(1_000), None, 100).await.unwrap();
    assert_eq!(got.iter().map(|d| d.id).collect::<Vec<_>>(), [keep]);
    let dead = q.job(a, 100).await.unwrap().unwrap();
    assert_eq!(
        (dead.state, dead.last_error.as_deref()),
        (JobState::Dead, Some(EXPIRED_ERROR))
    );
    // "b" is still in flight; the sweep moves it.
    assert_eq!(
        q.job(b, 100).await.unwrap().unwrap().state,
        JobState::InFlight
    );
    assert_eq!(q.sweep_expired(100).await.unwrap(), 1);
    assert_eq!(q.sweep_expired(100).await.unwrap(), 0);
    assert_eq!(q.job(b, 100).await.unwrap().unwrap().state, JobState::Dead);
    // Its holder's late ack finds it gone from the queue.
    q.ack(&got_b[0].receipt).await.unwrap();
    assert_eq!(q.dead_letters(None, 10, 100).await.unwrap().len(), 2);
}

/// `cancel` deletes a message in any state; `fail` sends a delivery
/// straight to the dead letters.
pub async fn jobs_cancel_and_fail(engine: &dyn Engine) {
    let q = Queue::open(engine, "jobs-cancel").await.unwrap();
    let a = q.send(&text("a"), 0).await.unwrap();
    let b = q.send(&text("b"), 0).await.unwrap();
    assert!(q.cancel(a).await.unwrap());
    assert!(!q.cancel(a).await.unwrap());
    assert!(!q.cancel(u64::MAX).await.unwrap());
    let d = q.claim(10, None, None, 0).await.unwrap();
    assert_eq!(d.len(), 1);
    assert!(q.fail(&d[0].receipt, "bad input", 5).await.unwrap());
    assert!(!q.fail(&d[0].receipt, "again", 6).await.unwrap());
    let dead = q.job(b, 7).await.unwrap().unwrap();
    assert_eq!(
        (dead.state, dead.attempt, dead.died_at),
        (JobState::Dead, 1, Some(5))
    );
    assert!(q.cancel(b).await.unwrap());
    assert!(q.job(b, 7).await.unwrap().is_none());
    // A stale receipt fails nothing.
    let c = q.send(&text("c"), 10).await.unwrap();
    let first = q.claim(1, Some(10), None, 10).await.unwrap().remove(0);
    let second = q.claim(1, Some(10), None, 20).await.unwrap().remove(0);
    assert_eq!(second.id, c);
    assert!(matches!(
        q.fail(&first.receipt, "x", 21).await,
        Err(AlkError::StaleReceipt(_))
    ));
    // The error text is kept at most 4 KiB.
    q.fail(&second.receipt, &"e".repeat(10_000), 22)
        .await
        .unwrap();
    let kept = q.job(c, 22).await.unwrap().unwrap().last_error.unwrap();
    assert!(kept.len() <= crate::jobs::MAX_ERROR_BYTES && kept.ends_with('…'));
}

/// An ack-batch of the receipts of one claim tells each receipt as it is:
/// all current and without a group; one acked before; one whose message
/// was claimed again; messages with and without a group together (a group
/// whose last message is acked leaves the round).
pub async fn jobs_ack_batch_of_one_claim_tells_each_receipt(engine: &dyn Engine) {
    use crate::queue::Settled::{Done, Gone, Stale};
    let q = Queue::open(engine, "jobs-ack-claim").await.unwrap();
    let receipts =
        |got: &[Delivery]| -> Vec<String> { got.iter().map(|d| d.receipt.clone()).collect() };
    let send = |body: &'static str, group: Option<&'static str>| {
        let q = &q;
        async move {
            let o = with(|o| o.group = group.map(String::from));
            q.send_with(&text(body), &o, 0).await.unwrap();
        }
    };
    for m in ["a0", "a1", "a2"] {
        send(m, None).await;
    }
    let r = receipts(&q.claim(3, Some(1_000), None, 0).await.unwrap());
    let batch = [r[0].clone(), r[1].clone(), r[2].clone(), r[1].clone()];
    assert_eq!(q.ack_batch(&batch).await.unwrap(), [Done, Done, Done, Gone]);

    for m in ["b0", "b1", "b2"] {
        send(m, None).await;
    }
    let r = receipts(&q.claim(3, Some(1_000), None, 0).await.unwrap());
    q.ack(&r[1]).await.unwrap();
    assert_eq!(q.ack_batch(&r).await.unwrap(), [Done, Gone, Done]);

    for m in ["c0", "c1", "c2"] {
        send(m, None).await;
    }
    let got = q.claim(3, Some(10), None, 0).await.unwrap();
    let r = receipts(&got);
    let again = q.claim(1, Some(1_000), None, 20).await.unwrap();
    assert_eq!(names(&again), ["c0"]);
    assert_eq!(q.ack_batch(&r).await.unwrap(), [Stale, Done, Done]);
    q.ack(&again[0].receipt).await.unwrap();

    send("g0", Some("G")).await;
    send("u0", None).await;
    send("h0", Some("H")).await;
    send("g1", Some("G")).await;
    let got = q.claim(10, Some(1_000), None, 30).await.unwrap();
    let mut heads = names(&got);
    heads.sort();
    assert_eq!(heads, ["g0", "h0", "u0"]);
    assert_eq!(q.stats(30).await.unwrap().groups, 2);
    assert_eq!(
        q.ack_batch(&receipts(&got)).await.unwrap(),
        [Done, Done, Done]
    );
    // H is empty and left the round; G goes on with its next message.
    assert_eq!(q.stats(30).await.unwrap().groups, 1);
    let next = q.claim(10, Some(1_000), None, 40).await.unwrap();
    assert_eq!(names(&next), ["g1"]);
    assert_eq!(q.ack_batch(&receipts(&next)).await.unwrap(), [Done]);
    assert_eq!(q.stats(40).await.unwrap().groups, 0);
}

/// A group has one message in flight at a time, in send order; groups and
/// the messages without a group take turns, the one served longest ago
/// first; a retried head parks its group; a group's priority is the
/// highest sent to it since it joined the round.
pub async fn jobs_groups_take_turns_one_in_flight_each(engine: &dyn Engine) {
    let q = Queue::open(engine, "jobs-groups").await.unwrap();
    let g = |k: &str| with(|o| o.group = Some(k.into()));
    for m in ["u1", "u2"] {
        q.send(&text(m), 0).await.unwrap();
    }
    for (k, ms) in [
        ("A", ["a1", "a2", "a3"].as_slice()),
        ("B", &["b1", "b2"]),
        ("C", &["c1"]),
    ] {
        for m in ms {
            q.send_with(&text(m), &g(k), 0).await.unwrap();
        }
    }
    // One at a time, acking each: the round is lane, A, B, C, lane, A, …
    let mut order = Vec::new();
    for i in 0..8 {
        let got = q.claim(1, Some(1_000), None, 1 + i).await.unwrap();
        assert_eq!(got.len(), 1, "{order:?}");
        order.push(names(&got)[0].clone());
        q.ack(&got[0].receipt).await.unwrap();
    }
    assert_eq!(order, ["u1", "a1", "b1", "c1", "u2", "a2", "b2", "a3"]);
    assert!(q.claim(1, Some(1_000), None, 10).await.unwrap().is_empty());

    // Never two of one group in flight; a big claim takes one head each.
    for m in ["x1", "x2", "x3"] {
        q.send_with(&text(m), &g("X"), 20).await.unwrap();
    }
    for m in ["y1", "y2"] {
        q.send_with(&text(m), &g("Y"), 20).await.unwrap();
    }
    let got = q.claim(10, Some(1_000), None, 20).await.unwrap();
    assert_eq!(names(&got), ["x1", "y1"]);
    assert_eq!(got[0].group.as_deref(), Some("X"));
    assert!(q.claim(10, Some(1_000), None, 21).await.unwrap().is_empty());
    // A retried head parks its group until it is due: strict order.
    let r = q
        .retry_with(&got[0].receipt, "wait", RetryDelay::Fixed(100), 22)
        .await;
    assert_eq!(r.unwrap(), Retried::Scheduled(122));
    q.ack(&got[1].receipt).await.unwrap();
    let got = q.claim(10, Some(1_000), None, 30).await.unwrap();
    assert_eq!(names(&got), ["y2"]);
    let got2 = q.claim(10, Some(1_000), None, 122).await.unwrap();
    assert_eq!(names(&got2), ["x1"]);
    assert_eq!(got2[0].attempt, 2);
    // An expired head goes to the dead letters; the next one moves up.
    q.ack(&got[0].receipt).await.unwrap();
    q.fail(&got2[0].receipt, "no", 123).await.unwrap();
    let got = q.claim(10, Some(1_000), None, 124).await.unwrap();
    assert_eq!(names(&got), ["x2"]);
    q.ack(&got[0].receipt).await.unwrap();
    let got = q.claim(10, Some(1_000), None, 125).await.unwrap();
    assert_eq!(names(&got), ["x3"]);
    q.ack(&got[0].receipt).await.unwrap();

    // A redriven message joins the back of its group: the group keeps one
    // message in flight.
    let z1 = q.send_with(&text("z1"), &g("Z"), 300).await.unwrap();
    q.send_with(&text("z2"), &g("Z"), 300).await.unwrap();
    let got = q.claim(1, Some(1_000), None, 301).await.unwrap();
    assert_eq!(names(&got), ["z1"]);
    q.fail(&got[0].receipt, "no", 302).await.unwrap();
    let got = q.claim(1, Some(1_000), None, 303).await.unwrap();
    assert_eq!(names(&got), ["z2"]);
    let back = q.redrive(&[z1], 304).await.unwrap();
    assert!(back[0].is_some());
    assert!(
        q.claim(10, Some(1_000), None, 305)
            .await
            .unwrap()
            .is_empty()
    );
    q.ack(&got[0].receipt).await.unwrap();
    let got = q.claim(10, Some(1_000), None, 306).await.unwrap();
    assert_eq!(names(&got), ["z1"]);
    q.ack(&got[0].receipt).await.unwrap();

    // Priority: a group's is the highest sent to it; the floor skips the rest.
    q.send_with(&text("low"), &g("L"), 200).await.unwrap();
    q.send_with(&text("h1"), &g("H"), 200).await.unwrap();
    q.send_with(
        &text("h2"),
        &with(|o| {
            o.group = Some("H".into());
            o.priority = Some(7);
        }),
        200,
    )
    .await
    .unwrap();
    let got = q.claim(10, Some(1_000), Some(7), 201).await.unwrap();
    assert_eq!(names(&got), ["h1"]);
    assert_eq!(got[0].priority, 0);
    let job = q.job(got[0].id, 201).await.unwrap().unwrap();
    assert_eq!(job.group.as_deref(), Some("H"));
}

/// Many groups sharing a place in the round, all parked behind a delayed
/// message, do not hide a due group behind them; a message a claim sends
/// to the dead letters takes its slot as if it had been delivered.
pub async fn jobs_claims_look_past_parked_groups_and_count_burials(engine: &dyn Engine) {
    let q = Queue::open(engine, "jobs-parked").await.unwrap();
    for i in 0..40 {
        let o = with(|o| {
            o.group = Some(format!("parked-{i}"));
            o.delay_ms = Some(60_000);
        });
        q.send_with(&text(&format!("p{i}")), &o, 0).await.unwrap();
    }
    q.send_with(&text("late"), &with(|o| o.group = Some("late".into())), 0)
        .await
        .unwrap();
    let got = q.claim(1, Some(1_000), None, 1).await.unwrap();
    assert_eq!(names(&got), ["late"]);

    let q = Queue::open(engine, "jobs-burials").await.unwrap();
    q.send_with(&text("A"), &with(|o| o.expires_in_ms = Some(5)), 0)
        .await
        .unwrap();
    q.send(&text("B"), 0).await.unwrap();
    q.send(&text("C"), 0).await.unwrap();
    q.send_with(&text("g1"), &with(|o| o.group = Some("G".into())), 0)
        .await
        .unwrap();
    // The lane comes first in the round: it offers A (expired) and B for
    // the two slots; A goes to the dead letters, and the claim goes round
    // again for the slot it took, where the lane (not yet moved) offers C.
    let got = q.claim(2, Some(1_000), None, 10).await.unwrap();
    assert_eq!(names(&got), ["B", "C"]);
    let got = q.claim(2, Some(1_000), None, 11).await.unwrap();
    assert_eq!(names(&got), ["g1"]);
}

/// The counts of every state: a delayed message, grouped ones (one in
/// flight per group, the rest waiting), a dead letter; the groups and the
/// groups with a message in flight.
pub async fn jobs_stats_count_delays_groups_and_dead_letters(engine: &dyn Engine) {
    let q = Queue::open(engine, "stats-jobs").await.unwrap();
    let t = 10_000;
    q.send_with(&text("later"), &with(|o| o.delay_ms = Some(5_000)), t)
        .await
        .unwrap();
    for (body, group) in [("g1-a", "g1"), ("g1-b", "g1"), ("g2-a", "g2")] {
        q.send_with(&text(body), &with(|o| o.group = Some(group.into())), t)
            .await
            .unwrap();
    }
    q.send(&text("doomed"), t).await.unwrap();
    let got = q.claim(10, Some(60_000), None, t).await.unwrap();
    let mut claimed = names(&got);
    claimed.sort();
    assert_eq!(claimed, ["doomed", "g1-a", "g2-a"]);
    let doomed = got
        .iter()
        .find(|d| names(std::slice::from_ref(d)) == ["doomed"])
        .unwrap();
    assert!(q.fail(&doomed.receipt, "no", t).await.unwrap());
    let s = q.stats(t).await.unwrap();
    assert_eq!(
        s,
        QueueStats {
            waiting: 1,
            delayed: 1,
            in_flight: 2,
            dead: 1,
            oldest_waiting_enqueued_at: Some(t),
            groups: 2,
            groups_in_flight: 2,
        }
    );
    // When the delay has passed, the delayed message waits too.
    let s = q.stats(t + 5_000).await.unwrap();
    assert_eq!((s.waiting, s.delayed), (2, 0), "{s:?}");
}

/// The live messages come by id, a page at a time, each in its state, with
/// its payload, attempts and last error; the dead letters are not among
/// them.
pub async fn jobs_listing_pages_the_live_messages_by_id(engine: &dyn Engine) {
    let q = Queue::open(engine, "listing").await.unwrap();
    let t = 10_000;
    assert!(q.jobs(None, 10, t).await.unwrap().is_empty());
    let a = q.send(&text("a"), t).await.unwrap();
    let b = q
        .send_with(&text("b"), &with(|o| o.delay_ms = Some(5_000)), t)
        .await
        .unwrap();
    let c = q.send(&text("c"), t).await.unwrap();
    let d = q.send(&text("d"), t).await.unwrap();
    // "a" is claimed and retried (due again later, with its error); "c" is
    // claimed and stays in flight; "d" dies.
    let got = q.claim(1, Some(60_000), None, t).await.unwrap();
    q.retry(&got[0].receipt, "boom", Some(1_000), t)
        .await
        .unwrap();
    let more = q.claim(2, Some(60_000), None, t).await.unwrap();
    assert_eq!(names(&more), ["c", "d"]);
    assert!(q.fail(&more[1].receipt, "no", t).await.unwrap());
    let first = q.jobs(None, 2, t).await.unwrap();
    let ids: Vec<u64> = first.iter().map(|j| j.id).collect();
    assert_eq!(ids, [a, b]);
    assert_eq!(first[0].state, JobState::Delayed);
    assert_eq!(first[0].attempt, 1);
    assert_eq!(first[0].last_error.as_deref(), Some("boom"));
    assert_eq!(first[0].payload, text("a"));
    assert_eq!(first[1].state, JobState::Delayed);
    let rest = q.jobs(Some(b), 10, t).await.unwrap();
    let rest: Vec<(u64, JobState)> = rest.iter().map(|j| (j.id, j.state)).collect();
    assert_eq!(rest, [(c, JobState::InFlight)]);
    let _ = d;
    // Later, "a" and "b" are due.
    let later = q.jobs(None, 10, t + 6_000).await.unwrap();
    assert_eq!(later[0].state, JobState::Waiting);
    assert_eq!(later[1].state, JobState::Waiting);
}

/// With a group concurrency of N, a group hands out its oldest messages up
/// to N in flight, in send order; an ack frees a place for the next; a
/// retried message keeps its place (and holds it while delayed); N = 1 is
/// the default.
pub async fn jobs_groups_hand_out_up_to_their_concurrency_in_order(engine: &dyn Engine) {
    let q = Queue::open(engine, "jobs-group-n").await.unwrap();
    q.set_limits(&crate::jobs::QueueLimits {
        group_concurrency: 3,
        ..Default::default()
    })
    .await
    .unwrap();
    let g = |k: &str| with(|o| o.group = Some(k.into()));
    for i in 1..=5 {
        q.send_with(&text(&format!("x{i}")), &g("X"), 0)
            .await
            .unwrap();
    }
    q.send_with(&text("y1"), &g("Y"), 0).await.unwrap();
    let got = q.claim(100, Some(60_000), None, 1).await.unwrap();
    let mut got_names = names(&got);
    got_names.sort();
    assert_eq!(got_names, ["x1", "x2", "x3", "y1"]);
    assert!(
        q.claim(100, Some(60_000), None, 1)
            .await
            .unwrap()
            .is_empty()
    );
    let stats = q.stats(1).await.unwrap();
    assert_eq!((stats.in_flight, stats.groups_in_flight), (4, 2));
    // An ack of the second frees a place: the fourth comes next, not the
    // fifth.
    let x2 = got
        .iter()
        .find(|d| names(std::slice::from_ref(d)) == ["x2"])
        .unwrap();
    q.ack(&x2.receipt).await.unwrap();
    assert_eq!(
        names(&q.claim(100, Some(60_000), None, 2).await.unwrap()),
        ["x4"]
    );
    // A retried message keeps its place while it waits for its delay.
    let x1 = got
        .iter()
        .find(|d| names(std::slice::from_ref(d)) == ["x1"])
        .unwrap();
    q.retry_with(&x1.receipt, "later", RetryDelay::Fixed(100), 3)
        .await
        .unwrap();
    assert!(
        q.claim(100, Some(60_000), None, 4)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        names(&q.claim(100, Some(60_000), None, 103).await.unwrap()),
        ["x1"]
    );
    // Back to one at a time: the window is the oldest message alone.
    q.set_limits(&crate::jobs::QueueLimits::default())
        .await
        .unwrap();
    let got = q.claim(100, Some(10), None, 200_000).await.unwrap();
    let mut got_names = names(&got);
    got_names.sort();
    assert_eq!(got_names, ["x1", "y1"]);
}

/// A cap on the queue's messages in flight: claims take what is left of
/// it, whatever they ask for; lapsed deliveries and acks free places.
pub async fn jobs_max_in_flight_caps_the_queue(engine: &dyn Engine) {
    let q = Queue::open(engine, "jobs-cap").await.unwrap();
    q.set_limits(&crate::jobs::QueueLimits {
        max_in_flight: Some(4),
        group_concurrency: 2,
        ..Default::default()
    })
    .await
    .unwrap();
    for i in 0..6 {
        q.send(&text(&format!("m{i}")), 0).await.unwrap();
        q.send_with(
            &text(&format!("g{i}")),
            &with(|o| o.group = Some("G".into())),
            0,
        )
        .await
        .unwrap();
    }
    let first = q.claim(3, Some(100), None, 1).await.unwrap();
    assert_eq!(first.len(), 3);
    let second = q.claim(100, Some(1_000), None, 2).await.unwrap();
    assert_eq!(second.len(), 1);
    assert!(q.claim(100, Some(1_000), None, 3).await.unwrap().is_empty());
    q.ack(&second[0].receipt).await.unwrap();
    assert_eq!(q.claim(100, Some(1_000), None, 4).await.unwrap().len(), 1);
    // The first claim's deliveries lapse at 101: three places free.
    assert_eq!(q.claim(100, Some(1_000), None, 101).await.unwrap().len(), 3);
    let stats = q.stats(101).await.unwrap();
    assert_eq!(stats.in_flight, 4);
}

/// A send with a unique key stores one message while the key is held:
/// others return its id and store nothing; without a window the key is
/// free once the message is acknowledged, dead or cancelled; with one it
/// stays taken until the window ends, whatever became of the message.
pub async fn jobs_unique_sends_store_one_message_per_key(engine: &dyn Engine) {
    use crate::jobs::UniqueOptions;
    let q = Queue::open(engine, "jobs-unique").await.unwrap();
    let live = UniqueOptions {
        key: "order-1".into(),
        for_ms: None,
    };
    let plain = SendOptions::default();
    let a = q.send_unique(&text("a"), &plain, &live, 0).await.unwrap();
    assert!(!a.duplicate);
    let b = q.send_unique(&text("b"), &plain, &live, 1).await.unwrap();
    assert_eq!((b.id, b.duplicate), (a.id, true));
    // Another key, and a plain send, are not affected.
    let other = UniqueOptions {
        key: "order-2".into(),
        for_ms: None,
    };
    assert!(
        !q.send_unique(&text("c"), &plain, &other, 1)
            .await
            .unwrap()
            .duplicate
    );
    // In flight still holds it.
    let got = q.claim(10, Some(60_000), None, 2).await.unwrap();
    assert_eq!(names(&got), ["a", "c"]);
    assert!(
        q.send_unique(&text("d"), &plain, &live, 3)
            .await
            .unwrap()
            .duplicate
    );
    // Acknowledged: free; the next send is a new message.
    q.ack(&got[0].receipt).await.unwrap();
    let e = q.send_unique(&text("e"), &plain, &live, 4).await.unwrap();
    assert!(!e.duplicate);
    assert!(e.id > a.id);
    // Dead: free as well.
    let got = q.claim(10, Some(60_000), None, 5).await.unwrap();
    assert_eq!(names(&got), ["e"]);
    q.fail(&got[0].receipt, "no", 6).await.unwrap();
    assert!(
        !q.send_unique(&text("f"), &plain, &live, 7)
            .await
            .unwrap()
            .duplicate
    );
    // A window holds the key past the ack, until it ends.
    let window = UniqueOptions {
        key: "daily".into(),
        for_ms: Some(1_000),
    };
    let w = q
        .send_unique(&text("w"), &plain, &window, 10)
        .await
        .unwrap();
    let cancelled = q.cancel(w.id).await.unwrap();
    assert!(cancelled);
    let again = q
        .send_unique(&text("w2"), &plain, &window, 1_009)
        .await
        .unwrap();
    assert_eq!((again.id, again.duplicate), (w.id, true));
    let after = q
        .send_unique(&text("w3"), &plain, &window, 1_010)
        .await
        .unwrap();
    assert!(!after.duplicate);
    // The options of the send are kept with the message.
    let grouped = UniqueOptions {
        key: "g".into(),
        for_ms: None,
    };
    let sent = q
        .send_unique(
            &text("g"),
            &with(|o| o.group = Some("G".into())),
            &grouped,
            20,
        )
        .await
        .unwrap();
    assert_eq!(
        q.job(sent.id, 20).await.unwrap().unwrap().group.as_deref(),
        Some("G")
    );
    // Bad keys and windows are refused before anything is stored.
    let before = q.stats(30).await.unwrap();
    for bad in [
        UniqueOptions {
            key: String::new(),
            for_ms: None,
        },
        UniqueOptions {
            key: "k".repeat(crate::jobs::MAX_UNIQUE_KEY_BYTES + 1),
            for_ms: None,
        },
        UniqueOptions {
            key: "k".into(),
            for_ms: Some(0),
        },
    ] {
        assert!(matches!(
            q.send_unique(&text("x"), &plain, &bad, 30).await,
            Err(AlkError::InvalidArgument(_))
        ));
    }
    assert_eq!(q.stats(30).await.unwrap(), before);
}

/// Senders racing with one unique key store exactly one message.
pub async fn jobs_racing_unique_sends_store_one_message(engine: &dyn Engine) {
    use crate::jobs::UniqueOptions;
    let q = std::sync::Arc::new(Queue::open(engine, "jobs-unique-race").await.unwrap());
    let mut tasks = Vec::new();
    for t in 0..8 {
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            let key = UniqueOptions {
                key: "same".into(),
                for_ms: None,
            };
            let mut ids = Vec::new();
            for i in 0..10 {
                let sent = q
                    .send_unique(&text(&format!("{t}-{i}")), &SendOptions::default(), &key, 5)
                    .await
                    .unwrap();
                ids.push(sent);
            }
            ids
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    assert_eq!(all.iter().filter(|s| !s.duplicate).count(), 1);
    let id = all.iter().find(|s| !s.duplicate).unwrap().id;
    assert!(all.iter().all(|s| s.id == id));
    assert_eq!(q.stats(5).await.unwrap().waiting, 1);
}

/// A completed delivery keeps its result after the message is gone: until
/// its time runs out or it is deleted; a stale or gone receipt keeps
/// nothing; an oversized result is refused and acknowledges nothing.
pub async fn jobs_completed_results_are_kept_until_their_time(engine: &dyn Engine) {
    let q = Queue::open(engine, "jobs-results").await.unwrap();
    let id = q.send(&text("work"), 0).await.unwrap();
    let got = q.claim(1, Some(100), None, 1).await.unwrap();
    // Too large: refused, the delivery goes on.
    let big = Payload::Text("x".repeat(crate::limits::MAX_PAYLOAD_BYTES + 1));
    assert!(matches!(
        q.complete(&got[0].receipt, &big, None, 2).await,
        Err(AlkError::PayloadTooLarge { .. })
    ));
    assert!(matches!(
        q.complete(&got[0].receipt, &text("r"), Some(0), 2).await,
        Err(AlkError::InvalidArgument(_))
    ));
    assert!(q.job(id, 2).await.unwrap().is_some());
    // A stale receipt: an error, nothing kept.
    let again = q.claim(1, Some(100), None, 101).await.unwrap();
    assert!(matches!(
        q.complete(&got[0].receipt, &text("old"), None, 102).await,
        Err(AlkError::StaleReceipt(_))
    ));
    assert_eq!(q.result(id, 102).await.unwrap(), None);
    let result = Payload::Json("{\"total\":3}".into());
    assert!(
        q.complete(&again[0].receipt, &result, Some(1_000), 103)
            .await
            .unwrap()
    );
    assert_eq!(q.job(id, 103).await.unwrap(), None);
    let kept = q.result(id, 103).await.unwrap().unwrap();
    assert_eq!(
        (kept.id, &kept.payload, kept.completed_at, kept.expires_at),
        (id, &result, 103, 1_103)
    );
    // Gone now: completing again keeps nothing new.
    assert!(
        !q.complete(&again[0].receipt, &text("twice"), None, 104)
            .await
            .unwrap()
    );
    assert_eq!(q.result(id, 104).await.unwrap().unwrap().payload, result);
    // Its time runs out.
    assert_eq!(q.result(id, 1_103).await.unwrap(), None);
    assert!(!q.delete_result(id, 1_103).await.unwrap());
    // Deleted before.
    let id2 = q.send(&text("two"), 2_000).await.unwrap();
    let got = q.claim(1, Some(100), None, 2_000).await.unwrap();
    assert!(
        q.complete(&got[0].receipt, &text("r2"), None, 2_001)
            .await
            .unwrap()
    );
    assert_eq!(
        q.result(id2, 2_001 + 86_399_999)
            .await
            .unwrap()
            .unwrap()
            .payload,
        text("r2")
    );
    assert!(q.delete_result(id2, 2_002).await.unwrap());
    assert_eq!(q.result(id2, 2_002).await.unwrap(), None);
    assert!(!q.delete_result(id2, 2_002).await.unwrap());
    // A sweep deletes the results whose time ran out.
    let id3 = q.send(&text("three"), 3_000).await.unwrap();
    let got = q.claim(1, Some(100), None, 3_000).await.unwrap();
    assert!(
        q.complete(&got[0].receipt, &text("r3"), Some(10), 3_000)
            .await
            .unwrap()
    );
    q.sweep_expired(3_010).await.unwrap();
    assert_eq!(q.result(id3, 3_000).await.unwrap(), None);
}
