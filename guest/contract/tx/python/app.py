"""The transactions, outboxes and schedules contract, checked from a Python
guest.

The same cases, in the same order and with the same names, as the Rust
guest beside it (../rust); ../README.md says what each case expects.
"""

import time

from componentize_py_types import Err
from contract import CaseFailed, Contract, ensure, raises
from wit_world import exports
from wit_world.imports import notify, schedule, stream
from wit_world.imports.outbox import Outbox
from wit_world.imports.queue import (
    ClaimOptions,
    JobState,
    Payload_Json,
    Payload_Text,
    Queue,
    Retried_DeadLettered,
    Retried_Scheduled,
    SendOptions,
)
from wit_world.imports.schedule import ScheduleError_InvalidSpec, ScheduleError_Store
from wit_world.imports.tx import Transaction
from wit_world.imports.types import (
    Error_InvalidArgument,
    Error_InvalidName,
    Error_ReservedName,
    Error_StaleReceipt,
)

BAD_NAMES = ["", ".", "..", ".hidden", "a/b", "a\\b", "a\0b", "with space", "ü", "x" * 101]


def pause(ms):
    time.sleep(ms / 1000)


def now_ms():
    return time.time_ns() // 1_000_000


def text(t):
    return Payload_Text(t)


def body(j):
    return j.payload.value


def opts(**given):
    fields = dict(
        priority=None,
        delay_ms=None,
        run_at_ms=None,
        max_attempts=None,
        backoff_base_ms=None,
        expires_in_ms=None,
        group=None,
    )
    fields.update(given)
    return SendOptions(**fields)


def claim_all(q):
    return q.claim(ClaimOptions(max=1000, visibility_ms=60_000, min_priority=None, wait_ms=None))


def schedule_error(kind, fn, *args):
    """Calls fn and expects a schedule-error of class kind; its value."""
    try:
        value = fn(*args)
    except Err as e:
        ensure(isinstance(e.value, kind), f"expected {kind.__name__}, got {e.value!r}")
        return e.value.value
    raise CaseFailed(f"expected {kind.__name__}, got {value!r}")


def contract():
    nonce = time.time_ns()

    def fresh(case):
        return f"p{nonce}-{case}"

    def all_in(tx, n):
        stream.publish(f"{n}-in", b"source")
        ensure(tx.publish(f"{n}-out", b"plain") == 1)
        ensure(tx.publish_with_key(f"{n}-out", "k", b"keyed") == 2)
        tx.save_offset(f"{n}-in", "worker", 1)
        tx.enqueue(f"{n}-q", [text("job-a"), text("job-b")], opts(priority=4))
        tx.outbox_enqueue(f"{n}-o", [text("mail")], opts())
        tx.notify(f"{n}-c")

    def nothing(n, listener):
        ensure(stream.read_since(f"{n}-out", 0, 10) == [])
        ensure(stream.get_offset(f"{n}-in", "worker") is None)
        ensure(claim_all(Queue.open(f"{n}-q")) == [])
        ensure(Outbox.open(f"{n}-o").next(None) is None)
        ensure(not listener.wait(50), "notified without a commit")

    def commit_applies_every_operation_together():
        n = fresh("commit")
        listener = notify.listen(f"{n}-c")
        tx = Transaction()
        all_in(tx, n)
        nothing(n, listener)
        tx.commit()
        got = [(e.key, e.payload) for e in stream.read_since(f"{n}-out", 0, 10)]
        ensure(got == [(None, b"plain"), ("k", b"keyed")], got)
        ensure(stream.get_offset(f"{n}-in", "worker") == 1)
        jobs = [(body(j), j.priority) for j in claim_all(Queue.open(f"{n}-q"))]
        ensure(jobs == [("job-a", 4), ("job-b", 4)], jobs)
        mail = Outbox.open(f"{n}-o").next(None)
        ensure(mail is not None and body(mail) == "mail")
        ensure(listener.wait(5_000), "the commit did not notify")
        raises(Error_InvalidArgument, tx.commit)

    def rollback_leaves_nothing():
        n = fresh("rollback")
        listener = notify.listen(f"{n}-c")
        tx = Transaction()
        all_in(tx, n)
        tx.rollback()
        nothing(n, listener)
        raises(Error_InvalidArgument, tx.commit)
        raises(Error_InvalidArgument, tx.enqueue, f"{n}-q", [text("late")], opts())
        raises(Error_InvalidArgument, tx.notify, f"{n}-c")

    def dropping_an_open_transaction_rolls_it_back():
        n = fresh("drop")
        listener = notify.listen(f"{n}-c")
        with Transaction() as tx:
            all_in(tx, n)
        nothing(n, listener)
        after = Transaction()
        after.publish(f"{n}-out", b"after")
        after.commit()
        ensure(len(stream.read_since(f"{n}-out", 0, 10)) == 1)

    def refused_operations_keep_the_transaction():
        n = fresh("refused")
        q = f"{n}-q"
        tx = Transaction()
        raises(Error_ReservedName, tx.enqueue, "__alkstore_x", [text("x")], opts())
        raises(Error_InvalidName, tx.outbox_enqueue, "", [text("x")], opts())
        raises(Error_InvalidArgument, tx.enqueue, q, [text("x")], opts(delay_ms=1, run_at_ms=1))
        raises(Error_InvalidArgument, tx.save_offset, f"{n}-never", "w", 5)
        raises(Error_InvalidArgument, tx.enqueue, q, [text(str(i)) for i in range(1001)], opts())
        raises(Error_InvalidArgument, tx.enqueue, q, [text("ok"), Payload_Json("{")], opts())
        tx.enqueue(q, [text("kept")], opts())
        tx.commit()
        got = [body(j) for j in claim_all(Queue.open(q))]
        ensure(got == ["kept"], got)

    def sent_jobs_keep_their_options():
        n = fresh("options")
        q = Queue.open(f"{n}-q")
        tx = Transaction()
        tx.enqueue(f"{n}-q", [text("grouped")], opts(priority=7, max_attempts=3, group="g"))
        tx.enqueue(f"{n}-q", [text("later")], opts(delay_ms=60))
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
        ensure(Outbox.open(name).name() == name)
        for bad in BAD_NAMES:
            raises(Error_InvalidName, Outbox.open, bad)
        raises(Error_ReservedName, Outbox.open, "__alkstore_x")
        raises(Error_ReservedName, Queue.open, f"__alkstore_outbox_{name}")

    def outbox_job_is_done_once():
        o = Outbox.open(fresh("done"))
        id = o.enqueue(text("work"), opts())
        j = o.next(None)
        ensure(j is not None and j.id == id and j.attempt == 1 and body(j) == "work", j)
        o.done(j.receipt)
        ensure(o.next(None) is None)
        ensure(o.get_job(id) is None)

    def outbox_failure_backs_off():
        o = Outbox.open(fresh("backoff"))
        id = o.enqueue(text("work"), opts())
        j = o.next(None)
        ensure(j is not None)
        before = now_ms()
        r = o.failed(j.receipt, "smtp down")
        after = now_ms()
        ensure(isinstance(r, Retried_Scheduled), r)
        ensure(before + 500 <= r.value <= after + 1_000, (before, r.value, after))
        ensure(o.next(None) is None)
        info = o.get_job(id)
        ensure(info is not None and info.state == JobState.DELAYED, info)
        ensure(info.last_error == "smtp down", info)

    def outbox_last_failure_dead_letters():
        o = Outbox.open(fresh("dead"))
        id = o.enqueue(text("work"), opts(max_attempts=1))
        j = o.next(None)
        ensure(j is not None)
        ensure(isinstance(o.failed(j.receipt, "gave up"), Retried_DeadLettered))
        dead = o.dead_letters(None, 10)
        ensure(len(dead) == 1 and dead[0].id == id and dead[0].last_error == "gave up", dead)

    def outbox_job_comes_back_after_its_visibility():
        o = Outbox.open(fresh("visibility"))
        o.enqueue(text("work"), opts())
        first = o.next(40)
        ensure(first is not None)
        ensure(o.next(None) is None)
        pause(60)
        second = o.next(None)
        ensure(second is not None and second.id == first.id and second.attempt == 2, second)
        raises(Error_StaleReceipt, o.done, first.receipt)
        o.done(second.receipt)
        ensure(o.next(None) is None)

    def bad_specs_are_invalid_spec():
        name = fresh("specs")
        for bad in ["*/5 * * * *", "@daily", "@every 0s", "@every 5", "@every 5x", "@every -1s", "@every 1.5s", ""]:
            schedule_error(ScheduleError_InvalidSpec, schedule.schedule, name, bad, fresh("q"), text("x"), opts())
        ensure(schedule.get(name) is None)

    def bad_schedule_names_are_store_errors():
        q = fresh("q")
        for bad in BAD_NAMES:
            e = schedule_error(ScheduleError_Store, schedule.schedule, bad, "@every 1s", q, text("x"), opts())
            ensure(isinstance(e, Error_InvalidName), e)
            e = schedule_error(ScheduleError_Store, schedule.schedule, fresh("s"), "@every 1s", bad, text("x"), opts())
            ensure(isinstance(e, Error_InvalidName), e)
        e = schedule_error(ScheduleError_Store, schedule.schedule, "__alkstore_x", "@every 1s", q, text("x"), opts())
        ensure(isinstance(e, Error_ReservedName), e)
        e = schedule_error(
            ScheduleError_Store, schedule.schedule, fresh("s"), "@every 1s", q, text("x"), opts(delay_ms=1, run_at_ms=1)
        )
        ensure(isinstance(e, Error_InvalidArgument), e)

    def schedule_is_stored_replaced_and_removed():
        name, q = fresh("stored"), fresh("stored-q")
        o = opts(priority=3)
        before = now_ms()
        schedule.schedule(name, "@every 10m", q, Payload_Json('{"n":1}'), o)
        after = now_ms()
        s = schedule.get(name)
        ensure(s is not None, "not stored")
        ensure(
            s.spec == "@every 10m"
            and s.every_ms == 600_000
            and s.queue == q
            and s.payload == Payload_Json('{"n":1}')
            and s.options == o
            and before + 600_000 <= s.next_fire_ms <= after + 600_000,
            s,
        )
        ensure(any(l.name == name for l in schedule.list()))
        schedule.schedule(name, "@every 10m", q, text("new"), opts())
        t = schedule.get(name)
        ensure(t.next_fire_ms == s.next_fire_ms and t.payload == text("new"), t)
        schedule.schedule(name, "@every 1h", q, text("new"), opts())
        ensure(schedule.get(name).next_fire_ms >= before + 3_600_000)
        ensure(schedule.unschedule(name) is True)
        ensure(schedule.unschedule(name) is False)
        ensure(schedule.get(name) is None)

    def run_fires_each_boundary_while_leading():
        name, q = fresh("run"), fresh("run-q")
        schedule.schedule(name, "@every 1s", q, text("tick"), opts(priority=2))
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
