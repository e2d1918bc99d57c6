"""The lock contract, checked from a Python guest.

The same cases, in the same order and with the same names, as the Rust
guest beside it (../rust); ../README.md says what each case expects.
"""

import time

from alk_store import InvalidArgument, InvalidName, ReservedName, lock
from contract import BAD_NAMES, Contract, ensure, raises
from wit_world import exports


def now_ms():
    return time.time_ns() // 1_000_000


def pause(ms):
    time.sleep(ms / 1000)


def acquired(l, why="not acquired"):
    ensure(l is not None, why)
    return l


def contract():
    nonce = time.time_ns()

    def fresh(case):
        return f"p{nonce}-{case}"

    def try_lock_acquires_a_free_lock():
        name = fresh("free")
        l = acquired(lock.try_lock(name, "alice", 60_000))
        ensure(l.name == name and l.owner == "alice", l)
        ensure(l.token == 1, f"first token {l.token}")

    def a_held_lock_is_not_acquired_by_anyone_else():
        name = fresh("held")
        with acquired(lock.try_lock(name, "alice", 60_000)):
            ensure(lock.try_lock(name, "bob", 60_000) is None)

    def locks_are_not_re_entrant():
        name = fresh("reentrant")
        with acquired(lock.try_lock(name, "alice", 60_000)):
            ensure(lock.try_lock(name, "alice", 60_000) is None)

    def holder_reports_owner_deadline_and_token():
        name = fresh("holder")
        before = now_ms()
        l = acquired(lock.try_lock(name, "alice", 60_000))
        h = lock.holder(name)
        ensure(h is not None, "no holder")
        ensure(h.owner == "alice" and h.token == l.token, h)
        ensure(before + 59_000 <= h.expires_at <= now_ms() + 61_000, h.expires_at)

    def holder_of_a_free_lock_is_none():
        ensure(lock.holder(fresh("nobody")) is None)

    def renew_resets_the_deadline_from_now():
        name = fresh("renew")
        l = acquired(lock.try_lock(name, "alice", 60_000))
        ensure(l.renew(120_000) is True)
        h = lock.holder(name)
        ensure(h is not None and h.expires_at >= now_ms() + 110_000, h)
        # Absolute, not additive: a shorter TTL moves the deadline closer.
        ensure(l.renew(30_000) is True)
        h = lock.holder(name)
        ensure(h is not None and h.expires_at <= now_ms() + 31_000, h)

    def a_late_renew_is_refused():
        name = fresh("late")
        l = acquired(lock.try_lock(name, "alice", 30))
        pause(50)
        ensure(l.renew(60_000) is False)
        ensure(lock.holder(name) is None)

    def release_frees_the_lock():
        name = fresh("release")
        l = acquired(lock.try_lock(name, "alice", 60_000))
        ensure(l.release() is True)
        ensure(lock.holder(name) is None)
        b = acquired(lock.try_lock(name, "bob", 60_000), "not re-acquired")
        ensure(b.token == 2, b.token)
        # Leaving a `with` block releases too.
        with b:
            pass
        ensure(lock.holder(name) is None)

    def release_twice_is_false():
        name = fresh("twice")
        l = acquired(lock.try_lock(name, "alice", 60_000))
        ensure(l.release() is True)
        ensure(l.release() is False)
        ensure(l.renew(1000) is False)

    def an_expired_lock_is_taken_over_and_the_old_holder_loses_it():
        name = fresh("expiry")
        old = acquired(lock.try_lock(name, "alice", 30))
        pause(50)
        new = acquired(lock.try_lock(name, "bob", 60_000), "not taken over")
        ensure(new.token > old.token)
        ensure(old.renew(60_000) is False)
        ensure(old.release() is False)
        h = lock.holder(name)
        ensure(h is not None and h.owner == "bob" and h.token == new.token, h)

    def the_same_owner_cannot_act_on_an_older_acquisition():
        name = fresh("same-owner")
        old = acquired(lock.try_lock(name, "alice", 30))
        pause(50)
        new = acquired(lock.try_lock(name, "alice", 60_000), "not re-acquired")
        ensure(old.release() is False)
        h = lock.holder(name)
        ensure(h is not None and h.token == new.token, h)

    def tokens_strictly_increase_with_every_acquisition():
        name = fresh("tokens")
        last = 0
        for owner in ["a", "b", "a", "c", "b"]:
            l = acquired(lock.try_lock(name, owner, 60_000))
            ensure(l.token > last, f"{l.token} after {last}")
            last = l.token
            ensure(l.release() is True)
        ensure(last == 5, last)
        # Tokens are per name.
        other = acquired(lock.try_lock(fresh("tokens-other"), "a", 60_000))
        ensure(other.token == 1, other.token)

    def dropping_the_handle_releases_the_lock():
        name = fresh("drop")
        l = acquired(lock.try_lock(name, "alice", 60_000))
        del l
        ensure(lock.holder(name) is None)
        ensure(lock.try_lock(name, "bob", 60_000) is not None)

    def wait_lock_takes_an_expired_lock_and_times_out_on_a_held_one():
        name = fresh("wait")
        held = acquired(lock.try_lock(name, "alice", 30))
        # Held for 30 ms more: a 10 s wait gets it once it expires.
        following = acquired(lock.wait_lock(name, "bob", 60_000, 10_000), "wait-lock timed out")
        ensure(following.token > held.token)
        ensure(lock.wait_lock(name, "carol", 60_000, 20) is None)

    def zero_or_overflowing_ttl_is_invalid_argument():
        name = fresh("ttl")
        raises(InvalidArgument, lock.try_lock, name, "alice", 0)
        raises(InvalidArgument, lock.try_lock, name, "alice", 2**64 - 1)
        l = acquired(lock.try_lock(name, "alice", 60_000))
        raises(InvalidArgument, l.renew, 0)
        ensure(lock.holder(name) is not None)

    def bad_owners_are_invalid_argument():
        name = fresh("owner")
        for bad in ["", "a\0b", "o" * 257]:
            raises(InvalidArgument, lock.try_lock, name, bad, 1000)
        ensure(lock.try_lock(name, "worker 7 @ host:42 ✓", 1000) is not None)

    def bad_lock_names_are_invalid_name():
        for bad in BAD_NAMES:
            raises(InvalidName, lock.try_lock, bad, "alice", 1000)
            raises(InvalidName, lock.holder, bad)

    def reserved_lock_name_is_reserved_name():
        raises(ReservedName, lock.try_lock, "__alkstore_scheduler", "alice", 1000)

    def holders_list_held_locks_by_name_in_pages():
        prefix = fresh("holders-")
        before = now_ms()
        a = lock.try_lock(prefix + "a", "alice", 60_000)
        b = lock.try_lock(prefix + "b", "bob", 60_000)
        c = lock.try_lock(prefix + "c", "carol", 60_000)
        d = lock.try_lock(prefix + "d", "dave", 30)
        ensure(a and b and c and d)
        ensure(c.release())
        pause(60)
        first = lock.holders(after=prefix, max=1)
        ensure(len(first) == 1 and first[0].name == prefix + "a", first)
        h = first[0]
        ensure(h.owner == "alice" and h.token == a.token and h.expires_at >= before + 59_000, h)
        rest = [(h.name, h.owner) for h in lock.holders(after=h.name, max=1000)
                if h.name.startswith(prefix)]
        ensure(rest == [(prefix + "b", "bob")], rest)
        raises(InvalidName, lock.holders, after="a/b", max=1)
        a.close()
        b.close()
        d.close()

    Contract().run([
        try_lock_acquires_a_free_lock,
        a_held_lock_is_not_acquired_by_anyone_else,
        locks_are_not_re_entrant,
        holder_reports_owner_deadline_and_token,
        holder_of_a_free_lock_is_none,
        renew_resets_the_deadline_from_now,
        a_late_renew_is_refused,
        release_frees_the_lock,
        release_twice_is_false,
        an_expired_lock_is_taken_over_and_the_old_holder_loses_it,
        the_same_owner_cannot_act_on_an_older_acquisition,
        tokens_strictly_increase_with_every_acquisition,
        dropping_the_handle_releases_the_lock,
        wait_lock_takes_an_expired_lock_and_times_out_on_a_held_one,
        zero_or_overflowing_ttl_is_invalid_argument,
        bad_owners_are_invalid_argument,
        bad_lock_names_are_invalid_name,
        reserved_lock_name_is_reserved_name,
        holders_list_held_locks_by_name_in_pages,
    ])


class Run(exports.Run):
    def run(self) -> None:
        contract()
