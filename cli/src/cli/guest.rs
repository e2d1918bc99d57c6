//! What `run` and `serve` share: where the stores are, the guest's
//! environment, directories, memory limit and network, the compilation
//! cache.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use alk_host::turso::{NewKv, NewQueues};
use alk_host::{AlkCtx, AlkError, Durability, NetworkPolicy, PostgresEngine, PostgresOptions};

use super::CacheArgs;

/// The options of a guest's stores and sandbox.
#[derive(Debug, clap::Args)]
pub struct GuestArgs {
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
    pub env: Vec<(String, String)>,

    /// Give the guest a host directory (repeatable). `HOST` alone is mounted
    /// at the same path in the guest; `HOST::GUEST` mounts it at `GUEST`.
    #[arg(long = "dir", value_name = "HOST[::GUEST]", value_parser = parse_dir)]
    pub dirs: Vec<(PathBuf, String)>,

    /// Most linear memory the guest (for `serve`: each request's instance)
    /// may use, in MiB (1 to 65536); growing past it traps.
    #[arg(long, value_name = "MIB", allow_negative_numbers = true,
          value_parser = clap::value_parser!(u32).range(1..=MAX_MEMORY_MIB))]
    max_memory_mib: Option<u32>,

    /// What the guest may reach on the network (repeatable; nothing by
    /// default, and a denied use is an error the guest sees, not a trap):
    /// `inherit-network` (TCP and UDP sockets to any address),
    /// `allow-ip-name-lookup` (name lookups), `http` (outgoing HTTP and
    /// HTTPS requests). Each takes `=y` or `=n`, as wasmtime's `-S` options.
    #[arg(short = 'S', value_name = "OPTION")]
    network: Vec<String>,

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

    /// The format of queue files this host creates. `v4`: every job option
    /// (priorities, delays, retries, dead letters, groups), queue limits,
    /// unique sends and results. `v3`: the same, for a data directory shared
    /// with hosts that know no newer format. `v1`: plain
    /// messages only, for a data directory shared with a program that reads
    /// only `localqueue.v1`. Existing queue files keep their format; move a
    /// v1, v2 or v3 queue to v4 with `alk-host migrate queue NAME`.
    #[arg(long, value_enum, default_value = "v4", conflicts_with = "store")]
    new_queues: NewQueuesArg,

    /// The format of kv bucket files this host creates. `v1` (the
    /// default): the data directory layout's original format. `v2`: a
    /// version per put, what compare-and-swap compares, and the format the
    /// other program sharing the layout now reads. Existing bucket files
    /// keep their format; move a v1 bucket to v2 with
    /// `alk-host migrate kv NAME`.
    #[arg(long, value_enum, default_value = "v1", conflicts_with = "store")]
    new_kv: NewKvArg,

    /// The bucket a `wasi:keyvalue` guest opens with the store identifier
    /// `""`; other identifiers name their bucket.
    #[arg(long, value_name = "NAME", default_value = alk_host::keyvalue::DEFAULT_BUCKET,
          value_parser = bucket_name)]
    keyvalue_bucket: String,

    #[command(flatten)]
    pub cache: CacheArgs,
}

impl GuestArgs {
    /// The Postgres URL in force (`--store`, else `$ALK_STORE` when no
    /// `--data-dir` is given).
    pub fn store_url(&self) -> Option<String> {
        match (&self.data_dir, &self.store) {
            (Some(_), _) => None,
            (None, Some(url)) => Some(url.clone()),
            (None, None) => std::env::var("ALK_STORE").ok().filter(|s| !s.is_empty()),
        }
    }

    /// The memory limit in bytes.
    pub fn max_memory_bytes(&self) -> Option<usize> {
        self.max_memory_mib
            .map(|m| (m as usize).saturating_mul(1024 * 1024))
    }

    /// The network policy of the `-S` options.
    pub fn network(&self) -> wasmtime::Result<NetworkPolicy> {
        let mut policy = NetworkPolicy::default();
        for option in &self.network {
            policy.set(option).map_err(|e| wasmtime::format_err!("{e}"))?;
        }
        Ok(policy)
    }

    /// The alk context of the guest(s): the file engine on the data
    /// directory, or the Postgres engine of the URL.
    pub async fn context(&self) -> wasmtime::Result<AlkCtx> {
        let durability = match self.durability {
            DurabilityArg::Full => Durability::Full,
            DurabilityArg::Relaxed => Durability::Relaxed,
        };
        Ok(match self.store_url() {
            None => AlkCtx::builder()
                .data_dir(self.data_dir.clone().unwrap_or_else(|| PathBuf::from(".alk")))
                .durability(durability)
                .new_queues(match self.new_queues {
                    NewQueuesArg::V1 => NewQueues::V1,
                    NewQueuesArg::V4 => NewQueues::V4,
                    NewQueuesArg::V3 => NewQueues::V3,
                })
                .new_kv(match self.new_kv {
                    NewKvArg::V1 => NewKv::V1,
                    NewKvArg::V2 => NewKv::V2,
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
        })
    }
}

/// A valid bucket name, or why not.
fn bucket_name(name: &str) -> Result<String, String> {
    alk_host::keyvalue::check_bucket_name(name)
        .map(|()| name.to_string())
        .map_err(|e| e.to_string())
}

/// `--new-queues` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum NewQueuesArg {
    // No `v2`: hosts older than `localqueue.v3` read v2 files, and one
    // that quietly made newer files for `v2` would lock them out.
    /// `localqueue.v4`, the newest format.
    V4,
    /// `localqueue.v3`, for a data directory shared with hosts that know
    /// no newer format.
    V3,
    /// `localqueue.v1`, plain messages only.
    V1,
}

/// `--new-kv` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum NewKvArg {
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

pub(super) fn parse_timeout(s: &str) -> Result<Duration, String> {
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

/// The Postgres engine of `--store` (or `$ALK_STORE`); an error that says
/// what to fix, never with the password.
pub(super) async fn connect(url: &str, durability: Durability) -> wasmtime::Result<PostgresEngine> {
    connect_with(url, durability, false).await
}

/// [`connect`]; with `existing_only`, a schema without alk's stores (or of
/// an older version) is refused untouched.
pub(super) async fn connect_with(
    url: &str,
    durability: Durability,
    existing_only: bool,
) -> wasmtime::Result<PostgresEngine> {
    if !alk_host::postgres::is_postgres_url(url) {
        wasmtime::bail!(
            "--store {:?} is not a postgres:// URL (for a directory on this machine, use --data-dir)",
            alk_host::postgres::redact(url)
        );
    }
    let options = PostgresOptions::from_url(url)
        .map_err(|e| wasmtime::format_err!("{}", bare(e)))?
        .relaxed(matches!(durability, Durability::Relaxed))
        .existing_only(existing_only);
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

