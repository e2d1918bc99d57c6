"""Errors of alk calls, as exceptions.

Every alk call returns `result<_, error>`; the wrappers of this package
raise the error as an instance of one of the classes below instead of
componentize-py's `Err`. There is one class per case of
`alk:store/types.error` and of `alk:store/schedule.schedule-error`, all
subclasses of `AlkError`. A scheduling call's `store(e)` case is raised as
the class of `e`.
"""


class AlkError(Exception):
    """Base of every error an alk call raises.

    `message` is the text the host gave (for the cases that carry one).
    """

    def __init__(self, message=""):
        super().__init__(message)
        self.message = message


class InvalidName(AlkError):
    """A name breaks the naming rules; retrying the same call fails the same way."""


class ReservedName(AlkError):
    """The name starts with the reserved prefix `__alkstore_`."""


class InvalidArgument(AlkError):
    """An argument other than a name is unusable; the message says which and why."""


class PayloadTooLarge(AlkError):
    """A key, value or payload exceeds the host's size limit; nothing was written.

    `size` is what was given and `limit` the largest size accepted, in bytes.
    """

    def __init__(self, size, limit):
        super().__init__(f"{size} bytes, limit {limit}")
        self.size = size
        self.limit = limit


class StaleReceipt(AlkError):
    """A queue receipt is not the current one of its message; nothing changed."""


class TransactionAborted(AlkError):
    """The host rolled the transaction back; start a new one."""


class Busy(AlkError):
    """The store stayed locked past the host's retry deadline; retry later."""


class StoreSetup(AlkError):
    """A store file could not be opened; it was left untouched.

    `path` is the file, `found` the format marker in it (`None` when it
    has none), `supported` the format this host uses.
    """

    def __init__(self, path, found, supported, message):
        super().__init__(message)
        self.path = path
        self.found = found
        self.supported = supported


class Internal(AlkError):
    """An unexpected failure inside the host or the database engine."""


class InvalidSpec(AlkError):
    """A schedule spec is not `@every <n><s|m|h|d>`; nothing was stored."""


class LeadershipLost(AlkError):
    """A schedule runner lost the scheduler's lock before the end of its run."""


# Generated variant class name -> exception class, for the cases carrying text.
_TEXT = {
    "Error_InvalidName": InvalidName,
    "Error_ReservedName": ReservedName,
    "Error_InvalidArgument": InvalidArgument,
    "Error_StaleReceipt": StaleReceipt,
    "Error_TransactionAborted": TransactionAborted,
    "Error_Busy": Busy,
    "Error_Internal": Internal,
    "ScheduleError_InvalidSpec": InvalidSpec,
    "ScheduleError_LeadershipLost": LeadershipLost,
}


def from_wit(error):
    """The exception for a generated `error` or `schedule-error` value."""
    kind = type(error).__name__
    if kind in _TEXT:
        return _TEXT[kind](error.value)
    if kind == "Error_PayloadTooLarge":
        return PayloadTooLarge(error.value.size, error.value.limit)
    if kind == "Error_StoreSetup":
        f = error.value
        return StoreSetup(f.path, f.found, f.supported, f.message)
    if kind == "ScheduleError_Store":
        return from_wit(error.value)
    return AlkError(repr(error))


def call(fn, *args):
    """Calls a generated binding, raising its error as an `AlkError`."""
    # Imported here: outside a component (`python -m alk_store.wit`) the
    # package imports without componentize-py's types.
    from componentize_py_types import Err

    try:
        return fn(*args)
    except Err as e:
        raise from_wit(e.value) from None
