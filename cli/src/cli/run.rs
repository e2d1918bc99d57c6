//! `alk-host run`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use std::sync::Arc;

use alk_host::turso::{NewKv, NewQueues};
use alk_host::{
    AlkCtx, AlkError, Durability, PostgresEngine, PostgresOptions, RunOptions, RunStatus, Runner,
};

use super::CacheArgs;

/// Exit status when the host itself fails (bad component, unusable flag).
pub(super) const HOST_FAILURE: u8 = 2;

/// Run a command component with the alk capabilities linked.
///
/// The process exits with the guest's exit status: 0 when it succeeds, 1
/// when it fails (WASI 0.2 `exit` carries success or failure, not a number).
/// A guest that traps makes the host print the trap and exit with 134. When the host cannot run the guest
/// at all, it prints one line starting with `alk-host: error:` and exits
/// with 2.
#[derive(Debug, clap::Args)]
pub struct RunCommand {
    /// The component to run (`.wasm`).
    component: PathBuf,

    /// Where stores live, on this machine [default: .alk]. Created on first
    /// use of a capability, not before.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,

    /// Keep the stores in a PostgreSQL database instead, shared by hosts on
    /// any number of machines: `postgres://user:password@host:port/db`, with
    /// `?schema=NAME` (default `alk`) and `?pool_size=N` (default 8)
    /// [default: $ALK_STORE when --data-dir is not given].
    #[arg(long, value_name = "URL", conflicts_with = "data_dir")]
    store: Option<String>,

    /// Set an environment variable for the guest (repeatable). The host's
    /// own environment is not passed on.
    #[arg(long = "env", value_name = "K=V", value_parser = parse_env)]
    env: Vec<(String, String)>,

    /// Give the guest a host directory (repeatable). `HOST` alone is mounted
    /// at the same path in the guest; `HOST::GUEST` mounts it at `GUEST`.
    #[arg(long = "dir", value_name = "HOST[::GUEST]", value_parser = parse_dir)]
    dirs: Vec<(PathBuf, String)>,

    /// Most linear memory the guest may use, in MiB (1 to 65536); growing
    /// past it traps.
    #[arg(long, value_name = "MIB", allow_negative_numbers = true,
          value_parser = clap::value_parser!(u32).range(1..=MAX_MEMORY_MIB))]
    max_memory_mib: Option<u32>,

    /// Stop the guest (as a trap) after this many seconds of wall time,
    /// whatever it is doing (0.001 to 31536000, a year; fractions allowed).
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true, value_parser = parse_timeout)]
    timeout: Option<Duration>,

    /// When a write counts as done. `full`: synced to disk before the call
    /// returns; nothing acknowledged is lost, even on power failure.
    /// `relaxed`: written to the operating system; survives the process
    /// crashing or being killed, but the last writes before a power failure
    /// or kernel crash may be lost (the store stays consistent). Several
    /// times faster for small writes. On Postgres, `relaxed` turns the
    /// sessions' `synchronous_commit` off, with the same meaning for the
    /// database server.
    #[arg(long, value_enum, default_value = "full")]
    durability: DurabilityArg,

    /// The format of queue files this host creates. `v2`: every job option
    /// (priorities, delays, retries, dead letters, groups). `v1`: plain
    /// messages only, for a data directory shared with a program that reads
    /// only `localqueue.v1`. Existing queue files keep their format; move a
    /// v1 queue to v2 with `alk-host migrate queue NAME`.
    #[arg(long, value_enum, default_value = "v2", conflicts_with = "store")]
    new_queues: NewQueuesArg,

    /// The format of kv bucket files this host creates. `v1` (the
    /// default): the data directory layout's original format. `v2`: a
    /// version per put, what compare-and-swap compares, and the format the
    /// other program sharing the layout now reads. Existing bucket files
    /// keep their format; move a v1 bucket to v2 with
    /// `alk-host migrate kv NAME`.
    #[arg(long, value_enum, default_value = "v1", conflicts_with = "store")]
    new_kv: NewQueuesArg,

    /// The bucket a `wasi:keyvalue` guest opens with the store identifier
    /// `""`; other identifiers name their bucket.
    #[arg(long, value_name = "NAME", default_value = alk_host::keyvalue::DEFAULT_BUCKET,
          value_parser = bucket_name)]
    keyvalue_bucket: String,

    #[command(flatten)]
    cache: CacheArgs,

    /// Arguments for the guest, after `--`.
    #[arg(last = true, value_name = "ARGS")]
    args: Vec<String>,
}

/// A valid bucket name, or why not.
fn bucket_name(name: &str) -> Result<String, String> {
    alk_host::keyvalue::check_bucket_name(name)
        .map(|()| name.to_string())
        .map_err(|e| e.to_string())
}

/// `--new-queues` and `--new-kv` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum NewQueuesArg {
    V1,
    V2,
}

/// `--durability` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum DurabilityArg {
    Full,
    Relaxed,
}

/// The largest `--max-memory-mib`: 64 GiB.
const MAX_MEMORY_MIB: i64 = 65536;

/// The longest `--timeout`: a year.
const MAX_TIMEOUT_SECS: f64 = 365.0 * 24.0 * 3600.0;

fn parse_timeout(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("expected a number of seconds, got {s:?}"))?;
    if !(0.001..=MAX_TIMEOUT_SECS).contains(&secs) {
        return Err(format!(
            "{s} seconds is out of range: give 0.001 to {MAX_TIMEOUT_SECS} (a year)"
        ));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s}: {e}"))
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected K=V, got {s:?}")),
    }
}

fn parse_dir(s: &str) -> Result<(PathBuf, String), String> {
    match s.split_once("::") {
        Some((host, guest)) if !host.is_empty() && !guest.is_empty() => {
            Ok((PathBuf::from(host), guest.to_string()))
        }
        Some(_) => Err(format!("expected HOST or HOST::GUEST, got {s:?}")),
        None => Ok((PathBuf::from(s), s.to_string())),
    }
}

impl RunCommand {
    /// Runs the command; the process exit code.
    pub fn execute(self) -> ExitCode {
        match self.run() {
            Ok(code) => code,
            Err(e) => {
                eprintln!("alk-host: error: {}", one_line(&e));
                ExitCode::from(HOST_FAILURE)
            }
        }
    }

    fn run(self) -> wasmtime::Result<ExitCode> {
        let opts = RunOptions {
            args: self.args,
            env: self.env,
            dirs: self.dirs,
            max_memory_bytes: self
                .max_memory_mib
                .map(|m| (m as usize).saturating_mul(1024 * 1024)),
            timeout: self.timeout,
            capture_output: false,
        };
        let program = self
            .component
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "guest".into());
        let durability = match self.durability {
            DurabilityArg::Full => Durability::Full,
            DurabilityArg::Relaxed => Durability::Relaxed,
        };
        let store = match (&self.data_dir, &self.store) {
            (Some(_), _) => None,
            (None, Some(url)) => Some(url.clone()),
            (None, None) => std::env::var("ALK_STORE").ok().filter(|s| !s.is_empty()),
        };
        let data_dir = self.data_dir.unwrap_or_else(|| PathBuf::from(".alk"));
        let cache_dir = self.cache.dir();
        // On Postgres every engine call is network I/O: one thread runs the
        // guest and drives its connections, with no hand-off between
        // threads on each call (a third less time per call here). The file
        // engine does its work on the runtime's threads: two of them.
        let runtime = match store {
            Some(_) => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?,
            None => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?,
        };
        let outcome = runtime.block_on(async {
            let alk = match store {
                None => AlkCtx::builder()
                    .data_dir(data_dir)
                    .durability(durability)
                    .new_queues(match self.new_queues {
                        NewQueuesArg::V1 => NewQueues::V1,
                        NewQueuesArg::V2 => NewQueues::V2,
                    })
                    .new_kv(match self.new_kv {
                        NewQueuesArg::V1 => NewKv::V1,
                        NewQueuesArg::V2 => NewKv::V2,
                    })
                    .keyvalue_default_bucket(&self.keyvalue_bucket)
                    .build(),
                Some(url) => {
                    let engine = connect(&url, durability).await?;
                    AlkCtx::builder()
                        .engine(Arc::new(engine))
                        .keyvalue_default_bucket(&self.keyvalue_bucket)
                        .build()
                }
            };
            let runner = Runner::with_cache(cache_dir.as_deref())?;
            let component = runner.load(&self.component)?;
            runner.run(&component, &program, alk, &opts).await
        })?;
        if let RunStatus::Trapped(msg) = &outcome.status {
            eprintln!("alk-host: guest trapped: {msg}");
        }
        Ok(ExitCode::from(outcome.exit_code() as u8))
    }
}

/// The Postgres engine of `--store` (or `$ALK_STORE`); an error that says
/// what to fix, never with the password.
pub(super) async fn connect(url: &str, durability: Durability) -> wasmtime::Result<PostgresEngine> {
    if !alk_host::postgres::is_postgres_url(url) {
        wasmtime::bail!(
            "--store {:?} is not a postgres:// URL (for a directory on this machine, use --data-dir)",
            alk_host::postgres::redact(url)
        );
    }
    let options = PostgresOptions::from_url(url)
        .map_err(|e| wasmtime::format_err!("{}", bare(e)))?
        .relaxed(matches!(durability, Durability::Relaxed));
    PostgresEngine::connect(options)
        .await
        .map_err(|e| wasmtime::format_err!("{}", bare(e)))
}

/// An engine error without its kind's prefix ("store busy: "), which the
/// message itself makes clear.
pub(super) fn bare(e: AlkError) -> String {
    match e {
        AlkError::Busy(m) | AlkError::InvalidArgument(m) => m,
        other => other.to_string(),
    }
}

/// An error and its causes on one line.
pub(super) fn one_line(e: &wasmtime::Error) -> String {
    let text = e
        .chain()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(": ");
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Compile a component into the compilation cache.
///
/// Later `alk-host run`s of the same component (same bytes, same host
/// version) load the compiled code from the cache instead of compiling:
/// large guests (a Python guest is about 18 MB) then start in a fraction
/// of the time.
#[derive(Debug, clap::Args)]
pub struct CompileCommand {
    /// The component to compile (`.wasm`).
    component: PathBuf,

    #[command(flatten)]
    cache: CacheArgs,
}

impl CompileCommand {
    /// Runs the command; the process exit code.
    pub fn execute(self) -> ExitCode {
        let Some(dir) = self.cache.dir() else {
            eprintln!(
                "alk-host: error: there is no cache to compile into (--no-cache, or no HOME); pass --cache-dir"
            );
            return ExitCode::from(HOST_FAILURE);
        };
        let result = Runner::with_cache(Some(&dir)).and_then(|runner| runner.load(&self.component));
        match result {
            Ok(_) => {
                println!(
                    "compiled {} into {}",
                    self.component.display(),
                    dir.display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("alk-host: error: {}", one_line(&e));
                ExitCode::from(HOST_FAILURE)
            }
        }
    }
}

/// `alk-host migrate queue NAME` and `alk-host migrate kv NAME`.
#[derive(Debug, clap::Args)]
pub struct MigrateCommand {
    /// What to migrate.
    #[command(subcommand)]
    what: MigrateWhat,
}

#[derive(Debug, clap::Subcommand)]
enum MigrateWhat {
    /// Move a queue file from `localqueue.v1` to `localqueue.v2`, keeping
    /// every message, id, attempt count and receipt. Stop every process
    /// using the queue first: the migration refuses to run while one has it
    /// open, and no process can open it while it runs. The program that
    /// shares the v1 format can no longer read the queue afterwards.
    Queue {
        /// The queue's name.
        name: String,
        /// Data directory of the stores.
        #[arg(long, value_name = "DIR", default_value = ".alk")]
        data_dir: PathBuf,
    },
    /// Move a kv bucket file from `localkv.v1` to `localkv.v2`, keeping
    /// every key, value and expiry and giving each key a version. Stop every
    /// process using the bucket first: the migration refuses to run while
    /// one has it open, and no process can open it while it runs. Programs
    /// that read only `localkv.v1` can no longer read the bucket afterwards.
    Kv {
        /// The bucket's name.
        name: String,
        /// Data directory of the stores.
        #[arg(long, value_name = "DIR", default_value = ".alk")]
        data_dir: PathBuf,
    },
}

impl MigrateCommand {
    /// Runs the migration; exit code 0 when the store is v2 afterwards.
    pub fn execute(self) -> ExitCode {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("alk-host: error: {e}");
                return ExitCode::from(HOST_FAILURE);
            }
        };
        let (what, name, done) = match self.what {
            MigrateWhat::Queue { name, data_dir } => {
                let done = runtime.block_on(alk_host::turso::migrate_queue(&data_dir, &name));
                let done = done.map(|m| m == alk_host::turso::queue::Migrated::Upgraded);
                (("queue", "localqueue.v1", "localqueue.v2"), name, done)
            }
            MigrateWhat::Kv { name, data_dir } => {
                let done = runtime.block_on(alk_host::turso::migrate_kv(&data_dir, &name));
                let done = done.map(|m| m == alk_host::turso::kv::Migrated::Upgraded);
                (("bucket", "localkv.v1", "localkv.v2"), name, done)
            }
        };
        let (kind, from, to) = what;
        match done {
            Ok(true) => {
                println!("{kind} {name}: migrated from {from} to {to}");
                ExitCode::SUCCESS
            }
            Ok(false) => {
                println!("{kind} {name}: already {to}; nothing to do");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("alk-host: error: {kind} {name}: {e}");
                ExitCode::from(HOST_FAILURE)
            }
        }
    }
}
