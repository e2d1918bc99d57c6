//! Contract guests, by interface and language, through the library and the
//! CLI; and the check that every guest the project builds is run by a test.
//!
//! `guest/contract/<interface>/README.md` holds the interface's case list
//! (the first column of its table); `guest/contract/<interface>/<language>/`
//! holds one guest per language. Each test runs one guest and compares the
//! set of case names it printed with the list.

use std::collections::BTreeSet;
use std::path::PathBuf;

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

fn contract_dir() -> PathBuf {
    root().join("guest/contract")
}

/// The case list of `interface`: the first column of its README's table.
fn case_list(interface: &str) -> BTreeSet<String> {
    let readme = contract_dir().join(interface).join("README.md");
    let text =
        std::fs::read_to_string(&readme).unwrap_or_else(|e| panic!("{}: {e}", readme.display()));
    let cases: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split(" |").next())
        .map(str::trim)
        .filter(|c| *c != "case" && !c.is_empty() && !c.starts_with('-'))
        .map(str::to_string)
        .collect();
    assert!(!cases.is_empty(), "{} lists no cases", readme.display());
    cases
}

/// The guest built from `guest/contract/<interface>/<language>`.
fn guest_name(interface: &str, language: &str) -> String {
    match language {
        "rust" => format!("{interface}-contract"),
        "python" => format!("{interface}-contract-py"),
        "js" => format!("{interface}-contract-js"),
        "c" => format!("{interface}-contract-c"),
        other => panic!("no build recipe for {other} contract guests"),
    }
}

/// Asserts that `printed` is exactly the case list, naming the difference.
fn assert_cases(interface: &str, who: &str, printed: Vec<String>) {
    let list = case_list(interface);
    let printed_set: BTreeSet<String> = printed.iter().cloned().collect();
    assert_eq!(
        printed.len(),
        printed_set.len(),
        "{who} printed a case twice"
    );
    let missing: Vec<_> = list.difference(&printed_set).collect();
    let unlisted: Vec<_> = printed_set.difference(&list).collect();
    assert!(
        missing.is_empty() && unlisted.is_empty(),
        "{who}: cases of guest/contract/{interface}/README.md it did not run: {missing:?}; cases it ran that the list lacks: {unlisted:?}"
    );
}

/// Runs the contract guest of `interface` in `language` through the library.
fn through_library(interface: &str, language: &str) {
    let name = guest_name(interface, language);
    let dir = tempfile::tempdir().unwrap();
    let out = run_lib(&name, ctx(dir.path()), &[]);
    let printed = passed_cases(
        &text(&out.stdout),
        &text(&out.stderr),
        out.exit_code(),
        &name,
    );
    assert_cases(interface, &name, printed);
}

/// Runs the contract guest of `interface` in `language` through the
/// library on the in-memory engine: the rules live in the core, so the
/// same cases pass on an engine with no files at all.
fn on_the_memory_engine(interface: &str, language: &str) {
    let name = guest_name(interface, language);
    let engine = std::sync::Arc::new(alk_store::memory::MemoryEngine::new());
    let ctx = alk_host::AlkCtx::builder().engine(engine).build();
    let out = run_lib(&name, ctx, &[]);
    let printed = passed_cases(
        &text(&out.stdout),
        &text(&out.stderr),
        out.exit_code(),
        &name,
    );
    assert_cases(interface, &name, printed);
}

/// Runs the contract guest of `interface` in `language` through the CLI on
/// `store`: a data directory, where the run leaves a real store (or wake
/// file) behind in `store_dir`; or a schema of its own on the Postgres
/// engine — unchanged guests, the same cases.
fn through_cli(interface: &str, language: &str, store: Store, store_dir: &str) {
    let name = guest_name(interface, language);
    let out = run_cli(&name, &store, &[], &[]);
    let printed = passed_cases(
        &text(&out.stdout),
        &text(&out.stderr),
        out.status.code().unwrap_or(-1),
        &name,
    );
    assert_cases(interface, &name, printed);
    if let Some(dir) = store.path() {
        assert!(
            std::fs::read_dir(dir.join(store_dir)).unwrap().count() > 0,
            "{name} left nothing in {store_dir}/"
        );
    }
}

/// One test per (interface, language, way in): row `name` becomes the
/// tests `name::through_library`, `name::on_the_memory_engine`,
/// `name::through_cli` (files) and `name::on_postgres`. The ways in, and so
/// the engines, are named here once; the rows name only guests.
macro_rules! contracts {
    ($( $iface:literal $lang:literal $store:literal => $name:ident; )*) => {
        $(
            mod $name {
                use super::{Store, on_the_memory_engine as memory, through_cli as cli, through_library as library};

                #[test]
                fn through_library() {
                    library($iface, $lang);
                }

                #[test]
                fn on_the_memory_engine() {
                    memory($iface, $lang);
                }

                #[test]
                fn through_cli() {
                    cli($iface, $lang, Store::dir(), $store);
                }

                #[test]
                fn on_postgres() {
                    cli($iface, $lang, Store::postgres(), $store);
                }
            }
        )*

        const TESTED: &[(&str, &str)] = &[$(($iface, $lang)),*];
    };
}

contracts! {
    "kv" "rust" "kv" => kv_rust;
    "kv" "python" "kv" => kv_python;
    "kv" "js" "kv" => kv_js;
    "kv" "c" "kv" => kv_c;
    "queue" "rust" "queue" => queue_rust;
    "queue" "python" "queue" => queue_python;
    "stream" "rust" "stream" => stream_rust;
    "stream" "python" "stream" => stream_python;
    "lock" "rust" "lock" => lock_rust;
    "lock" "python" "lock" => lock_python;
    "notify" "rust" "wake" => notify_rust;
    "notify" "python" "wake" => notify_python;
    "tx" "rust" "stream" => tx_rust;
    "tx" "python" "stream" => tx_python;
}

/// Every guest folder under `guest/contract` has its tests above, and
/// every test above has its folder.
#[test]
fn every_contract_guest_is_tested() {
    let mut on_disk = BTreeSet::new();
    for iface in std::fs::read_dir(contract_dir()).unwrap() {
        let iface = iface.unwrap().path();
        if !iface.is_dir() {
            continue;
        }
        let name = iface.file_name().unwrap().to_string_lossy().into_owned();
        case_list(&name);
        for lang in std::fs::read_dir(&iface).unwrap() {
            let lang = lang.unwrap().path();
            if lang.is_dir() {
                on_disk.insert((
                    name.clone(),
                    lang.file_name().unwrap().to_string_lossy().into_owned(),
                ));
            }
        }
    }
    let tested: BTreeSet<(String, String)> = TESTED
        .iter()
        .map(|(i, l)| (i.to_string(), l.to_string()))
        .collect();
    let untested: Vec<_> = on_disk.difference(&tested).collect();
    let gone: Vec<_> = tested.difference(&on_disk).collect();
    assert!(
        untested.is_empty(),
        "contract guests no test runs (add them to `contracts!` in tests/integration/contract.rs): {untested:?}"
    );
    assert!(
        gone.is_empty(),
        "tests of contract guests that do not exist: {gone:?}"
    );
}

/// The guests of `guest/` (Rust crates with a `main`, Python folders with
/// an `app.py`, C folders, JavaScript folders with an `app.js`) as built
/// names.
fn other_guests() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(root().join("guest")).unwrap() {
        let dir = entry.unwrap().path();
        if dir.join("src/main.rs").exists() {
            let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
            let name = manifest
                .lines()
                .find_map(|l| l.trim().strip_prefix("name = "))
                .expect("a package name")
                .trim_matches('"')
                .to_string();
            names.insert(name);
        }
    }
    for entry in std::fs::read_dir(root().join("guest/python")).unwrap() {
        let dir = entry.unwrap().path();
        if dir.join("app.py").exists() {
            names.insert(format!("{}-py", dir.file_name().unwrap().to_string_lossy()));
        }
    }
    // C guests: every folder of guest/c, built as `<folder>-c`.
    if let Ok(entries) = std::fs::read_dir(root().join("guest/c")) {
        for entry in entries {
            let dir = entry.unwrap().path();
            if dir.is_dir() {
                names.insert(format!("{}-c", dir.file_name().unwrap().to_string_lossy()));
            }
        }
    }
    // JavaScript guests: every folder of guest/js with an app.js, built as
    // `<folder>-js`.
    if let Ok(entries) = std::fs::read_dir(root().join("guest/js")) {
        for entry in entries {
            let dir = entry.unwrap().path();
            if dir.join("app.js").exists() {
                names.insert(format!("{}-js", dir.file_name().unwrap().to_string_lossy()));
            }
        }
    }
    names
}

/// Every other guest is named by some integration test: a guest that no
/// test runs is a failure, not dead weight.
#[test]
fn every_guest_is_run_by_a_test() {
    let mut sources = String::new();
    for dir in ["tests/integration", "tests/shared"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                sources.push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let unrun: Vec<String> = other_guests()
        .into_iter()
        .filter(|g| !sources.contains(&format!("\"{g}\"")))
        .collect();
    assert!(
        unrun.is_empty(),
        "guests that no test runs: {unrun:?}; run each from a test under tests/integration"
    );
}

/// The guests only the benchmarks use still run: the start-up baselines
/// print `ready`, and `bench-guest` runs a few of each kind of operation.
#[test]
fn benchmark_guests_run() {
    for name in ["startup", "startup-py"] {
        let dir = tempfile::tempdir().unwrap();
        let out = run_lib(name, ctx(dir.path()), &[]);
        assert_eq!(out.exit_code(), 0, "{name}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout).trim(), "ready", "{name}");
    }
    let dir = tempfile::tempdir().unwrap();
    for op in ["kv-set", "queue-claim-8-40", "stream-publish", "lock-cycle"] {
        let out = run_lib("bench-guest", ctx(dir.path()), &[op, "16", "t"]);
        assert_eq!(
            out.exit_code(),
            0,
            "bench-guest {op}: {}",
            text(&out.stderr)
        );
        let line = text(&out.stdout);
        let count: Vec<&str> = line.split_whitespace().take(2).collect();
        assert_eq!(count, ["ops", "16"], "bench-guest {op}: {line}");
    }
}
