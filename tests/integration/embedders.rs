//! What an embedder outside this repository gets: a project that depends on
//! `alk-host` by path resolves exactly one `turso_core`, the patched copy in
//! `vendor/turso_core`, without copying any `[patch]` section. Only cargo's
//! resolver runs (`cargo tree`, offline, on a copy of the workspace's lock
//! file); nothing is built and nothing is written into the repository.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

/// A project in `dir` that depends on `<repo>/host` by path, with the
/// workspace's `Cargo.lock` (same versions, resolvable offline).
fn outside_project(dir: &Path) -> PathBuf {
    outside_project_with(dir, "embedder", "")
}

/// [`outside_project`] named `name`, with `extra` added to the dependency
/// on `alk-host` (its features).
fn outside_project_with(dir: &Path, name: &str, extra: &str) -> PathBuf {
    let project = dir.join(name);
    std::fs::create_dir_all(project.join("src")).unwrap();
    let host = root().join("host");
    std::fs::write(
        project.join("Cargo.toml"),
        format!(
            "[package]\nname = \"{name}\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
             [dependencies]\nalk-host = {{ path = {host:?}{extra} }}\n\n\
             # Its own workspace, whatever directory the temporary one is in.\n[workspace]\n",
            host = host.display().to_string(),
        ),
    )
    .unwrap();
    std::fs::write(project.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::copy(root().join("Cargo.lock"), project.join("Cargo.lock")).unwrap();
    project
}

/// `cargo <args>` in `project`, offline, with its target directory in `dir`;
/// its stdout. Panics with stderr on failure.
fn cargo_in(project: &Path, dir: &Path, args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string());
    let out = Command::new(cargo)
        .args(args)
        .arg("--offline")
        .current_dir(project)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env_remove("CARGO_MANIFEST_DIR")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo {args:?} failed in the outside project:\n{}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The packages named `turso_core` in `cargo tree` output (one line each).
fn turso_cores(tree: &str) -> Vec<String> {
    let mut found: Vec<String> = tree
        .lines()
        .map(|l| l.trim_start_matches(|c: char| !c.is_alphanumeric()))
        .filter(|l| l.starts_with("turso_core v"))
        .map(|l| l.trim_end_matches(" (*)").to_string())
        .collect();
    found.sort();
    found.dedup();
    found
}

#[test]
fn an_outside_project_gets_exactly_the_vendored_turso_core() {
    let dir = tempfile::tempdir().unwrap();
    assert!(
        !dir.path().starts_with(root()),
        "the temporary directory must be outside the repository"
    );
    let project = outside_project(dir.path());
    let vendored = root().join("vendor/turso_core");
    let expected = format!("turso_core v0.9.0-pre.2 ({})", vendored.display());

    for edges in [&[][..], &["-e", "normal"][..]] {
        let mut args = vec!["tree", "-i", "turso_core"];
        args.extend_from_slice(edges);
        let tree = cargo_in(&project, dir.path(), &args);
        eprintln!("cargo {}:\n{tree}", args.join(" "));
        assert_eq!(
            turso_cores(&tree),
            std::slice::from_ref(&expected),
            "cargo {args:?} in the outside project"
        );
        assert!(
            tree.contains("alk-host v"),
            "alk-host depends on turso_core:\n{tree}"
        );
    }

    // The whole graph: one turso_core, the vendored one.
    let tree = cargo_in(&project, dir.path(), &["tree", "-e", "normal"]);
    assert_eq!(turso_cores(&tree), [expected]);

    // The resolved lock file covers every platform: one turso_core package,
    // from a path (a registry copy would carry a `source`).
    let lock = std::fs::read_to_string(project.join("Cargo.lock")).unwrap();
    let entries: Vec<&str> = lock
        .split("[[package]]")
        .filter(|p| p.contains("\nname = \"turso_core\"\n"))
        .collect();
    assert_eq!(
        entries.len(),
        1,
        "turso_core packages in the lock: {entries:?}"
    );
    assert!(
        !entries[0].contains("source = "),
        "turso_core does not come from a path: {}",
        entries[0]
    );
    let entry_of = |name: &str| {
        lock.split("[[package]]")
            .find(|p| p.contains(&format!("\nname = \"{name}\"\n")))
    };
    for name in ["turso", "turso_sdk_kit"] {
        let entry = entry_of(name).unwrap_or_else(|| panic!("{name} is not in the lock"));
        assert!(
            !entry.contains("source = "),
            "{name} must be the vendored copy (it depends on turso_core): {entry}"
        );
    }
    // What the vendored crates' trimming takes out (vendor/README.md): the
    // sync engine, optional in `turso` (its `sync` feature, which alk does
    // not enable), what only it needs, and `turso_sdk_kit`'s unused build
    // dependency. An embedder neither locks nor builds them.
    for name in [
        "turso_sync_sdk_kit",
        "turso_sync_engine",
        "prost",
        "bindgen",
    ] {
        assert!(
            entry_of(name).is_none(),
            "{name} is in the lock: the vendored turso crates no longer need it"
        );
    }
}

/// The packages of a `cargo tree --prefix none` listing, by name.
fn packages(tree: &str) -> std::collections::BTreeSet<String> {
    tree.lines()
        .filter_map(|l| l.split(' ').next())
        .map(str::to_string)
        .collect()
}

/// The engines are cargo features of `alk-host`: an embedder compiles only
/// the ones it asks for. By default it gets the file engine and no
/// PostgreSQL client; with `postgres` alone, no turso.
#[test]
fn an_outside_project_compiles_only_the_engines_it_asks_for() {
    let dir = tempfile::tempdir().unwrap();
    for (name, extra, postgres, turso) in [
        ("default", "", false, true),
        ("both", ", features = [\"postgres\"]", true, true),
        (
            "postgres-only",
            ", default-features = false, features = [\"postgres\"]",
            true,
            false,
        ),
        ("none", ", default-features = false", false, false),
    ] {
        let project = outside_project_with(dir.path(), name, extra);
        let tree = cargo_in(
            &project,
            dir.path(),
            &["tree", "-e", "normal", "--prefix", "none"],
        );
        let found = packages(&tree);
        for (package, wanted) in [
            ("tokio-postgres", postgres),
            ("alk-store-postgres", postgres),
            ("turso_core", turso),
            ("alk-store-turso", turso),
        ] {
            assert_eq!(
                found.contains(package),
                wanted,
                "alk-host with `{extra}`: {package} in the tree is {}, wanted {wanted}:\n{tree}",
                found.contains(package)
            );
        }
        assert!(found.contains("alk-store"), "{tree}");
    }
}
