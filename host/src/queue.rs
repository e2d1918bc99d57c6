//! Host glue of the `queue` interface: translates, then calls
//! [`alk_store::queue::Queue`], which checks, waits and asks the engine.

use std::sync::Arc;

use alk_store::Clock;
use alk_store::queue::{self as store, Queue as Store};
use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

use alk_store::jobs::{self as jobs, JobState as StoreState};

use crate::bindings::alk::store::queue::{
    self, AckOutcome, ClaimOptions, Job, JobInfo, JobResult, JobState, Message, Payload,
    QueueLimits, QueueStats, RateLimit, Retried, SendOptions, Sent, Taken, UniqueOptions,
};
use crate::ctx::{AlkCtxView, Slot};
use crate::error::CallError;

/// An open queue, as held in the instance's resource table.
#[derive(Debug)]
pub struct Queue {
    store: Store,
    _slot: Slot,
}

capability_linker!("queue", queue);

impl queue::Host for AlkCtxView<'_> {}

pub(crate) fn to_store(payload: Payload) -> store::Payload {
    match payload {
        Payload::Json(s) => store::Payload::Json(s),
        Payload::Text(s) => store::Payload::Text(s),
    }
}

fn message(d: store::Delivery) -> Message {
    Message {
        payload: from_store(d.payload),
        receipt: d.receipt,
        attempt: d.attempt,
    }
}

pub(crate) fn from_store(payload: store::Payload) -> Payload {
    match payload {
        store::Payload::Json(s) => Payload::Json(s),
        store::Payload::Text(s) => Payload::Text(s),
    }
}

pub(crate) fn options(o: SendOptions) -> jobs::SendOptions {
    jobs::SendOptions {
        priority: o.priority,
        delay_ms: o.delay_ms,
        run_at_ms: o.run_at_ms,
        max_attempts: o.max_attempts,
        backoff_base_ms: o.backoff_base_ms,
        expires_in_ms: o.expires_in_ms,
        group: o.group,
    }
}

pub(crate) fn job(d: store::Delivery) -> Job {
    Job {
        id: d.id,
        payload: from_store(d.payload),
        receipt: d.receipt,
        attempt: d.attempt,
        max_attempts: d.max_attempts,
        priority: d.priority,
        group: d.group,
    }
}

pub(crate) fn ms(t: i64) -> u64 {
    t.max(0) as u64
}

pub(crate) fn info(j: jobs::JobInfo) -> JobInfo {
    JobInfo {
        id: j.id,
        payload: from_store(j.payload),
        state: match j.state {
            StoreState::Waiting => JobState::Waiting,
            StoreState::Delayed => JobState::Delayed,
            StoreState::InFlight => JobState::InFlight,
            StoreState::Dead => JobState::Dead,
        },
        attempt: j.attempt,
        max_attempts: j.max_attempts,
        priority: j.priority,
        group: j.group,
        enqueued_at_ms: ms(j.enqueued_at),
        due_at_ms: ms(j.due_at),
        expires_at_ms: j.expires_at.map(ms),
        last_error: j.last_error,
        died_at_ms: j.died_at.map(ms),
    }
}

pub(crate) fn retried(r: jobs::Retried) -> Retried {
    match r {
        jobs::Retried::Scheduled(at) => Retried::Scheduled(ms(at)),
        jobs::Retried::Dead => Retried::DeadLettered,
        // Stale receipts are an error of `Queue::retry`.
        jobs::Retried::Gone | jobs::Retried::Stale => Retried::Gone,
    }
}

/// The WIT form of stored send options.
pub(crate) fn wit_options(o: jobs::SendOptions) -> SendOptions {
    SendOptions {
        priority: o.priority,
        delay_ms: o.delay_ms,
        run_at_ms: o.run_at_ms,
        max_attempts: o.max_attempts,
        backoff_base_ms: o.backoff_base_ms,
        expires_in_ms: o.expires_in_ms,
        group: o.group,
    }
}

pub(crate) fn unique(u: UniqueOptions) -> jobs::UniqueOptions {
    jobs::UniqueOptions {
        key: u.key,
        for_ms: u.for_ms,
    }
}

pub(crate) fn rate(r: RateLimit) -> alk_store::rate::RateLimit {
    alk_store::rate::RateLimit {
        capacity: r.capacity,
        refill: r.refill,
        interval_ms: r.interval_ms,
    }
}

fn wit_rate(r: alk_store::rate::RateLimit) -> RateLimit {
    RateLimit {
        capacity: r.capacity,
        refill: r.refill,
        interval_ms: r.interval_ms,
    }
}

pub(crate) fn taken(t: alk_store::rate::Taken) -> Taken {
    match t {
        alk_store::rate::Taken::Granted(left) => Taken::Granted(left),
        alk_store::rate::Taken::WaitMs(ms) => Taken::WaitMs(ms),
    }
}

fn limits(l: QueueLimits) -> jobs::QueueLimits {
    jobs::QueueLimits {
        group_concurrency: l.group_concurrency,
        max_in_flight: l.max_in_flight,
        rate: l.rate.map(rate),
        rate_per_group: l.rate_per_group,
    }
}

fn wit_limits(l: jobs::QueueLimits) -> QueueLimits {
    QueueLimits {
        group_concurrency: l.group_concurrency,
        max_in_flight: l.max_in_flight,
        rate: l.rate.map(wit_rate),
        rate_per_group: l.rate_per_group,
    }
}

/// Ready when a message of the queue may be receivable.
struct QueueReady {
    store: Store,
    clock: Arc<dyn Clock>,
    _slot: Slot,
}

#[wasmtime_wasi::async_trait]
impl Pollable for QueueReady {
    async fn ready(&mut self) {
        // An error makes the pollable ready: the guest's next call reports it.
        let _ = self.store.wait_due(&*self.clock, None).await;
    }
}

impl queue::HostQueue for AlkCtxView<'_> {
    async fn open(&mut self, name: String) -> Result<Resource<Queue>, CallError> {
        let slot = self.ctx.slot("queue")?;
        let store = Store::open(&*self.ctx.engine, &name).await?;
        Ok(self.table.push(Queue { store, _slot: slot })?)
    }

    async fn name(&mut self, q: Resource<Queue>) -> wasmtime::Result<String> {
        Ok(self.table.get(&q)?.store.name().to_string())
    }

    async fn send(&mut self, q: Resource<Queue>, payload: Payload) -> Result<u64, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        Ok(store.send(&to_store(payload), now).await?)
    }

    async fn send_batch(
        &mut self,
        q: Resource<Queue>,
        payloads: Vec<Payload>,
    ) -> Result<Vec<u64>, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        let payloads: Vec<store::Payload> = payloads.into_iter().map(to_store).collect();
        Ok(store
            .send_batch(&payloads, now)
            .await?)
    }

    async fn ack_batch(
        &mut self,
        q: Resource<Queue>,
        receipts: Vec<String>,
    ) -> Result<Vec<AckOutcome>, CallError> {
        let store = self.table.get(&q)?.store.clone();
        Ok(store
            .ack_batch(&receipts)
            .await?
            .into_iter()
            .map(|s| match s {
                store::Settled::Done => AckOutcome::Acked,
                store::Settled::Gone => AckOutcome::Gone,
                store::Settled::Stale => AckOutcome::Stale,
            })
            .collect())
    }

    async fn receive(
        &mut self,
        q: Resource<Queue>,
        max: u32,
        visibility_ms: Option<u64>,
    ) -> Result<Vec<Message>, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        let deliveries = store.receive(max, visibility_ms, now).await?;
        Ok(deliveries.into_iter().map(message).collect())
    }

    async fn receive_wait(
        &mut self,
        q: Resource<Queue>,
        max: u32,
        visibility_ms: Option<u64>,
        timeout_ms: u64,
    ) -> Result<Vec<Message>, CallError> {
        let clock = self.ctx.clock();
        let store = self.table.get(&q)?.store.clone();
        let deadline = alk_store::time::wait_deadline(timeout_ms);
        let deliveries = store
            .receive_wait(max, visibility_ms, &*clock, deadline)
            .await?;
        Ok(deliveries.into_iter().map(message).collect())
    }

    async fn subscribe(&mut self, q: Resource<Queue>) -> wasmtime::Result<Resource<DynPollable>> {
        let ready = QueueReady {
            store: self.table.get(&q)?.store.clone(),
            clock: self.ctx.clock(),
            _slot: self.ctx.slot("pollable")?,
        };
        let ready = self.table.push(ready)?;
        subscribe(self.table, ready)
    }

    async fn ack(&mut self, q: Resource<Queue>, receipt: String) -> Result<(), CallError> {
        let store = self.table.get(&q)?.store.clone();
        Ok(store.ack(&receipt).await?)
    }

    async fn nack(&mut self, q: Resource<Queue>, receipt: String) -> Result<(), CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        Ok(store.nack(&receipt, now).await?)
    }

    async fn purge(&mut self, q: Resource<Queue>) -> Result<(), CallError> {
        let store = self.table.get(&q)?.store.clone();
        Ok(store.purge().await?)
    }

    async fn send_with(
        &mut self,
        q: Resource<Queue>,
        payload: Payload,
        opts: SendOptions,
    ) -> Result<u64, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        Ok(store
            .send_with(&to_store(payload), &options(opts), now)
            .await?)
    }

    async fn send_batch_with(
        &mut self,
        q: Resource<Queue>,
        payloads: Vec<Payload>,
        opts: SendOptions,
    ) -> Result<Vec<u64>, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        let payloads: Vec<store::Payload> = payloads.into_iter().map(to_store).collect();
        Ok(store
            .send_batch_with(&payloads, &options(opts), now)
            .await?)
    }

    async fn claim(
        &mut self,
        q: Resource<Queue>,
        opts: ClaimOptions,
    ) -> Result<Vec<Job>, CallError> {
        let store = self.table.get(&q)?.store.clone();
        let got = match opts.wait_ms {
            None => {
                let now = self.ctx.now();
                store
                    .claim(opts.max, opts.visibility_ms, opts.min_priority, now)
                    .await?
            }
            Some(wait) => {
                let clock = self.ctx.clock();
                let deadline = alk_store::time::wait_deadline(wait);
                store
                    .claim_wait(
                        opts.max,
                        opts.visibility_ms,
                        opts.min_priority,
                        &*clock,
                        deadline,
                    )
                    .await?
            }
        };
        Ok(got.into_iter().map(job).collect())
    }

    async fn heartbeat(
        &mut self,
        q: Resource<Queue>,
        receipt: String,
        extend_ms: u64,
    ) -> Result<bool, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        Ok(store.heartbeat(&receipt, extend_ms, now).await?)
    }

    async fn retry(
        &mut self,
        q: Resource<Queue>,
        receipt: String,
        reason: String,
        delay_ms: Option<u64>,
    ) -> Result<Retried, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        Ok(retried(
            store.retry(&receipt, &reason, delay_ms, now).await?,
        ))
    }

    async fn fail(
        &mut self,
        q: Resource<Queue>,
        receipt: String,
        reason: String,
    ) -> Result<bool, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        Ok(store.fail(&receipt, &reason, now).await?)
    }

    async fn cancel(&mut self, q: Resource<Queue>, id: u64) -> Result<bool, CallError> {
        let store = self.table.get(&q)?.store.clone();
        Ok(store.cancel(id).await?)
    }

    async fn get_job(&mut self, q: Resource<Queue>, id: u64) -> Result<Option<JobInfo>, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        Ok(store.job(id, now).await?.map(info))
    }

    async fn sweep_expired(&mut self, q: Resource<Queue>) -> Result<u64, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        Ok(store.sweep_expired(now).await?)
    }

    async fn dead_letters(
        &mut self,
        q: Resource<Queue>,
        after: Option<u64>,
        max: u32,
    ) -> Result<Vec<JobInfo>, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        Ok(store
            .dead_letters(after, max, now)
            .await?
            .into_iter()
            .map(info)
            .collect())
    }

    async fn redrive(
        &mut self,
        q: Resource<Queue>,
        ids: Vec<u64>,
    ) -> Result<Vec<Option<u64>>, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        Ok(store.redrive(&ids, now).await?)
    }

    async fn purge_dead_letters(&mut self, q: Resource<Queue>) -> Result<u64, CallError> {
        let store = self.table.get(&q)?.store.clone();
        Ok(store.purge_dead().await?)
    }

    async fn stats(&mut self, q: Resource<Queue>) -> Result<QueueStats, CallError> {
        let store = self.table.get(&q)?.store.clone();
        let s = store.stats(self.ctx.now()).await?;
        Ok(QueueStats {
            waiting: s.waiting,
            delayed: s.delayed,
            in_flight: s.in_flight,
            dead: s.dead,
            oldest_waiting_enqueued_at_ms: s.oldest_waiting_enqueued_at.map(|t| t.max(0) as u64),
            groups: s.groups,
            groups_in_flight: s.groups_in_flight,
        })
    }

    async fn send_unique(
        &mut self,
        q: Resource<Queue>,
        payload: Payload,
        opts: SendOptions,
        unique_opts: UniqueOptions,
    ) -> Result<Sent, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        let sent = store
            .send_unique(
                &to_store(payload),
                &options(opts),
                &unique(unique_opts),
                now,
            )
            .await?;
        Ok(Sent {
            id: sent.id,
            duplicate: sent.duplicate,
        })
    }

    async fn limits(&mut self, q: Resource<Queue>) -> Result<QueueLimits, CallError> {
        let store = self.table.get(&q)?.store.clone();
        Ok(wit_limits(store.limits().await?))
    }

    async fn set_limits(&mut self, q: Resource<Queue>, l: QueueLimits) -> Result<(), CallError> {
        let store = self.table.get(&q)?.store.clone();
        Ok(store.set_limits(&limits(l)).await?)
    }

    async fn try_take(
        &mut self,
        q: Resource<Queue>,
        n: u32,
        group: Option<String>,
    ) -> Result<Taken, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        Ok(taken(store.try_take(n, group.as_deref(), now).await?))
    }

    async fn complete(
        &mut self,
        q: Resource<Queue>,
        receipt: String,
        result: Payload,
        keep_ms: Option<u64>,
    ) -> Result<bool, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        Ok(store
            .complete(&receipt, &to_store(result), keep_ms, now)
            .await?)
    }

    async fn get_result(
        &mut self,
        q: Resource<Queue>,
        id: u64,
    ) -> Result<Option<JobResult>, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        Ok(store.result(id, now).await?.map(|r| JobResult {
            id: r.id,
            payload: from_store(r.payload),
            completed_at_ms: ms(r.completed_at),
            expires_at_ms: ms(r.expires_at),
        }))
    }

    async fn delete_result(&mut self, q: Resource<Queue>, id: u64) -> Result<bool, CallError> {
        let now = self.ctx.now();
        let store = self.table.get(&q)?.store.clone();
        Ok(store.delete_result(id, now).await?)
    }

    async fn drop(&mut self, q: Resource<Queue>) -> wasmtime::Result<()> {
        self.table.delete(q)?;
        Ok(())
    }
}
