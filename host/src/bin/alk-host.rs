//! The `alk-host` command: parses arguments and dispatches.

use std::process::ExitCode;

use clap::Parser;

#[path = "../cli/mod.rs"]
mod cli;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match args.command {
        cli::Command::Run(run) => run.execute(),
        cli::Command::Compile(compile) => compile.execute(),
    }
}
