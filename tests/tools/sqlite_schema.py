"""Reads an alk store file with stock SQLite and prints what it holds, as JSON.

Usage:
  sqlite_schema.py store <path-to-.sqlite>   the store (copied first, with its -wal)
  sqlite_schema.py ddl <path-to-format.md>   the DDL of a format document, applied
                                             to an empty in-memory database

The store is never opened in place: stock SQLite must not touch a live
multi-process store, so the file and its WAL are copied to a temporary
directory and the copy is read.

Output: {"tables": {...}, "indexes": {...}, "meta": [[key, value], ...],
"integrity": "ok" | "...", "engine_tables": [...], "rows": {table: count}}; engine_tables are
turso's own tables (prefix __turso_internal_), kept apart; columns are PRAGMA table_xinfo rows, indexes are
PRAGMA index_list/index_xinfo rows, so two files with the same DDL print the
same JSON whatever whitespace or comments the DDL text had.
"""

import json
import os
import re
import shutil
import sqlite3
import sys
import tempfile


ENGINE_PREFIX = "__turso_internal_"


def describe(conn):
    tables = {}
    indexes = {}
    engine = []
    for (name,) in conn.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
    ):
        # turso's own bookkeeping (e.g. its AUTOINCREMENT sequences) is the
        # engine's, not the format's: listed by name, not compared.
        if name.startswith(ENGINE_PREFIX):
            engine.append(name)
            continue
        tables[name] = [list(r) for r in conn.execute(f"PRAGMA table_xinfo('{name}')")]
        for seq, iname, unique, origin, partial in conn.execute(f"PRAGMA index_list('{name}')"):
            cols = [list(r) for r in conn.execute(f"PRAGMA index_xinfo('{iname}')")]
            # Auto-index names differ only by counter; key them by table and columns.
            key = iname if origin == "c" else f"{name}:{origin}:" + ",".join(str(c[2]) for c in cols if c[5])
            indexes[key] = {"table": name, "unique": unique, "origin": origin, "partial": partial, "columns": cols}
    meta = []
    if "meta" in tables:
        meta = [list(r) for r in conn.execute("SELECT key, value FROM meta ORDER BY key")]
    integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
    rows = {name: conn.execute(f"SELECT count(*) FROM '{name}'").fetchone()[0] for name in tables}
    return {"tables": tables, "indexes": indexes, "meta": meta, "integrity": integrity, "engine_tables": engine, "rows": rows}


def from_store(path):
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, os.path.basename(path))
        shutil.copyfile(path, copy)
        if os.path.exists(path + "-wal"):
            shutil.copyfile(path + "-wal", copy + "-wal")
        conn = sqlite3.connect(copy)
        try:
            return describe(conn)
        finally:
            conn.close()


def from_doc(doc):
    text = open(doc, encoding="utf-8").read()
    match = re.search(r"## DDL.*?```sql\n(.*?)```", text, re.S)
    if not match:
        sys.exit(f"{doc}: no ```sql block under a '## DDL' heading")
    conn = sqlite3.connect(":memory:")
    conn.executescript(match.group(1))
    return describe(conn)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("store", "ddl"):
        sys.exit(__doc__)
    fn = from_store if sys.argv[1] == "store" else from_doc
    print(json.dumps(fn(sys.argv[2]), sort_keys=True))
