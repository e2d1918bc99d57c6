//! Outboxes: work recorded in the same transaction as the change that
//! caused it, and handed to a worker afterwards.
//!
//! An outbox is a queue with a name no guest can give: outbox `mail` is
//! kept in queue `__alkstore_outbox_mail`, reachable only through
//! [`Outbox`] and [`crate::tx::Tx::outbox_enqueue`]. A worker takes one job
//! at a time ([`Outbox::run_once`]): a success acknowledges it, a failure
//! retries it on the queue's backoff curve, and a worker that dies leaves
//! it to come back after its visibility timeout.

use std::future::Future;

use crate::engine::Engine;
use crate::error::AlkResult;
use crate::jobs::{Retried, SendOptions};
use crate::names::{RESERVED_PREFIX, check_name};
use crate::queue::{Delivery, Payload, Queue};
use crate::time::Clock;

/// How long a worker holds an outbox job before it is handed out again,
/// unless told otherwise (milliseconds).
pub const DEFAULT_OUTBOX_VISIBILITY_MS: u64 = 60_000;

/// The backing queue of outbox `name` (checked like every name).
pub fn backing_queue(name: &str) -> AlkResult<String> {
    check_name("outbox", name)?;
    Ok(format!("{RESERVED_PREFIX}outbox_{name}"))
}

/// What one [`Outbox::run_once`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOnce {
    /// No job was due.
    Idle,
    /// The worker succeeded; the job (its id) was acknowledged.
    Done(u64),
    /// The worker failed; what the retry did.
    Failed(u64, Retried),
}

/// An outbox, as guests and workers use it.
#[derive(Debug, Clone)]
pub struct Outbox {
    name: String,
    queue: Queue,
}

impl Outbox {
    /// Opens (creating on first use) outbox `name` of `engine`.
    pub async fn open(engine: &dyn Engine, name: &str) -> AlkResult<Outbox> {
        let queue = backing_queue(name)?;
        Ok(Outbox {
            name: name.to_string(),
            queue: Queue::open_checked(engine, &queue).await?,
        })
    }

    /// The outbox's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The backing queue (for inspection: dead letters, jobs).
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// Records a job outside any transaction; its id.
    pub async fn enqueue(
        &self,
        payload: &Payload,
        options: &SendOptions,
        now: i64,
    ) -> AlkResult<u64> {
        self.queue.send_with(payload, options, now).await
    }

    /// Takes one due job for `visibility_ms` (default
    /// [`DEFAULT_OUTBOX_VISIBILITY_MS`]).
    pub async fn claim_one(
        &self,
        visibility_ms: Option<u64>,
        now: i64,
    ) -> AlkResult<Option<Delivery>> {
        let visibility = visibility_ms.unwrap_or(DEFAULT_OUTBOX_VISIBILITY_MS);
        Ok(self
            .queue
            .claim(1, Some(visibility), None, now)
            .await?
            .into_iter()
            .next())
    }

    /// Ends a delivery as done: the job is deleted.
    pub async fn succeeded(&self, receipt: &str) -> AlkResult<()> {
        self.queue.ack(receipt).await
    }

    /// Ends a delivery as failed with `error`: the job is due again after
    /// its backoff delay, or goes to the dead letters when its attempts are
    /// used up.
    pub async fn failed(&self, receipt: &str, error: &str, now: i64) -> AlkResult<Retried> {
        self.queue.retry(receipt, error, None, now).await
    }

    /// Takes one due job and runs `deliver` on it: `Ok` acknowledges it,
    /// `Err(text)` retries it with the backoff curve. A worker slower than
    /// the visibility timeout may see its job handed out again (and its
    /// acknowledgement refused as stale): deliveries must be idempotent.
    pub async fn run_once<F, Fut>(
        &self,
        visibility_ms: Option<u64>,
        clock: &dyn Clock,
        deliver: F,
    ) -> AlkResult<RunOnce>
    where
        F: FnOnce(Delivery) -> Fut,
        Fut: Future<Output = Result<(), String>>,
    {
        let Some(job) = self.claim_one(visibility_ms, clock.now_ms()).await? else {
            return Ok(RunOnce::Idle);
        };
        let (id, receipt) = (job.id, job.receipt.clone());
        match deliver(job).await {
            Ok(()) => {
                self.succeeded(&receipt).await?;
                Ok(RunOnce::Done(id))
            }
            Err(error) => Ok(RunOnce::Failed(
                id,
                self.failed(&receipt, &error, clock.now_ms()).await?,
            )),
        }
    }
}
