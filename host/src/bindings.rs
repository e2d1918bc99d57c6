//! The generated bindings of the `alk:store` package and of the
//! `wasi:keyvalue` drafts alk serves,
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

/// The `wasi:keyvalue` drafts alk serves over its kv buckets: each draft's
/// `imports` world, generated from the WIT vendored in `wit/deps`.
pub mod keyvalue {
    /// `wasi:keyvalue@0.2.0-draft` (wasmtime's, with `u64` cursors).
    pub mod draft {
        wasmtime::component::bindgen!({
            path: "../wit",
            world: "wasi:keyvalue/imports@0.2.0-draft",
            imports: { default: async | trappable | tracing },
            with: {
                "wasi:keyvalue/store@0.2.0-draft.bucket": crate::keyvalue::Bucket,
            },
        });
        /// The draft's interfaces.
        pub use self::wasi::keyvalue0_2_0_draft as api;
    }

    /// `wasi:keyvalue@0.2.0-draft2` (string cursors, signed increments,
    /// compare-and-swap).
    pub mod draft2 {
        wasmtime::component::bindgen!({
            path: "../wit",
            world: "wasi:keyvalue/imports@0.2.0-draft2",
            imports: { default: async | trappable | tracing },
            with: {
                "wasi:keyvalue/store@0.2.0-draft2.bucket": crate::keyvalue::Bucket,
                "wasi:keyvalue/atomics@0.2.0-draft2.cas": crate::keyvalue::Cas,
            },
        });
        /// The draft's interfaces.
        pub use self::wasi::keyvalue0_2_0_draft2 as api;
    }
}
