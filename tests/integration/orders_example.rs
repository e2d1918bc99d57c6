//! The orders example (`examples/orders`): its script runs the HTTP API,
//! the dashboard, the schedule runner, several workers and the stream
//! projection on one data directory, stops them, and ends with the
//! summary of a guest that checks every store. The summary must say that
//! every order was processed exactly once or dead-lettered with its error
//! and that the projection's totals are right; the check must also be able
//! to fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{alk_host, cache_dir, guest, root, text};

/// The example's guests: the directory that holds them.
fn guests() -> PathBuf {
    for name in ["orders-api", "orders-projection", "orders-admin"] {
        guest(name);
    }
    guest("orders-worker").parent().unwrap().to_path_buf()
}

/// `examples/orders/run.sh` with the host under test and `args`.
fn run_script(args: &[&std::ffi::OsStr]) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(root().join("examples/orders/run.sh"))
        .arg("--alk-host")
        .arg(env!("CARGO_BIN_EXE_alk-host"))
        .args(args)
        .env("ALK_CACHE_DIR", cache_dir())
        .env_remove("RUST_LOG");
    for var in [
        "ALK_HOST",
        "ORDERS_GUESTS",
        "ORDERS_DATA_DIR",
        "ORDERS_LOG_DIR",
        "ORDERS_N",
        "ORDERS_WORKERS",
        "ORDERS_WORK_MS",
        "ORDERS_DASHBOARD_ADDR",
        "ALK_DASHBOARD_TOKEN",
    ] {
        cmd.env_remove(var);
    }
    cmd.output().expect("start bash")
}

/// Everything the run's processes wrote, for a failure's message.
fn logs(dir: &Path) -> String {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    files
        .iter()
        .map(|f| {
            let body = std::fs::read_to_string(f).unwrap_or_default();
            let tail: Vec<&str> = body.lines().rev().take(15).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            format!("--- {}\n{}", f.display(), tail.join("\n"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The line of `summary` starting with `prefix`.
fn line<'a>(summary: &[&'a str], prefix: &str) -> &'a str {
    summary
        .iter()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line in the summary:\n{}", summary.join("\n")))
}

/// 20 orders (by the example's rule 2 always fail, 4 fail once), 3
/// workers: every order ends processed once or dead with its error, the
/// totals are right, the servers stopped cleanly on SIGTERM. Then the check
/// guest, told of an order that never arrived, fails.
#[test]
fn orders_example_runs_end_to_end_and_checks_out() {
    let guests = guests();
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let log_dir = work.path().join("logs");
    let out = run_script(&[
        "--guests".as_ref(),
        guests.as_os_str(),
        "--data-dir".as_ref(),
        data.as_os_str(),
        "--log-dir".as_ref(),
        log_dir.as_os_str(),
        "--orders".as_ref(),
        "20".as_ref(),
        "--workers".as_ref(),
        "3".as_ref(),
    ]);
    let stdout = text(&out.stdout);
    let said = format!(
        "{stdout}\n--- stderr\n{}\n{}",
        text(&out.stderr),
        logs(&log_dir)
    );
    assert!(
        out.status.success(),
        "run.sh failed ({}):\n{said}",
        out.status
    );

    // The dashboard's address was printed for the user to open.
    assert!(
        stdout.contains("dashboard: http://127.0.0.1:"),
        "no dashboard URL:\n{said}"
    );

    let summary: Vec<&str> = stdout.lines().skip_while(|l| *l != "SUMMARY").collect();
    assert!(!summary.is_empty(), "no SUMMARY:\n{said}");
    assert_eq!(
        line(&summary, "orders:"),
        "orders: 20 sent, 18 processed, 2 dead-lettered, 0 lost, 0 processed twice",
        "{said}"
    );
    assert!(
        line(&summary, "dead letters:")
            .starts_with("dead letters: 2 with their last error, e.g. o-0007: card declined for "),
        "{said}"
    );
    assert!(
        line(&summary, "totals:").starts_with("totals: right (5 customers, 20 orders, "),
        "{said}"
    );
    assert!(
        line(&summary, "totals:").ends_with("projection at offset 20 of 20)"),
        "{said}"
    );
    assert!(
        line(&summary, "workers:").starts_with("workers: 3 ("),
        "{said}"
    );
    let reports: u64 = line(&summary, "reports:")
        .split(' ')
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(reports >= 1, "no report was written:\n{said}");
    assert_eq!(line(&summary, "check:"), "check: passed", "{said}");

    // The servers stopped on SIGTERM, each saying so.
    for (file, words) in [
        ("serve.log", "stopped serving"),
        ("dashboard.log", "dashboard stopped"),
        ("schedules.log", "job(s) fired"),
    ] {
        let log = std::fs::read_to_string(log_dir.join(file)).unwrap_or_default();
        assert!(log.contains(words), "{file} lacks `{words}`:\n{said}");
    }

    // The check fails when the stores miss an order the client sent.
    let recheck = alk_host()
        .arg("run")
        .arg(guest("orders-admin"))
        .arg("--data-dir")
        .arg(&data)
        .args(["--", "check", "21", "1"])
        .output()
        .expect("start alk-host");
    let recheck_out = text(&recheck.stdout);
    assert_eq!(recheck.status.code(), Some(1), "{recheck_out}");
    assert!(
        recheck_out.contains("problem: the client sent 21 orders but the stream holds 20"),
        "{recheck_out}"
    );
    assert!(
        recheck_out.contains("orders: 21 sent, 18 processed, 2 dead-lettered"),
        "{recheck_out}"
    );
    assert!(
        recheck_out.lines().any(|l| l.starts_with("check: FAILED")),
        "{recheck_out}"
    );
}

/// Missing guests and a data directory in use are refused before anything
/// starts, with what to do.
#[test]
fn orders_example_refuses_what_it_cannot_run() {
    let empty = tempfile::tempdir().unwrap();
    let out = run_script(&["--guests".as_ref(), empty.path().as_os_str()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("orders-api.wasm is missing") && err.contains("cargo xtask example"),
        "{err}"
    );

    let used = tempfile::tempdir().unwrap();
    std::fs::write(used.path().join("something"), b"x").unwrap();
    let out = run_script(&[
        "--guests".as_ref(),
        guests().as_os_str(),
        "--data-dir".as_ref(),
        used.path().as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("is not empty: give a new one"), "{err}");
}
