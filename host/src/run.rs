//! Running command components: what `alk-host run` does, usable by
//! embedders that just want to run a guest with everything linked. The
//! [`Runner`] also serves HTTP handler components (`serve.rs`), with the
//! same linker and store data.

use std::path::{Path, PathBuf};
use std::time::Duration;

use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::error::Context as _;
use wasmtime::{Config, Engine, Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::p2::bindings::Command;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::ctx::{AlkCtx, AlkCtxView, AlkView};
use crate::http::HttpState;
use crate::kind::Kind;
use crate::network::NetworkPolicy;

/// How often the engine's epoch advances when a time limit is in force.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Options of one guest run.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Arguments after the program name.
    pub args: Vec<String>,
    /// Environment variables the guest sees (nothing is inherited).
    pub env: Vec<(String, String)>,
    /// Host directories preopened for the guest: `(host path, guest path)`.
    pub dirs: Vec<(PathBuf, String)>,
    /// Most linear memory one instance may grow to, in bytes (`None`: no limit).
    pub max_memory_bytes: Option<usize>,
    /// Wall-clock limit of the run, start-up included (`None`: no limit).
    /// It stops a guest whatever it is doing: computing, or blocked in a
    /// host call such as a waiting receive or a sleep.
    pub timeout: Option<Duration>,
    /// Capture stdout and stderr instead of inheriting the host's.
    pub capture_output: bool,
    /// What the guest may reach on the network (nothing by default).
    pub network: NetworkPolicy,
}

/// How a guest run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStatus {
    /// The guest returned from `run` or called `exit`; the exit code.
    Exited(i32),
    /// The guest trapped (a bug in it, its memory limit, or its time limit).
    Trapped(String),
}

/// The result of a guest run.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// How it ended.
    pub status: RunStatus,
    /// Captured stdout (empty unless [`RunOptions::capture_output`]).
    pub stdout: Vec<u8>,
    /// Captured stderr (empty unless [`RunOptions::capture_output`]).
    pub stderr: Vec<u8>,
}

impl RunOutcome {
    /// The status as a process exit code: the guest's own code, or 134 for
    /// a trap (as an aborted process).
    pub fn exit_code(&self) -> i32 {
        match self.status {
            RunStatus::Exited(code) => code,
            RunStatus::Trapped(_) => 134,
        }
    }
}

/// The store data of a guest run (or served) by [`Runner`].
pub struct RunState {
    pub(crate) wasi: WasiCtx,
    pub(crate) alk: AlkCtx,
    pub(crate) http: HttpState,
    pub(crate) table: ResourceTable,
    pub(crate) limits: StoreLimits,
}

impl wasmtime_wasi_http::WasiHttpView for RunState {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        wasmtime_wasi_http::WasiHttpCtxView {
            ctx: &mut self.http.ctx,
            table: &mut self.table,
            hooks: &mut self.http.hooks,
        }
    }
}

impl WasiView for RunState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl AlkView for RunState {
    fn alk(&mut self) -> AlkCtxView<'_> {
        AlkCtxView {
            ctx: &mut self.alk,
            table: &mut self.table,
        }
    }
}

/// An engine and a linker with the full WASI 0.2 set, `wasi:http` and every
/// alk interface, ready to run command components and serve HTTP handler
/// components. Cheap to share: run as many
/// guests as needed, each with its own [`AlkCtx`].
pub struct Runner {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<RunState>,
    /// Started by the first run with a time limit, on a single-threaded
    /// runtime, or beside another run; ticks the epoch.
    ticker: std::sync::OnceLock<()>,
    /// Runs of this runner in progress.
    running: std::sync::atomic::AtomicUsize,
}

/// Counts a run in progress while it exists.
struct Running<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Runner {
    /// A runner with the default engine configuration, compiling every
    /// component it loads.
    pub fn new() -> wasmtime::Result<Self> {
        Self::with_cache(None)
    }

    /// A runner that keeps compiled components in `cache_dir` (when
    /// given), so a component is compiled once and later loads, in any
    /// process, only read the result. Entries are content-addressed (by
    /// the component's bytes and the engine's configuration) and written
    /// atomically, so processes can share the directory.
    pub fn with_cache(cache_dir: Option<&Path>) -> wasmtime::Result<Self> {
        Self::build(base_config(cache_dir)?)
    }

    /// A runner made for serving ([`Runner::bind`]): instances come from a
    /// pool of pre-reserved memories and tables, so an instance per request
    /// costs little (what `wasmtime serve` does too), sized for
    /// `max_concurrent_requests` instances at once. Where the machine
    /// cannot reserve the pool's address space it is the plain runner.
    pub fn for_serving(
        cache_dir: Option<&Path>,
        max_concurrent_requests: usize,
    ) -> wasmtime::Result<Self> {
        if pool_fits() {
            let n = u32::try_from(max_concurrent_requests.max(1)).unwrap_or(u32::MAX);
            let mut pool = wasmtime::PoolingAllocationConfig::default();
            // A component holds several core instances, memories and tables
            // (its adapters, a language runtime's own); room for each
            // request's whole component, twice over.
            pool.total_component_instances(n.saturating_mul(2).max(1000))
                .total_core_instances(n.saturating_mul(40).max(1000))
                .total_memories(n.saturating_mul(4).max(1000))
                .total_tables(n.saturating_mul(8).max(1000))
                .total_stacks(n.saturating_mul(2).max(1000));
            let mut config = base_config(cache_dir)?;
            config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
            match Self::build(config) {
                Ok(runner) => return Ok(runner),
                Err(e) => tracing::debug!(target: "alk", "no instance pool ({e}); serving without"),
            }
        }
        Self::with_cache(cache_dir)
    }

    fn build(config: Config) -> wasmtime::Result<Self> {
        let engine = Engine::new(&config)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        // Only wasi:http's own interfaces: the WASI ones it builds on are
        // linked above already.
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        crate::add_to_linker(&mut linker)?;
        crate::keyvalue::add_to_linker(&mut linker)?;
        Ok(Runner {
            engine,
            linker,
            ticker: std::sync::OnceLock::new(),
            running: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// Starts the epoch ticker, once. Only runs with a time limit, runs on
    /// a single-threaded runtime and runs beside another run need it, and
    /// a runner without them stays free of periodic wake-ups (an idle host
    /// uses no CPU). It holds a weak engine reference and ends with
    /// the runner's engine.
    pub(crate) fn start_ticker(&self) {
        self.ticker.get_or_init(|| {
            let weak = self.engine.weak();
            let _ = std::thread::Builder::new()
                .name("alk-epoch".into())
                .spawn(move || {
                    while let Some(engine) = weak.upgrade() {
                        engine.increment_epoch();
                        drop(engine);
                        std::thread::sleep(EPOCH_TICK);
                    }
                });
        });
    }

    /// The engine, for compiling components.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Compiles the component at `path`. A core WebAssembly module (not a
    /// component) is refused with a line that says what to do.
    pub fn load(&self, path: &Path) -> wasmtime::Result<Component> {
        let bytes = std::fs::read(path)
            .with_context(|| format!("cannot read component {}", path.display()))?;
        crate::kind::check_bytes(path, &bytes)?;
        Component::new(&self.engine, &bytes)
            .with_context(|| format!("{} is not a loadable WebAssembly component", path.display()))
    }

    /// What `component` is: a command, an HTTP handler, or neither.
    pub fn kind(&self, component: &Component) -> Kind {
        crate::kind::kind_of(&self.engine, component)
    }

    /// Runs the command component `component` with alk context `alk`.
    ///
    /// `Err` means the host could not start the guest (it does not export
    /// `wasi:cli/run`, imports something not provided, a directory cannot
    /// be opened). Everything the guest does, including trapping, is an
    /// `Ok` [`RunOutcome`].
    pub async fn run(
        &self,
        component: &Component,
        program: &str,
        alk: AlkCtx,
        opts: &RunOptions,
    ) -> wasmtime::Result<RunOutcome> {
        crate::kind::require(self.kind(component), Kind::Command)?;
        let others = self
            .running
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let _running = Running(&self.running);
        let mut wasi = guest_wasi(&opts.env, &opts.dirs, &opts.network)?;
        wasi.arg(program);
        wasi.args(&opts.args);
        let (stdout, stderr) = if opts.capture_output {
            let out = MemoryOutputPipe::new(usize::MAX);
            let err = MemoryOutputPipe::new(usize::MAX);
            wasi.stdout(out.clone());
            wasi.stderr(err.clone());
            (Some(out), Some(err))
        } else {
            wasi.inherit_stdio();
            (None, None)
        };
        let engine = alk.engine().clone();
        let state = RunState {
            wasi: wasi.build(),
            alk,
            http: HttpState::new(opts.network.outgoing_http),
            table: ResourceTable::new(),
            limits: memory_limits(opts.max_memory_bytes),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        match opts.timeout {
            Some(_) => {
                // The wall-clock limit is enforced below; the epoch makes a
                // guest that computes without calling the host yield every
                // tick, so the limit can fire while it runs.
                self.start_ticker();
                store.set_epoch_deadline(1);
                store.epoch_deadline_async_yield_and_update(1);
            }
            None => {
                // Guests that share the runtime's threads (one thread, or
                // several guests of this runner at once) must not hold them:
                // one that computes without calling the host yields every
                // 10 ticks (100 ms), so the engine's background work
                // (transaction watchdogs, wakes, connections) and the other
                // guests are never held up for longer. Alone on a
                // multi-threaded runtime, nothing ticks unless another run
                // started the ticker, and the guest keeps going.
                if single_threaded() || others > 0 {
                    self.start_ticker();
                }
                store.set_epoch_deadline(10);
                store.epoch_deadline_async_yield_and_update(10);
            }
        }

        let linker = &self.linker;
        let guest = async move {
            let command = Command::instantiate_async(&mut store, component, linker)
                .await
                .map_err(crate::kind::explain_instantiate)?;
            Ok::<_, wasmtime::Error>(command.wasi_cli_run().call_run(&mut store).await)
        };
        // The time limit counts wall time, whatever the guest does: compute,
        // wait in a host call (`receive-wait` with a long timeout, a sleep),
        // or start up. Running out drops the guest where it stands; what it
        // committed stays, a transaction it held is rolled back.
        let result = match opts.timeout {
            Some(limit) => match tokio::time::timeout(limit, guest).await {
                Ok(result) => result?,
                Err(_) => Err(wasmtime::Error::new(TimedOut)),
            },
            None => guest.await?,
        };
        // What the guest's last calls started in the background (a wake
        // for other hosts) is finished before the caller may exit.
        engine.flush().await;
        let status = match result {
            Ok(Ok(())) => RunStatus::Exited(0),
            Ok(Err(())) => RunStatus::Exited(1),
            Err(e) => match e.downcast_ref::<wasmtime_wasi::I32Exit>() {
                Some(exit) => RunStatus::Exited(exit.0),
                None => RunStatus::Trapped(describe_trap(&e, opts)),
            },
        };
        Ok(RunOutcome {
            status,
            stdout: stdout.map(|p| p.contents().to_vec()).unwrap_or_default(),
            stderr: stderr.map(|p| p.contents().to_vec()).unwrap_or_default(),
        })
    }
}

/// The engine configuration every runner starts from: the compilation
/// cache in `cache_dir`, epoch interruption for time limits.
fn base_config(cache_dir: Option<&Path>) -> wasmtime::Result<Config> {
    let mut config = Config::new();
    if let Some(dir) = cache_dir {
        let mut cache = wasmtime::CacheConfig::new();
        cache.with_directory(dir);
        config.cache(Some(wasmtime::Cache::new(cache)?));
    }
    config.epoch_interruption(true);
    Ok(config)
}

/// Whether this machine can reserve the address space of an instance pool
/// (thousands of linear memories' reservations: about 42 bits). Some
/// systems offer only 39 bits; there the pool cannot be made.
fn pool_fits() -> bool {
    let mut config = Config::new();
    config.wasm_memory64(true);
    config.memory_reservation(1 << 42);
    let Ok(engine) = Engine::new(&config) else {
        return false;
    };
    let mut store = Store::new(&engine, ());
    let ty = wasmtime::MemoryType::new64(0, Some(1 << (42 - 16)));
    wasmtime::Memory::new(&mut store, ty).is_ok()
}

/// A guest's WASI context: `env` (nothing inherited), `dirs` preopened
/// read-write, the network as `network` allows.
pub(crate) fn guest_wasi(
    env: &[(String, String)],
    dirs: &[(PathBuf, String)],
    network: &NetworkPolicy,
) -> wasmtime::Result<WasiCtxBuilder> {
    let mut wasi = WasiCtxBuilder::new();
    for (k, v) in env {
        wasi.env(k, v);
    }
    for (host, guest) in dirs {
        wasi.preopened_dir(host, guest, FsPerms::ReadWrite)
            .with_context(|| format!("cannot open directory {} for the guest", host.display()))?;
    }
    network.apply(&mut wasi);
    Ok(wasi)
}

/// The memory limit of an instance (`None`: none).
pub(crate) fn memory_limits(max_memory_bytes: Option<usize>) -> StoreLimits {
    let mut limits = StoreLimitsBuilder::new();
    if let Some(max) = max_memory_bytes {
        limits = limits.memory_size(max).trap_on_grow_failure(true);
    }
    limits.build()
}

/// Whether the calling task runs on a single-threaded tokio runtime.
fn single_threaded() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread)
}

/// The run reached its time limit.
#[derive(Debug)]
struct TimedOut;

impl std::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("time limit reached")
    }
}

impl std::error::Error for TimedOut {}

fn describe_trap(e: &wasmtime::Error, opts: &RunOptions) -> String {
    let timed_out = e.downcast_ref::<TimedOut>().is_some()
        || matches!(
            e.downcast_ref::<wasmtime::Trap>(),
            Some(wasmtime::Trap::Interrupt)
        );
    match timed_out {
        true => format!(
            "the guest ran past its time limit of {:?} and was stopped",
            opts.timeout.unwrap_or_default()
        ),
        false => {
            let mut text = format!("{e:?}");
            if let Some(max) = opts.max_memory_bytes
                && text.contains("memory")
            {
                text.push_str(&format!(" (the memory limit is {max} bytes)"));
            }
            text
        }
    }
}
