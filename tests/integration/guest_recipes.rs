//! The README's recipes for Python, JavaScript and C guests, run the way a
//! guest author runs them outside the repository: in a temporary folder,
//! next to a copy of what a checkout gives (`wit/` and `guest/python/lib`),
//! with the README's commands, building the `hello` demo of that language
//! and running it twice on one data directory with the built `alk-host`.
//!
//! The lines that fetch tools from the network are replaced by the
//! toolchains `cargo xtask guests` installed under the target directory:
//! pip installs from the wheels kept in `target/py/wheels` (`PIP_NO_INDEX`,
//! `PIP_FIND_LINKS`), `npm install` becomes a link to
//! `target/js/node_modules`, and zig, `wit-bindgen`, `wasm-tools` and the
//! adapter file come from `target/c`. Every other line runs as written in
//! README.md, which the tests check holds each line.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

/// Where the README's commands name the checkout.
const CHECKOUT: &str = "path/to/alk";

/// One recipe: the README's lines, in the order they run.
struct Recipe {
    /// The language, for messages.
    name: &'static str,
    /// The demo's source in the repository, copied into the folder.
    source: &'static str,
    /// Lines that install tools; each is replaced by a toolchain of the
    /// target directory (see [`Toolchain`]).
    install: &'static [&'static str],
    /// Lines run as they are (with [`CHECKOUT`] the copy's path).
    run: &'static [&'static str],
}

const PYTHON: Recipe = Recipe {
    name: "Python",
    source: "guest/python/hello/app.py",
    install: &[],
    run: &[
        "python3 -m venv .venv",
        ". .venv/bin/activate",
        "pip install componentize-py==0.25.1 path/to/alk/guest/python/lib",
        "componentize-py -d \"$(python -m alk_store.wit)\" -w command componentize app -o hello-py.wasm",
        "alk-host run hello-py.wasm --data-dir demo-data -- Ada",
        "alk-host run hello-py.wasm --data-dir demo-data -- Grace",
    ],
};

const JAVASCRIPT: Recipe = Recipe {
    name: "JavaScript",
    source: "guest/js/hello/app.js",
    install: &[
        "npm install @bytecodealliance/componentize-js@0.23.0 @bytecodealliance/preview2-shim@0.25.0",
    ],
    run: &[
        "cp -r path/to/alk/wit .",
        "npx componentize-js app.js --wit wit --world-name kv-command -d http fetch-event -o hello-js.wasm",
        "alk-host run hello-js.wasm --data-dir demo-data",
        "alk-host run hello-js.wasm --data-dir demo-data",
    ],
};

const C: Recipe = Recipe {
    name: "C",
    source: "guest/c/hello/hello.c",
    install: &[
        "python3 -m venv .venv",
        ". .venv/bin/activate",
        "pip install ziglang==0.15.2",
        "cargo install --locked wit-bindgen-cli@0.60.0 wasm-tools@1.254.2",
        "curl -LO https://github.com/bytecodealliance/wasmtime/releases/download/v48.0.8/wasi_snapshot_preview1.command.wasm",
    ],
    run: &[
        "cp -r path/to/alk/wit .",
        "wit-bindgen c --world kv-imports wit",
        "python -m ziglang cc --target=wasm32-wasi -Os -s hello.c kv_imports.c kv_imports_component_type.o -o hello.core.wasm",
        "wasm-tools component new hello.core.wasm --adapt wasi_snapshot_preview1.command.wasm -o hello-c.wasm",
        "alk-host run hello-c.wasm --data-dir demo-data -- Ada",
        "alk-host run hello-c.wasm --data-dir demo-data -- Grace",
    ],
};

/// The target directory the toolchains were installed into, as xtask
/// finds it: `CARGO_TARGET_DIR`, else `target/` of the repository.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|d| if d.is_absolute() { d } else { root().join(d) })
        .unwrap_or_else(|| root().join("target"))
}

/// `path` of the target directory; fails with what to run when missing.
fn installed(path: &str) -> PathBuf {
    let p = target_dir().join(path);
    assert!(
        p.exists(),
        "{} is missing: install the guest toolchains with `cargo xtask guests` (or run `cargo xtask test`)",
        p.display()
    );
    p
}

/// How a recipe's install lines are stood in for, and the environment its
/// lines run in.
enum Toolchain {
    /// pip installs offline from the wheels xtask keeps.
    Python,
    /// `node_modules` is the toolchain xtask installed.
    JavaScript,
    /// zig, `wit-bindgen` and `wasm-tools` on `PATH`, the adapter copied.
    C,
}

/// What a user has after cloning the repository: `wit/` and the Python
/// package (with its link to `wit/`), copied into `dir/alk`.
fn checkout_copy(dir: &Path) -> PathBuf {
    let alk = dir.join("alk");
    std::fs::create_dir_all(alk.join("guest/python")).unwrap();
    for (from, to) in [("wit", "."), ("guest/python/lib", "guest/python")] {
        // -a keeps the package's symbolic link to wit/ as a link.
        let status = Command::new("cp")
            .arg("-a")
            .arg(root().join(from))
            .arg(alk.join(to))
            .status()
            .expect("start cp");
        assert!(status.success(), "cp -a {from} failed");
    }
    alk
}

/// Runs `recipe` in a fresh folder outside the repository; the folder and
/// what the lines printed.
fn run_recipe(recipe: &Recipe, toolchain: Toolchain) -> (tempfile::TempDir, String) {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for line in recipe.install.iter().chain(recipe.run) {
        assert!(
            readme.contains(line),
            "README.md's {} recipe no longer has the line `{line}`: update this test with it",
            recipe.name
        );
    }

    let dir = tempfile::tempdir().unwrap();
    assert!(
        !dir.path().starts_with(root()),
        "the temporary directory must be outside the repository"
    );
    let alk = checkout_copy(dir.path());
    let app = dir.path().join("app");
    std::fs::create_dir(&app).unwrap();
    let source = root().join(recipe.source);
    std::fs::copy(&source, app.join(source.file_name().unwrap())).unwrap();

    let host = PathBuf::from(env!("CARGO_BIN_EXE_alk-host"));
    let mut path = vec![host.parent().unwrap().to_path_buf()];
    let mut cmd = Command::new("bash");
    match toolchain {
        Toolchain::Python => {
            let wheels = installed("py/wheels");
            for wheel in ["componentize_py-0.25.1-", "setuptools-"] {
                assert!(
                    std::fs::read_dir(&wheels)
                        .unwrap()
                        .flatten()
                        .any(|e| e.file_name().to_string_lossy().starts_with(wheel)),
                    "no {wheel}*.whl in {}: install the guest toolchains with `cargo xtask guests`",
                    wheels.display()
                );
            }
            cmd.env("PIP_NO_INDEX", "1")
                .env("PIP_FIND_LINKS", &wheels)
                .env("PIP_DISABLE_PIP_VERSION_CHECK", "1");
        }
        Toolchain::JavaScript => {
            let modules = installed("js/node_modules");
            installed("js/node_modules/.bin/componentize-js");
            std::os::unix::fs::symlink(&modules, app.join("node_modules")).unwrap();
            cmd.env("npm_config_offline", "true")
                .env("npm_config_update_notifier", "false");
        }
        Toolchain::C => {
            path.push(installed("c/tools/bin"));
            installed("c/tools/bin/wit-bindgen");
            installed("c/tools/bin/wasm-tools");
            path.push(installed("c/venv/bin"));
            let adapter = installed("c/wasi_snapshot_preview1.command.wasm");
            std::fs::copy(&adapter, app.join(adapter.file_name().unwrap())).unwrap();
            // zig's caches of the toolchain: wasi-libc is built already.
            let cache = target_dir().join("c/zig-cache");
            cmd.env("ZIG_GLOBAL_CACHE_DIR", &cache)
                .env("ZIG_LOCAL_CACHE_DIR", &cache);
        }
    }
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));

    let checkout = alk.to_str().unwrap();
    let script = recipe
        .run
        .iter()
        .map(|line| line.replace(CHECKOUT, checkout))
        .collect::<Vec<_>>()
        .join("\n");
    let out = cmd
        .args(["-e", "-x", "-c", &script])
        .current_dir(&app)
        .env("PATH", std::env::join_paths(path).unwrap())
        .env("ALK_CACHE_DIR", cache_dir())
        .env_remove("VIRTUAL_ENV")
        .env_remove("PYTHONPATH")
        .env_remove("PYTHONHOME")
        .env_remove("RUST_LOG")
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("start bash");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "the {} recipe failed in {}:\n{stdout}\n{}",
        recipe.name,
        app.display(),
        text(&out.stderr)
    );
    (dir, stdout)
}

/// The demo's two runs: the first is the first, the second counts 2.
fn assert_two_runs(recipe: &Recipe, said: &str) {
    let first = said.find("This is the first run");
    let second = said.find("This app has now run 2 times.");
    assert!(
        first.is_some() && second.is_some() && first < second,
        "the {} demo did not count its two runs:\n{said}",
        recipe.name
    );
}

/// The files under `dir`, relative to it, with their bytes.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                let bytes = std::fs::read(&p).unwrap();
                found.push((p.strip_prefix(dir).unwrap().to_path_buf(), bytes));
            }
        }
    }
    found.sort();
    found
}

#[test]
fn python_recipe_builds_and_runs_outside_the_checkout() {
    let (dir, said) = run_recipe(&PYTHON, Toolchain::Python);
    assert_two_runs(&PYTHON, &said);
    assert!(said.contains("Hello, Ada!"), "{said}");
    assert!(said.contains("visitors: Grace, Ada"), "{said}");

    // The installed package carries the WIT itself: real files, the same
    // as wit/ of the repository.
    let venv = dir.path().join("app/.venv");
    let out = Command::new(venv.join("bin/python"))
        .args(["-m", "alk_store.wit"])
        .current_dir(dir.path())
        .env_remove("PYTHONPATH")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let wit = PathBuf::from(text(&out.stdout).trim());
    assert!(
        wit.starts_with(venv.join("lib")) && wit.ends_with("site-packages/alk_store/wit-files"),
        "python -m alk_store.wit printed {}, not a folder of the installed package",
        wit.display()
    );
    assert!(
        !std::fs::symlink_metadata(&wit).unwrap().is_symlink(),
        "{} is a link, not installed files",
        wit.display()
    );
    let carried = files(&wit);
    let repo = files(&root().join("wit"));
    assert!(
        carried.iter().any(|(p, _)| p.starts_with("deps")),
        "no wit/deps in {}",
        wit.display()
    );
    assert_eq!(
        carried.iter().map(|(p, _)| p).collect::<Vec<_>>(),
        repo.iter().map(|(p, _)| p).collect::<Vec<_>>(),
        "the installed WIT has other files than wit/"
    );
    assert!(carried == repo, "the installed WIT differs from wit/");
}

#[test]
fn javascript_recipe_builds_and_runs_outside_the_checkout() {
    let (_dir, said) = run_recipe(&JAVASCRIPT, Toolchain::JavaScript);
    assert_two_runs(&JAVASCRIPT, &said);
}

#[test]
fn c_recipe_builds_and_runs_outside_the_checkout() {
    let (_dir, said) = run_recipe(&C, Toolchain::C);
    assert_two_runs(&C, &said);
    assert!(said.contains("Hello, Ada!"), "{said}");
    assert!(said.contains("visitors: Grace, Ada"), "{said}");
}
