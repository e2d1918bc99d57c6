//! Command-line interface of `alk-host`.

mod run;

pub use run::RunCommand;

/// A WebAssembly component host with durable, shared key-value storage,
/// queues, streams and locks for its guests.
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
}
