pub mod capi;
pub mod rsapi;
pub mod sync_engine_io;
pub mod turso_async_operation;
