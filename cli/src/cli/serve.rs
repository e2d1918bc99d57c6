//! `alk-host serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use alk_host::{Runner, ServeOptions};

use super::guest::{GuestArgs, parse_timeout};
use super::run::{HOST_FAILURE, one_line};

/// Serve an HTTP handler component (one that exports
/// `wasi:http/incoming-handler`, the `wasi:http/proxy` world) with the alk
/// capabilities and both `wasi:keyvalue` drafts linked, on durable stores.
///
/// Every request runs in an instance of its own; instances share only the
/// stores, so several `serve` processes on one data directory (or one
/// database) serve the same data. A handler that traps gets its request a
/// 500, one past `--timeout` a 503; the server goes on. SIGINT or SIGTERM
/// stops accepting, lets requests in flight finish (up to
/// `--shutdown-timeout`) and exits 0. When the server cannot start it
/// prints one line starting with `alk-host: error:` and exits with 2.
#[derive(Debug, clap::Args)]
pub struct ServeCommand {
    /// The component to serve (`.wasm`).
    component: PathBuf,

    /// The address to listen on (port 0 picks a free one, printed at
    /// start).
    #[arg(long, value_name = "SOCKADDR", default_value = "127.0.0.1:8080")]
    addr: SocketAddr,

    #[command(flatten)]
    guest: GuestArgs,

    /// Stop a request's instance after this many seconds of wall time and
    /// answer 503 (0.001 to 31536000; fractions allowed).
    #[arg(long, value_name = "SECONDS", default_value = "30", value_parser = parse_timeout)]
    timeout: Duration,

    /// Requests handled at once; more are answered 503 with `retry-after`.
    #[arg(long, value_name = "N", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_concurrent_requests: u32,

    /// Seconds a shutdown waits for the requests in flight.
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = parse_timeout)]
    shutdown_timeout: Duration,

    /// Also serve `GET /metrics` (Prometheus text: requests, queue
    /// counters, every queue's counts, stream lags, locks) on this address,
    /// a listener of its own (port 0 picks a free one, printed at start).
    #[arg(long, value_name = "SOCKADDR")]
    metrics_addr: Option<SocketAddr>,
}

impl ServeCommand {
    /// Runs the server until a signal; the process exit code.
    pub fn execute(self) -> ExitCode {
        match self.serve() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("alk-host: error: {}", one_line(&e));
                ExitCode::from(HOST_FAILURE)
            }
        }
    }

    fn serve(self) -> wasmtime::Result<()> {
        let opts = ServeOptions {
            addr: self.addr,
            env: self.guest.env.clone(),
            dirs: self.guest.dirs.clone(),
            max_memory_bytes: self.guest.max_memory_bytes(),
            request_timeout: Some(self.timeout),
            max_concurrent_requests: self.max_concurrent_requests as usize,
            shutdown_timeout: self.shutdown_timeout,
            network: self.guest.network()?,
            metrics_addr: self.metrics_addr,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let alk = self.guest.context().await?;
            let runner = Runner::for_serving(
                self.guest.cache.dir().as_deref(),
                opts.max_concurrent_requests,
            )?;
            let component = runner.load(&self.component)?;
            let server = runner.bind(&component, alk, &opts).await?;
            // As `wasmtime serve` says it.
            eprintln!("Serving HTTP on http://{}/", server.local_addr());
            if let Some(addr) = server.metrics_addr() {
                eprintln!("Serving metrics on http://{addr}/metrics");
            }
            server.run(signal()).await?;
            eprintln!("alk-host: stopped serving");
            Ok(())
        })
    }
}

/// Completes at the first SIGINT or SIGTERM.
pub(super) async fn signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        // No signal handling: serve until killed.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
}
