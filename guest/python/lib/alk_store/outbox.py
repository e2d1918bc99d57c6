"""Outboxes (`alk:store/outbox`): work recorded with the change that caused
it (`Transaction.outbox_enqueue`), carried out afterwards, at least once.

    from alk_store.outbox import Outbox

    emails = Outbox.open("emails")
    job = emails.next(visibility_ms=60_000)
    if job is not None:
        try:
            send_email(job.payload.value)
        except Exception as e:
            emails.failed(job.receipt, str(e))
        else:
            emails.done(job.receipt)

Payloads, send options and records are as in `alk_store.queue`.
"""

from wit_world.imports import outbox as _o

from ._handle import Handle
from .errors import call
from .queue import payload, send_options


class Outbox(Handle):
    """An open outbox. Use `Outbox.open(name)`; `close()` or a `with` block
    drops the handle."""

    _shown = ("name",)

    @classmethod
    def open(cls, name):
        """Opens (creating on first use) outbox `name`."""
        return cls(call(_o.Outbox.open, name))

    @property
    def name(self):
        """The outbox's name."""
        return self._raw.name()

    def enqueue(self, body, **options):
        """Records a job outside any transaction; its id."""
        return call(self._raw.enqueue, payload(body), send_options(**options))

    def next(self, *, visibility_ms=None):
        """Takes one due job (a `Job`) for `visibility_ms` (default 60 s), or
        `None` when no job is due."""
        return call(self._raw.next, visibility_ms)

    def done(self, receipt):
        """Ends a job as done: it is deleted."""
        call(self._raw.done, receipt)

    def failed(self, receipt, reason):
        """Ends a job as failed: `Scheduled(at_ms)` on its backoff curve,
        `DeadLettered()` or `Gone()`."""
        return call(self._raw.failed, receipt, reason)

    def get_job(self, id):
        """Job `id` as a `JobInfo`, or `None`."""
        return call(self._raw.get_job, id)

    def dead_letters(self, *, after=None, max=100):
        """Up to `max` dead jobs with ids above `after`, oldest first."""
        return call(self._raw.dead_letters, after, max)
