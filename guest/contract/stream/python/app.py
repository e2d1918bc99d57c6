"""The stream contract, checked from a Python guest.

The same cases, in the same order and with the same names, as the Rust
guest beside it (../rust); ../README.md says what each case expects.
"""

import time

from alk_store import InvalidArgument, InvalidName, PayloadTooLarge, ReservedName, stream
from alk_store.stream import Transaction
from contract import BAD_NAMES, Contract, ensure, raises
from wit_world import exports

MIB = 1024 * 1024


def offsets(events):
    return [e.offset for e in events]


def now_ms():
    return time.time_ns() // 1_000_000


def contract():
    nonce = time.time_ns()

    def fresh(case):
        # Streams of their own per case: offsets in a fresh stream start at 1.
        return f"p{nonce}-{case}"

    def publish_returns_offsets_from_1_increasing():
        s = fresh("offsets")
        ensure([stream.publish(s, p) for p in [b"a", b"b", b"c"]] == [1, 2, 3])

    def offsets_are_per_stream():
        a, b = fresh("per-a"), fresh("per-b")
        stream.publish(a, b"x")
        stream.publish(a, b"y")
        ensure(stream.publish(b, b"z") == 1)

    def read_since_returns_every_field_in_offset_order():
        s = fresh("read")
        before = now_ms()
        stream.publish(s, b"one")
        stream.publish(s, bytes([0, 255, 7]))
        events = stream.read_since(s)
        ensure(offsets(events) == [1, 2], events)
        e = events[0]
        ensure(e.stream == s and e.key is None and e.payload == b"one", e)
        ensure(events[1].payload == bytes([0, 255, 7]), events[1])
        ensure(e.created_at + 5_000 >= before, f"created-at {e.created_at} before {before}")

    def read_since_respects_offset_and_limit():
        s = fresh("window")
        for i in range(10):
            stream.publish(s, bytes([i]))
        ensure(offsets(stream.read_since(s, 3, 4)) == [4, 5, 6, 7])
        ensure(offsets(stream.read_since(s, 8)) == [9, 10])
        ensure(stream.read_since(s, 10) == [])
        ensure(offsets(stream.read_since(s, 0, 0)) == [1])
        ensure(offsets(stream.events(s, 3, limit=2)) == [4, 5, 6, 7, 8, 9, 10])

    def unknown_stream_reads_empty():
        ensure(stream.read_since(fresh("never")) == [])
        ensure(stream.get_offset(fresh("never"), "c") is None)

    def keyed_and_unkeyed_interleave_in_one_order():
        s = fresh("keys")
        ensure(stream.publish(s, b"a", key="user-1") == 1)
        ensure(stream.publish(s, b"b") == 2)
        ensure(stream.publish(s, b"c", key="user-2") == 3)
        ensure(stream.publish(s, b"d", key="user-1") == 4)
        events = stream.read_since(s)
        keys = [e.key for e in events]
        ensure(keys == ["user-1", None, "user-2", "user-1"], keys)
        ensure([e.offset for e in events if e.key == "user-1"] == [1, 4])

    def publish_batch_assigns_consecutive_offsets_all_or_nothing():
        s = fresh("batch")
        stream.publish(s, b"first")
        ensure(stream.publish_batch(s, [b"a", ("k", b"b")]) == [2, 3])
        raises(InvalidArgument, stream.publish_batch, s, [b"c", ("", b"d")])
        read = stream.read_since(s)
        ensure(offsets(read) == [1, 2, 3] and read[2].key == "k", read)

    def next_wait_times_out_with_an_empty_list():
        sub = stream.subscribe(fresh("wait"), "c")
        ensure(sub.next(10, wait_ms=30) == [])

    def empty_key_is_invalid_argument():
        s = fresh("empty-key")
        raises(InvalidArgument, stream.publish, s, b"x", key="")
        raises(InvalidArgument, stream.publish, s, b"x", key="a\0b")
        raises(PayloadTooLarge, stream.publish, s, b"x", key="k" * 1025)
        ensure(stream.read_since(s) == [])

    def oversized_payload_is_payload_too_large():
        s = fresh("big")
        big = b"\x01" * (MIB + 1)
        e = raises(PayloadTooLarge, stream.publish, s, big)
        ensure(e.limit == MIB, e)
        ensure(stream.read_since(s) == [])
        ensure(stream.publish(s, big[1:]) == 1)

    def save_and_get_offset():
        s = fresh("save")
        for _ in range(3):
            stream.publish(s, b"x")
        ensure(stream.get_offset(s, "worker") is None)
        stream.save_offset(s, "worker", 2)
        ensure(stream.get_offset(s, "worker") == 2)
        ensure(stream.get_offset(s, "other-worker") is None)

    def saves_are_monotone():
        s = fresh("monotone")
        for _ in range(5):
            stream.publish(s, b"x")
        stream.save_offset(s, "w", 4)
        stream.save_offset(s, "w", 1)
        ensure(stream.get_offset(s, "w") == 4)
        stream.save_offset(s, "w", 5)
        ensure(stream.get_offset(s, "w") == 5)

    def save_beyond_last_offset_is_invalid_argument():
        s = fresh("beyond")
        stream.publish(s, b"x")
        raises(InvalidArgument, stream.save_offset, s, "w", 2)
        raises(InvalidArgument, stream.save_offset, fresh("empty-stream"), "w", 1)
        ensure(stream.get_offset(s, "w") is None)

    def trim_deletes_through_the_horizon_and_keeps_offsets():
        s = fresh("trim")
        for _ in range(6):
            stream.publish(s, b"x")
        ensure(stream.trim_to(s, 3) == 3)
        ensure(offsets(stream.read_since(s)) == [4, 5, 6])
        ensure(stream.trim_to(s, 3) == 0)
        ensure(stream.trim_to(fresh("never-trimmed"), 10) == 0)

    def read_below_the_horizon_resumes_at_the_first_remaining_event():
        s = fresh("below")
        for _ in range(6):
            stream.publish(s, b"x")
        stream.trim_to(s, 4)
        ensure(offsets(stream.read_since(s, 2, 1)) == [5])

    def saved_offset_below_the_horizon_stays_valid():
        s = fresh("saved-below")
        for _ in range(6):
            stream.publish(s, b"x")
        stream.save_offset(s, "slow", 2)
        stream.trim_to(s, 4)
        ensure(stream.get_offset(s, "slow") == 2)
        ensure(offsets(stream.subscribe(s, "slow").next(100)) == [5, 6])

    def offsets_are_never_reused_after_trim():
        s = fresh("no-reuse")
        for _ in range(3):
            stream.publish(s, b"x")
        stream.trim_to(s, 3)
        ensure(stream.publish(s, b"y") == 4)

    def subscribe_replays_from_the_saved_offset():
        s = fresh("replay")
        for _ in range(5):
            stream.publish(s, b"x")
        stream.save_offset(s, "c", 2)
        sub = stream.subscribe(s, "c")
        ensure(sub.position == 2, sub.position)
        ensure(offsets(sub.next(2)) == [3, 4])
        ensure(offsets(sub.next(100)) == [5])
        ensure(sub.position == 5, sub.position)
        ensure(offsets(stream.subscribe(s, "new")) == [1, 2, 3, 4, 5])

    def subscription_yields_new_events_and_never_saves_by_itself():
        s = fresh("live")
        stream.publish(s, b"a")
        sub = stream.subscribe(s, "c")
        ensure(offsets(sub.next(100)) == [1])
        ensure(sub.next(100) == [])
        stream.publish(s, b"b")
        ensure(offsets(sub) == [2])
        ensure(stream.get_offset(s, "c") is None)
        sub.save()
        ensure(stream.get_offset(s, "c") == 2)

    def transaction_commit_applies_publishes_and_saves_together():
        source, output = fresh("tx-in"), fresh("tx-out")
        stream.publish(source, b"order-1")
        with Transaction() as tx:
            ensure(tx.publish(output, b"invoice-1") == 1)
            ensure(tx.publish(output, b"receipt-1", key="order-1") == 2)
            tx.save_offset(source, "billing", 1)
        ensure(offsets(stream.read_since(output)) == [1, 2])
        ensure(stream.get_offset(source, "billing") == 1)

    def transaction_dropped_without_commit_rolls_back_event_and_save():
        source, output = fresh("drop-in"), fresh("drop-out")
        stream.publish(source, b"x")
        tx = Transaction()
        tx.publish(output, b"ghost")
        tx.save_offset(source, "w", 1)
        del tx
        ensure(stream.read_since(output) == [])
        ensure(stream.get_offset(source, "w") is None)
        # The rolled-back offset is free again: nothing was ever published.
        ensure(stream.publish(output, b"real") == 1)

    def transaction_rollback_discards_everything():
        s = fresh("rollback")
        tx = Transaction()
        tx.publish(s, b"ghost")
        tx.rollback()
        raises(InvalidArgument, tx.commit)
        ensure(stream.read_since(s) == [])
        # A block that raises rolls back as well.
        try:
            with Transaction() as tx:
                tx.publish(s, b"ghost")
                raise KeyError("stop")
        except KeyError:
            pass
        ensure(stream.read_since(s) == [])

    def transaction_refusals_leave_it_usable():
        s = fresh("tx-refusal")
        with Transaction() as tx:
            tx.publish(s, b"kept")
            raises(InvalidArgument, tx.publish, s, b"x", key="")
            raises(InvalidArgument, tx.save_offset, s, "w", 99)
            raises(ReservedName, tx.publish, "__alkstore_x", b"x")
        ensure(offsets(stream.read_since(s)) == [1])

    def empty_transaction_commits():
        Transaction().commit()

    def rollback_of_an_unused_transaction_finishes_it():
        s = fresh("unused-rollback")
        tx = Transaction()
        tx.rollback()
        raises(InvalidArgument, tx.publish, s, b"late")
        raises(InvalidArgument, tx.commit)
        ensure(stream.read_since(s) == [])

    def bad_stream_names_are_invalid_name():
        for bad in BAD_NAMES:
            raises(InvalidName, stream.publish, bad, b"x")
            raises(InvalidName, stream.read_since, bad, 0, 1)
            raises(InvalidName, stream.subscribe, bad, "c")

    def reserved_stream_name_is_reserved_name():
        raises(ReservedName, stream.publish, "__alkstore_events", b"x")
        raises(ReservedName, stream.trim_to, "__alkstore_events", 1)

    def consumer_names_are_checked_but_not_reserved():
        s = fresh("consumers")
        stream.publish(s, b"x")
        for bad in ["", "a/b", "with space", "ü", "c" * 101]:
            raises(InvalidName, stream.save_offset, s, bad, 1)
            raises(InvalidName, stream.get_offset, s, bad)
        stream.save_offset(s, "__alkstore_is_fine_here", 1)
        stream.save_offset(s, ".dotted", 1)

    def info_tells_offsets_and_lags():
        s = fresh("info")
        empty = stream.info(s)
        ensure(empty.first is None and empty.last == 0 and empty.consumers == [], empty)
        for i in range(5):
            stream.publish(s, bytes([i]))
        stream.save_offset(s, "slow", 1)
        stream.save_offset(s, "fast", 5)
        stream.trim_to(s, 2)
        info = stream.info(s)
        ensure(info.first == 3 and info.last == 5, info)
        lags = [(c.consumer, c.offset, c.lag) for c in info.consumers]
        ensure(lags == [("fast", 5, 0), ("slow", 1, 4)], lags)
        stream.trim_to(s, 5)
        info = stream.info(s)
        ensure(info.first is None and info.last == 5, info)
        for bad in BAD_NAMES:
            raises(InvalidName, stream.info, bad)

    Contract().run([
        publish_returns_offsets_from_1_increasing,
        offsets_are_per_stream,
        read_since_returns_every_field_in_offset_order,
        read_since_respects_offset_and_limit,
        unknown_stream_reads_empty,
        keyed_and_unkeyed_interleave_in_one_order,
        publish_batch_assigns_consecutive_offsets_all_or_nothing,
        next_wait_times_out_with_an_empty_list,
        empty_key_is_invalid_argument,
        oversized_payload_is_payload_too_large,
        save_and_get_offset,
        saves_are_monotone,
        save_beyond_last_offset_is_invalid_argument,
        trim_deletes_through_the_horizon_and_keeps_offsets,
        read_below_the_horizon_resumes_at_the_first_remaining_event,
        saved_offset_below_the_horizon_stays_valid,
        offsets_are_never_reused_after_trim,
        subscribe_replays_from_the_saved_offset,
        subscription_yields_new_events_and_never_saves_by_itself,
        transaction_commit_applies_publishes_and_saves_together,
        transaction_dropped_without_commit_rolls_back_event_and_save,
        transaction_rollback_discards_everything,
        transaction_refusals_leave_it_usable,
        empty_transaction_commits,
        rollback_of_an_unused_transaction_finishes_it,
        bad_stream_names_are_invalid_name,
        reserved_stream_name_is_reserved_name,
        consumer_names_are_checked_but_not_reserved,
        info_tells_offsets_and_lags,
    ])


class Run(exports.Run):
    def run(self) -> None:
        contract()
