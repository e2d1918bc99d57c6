"""Helpers shared by the Python contract guests.

Output shape, identical to the Rust guests: `ok <case>` per passing case,
`N passed, 0 failed` at the end; on the first failure `FAIL <case>: <why>`
and exit status 1.
"""

import sys

from alk_store import AlkError


# Names that break the shared name rules, one per rule: empty, `.`, `..`, a
# leading dot, path separators, NUL, a space, non-ASCII, 101 characters.
BAD_NAMES = ["", ".", "..", ".hidden", "a/b", "a\\b", "a\0b", "with space", "ü", "n" * 101]


class CaseFailed(Exception):
    pass


def ensure(cond, why="condition is false"):
    if not cond:
        raise CaseFailed(why)


def raises(kind, fn, *args, **kwargs):
    """Calls fn and expects it to raise the alk error class `kind`; the error."""
    try:
        value = fn(*args, **kwargs)
    except AlkError as e:
        ensure(isinstance(e, kind), f"expected {kind.__name__}, got {e!r}")
        return e
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
            print(f"FAIL {name}: {e!r}", flush=True)
            sys.exit(1)
        self.passed += 1
        print(f"ok {name}", flush=True)

    def run(self, cases):
        for fn in cases:
            self.case(fn)
        print(f"{self.passed} passed, 0 failed", flush=True)
