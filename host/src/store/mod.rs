//! Storage: the on-disk formats and the SQL that reads and writes them.
//!
//! Nothing in this module knows about wasmtime; every operation takes plain
//! Rust values (and the current time, so expiry is testable without
//! sleeping) and returns [`crate::AlkResult`].

pub mod kv;
pub mod lock;
pub mod names;
pub mod open;
pub mod queue;
pub mod retry;
pub mod stream;
pub mod wake;

pub use open::{Format, Store, open_store};
pub use retry::RetryPolicy;
