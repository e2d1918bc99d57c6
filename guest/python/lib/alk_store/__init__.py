"""Python wrappers over the alk:store interfaces for componentize-py guests.

One module per interface: `alk_store.kv`, `queue`, `stream`, `lock`,
`notify`, `tx`, `outbox`, `schedule` and `limiter`, each importing only its own
generated bindings (`wit_world.imports.<interface>`), so a guest built
against a smaller world imports only what it uses. Every call raises its
error as a subclass of `AlkError` (see `alk_store.errors`), re-exported
here.
"""

import importlib

from .errors import (
    AlkError,
    Busy,
    InvalidArgument,
    InvalidName,
    InvalidSpec,
    Internal,
    LeadershipLost,
    PayloadTooLarge,
    ReservedName,
    StaleReceipt,
    StoreSetup,
    TransactionAborted,
)

__all__ = [
    "AlkError",
    "Busy",
    "InvalidArgument",
    "InvalidName",
    "InvalidSpec",
    "Internal",
    "LeadershipLost",
    "PayloadTooLarge",
    "ReservedName",
    "StaleReceipt",
    "StoreSetup",
    "TransactionAborted",
]

_INTERFACES = {"kv", "queue", "stream", "lock", "notify", "tx", "outbox", "schedule", "limiter"}


def __getattr__(name):
    # `import alk_store` then `alk_store.kv.Bucket`: modules load on first use.
    if name in _INTERFACES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
