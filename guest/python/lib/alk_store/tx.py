"""Transactions across mechanisms (`alk:store/tx`).

    from alk_store.tx import Transaction

    with Transaction() as tx:            # commits at the end of the block,
        tx.publish("invoices", b"...")   # rolls back on an exception
        tx.enqueue("ship", ["order 7"], max_attempts=5)
        tx.enqueue_unique("invoice", "order 7", "invoice-7")
        tx.outbox_enqueue("emails", ["order received"])
        tx.save_offset("orders", "billing", 7)
        tx.notify("orders-billed")

Payloads and send options are as in `alk_store.queue`.
"""

from wit_world.imports import tx as _tx

from . import stream
from .errors import call
from .queue import payload, payloads, send_options, unique_options


class Transaction(stream.Transaction):
    """Publishes, offset saves, sends to queues and outboxes and
    notifications that all take effect at `commit`, or none of them. A
    context manager as `alk_store.stream.Transaction`."""

    _new = _tx.Transaction

    def enqueue(self, queue, bodies, **options):
        """Sends `bodies` (up to 1,000) to `queue` at commit."""
        call(self._raw.enqueue, queue, payloads(bodies), send_options(**options))

    def enqueue_unique(self, queue, body, key, *, for_ms=None, **options):
        """Sends `body` to `queue` at commit unless unique key `key` is taken
        then (see `Queue.send_unique`); a taken key sends nothing."""
        call(self._raw.enqueue_unique, queue, payload(body), send_options(**options),
             unique_options(key, for_ms=for_ms))

    def outbox_enqueue(self, outbox, bodies, **options):
        """Sends `bodies` to outbox `outbox` at commit."""
        call(self._raw.outbox_enqueue, outbox, payloads(bodies), send_options(**options))

    def notify(self, channel):
        """Notifies `channel` once the transaction has committed."""
        call(self._raw.notify, channel)
