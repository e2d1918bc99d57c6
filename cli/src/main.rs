//! The `alk-host` command: parses arguments and dispatches.

use std::process::ExitCode;

use clap::Parser;

mod cli;

fn main() -> ExitCode {
    // turso asks for transparent huge pages for each open database's buffer
    // arenas: with THP on, every open store then costs 2 MB or more of
    // resident memory for buffers it barely uses. A host with many stores
    // open is better off without.
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
    // A panic is one line on stderr; RUST_BACKTRACE=1 shows the full
    // report. A panic inside the storage engine is contained by the host,
    // which goes on and reports it itself (to the guest as an error, and in
    // the log): it is not printed here as well.
    if std::env::var_os("RUST_BACKTRACE").is_none() {
        std::panic::set_hook(Box::new(|info| {
            if alk_host::store::panic::is_contained() {
                return;
            }
            let what = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let at = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()))
                .unwrap_or_default();
            eprintln!("alk-host: internal failure{at}: {what}");
        }));
    }
    // Diagnostics (failures the host handled on a guest's behalf, such as a
    // lock that could not be released on drop) go to stderr; RUST_LOG
    // chooses how much, warnings by default.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .try_init();
    let args = match cli::Cli::try_parse() {
        Ok(args) => args,
        // Help and version go to stdout as usual.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        // A usage error is one line, like every other host failure.
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("alk-host: error: {first} (see alk-host --help)");
            return ExitCode::from(2);
        }
    };
    match args.command {
        cli::Command::Run(run) => run.execute(),
        cli::Command::Serve(serve) => serve.execute(),
        cli::Command::Compile(compile) => compile.execute(),
        cli::Command::Migrate(migrate) => migrate.execute(),
        cli::Command::Schedules(schedules) => schedules.execute(),
        cli::Command::Inspect(inspect) => inspect.execute(),
        cli::Command::Dashboard(dashboard) => dashboard.execute(),
    }
}
