//! `alk-host run`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use alk_host::{RunOptions, RunStatus, Runner};

use super::CacheArgs;
use super::guest::{GuestArgs, parse_timeout};

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

    #[command(flatten)]
    guest: GuestArgs,

    /// Stop the guest (as a trap) after this many seconds of wall time,
    /// whatever it is doing (0.001 to 31536000, a year; fractions allowed).
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true, value_parser = parse_timeout)]
    timeout: Option<Duration>,

    /// How the kernel schedules the host's threads: `batch` (default), the
    /// policy for throughput work — a woken process does not preempt one
    /// that is running, so a process holding a store's write lock keeps its
    /// CPU until it lets go; `normal`, the kernel's default.
    #[arg(long, value_enum, value_name = "POLICY", default_value = "batch")]
    scheduling: Scheduling,

    /// Run this many instances of the component at once, in this process
    /// (1 to 256). Each is told its number in the environment variable
    /// `ALK_INSTANCE` (0, 1, …) and the count in `ALK_INSTANCES`, and has
    /// its own limits (memory, open resources, `--timeout`); they share the
    /// host's stdout, stderr and stdin (which instance reads which bytes of
    /// stdin is not defined). One that computes without calling the host
    /// yields every 100 ms. Writers of one process take turns at a store
    /// without handing its write lock to another process, and commit
    /// together: workers on one machine do more as instances of one host
    /// than as one host each. One instance that traps or fails leaves the
    /// others running; the host exits with the status of the first
    /// instance, by number, that did not succeed.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    instances: Option<u32>,

    /// Arguments for the guest, after `--`.
    #[arg(last = true, value_name = "ARGS")]
    args: Vec<String>,
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
        // Before any thread starts: threads inherit their creator's policy.
        if self.scheduling == Scheduling::Batch {
            batch_scheduling();
        }
        let network = self.guest.network()?;
        let opts = RunOptions {
            args: self.args,
            env: self.guest.env.clone(),
            dirs: self.guest.dirs.clone(),
            max_memory_bytes: self.guest.max_memory_bytes(),
            timeout: self.timeout,
            capture_output: false,
            network,
        };
        let program = self
            .component
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "guest".into());
        // On Postgres every engine call is network I/O: one thread runs the
        // guest and drives its connections, with no hand-off between
        // threads on each call (a third less time per call here). The file
        // engine does its work on the runtime's threads: two of them.
        let runtime = match self.guest.store_url() {
            Some(_) => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?,
            None => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?,
        };
        let (runner, component, alk) = runtime.block_on(async {
            let alk = self.guest.context().await?;
            let runner = Runner::with_cache(self.guest.cache.dir().as_deref())?;
            let component = runner.load(&self.component)?;
            wasmtime::Result::<_>::Ok((runner, component, alk))
        })?;
        let Some(n) = self.instances else {
            let outcome = runtime.block_on(runner.run(&component, &program, alk, &opts))?;
            if let RunStatus::Trapped(msg) = &outcome.status {
                eprintln!("alk-host: guest trapped: {msg}");
            }
            return Ok(ExitCode::from(outcome.exit_code() as u8));
        };
        let opts_of = |i: u32| {
            let mut opts = opts.clone();
            opts.env
                .retain(|(k, _)| k != "ALK_INSTANCE" && k != "ALK_INSTANCES");
            opts.env.push(("ALK_INSTANCE".into(), i.to_string()));
            opts.env.push(("ALK_INSTANCES".into(), n.to_string()));
            opts
        };
        // The instances are tasks on the runtime's threads, where their
        // storage work runs too: a write queued behind another instance's
        // is handed over inside the process without waking a thread. One
        // that computes without calling the host yields every 100 ms (see
        // `Runner::run`).
        let runner = std::sync::Arc::new(runner);
        let outcomes = runtime.block_on(async {
            let tasks: Vec<_> = (0..n)
                .map(|i| {
                    let (runner, component, program, alk, opts) = (
                        runner.clone(),
                        component.clone(),
                        program.clone(),
                        alk.clone(),
                        opts_of(i),
                    );
                    tokio::spawn(async move { runner.run(&component, &program, alk, &opts).await })
                })
                .collect();
            let mut outcomes = Vec::new();
            for task in tasks {
                outcomes.push(task.await.unwrap_or_else(|e| {
                    Err(wasmtime::Error::msg(format!("the instance failed: {e}")))
                }));
            }
            outcomes
        });
        // What stops every instance alike (a component that is not a
        // command, an import alk does not provide) is said once.
        let errors: Vec<String> = outcomes
            .iter()
            .filter_map(|o| o.as_ref().err().map(one_line))
            .collect();
        if errors.len() == outcomes.len() && errors.iter().all(|e| *e == errors[0]) {
            eprintln!("alk-host: error: {}", errors[0]);
            return Ok(ExitCode::from(HOST_FAILURE));
        }
        let mut code = None;
        for (i, outcome) in outcomes.into_iter().enumerate() {
            let this = match outcome {
                Err(e) => {
                    eprintln!("alk-host: error: instance {i}: {}", one_line(&e));
                    HOST_FAILURE
                }
                Ok(outcome) => {
                    if let RunStatus::Trapped(msg) = &outcome.status {
                        eprintln!("alk-host: instance {i}: guest trapped: {msg}");
                    }
                    outcome.exit_code() as u8
                }
            };
            if this != 0 && code.is_none() {
                code = Some(this);
            }
        }
        Ok(ExitCode::from(code.unwrap_or(0)))
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
    /// Move a queue file from `localqueue.v1`, `localqueue.v2` or
    /// `localqueue.v3` to `localqueue.v4` (job options, queue limits,
    /// unique sends and results, fewer index writes per message), keeping
    /// every message, id, attempt count, receipt, group and dead letter.
    /// Stop every process using the queue first: the migration refuses to
    /// run while one has it open, and no process can open it while it
    /// runs. Programs that read only the older format can no longer read
    /// the queue afterwards.
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

/// Runs a command's async body on a runtime of two workers; its exit
/// code, or the one line of its error and [`HOST_FAILURE`].
pub(super) fn block_on(
    body: impl std::future::Future<Output = wasmtime::Result<ExitCode>>,
) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("alk-host: error: {e}");
            return ExitCode::from(HOST_FAILURE);
        }
    };
    match runtime.block_on(body) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("alk-host: error: {}", one_line(&e));
            ExitCode::from(HOST_FAILURE)
        }
    }
}

impl MigrateCommand {
    /// Runs the migration; exit code 0 when the store is of the newest
    /// format afterwards.
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
        // The format the store had, when it was upgraded.
        let (kind, to, name, done) = match self.what {
            MigrateWhat::Queue { name, data_dir } => {
                use alk_host::turso::queue::Migrated;
                let done = runtime.block_on(alk_host::turso::migrate_queue(&data_dir, &name));
                let done = done.map(|m| match m {
                    Migrated::Upgraded { from } => Some(from),
                    Migrated::AlreadyCurrent => None,
                });
                ("queue", "localqueue.v4", name, done)
            }
            MigrateWhat::Kv { name, data_dir } => {
                use alk_host::turso::kv::Migrated;
                let done = runtime.block_on(alk_host::turso::migrate_kv(&data_dir, &name));
                let done = done.map(|m| (m == Migrated::Upgraded).then_some("localkv.v1"));
                ("bucket", "localkv.v2", name, done)
            }
        };
        match done {
            Ok(Some(from)) => {
                println!("{kind} {name}: migrated from {from} to {to}");
                ExitCode::SUCCESS
            }
            Ok(None) => {
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

/// `--scheduling` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scheduling {
    /// `SCHED_BATCH`: no wakeup preemption.
    Batch,
    /// `SCHED_OTHER`, the kernel's default.
    Normal,
}

/// Puts the calling thread, and every thread it starts from now on, under
/// `SCHED_BATCH`. Several host processes share a store through one write
/// lock: under the normal policy a process woken by a commit (a worker
/// told of a message) preempts the one that now holds the lock, which then
/// holds it while not running. The policy needs no privilege. Setting it
/// also sets the nice value, so it is set only at nice 0 (kept at 0): a
/// process started with another nice value keeps the normal policy, as the
/// operator left it. A refusal (a restricted container) changes nothing.
fn batch_scheduling() {
    use thread_priority::{
        NormalThreadSchedulePolicy, ThreadPriority, ThreadPriorityOsValue, ThreadSchedulePolicy,
        set_thread_priority_and_policy, thread_native_id,
    };
    if rustix::process::getpriority_process(None).ok() != Some(0) {
        return;
    }
    if let Err(e) = set_thread_priority_and_policy(
        thread_native_id(),
        ThreadPriority::Os(ThreadPriorityOsValue::default()),
        ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Batch),
    ) {
        tracing::debug!(target: "alk", "the batch scheduling policy was refused, threads stay under the normal one: {e}");
    }
}
