//! Embedding the library the way a plugin host does: its own store data,
//! its own accessor, one interface linked, its own engine.

use std::sync::Arc;

use alk_host::{AlkCtx, AlkCtxView};
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::p2::bindings::Command;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::common::*;

/// A plugin host's store data: no `AlkView` implementation, on purpose.
struct Plugin {
    wasi: WasiCtx,
    alk: AlkCtx,
    table: ResourceTable,
}

impl WasiView for Plugin {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The embedder's accessor, passed to `add_to_linker_with`.
fn alk_of(p: &mut Plugin) -> AlkCtxView<'_> {
    AlkCtxView {
        ctx: &mut p.alk,
        table: &mut p.table,
    }
}

/// Runs `hello` with only WASI and `alk:store/kv` linked, through the
/// closure form, on the given context; its stdout.
fn run_hello(alk: AlkCtx, visitor: &str) -> String {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = Engine::new(&Config::new()).unwrap();
        let mut linker = Linker::<Plugin>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
        alk_host::worlds::kv::add_to_linker_with(&mut linker, alk_of).unwrap();
        let out = MemoryOutputPipe::new(1 << 20);
        let plugin = Plugin {
            wasi: WasiCtx::builder()
                .args(&["hello", visitor])
                .stdout(out.clone())
                .build(),
            alk,
            table: ResourceTable::new(),
        };
        let mut store = Store::new(&engine, plugin);
        let component = wasmtime::component::Component::from_file(&engine, guest("hello")).unwrap();
        let command = Command::instantiate_async(&mut store, &component, &linker)
            .await
            .expect("hello needs nothing but WASI and alk:store/kv");
        let status = command.wasi_cli_run().call_run(&mut store).await.unwrap();
        assert!(status.is_ok(), "hello failed");
        String::from_utf8(out.contents().to_vec()).unwrap()
    })
}

#[test]
fn one_interface_links_with_the_embedders_own_accessor_and_engine() {
    // Any engine: here the in-memory one, shared by two plugins.
    let engine: Arc<dyn alk_store::Engine> = Arc::new(alk_store::memory::MemoryEngine::new());
    let first = run_hello(AlkCtx::builder().engine(engine.clone()).build(), "ada");
    let second = run_hello(AlkCtx::builder().engine(engine).build(), "bob");
    assert!(first.contains("This is the first run"), "{first}");
    assert!(second.contains("has now run 2 times"), "{second}");
    assert!(second.contains("visitors: bob, ada"), "{second}");
    // A plugin on another engine sees none of it.
    let alone = run_hello(
        AlkCtx::builder()
            .engine(Arc::new(alk_store::memory::MemoryEngine::new()))
            .build(),
        "cy",
    );
    assert!(alone.contains("This is the first run"), "{alone}");
}
