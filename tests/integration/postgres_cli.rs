//! Choosing the Postgres engine from the command line: `--store`,
//! `$ALK_STORE`, and what the host says when it cannot use the database —
//! one line, exit status 2, never the password.

use crate::common::*;

/// Runs `alk-host run kv-tool.wasm <flags> -- set b k v` with `ALK_STORE`
/// as given.
fn run_kv(flags: &[&str], env_store: Option<&str>) -> std::process::Output {
    let mut cmd = alk_host();
    cmd.arg("run").arg(guest("kv-tool")).args(flags);
    match env_store {
        Some(s) => cmd.env("ALK_STORE", s),
        None => cmd.env_remove("ALK_STORE"),
    };
    cmd.args(["--", "set", "b", "k", "v"])
        .output()
        .expect("start alk-host")
}

/// The one `alk-host: error:` line of a failed start.
fn one_error_line(out: &std::process::Output, secret: &str) -> String {
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("alk-host: error: "), "{stderr}");
    assert!(
        !stderr.contains(secret),
        "the password is in the output: {stderr}"
    );
    assert!(!text(&out.stdout).contains(secret));
    stderr
}

#[test]
fn an_unreachable_server_is_one_line_naming_host_and_port_without_the_password() {
    let url = "postgres://alk:hunter2-never-shown@127.0.0.1:1/app";
    let out = run_kv(&["--store", url], None);
    let line = one_error_line(&out, "hunter2");
    assert!(
        line.starts_with("alk-host: error: cannot reach postgres at 127.0.0.1:1: "),
        "{line}"
    );
    // The same from the environment.
    let out = run_kv(&[], Some(url));
    let line = one_error_line(&out, "hunter2");
    assert!(
        line.contains("cannot reach postgres at 127.0.0.1:1"),
        "{line}"
    );
}

#[test]
fn a_wrong_password_and_bad_urls_are_one_line_each() {
    let good = postgres_url();
    let secret = good
        .split("://")
        .nth(1)
        .and_then(|r| r.split('@').next())
        .and_then(|auth| auth.split(':').nth(1))
        .expect("the test URL has a password")
        .to_string();
    let wrong = good.replace(&secret, "not-the-password");
    let line = one_error_line(&run_kv(&["--store", &wrong], None), "not-the-password");
    assert!(line.contains("password authentication failed"), "{line}");
    for (bad, says) in [
        (good.replace("schema=", "schema=Bad-"), "schema name"),
        (format!("{good}&pool_size=0"), "pool_size"),
        ("mysql://u:hunter2@h/db".to_string(), "postgres://"),
    ] {
        let line = one_error_line(&run_kv(&["--store", &bad], None), &secret);
        assert!(!line.contains("hunter2"), "{line}");
        assert!(line.contains(says), "{bad}: {line}");
    }
}

#[test]
fn the_store_comes_from_the_flag_or_the_environment_and_data_dir_wins_over_the_environment() {
    let url = postgres_url();
    let out = run_kv(&["--store", &url], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // What the flag wrote, the environment reads.
    let mut cmd = alk_host();
    let out = cmd
        .arg("run")
        .arg(guest("kv-tool"))
        .env("ALK_STORE", &url)
        .args(["--", "get", "b", "k"])
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout).trim(), "v", "{}", text(&out.stderr));
    // An explicit data directory wins over the environment's database.
    let dir = tempfile::tempdir().unwrap();
    let out = run_kv(
        &["--data-dir", dir.path().to_str().unwrap()],
        Some("postgres://alk:x@127.0.0.1:1/app"),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(dir.path().join("kv/b").exists());
    // Both flags at once: a usage error.
    let out = run_kv(
        &["--data-dir", dir.path().to_str().unwrap(), "--store", &url],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
}
