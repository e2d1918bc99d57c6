"""The WIT this package is written against, for building guests.

The folder holds the `alk:store` package and, under `deps/`, the WASI and
`wasi:keyvalue` packages it is used with: what componentize-py (`-d`),
componentize-js (`--wit`) and wit-bindgen read. `python -m alk_store.wit`
prints its path:

    componentize-py -d "$(python -m alk_store.wit)" -w command componentize app -o app.wasm
"""

from pathlib import Path

__all__ = ["path"]


def path() -> Path:
    """The folder of the WIT (`wit/` of the alk repository)."""
    return (Path(__file__).parent / "wit-files").resolve()


if __name__ == "__main__":
    print(path())
