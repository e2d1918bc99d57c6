"""The base of the wrappers that own a resource handle."""


class Handle:
    """Owns one generated resource. `close()` (or the end of a `with` block)
    drops it; so does dropping the object. Using a closed wrapper raises
    `ValueError` instead of trapping the guest."""

    # Properties shown by repr().
    _shown = ()

    def __init__(self, raw):
        self._handle = raw

    @property
    def _raw(self):
        if self._handle is None:
            raise ValueError(f"{type(self).__name__} is closed")
        return self._handle

    def close(self):
        """Drops the handle; closing twice does nothing."""
        raw, self._handle = self._handle, None
        if raw is not None:
            raw.__exit__(None, None, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        if self._handle is None:
            return f"<{type(self).__name__} closed>"
        shown = ", ".join(f"{p}={getattr(self, p)!r}" for p in self._shown)
        return f"{type(self).__name__}({shown})"
