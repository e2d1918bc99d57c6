"""Durable streams (`alk:store/stream`).

    from alk_store import stream

    stream.publish("orders", b'{"id": 7}', key="customer-3")
    sub = stream.subscribe("orders", "billing")
    for event in sub:                    # the events after the saved offset
        ...
    sub.save()

    with stream.Transaction() as tx:     # commits at the end of the block,
        tx.publish("invoices", b"...")   # rolls back on an exception
        tx.save_offset("orders", "billing", event.offset)

Payloads are bytes (a `str` is published as UTF-8). Events are the
generated `Event` dataclass (`offset`, `stream`, `key`, `payload`,
`created_at`).
"""

from wit_world.imports import stream as _s

from ._handle import Handle
from .errors import call

Event = _s.Event
NewEvent = _s.NewEvent
StreamInfo = _s.StreamInfo
ConsumerLag = _s.ConsumerLag


def _bytes(value):
    return value.encode() if isinstance(value, str) else bytes(value)


def publish(stream, payload, *, key=None):
    """Appends an event (with `key`, when given); its offset."""
    if key is None:
        return call(_s.publish, stream, _bytes(payload))
    return call(_s.publish_with_key, stream, key, _bytes(payload))


def publish_batch(stream, events):
    """Appends up to 1,000 events, all or none; their (consecutive) offsets.
    Each event is a payload, a (key, payload) pair or a `NewEvent`."""

    def new(e):
        if isinstance(e, NewEvent):
            return e
        if isinstance(e, tuple):
            return NewEvent(e[0], _bytes(e[1]))
        return NewEvent(None, _bytes(e))

    return call(_s.publish_batch, stream, [new(e) for e in events])


def read_since(stream, offset=0, limit=100):
    """Up to `limit` events with offsets above `offset`, in order."""
    return call(_s.read_since, stream, offset, limit)


def events(stream, after=0, *, limit=100):
    """Every event with an offset above `after`, read `limit` at a time."""
    while True:
        page = read_since(stream, after, limit)
        if not page:
            return
        yield from page
        after = page[-1].offset


def save_offset(stream, consumer, offset):
    """Saves `consumer`'s position in `stream` (saves only move forward)."""
    call(_s.save_offset, stream, consumer, offset)


def get_offset(stream, consumer):
    """`consumer`'s saved offset in `stream`, or `None`."""
    return call(_s.get_offset, stream, consumer)


def info(stream):
    """What `stream` holds: a `StreamInfo` with `first` (the lowest offset
    stored, or `None`), `last` (the last offset assigned) and `consumers`
    (each with `consumer`, its saved `offset` and its `lag`)."""
    return call(_s.info, stream)


def trim_to(stream, horizon):
    """Deletes the events at or below `horizon`; how many."""
    return call(_s.trim_to, stream, horizon)


def subscribe(stream, consumer):
    """A `Subscription` of `consumer`, starting after its saved offset."""
    return Subscription(call(_s.subscribe, stream, consumer))


class Subscription(Handle):
    """A consumer's read position in a stream. Iterating it yields the events
    after the position until the consumer is caught up; it never saves by
    itself."""

    _shown = ("position",)

    def next(self, max=100, *, wait_ms=None):
        """Up to `max` events after the position, advancing it. With
        `wait_ms`, waits that long for one when caught up."""
        if wait_ms is None:
            return call(self._raw.next, max)
        return call(self._raw.next_wait, max, wait_ms)

    def __iter__(self):
        while True:
            batch = self.next()
            if not batch:
                return
            yield from batch

    @property
    def position(self):
        """The offset of the last event returned (or the saved offset it
        started from; 0 for none)."""
        return self._raw.position()

    def save(self):
        """Saves the position as the consumer's offset."""
        call(self._raw.save)

    def subscribe(self):
        """A `wasi:io` pollable, ready when there are events after the position."""
        return self._raw.subscribe()


class Transaction(Handle):
    """A transaction on the streams: its publishes and offset saves take
    effect together at `commit`, or not at all.

    As a context manager it commits when the block ends normally and rolls
    back when it raises (unless it was committed or rolled back inside).
    `close()`, or dropping the object, without `commit` rolls it back (also
    inside a `with` block).
    """

    _new = _s.Transaction

    def __init__(self):
        super().__init__(type(self)._new())
        self._finished = False

    def publish(self, stream, payload, *, key=None):
        """`publish`, at commit; the event's offset."""
        if key is None:
            return call(self._raw.publish, stream, _bytes(payload))
        return call(self._raw.publish_with_key, stream, key, _bytes(payload))

    def save_offset(self, stream, consumer, offset):
        """`save_offset`, at commit."""
        call(self._raw.save_offset, stream, consumer, offset)

    def commit(self):
        """Applies everything; committing twice is `InvalidArgument`."""
        self._finished = True
        call(self._raw.commit)

    def rollback(self):
        """Discards everything and finishes the transaction."""
        self._finished = True
        self._raw.rollback()

    def __exit__(self, exc_type, exc, tb):
        try:
            if not self._finished and self._handle is not None:
                if exc_type is None:
                    self.commit()
                else:
                    self.rollback()
        finally:
            self.close()
        return False
