"""The transactions, outboxes and schedules contract, checked from a Python
guest.

The same cases, in the same order and with the same names, as the Rust
guest beside it (../rust); ../README.md says what each case expects.
"""

import time

from alk_store import (
    InvalidArgument,
    InvalidName,
    InvalidSpec,
    ReservedName,
    StaleReceipt,
    notify,
    schedule,
    stream,
)
from alk_store.outbox import Outbox
from alk_store.queue import DeadLettered, JobState, Json, Queue, Scheduled, Text, send_options
from alk_store.tx import Transaction
from contract import BAD_NAMES, Contract, ensure, raises
from wit_world import exports


def pause(ms):
    time.sleep(ms / 1000)


def now_ms():
    return time.time_ns() // 1_000_000


def body(j):
    return j.payload.value


def claim_all(q):
    return q.claim(1000, visibility_ms=60_000)


def contract():
    nonce = time.time_ns()

    def fresh(case):
        return f"p{nonce}-{case}"

    def all_in(tx, n):
        stream.publish(f"{n}-in", b"source")
        ensure(tx.publish(f"{n}-out", b"plain") == 1)
        ensure(tx.publish(f"{n}-out", b"keyed", key="k") == 2)
        tx.save_offset(f"{n}-in", "worker", 1)
        tx.enqueue(f"{n}-q", ["job-a", "job-b"], priority=4)
        tx.outbox_enqueue(f"{n}-o", ["mail"])
        tx.notify(f"{n}-c")

    def nothing(n, listener):
        ensure(stream.read_since(f"{n}-out") == [])
        ensure(stream.get_offset(f"{n}-in", "worker") is None)
        ensure(claim_all(Queue.open(f"{n}-q")) == [])
        ensure(Outbox.open(f"{n}-o").next() is None)
        ensure(not listener.wait(50), "notified without a commit")

    def commit_applies_every_operation_together():
        n = fresh("commit")
        listener = notify.listen(f"{n}-c")
        tx = Transaction()
        all_in(tx, n)
        nothing(n, listener)
        tx.commit()
        got = [(e.key, e.payload) for e in stream.read_since(f"{n}-out")]
        ensure(got == [(None, b"plain"), ("k", b"keyed")], got)
        ensure(stream.get_offset(f"{n}-in", "worker") == 1)
        jobs = [(body(j), j.priority) for j in claim_all(Queue.open(f"{n}-q"))]
        ensure(jobs == [("job-a", 4), ("job-b", 4)], jobs)
        mail = Outbox.open(f"{n}-o").next()
        ensure(mail is not None and body(mail) == "mail")
        ensure(listener.wait(5_000), "the commit did not notify")
        raises(InvalidArgument, tx.commit)

    def rollback_leaves_nothing():
        n = fresh("rollback")
        listener = notify.listen(f"{n}-c")
        tx = Transaction()
        all_in(tx, n)
        tx.rollback()
        nothing(n, listener)
        raises(InvalidArgument, tx.commit)
        raises(InvalidArgument, tx.enqueue, f"{n}-q", ["late"])
        raises(InvalidArgument, tx.notify, f"{n}-c")

    def dropping_an_open_transaction_rolls_it_back():
        n = fresh("drop")
        listener = notify.listen(f"{n}-c")
        tx = Transaction()
        all_in(tx, n)
        del tx
        nothing(n, listener)
        after = Transaction()
        after.publish(f"{n}-out", b"after")
        after.commit()
        ensure(len(stream.read_since(f"{n}-out")) == 1)

    def refused_operations_keep_the_transaction():
        n = fresh("refused")
        q = f"{n}-q"
        tx = Transaction()
        raises(ReservedName, tx.enqueue, "__alkstore_x", ["x"])
        raises(InvalidName, tx.outbox_enqueue, "", ["x"])
        raises(InvalidArgument, tx.enqueue, q, ["x"], delay_ms=1, run_at_ms=1)
        raises(InvalidArgument, tx.save_offset, f"{n}-never", "w", 5)
        raises(InvalidArgument, tx.enqueue, q, [str(i) for i in range(1001)])
        raises(InvalidArgument, tx.enqueue, q, ["ok", Json("{")])
        tx.enqueue(q, ["kept"])
        tx.commit()
        got = [body(j) for j in claim_all(Queue.open(q))]
        ensure(got == ["kept"], got)

    def sent_jobs_keep_their_options():
        n = fresh("options")
        q = Queue.open(f"{n}-q")
        tx = Transaction()
        tx.enqueue(f"{n}-q", ["grouped"], priority=7, max_attempts=3, group="g")
        tx.enqueue(f"{n}-q", ["later"], delay_ms=60)
        tx.commit()
        got = claim_all(q)
        ensure(len(got) == 1, got)
        j = got[0]
        ensure(
            body(j) == "grouped" and j.priority == 7 and j.max_attempts == 3 and j.group == "g",
            j,
        )
        pause(100)
        later = [body(j) for j in claim_all(q)]
        ensure(later == ["later"], later)

    def enqueue_unique_in_a_transaction_stores_one():
        n = fresh("unique")
        q = Queue.open(n)
        tx = Transaction()
        tx.enqueue_unique(n, "first", "k")
        tx.enqueue_unique(n, "second", "k")
        tx.commit()
        tx = Transaction()
        tx.enqueue_unique(n, "third", "k")
        tx.commit()
        sent = q.send_unique("fourth", "k")
        got = claim_all(q)
        ensure(len(got) == 1 and body(got[0]) == "first", got)
        ensure(sent.duplicate and sent.id == got[0].id, sent)
        # A bad key is refused and the transaction goes on.
        tx = Transaction()
        raises(InvalidArgument, tx.enqueue_unique, n, "bad", "")
        tx.enqueue_unique(n, "fifth", "other")
        tx.commit()
        got = [body(j) for j in claim_all(q)]
        ensure(got == ["fifth"], got)

    def notify_only_transaction_notifies_at_commit():
        ch = fresh("only-notify")
        listener = notify.listen(ch)
        tx = Transaction()
        tx.notify(ch)
        tx.notify(ch)
        ensure(not listener.wait(50), "notified before the commit")
        tx.commit()
        ensure(listener.wait(5_000), "the commit did not notify")

    def outbox_names_follow_the_rules():
        name = fresh("outbox")
        ensure(Outbox.open(name).name == name)
        for bad in BAD_NAMES:
            raises(InvalidName, Outbox.open, bad)
        raises(ReservedName, Outbox.open, "__alkstore_x")
        raises(ReservedName, Queue.open, f"__alkstore_outbox_{name}")

    def outbox_job_is_done_once():
        o = Outbox.open(fresh("done"))
        id = o.enqueue("work")
        j = o.next()
        ensure(j is not None and j.id == id and j.attempt == 1 and body(j) == "work", j)
        o.done(j.receipt)
        ensure(o.next() is None)
        ensure(o.get_job(id) is None)

    def outbox_failure_backs_off():
        o = Outbox.open(fresh("backoff"))
        id = o.enqueue("work")
        j = o.next()
        ensure(j is not None)
        before = now_ms()
        r = o.failed(j.receipt, "smtp down")
        after = now_ms()
        ensure(isinstance(r, Scheduled), r)
        ensure(before + 500 <= r.value <= after + 1_000, (before, r.value, after))
        ensure(o.next() is None)
        info = o.get_job(id)
        ensure(info is not None and info.state == JobState.DELAYED, info)
        ensure(info.last_error == "smtp down", info)

    def outbox_last_failure_dead_letters():
        o = Outbox.open(fresh("dead"))
        id = o.enqueue("work", max_attempts=1)
        j = o.next()
        ensure(j is not None)
        ensure(isinstance(o.failed(j.receipt, "gave up"), DeadLettered))
        dead = o.dead_letters(max=10)
        ensure(len(dead) == 1 and dead[0].id == id and dead[0].last_error == "gave up", dead)

    def outbox_job_comes_back_after_its_visibility():
        o = Outbox.open(fresh("visibility"))
        o.enqueue("work")
        first = o.next(visibility_ms=40)
        ensure(first is not None)
        ensure(o.next() is None)
        pause(60)
        second = o.next()
        ensure(second is not None and second.id == first.id and second.attempt == 2, second)
        raises(StaleReceipt, o.done, first.receipt)
        o.done(second.receipt)
        ensure(o.next() is None)

    def bad_specs_are_invalid_spec():
        name = fresh("specs")
        for bad in ["*/5 * * * *", "@daily", "@every 0s", "@every 5", "@every 5x", "@every -1s", "@every 1.5s", ""]:
            raises(InvalidSpec, schedule.schedule, name, bad, fresh("q"), "x")
        ensure(schedule.get(name) is None)

    def bad_schedule_names_are_store_errors():
        q = fresh("q")
        # A scheduling call raises a store error as the error's own class.
        for bad in BAD_NAMES:
            raises(InvalidName, schedule.schedule, bad, "@every 1s", q, "x")
            raises(InvalidName, schedule.schedule, fresh("s"), "@every 1s", bad, "x")
        raises(ReservedName, schedule.schedule, "__alkstore_x", "@every 1s", q, "x")
        raises(InvalidArgument, schedule.schedule, fresh("s"), "@every 1s", q, "x", delay_ms=1, run_at_ms=1)

    def schedule_is_stored_replaced_and_removed():
        name, q = fresh("stored"), fresh("stored-q")
        before = now_ms()
        schedule.schedule(name, "@every 10m", q, Json('{"n":1}'), priority=3)
        after = now_ms()
        s = schedule.get(name)
        ensure(s is not None, "not stored")
        ensure(
            s.spec == "@every 10m"
            and s.every_ms == 600_000
            and s.queue == q
            and s.payload == Json('{"n":1}')
            and s.options == send_options(priority=3)
            and before + 600_000 <= s.next_fire_ms <= after + 600_000,
            s,
        )
        ensure(any(l.name == name for l in schedule.schedules()))
        schedule.schedule(name, "@every 10m", q, "new")
        t = schedule.get(name)
        ensure(t.next_fire_ms == s.next_fire_ms and t.payload == Text("new"), t)
        schedule.schedule(name, "@every 1h", q, "new")
        ensure(schedule.get(name).next_fire_ms >= before + 3_600_000)
        ensure(schedule.unschedule(name) is True)
        ensure(schedule.unschedule(name) is False)
        ensure(schedule.get(name) is None)

    def run_fires_each_boundary_while_leading():
        name, q = fresh("run"), fresh("run-q")
        schedule.schedule(name, "@every 1s", q, "tick", priority=2)
        first = schedule.get(name)
        report = schedule.run(1_200)
        ensure(report.led and report.fired >= 1, report)
        jobs = claim_all(Queue.open(q))
        ensure(len(jobs) == report.fired, (len(jobs), report))
        ensure(all(body(j) == "tick" and j.priority == 2 for j in jobs))
        # Each boundary fired once: the next one is as many intervals on.
        ensure(schedule.get(name).next_fire_ms == first.next_fire_ms + 1_000 * report.fired)
        schedule.unschedule(name)

    Contract().run([
        commit_applies_every_operation_together,
        rollback_leaves_nothing,
        dropping_an_open_transaction_rolls_it_back,
        refused_operations_keep_the_transaction,
        sent_jobs_keep_their_options,
        enqueue_unique_in_a_transaction_stores_one,
        notify_only_transaction_notifies_at_commit,
        outbox_names_follow_the_rules,
        outbox_job_is_done_once,
        outbox_failure_backs_off,
        outbox_last_failure_dead_letters,
        outbox_job_comes_back_after_its_visibility,
        bad_specs_are_invalid_spec,
        bad_schedule_names_are_store_errors,
        schedule_is_stored_replaced_and_removed,
        run_fires_each_boundary_while_leading,
    ])


class Run(exports.Run):
    def run(self) -> None:
        contract()
