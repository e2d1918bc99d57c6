pub use turso_core::alloc::*;
