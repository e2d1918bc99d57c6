//! Integration tests: guest components run against the host, through the
//! library and through the `alk-host` binary, in one and in several OS
//! processes. Guests are built by `cargo xtask guests` (run by
//! `cargo xtask test`).

mod common;
mod browser;
mod contract;
mod coord;
mod embedders;
mod embedding;
mod format;
mod guest_limits;
mod guest_recipes;
mod hello;
mod hostile;
mod instances;
mod jobs;
mod keyvalue;
mod kills;
mod kv_clock;
mod lock_processes;
mod multiprocess;
mod operators;
mod orders_example;
mod postgres_cli;
mod postgres_fault;
mod postgres_timeout;
mod powerloss;
mod queue_limits;
mod queue_processes;
mod scheduling;
mod serve;
mod soak;
mod stream_processes;
mod wake_processes;
