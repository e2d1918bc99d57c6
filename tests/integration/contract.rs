//! Contract guests, in every language, through the library and the CLI.

use crate::common::*;

/// The `ok <case>` lines of a contract run; asserts it passed.
fn passed_cases(stdout: &str, stderr: &str, code: i32, who: &str) -> Vec<String> {
    assert_eq!(code, 0, "{who} failed:\n{stdout}\n{stderr}");
    assert!(!stdout.contains("FAIL"), "{who}:\n{stdout}");
    let cases: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ok "))
        .map(str::to_string)
        .collect();
    let summary = format!("{} passed, 0 failed", cases.len());
    assert!(
        stdout.lines().any(|l| l == summary),
        "{who}: no summary line {summary:?}:\n{stdout}"
    );
    cases
}

fn lib(name: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let out = run_lib(name, ctx(dir.path()), &[]);
    passed_cases(
        &text(&out.stdout),
        &text(&out.stderr),
        out.exit_code(),
        name,
    )
}

fn cli(name: &str, capability: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let out = run_cli(name, dir.path(), &[], &[]);
    let cases = passed_cases(
        &text(&out.stdout),
        &text(&out.stderr),
        out.status.code().unwrap_or(-1),
        name,
    );
    // The CLI run left a real store behind.
    assert!(
        std::fs::read_dir(dir.path().join(capability))
            .unwrap()
            .count()
            > 0
    );
    cases
}

/// Every rule of the kv contract is a case; this list is the contract.
const KV_CASES: usize = 32;

#[test]
fn kv_contract_rust_through_library() {
    assert_eq!(lib("kv-contract").len(), KV_CASES);
}

#[test]
fn kv_contract_rust_through_cli() {
    assert_eq!(cli("kv-contract", "kv").len(), KV_CASES);
}

#[test]
fn kv_contract_python_through_library() {
    assert_eq!(lib("kv-contract-py").len(), KV_CASES);
}

#[test]
fn kv_contract_python_through_cli() {
    assert_eq!(cli("kv-contract-py", "kv").len(), KV_CASES);
}

#[test]
fn kv_contract_is_the_same_in_every_language() {
    assert_eq!(lib("kv-contract"), lib("kv-contract-py"));
}

/// Every rule of the queue contract is a case.
const QUEUE_CASES: usize = 29;

#[test]
fn queue_contract_rust_through_library() {
    assert_eq!(lib("queue-contract").len(), QUEUE_CASES);
}

#[test]
fn queue_contract_rust_through_cli() {
    assert_eq!(cli("queue-contract", "queue").len(), QUEUE_CASES);
}

#[test]
fn queue_contract_python_through_library() {
    assert_eq!(lib("queue-contract-py").len(), QUEUE_CASES);
}

#[test]
fn queue_contract_python_through_cli() {
    assert_eq!(cli("queue-contract-py", "queue").len(), QUEUE_CASES);
}

#[test]
fn queue_contract_is_the_same_in_every_language() {
    assert_eq!(lib("queue-contract"), lib("queue-contract-py"));
}

/// Every rule of the stream contract is a case.
const STREAM_CASES: usize = 28;

#[test]
fn stream_contract_through_library() {
    assert_eq!(lib("stream-contract").len(), STREAM_CASES);
}

#[test]
fn stream_contract_through_cli() {
    assert_eq!(cli("stream-contract", "stream").len(), STREAM_CASES);
}

/// Every rule of the lock contract is a case.
const LOCK_CASES: usize = 18;

#[test]
fn lock_contract_through_library() {
    assert_eq!(lib("lock-contract").len(), LOCK_CASES);
}

#[test]
fn lock_contract_through_cli() {
    assert_eq!(cli("lock-contract", "lock").len(), LOCK_CASES);
}

/// Every rule of the notify contract is a case.
const NOTIFY_CASES: usize = 10;

#[test]
fn notify_contract_through_library() {
    assert_eq!(lib("notify-contract").len(), NOTIFY_CASES);
}

#[test]
fn notify_contract_through_cli() {
    assert_eq!(cli("notify-contract", "wake").len(), NOTIFY_CASES);
}
