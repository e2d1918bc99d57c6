//! [`AlkCtx`], its builder, and the view that host bindings run on.

#[cfg(feature = "turso")]
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use alk_store::lock::Locks;
use alk_store::rate::Limiters;
use alk_store::schedule::Schedules;
use alk_store::stream::Streams;
use alk_store::{AlkError, AlkResult, Clock, Engine, Limits, SystemClock};
#[cfg(feature = "turso")]
use alk_store_turso::{Durability, NewKv, NewQueues, RetryPolicy, StoreOptions, TursoEngine};
use wasmtime::component::ResourceTable;

/// One resource counted against [`Limits::max_open_resources`]; held by
/// the resource, released when it is dropped.
#[derive(Debug)]
pub(crate) struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The per-instance state of the alk capabilities: the engine that keeps
/// the data, the limits and the clock.
///
/// Each plugin (guest instance) of an embedder gets its own `AlkCtx`; give
/// plugins different engines (data directories) to isolate them from one
/// another, or the same one to let them coordinate. A clone shares the
/// engine but counts its own open resources.
pub struct AlkCtx {
    pub(crate) engine: Arc<dyn Engine>,
    pub(crate) limits: Limits,
    pub(crate) clock: Arc<dyn Clock>,
    /// The streams, opened on first use.
    streams: Arc<tokio::sync::OnceCell<Streams>>,
    /// The locks, opened on first use.
    locks: Arc<tokio::sync::OnceCell<Locks>>,
    /// The free-standing rate limiters, opened on first use.
    limiters: Arc<tokio::sync::OnceCell<Limiters>>,
    /// The schedules, opened on first use.
    schedules: Arc<tokio::sync::OnceCell<Schedules>>,
    /// Resources this instance holds.
    open: Arc<AtomicUsize>,
    /// `wasi:keyvalue` state.
    pub(crate) keyvalue: crate::keyvalue::KeyvalueState,
}

impl Clone for AlkCtx {
    fn clone(&self) -> Self {
        AlkCtx {
            engine: self.engine.clone(),
            limits: self.limits,
            clock: self.clock.clone(),
            streams: self.streams.clone(),
            locks: self.locks.clone(),
            limiters: self.limiters.clone(),
            schedules: self.schedules.clone(),
            open: Default::default(),
            keyvalue: crate::keyvalue::KeyvalueState::new(self.keyvalue.default_bucket.clone()),
        }
    }
}

impl std::fmt::Debug for AlkCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlkCtx")
            .field("engine", &self.engine.describe())
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl AlkCtx {
    /// A builder with the defaults: the file engine on data directory
    /// `.alk` (relative to the current directory) when the `turso` feature
    /// is on, default limits, the system clock.
    pub fn builder() -> AlkCtxBuilder {
        AlkCtxBuilder::default()
    }

    /// The engine that keeps this context's data.
    pub fn engine(&self) -> &Arc<dyn Engine> {
        &self.engine
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Counts one more open resource of kind `what`, refusing it past
    /// [`Limits::max_open_resources`].
    pub(crate) fn slot(&self, what: &str) -> AlkResult<Slot> {
        let limit = self.limits.max_open_resources;
        let held = self.open.fetch_add(1, Ordering::AcqRel);
        let slot = Slot(self.open.clone());
        if held >= limit {
            return Err(AlkError::InvalidArgument(format!(
                "cannot open another {what}: this guest holds {held} alk resources, the host's limit; drop some first"
            )));
        }
        Ok(slot)
    }

    /// Resources this instance holds now.
    pub fn open_resources(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// The current time by this context's clock.
    pub(crate) fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// This context's clock (for waits that re-read it).
    pub(crate) fn clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    /// The streams, opened on first use.
    pub(crate) async fn streams(&self) -> AlkResult<Streams> {
        self.streams
            .get_or_try_init(|| Streams::open(&*self.engine, self.limits.stream))
            .await
            .cloned()
    }

    /// The schedules, opened on first use.
    pub(crate) async fn schedules(&self) -> AlkResult<Schedules> {
        self.schedules
            .get_or_try_init(|| Schedules::open(&*self.engine))
            .await
            .cloned()
    }

    /// The locks, opened on first use.
    pub(crate) async fn locks(&self) -> AlkResult<Locks> {
        self.locks
            .get_or_try_init(|| Locks::open(&*self.engine))
            .await
            .cloned()
    }

    /// The free-standing rate limiters, opened on first use.
    pub(crate) async fn limiters(&self) -> AlkResult<Limiters> {
        self.limiters
            .get_or_try_init(|| Limiters::open(&*self.engine))
            .await
            .cloned()
    }
}

/// Builds an [`AlkCtx`].
#[derive(Clone)]
pub struct AlkCtxBuilder {
    engine: Option<Arc<dyn Engine>>,
    #[cfg(feature = "turso")]
    data_dir: PathBuf,
    #[cfg(feature = "turso")]
    store: StoreOptions,
    limits: Limits,
    clock: Arc<dyn Clock>,
    keyvalue_bucket: String,
}

impl Default for AlkCtxBuilder {
    fn default() -> Self {
        AlkCtxBuilder {
            engine: None,
            #[cfg(feature = "turso")]
            data_dir: PathBuf::from(".alk"),
            #[cfg(feature = "turso")]
            store: StoreOptions::default(),
            limits: Limits::default(),
            clock: Arc::new(SystemClock),
            keyvalue_bucket: crate::keyvalue::DEFAULT_BUCKET.to_string(),
        }
    }
}

impl AlkCtxBuilder {
    /// Keeps the data in turso files under `dir` (created on first use, not
    /// before), the default engine. Replaces an [`AlkCtxBuilder::engine`].
    #[cfg(feature = "turso")]
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = dir.into();
        self.engine = None;
        self
    }
    /// Keeps the data in `engine`; contexts built with the same engine
    /// share its stores and wakes.
    pub fn engine(mut self, engine: Arc<dyn Engine>) -> Self {
        self.engine = Some(engine);
        self
    }
    /// Size limits for guest input.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }
    /// The clock used for expiry.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
    /// Every option of the file engine at once (retry policy, durability,
    /// formats of new stores).
    #[cfg(feature = "turso")]
    pub fn store_options(mut self, options: StoreOptions) -> Self {
        self.store = options;
        self
    }
    /// How contended operations of the file engine are retried before
    /// `busy` is returned.
    #[cfg(feature = "turso")]
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.store.retry = retry;
        self
    }
    /// When commits of the file engine count as done; [`Durability::Full`]
    /// by default.
    #[cfg(feature = "turso")]
    pub fn durability(mut self, durability: Durability) -> Self {
        self.store.durability = durability;
        self
    }

    /// The format of queue files the default engine creates:
    /// `localqueue.v4` (every job option, queue limits, unique sends and
    /// results) by default, `localqueue.v3` for a data directory shared
    /// with hosts that know no newer format, or `localqueue.v1`
    /// for a data directory shared with a program that reads only v1.
    /// Existing files keep their format either way (see
    /// [`alk_store_turso::migrate_queue`]).
    #[cfg(feature = "turso")]
    pub fn new_queues(mut self, new_queues: NewQueues) -> Self {
        self.store.new_queues = new_queues;
        self
    }
    /// The format of kv bucket files the default engine creates:
    /// `localkv.v1` by default, or `localkv.v2` (a version per put).
    /// Existing files keep their format either way (see
    /// [`alk_store_turso::migrate_kv`]).
    #[cfg(feature = "turso")]
    pub fn new_kv(mut self, new_kv: NewKv) -> Self {
        self.store.new_kv = new_kv;
        self
    }

    /// The bucket a `wasi:keyvalue` store identifier of `""` opens
    /// ([`crate::keyvalue::DEFAULT_BUCKET`] unless set); other identifiers
    /// name their bucket.
    pub fn keyvalue_default_bucket(mut self, name: impl Into<String>) -> Self {
        self.keyvalue_bucket = name.into();
        self
    }

    /// The context. Without an [`AlkCtxBuilder::engine`] it keeps its data
    /// in the file engine on [`AlkCtxBuilder::data_dir`]; in a build without
    /// the `turso` feature every store call then fails with a
    /// `store-setup` error saying an engine must be given.
    pub fn build(self) -> AlkCtx {
        #[cfg(feature = "turso")]
        let engine = self
            .engine
            .unwrap_or_else(|| Arc::new(TursoEngine::new(self.data_dir, self.store)));
        #[cfg(not(feature = "turso"))]
        let engine = self
            .engine
            .unwrap_or_else(|| Arc::new(crate::no_engine::NoEngine));
        AlkCtx {
            engine,
            limits: self.limits,
            clock: self.clock,
            streams: Default::default(),
            locks: Default::default(),
            limiters: Default::default(),
            schedules: Default::default(),
            open: Default::default(),
            keyvalue: crate::keyvalue::KeyvalueState::new(self.keyvalue_bucket),
        }
    }
}

/// What host bindings run on: the context plus the resource table of the
/// instance.
pub struct AlkCtxView<'a> {
    /// The alk context.
    pub ctx: &'a mut AlkCtx,
    /// The instance's resource table (shared with WASI).
    pub table: &'a mut ResourceTable,
}

/// Implemented by an embedder's store data to give alk its context.
///
/// ```
/// use alk_host::{AlkCtx, AlkCtxView, AlkView};
/// use wasmtime::component::ResourceTable;
///
/// struct MyState { alk: AlkCtx, table: ResourceTable }
///
/// impl AlkView for MyState {
///     fn alk(&mut self) -> AlkCtxView<'_> {
///         AlkCtxView { ctx: &mut self.alk, table: &mut self.table }
///     }
/// }
/// ```
pub trait AlkView: Send {
    /// The alk context and resource table of this instance.
    fn alk(&mut self) -> AlkCtxView<'_>;
}
