"""Rate limiters of their own (`alk:store/limiter`, since 0.1.4): named
token buckets shared by every guest and process using the same stores.

    from alk_store.limiter import Limiter, Granted

    mail = Limiter("mail-server", capacity=10, refill=1, interval_ms=1_000)
    taken = mail.try_take()
    if isinstance(taken, Granted):
        send_mail(...)                   # taken.value tokens are left
    else:
        ...                              # try again in taken.value ms

`Granted`, `WaitMs` and `RateLimit` are those of `alk_store.queue`.
"""

from wit_world.imports import limiter as _l
from wit_world.imports import queue as _q

from .errors import call

RateLimit = _q.RateLimit
Granted = _q.Taken_Granted
WaitMs = _q.Taken_WaitMs


def try_take(name, n, rate):
    """Takes `n` tokens from bucket `name` of settings `rate` (a
    `RateLimit`), or none: `Granted(left)` or `WaitMs(ms)`."""
    return call(_l.try_take, name, n, rate)


class Limiter:
    """Bucket `name` with its settings, so that every take passes the same
    ones: up to `capacity` tokens, `refill` more every `interval_ms`."""

    def __init__(self, name, *, capacity, refill, interval_ms):
        self.name = name
        self.rate = RateLimit(capacity, refill, interval_ms)

    def try_take(self, n=1):
        """Takes `n` tokens, or none: `Granted(left)` or `WaitMs(ms)`."""
        return try_take(self.name, n, self.rate)

    def __repr__(self):
        return f"Limiter({self.name!r}, {self.rate!r})"
