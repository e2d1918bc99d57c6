//! [`AlkCtx`], its builder, and the view that host bindings run on.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

use wasmtime::component::ResourceTable;

use crate::store::kv::KvLimits;
use crate::store::lock::LockStore;
use crate::store::stream::{StreamLimits, StreamStore};
use crate::store::{Durability, RetryPolicy, StoreOptions};

/// The source of "now" for expiry decisions, in unix epoch milliseconds.
///
/// The host reads the time through this trait only, so embedders and tests
/// can inject a clock and exercise TTLs without sleeping.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the unix epoch.
    fn now_ms(&self) -> i64;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to; for tests.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        ManualClock(AtomicI64::new(now_ms))
    }
    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
    /// Sets the clock.
    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Limits applied to what a guest sends and holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Key-value limits.
    pub kv: KvLimits,
    /// Stream limits.
    pub stream: StreamLimits,
    /// Most alk resources (buckets, queues, subscriptions, transactions,
    /// locks, listeners, and the pollables made from them) one instance may
    /// hold at once. Opening one more is an `invalid-argument` error (or a
    /// trap, for calls that cannot return an error) until the guest drops
    /// some.
    pub max_open_resources: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            kv: KvLimits::default(),
            stream: StreamLimits::default(),
            max_open_resources: 1024,
        }
    }
}

/// One resource counted against [`Limits::max_open_resources`]; held by
/// the resource, released when it is dropped.
#[derive(Debug)]
pub(crate) struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The per-instance state of the alk capabilities: where data lives, the
/// limits, the clock and the retry policy.
///
/// Each plugin (guest instance) of an embedder gets its own `AlkCtx`; give
/// plugins different data directories to isolate them from one another, or
/// the same one to let them coordinate. A clone shares the stores but
/// counts its own open resources.
pub struct AlkCtx {
    pub(crate) data_dir: PathBuf,
    pub(crate) limits: Limits,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) retry: RetryPolicy,
    pub(crate) durability: Durability,
    /// The stream store, opened on first use.
    pub(crate) streams: Arc<tokio::sync::OnceCell<StreamStore>>,
    /// The lock store, opened on first use.
    pub(crate) locks: Arc<tokio::sync::OnceCell<LockStore>>,
    /// Resources this instance holds.
    open: Arc<AtomicUsize>,
}

impl Clone for AlkCtx {
    fn clone(&self) -> Self {
        AlkCtx {
            data_dir: self.data_dir.clone(),
            limits: self.limits,
            clock: self.clock.clone(),
            retry: self.retry,
            durability: self.durability,
            streams: self.streams.clone(),
            locks: self.locks.clone(),
            open: Default::default(),
        }
    }
}

impl std::fmt::Debug for AlkCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlkCtx")
            .field("data_dir", &self.data_dir)
            .field("limits", &self.limits)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl AlkCtx {
    /// A builder with the defaults: data directory `.alk` (relative to the
    /// current directory), default limits, the system clock.
    pub fn builder() -> AlkCtxBuilder {
        AlkCtxBuilder::default()
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Counts one more open resource of kind `what`, refusing it past
    /// [`Limits::max_open_resources`].
    pub(crate) fn slot(&self, what: &str) -> crate::AlkResult<Slot> {
        let limit = self.limits.max_open_resources;
        let held = self.open.fetch_add(1, Ordering::AcqRel);
        let slot = Slot(self.open.clone());
        if held >= limit {
            return Err(crate::AlkError::InvalidArgument(format!(
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

    /// How this context's stores are opened.
    pub(crate) fn store_options(&self) -> StoreOptions {
        StoreOptions {
            retry: self.retry,
            durability: self.durability,
        }
    }

    /// This context's clock.
    pub(crate) fn clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    /// The stream store of the data directory, opened on first use.
    pub(crate) async fn stream_store(&self) -> crate::AlkResult<StreamStore> {
        self.streams
            .get_or_try_init(|| {
                StreamStore::open(&self.data_dir, self.limits.stream, self.store_options())
            })
            .await
            .cloned()
    }

    /// The lock store of the data directory, opened on first use.
    pub(crate) async fn lock_store(&self) -> crate::AlkResult<LockStore> {
        self.locks
            .get_or_try_init(|| LockStore::open(&self.data_dir, self.store_options()))
            .await
            .cloned()
    }
}

/// Builds an [`AlkCtx`].
#[derive(Clone)]
pub struct AlkCtxBuilder {
    data_dir: PathBuf,
    limits: Limits,
    clock: Arc<dyn Clock>,
    retry: RetryPolicy,
    durability: Durability,
}

impl Default for AlkCtxBuilder {
    fn default() -> Self {
        AlkCtxBuilder {
            data_dir: PathBuf::from(".alk"),
            limits: Limits::default(),
            clock: Arc::new(SystemClock),
            retry: RetryPolicy::default(),
            durability: Durability::default(),
        }
    }
}

impl AlkCtxBuilder {
    /// Where stores live. Created on first use, not before.
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = dir.into();
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
    /// How contended operations are retried before `busy` is returned.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }
    /// When commits count as done; [`Durability::Full`] by default.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }
    /// The context.
    pub fn build(self) -> AlkCtx {
        AlkCtx {
            data_dir: self.data_dir,
            limits: self.limits,
            clock: self.clock,
            retry: self.retry,
            durability: self.durability,
            streams: Default::default(),
            locks: Default::default(),
            open: Default::default(),
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
