//! What a storage engine provides.
//!
//! An engine keeps the data; the core ([`crate::kv`], [`crate::queue`], …)
//! keeps the rules. Every guest call is checked by the core (names, keys,
//! sizes, times) before the engine sees it; the engine runs statements and
//! reports what it found. Adding an engine means implementing this trait
//! and the per-capability traits it hands out — nothing else changes.

use std::sync::Arc;

use async_trait::async_trait;

use crate::error::AlkResult;
use crate::kv::KvEngine;
use crate::lock::LockEngine;
use crate::queue::QueueEngine;
use crate::schedule::ScheduleEngine;
use crate::stream::StreamEngine;
use crate::tx::TxEngine;
use crate::wake::Wakes;

/// The stores an engine holds, as operators' tools list them: read without
/// creating or changing anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    /// The buckets, by name.
    pub buckets: Vec<String>,
    /// The queues, by name.
    pub queues: Vec<String>,
    /// Whether the store of streams (with their transactions and the
    /// schedules) exists.
    pub stream_store: bool,
    /// The streams ever published to, by name (empty without a stream
    /// store).
    pub streams: Vec<String>,
    /// Whether the store of locks exists.
    pub lock_store: bool,
    /// What was found where a store belongs but is not one that can be
    /// read (another program's file, a damaged one, a name that is not a
    /// store name), each as `(where, why)`. Nothing was opened or changed.
    pub unreadable: Vec<(String, String)>,
}

impl Catalog {
    /// Whether the engine holds no store at all.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty() && self.queues.is_empty() && !self.stream_store && !self.lock_store
    }
}

/// A storage engine: where stores live and how they are read and written.
///
/// Names passed in are already checked by the core ([`crate::names`]).
/// Opening may create the store; a store of another format, or a location
/// that cannot be used, is [`crate::AlkError::StoreSetup`].
#[async_trait]
pub trait Engine: Send + Sync + 'static {
    /// The key-value bucket `name`.
    async fn bucket(&self, name: &str) -> AlkResult<Arc<dyn KvEngine>>;

    /// The queue `name`.
    async fn queue(&self, name: &str) -> AlkResult<Arc<dyn QueueEngine>>;

    /// The streams (all of them live in one store per engine).
    async fn streams(&self) -> AlkResult<Arc<dyn StreamEngine>>;

    /// The locks (all of them live in one store per engine).
    async fn locks(&self) -> AlkResult<Arc<dyn LockEngine>>;

    /// The schedules (all of them live in one store per engine).
    async fn schedules(&self) -> AlkResult<Arc<dyn ScheduleEngine>>;

    /// Begins a transaction across the mechanisms (streams, queues,
    /// outboxes): see [`TxEngine`]. It may take a write lock for its whole
    /// life; the core ([`crate::tx::Tx`]) begins it at a transaction's first
    /// operation and bounds how long it stays open.
    async fn begin(&self) -> AlkResult<Box<dyn TxEngine>>;

    /// The wakes of this engine's stores in this process, carried to the
    /// other processes that use the same stores.
    fn wakes(&self) -> AlkResult<Wakes>;

    /// Where the stores are, for messages (a directory, a database).
    fn describe(&self) -> String;

    /// The stores that exist, listed without creating any (see
    /// [`Catalog`]).
    async fn catalog(&self) -> AlkResult<Catalog>;

    /// Finishes what the engine still does in the background for calls
    /// that already returned (such as telling other hosts about a commit),
    /// so that nothing is lost when the process exits next. Hosts call it
    /// when a guest's run ends; bounded in time by each engine.
    async fn flush(&self) {}
}

/// A shared engine is an engine: `&Arc<dyn Engine>` (or `&Arc<MyEngine>`)
/// may be passed wherever a `&dyn Engine` is asked for.
#[async_trait]
impl<E: Engine + ?Sized> Engine for Arc<E> {
    async fn bucket(&self, name: &str) -> AlkResult<Arc<dyn KvEngine>> {
        (**self).bucket(name).await
    }

    async fn queue(&self, name: &str) -> AlkResult<Arc<dyn QueueEngine>> {
        (**self).queue(name).await
    }

    async fn streams(&self) -> AlkResult<Arc<dyn StreamEngine>> {
        (**self).streams().await
    }

    async fn locks(&self) -> AlkResult<Arc<dyn LockEngine>> {
        (**self).locks().await
    }

    async fn schedules(&self) -> AlkResult<Arc<dyn ScheduleEngine>> {
        (**self).schedules().await
    }

    async fn begin(&self) -> AlkResult<Box<dyn TxEngine>> {
        (**self).begin().await
    }

    fn wakes(&self) -> AlkResult<Wakes> {
        (**self).wakes()
    }

    fn describe(&self) -> String {
        (**self).describe()
    }

    async fn catalog(&self) -> AlkResult<Catalog> {
        (**self).catalog().await
    }

    async fn flush(&self) {
        (**self).flush().await
    }
}
