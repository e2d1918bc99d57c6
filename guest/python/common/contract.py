"""Helpers shared by the Python contract guests.

Output shape, identical to the Rust guests: `ok <case>` per passing case,
`N passed, 0 failed` at the end; on the first failure `FAIL <case>: <why>`
and exit status 1.
"""

import sys

from componentize_py_types import Err


class CaseFailed(Exception):
    pass


def ensure(cond, why="condition is false"):
    if not cond:
        raise CaseFailed(why)


def raises(kind, fn, *args):
    """Calls fn and expects an alk error of the given variant class."""
    try:
        value = fn(*args)
    except Err as e:
        ensure(isinstance(e.value, kind), f"expected {kind.__name__}, got {e.value!r}")
        return e.value
    raise CaseFailed(f"expected {kind.__name__}, got {value!r}")


class Contract:
    def __init__(self):
        self.passed = 0

    def case(self, fn):
        """Runs fn as the case named after it (underscores become dashes)."""
        name = fn.__name__.replace("_", "-")
        try:
            fn()
        except Exception as e:  # a failed ensure or an unexpected alk error
            detail = e.value if isinstance(e, Err) else e
            print(f"FAIL {name}: {detail!r}", flush=True)
            sys.exit(1)
        self.passed += 1
        print(f"ok {name}", flush=True)

    def run(self, cases):
        for fn in cases:
            self.case(fn)
        print(f"{self.passed} passed, 0 failed", flush=True)
