"""Key-value buckets (`alk:store/kv`).

    from alk_store.kv import Bucket

    settings = Bucket.open("settings")
    settings.set("theme", "dark", ttl_ms=60_000)
    settings.get("theme")                # b"dark"
    for key, value in settings.scan("user:"):
        ...

Keys are strings; values are bytes (a `str` value is stored as UTF-8). A
bucket also works as a mapping: `settings["theme"]` (`KeyError` when
absent), `settings["theme"] = "light"`, `del settings["theme"]`,
`"theme" in settings`.
"""

from wit_world.imports import kv as _kv

from ._handle import Handle
from .errors import call

Entry = _kv.Entry
ScanPage = _kv.ScanPage


def _bytes(value):
    return value.encode() if isinstance(value, str) else bytes(value)


class Bucket(Handle):
    """An open bucket. Use `Bucket.open(name)`; `close()` or a `with` block
    drops the handle (buckets need no closing otherwise)."""

    _shown = ("name",)

    @classmethod
    def open(cls, name):
        """Opens (creating on first use) the bucket `name`."""
        return cls(call(_kv.Bucket.open, name))

    @property
    def name(self):
        """The bucket's name."""
        return self._raw.name()

    def get(self, key, default=None):
        """The value of `key`, or `default` when it is absent or expired."""
        value = call(self._raw.get, key)
        return default if value is None else value

    def set(self, key, value, *, ttl_ms=None):
        """Stores `value` under `key`, replacing any value and TTL; with
        `ttl_ms` the key expires that many milliseconds from now."""
        call(self._raw.set, key, _bytes(value), ttl_ms)

    def set_if_absent(self, key, value, *, ttl_ms=None):
        """Stores `value` only when `key` is absent or expired; whether this
        call won (exactly one racing caller does)."""
        return call(self._raw.set_if_absent, key, _bytes(value), ttl_ms)

    def get_many(self, keys):
        """The values of up to 1,000 keys in the order asked, `None` for
        absent ones (the list may stop early past 16 MiB of values)."""
        return call(self._raw.get_many, list(keys))

    def set_many(self, entries, *, ttl_ms=None):
        """Stores a mapping or pairs of (key, value), up to 1,000, all or none."""
        pairs = entries.items() if hasattr(entries, "items") else entries
        call(self._raw.set_many, [Entry(k, _bytes(v)) for k, v in pairs], ttl_ms)

    def delete(self, key):
        """Removes `key`; removing an absent key is not an error."""
        call(self._raw.delete, key)

    def exists(self, key):
        """Whether `key` is present and not expired."""
        return call(self._raw.exists, key)

    def scan_page(self, prefix="", cursor=None, *, limit=100):
        """One page of the keys starting with `prefix`, in key order: a
        `ScanPage` with `entries` and `next_cursor` (`None` at the end)."""
        return call(self._raw.scan_prefix, prefix, cursor, limit)

    def pages(self, prefix="", *, limit=100):
        """Every page of a prefix scan, `limit` entries at most per page."""
        cursor = None
        while True:
            page = self.scan_page(prefix, cursor, limit=limit)
            yield page
            cursor = page.next_cursor
            if cursor is None:
                return

    def scan(self, prefix="", *, limit=100):
        """Every live (key, value) whose key starts with `prefix`, in key
        order, fetched `limit` at a time."""
        for page in self.pages(prefix, limit=limit):
            for e in page.entries:
                yield e.key, e.value

    def __getitem__(self, key):
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key, value):
        self.set(key, value)

    def __delitem__(self, key):
        self.delete(key)

    def __contains__(self, key):
        return self.exists(key)
