mod remote;
mod replica;
mod server;
mod snapshot;

pub use remote::{database_opts, Remote};
pub use replica::Replica;
pub use server::InProcessServer;
