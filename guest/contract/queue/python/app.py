"""The queue contract, checked from a Python guest.

The same cases, in the same order and with the same names, as the Rust
guest beside it (../rust); ../README.md says what each case expects.
"""

import time

from alk_store import InvalidArgument, InvalidName, PayloadTooLarge, ReservedName, StaleReceipt
from alk_store import limiter
from alk_store.queue import (
    AckOutcome,
    DeadLettered,
    Granted,
    JobState,
    Json,
    Queue,
    QueueLimits,
    Scheduled,
    Text,
    WaitMs,
    rate_limit,
)
from contract import BAD_NAMES, Contract, ensure, raises
from wit_world import exports


def pause(ms):
    time.sleep(ms / 1000)


def body(m):
    return m.payload.value


def ids(jobs):
    return [j.id for j in jobs]


# The limits of a queue that has none set.
NO_LIMITS = QueueLimits(1, None, None, False)


def now_ms():
    return time.time_ns() // 1_000_000


def contract():
    nonce = time.time_ns()

    def fresh(case):
        # Every case gets a queue of its own.
        return Queue.open(f"p{nonce}-{case}")

    def open_returns_named_queue():
        name = f"p{nonce}-named"
        ensure(Queue.open(name).name == name)

    def receive_on_empty_queue_is_empty():
        ensure(fresh("empty").receive(10) == [])

    def send_returns_increasing_ids():
        q = fresh("ids")
        a = q.send("a")
        b = q.send("b")
        ensure(b > a, f"{a} then {b}")

    def receive_is_fifo():
        q = fresh("fifo")
        for t in ["1", "2", "3", "4"]:
            q.send(t)
        order = [body(m) for m in q.receive(10)]
        ensure(order == ["1", "2", "3", "4"], order)

    def json_and_text_payloads_round_trip():
        q = fresh("payloads")
        doc = '{"order": 17, "items": ["a", "b"], "note": "naïve ☕"}'
        q.send(Json(doc))
        q.send("plain text, not JSON: {")
        got = q.receive(10)
        ensure(isinstance(got[0].payload, Json) and body(got[0]) == doc)
        ensure(isinstance(got[1].payload, Text) and body(got[1]) == "plain text, not JSON: {")

    def first_delivery_has_attempt_1():
        q = fresh("attempt")
        q.send("x")
        got = q.receive(1)
        ensure(len(got) == 1 and got[0].attempt == 1)

    def received_messages_are_invisible():
        q = fresh("invisible")
        q.send("x")
        ensure(len(q.receive(10)) == 1)
        ensure(q.receive(10) == [])

    def batch_receive_respects_max():
        q = fresh("batch")
        for i in range(5):
            q.send(str(i))
        first = q.receive(2)
        rest = q.receive(10)
        ensure(len(first) == 2 and len(rest) == 3)
        ensure(body(first[0]) == "0" and body(rest[0]) == "2")

    def receive_max_zero_is_clamped_to_one():
        q = fresh("max-zero")
        q.send("a")
        q.send("b")
        ensure(len(q.receive(0)) == 1)

    def redelivery_after_visibility_increments_attempt():
        q = fresh("redeliver")
        q.send("x")
        first = q.receive(1, visibility_ms=40)
        pause(60)
        second = q.receive(1, visibility_ms=60_000)
        ensure(len(second) == 1 and second[0].attempt == 2)
        ensure(second[0].receipt != first[0].receipt)

    def stale_receipt_after_redelivery_is_rejected():
        q = fresh("stale")
        q.send("x")
        first = q.receive(1, visibility_ms=40)
        pause(60)
        second = q.receive(1, visibility_ms=60_000)
        raises(StaleReceipt, q.ack, first[0].receipt)
        raises(StaleReceipt, q.nack, first[0].receipt)
        q.ack(second[0].receipt)

    def ack_deletes_the_message():
        q = fresh("ack")
        q.send("x")
        got = q.receive(1, visibility_ms=40)
        q.ack(got[0].receipt)
        pause(60)
        ensure(q.receive(10) == [])

    def double_ack_is_ok():
        q = fresh("double-ack")
        q.send("x")
        got = q.receive(1)
        q.ack(got[0].receipt)
        q.ack(got[0].receipt)
        q.nack(got[0].receipt)

    def malformed_receipt_is_a_no_op():
        q = fresh("malformed")
        q.send("x")
        for bad in ["", "garbage", "1", "1:", "1:not-a-uuid", ":", "9" * 500]:
            q.ack(bad)
            q.nack(bad)
        ensure(len(q.receive(10)) == 1)

    def nack_makes_visible_now_and_keeps_attempt():
        q = fresh("nack")
        q.send("x")
        got = q.receive(1, visibility_ms=60_000)
        q.nack(got[0].receipt)
        again = q.receive(1, visibility_ms=60_000)
        ensure(len(again) == 1, "not visible after nack")
        ensure(again[0].attempt == 2, f"attempt {again[0].attempt}")

    def send_batch_and_ack_batch():
        q = fresh("batches")
        ids = q.send_batch([Text("a"), Json("[1]"), Text("c")])
        ensure(len(ids) == 3 and ids[0] < ids[1] < ids[2], ids)
        got = q.receive(2)
        outcomes = q.ack_batch([got[0].receipt, got[1].receipt, "garbage"])
        ensure(outcomes == [AckOutcome.ACKED, AckOutcome.ACKED, AckOutcome.GONE], outcomes)
        rest = q.receive(10)
        ensure(len(rest) == 1 and body(rest[0]) == "c")

    def ack_batch_reports_stale_receipts_and_acks_the_rest():
        q = fresh("batch-stale")
        q.send_batch([Text("x"), Text("y")])
        first = q.receive(1, visibility_ms=40)
        pause(60)
        again = q.receive(2, visibility_ms=60_000)
        ensure(len(again) == 2)
        outcomes = q.ack_batch([first[0].receipt, again[1].receipt])
        ensure(outcomes == [AckOutcome.STALE, AckOutcome.ACKED], outcomes)
        q.ack(again[0].receipt)

    def send_batch_is_all_or_nothing():
        q = fresh("batch-atomic")
        raises(InvalidArgument, q.send_batch, [Text("ok"), Json("{")])
        raises(InvalidArgument, q.send_batch, [Text(str(i)) for i in range(1001)])
        ensure(q.receive(10) == [])

    def receive_wait_returns_at_once_when_a_message_is_there():
        q = fresh("wait-now")
        q.send("x")
        ensure(len(q.receive(10, wait_ms=60_000)) == 1)

    def receive_wait_times_out_with_an_empty_list():
        q = fresh("wait-timeout")
        ensure(q.receive(10, wait_ms=30) == [])

    def purge_removes_visible_and_in_flight():
        q = fresh("purge")
        q.send("a")
        q.send("b")
        inflight = q.receive(1, visibility_ms=40)
        q.purge()
        pause(60)
        ensure(q.receive(10) == [])
        q.ack(inflight[0].receipt)

    def payload_over_64kib_is_payload_too_large():
        q = fresh("too-large")
        e = raises(PayloadTooLarge, q.send, Text("x" * 65_537))
        ensure(e.size == 65_537 and e.limit == 65_536, e)
        raises(PayloadTooLarge, q.send, Json('"' + "y" * 65_535 + '"'))
        ensure(q.receive(10) == [])
        q.send("x" * 65_536)
        got = q.receive(10)
        ensure(len(got) == 1 and len(body(got[0])) == 65_536)

    def invalid_json_is_invalid_argument():
        q = fresh("bad-json")
        for bad in ["", "{", '{"a":}', "not json", "[1,]"]:
            raises(InvalidArgument, q.send, Json(bad))
        ensure(q.receive(10) == [])

    def valid_json_beyond_a_value_parser_is_accepted():
        q = fresh("odd-json")
        for good in ["1e999", '"\\ud800"', "[" * 1000 + "]" * 1000]:
            q.send(Json(good))
        got = q.receive(10)
        ensure(len(got) == 3)
        ensure(body(got[1]) == '"\\ud800"', "stored as sent")

    def receipt_never_issued_by_this_queue():
        q = fresh("foreign-receipt")
        other = fresh("foreign-receipt-other")
        q.send("x")
        other.send("y")
        mine = q.receive(1, visibility_ms=60_000)
        theirs = other.receive(1, visibility_ms=60_000)
        ensure(mine[0].receipt.split(":")[0] == theirs[0].receipt.split(":")[0])
        raises(StaleReceipt, q.ack, theirs[0].receipt)
        raises(StaleReceipt, q.nack, "1:00000000-0000-4000-8000-000000000000")
        q.ack("999:00000000-0000-4000-8000-000000000000")
        q.ack(mine[0].receipt)
        other.ack(theirs[0].receipt)

    def zero_visibility_is_invalid_argument():
        q = fresh("zero-vis")
        q.send("x")
        raises(InvalidArgument, q.receive, 1, visibility_ms=0)
        raises(InvalidArgument, q.receive, 1, visibility_ms=2**64 - 1)
        got = q.receive(1)
        ensure(len(got) == 1 and got[0].attempt == 1)

    def queues_are_isolated():
        a = fresh("iso-a")
        b = fresh("iso-b")
        a.send("for a")
        ensure(b.receive(10) == [])
        ensure(len(a.receive(10)) == 1)

    def bad_queue_names_are_invalid_name():
        for bad in ["", ".", "..", ".hidden", "a/b", "a\\b", "a\0b", "with space", "ü", "q" * 101]:
            raises(InvalidName, Queue.open, bad)

    def reserved_queue_name_is_reserved_name():
        raises(ReservedName, Queue.open, "__alkstore_outbox")

    def priority_is_claimed_first():
        q = fresh("priority")
        for t, p in [("low", 0), ("high", 9), ("mid", 5), ("low2", 0)]:
            q.send(t, priority=p)
        got = q.claim(10)
        order = [body(j) for j in got]
        ensure(order == ["high", "mid", "low", "low2"], order)
        ensure(got[0].priority == 9 and got[0].attempt == 1)

    def min_priority_leaves_lower_priorities_alone():
        q = fresh("floor")
        q.send("low", priority=1)
        q.send("urgent", priority=5)
        got = q.claim(10, min_priority=5)
        ensure(len(got) == 1 and body(got[0]) == "urgent", got)
        ensure(q.claim(10, min_priority=5) == [])
        got = q.claim(10)
        ensure(len(got) == 1 and body(got[0]) == "low", got)

    def delayed_message_is_claimed_when_due():
        q = fresh("delay")
        id = q.send("later", delay_ms=50)
        ensure(q.claim(1) == [])
        job = q.get_job(id)
        ensure(job.state == JobState.DELAYED and job.attempt == 0, job)
        pause(80)
        ensure(q.get_job(id).state == JobState.WAITING)
        got = q.claim(1)
        ensure(len(got) == 1 and got[0].id == id)
        ensure(q.get_job(id).state == JobState.IN_FLIGHT)
        q.send("now", run_at_ms=1)
        ensure(len(q.claim(1)) == 1)

    def claim_wait_returns_a_delayed_message_when_due():
        q = fresh("claim-wait")
        q.send("soon", delay_ms=60)
        got = q.claim(1, wait_ms=5_000)
        ensure(len(got) == 1 and body(got[0]) == "soon", got)
        ensure(q.claim(1, wait_ms=30) == [])

    def retry_then_dead_letters_then_redrive():
        q = fresh("retry")
        id = q.send("job", max_attempts=2)
        first = q.claim(1)
        ensure(first[0].max_attempts == 2)
        ensure(isinstance(q.retry(first[0].receipt, "e1", delay_ms=0), Scheduled))
        raises(StaleReceipt, q.ack, first[0].receipt)
        second = q.claim(1)
        ensure(len(second) == 1 and second[0].attempt == 2)
        ensure(isinstance(q.retry(second[0].receipt, "e2", delay_ms=0), DeadLettered))
        ensure(q.claim(1) == [])
        dead = q.get_job(id)
        ensure(dead.state == JobState.DEAD and dead.attempt == 2, dead)
        ensure(dead.last_error == "e2" and dead.died_at_ms is not None, dead)
        listed = q.dead_letters(max=10)
        ensure(len(listed) == 1 and listed[0].id == id)
        back = q.redrive([id, id + 1_000])
        ensure(len(back) == 2 and back[1] is None, back)
        new = back[0]
        ensure(new is not None and new > id, back)
        ensure(q.get_job(id) is None)
        again = q.claim(1)
        ensure(len(again) == 1 and again[0].id == new and again[0].attempt == 1, again)
        ensure(body(again[0]) == "job" and again[0].max_attempts == 2)
        q.ack(again[0].receipt)
        ensure(q.get_job(new) is None)

    def retry_without_delay_follows_the_backoff_curve():
        q = fresh("backoff")
        q.send("x", backoff_base_ms=1_000)
        d = q.claim(1)
        before = now_ms()
        r = q.retry(d[0].receipt, "boom")
        after = now_ms()
        ensure(isinstance(r, Scheduled), r)
        ensure(before + 500 <= r.value <= after + 1_000, (before, r.value, after))
        ensure(q.claim(1) == [])

    def fail_goes_straight_to_the_dead_letters():
        q = fresh("fail")
        id = q.send("bad")
        d = q.claim(1)
        ensure(q.fail(d[0].receipt, "cannot parse") is True)
        ensure(q.fail(d[0].receipt, "again") is False)
        job = q.get_job(id)
        ensure(job.state == JobState.DEAD and job.last_error == "cannot parse", job)
        ensure(q.purge_dead_letters() == 1)
        ensure(q.get_job(id) is None)

    def heartbeat_extends_a_live_delivery_only():
        q = fresh("heartbeat")
        q.send("long")
        # Live until the heartbeat however loaded the machine is.
        d = q.claim(1, visibility_ms=2_000)
        ensure(q.heartbeat(d[0].receipt, 10_000) is True)
        pause(60)
        ensure(q.claim(1) == [])
        ensure(q.heartbeat(d[0].receipt, 40) is True)
        pause(60)
        ensure(q.heartbeat(d[0].receipt, 10_000) is False)
        again = q.claim(1)
        ensure(len(again) == 1 and again[0].attempt == 2)
        raises(StaleReceipt, q.heartbeat, d[0].receipt, 100)
        raises(InvalidArgument, q.heartbeat, again[0].receipt, 0)

    def a_lapsed_last_attempt_goes_to_the_dead_letters():
        q = fresh("lapse")
        id = q.send("slow", max_attempts=1)
        q.claim(1, visibility_ms=40)
        pause(60)
        ensure(q.claim(1) == [])
        job = q.get_job(id)
        ensure(job.state == JobState.DEAD and job.attempt == 1, job)

    def expired_messages_go_to_the_dead_letters():
        q = fresh("expiry")
        # Long enough that both are claimed before they expire however
        # loaded the machine is; short enough to wait for.
        waiting = q.send("a", expires_in_ms=2_000)
        held = q.send("b", expires_in_ms=2_000)
        d = q.claim(1, visibility_ms=60_000)
        ensure(len(d) == 1 and d[0].id == waiting)
        h = q.claim(1, visibility_ms=60_000)
        ensure(len(h) == 1 and h[0].id == held, h)
        q.nack(d[0].receipt)
        pause(2_100)
        ensure(q.claim(10) == [])
        ensure(q.get_job(waiting).state == JobState.DEAD)
        ensure(q.sweep_expired() == 1)
        ensure(q.get_job(held).state == JobState.DEAD)

    def cancel_deletes_in_any_state():
        q = fresh("cancel")
        a = q.send("a")
        b = q.send("b", delay_ms=60_000)
        ensure(q.cancel(a) is True)
        ensure(q.cancel(b) is True)
        ensure(q.cancel(a) is False)
        ensure(q.get_job(a) is None)
        ensure(q.claim(10) == [])

    def groups_have_one_message_in_flight_in_send_order():
        q = fresh("groups")
        q.send("g1", group="g")
        q.send("g2", group="g")
        q.send("h1", group="h")
        got = q.claim(10)
        order = [body(j) for j in got]
        ensure(order == ["g1", "h1"], order)
        ensure(got[0].group == "g")
        ensure(q.claim(10) == [])
        q.ack(got[0].receipt)
        got = q.claim(10)
        ensure(len(got) == 1 and body(got[0]) == "g2", got)

    def groups_take_turns():
        q = fresh("turns")
        for k, n in [("big", 4), ("a", 1), ("b", 1)]:
            for i in range(n):
                q.send(f"{k}{i}", group=k)
        order = []
        for _ in range(6):
            got = q.claim(1)
            ensure(len(got) == 1, order)
            order.append(body(got[0]))
            q.ack(got[0].receipt)
        ensure(order == ["big0", "a0", "b0", "big1", "big2", "big3"], order)

    def bad_send_options_are_invalid_argument():
        q = fresh("bad-options")
        bad = [
            dict(delay_ms=1, run_at_ms=1),
            dict(max_attempts=0),
            dict(max_attempts=10_001),
            dict(backoff_base_ms=0),
            dict(expires_in_ms=0),
            dict(delay_ms=2**64 - 1),
            dict(run_at_ms=2**64 - 1),
            dict(group=""),
            dict(group="g" * 257),
        ]
        for options in bad:
            raises(InvalidArgument, q.send, "x", **options)
        ensure(q.claim(10) == [])
        ensure(q.dead_letters(max=0) == [])
        raises(InvalidArgument, q.redrive, [1] * 1_001)

    def stats_count_messages_by_state():
        q = fresh("stats")
        s = q.stats()
        ensure((s.waiting, s.delayed, s.in_flight, s.dead, s.groups) == (0, 0, 0, 0, 0), s)
        ensure(s.oldest_waiting_enqueued_at_ms is None, s)
        before = now_ms()
        q.send("a")
        q.send("b")
        q.send("later", delay_ms=3_600_000)
        q.send("g1", group="g")
        q.send("g2", group="g")
        s = q.stats()
        ensure((s.waiting, s.delayed, s.in_flight, s.dead, s.groups, s.groups_in_flight)
               == (4, 1, 0, 0, 1, 0), s)
        t = s.oldest_waiting_enqueued_at_ms
        ensure(t is not None and t + 1_000 >= before and t <= now_ms() + 1_000, s)
        jobs = q.claim(10)
        ensure(len(jobs) == 3, jobs)
        s = q.stats()
        ensure((s.waiting, s.delayed, s.in_flight, s.groups_in_flight) == (1, 1, 3, 1), s)
        for j in jobs:
            ensure(q.fail(j.receipt, "no"))
        s = q.stats()
        ensure((s.waiting, s.delayed, s.in_flight, s.dead, s.groups_in_flight)
               == (1, 1, 0, 3, 0), s)
        q.purge_dead_letters()
        s = q.stats()
        ensure((s.dead, s.waiting, s.delayed) == (0, 1, 1), s)

    def group_concurrency_hands_out_n_in_send_order():
        q = fresh("group-n")
        ensure(q.limits() == NO_LIMITS, q.limits())
        q.set_limits(group_concurrency=3)
        ensure(q.limits() == QueueLimits(3, None, None, False), q.limits())
        sent = [q.send(f"g{i}", group="g") for i in range(5)]
        got = q.claim(10)
        ensure(ids(got) == sent[:3], (ids(got), sent))
        ensure(q.claim(10) == [])
        q.ack(got[0].receipt)
        nxt = q.claim(10)
        ensure(ids(nxt) == [sent[3]], (ids(nxt), sent))

    def max_in_flight_caps_the_queue():
        q = fresh("max-in-flight")
        q.set_limits(max_in_flight=2)
        limits = QueueLimits(1, 2, None, False)
        ensure(q.limits() == limits, q.limits())
        sent = [q.send(f"m{i}") for i in range(4)]
        got = q.claim(10)
        ensure(ids(got) == sent[:2], (ids(got), sent))
        ensure(q.claim(10) == [])
        q.ack(got[1].receipt)
        nxt = q.claim(10)
        ensure(ids(nxt) == [sent[2]], (ids(nxt), sent))
        raises(InvalidArgument, q.set_limits, max_in_flight=0)
        ensure(q.limits() == limits, q.limits())

    def rate_limit_grants_capacity_then_waits():
        q = fresh("rate")
        raises(InvalidArgument, q.try_take, 1)
        rate = rate_limit(3, 1, 60_000)
        q.set_limits(rate=rate)
        limits = QueueLimits(1, None, rate, False)
        ensure(q.limits() == limits, q.limits())
        sent = [q.send(f"r{i}") for i in range(5)]
        got = q.claim(10)
        ensure(ids(got) == sent[:3], (ids(got), sent))
        ensure(q.claim(10) == [])
        taken = q.try_take(1)
        ensure(isinstance(taken, WaitMs) and 0 < taken.value <= 60_000, taken)
        raises(InvalidArgument, q.try_take, 0)
        raises(InvalidArgument, q.try_take, 4)
        raises(InvalidArgument, q.set_limits, group_concurrency=0, rate=rate)
        raises(InvalidArgument, q.set_limits, rate=rate_limit(3, 1, 0))
        raises(InvalidArgument, q.set_limits, rate_per_group=True)
        ensure(q.limits() == limits, q.limits())

    def unique_send_returns_the_live_job():
        q = fresh("unique")
        first = q.send_unique("a", "k")
        ensure(not first.duplicate, first)
        again = q.send_unique("b", "k")
        ensure(again.duplicate and again.id == first.id, (first, again))
        got = q.claim(10)
        ensure(len(got) == 1 and body(got[0]) == "a", got)
        # In flight, the key is still held.
        held = q.send_unique("c", "k")
        ensure(held.duplicate and held.id == first.id, held)
        q.ack(got[0].receipt)
        free = q.send_unique("d", "k")
        ensure(not free.duplicate and free.id > first.id, (first, free))
        # Held for an hour after the send, whatever becomes of the message.
        hour = 3_600_000
        timed = q.send_unique("e", "t", for_ms=hour)
        ensure(not timed.duplicate, timed)
        q.cancel(free.id)
        got = q.claim(10)
        ensure(ids(got) == [timed.id], got)
        q.ack(got[0].receipt)
        after = q.send_unique("f", "t", for_ms=hour)
        ensure(after.duplicate and after.id == timed.id, (timed, after))
        ensure(q.claim(10) == [])
        raises(InvalidArgument, q.send_unique, "g", "")
        raises(InvalidArgument, q.send_unique, "g", "k" * 257)
        ensure(q.claim(10) == [])

    def complete_keeps_a_result():
        q = fresh("results")
        id = q.send("work")
        got = q.claim(1)
        ensure(ids(got) == [id], got)
        before = now_ms()
        result = Json('{"pages":3}')
        ensure(q.complete(got[0].receipt, result) is True)
        r = q.get_result(id)
        ensure(r is not None, "no result after complete")
        ensure(r.id == id and isinstance(r.payload, Json) and body(r) == '{"pages":3}', r)
        ensure(r.completed_at_ms + 1_000 >= before and r.completed_at_ms <= now_ms() + 1_000, r)
        ensure(r.expires_at_ms == r.completed_at_ms + 86_400_000, r)
        # Completing acknowledged the message.
        ensure(q.get_job(id) is None)
        ensure(q.claim(10) == [])
        ensure(q.complete(got[0].receipt, result) is False)
        ensure(q.delete_result(id) is True)
        ensure(q.get_result(id) is None)
        ensure(q.delete_result(id) is False)
        # An oversized result, or a keep of 0, keeps nothing and leaves the
        # delivery in flight.
        id = q.send("more")
        got = q.claim(1)
        e = raises(PayloadTooLarge, q.complete, got[0].receipt, "x" * 65_537)
        ensure(e.size == 65_537 and e.limit == 65_536, e)
        raises(InvalidArgument, q.complete, got[0].receipt, result, keep_ms=0)
        ensure(q.get_result(id) is None)
        ensure(q.get_job(id).state == JobState.IN_FLIGHT)
        ensure(q.complete(got[0].receipt, "x" * 65_536, keep_ms=60_000) is True)
        r = q.get_result(id)
        ensure(r is not None and r.expires_at_ms == r.completed_at_ms + 60_000, r)

    def limiter_take_tokens():
        name = f"p{nonce}-limiter"
        rate = rate_limit(2, 1, 60_000)
        taken = limiter.try_take(name, 1, rate)
        ensure(isinstance(taken, Granted) and taken.value == 1, taken)
        taken = limiter.try_take(name, 1, rate)
        ensure(isinstance(taken, Granted) and taken.value == 0, taken)
        taken = limiter.try_take(name, 1, rate)
        ensure(isinstance(taken, WaitMs) and 0 < taken.value <= 60_000, taken)
        # Buckets are separate by name.
        other = limiter.Limiter(f"p{nonce}-limiter-2", capacity=2, refill=1, interval_ms=60_000)
        taken = other.try_take(2)
        ensure(isinstance(taken, Granted) and taken.value == 0, taken)
        raises(InvalidArgument, limiter.try_take, name, 0, rate)
        raises(InvalidArgument, limiter.try_take, name, 3, rate)
        raises(InvalidArgument, limiter.try_take, name, 1, rate_limit(0, 1, 60_000))
        for bad in BAD_NAMES:
            raises(InvalidName, limiter.try_take, bad, 1, rate)

    Contract().run([
        open_returns_named_queue,
        receive_on_empty_queue_is_empty,
        send_returns_increasing_ids,
        receive_is_fifo,
        json_and_text_payloads_round_trip,
        first_delivery_has_attempt_1,
        received_messages_are_invisible,
        batch_receive_respects_max,
        receive_max_zero_is_clamped_to_one,
        redelivery_after_visibility_increments_attempt,
        stale_receipt_after_redelivery_is_rejected,
        ack_deletes_the_message,
        double_ack_is_ok,
        malformed_receipt_is_a_no_op,
        nack_makes_visible_now_and_keeps_attempt,
        send_batch_and_ack_batch,
        ack_batch_reports_stale_receipts_and_acks_the_rest,
        send_batch_is_all_or_nothing,
        receive_wait_returns_at_once_when_a_message_is_there,
        receive_wait_times_out_with_an_empty_list,
        purge_removes_visible_and_in_flight,
        payload_over_64kib_is_payload_too_large,
        invalid_json_is_invalid_argument,
        valid_json_beyond_a_value_parser_is_accepted,
        receipt_never_issued_by_this_queue,
        zero_visibility_is_invalid_argument,
        queues_are_isolated,
        bad_queue_names_are_invalid_name,
        reserved_queue_name_is_reserved_name,
        priority_is_claimed_first,
        min_priority_leaves_lower_priorities_alone,
        delayed_message_is_claimed_when_due,
        claim_wait_returns_a_delayed_message_when_due,
        retry_then_dead_letters_then_redrive,
        retry_without_delay_follows_the_backoff_curve,
        fail_goes_straight_to_the_dead_letters,
        heartbeat_extends_a_live_delivery_only,
        a_lapsed_last_attempt_goes_to_the_dead_letters,
        expired_messages_go_to_the_dead_letters,
        cancel_deletes_in_any_state,
        groups_have_one_message_in_flight_in_send_order,
        groups_take_turns,
        bad_send_options_are_invalid_argument,
        stats_count_messages_by_state,
        group_concurrency_hands_out_n_in_send_order,
        max_in_flight_caps_the_queue,
        rate_limit_grants_capacity_then_waits,
        unique_send_returns_the_live_job,
        complete_keeps_a_result,
        limiter_take_tokens,
    ])


class Run(exports.Run):
    def run(self) -> None:
        contract()
