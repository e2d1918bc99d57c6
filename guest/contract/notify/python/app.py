"""The notify contract, checked from a Python guest.

The same cases, in the same order and with the same names, as the Rust
guest beside it (../rust); ../README.md says what each case expects.
"""

import time

from alk_store import InvalidName, ReservedName, notify
from contract import BAD_NAMES, Contract, ensure, raises
from wit_world import exports


def contract():
    nonce = time.time_ns()

    def fresh(case):
        return f"p{nonce}-{case}"

    def a_listener_sees_a_notification_sent_after_it_attached():
        ch = fresh("after")
        with notify.listen(ch) as l:
            ensure(l.channel == ch, l.channel)
            notify.notify(ch)
            ensure(l.wait(5_000), "no wake")

    def a_listener_does_not_see_notifications_from_before_it_attached():
        ch = fresh("before")
        notify.notify(ch)
        l = notify.listen(ch)
        ensure(not l.wait(30), "woke for an earlier notification")

    def a_wake_is_consumed():
        ch = fresh("consumed")
        l = notify.listen(ch)
        notify.notify(ch)
        ensure(l.wait(5_000), "no wake")
        ensure(not l.wait(30), "woke twice for one notification")

    def notifications_may_coalesce_but_are_never_lost():
        ch = fresh("coalesce")
        l = notify.listen(ch)
        for _ in range(5):
            notify.notify(ch)
        ensure(l.wait(5_000), "no wake for five notifications")

    def channels_are_separate():
        a, b = fresh("sep-a"), fresh("sep-b")
        la = notify.listen(a)
        notify.notify(b)
        ensure(not la.wait(30), "woke for another channel")

    def every_listener_of_a_channel_wakes():
        ch = fresh("fanout")
        l1 = notify.listen(ch)
        l2 = notify.listen(ch)
        notify.notify(ch)
        ensure(l1.wait(5_000) and l2.wait(5_000), "not every listener woke")

    def a_timeout_is_false_not_an_error():
        l = notify.listen(fresh("quiet"))
        ensure(not l.wait(20))
        ensure(not l.wait(0))

    def the_pollable_is_ready_after_a_notification():
        ch = fresh("pollable")
        l = notify.listen(ch)
        p = l.subscribe()
        ensure(not p.ready(), "ready before any notification")
        notify.notify(ch)
        p.block()
        ensure(l.wait(0), "the wake was not there for wait")

    def bad_channel_names_are_invalid_name():
        for bad in BAD_NAMES:
            raises(InvalidName, notify.notify, bad)
            raises(InvalidName, notify.listen, bad)

    def reserved_channel_name_is_reserved_name():
        raises(ReservedName, notify.notify, "__alkstore_listener_reconnected__")

    Contract().run([
        a_listener_sees_a_notification_sent_after_it_attached,
        a_listener_does_not_see_notifications_from_before_it_attached,
        a_wake_is_consumed,
        notifications_may_coalesce_but_are_never_lost,
        channels_are_separate,
        every_listener_of_a_channel_wakes,
        a_timeout_is_false_not_an_error,
        the_pollable_is_ready_after_a_notification,
        bad_channel_names_are_invalid_name,
        reserved_channel_name_is_reserved_name,
    ])


class Run(exports.Run):
    def run(self) -> None:
        contract()
