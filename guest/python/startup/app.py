"""Prints `ready` and exits. WASI only (built against wasi:cli/command), so
`alk-host run` and `wasmtime run` can both run it: the Python baseline of
the start-up benchmark."""

from wit_world import exports


class Run(exports.Run):
    def run(self) -> None:
        print("ready", flush=True)
