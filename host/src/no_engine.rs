//! The engine of a context built without one in a build without the file
//! engine: every store call says what to do instead of keeping data
//! nowhere.

use std::sync::Arc;

use alk_store::kv::KvEngine;
use alk_store::lock::LockEngine;
use alk_store::queue::QueueEngine;
use alk_store::schedule::ScheduleEngine;
use alk_store::stream::StreamEngine;
use alk_store::tx::TxEngine;
use alk_store::wake::Wakes;
use alk_store::{AlkError, AlkResult, Catalog, Engine};
use async_trait::async_trait;

/// No engine: each call is a `store-setup` error.
pub(crate) struct NoEngine;

impl NoEngine {
    fn refuse<T>(&self) -> AlkResult<T> {
        Err(AlkError::StoreSetup {
            path: Default::default(),
            found: None,
            supported: "an engine given to the context",
            message: "this build of alk-host has no default engine (its `turso` feature is off): give the context one with AlkCtxBuilder::engine".into(),
        })
    }
}

#[async_trait]
impl Engine for NoEngine {
    async fn bucket(&self, _name: &str) -> AlkResult<Arc<dyn KvEngine>> {
        self.refuse()
    }
    async fn queue(&self, _name: &str) -> AlkResult<Arc<dyn QueueEngine>> {
        self.refuse()
    }
    async fn streams(&self) -> AlkResult<Arc<dyn StreamEngine>> {
        self.refuse()
    }
    async fn locks(&self) -> AlkResult<Arc<dyn LockEngine>> {
        self.refuse()
    }
    async fn schedules(&self) -> AlkResult<Arc<dyn ScheduleEngine>> {
        self.refuse()
    }
    async fn begin(&self) -> AlkResult<Box<dyn TxEngine>> {
        self.refuse()
    }
    fn wakes(&self) -> AlkResult<Wakes> {
        self.refuse()
    }
    fn describe(&self) -> String {
        "no engine".into()
    }
    async fn catalog(&self) -> AlkResult<Catalog> {
        self.refuse()
    }
}
