//! Command-line interface of `alk-host`.

mod dashboard;
mod guest;
mod inspect;
mod run;
mod schedules;
mod serve;
mod store;
mod view;

use std::path::PathBuf;

pub use dashboard::DashboardCommand;
pub use inspect::InspectCommand;
pub use run::{CompileCommand, MigrateCommand, RunCommand};
pub use schedules::SchedulesCommand;
pub use serve::ServeCommand;

/// A WebAssembly component host with durable, shared key-value storage,
/// queues, streams, locks and notifications for its guests.
#[derive(Debug, clap::Parser)]
#[command(name = "alk-host", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// What to do.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Run a WebAssembly command component (one that exports `wasi:cli/run`).
    Run(RunCommand),
    /// Serve an HTTP handler component (one that exports
    /// `wasi:http/incoming-handler`).
    Serve(ServeCommand),
    /// Compile a component ahead of time into the compilation cache, so
    /// later `run`s (in any process) start without compiling.
    Compile(CompileCommand),
    /// Move a store file to a newer format (explicitly: files are never
    /// converted by being opened).
    Migrate(MigrateCommand),
    /// Run the scheduler (fire the stored schedules), or list the schedules.
    Schedules(SchedulesCommand),
    /// Show what a data directory or database holds: every store with its
    /// counts, or a queue's messages, a stream's consumers, a bucket's keys.
    Inspect(InspectCommand),
    /// Serve a web page showing every store, with actions on dead letters,
    /// and `/metrics`.
    Dashboard(DashboardCommand),
}

/// Where compiled components are kept.
#[derive(Debug, Clone, clap::Args)]
pub struct CacheArgs {
    /// Directory of compiled components [default: $ALK_CACHE_DIR, else
    /// $XDG_CACHE_HOME/alk, else ~/.cache/alk].
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,

    /// Compile the component on every start instead of using the cache.
    #[arg(long, conflicts_with = "cache_dir")]
    no_cache: bool,
}

impl CacheArgs {
    /// The cache directory in force, if any.
    pub fn dir(&self) -> Option<PathBuf> {
        if self.no_cache {
            return None;
        }
        self.cache_dir
            .clone()
            .or_else(|| std::env::var_os("ALK_CACHE_DIR").map(PathBuf::from))
            .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("alk")))
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/alk")))
    }
}
