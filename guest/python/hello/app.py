"""A small app that remembers: a visit counter and a guest book kept in an
alk bucket, so every run sees what earlier runs (and other processes)
wrote. The Python twin of guest/hello.

Usage: `alk-host run hello-py.wasm --data-dir DIR -- [NAME]`
"""

import sys
import time

from alk_store import AlkError
from alk_store.kv import Bucket
from wit_world import exports


def hello(visitor):
    bucket = Bucket.open("hello")
    now = time.time_ns() // 1_000_000

    # The first run ever claims the "since" key; later runs lose the race.
    first = bucket.set_if_absent("since", str(now))

    visits = int(bucket.get("visits", b"0")) + 1
    bucket.set("visits", str(visits))
    bucket.set(f"guest:{now:015}", visitor)

    print(f"Hello, {visitor}!")
    if first:
        print("This is the first run; alk will remember it.")
    else:
        print(f"This app has now run {visits} times.")
    guests = [name.decode() for _, name in bucket.scan("guest:")]
    print(f"Most recent visitors: {', '.join(reversed(guests[-3:]))}")


class Run(exports.Run):
    def run(self) -> None:
        visitor = sys.argv[1] if len(sys.argv) > 1 else "friend"
        try:
            hello(visitor)
        except AlkError as e:
            print(f"hello: {e!r}", file=sys.stderr)
            sys.exit(1)
