"""Named locks with a TTL and fencing tokens (`alk:store/lock`).

    from alk_store import lock

    held = lock.try_lock("nightly-report", "worker-3", ttl_ms=30_000)
    if held:
        with held:                       # released at the end of the block
            write_report(fencing_token=held.token)

Pass `token` along with writes elsewhere and have them refuse lower tokens.
"""

from wit_world.imports import lock as _l

from ._handle import Handle
from .errors import call

HolderInfo = _l.HolderInfo
HeldLock = _l.HeldLock


def try_lock(name, owner, ttl_ms):
    """Takes lock `name` for `owner` for `ttl_ms` if it is free: a `Lock`,
    or `None` when anyone holds it (locks are not re-entrant)."""
    raw = call(_l.try_lock, name, owner, ttl_ms)
    return None if raw is None else Lock(raw)


def wait_lock(name, owner, ttl_ms, timeout_ms):
    """Like `try_lock`, waiting up to `timeout_ms` for the lock to be freed;
    `None` when the timeout passed."""
    raw = call(_l.wait_lock, name, owner, ttl_ms, timeout_ms)
    return None if raw is None else Lock(raw)


def holder(name):
    """Who holds lock `name` now (`HolderInfo`: `owner`, `expires_at`,
    `token`), or `None` when it is free."""
    return call(_l.holder, name)


def holders(*, after=None, max=100):
    """Up to `max` locks held now, by name, after `after` (the last name of
    the previous page): each a `HeldLock` with `name`, `owner`,
    `expires_at` and `token`."""
    return call(_l.holders, after, max)


def all_holders(*, page=100):
    """Every lock held now, by name, page by page."""
    after = None
    while True:
        batch = holders(after=after, max=page)
        yield from batch
        if len(batch) < page:
            return
        after = batch[-1].name


class Lock(Handle):
    """One acquisition of a lock. As a context manager it releases the lock
    when the block ends. `close()`, or dropping the object, also releases
    it if this acquisition still holds it."""

    _shown = ("name", "owner", "token")

    @property
    def name(self):
        """The lock's name."""
        return self._raw.name()

    @property
    def owner(self):
        """The owner it was acquired for."""
        return self._raw.owner()

    @property
    def token(self):
        """The fencing token of this acquisition."""
        return self._raw.token()

    def renew(self, ttl_ms):
        """Sets the deadline to `ttl_ms` from now; false, changing nothing,
        once the lock expired or was taken by someone else."""
        return call(self._raw.renew, ttl_ms)

    def release(self):
        """Releases the lock; false when it had already expired, been
        released or been taken."""
        return call(self._raw.release)

    def __exit__(self, *exc):
        try:
            if self._handle is not None:
                self.release()
        finally:
            self.close()
        return False
