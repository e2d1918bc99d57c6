//! On-disk format checks with stock SQLite (Python's `sqlite3` on a copy,
//! after every host process has exited), and rejection of foreign files.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

fn doc(name: &str) -> PathBuf {
    root().join("docs/formats").join(name)
}

/// Every `<file>` under `<dir>/<capability>/*/`, or `<dir>/<capability>/<file>`
/// for capabilities with one store per data directory.
fn store_files(dir: &Path, capability: &str, file: &str) -> Vec<PathBuf> {
    let single = dir.join(capability).join(file);
    if single.exists() {
        return vec![single];
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(capability))
        .unwrap()
        .map(|e| e.unwrap().path().join(file))
        .collect();
    files.sort();
    files
}

/// Runs `guest` through the CLI, then checks every store it left with stock
/// SQLite against the DDL of the format document.
fn assert_stores_match_document(
    guest: &str,
    capability: &str,
    file: &str,
    format: &str,
    engine_tables: &[&str],
) {
    assert_stores_match_document_with(guest, &[], &[], capability, file, format, engine_tables)
}

/// [`assert_stores_match_document`] with extra host arguments.
fn assert_stores_match_document_with(
    guest: &str,
    host_args: &[&str],
    guest_args: &[&str],
    capability: &str,
    file: &str,
    format: &str,
    engine_tables: &[&str],
) {
    let dir = tempfile::tempdir().unwrap();
    let out = run_cli(guest, dir.path(), host_args, guest_args);
    assert!(out.status.success(), "{}", text(&out.stdout));
    let expected = sqlite_schema("ddl", &doc(&format!("{format}.md")));
    assert_eq!(
        meta_keys(&expected["meta"])[0],
        "format",
        "the document's DDL writes the marker"
    );
    assert_eq!(
        expected["meta"][0][1], format,
        "the document's DDL writes the marker"
    );
    let files = store_files(dir.path(), capability, file);
    assert!(!files.is_empty(), "no {file} under {capability}/");
    for file in files {
        let seen = sqlite_schema("store", &file);
        assert_eq!(seen["integrity"], "ok", "{}", file.display());
        assert_eq!(seen["tables"], expected["tables"], "{}", file.display());
        assert_eq!(seen["indexes"], expected["indexes"], "{}", file.display());
        assert_eq!(
            fixed_meta(&seen["meta"]),
            fixed_meta(&expected["meta"]),
            "{}",
            file.display()
        );
        // The engine's own tables are the ones the format document lists.
        assert_eq!(
            seen["engine_tables"],
            serde_json::json!(engine_tables),
            "{}",
            file.display()
        );
    }
}

/// The keys of a store's `meta` rows.
fn meta_keys(meta: &serde_json::Value) -> Vec<String> {
    meta.as_array()
        .unwrap()
        .iter()
        .map(|r| r[0].as_str().unwrap().to_string())
        .collect()
}

/// A store's `meta` rows with the values that are random by design (a
/// stream store's `store_id`) and the optional relay marks of a queue
/// (`relayed:<store id>`, checked by the transaction test) left out.
fn fixed_meta(meta: &serde_json::Value) -> serde_json::Value {
    meta.as_array()
        .unwrap()
        .iter()
        .filter(|r| !r[0].as_str().unwrap().starts_with("relayed:"))
        .map(|r| match r[0].as_str().unwrap() {
            "store_id" => {
                let id = r[1].as_str().unwrap();
                assert!(
                    id.len() == 36 && id.chars().filter(|c| *c == '-').count() == 4,
                    "store_id {id:?} is not a UUID"
                );
                serde_json::json!(["store_id", "<uuid>"])
            }
            _ => r.clone(),
        })
        .collect()
}

/// A guest using transactions leaves a `localstream.v3` store and
/// `localqueue.v4` queues (outbox queues included) exactly as documented;
/// the queues it sent to through transactions carry the relay mark of the
/// stream store and nothing else beyond the documented rows.
#[test]
fn transactions_leave_documented_stream_and_queue_stores() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_cli("tx-contract", dir.path(), &[], &[]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    // The last transaction's relayed rows are deleted by the next write of
    // the stream store, or when a host opens it next: open it once.
    let out = run_cli("stream-tool", dir.path(), &[], &["get-offset", "s", "c"]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    let stream = sqlite_schema("store", &dir.path().join("stream/localstream.sqlite"));
    let expected = sqlite_schema("ddl", &doc("localstream.v3.md"));
    assert_eq!(stream["integrity"], "ok");
    assert_eq!(stream["tables"], expected["tables"]);
    assert_eq!(stream["indexes"], expected["indexes"]);
    assert_eq!(fixed_meta(&stream["meta"]), fixed_meta(&expected["meta"]));
    let store_id = stream["meta"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r[0] == "store_id")
        .map(|r| r[1].as_str().unwrap().to_string())
        .expect("a store_id row");
    // Every send was relayed: nothing is left pending.
    assert_eq!(stream["rows"]["relay"], 0, "{}", stream["rows"]);
    let queue_doc = sqlite_schema("ddl", &doc("localqueue.v4.md"));
    let mut marked = 0;
    let mut outboxes = 0;
    for file in store_files(dir.path(), "queue", "localqueue.sqlite") {
        let seen = sqlite_schema("store", &file);
        assert_eq!(seen["integrity"], "ok", "{}", file.display());
        assert_eq!(seen["tables"], queue_doc["tables"], "{}", file.display());
        assert_eq!(seen["indexes"], queue_doc["indexes"], "{}", file.display());
        assert_eq!(
            fixed_meta(&seen["meta"]),
            fixed_meta(&queue_doc["meta"]),
            "{}",
            file.display()
        );
        for key in meta_keys(&seen["meta"]) {
            if let Some(id) = key.strip_prefix("relayed:") {
                assert_eq!(id, store_id, "{}", file.display());
                marked += 1;
            }
        }
        if file.to_string_lossy().contains("/__alkstore_outbox_") {
            outboxes += 1;
        }
    }
    assert!(marked >= 3, "only {marked} queues carry a relay mark");
    assert!(outboxes >= 1, "no outbox queue file");
}

#[test]
fn kv_stores_have_exactly_the_documented_schema_and_marker() {
    assert_stores_match_document("kv-contract", "kv", "localkv.sqlite", "localkv.v1", &[]);
}

#[test]
fn the_stream_store_has_exactly_the_documented_schema_and_marker() {
    assert_stores_match_document(
        "stream-contract",
        "stream",
        "localstream.sqlite",
        "localstream.v3",
        &["__turso_internal_seq___turso_internal_autoincrement_relay"],
    );
}

#[test]
fn the_lock_store_has_exactly_the_documented_schema_and_marker() {
    assert_stores_match_document(
        "lock-contract",
        "lock",
        "locallock.sqlite",
        "locallock.v2",
        &[],
    );
}

#[test]
fn queue_stores_have_exactly_the_documented_schema_index_and_marker() {
    assert_stores_match_document(
        "queue-contract",
        "queue",
        "localqueue.sqlite",
        "localqueue.v4",
        &[
            "__turso_internal_seq___turso_internal_autoincrement_message_groups",
            "__turso_internal_seq___turso_internal_autoincrement_messages",
        ],
    );
}

#[test]
fn v3_queue_stores_have_exactly_the_documented_schema_index_and_marker() {
    assert_stores_match_document_with(
        "queue-tool",
        &["--new-queues", "v3"],
        &["produce", "q", "3", "m"],
        "queue",
        "localqueue.sqlite",
        "localqueue.v3",
        &[
            "__turso_internal_seq___turso_internal_autoincrement_message_groups",
            "__turso_internal_seq___turso_internal_autoincrement_messages",
        ],
    );
}

#[test]
fn v1_queue_stores_have_exactly_the_documented_schema_index_and_marker() {
    assert_stores_match_document_with(
        "queue-tool",
        &["--new-queues", "v1"],
        &["produce", "q", "3", "m"],
        "queue",
        "localqueue.sqlite",
        "localqueue.v1",
        &["__turso_internal_seq___turso_internal_autoincrement_messages"],
    );
}

/// Makes `<dir>/<rel>` with stock SQLite.
fn foreign_store(dir: &Path, rel: &str, script: &str) -> PathBuf {
    let file = dir.join(rel);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let py = format!(
        "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\nc.execute('PRAGMA journal_mode=WAL')\nc.executescript({script:?})\nc.commit()\nc.close()\n"
    );
    let out = Command::new(python())
        .arg("-c")
        .arg(py)
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    file
}

/// Asserts that running `tool args` (CLI) and `tool lib_args` (library)
/// fails with a store-setup error naming `needles`, and that the file is
/// byte-identical afterwards.
fn assert_tool_rejected(
    tool: &str,
    args: &[&str],
    lib_args: &[&str],
    dir: &Path,
    file: &Path,
    needles: &[&str],
) {
    let before = file_bytes(file);
    let out = run_cli(tool, dir, &[], args);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("StoreSetup"), "{stdout}");
    for n in needles {
        assert!(stdout.contains(n), "{n:?} not in {stdout}");
    }
    let out = run_lib(tool, ctx(dir), lib_args);
    let stdout = text(&out.stdout);
    assert_eq!(out.exit_code(), 1, "{stdout}");
    assert!(stdout.contains("StoreSetup"), "{stdout}");
    assert_eq!(file_bytes(file), before, "{} was modified", file.display());
}

fn assert_rejected(dir: &Path, bucket: &str, file: &Path, needles: &[&str]) {
    assert_tool_rejected(
        "kv-tool",
        &["get", bucket, "k"],
        &["set", bucket, "k", "v"],
        dir,
        file,
        needles,
    );
}

#[test]
fn foreign_format_marker_is_rejected_and_the_file_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let file = foreign_store(
        dir.path(),
        "kv/b/localkv.sqlite",
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);\
         INSERT INTO meta VALUES ('format', 'localkv.v9');\
         CREATE TABLE kv (key TEXT PRIMARY KEY, value BLOB NOT NULL, expires_at INTEGER);\
         INSERT INTO kv VALUES ('k', x'01', NULL);",
    );
    assert_rejected(dir.path(), "b", &file, &["localkv.v9", "localkv.v1"]);
}

#[test]
fn another_programs_database_is_rejected_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let file = foreign_store(
        dir.path(),
        "kv/b/localkv.sqlite",
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users VALUES (1, 'ada');",
    );
    assert_rejected(dir.path(), "b", &file, &["users", "localkv.v1"]);
}

#[test]
fn a_file_that_is_not_a_database_is_rejected_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kv/b/localkv.sqlite");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let garbage: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&file, &garbage).unwrap();
    assert_rejected(dir.path(), "b", &file, &["localkv.v1"]);
}

#[test]
fn a_store_reopened_after_the_host_exits_keeps_its_data() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..3 {
        let out = run_cli(
            "kv-tool",
            dir.path(),
            &[],
            &["set", "b", &format!("k{i}"), "v"],
        );
        assert!(out.status.success(), "{}", text(&out.stdout));
    }
    let out = run_cli("kv-tool", dir.path(), &[], &["scan", "b", "k"]);
    assert_eq!(text(&out.stdout), "k0=v\nk1=v\nk2=v\n");
}

#[test]
fn the_data_directory_is_created_only_when_a_capability_is_used() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = run_cli("misbehave", &data, &[], &["exit", "0"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        !data.exists(),
        "a run that used no capability created {}",
        data.display()
    );
    let out = run_cli("kv-tool", &data, &[], &["set", "b", "k", "v"]);
    assert!(out.status.success());
    assert!(data.join("kv/b/localkv.sqlite").exists());
}

#[test]
fn a_queue_store_with_a_foreign_marker_is_rejected_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    // A kv store where a queue store belongs: the marker names the other format.
    let file = foreign_store(
        dir.path(),
        "queue/q/localqueue.sqlite",
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);\
         INSERT INTO meta VALUES ('format', 'localkv.v1');",
    );
    assert_tool_rejected(
        "queue-tool",
        &["receive", "q", "1"],
        &["send", "q", "x"],
        dir.path(),
        &file,
        &["localkv.v1", "localqueue.v1"],
    );
}

#[test]
fn a_stream_store_with_a_foreign_marker_is_rejected_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let file = foreign_store(
        dir.path(),
        "stream/localstream.sqlite",
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);\
         INSERT INTO meta VALUES ('format', 'localstream.v0');",
    );
    assert_tool_rejected(
        "stream-tool",
        &["get-offset", "s", "c"],
        &["publish", "s", "1", "x"],
        dir.path(),
        &file,
        &["localstream.v0", "localstream.v3"],
    );
}

#[test]
fn a_lock_store_with_a_foreign_marker_is_rejected_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let file = foreign_store(
        dir.path(),
        "lock/locallock.sqlite",
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);\
         INSERT INTO meta VALUES ('format', 'somelock.v3');",
    );
    assert_tool_rejected(
        "lock-tool",
        &["holder", "l"],
        &["acquire", "l", "me", "1000", "10"],
        dir.path(),
        &file,
        &["somelock.v3", "locallock.v2"],
    );
}

#[test]
fn v2_kv_stores_have_exactly_the_documented_schema_and_marker() {
    assert_stores_match_document_with(
        "kv-contract",
        &["--new-kv", "v2"],
        &[],
        "kv",
        "localkv.sqlite",
        "localkv.v2",
        &[],
    );
}

/// `alk-host migrate kv` turns every bucket the kv contract left into
/// exactly the documented v2 store, rows included; a second run changes
/// nothing.
#[test]
fn migrated_kv_stores_have_exactly_the_v2_schema_and_keep_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_cli("kv-contract", dir.path(), &[], &[]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    let expected = sqlite_schema("ddl", &doc("localkv.v2.md"));
    let files = store_files(dir.path(), "kv", "localkv.sqlite");
    assert!(files.len() > 1);
    for file in files {
        let bucket = file
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let before = sqlite_schema("store", &file);
        assert_eq!(
            before["meta"],
            serde_json::json!([["format", "localkv.v1"]])
        );
        for run in 0..2 {
            let out = alk_host()
                .args(["migrate", "kv", &bucket, "--data-dir"])
                .arg(dir.path())
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", text(&out.stderr));
            let said = text(&out.stdout);
            let want = if run == 0 {
                "migrated from localkv.v1 to localkv.v2"
            } else {
                "already localkv.v2"
            };
            assert!(said.contains(want), "{said}");
        }
        let after = sqlite_schema("store", &file);
        assert_eq!(after["integrity"], "ok");
        assert_eq!(after["tables"], expected["tables"], "{}", file.display());
        assert_eq!(after["indexes"], expected["indexes"], "{}", file.display());
        assert_eq!(after["meta"], serde_json::json!([["format", "localkv.v2"]]));
        assert_eq!(
            after["rows"]["kv"], before["rows"]["kv"],
            "{bucket}: rows kept"
        );
    }
}

/// A `localkv.v2` file made by another program (stock SQLite, the shared
/// format's exact DDL, versions of its own shape) is used as it is: reads,
/// compare-and-swap against its versions, writes with fresh versions that
/// stock SQLite reads back; the file stays v2.
#[test]
fn a_localkv_v2_file_of_another_program_is_used_natively_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let file = foreign_store(
        dir.path(),
        "kv/shared/localkv.sqlite",
        "CREATE TABLE IF NOT EXISTS meta (\n    key   TEXT PRIMARY KEY,\n    value TEXT NOT NULL\n);\n\
         INSERT OR IGNORE INTO meta (key, value) VALUES ('format', 'localkv.v2');\n\n\
         CREATE TABLE IF NOT EXISTS kv (\n    key        TEXT PRIMARY KEY,\n    value      BLOB NOT NULL,\n    expires_at INTEGER,         -- unix epoch MILLISECONDS, NULL = no expiry\n    version    TEXT NOT NULL    -- changes on every applied put\n);\n\
         INSERT INTO kv VALUES ('greeting', x'68656c6c6f', NULL, 'v-from-the-other-program');\n\
         INSERT INTO kv VALUES ('atomics_key', x'35', NULL, '018f-other');\n\
         INSERT INTO kv VALUES ('gone', x'00', 1, 'old');",
    );
    let get = |key: &str| {
        let out = run_cli("kv-tool", dir.path(), &[], &["get", "shared", key]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).trim_end().to_string()
    };
    assert_eq!(get("greeting"), "hello");
    assert_eq!(get("gone"), "(absent)");
    // An increment is a compare-and-swap on the other program's version.
    let out = run_cli(
        "keyvalue-draft",
        dir.path(),
        &["--keyvalue-bucket", "shared"],
        &["increment", "", "atomics_key", "2"],
    );
    assert_eq!(text(&out.stdout).trim(), "7", "{}", text(&out.stderr));
    let out = run_cli("kv-tool", dir.path(), &[], &["set", "shared", "new", "x"]);
    assert!(out.status.success());
    let py = "import sqlite3, sys, shutil, tempfile, os\n\
              d = tempfile.mkdtemp()\n\
              for s in ('', '-wal'):\n    \
                  p = sys.argv[1] + s\n    \
                  if os.path.exists(p): shutil.copyfile(p, os.path.join(d, 'f' + s))\n\
              c = sqlite3.connect(os.path.join(d, 'f'))\n\
              for k, v, ver in c.execute('SELECT key, value, version FROM kv ORDER BY key'):\n    \
                  print(k, bytes(v).decode(), ver)\n\
              print(c.execute(\"SELECT value FROM meta WHERE key = 'format'\").fetchone()[0])\n";
    let out = Command::new(python())
        .arg("-c")
        .arg(py)
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let seen = text(&out.stdout);
    let lines: Vec<Vec<&str>> = seen.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.last().unwrap(), &["localkv.v2"]);
    let row = |key: &str| {
        lines
            .iter()
            .find(|l| l[0] == key)
            .unwrap_or_else(|| panic!("{key} in {seen}"))
            .clone()
    };
    assert_eq!(
        row("greeting"),
        ["greeting", "hello", "v-from-the-other-program"]
    );
    let counter = row("atomics_key");
    assert_eq!(counter[1], "7");
    assert!(
        counter[2].len() == 32 && counter[2] != "018f-other",
        "{seen}"
    );
    let new = row("new");
    assert_eq!(new[1], "x");
    assert_eq!(new[2].len(), 32);
}
