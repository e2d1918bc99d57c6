//! Schedules: a job sent to a queue at every boundary of a fixed interval,
//! by whichever runner holds the scheduler's leadership.
//!
//! A schedule is stored (name, interval, queue, payload, send options, next
//! boundary); nothing fires it but a runner ([`Schedules::run`]), and of the
//! runners sharing a store only the holder of the lock
//! [`SCHEDULER_LOCK`] fires. Firing moves the next boundary forward and
//! sends the jobs of the boundaries passed in one engine transaction that
//! checks the boundary it read is still the stored one, so two runners that
//! both think they lead still send each boundary's job once. After a long
//! downtime a runner sends at most the catch-up cap of jobs for the
//! boundaries missed and skips the rest.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::engine::Engine;
use crate::error::{AlkError, AlkResult};
use crate::jobs::{SendOptions, Stamp, random_word};
use crate::lock::{Acquired, LockEngine};
use crate::names::check_name;
use crate::queue::{Payload, check_payload};
use crate::time::Clock;
use crate::wake::{Wakes, topics};

/// The lock whose holder fires the schedules.
pub const SCHEDULER_LOCK: &str = "__alkstore_scheduler";

/// The most jobs one schedule sends for the boundaries missed while no
/// runner ran; older missed boundaries are skipped.
pub const DEFAULT_CATCH_UP: u32 = 64;

/// How long the leadership lasts without renewal (milliseconds); a runner
/// renews at a third of it, and takes over within it after a leader dies.
pub const DEFAULT_LEADER_TTL_MS: u64 = 15_000;

/// The largest catch-up cap: one batch.
pub const MAX_CATCH_UP: u32 = 1_000;

/// The longest leadership TTL a runner accepts: one day.
pub const MAX_LEADER_TTL_MS: u64 = 86_400_000;

/// The longest interval a spec may give: 10 years.
pub const MAX_EVERY_MS: u64 = 10 * 366 * 86_400_000;

/// Parses `@every <n><s|m|h|d>`; the interval in milliseconds.
pub fn parse_spec(spec: &str) -> AlkResult<u64> {
    let bad = |why: &str| {
        AlkError::InvalidSpec(format!(
            "{spec:?} {why}; a schedule is `@every <n><unit>` with a whole number n of at least 1 and a unit s, m, h or d (for example `@every 30s`); cron expressions are not supported"
        ))
    };
    let Some(rest) = spec.strip_prefix("@every ") else {
        return Err(bad("does not start with `@every `"));
    };
    let (n, ms_per) = match rest.char_indices().last() {
        Some((at, 's')) => (&rest[..at], 1_000u64),
        Some((at, 'm')) => (&rest[..at], 60_000),
        Some((at, 'h')) => (&rest[..at], 3_600_000),
        Some((at, 'd')) => (&rest[..at], 86_400_000),
        _ => return Err(bad("does not end in a unit s, m, h or d")),
    };
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("has no whole number before the unit"));
    }
    let every = n
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(ms_per))
        .filter(|ms| *ms <= MAX_EVERY_MS)
        .ok_or_else(|| bad("is longer than 10 years"))?;
    if every == 0 {
        return Err(bad("has an interval of zero"));
    }
    Ok(every)
}

/// A stored schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRow {
    /// Its name (bucket name rules).
    pub name: String,
    /// The spec as given.
    pub spec: String,
    /// The interval the spec gives, in milliseconds.
    pub every_ms: u64,
    /// The queue each boundary sends to.
    pub queue: String,
    /// The payload of every job.
    pub payload: Payload,
    /// The options of every job, resolved when the job is sent.
    pub options: SendOptions,
    /// The next boundary not fired yet (epoch ms).
    pub next_due: i64,
}

/// What an engine does for schedules. Arguments are checked by
/// [`Schedules`].
#[async_trait]
pub trait ScheduleEngine: Send + Sync {
    /// Stores `row`, replacing a schedule of the same name — in one
    /// statement that keeps the stored next boundary when the stored
    /// interval equals `row.every_ms` (a runner may have fired since the
    /// caller looked; writing back an older boundary would fire it again).
    async fn put(&self, row: &ScheduleRow) -> AlkResult<()>;

    /// Deletes schedule `name`; whether there was one.
    async fn remove(&self, name: &str) -> AlkResult<bool>;

    /// Schedule `name`.
    async fn get(&self, name: &str) -> AlkResult<Option<ScheduleRow>>;

    /// Every schedule, by name.
    async fn list(&self) -> AlkResult<Vec<ScheduleRow>>;

    /// In one transaction, if schedule `name` still exists with next
    /// boundary `due`: sends one copy of its payload to its queue per
    /// stamp, and sets its next boundary to `next`. False (and nothing
    /// done) when it is gone or another runner moved it first.
    async fn fire(
        &self,
        name: &str,
        due: i64,
        next: i64,
        stamps: &[Stamp],
        now: i64,
    ) -> AlkResult<bool>;
}

/// What a runner tells its [`RunnerOptions::events`] hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunnerEvent {
    /// The runner took the leadership, with this fencing token.
    Leading(u64),
    /// The runner sent `jobs` jobs for schedule `schedule` to `queue`.
    Fired {
        /// The schedule.
        schedule: String,
        /// Its queue.
        queue: String,
        /// Jobs sent.
        jobs: u64,
    },
}

/// A hook a runner calls on each [`RunnerEvent`].
pub type EventHook = Arc<dyn Fn(&RunnerEvent) + Send + Sync>;

/// How a runner runs.
#[derive(Clone)]
pub struct RunnerOptions {
    /// Who this runner is, as the leadership lock shows it.
    pub owner: String,
    /// How long leadership lasts without renewal (clamped to 3 ms ..=
    /// [`MAX_LEADER_TTL_MS`]).
    pub leader_ttl_ms: u64,
    /// Most jobs sent per schedule for missed boundaries (clamped to 1 ..=
    /// [`MAX_CATCH_UP`]).
    pub catch_up: u32,
    /// Longest sleep between two looks at the schedules (a follower's
    /// attempts to lead, a leader's look for changed schedules).
    pub poll: Duration,
    /// Called on each event (for logs and progress output).
    pub events: Option<EventHook>,
}

impl std::fmt::Debug for RunnerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerOptions")
            .field("owner", &self.owner)
            .field("leader_ttl_ms", &self.leader_ttl_ms)
            .field("catch_up", &self.catch_up)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

impl Default for RunnerOptions {
    fn default() -> Self {
        RunnerOptions {
            owner: format!("runner {} {:08x}", std::process::id(), random_word() as u32),
            leader_ttl_ms: DEFAULT_LEADER_TTL_MS,
            catch_up: DEFAULT_CATCH_UP,
            poll: Duration::from_secs(1),
            events: None,
        }
    }
}

/// What a runner did until it stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunReport {
    /// Whether it held the leadership at some point.
    pub led: bool,
    /// Jobs it sent.
    pub fired: u64,
}

/// The schedules of an engine, as guests and runners use them.
#[derive(Clone)]
pub struct Schedules {
    engine: Arc<dyn ScheduleEngine>,
    locks: Arc<dyn LockEngine>,
    wakes: Wakes,
}

impl std::fmt::Debug for Schedules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schedules").finish_non_exhaustive()
    }
}

impl Schedules {
    /// The schedules of `engine`.
    pub async fn open(engine: &dyn Engine) -> AlkResult<Schedules> {
        Ok(Schedules {
            engine: engine.schedules().await?,
            locks: engine.locks().await?,
            wakes: engine.wakes()?,
        })
    }

    /// Creates or replaces schedule `name`: every interval of `spec`, a job
    /// with `payload` and `options` goes to `queue`. Replacing a schedule
    /// with the same interval keeps its next boundary; a new one (or a new
    /// interval) starts one interval after `now`.
    pub async fn schedule(
        &self,
        name: &str,
        spec: &str,
        queue: &str,
        payload: &Payload,
        options: &SendOptions,
        now: i64,
    ) -> AlkResult<()> {
        check_name("schedule", name)?;
        let every_ms = parse_spec(spec)?;
        check_name("queue", queue)?;
        check_payload(payload)?;
        Stamp::resolve(options, now)?;
        // The engine keeps the stored boundary when the interval is kept.
        let next_due = now.saturating_add(every_ms as i64);
        self.engine
            .put(&ScheduleRow {
                name: name.to_string(),
                spec: spec.to_string(),
                every_ms,
                queue: queue.to_string(),
                payload: payload.clone(),
                options: options.clone(),
                next_due,
            })
            .await?;
        self.wakes.signal(topics::SCHEDULES);
        Ok(())
    }

    /// Deletes schedule `name`; whether there was one.
    pub async fn unschedule(&self, name: &str) -> AlkResult<bool> {
        check_name("schedule", name)?;
        let removed = self.engine.remove(name).await?;
        self.wakes.signal(topics::SCHEDULES);
        Ok(removed)
    }

    /// Schedule `name`.
    pub async fn get(&self, name: &str) -> AlkResult<Option<ScheduleRow>> {
        check_name("schedule", name)?;
        self.engine.get(name).await
    }

    /// Every schedule, by name.
    pub async fn list(&self) -> AlkResult<Vec<ScheduleRow>> {
        self.engine.list().await
    }

    /// Fires every schedule due at `now`: per schedule, one job for each
    /// boundary passed, at most `catch_up` of them, and the next boundary
    /// moves past `now`. The number of jobs sent. Whoever calls it fires;
    /// [`Schedules::run`] calls it only while leading.
    pub async fn tick(&self, now: i64, catch_up: u32) -> AlkResult<u64> {
        self.tick_with(now, catch_up, None, None).await
    }

    /// [`Schedules::tick`] for a runner: `lease` is renewed between firings
    /// when due (a long tick must not outlive the leadership), and a
    /// schedule whose firing fails is logged and left for the next look
    /// (one broken schedule does not stop the others). Fails only when
    /// the schedules cannot be listed or the leadership is lost.
    async fn tick_with(
        &self,
        now: i64,
        catch_up: u32,
        events: Option<&EventHook>,
        mut lease: Option<(&mut Lease, &dyn Clock)>,
    ) -> AlkResult<u64> {
        let cap = i64::from(catch_up.clamp(1, MAX_CATCH_UP));
        let mut sent = 0;
        for row in self.engine.list().await? {
            if row.next_due > now {
                continue;
            }
            if let Some((lease, clock)) = lease.as_mut() {
                lease.keep(&*self.locks, clock.now_ms()).await?;
            }
            let every = i64::try_from(row.every_ms).unwrap_or(0);
            if every <= 0 {
                tracing::warn!(target: "alk", schedule = %row.name, "skipping a schedule stored with an interval of {} ms", row.every_ms);
                continue;
            }
            let passed = now.saturating_sub(row.next_due) / every + 1;
            let next = row.next_due.saturating_add(passed.saturating_mul(every));
            let jobs = passed.min(cap) as usize;
            let stamps = match Stamp::resolve(&row.options, now) {
                Ok(stamp) => vec![stamp; jobs],
                Err(e) => {
                    // Options that no longer resolve (a run-at overflowing
                    // the clock) cannot be sent: the boundaries are
                    // skipped rather than fired again and again.
                    tracing::warn!(target: "alk", schedule = %row.name, "skipping boundaries: {e}");
                    Vec::new()
                }
            };
            match self
                .engine
                .fire(&row.name, row.next_due, next, &stamps, now)
                .await
            {
                Ok(true) if !stamps.is_empty() => {
                    sent += stamps.len() as u64;
                    self.wakes.signal(&topics::queue(&row.queue));
                    if let Some(hook) = events {
                        hook(&RunnerEvent::Fired {
                            schedule: row.name.clone(),
                            queue: row.queue.clone(),
                            jobs: stamps.len() as u64,
                        });
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(target: "alk", schedule = %row.name, "firing failed, trying again at the next look: {e}");
                }
            }
        }
        Ok(sent)
    }

    /// The earliest next boundary of any schedule.
    async fn next_due(&self) -> AlkResult<Option<i64>> {
        Ok(self.engine.list().await?.iter().map(|r| r.next_due).min())
    }

    /// Runs a runner until `stop` completes: it tries to take the
    /// leadership, and while it holds it fires due schedules and renews it.
    /// Stopping fires what is due one last time and releases the
    /// leadership. Losing it (it expired or was taken before a renewal)
    /// ends the run with [`AlkError::LeadershipLost`]; the caller decides
    /// whether to run again as a follower. Transient `busy` failures are
    /// logged and retried; other failures release the leadership and end
    /// the run.
    pub async fn run(
        &self,
        options: &RunnerOptions,
        clock: Arc<dyn Clock>,
        stop: impl Future<Output = ()>,
    ) -> AlkResult<RunReport> {
        let ttl = options.leader_ttl_ms.clamp(3, MAX_LEADER_TTL_MS) as i64;
        let mut report = RunReport::default();
        let mut held: Option<Lease> = None;
        let listening = self.wakes.listen(topics::SCHEDULES);
        let topic = listening.topic();
        tokio::pin!(stop);
        let result = loop {
            let now = clock.now_ms();
            let step: AlkResult<()> = async {
                match &mut held {
                    None => {
                        if let Some(token) = self
                            .locks
                            .acquire(SCHEDULER_LOCK, &options.owner, now, now.saturating_add(ttl))
                            .await?
                        {
                            tracing::info!(target: "alk", owner = %options.owner, token, "this runner now leads the scheduler");
                            held = Some(Lease {
                                lock: Acquired {
                                    name: SCHEDULER_LOCK.into(),
                                    owner: options.owner.clone(),
                                    token,
                                },
                                ttl,
                                renew_at: now.saturating_add(ttl / 3),
                            });
                            report.led = true;
                            if let Some(hook) = &options.events {
                                hook(&RunnerEvent::Leading(token));
                            }
                        }
                    }
                    Some(lease) => lease.keep(&*self.locks, now).await?,
                }
                if let Some(lease) = &mut held {
                    report.fired += self
                        .tick_with(
                            now,
                            options.catch_up,
                            options.events.as_ref(),
                            Some((lease, &*clock)),
                        )
                        .await?;
                }
                Ok(())
            }
            .await;
            match step {
                Ok(()) => {}
                Err(AlkError::Busy(m)) => {
                    tracing::warn!(target: "alk", "scheduler runner: store busy, trying again: {m}");
                }
                Err(e) => break Err(e),
            }
            let now = clock.now_ms();
            let mut wait = options.poll;
            if let Some(lease) = &held {
                let until_renew = lease.renew_at.saturating_sub(now).max(0) as u64;
                wait = wait.min(Duration::from_millis(until_renew));
                if let Ok(Some(due)) = self.next_due().await {
                    wait = wait.min(Duration::from_millis(due.saturating_sub(now).max(0) as u64));
                }
            } else {
                wait = wait.min(Duration::from_millis((ttl / 4).max(1) as u64));
            }
            let seen = topic.seq();
            tokio::select! {
                _ = &mut stop => break Ok(()),
                _ = tokio::time::sleep(wait.max(Duration::from_millis(1))) => {}
                _ = topic.changed_since(seen) => {}
            }
        };
        if let Some(mut lease) = held {
            if result.is_ok() {
                // A last look while still leading: every boundary up to the
                // stop is fired before the leadership is given back.
                let now = clock.now_ms();
                if lock_is_live(&*self.locks, &lease.lock, now).await {
                    match self
                        .tick_with(
                            now,
                            options.catch_up,
                            options.events.as_ref(),
                            Some((&mut lease, &*clock)),
                        )
                        .await
                    {
                        Ok(n) => report.fired += n,
                        Err(e) => {
                            tracing::warn!(target: "alk", "scheduler runner: last look failed: {e}")
                        }
                    }
                }
            }
            if !matches!(result, Err(AlkError::LeadershipLost(_))) {
                let _ = self.locks.release(&lease.lock, clock.now_ms()).await;
            }
        }
        result.map(|()| report)
    }
}

/// A runner's hold on the scheduler's lock.
struct Lease {
    lock: Acquired,
    ttl: i64,
    /// When to renew next (a third of the TTL after the last renewal).
    renew_at: i64,
}

impl Lease {
    /// Renews the lock when it is time; `leadership-lost` when it is gone.
    async fn keep(&mut self, locks: &dyn LockEngine, now: i64) -> AlkResult<()> {
        if now < self.renew_at {
            return Ok(());
        }
        if !locks
            .renew(&self.lock, now.saturating_add(self.ttl), now)
            .await?
        {
            return Err(AlkError::LeadershipLost(format!(
                "runner {:?} did not renew the lock {SCHEDULER_LOCK} (token {}) before it expired; another runner may lead now",
                self.lock.owner, self.lock.token
            )));
        }
        self.renew_at = now.saturating_add(self.ttl / 3);
        Ok(())
    }
}

/// Whether `lock` is still held at `now`.
async fn lock_is_live(locks: &dyn LockEngine, lock: &Acquired, now: i64) -> bool {
    matches!(
        locks.holder(&lock.name, now).await,
        Ok(Some(h)) if h.token == lock.token && h.owner == lock.owner
    )
}
