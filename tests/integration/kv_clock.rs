//! TTL expiry and expired-key takeover through a guest, with an injected
//! clock: no sleeping, exact boundaries.

use std::sync::Arc;

use alk_host::ManualClock;

use crate::common::*;

#[test]
fn ttl_expires_exactly_at_the_deadline_and_the_key_can_be_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let tool = |args: &[&str]| {
        let out = run_lib("kv-tool", ctx_with_clock(dir.path(), clock.clone()), args);
        assert_eq!(out.exit_code(), 0, "{}", text(&out.stdout));
        text(&out.stdout).trim().to_string()
    };
    assert_eq!(
        tool(&["set-if-absent", "leases", "job-1", "worker-a", "1000"]),
        "won"
    );
    clock.advance(999);
    assert_eq!(tool(&["get", "leases", "job-1"]), "worker-a");
    assert_eq!(
        tool(&["set-if-absent", "leases", "job-1", "worker-b", "1000"]),
        "lost"
    );
    assert_eq!(tool(&["scan", "leases", "job-"]), "job-1=worker-a");
    // expires_at == now counts as expired.
    clock.advance(1);
    assert_eq!(
        tool(&["scan", "leases", "job-"]),
        "",
        "scan shows an expired key"
    );
    assert_eq!(tool(&["exists", "leases", "job-1"]), "false");
    assert_eq!(
        tool(&["set-if-absent", "leases", "job-1", "worker-b", "1000"]),
        "won"
    );
    assert_eq!(tool(&["get", "leases", "job-1"]), "worker-b");
    // A plain set without TTL makes the key permanent.
    assert_eq!(tool(&["set", "leases", "job-1", "worker-c"]), "ok");
    clock.advance(10_000_000);
    assert_eq!(tool(&["get", "leases", "job-1"]), "worker-c");
}
