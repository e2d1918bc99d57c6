//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, OnceLock};

use alk_host::{AlkCtx, RunOptions, RunOutcome, Runner};
use wasmtime::component::Component;

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The path of a built guest. Panics with the command to run when missing.
pub fn guest(name: &str) -> PathBuf {
    let dir = std::env::var_os("ALK_GUESTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/guests"));
    let path = dir.join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: build the guests with `cargo xtask guests` (or run `cargo xtask test`)",
        path.display()
    );
    path
}

/// One runner and one compiled copy of each guest per test binary.
pub fn runner() -> &'static Runner {
    static RUNNER: OnceLock<Runner> = OnceLock::new();
    RUNNER.get_or_init(|| Runner::with_cache(Some(&cache_dir())).expect("runner"))
}

/// The compilation cache the tests share (the Python guests compile once).
pub fn cache_dir() -> PathBuf {
    root().join("target/test-cache")
}

/// A compiled guest, cached across tests.
pub fn component(name: &str) -> Component {
    static CACHE: OnceLock<std::sync::Mutex<std::collections::HashMap<String, Component>>> =
        OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(c) = cache.lock().unwrap().get(name) {
        return c.clone();
    }
    let c = runner().load(&guest(name)).expect("compile guest");
    cache.lock().unwrap().insert(name.to_string(), c.clone());
    c
}

/// Runs a guest through the library with output captured.
pub fn run_lib(name: &str, ctx: AlkCtx, args: &[&str]) -> RunOutcome {
    run_lib_with(
        name,
        ctx,
        RunOptions {
            args: args.iter().map(|s| s.to_string()).collect(),
            capture_output: true,
            ..Default::default()
        },
    )
}

/// Runs a guest through the library with the given options.
pub fn run_lib_with(name: &str, ctx: AlkCtx, opts: RunOptions) -> RunOutcome {
    let component = component(name);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(runner().run(&component, name, ctx, &opts))
        .expect("run guest")
}

/// A context on `dir`.
pub fn ctx(dir: &Path) -> AlkCtx {
    AlkCtx::builder().data_dir(dir).build()
}

/// A context on `dir` with an injected clock.
pub fn ctx_with_clock(dir: &Path, clock: Arc<dyn alk_host::Clock>) -> AlkCtx {
    AlkCtx::builder().data_dir(dir).clock(clock).build()
}

/// The `alk-host` binary.
pub fn alk_host() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_alk-host"));
    // The host's own log level and panic reports, not the ones of whoever
    // runs the tests.
    cmd.env("ALK_CACHE_DIR", cache_dir())
        .env_remove("RUST_LOG")
        .env_remove("RUST_BACKTRACE");
    cmd
}

/// Where a test's hosts keep their stores: a fresh data directory, or a
/// fresh schema on the test PostgreSQL server (`ALK_TEST_POSTGRES`, or a
/// throwaway server started for this test binary).
pub enum Store {
    /// The file engine's data directory.
    Dir(tempfile::TempDir),
    /// The URL (password and schema included) of the database engine.
    Postgres(String),
}

impl Store {
    /// A fresh data directory.
    pub fn dir() -> Store {
        Store::Dir(tempfile::tempdir().unwrap())
    }

    /// A schema of its own on the test server.
    pub fn postgres() -> Store {
        Store::Postgres(postgres_url())
    }

    /// The data directory, on the file engine.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Store::Dir(d) => Some(d.path()),
            Store::Postgres(_) => None,
        }
    }

    /// The engine, for runs through the library.
    pub fn ctx(&self) -> AlkCtx {
        match self {
            Store::Dir(d) => ctx(d.path()),
            Store::Postgres(url) => {
                // The engine's wake connection lives on a runtime that
                // outlasts the run.
                static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
                let runtime = RUNTIME.get_or_init(|| {
                    tokio::runtime::Builder::new_multi_thread()
                        .worker_threads(1)
                        .enable_all()
                        .build()
                        .unwrap()
                });
                let engine = runtime
                    .block_on(alk_host::PostgresEngine::connect_url(url))
                    .unwrap_or_else(|e| panic!("connect to the test server: {e}"));
                AlkCtx::builder().engine(Arc::new(engine)).build()
            }
        }
    }
}

/// The URL of a schema no other test uses on the test server.
pub fn postgres_url() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let base = alk_pg_cluster::test_url();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let schema = format!("it_{}_{nanos}_{n}", std::process::id());
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}schema={schema}")
}

/// What tells `alk-host run` where the stores are.
pub trait StoreArgs {
    /// `--data-dir <dir>` or `--store <url>`.
    fn store_args(&self) -> Vec<std::ffi::OsString>;
}

impl StoreArgs for Path {
    fn store_args(&self) -> Vec<std::ffi::OsString> {
        vec!["--data-dir".into(), self.into()]
    }
}

impl StoreArgs for PathBuf {
    fn store_args(&self) -> Vec<std::ffi::OsString> {
        self.as_path().store_args()
    }
}

impl StoreArgs for Store {
    fn store_args(&self) -> Vec<std::ffi::OsString> {
        match self {
            Store::Dir(d) => d.path().store_args(),
            Store::Postgres(url) => vec!["--store".into(), url.into()],
        }
    }
}

/// One test per engine for each test body that takes a [`Store`]: body
/// `b` becomes the tests `b::on_files` and `b::on_postgres`. The engines
/// are named here and nowhere else; a new engine is one more line.
macro_rules! on_every_engine {
    ($($body:ident;)*) => {
        $(
            mod $body {
                #[test]
                fn on_files() {
                    super::$body(&$crate::common::Store::dir());
                }

                #[test]
                fn on_postgres() {
                    super::$body(&$crate::common::Store::postgres());
                }
            }
        )*
    };
}
pub(crate) use on_every_engine;

/// Runs `alk-host run <guest> --data-dir <dir> [extra…] -- <args…>` (or
/// `--store <url>`).
pub fn run_cli(
    name: &str,
    dir: &(impl StoreArgs + ?Sized),
    extra: &[&str],
    args: &[&str],
) -> Output {
    let mut cmd = alk_host();
    cmd.arg("run")
        .arg(guest(name))
        .args(dir.store_args())
        .args(extra)
        .arg("--")
        .args(args);
    cmd.output().expect("start alk-host")
}

/// Text of captured bytes.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The Python interpreter used for stock-SQLite checks.
pub fn python() -> String {
    std::env::var("ALK_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// What stock SQLite sees: `store <file>` or `ddl <format doc>`.
pub fn sqlite_schema(mode: &str, path: &Path) -> serde_json::Value {
    let out = Command::new(python())
        .arg(root().join("tests/tools/sqlite_schema.py"))
        .arg(mode)
        .arg(path)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "sqlite_schema.py failed: {}",
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// A SHA-256-free fingerprint good enough to prove a file did not change:
/// its full bytes.
pub fn file_bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Starts `alk-host run <guest> --data-dir <dir> -- <args…>` with stdout
/// piped.
pub fn spawn_guest(
    dir: &(impl StoreArgs + ?Sized),
    guest_name: &str,
    args: &[&str],
) -> std::process::Child {
    alk_host()
        .arg("run")
        .arg(guest(guest_name))
        .args(dir.store_args())
        .arg("--")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn alk-host")
}

/// Waits for a spawned guest; its stdout. Fails the test, showing the end
/// of its output, when it did not exit 0.
pub fn finish(child: std::process::Child, who: &str) -> String {
    let out = child.wait_with_output().unwrap();
    let stdout = text(&out.stdout);
    let tail: Vec<&str> = stdout.lines().rev().take(5).collect();
    assert!(
        out.status.success(),
        "{who} failed ({}): {}\n{}",
        out.status,
        tail.join("\n"),
        text(&out.stderr)
    );
    stdout
}

/// A child process, killed and reaped when dropped: a failed assertion
/// must not leave it running, holding a port, a mount or a store.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Killed {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for Killed {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

/// A small xorshift generator for the random points of kill and power-cut
/// loops; its seed comes from the environment variable `seed_var` (to
/// replay a run) or the clock.
pub struct Rng(u64);

impl Rng {
    /// A generator and its seed.
    pub fn new(seed_var: &str) -> (Rng, u64) {
        let seed = std::env::var(seed_var)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
                    | 1
            });
        (Rng(seed), seed)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }

    /// A fraction in `[lo, hi)`.
    pub fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + self.below(1_000_000) as f64 / 1_000_000.0 * (hi - lo)
    }
}

/// Every store file (`*.sqlite`) under `dir`, sorted.
pub fn sqlite_store_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "sqlite") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}
