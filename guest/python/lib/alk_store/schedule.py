"""Schedules (`alk:store/schedule`): a job sent to a queue at every
boundary of a fixed interval, while a runner runs.

    from alk_store import schedule

    schedule.schedule("digest", "@every 1h", "digests", {"kind": "daily"}, priority=2)
    schedule.get("digest").next_fire_ms

A bad spec raises `InvalidSpec`, a runner that lost the leadership
`LeadershipLost`; other failures raise the store error's own class.
Payloads and send options are as in `alk_store.queue`.
"""

from wit_world.imports import schedule as _sch

from .errors import call
from .queue import payload, send_options

ScheduleInfo = _sch.ScheduleInfo
RunReport = _sch.RunReport


def schedule(name, spec, queue, body, **options):
    """Creates or replaces schedule `name`: at every interval of `spec`
    (`@every <n><s|m|h|d>`), a job with `body` and `options` goes to `queue`."""
    call(_sch.schedule, name, spec, queue, payload(body), send_options(**options))


def unschedule(name):
    """Deletes schedule `name`; whether there was one."""
    return call(_sch.unschedule, name)


def get(name):
    """Schedule `name` (a `ScheduleInfo`), or `None`."""
    return call(_sch.get, name)


def schedules():
    """Every schedule, by name."""
    return call(_sch.list)


def run(duration_ms):
    """Runs a runner for `duration_ms`; a `RunReport` (`led`, `fired`)."""
    return call(_sch.run, duration_ms)
