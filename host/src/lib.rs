//! `alk-host`: a WebAssembly component host that gives guests durable,
//! shared coordination storage through the `alk:store` WIT package.
//!
//! The data is kept by an [`Engine`] behind the engine-neutral rules of
//! [`alk_store`]: by default [`TursoEngine`], turso database files in
//! multi-process WAL mode under one data directory, so several host
//! processes (and several guests in one process) share them safely; or
//! [`PostgresEngine`], one schema of a PostgreSQL database shared by hosts on
//! many machines. Any engine can be passed to [`AlkCtxBuilder::engine`]:
//!
//! ```no_run
//! # async fn f() -> Result<(), alk_host::AlkError> {
//! use std::sync::Arc;
//! use alk_host::{AlkCtx, PostgresEngine};
//! let engine = PostgresEngine::connect_url("postgres://alk:secret@db.internal:5432/app").await?;
//! let ctx = AlkCtx::builder().engine(Arc::new(engine)).build();
//! # Ok(()) }
//! ```
//!
//! # Embedding
//!
//! Give your store data an [`AlkCtx`] and a resource table, implement
//! [`AlkView`] (and `wasmtime_wasi::WasiView` when the guest uses WASI), and
//! call the `add_to_linker` of the world your guests target — here the
//! all-in one, [`add_to_linker`]:
//!
//! ```no_run
//! use alk_host::{AlkCtx, AlkCtxView, AlkView};
//! use wasmtime::component::{Component, Linker, ResourceTable};
//! use wasmtime::{Config, Engine, Store};
//! use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
//!
//! struct Plugin {
//!     wasi: WasiCtx,
//!     alk: AlkCtx,
//!     table: ResourceTable,
//! }
//!
//! impl WasiView for Plugin {
//!     fn ctx(&mut self) -> WasiCtxView<'_> {
//!         WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
//!     }
//! }
//!
//! impl AlkView for Plugin {
//!     fn alk(&mut self) -> AlkCtxView<'_> {
//!         AlkCtxView { ctx: &mut self.alk, table: &mut self.table }
//!     }
//! }
//!
//! # async fn example() -> wasmtime::Result<()> {
//! let engine = Engine::new(&Config::new())?;
//! let mut linker = Linker::<Plugin>::new(&engine);
//! wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
//! alk_host::add_to_linker(&mut linker)?;
//!
//! // Each plugin gets its own context; its own data directory isolates it.
//! let plugin = Plugin {
//!     wasi: WasiCtx::builder().inherit_stdio().build(),
//!     alk: AlkCtx::builder().data_dir("plugins/billing/data").build(),
//!     table: ResourceTable::new(),
//! };
//! let mut store = Store::new(&engine, plugin);
//! let component = Component::from_file(&engine, "billing.wasm")?;
//! let command =
//!     wasmtime_wasi::p2::bindings::Command::instantiate_async(&mut store, &component, &linker)
//!         .await?;
//! let _ = command.wasi_cli_run().call_run(&mut store).await?;
//! # Ok(())
//! # }
//! ```
//!
//! To link one interface with an accessor of your own instead of
//! [`AlkView`], use the `add_to_linker_with` of its module (for example
//! [`kv::add_to_linker_with`]) or [`add_to_linker_with`]; the generated
//! [`bindings`] and their [`HasAlk`] marker are public for the same reason.
//!
//! To run a command component with everything linked, [`Runner`] does the
//! above (plus memory and time limits) in one call; it is what
//! `alk-host run` uses.

#![deny(missing_docs)]

/// Defines a capability module's linker functions: `add_to_linker` and
/// `add_to_linker_with` for its world (`<name>-imports`: the `types`
/// interface and its own), and `add_interface_to_linker` (its own
/// interface only, for the all-in world).
macro_rules! capability_linker {
    ($name:literal, $iface:ident) => {
        #[doc = concat!("Adds the imports of the `alk:store/", $name, "-imports` world (the `types` and `", $name, "` interfaces) to `linker`, reaching the context through [`crate::AlkView`].")]
        pub fn add_to_linker<T: crate::AlkView + 'static>(
            linker: &mut wasmtime::component::Linker<T>,
        ) -> wasmtime::Result<()> {
            add_to_linker_with(linker, |t: &mut T| t.alk())
        }

        #[doc = concat!("Adds the imports of the `alk:store/", $name, "-imports` world to `linker`, reaching the context through `get`.")]
        pub fn add_to_linker_with<T: Send + 'static>(
            linker: &mut wasmtime::component::Linker<T>,
            get: fn(&mut T) -> crate::AlkCtxView<'_>,
        ) -> wasmtime::Result<()> {
            crate::add_types_to_linker(linker, get)?;
            add_interface_to_linker(linker, get)
        }

        pub(crate) fn add_interface_to_linker<T: Send + 'static>(
            linker: &mut wasmtime::component::Linker<T>,
            get: fn(&mut T) -> crate::AlkCtxView<'_>,
        ) -> wasmtime::Result<()> {
            $iface::add_to_linker::<T, crate::HasAlk>(linker, get)
        }
    };
}

pub mod bindings;
mod ctx;
mod error;
pub mod keyvalue;
pub mod kv;
pub mod lock;
pub mod notify;
pub mod outbox;
pub mod queue;
mod run;
pub mod schedule;
pub mod stream;
pub mod tx;

pub use alk_store::outbox::{Outbox, RunOnce};
pub use alk_store::panic::is_contained as panic_is_contained;
pub use alk_store::schedule::{RunReport, RunnerEvent, RunnerOptions, Schedules};
pub use alk_store::tx::Tx;
pub use alk_store::{
    AlkError, AlkResult, Clock, Engine, KvLimits, Limits, ManualClock, StreamLimits, SystemClock,
};
pub use alk_store_postgres::{
    PostgresEngine, PostgresOptions, is_postgres_url, redact as redact_url,
};

/// The scheduler runner's defaults.
pub mod schedule_defaults {
    /// How long the leadership lasts without renewal (milliseconds).
    pub const LEADER_TTL_MS: u64 = alk_store::schedule::DEFAULT_LEADER_TTL_MS;
    /// Most jobs one schedule sends for missed boundaries.
    pub const CATCH_UP: u32 = alk_store::schedule::DEFAULT_CATCH_UP;
}
pub use alk_store_turso::kv::Migrated as MigratedKv;
pub use alk_store_turso::queue::Migrated;
pub use alk_store_turso::{Durability, NewKv, NewQueues, RetryPolicy, TursoEngine};

/// Moves bucket `name` under `data_dir` from `localkv.v1` to `localkv.v2`
/// (every key, value and expiry kept, each given a version), in one
/// transaction. Refused with `busy` while any process — this one included
/// — has the bucket open: run it before the host uses the bucket.
pub async fn migrate_kv(
    data_dir: &std::path::Path,
    name: &str,
) -> alk_store::AlkResult<MigratedKv> {
    alk_store::names::check_name("bucket", name)?;
    alk_store_turso::kv::KvStore::migrate(data_dir, name, RetryPolicy::default()).await
}

/// Moves queue `name` under `data_dir` from `localqueue.v1` to
/// `localqueue.v2` (ids, attempts, receipts and due times kept), in one
/// transaction. Refused with `busy` while any process — this one included —
/// has the queue open: run it before the host uses the queue.
pub async fn migrate_queue(
    data_dir: &std::path::Path,
    name: &str,
) -> alk_store::AlkResult<Migrated> {
    alk_store::names::check_name("queue", name)?;
    alk_store_turso::queue::QueueStore::migrate(data_dir, name, RetryPolicy::default()).await
}
pub use ctx::{AlkCtx, AlkCtxBuilder, AlkCtxView, AlkView};
pub use error::CallError;
pub use run::{RunOptions, RunOutcome, RunState, RunStatus, Runner};

use bindings::alk::store::types;
use wasmtime::component::{HasData, Linker};

/// Adds every alk interface (the `alk:store/imports` world) to `linker`,
/// reaching the context through [`AlkView`].
pub fn add_to_linker<T: AlkView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    add_to_linker_with(linker, |t: &mut T| t.alk())
}

/// Adds every alk interface (the `alk:store/imports` world) to `linker`,
/// reaching the context through `get`.
pub fn add_to_linker_with<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> AlkCtxView<'_>,
) -> wasmtime::Result<()> {
    add_types_to_linker(linker, get)?;
    kv::add_interface_to_linker(linker, get)?;
    queue::add_interface_to_linker(linker, get)?;
    stream::add_interface_to_linker(linker, get)?;
    lock::add_interface_to_linker(linker, get)?;
    notify::add_interface_to_linker(linker, get)?;
    tx::add_interface_to_linker(linker, get)?;
    outbox::add_interface_to_linker(linker, get)?;
    schedule::add_interface_to_linker(linker, get)?;
    Ok(())
}

/// The [`HasData`] of every alk interface: the generated [`bindings`] run
/// on an [`AlkCtxView`].
pub struct HasAlk;

impl HasData for HasAlk {
    type Data<'a> = AlkCtxView<'a>;
}

pub(crate) fn add_types_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> AlkCtxView<'_>,
) -> wasmtime::Result<()> {
    types::add_to_linker::<T, HasAlk>(linker, get)
}

impl types::Host for AlkCtxView<'_> {
    fn convert_error(&mut self, err: CallError) -> wasmtime::Result<types::Error> {
        match err {
            CallError::Domain(e) => Ok(e.into()),
            CallError::Trap(e) => Err(e),
        }
    }
}
