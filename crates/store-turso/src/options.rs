//! How stores are opened and operated: [`StoreOptions`] (the retry policy
//! and the [`Durability`] of commits) and the formats of the queue and kv
//! files a host creates ([`NewQueues`], [`NewKv`]).

use crate::retry::RetryPolicy;

/// When a commit counts as done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Durability {
    /// Every commit is synced to disk before it returns (`synchronous =
    /// FULL`): nothing acknowledged is lost, even on power failure.
    #[default]
    Full,
    /// Commits return once written to the operating system (`synchronous =
    /// NORMAL`): nothing is lost when a process crashes or is killed, but
    /// the last commits before a power failure or kernel crash may be. The
    /// store stays consistent either way. Several times faster for small
    /// writes.
    Relaxed,
}

/// The format of the queue files a host creates. Existing files keep
/// theirs whatever this says (`localqueue.v2` files included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NewQueues {
    /// `localqueue.v4`: everything of v3, with fewer index writes per
    /// message.
    #[default]
    V4,
    /// `localqueue.v3`: every job option, and the queue limits, unique
    /// sends and results (for a data directory shared with hosts that know
    /// no newer format).
    V3,
    /// `localqueue.v1`, for a data directory shared with a program that
    /// reads only v1 files: plain messages only.
    V1,
}

/// The format of the kv bucket files a host creates. Existing files keep
/// theirs whatever this says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NewKv {
    /// `localkv.v1`, the format every program sharing the data directory
    /// layout has read.
    #[default]
    V1,
    /// `localkv.v2`: a version per put, so compare-and-swap compares
    /// versions instead of values.
    V2,
}

/// How stores are opened and operated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreOptions {
    /// Retrying contention.
    pub retry: RetryPolicy,
    /// When commits count as done.
    pub durability: Durability,
    /// The format of new queue files.
    pub new_queues: NewQueues,
    /// The format of new kv bucket files.
    pub new_kv: NewKv,
}

impl From<RetryPolicy> for StoreOptions {
    fn from(retry: RetryPolicy) -> Self {
        StoreOptions {
            retry,
            ..StoreOptions::default()
        }
    }
}
