//! `alk-host`: a WebAssembly component host that gives guests durable,
//! shared coordination storage through the `alk:store` WIT package (and the
//! `wasi:keyvalue` drafts over the same buckets).
//!
//! The data is kept by an [`Engine`] behind the engine-neutral rules of
//! [`store`] (the `alk-store` crate, re-exported so that an embedder needs
//! one dependency). The engines are cargo features:
//!
//! | feature | engine | where the data is |
//! |---|---|---|
//! | `turso` (default) | [`TursoEngine`] | turso files in multi-process WAL mode under a data directory, shared by every process on the machine |
//! | `postgres` | `PostgresEngine` | one schema of a PostgreSQL database, shared by hosts on many machines |
//! | (always) | [`MemoryEngine`] | this process's memory, gone with it (tests, ephemeral plugins) |
//!
//! A build without `postgres` has no PostgreSQL client in its tree; a build
//! without `turso` has no turso, and a context must then be given an engine
//! ([`AlkCtxBuilder::engine`]). Any type implementing [`Engine`] can be
//! given, an engine of your own included; `alk_store::conformance` is the
//! suite it must pass.
//!
//! # The public face
//!
//! - a context per guest instance and its linkers: [`AlkCtx`] (built by
//!   [`AlkCtxBuilder`]), [`AlkView`] / [`AlkCtxView`], [`add_to_linker`] for
//!   the all-in world, [`worlds`] for a world per capability, [`keyvalue`]
//!   for the `wasi:keyvalue` drafts, [`bindings`] and [`HasAlk`] for
//!   linking single interfaces with an accessor of your own;
//! - a whole command run in one call: [`Runner`] with [`RunOptions`]; an
//!   HTTP handler served in one call: [`Runner::serve`] with
//!   [`ServeOptions`] (or [`Runner::bind`] and [`Server`]); what a guest
//!   may reach on the network: [`NetworkPolicy`]; what a component is:
//!   [`Kind`];
//! - engines: [`Engine`], [`MemoryEngine`], [`TursoEngine`] with
//!   [`StoreOptions`], `PostgresEngine` with `PostgresOptions`, and the
//!   engine crates themselves ([`turso`], `postgres`) for what only one
//!   engine has (format migrations, URL handling);
//! - the core's types for driving stores from Rust ([`store`]: queues,
//!   streams, the schedule runner, the outbox relay), its [`AlkError`],
//!   [`Limits`] and clocks.
//!
//! # Embedding shapes
//!
//! **A plugin system on files.** Give your store data an [`AlkCtx`] and a
//! resource table, implement [`AlkView`] (and `wasmtime_wasi::WasiView` when
//! the guest uses WASI), and call the `add_to_linker` of the world your
//! guests target — here the all-in one, [`add_to_linker`]:
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
//! **One capability, an accessor of your own.** A guest built against
//! `alk:store/kv-imports` needs only that world; link it through a closure
//! instead of [`AlkView`]:
//!
//! ```no_run
//! # use alk_host::{AlkCtx, AlkCtxView};
//! # use wasmtime::component::{Linker, ResourceTable};
//! struct State { alk: AlkCtx, table: ResourceTable }
//! # fn f(engine: &wasmtime::Engine) -> wasmtime::Result<()> {
//! let mut linker = Linker::<State>::new(engine);
//! alk_host::worlds::kv::add_to_linker_with(&mut linker, |s: &mut State| AlkCtxView {
//!     ctx: &mut s.alk,
//!     table: &mut s.table,
//! })?;
//! # Ok(()) }
//! ```
//!
//! **Whole runs in one call, on another engine.** [`Runner`] links
//! everything, applies memory and time limits and runs a command
//! component; it is what `alk-host run` uses. Tests and ephemeral plugins
//! can keep their data in memory:
//!
//! ```no_run
//! # async fn f() -> wasmtime::Result<()> {
//! use std::sync::Arc;
//! use alk_host::{AlkCtx, MemoryEngine, RunOptions, Runner};
//! let runner = Runner::new()?;
//! let component = runner.load("app.wasm".as_ref())?;
//! let ctx = AlkCtx::builder().engine(Arc::new(MemoryEngine::new())).build();
//! let outcome = runner.run(&component, "app", ctx, &RunOptions::default()).await?;
//! println!("exit code {}", outcome.exit_code());
//! # Ok(()) }
//! ```
//!
//! **HTTP handlers in one call.** A component exporting
//! `wasi:http/incoming-handler` is served with an instance per request, the
//! same linker and the same stores (what `alk-host serve` uses):
//!
//! ```no_run
//! # async fn f() -> wasmtime::Result<()> {
//! use alk_host::{AlkCtx, Runner, ServeOptions};
//! let runner = Runner::new()?;
//! let handler = runner.load("handler.wasm".as_ref())?;
//! let ctx = AlkCtx::builder().data_dir("data").build();
//! let opts = ServeOptions { addr: "127.0.0.1:8080".parse()?, ..ServeOptions::default() };
//! let server = runner.bind(&handler, ctx, &opts).await?;
//! println!("serving on http://{}/", server.local_addr());
//! // Serves until the future completes (a signal, say), then drains.
//! server.run(std::future::pending::<()>()).await?;
//! # Ok(()) }
//! ```
//!
//! With the `postgres` feature, hosts on many machines share one database:
//!
//! ```ignore
//! use std::sync::Arc;
//! use alk_host::{AlkCtx, PostgresEngine};
//! let engine = PostgresEngine::connect_url("postgres://alk:secret@db.internal:5432/app").await?;
//! let ctx = AlkCtx::builder().engine(Arc::new(engine)).build();
//! ```
//!
//! **Stores from Rust, without a guest.** The core's types take the same
//! engine: a producer process can send jobs that guests receive.
//!
//! ```no_run
//! # async fn f() -> alk_host::AlkResult<()> {
//! use alk_host::store::queue::{Payload, Queue};
//! use alk_host::{Clock, Engine, SystemClock, TursoEngine, StoreOptions};
//! let engine = TursoEngine::new("data", StoreOptions::default());
//! let jobs = Queue::open(&engine, "jobs").await?;
//! jobs.send(&Payload::Json(r#"{"order":1}"#.into()), SystemClock.now_ms()).await?;
//! # Ok(()) }
//! ```

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
mod http;
pub mod keyvalue;
mod kind;
mod kv;
mod limiter;
mod lock;
pub mod metrics;
mod network;
#[cfg(not(feature = "turso"))]
mod no_engine;
mod notify;
mod outbox;
mod queue;
mod run;
mod schedule;
mod serve;
mod stream;
mod tx;

/// A world per capability (`alk:store/<name>-imports`: the `types`
/// interface and the capability's own), for guests that import only one:
/// each module has `add_to_linker` (through [`AlkView`]) and
/// `add_to_linker_with` (through an accessor of your own).
pub mod worlds {
    /// `alk:store/kv-imports`.
    pub mod kv {
        pub use crate::kv::{add_to_linker, add_to_linker_with};
    }
    /// `alk:store/queue-imports`.
    pub mod queue {
        pub use crate::queue::{add_to_linker, add_to_linker_with};
    }
    /// `alk:store/stream-imports`.
    pub mod stream {
        pub use crate::stream::{add_to_linker, add_to_linker_with};
    }
    /// `alk:store/lock-imports`.
    pub mod lock {
        pub use crate::lock::{add_to_linker, add_to_linker_with};
    }
    /// `alk:store/notify-imports`.
    pub mod notify {
        pub use crate::notify::{add_to_linker, add_to_linker_with};
    }
    /// `alk:store/tx-imports`.
    pub mod tx {
        pub use crate::tx::{add_to_linker, add_to_linker_with};
    }
    /// `alk:store/outbox-imports`.
    pub mod outbox {
        pub use crate::outbox::{add_to_linker, add_to_linker_with};
    }
    /// `alk:store/schedule-imports`.
    pub mod schedule {
        pub use crate::schedule::{add_to_linker, add_to_linker_with};
    }
    /// `alk:store/limiter-imports` (since 0.1.4).
    pub mod limiter {
        pub use crate::limiter::{add_to_linker, add_to_linker_with};
    }
}

/// The engine-neutral core (`alk-store`): its capability types drive the
/// stores from Rust (queues, streams, the schedule runner, the outbox
/// relay), its `conformance` suite checks an engine of your own.
pub use alk_store as store;
pub use alk_store::memory::MemoryEngine;
pub use alk_store::{AlkError, AlkResult, Clock, Engine, Limits, ManualClock, SystemClock};

/// The file engine (`alk-store-turso`): format migrations, retry policy and
/// format choices beyond [`StoreOptions`].
#[cfg(feature = "turso")]
pub use alk_store_turso as turso;
#[cfg(feature = "turso")]
pub use alk_store_turso::{Durability, StoreOptions, TursoEngine};

/// The Postgres engine (`alk-store-postgres`): URL handling and its
/// options.
#[cfg(feature = "postgres")]
pub use alk_store_postgres as postgres;
#[cfg(feature = "postgres")]
pub use alk_store_postgres::{PostgresEngine, PostgresOptions};

pub use ctx::{AlkCtx, AlkCtxBuilder, AlkCtxView, AlkView};
pub use error::CallError;
pub use kind::Kind;
pub use network::NetworkPolicy;
pub use run::{RunOptions, RunOutcome, RunState, RunStatus, Runner};
pub use serve::{ServeOptions, Server};

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
    limiter::add_interface_to_linker(linker, get)?;
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
