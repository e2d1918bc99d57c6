"""Notifications on named channels (`alk:store/notify`).

    from alk_store import notify

    with notify.listen("orders") as listener:
        while True:
            if listener.wait(60_000):    # True when notified
                ...                      # re-read whatever "orders" stands for

    notify.notify("orders")              # in another process

Notifications are hints: several may arrive as one wake.
"""

from wit_world.imports import notify as _n

from ._handle import Handle
from .errors import call


def notify(channel):
    """Wakes every listener of `channel`, in every process."""
    call(_n.notify, channel)


def listen(channel):
    """A `Listener` of `channel`, starting now."""
    return Listener(call(_n.listen, channel))


class Listener(Handle):
    """A listener of one channel; `close()` or a `with` block detaches it."""

    _shown = ("channel",)

    @property
    def channel(self):
        """The channel."""
        return self._raw.channel()

    def wait(self, timeout_ms):
        """Waits up to `timeout_ms` for a notification; true when there was
        one (it is consumed). With 0 it only checks."""
        return self._raw.wait(timeout_ms)

    def subscribe(self):
        """A `wasi:io` pollable, ready when `wait` would return true at once."""
        return self._raw.subscribe()
