"""Work queues (`alk:store/queue`).

    from alk_store.queue import Queue

    jobs = Queue.open("jobs")
    jobs.send({"resize": "cat.png"}, priority=5, max_attempts=3)
    for job in jobs.claim(10, visibility_ms=60_000, wait_ms=30_000):
        ...                              # job.payload.value is the body
        jobs.ack(job.receipt)

A payload is a `Text` or a `Json`; a `str` is sent as `Text`, and any other
value as `Json` of `json.dumps(value)`. Send options are keyword arguments
(see `send_options`); records (`Message`, `Job`, `JobInfo`) are the
generated dataclasses.

Since 0.1.4 a queue can limit its claims and keep results:

    jobs.set_limits(group_concurrency=3, rate=rate_limit(100, 10, 1_000))
    sent = jobs.send_unique({"invoice": 7}, "invoice-7")
    if sent.duplicate:
        ...                              # sent.id is the live message's id
    for job in jobs.claim(10):
        jobs.complete(job.receipt, {"pages": 3})
    jobs.get_result(sent.id)            # a `JobResult`, or `None`
"""

import json

from wit_world.imports import queue as _q

from ._handle import Handle
from .errors import call

Json = _q.Payload_Json
Text = _q.Payload_Text
SendOptions = _q.SendOptions
ClaimOptions = _q.ClaimOptions
Message = _q.Message
Job = _q.Job
JobInfo = _q.JobInfo
JobState = _q.JobState
QueueStats = _q.QueueStats
AckOutcome = _q.AckOutcome
RateLimit = _q.RateLimit
QueueLimits = _q.QueueLimits
UniqueOptions = _q.UniqueOptions
Sent = _q.Sent
JobResult = _q.JobResult
# What taking tokens did: `Granted(left)` or `WaitMs(ms)`.
Granted = _q.Taken_Granted
WaitMs = _q.Taken_WaitMs
# What `retry` (and `outbox.failed`) did.
Scheduled = _q.Retried_Scheduled
DeadLettered = _q.Retried_DeadLettered
Gone = _q.Retried_Gone


def payload(value):
    """`value` as a payload: `Json` and `Text` as they are, `str` as
    `Text`, anything else as `Json(json.dumps(value))`."""
    if isinstance(value, (Json, Text)):
        return value
    if isinstance(value, str):
        return Text(value)
    return Json(json.dumps(value))


def payloads(values):
    """A list of payloads from one payload or an iterable of them."""
    if isinstance(values, (str, Json, Text)):
        values = [values]
    return [payload(v) for v in values]


def send_options(*, priority=None, delay_ms=None, run_at_ms=None, max_attempts=None,
                 backoff_base_ms=None, expires_in_ms=None, group=None):
    """The `send-options` record; every option defaults to none."""
    return SendOptions(priority, delay_ms, run_at_ms, max_attempts, backoff_base_ms,
                       expires_in_ms, group)


def rate_limit(capacity, refill, interval_ms):
    """The `rate-limit` record: a token bucket holding up to `capacity`
    tokens that gains `refill` tokens every `interval_ms`."""
    return RateLimit(capacity, refill, interval_ms)


def unique_options(key, *, for_ms=None):
    """The `unique-options` record: key `key`, held while its message is
    live, or for `for_ms` after the send when given."""
    return UniqueOptions(key, for_ms)


class Queue(Handle):
    """An open queue. Use `Queue.open(name)`; `close()` or a `with` block
    drops the handle."""

    _shown = ("name",)

    @classmethod
    def open(cls, name):
        """Opens (creating on first use) the queue `name`."""
        return cls(call(_q.Queue.open, name))

    @property
    def name(self):
        """The queue's name."""
        return self._raw.name()

    def send(self, body, **options):
        """Sends one message; its id. `options` as for `send_options`."""
        if options:
            return call(self._raw.send_with, payload(body), send_options(**options))
        return call(self._raw.send, payload(body))

    def send_batch(self, bodies, **options):
        """Sends up to 1,000 messages, all or none; their ids, in order."""
        if options:
            return call(self._raw.send_batch_with, payloads(bodies), send_options(**options))
        return call(self._raw.send_batch, payloads(bodies))

    def receive(self, max=1, *, visibility_ms=None, wait_ms=None):
        """Takes up to `max` visible messages, oldest first, hidden from other
        receivers for `visibility_ms` (default 30 s). With `wait_ms`, waits
        that long for one when none is visible. A list of `Message`."""
        if wait_ms is None:
            return call(self._raw.receive, max, visibility_ms)
        return call(self._raw.receive_wait, max, visibility_ms, wait_ms)

    def claim(self, max=1, *, visibility_ms=None, min_priority=None, wait_ms=None):
        """Takes up to `max` due messages by priority, with their options; a
        list of `Job`. With `wait_ms`, waits that long for one."""
        return call(self._raw.claim, ClaimOptions(max, visibility_ms, min_priority, wait_ms))

    def ack(self, receipt):
        """Deletes the message of a current receipt."""
        call(self._raw.ack, receipt)

    def ack_batch(self, receipts):
        """Acknowledges up to 1,000 receipts; an `AckOutcome` for each."""
        return call(self._raw.ack_batch, list(receipts))

    def nack(self, receipt):
        """Gives a message back: visible at once, attempt count kept."""
        call(self._raw.nack, receipt)

    def purge(self):
        """Deletes every message, visible or in flight (not dead letters)."""
        call(self._raw.purge)

    def heartbeat(self, receipt, extend_ms):
        """Resets a delivery's deadline to `extend_ms` from now; false when it
        had already passed."""
        return call(self._raw.heartbeat, receipt, extend_ms)

    def retry(self, receipt, reason, *, delay_ms=None):
        """Ends a delivery as failed: due again after `delay_ms` or its backoff
        curve, or dead-lettered. `Scheduled(at_ms)`, `DeadLettered()` or
        `Gone()`."""
        return call(self._raw.retry, receipt, reason, delay_ms)

    def fail(self, receipt, reason):
        """Moves a delivery's message to the dead letters; false when gone."""
        return call(self._raw.fail, receipt, reason)

    def cancel(self, id):
        """Deletes message `id` in any state; false when there was none."""
        return call(self._raw.cancel, id)

    def get_job(self, id):
        """Message `id` as a `JobInfo`, dead letters included; or `None`."""
        return call(self._raw.get_job, id)

    def sweep_expired(self):
        """Moves every expired message to the dead letters; how many."""
        return call(self._raw.sweep_expired)

    def dead_letters(self, *, after=None, max=100):
        """Up to `max` dead letters with ids above `after`, by id."""
        return call(self._raw.dead_letters, after, max)

    def redrive(self, ids):
        """Sends dead letters again as new messages; the new id of each, or
        `None` when it was not a dead letter."""
        return call(self._raw.redrive, list(ids))

    def purge_dead_letters(self):
        """Deletes every dead letter; how many."""
        return call(self._raw.purge_dead_letters)

    def stats(self):
        """How many messages the queue holds in each state, now: a
        `QueueStats` with `waiting`, `delayed`, `in_flight`, `dead`,
        `oldest_waiting_enqueued_at_ms` (or `None`), `groups` and
        `groups_in_flight`."""
        return call(self._raw.stats)

    def send_unique(self, body, key, *, for_ms=None, **options):
        """Sends one message unless unique key `key` is taken: a `Sent` with
        the new message's id, or with the id of the message holding the key
        and `duplicate` true (nothing stored). The key is held while the
        message is live, or for `for_ms` after the send when given.
        `options` as for `send_options`."""
        return call(self._raw.send_unique, payload(body), send_options(**options),
                    unique_options(key, for_ms=for_ms))

    def limits(self):
        """The queue's limits: a `QueueLimits` with `group_concurrency`,
        `max_in_flight` (or `None`), `rate` (a `RateLimit` or `None`) and
        `rate_per_group`."""
        return call(self._raw.limits)

    def set_limits(self, limits=None, *, group_concurrency=1, max_in_flight=None, rate=None,
                   rate_per_group=False):
        """Sets the queue's limits, for every process: a `QueueLimits`, or
        its fields as keyword arguments (the defaults are those of a queue
        without limits; `rate` is a `RateLimit`, see `rate_limit`)."""
        if limits is None:
            limits = QueueLimits(group_concurrency, max_in_flight, rate, rate_per_group)
        call(self._raw.set_limits, limits)

    def try_take(self, n, *, group=None):
        """Takes `n` tokens from the bucket the queue's claims take from (of
        `group` when the rate applies per group), or none: `Granted(left)`
        or `WaitMs(ms)`."""
        return call(self._raw.try_take, n, group)

    def complete(self, receipt, result, *, keep_ms=None):
        """Acknowledges a delivery and keeps `result` (a payload, as for
        `send`) for its message for `keep_ms` (default one day); false when
        the message was already gone."""
        return call(self._raw.complete, receipt, payload(result), keep_ms)

    def get_result(self, id):
        """The result kept for message `id`: a `JobResult` with `id`,
        `payload`, `completed_at_ms` and `expires_at_ms`; or `None`."""
        return call(self._raw.get_result, id)

    def delete_result(self, id):
        """Deletes the result of message `id`; false when there was none."""
        return call(self._raw.delete_result, id)

    def subscribe(self):
        """A `wasi:io` pollable, ready when a message may be receivable."""
        return self._raw.subscribe()
