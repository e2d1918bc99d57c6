//! The generated bindings of the `alk:store` package (the only `bindgen!`),
//! for embedders that link single interfaces with their own accessor.
#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "../wit",
    world: "alk:store/imports",
    imports: { default: async | trappable | tracing },
    trappable_error_type: {
        "alk:store/types.error" => crate::error::CallError,
    },
    with: {
        "wasi:io/poll": wasmtime_wasi::p2::bindings::io::poll,
        "alk:store/kv.bucket": crate::kv::Bucket,
        "alk:store/queue.queue": crate::queue::Queue,
        "alk:store/stream.subscription": crate::stream::Subscription,
        "alk:store/stream.transaction": crate::tx::Transaction,
        "alk:store/lock.lock": crate::lock::Lock,
        "alk:store/notify.listener": crate::notify::Listener,
        "alk:store/tx.transaction": crate::tx::Transaction,
        "alk:store/outbox.outbox": crate::outbox::Outbox,
    },
});
