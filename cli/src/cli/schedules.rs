//! `alk-host schedules`: the scheduler runner as a long-running process,
//! and a listing of the stored schedules.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use alk_host::store::schedule::{RunnerEvent, RunnerOptions, Schedules};
use alk_host::{AlkError, SystemClock};

use tokio::signal::unix::{SignalKind, signal};

use super::store::{StoreArgs, err};
use super::run::block_on;

/// Run the scheduler, or list the schedules.
#[derive(Debug, clap::Args)]
pub struct SchedulesCommand {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Fire the stored schedules until stopped (SIGINT, SIGTERM, or the end
    /// of `--for` seconds: each fires what is due and gives the leadership
    /// back; a runner killed outright keeps it until its TTL runs out).
    ///
    /// Start it on as many machines or processes as you like: one runner
    /// leads (it holds the lock `__alkstore_scheduler`) and fires; the
    /// others stand by and take over within the leadership TTL when the
    /// leader stops. It prints a line when it starts leading and one per
    /// firing. Losing the leadership (the process was paused or starved past
    /// the TTL) is reported on stderr and the runner stands by again.
    Run {
        #[command(flatten)]
        store: StoreArgs,

        /// How long the leadership lasts without renewal, in milliseconds;
        /// the leader renews at a third of it.
        #[arg(long, value_name = "MS", default_value_t = alk_host::store::schedule::DEFAULT_LEADER_TTL_MS,
              value_parser = clap::value_parser!(u64).range(300..=86_400_000))]
        leader_ttl_ms: u64,

        /// Most jobs one schedule sends for boundaries missed while no
        /// runner ran; older ones are skipped.
        #[arg(long, value_name = "N", default_value_t = alk_host::store::schedule::DEFAULT_CATCH_UP,
              value_parser = clap::value_parser!(u32).range(1..=1_000))]
        catch_up: u32,

        /// Stop after this many seconds, giving the leadership back.
        #[arg(long = "for", value_name = "SECONDS")]
        run_for: Option<f64>,

        /// How this runner names itself in the leadership lock [default:
        /// host name and process id].
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
    },
    /// Print the stored schedules, one per line: name, spec, queue, next
    /// boundary (unix epoch milliseconds).
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
}

fn runner_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".into());
    format!("{host}:{}", std::process::id())
}

impl SchedulesCommand {
    /// Runs the command; the process exit code.
    pub fn execute(self) -> ExitCode {
        block_on(self.run())
    }

    async fn run(self) -> wasmtime::Result<ExitCode> {
        match self.what {
            What::List { store } => {
                // Lists what is there, creating nothing: a mistyped
                // directory is an error, not an empty list.
                let (engine, catalog) = store.existing().await?;
                if !catalog.stream_store {
                    return Ok(ExitCode::SUCCESS);
                }
                let schedules = engine.schedules().await.map_err(err)?;
                for row in schedules.list().await.map_err(err)? {
                    println!(
                        "{}\t{}\t{}\t{}",
                        row.name, row.spec, row.queue, row.next_due
                    );
                }
                Ok(ExitCode::SUCCESS)
            }
            What::Run {
                store,
                leader_ttl_ms,
                catch_up,
                run_for,
                name,
            } => {
                let stop_at = match run_for {
                    Some(s) if s.is_finite() && s > 0.0 && s <= 31_536_000.0 => {
                        Some(tokio::time::Instant::now() + Duration::from_secs_f64(s))
                    }
                    Some(s) => wasmtime::bail!(
                        "--for {s} is not a number of seconds from 0.001 to 31536000"
                    ),
                    None => None,
                };
                let engine = store.engine().await?;
                let schedules = Schedules::open(&*engine).await.map_err(err)?;
                let owner = name.unwrap_or_else(runner_name);
                let hook_owner = owner.clone();
                let options = RunnerOptions {
                    owner: owner.clone(),
                    leader_ttl_ms,
                    catch_up,
                    events: Some(Arc::new(move |event: &RunnerEvent| match event {
                        RunnerEvent::Leading(token) => {
                            println!("leading as {hook_owner} (token {token})");
                        }
                        RunnerEvent::Fired {
                            schedule,
                            queue,
                            jobs,
                        } => println!("fired {schedule}: {jobs} job(s) to {queue}"),
                    })),
                    ..RunnerOptions::default()
                };
                println!("runner {owner} started on {}", engine.describe());
                // SIGINT and SIGTERM stop the runner like the end of `--for`:
                // it fires what is due and gives the leadership back, so
                // another runner takes over at once rather than after the
                // TTL.
                let mut interrupt = signal(SignalKind::interrupt())?;
                let mut terminate = signal(SignalKind::terminate())?;
                loop {
                    let stop = async {
                        let until = async {
                            match stop_at {
                                Some(at) => tokio::time::sleep_until(at).await,
                                None => std::future::pending().await,
                            }
                        };
                        tokio::select! {
                            _ = until => {}
                            _ = interrupt.recv() => {}
                            _ = terminate.recv() => {}
                        }
                    };
                    match schedules.run(&options, Arc::new(SystemClock), stop).await {
                        Ok(report) => {
                            println!(
                                "runner {owner} stopped: {} job(s) fired{}",
                                report.fired,
                                if report.led { "" } else { ", never led" }
                            );
                            engine.flush().await;
                            return Ok(ExitCode::SUCCESS);
                        }
                        Err(AlkError::LeadershipLost(m)) => {
                            eprintln!("alk-host: warning: leadership lost: {m}; standing by");
                        }
                        Err(e) => return Err(err(e)),
                    }
                }
            }
        }
    }
}

