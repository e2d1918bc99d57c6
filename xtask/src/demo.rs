//! `cargo xtask demo`: builds only what the demo runs — the `alk-host`
//! command and the Rust `hello` guest — saying what it does and how long
//! each step took, then runs `hello` twice on `target/demo-data`.
//!
//! Nothing else is built or installed: no other guest, and no Python,
//! JavaScript or C toolchain (`cargo xtask guests` and `cargo xtask test`
//! do that). Compiler warnings of the vendored turso crates (`vendor/`,
//! kept as published plus their patch) are not shown; every other
//! diagnostic, and every error, is.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Result, cargo, root, run_quiet, target_dir};

/// Builds only the `alk-host` binary, with the features every dependency
/// has in the tests' build: cargo unifies features over the packages a build
/// selects, and `xtask` with the feature pins of `cli/Cargo.toml` makes the
/// selection's features the whole workspace's (pinned by a test below), so
/// `cargo xtask test` after the demo compiles no dependency a second time.
const HOST_BUILD: &[&str] = &[
    "build",
    "-p",
    "alk-host-cli",
    "-p",
    "xtask",
    "--bin",
    "alk-host",
];

/// Runs the demo.
pub fn run() -> Result<()> {
    let start = Instant::now();
    let root = root();
    let target = target_dir();
    let step = |text: &str| eprintln!("[{}] {text}", elapsed(start));
    eprintln!(
        "alk demo: builds the alk-host command and one guest, then runs the guest twice on one data directory."
    );

    step("checking the wasm32-wasip2 target (rustup)");
    crate::ensure_wasm_target()?;

    step(
        "building alk-host (a first build compiles several hundred crates: about ten minutes on 2 cores)",
    );
    build(cargo().current_dir(&root).args(HOST_BUILD), start)?;
    let host = target.join("debug/alk-host");
    step(&format!("alk-host is built: {}", shown(&root, &host)));

    step("building the hello guest (Rust, wasm32-wasip2)");
    build(crate::guest_build(&root).args(["-p", "hello"]), start)?;
    let guests = target.join("guests");
    std::fs::create_dir_all(&guests).map_err(|e| format!("{}: {e}", guests.display()))?;
    let guest = guests.join("hello.wasm");
    let built = target.join("wasm/wasm32-wasip2/release/hello.wasm");
    std::fs::copy(&built, &guest).map_err(|e| format!("cannot copy {}: {e}", built.display()))?;
    step(&format!(
        "the hello guest is built: {}",
        shown(&root, &guest)
    ));

    let data = target.join("demo-data");
    for visitor in ["Ada", "Grace"] {
        eprintln!(
            "\n$ alk-host run {} --data-dir {} -- {visitor}",
            shown(&root, &guest),
            shown(&root, &data)
        );
        run_quiet(
            Command::new(&host)
                .arg("run")
                .arg(&guest)
                .arg("--data-dir")
                .arg(&data)
                .args(["--", visitor]),
        )?;
    }
    eprintln!();
    step("done. Run it again and the counter keeps going.");
    eprintln!(
        "Next: put alk-host on your PATH with `cargo install --path cli --locked` (see the README), \
         then `alk-host run <component.wasm>`."
    );
    Ok(())
}

/// Runs cargo `cmd` quietly with JSON messages: shows every diagnostic
/// except warnings of the vendored crates, and a line of progress now and
/// then. Fails when cargo does.
fn build(cmd: &mut Command, start: Instant) -> Result<()> {
    cmd.args(["--quiet", "--message-format=json-diagnostic-rendered-ansi"])
        .stdout(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut compiled = 0usize;
    let mut shown_at = Instant::now();
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("reading cargo's output: {e}"))?;
        let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
            // Not a message of cargo's (a build script's own output).
            println!("{line}");
            continue;
        };
        match message["reason"].as_str() {
            Some("compiler-artifact") => {
                // Crates built before are reported too, as fresh.
                if message["fresh"].as_bool() == Some(true) {
                    continue;
                }
                compiled += 1;
                if shown_at.elapsed() >= Duration::from_secs(20) {
                    shown_at = Instant::now();
                    eprintln!("[{}]   … {compiled} crates compiled", elapsed(start));
                }
            }
            Some("compiler-message") => {
                let vendored = message["package_id"]
                    .as_str()
                    .is_some_and(|id| id.contains("/vendor/"));
                let level = message["message"]["level"].as_str().unwrap_or_default();
                if vendored && level != "error" {
                    continue;
                }
                if let Some(text) = message["message"]["rendered"].as_str() {
                    eprint!("{text}");
                }
            }
            _ => {}
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the build failed ({status}); its errors are above"))
    }
}

/// `m:ss` since `start`.
fn elapsed(start: Instant) -> String {
    let s = start.elapsed().as_secs();
    format!("{}:{:02}", s / 60, s % 60)
}

/// `path` relative to the repository when it is inside it.
fn shown(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every package with its features, as cargo resolves them for the
    /// packages `selection` names, along `edges`.
    fn features(selection: &[&str], edges: &str) -> std::collections::BTreeSet<String> {
        let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(root())
            .args([
                "tree",
                "--locked",
                "--offline",
                "--prefix",
                "none",
                "-f",
                "{p} [{f}]",
                "-e",
                edges,
            ])
            .args(selection)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim_end_matches(" (*)").to_string())
            .collect()
    }

    /// The feature sets of each package in `lines` (a package may be
    /// built with one set for the target and another for build scripts
    /// and proc-macros).
    fn by_package(
        lines: &std::collections::BTreeSet<String>,
    ) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
        let mut map = std::collections::BTreeMap::<_, std::collections::BTreeSet<_>>::new();
        for l in lines {
            let (package, features) = l.split_once(" [").unwrap_or((l, ""));
            map.entry(package.to_string())
                .or_default()
                .insert(features.to_string());
        }
        map
    }

    #[test]
    fn the_demo_builds_the_host_with_the_features_of_the_test_build() {
        let host_selection = ["-p", "alk-host-cli", "-p", "xtask"];
        // Everything, build scripts and proc-macros too: every package and
        // feature set of the host's build is one the tests build.
        let host = features(&host_selection, "normal,build");
        let tests = features(&["--workspace"], "normal,build,dev");
        let differ: Vec<&String> = host.difference(&tests).collect();
        assert!(
            differ.is_empty(),
            "building alk-host alone would compile these with other features than the tests do; \
             add the missing features to the pins in cli/Cargo.toml: {differ:#?}"
        );
        // The code that runs (no build scripts, no proc-macros): each
        // package has exactly the features the tests give it, not fewer.
        let host = by_package(&features(&host_selection, "normal,no-proc-macro"));
        let tests = by_package(&features(&["--workspace"], "normal,dev,no-proc-macro"));
        let fewer: Vec<String> = host
            .iter()
            .filter(|(p, f)| tests.get(*p) != Some(f))
            .map(|(p, f)| format!("{p}: {f:?} alone, {:?} in the tests", tests.get(p)))
            .collect();
        assert!(
            fewer.is_empty(),
            "building alk-host alone would compile these with fewer features than the tests do; \
             add the missing features to the pins in cli/Cargo.toml: {fewer:#?}"
        );
    }
}
