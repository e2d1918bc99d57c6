//! `alk-host`: a WebAssembly component host that gives guests durable,
//! shared coordination storage through the `alk:store` WIT package.
//!
//! Stores are [turso](https://crates.io/crates/turso) database files in
//! multi-process WAL mode under one data directory, so several host processes
//! (and several guests in one process) can share them safely.
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
//! # async fn example() -> anyhow::Result<()> {
//! let mut config = Config::new();
//! config.async_support(true);
//! let engine = Engine::new(&config)?;
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
//! To run a command component with everything linked, [`Runner`] does the
//! above (plus memory and time limits) in one call; it is what
//! `alk-host run` uses.

#![deny(missing_docs)]

/// Defines a capability module's linker functions: `add_to_linker` for its
/// world (`<name>-imports`: the `types` interface and its own) and
/// `add_interface_to_linker` (its own interface only, for the all-in world).
macro_rules! capability_linker {
    ($name:literal, $iface:ident) => {
        #[doc = concat!("Adds the imports of the `alk:store/", $name, "-imports` world (the `types` and `", $name, "` interfaces) to `linker`.")]
        pub fn add_to_linker<T: crate::AlkView + 'static>(
            linker: &mut wasmtime::component::Linker<T>,
        ) -> wasmtime::Result<()> {
            crate::add_types_to_linker(linker)?;
            add_interface_to_linker(linker)
        }

        pub(crate) fn add_interface_to_linker<T: crate::AlkView + 'static>(
            linker: &mut wasmtime::component::Linker<T>,
        ) -> wasmtime::Result<()> {
            $iface::add_to_linker::<T, crate::HasAlk>(linker, |t| t.alk())
        }
    };
}

mod bindings;
mod ctx;
mod error;
pub mod kv;
pub mod lock;
pub mod notify;
pub mod queue;
mod run;
pub mod store;
pub mod stream;

pub use ctx::{
    AlkCtx, AlkCtxBuilder, AlkCtxView, AlkView, Clock, Limits, ManualClock, SystemClock,
};
pub use error::{AlkError, AlkResult, CallError};
pub use run::{RunOptions, RunOutcome, RunState, RunStatus, Runner};
pub use store::{Durability, RetryPolicy};

use bindings::alk::store::types;
use wasmtime::component::{HasData, Linker};

/// Adds every alk interface (the `alk:store/imports` world) to `linker`.
pub fn add_to_linker<T: AlkView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    add_types_to_linker(linker)?;
    kv::add_interface_to_linker(linker)?;
    queue::add_interface_to_linker(linker)?;
    stream::add_interface_to_linker(linker)?;
    lock::add_interface_to_linker(linker)?;
    notify::add_interface_to_linker(linker)?;
    Ok(())
}

/// The `HasData` of every alk interface: bindings run on an [`AlkCtxView`].
pub(crate) struct HasAlk;

impl HasData for HasAlk {
    type Data<'a> = AlkCtxView<'a>;
}

pub(crate) fn add_types_to_linker<T: AlkView + 'static>(
    linker: &mut Linker<T>,
) -> wasmtime::Result<()> {
    types::add_to_linker::<T, HasAlk>(linker, |t| t.alk())
}

/// The instant `timeout_ms` from now; absurdly long timeouts are capped at
/// a year (a guest cannot overflow the host's clock).
pub(crate) fn deadline_in(timeout_ms: u64) -> tokio::time::Instant {
    let timeout = std::time::Duration::from_millis(timeout_ms.min(365 * 24 * 3600 * 1000));
    tokio::time::Instant::now() + timeout
}

impl types::Host for AlkCtxView<'_> {
    fn convert_error(&mut self, err: CallError) -> wasmtime::Result<types::Error> {
        match err {
            CallError::Domain(e) => Ok(e.into()),
            CallError::Trap(e) => Err(e),
        }
    }
}
