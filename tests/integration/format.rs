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
        expected["meta"],
        serde_json::json!([["format", format]]),
        "the document's DDL writes the marker"
    );
    let files = store_files(dir.path(), capability, file);
    assert!(!files.is_empty(), "no {file} under {capability}/");
    for file in files {
        let seen = sqlite_schema("store", &file);
        assert_eq!(seen["integrity"], "ok", "{}", file.display());
        assert_eq!(seen["tables"], expected["tables"], "{}", file.display());
        assert_eq!(seen["indexes"], expected["indexes"], "{}", file.display());
        assert_eq!(seen["meta"], expected["meta"], "{}", file.display());
        // The engine's own tables are the ones the format document lists.
        assert_eq!(
            seen["engine_tables"],
            serde_json::json!(engine_tables),
            "{}",
            file.display()
        );
    }
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
        "localstream.v1",
        &[],
    );
}

#[test]
fn the_lock_store_has_exactly_the_documented_schema_and_marker() {
    assert_stores_match_document(
        "lock-contract",
        "lock",
        "locallock.sqlite",
        "locallock.v1",
        &[],
    );
}

#[test]
fn queue_stores_have_exactly_the_documented_schema_index_and_marker() {
    assert_stores_match_document(
        "queue-contract",
        "queue",
        "localqueue.sqlite",
        "localqueue.v2",
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
        &["localstream.v0", "localstream.v1"],
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
        &["somelock.v3", "locallock.v1"],
    );
}
