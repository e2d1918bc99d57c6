//! The queues of the memory engine: messages by id, the round of groups,
//! and the dead letters.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use async_trait::async_trait;

use super::lock;
use crate::error::AlkError;
use crate::error::AlkResult;
use crate::jobs::{
    Beat, EXPIRED_ERROR, JobInfo, JobResult, JobState, QueueLimits, Retried, RetryDelay, Sent,
    Stamp, UNGROUPED_BUCKET, Unique, lapsed_error,
};
use crate::queue::{AckedBatch, Delivery, Payload, QueueEngine, QueueStats, Receipt, Settled};
use crate::rate::{Bucket, Taken, check_take};

/// One message of a queue.
#[derive(Clone)]
struct Msg {
    payload: Payload,
    enqueued_at: i64,
    visible_at: i64,
    /// When it became ready (claim order among messages without a group).
    ready_at: i64,
    attempt: u32,
    /// The claim of its current delivery, while it is in flight.
    claim: Option<uuid::Uuid>,
    priority: i32,
    group: Option<String>,
    max_attempts: Option<u32>,
    backoff_base_ms: Option<u64>,
    expires_at: Option<i64>,
    last_error: Option<String>,
}

/// A group in the round: its place (`served`, then `seq`) and priority.
struct Group {
    seq: i64,
    priority: i32,
    served: i64,
}

pub(super) struct QueueState {
    next_id: u64,
    msgs: BTreeMap<u64, Msg>,
    dead: BTreeMap<u64, (Msg, i64)>,
    groups: HashMap<String, Group>,
    /// The place in the round of the messages without a group (sequence 0:
    /// it joined first).
    lane_served: i64,
    next_seq: i64,
    limits: QueueLimits,
    /// The rate's buckets: `""` the queue's (or, per group, the messages
    /// without a group), else a group's.
    buckets: HashMap<String, Bucket>,
    /// Unique key → the message holding it and until when.
    unique: HashMap<String, (u64, Option<i64>)>,
    results: BTreeMap<u64, JobResult>,
}

impl Default for QueueState {
    fn default() -> Self {
        QueueState {
            next_id: 0,
            msgs: BTreeMap::new(),
            dead: BTreeMap::new(),
            groups: HashMap::new(),
            lane_served: 0,
            next_seq: 1,
            limits: QueueLimits::default(),
            buckets: HashMap::new(),
            unique: HashMap::new(),
            results: BTreeMap::new(),
        }
    }
}

#[derive(Default)]
pub(super) struct MemQueue(pub(super) Mutex<QueueState>);

/// Claims of every memory queue of the process: a receipt is never valid
/// for another queue's message.
static CLAIMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn info(id: u64, m: &Msg, state: JobState, died_at: Option<i64>) -> JobInfo {
    JobInfo {
        id,
        payload: m.payload.clone(),
        state,
        attempt: m.attempt,
        max_attempts: m.max_attempts,
        priority: m.priority,
        group: m.group.clone(),
        enqueued_at: m.enqueued_at,
        due_at: m.visible_at,
        expires_at: m.expires_at,
        last_error: m.last_error.clone(),
        died_at,
    }
}

/// One participant of the round picked by a claim, with the messages it
/// gives.
enum Pick {
    Group(String, Vec<u64>),
    Lane(Vec<u64>),
}

/// What a claim may still take: from the queue (its cap and a
/// queue-wide rate), and per rate bucket when the rate is per group.
struct Room {
    left: usize,
    /// Tokens of each per-group bucket still to be had in this claim.
    per_bucket: HashMap<String, usize>,
}

impl QueueState {
    pub(super) fn send(&mut self, payloads: &[Payload], stamp: &Stamp, now: i64) -> Vec<u64> {
        let q = self;
        let mut ids = Vec::new();
        if let Some(g) = &stamp.group {
            q.join(g, stamp.priority);
        }
        for p in payloads {
            q.next_id += 1;
            let id = q.next_id;
            q.msgs.insert(
                id,
                Msg {
                    payload: p.clone(),
                    enqueued_at: now,
                    visible_at: stamp.due_at,
                    ready_at: stamp.due_at,
                    attempt: 0,
                    claim: None,
                    priority: stamp.priority,
                    group: stamp.group.clone(),
                    max_attempts: stamp.max_attempts,
                    backoff_base_ms: stamp.backoff_base_ms,
                    expires_at: stamp.expires_at,
                    last_error: None,
                },
            );
            ids.push(id);
        }
        ids
    }

    /// The message of a current receipt: `Ok(id)`, or how the receipt
    /// settles without one.
    fn current(&self, receipt: &Receipt) -> Result<u64, Settled> {
        match self.msgs.get(&receipt.id) {
            None => Err(Settled::Gone),
            Some(m) if m.claim != Some(receipt.claim) => Err(Settled::Stale),
            Some(_) => Ok(receipt.id),
        }
    }

    fn settle(&mut self, receipt: &Receipt, nack_at: Option<i64>) -> Settled {
        let id = match self.current(receipt) {
            Ok(id) => id,
            Err(s) => return s,
        };
        match nack_at {
            Some(at) => {
                if let Some(m) = self.msgs.get_mut(&id) {
                    m.visible_at = at;
                }
            }
            None => {
                self.remove(id);
            }
        }
        Settled::Done
    }

    /// Deletes a message; its group leaves the round when it empties.
    fn remove(&mut self, id: u64) -> Option<Msg> {
        let m = self.msgs.remove(&id)?;
        if let Some(g) = &m.group
            && !self.msgs.values().any(|o| o.group.as_ref() == Some(g))
        {
            self.groups.remove(g);
        }
        Some(m)
    }

    fn bury(&mut self, id: u64, error: &str, now: i64) {
        if let Some(mut m) = self.remove(id) {
            m.last_error = Some(error.to_string());
            self.dead.insert(id, (m, now));
        }
    }

    fn max_served(&self) -> i64 {
        self.groups
            .values()
            .map(|g| g.served)
            .max()
            .unwrap_or(0)
            .max(self.lane_served)
    }

    fn join(&mut self, group: &str, priority: i32) {
        let served = self.max_served();
        match self.groups.get_mut(group) {
            Some(g) => g.priority = g.priority.max(priority),
            None => {
                let seq = self.next_seq;
                self.next_seq += 1;
                self.groups.insert(
                    group.to_string(),
                    Group {
                        seq,
                        priority,
                        served,
                    },
                );
            }
        }
    }

    /// The tokens a claim may take from per-group bucket `key` at `now`
    /// (counted once per claim, then kept in `room`).
    fn bucket_room(&self, room: &mut Room, key: &str, now: i64) -> usize {
        let Some(rate) = self.limits.rate.filter(|_| self.limits.rate_per_group) else {
            return usize::MAX;
        };
        *room.per_bucket.entry(key.to_string()).or_insert_with(|| {
            let b = self
                .buckets
                .get(key)
                .copied()
                .unwrap_or_else(|| Bucket::full(&rate, now));
            b.at(&rate, now).tokens.max(0) as usize
        })
    }

    /// The participants a claim takes, in order, within `room`: of each
    /// group the due messages among its first `group_concurrency` (by
    /// id), the lane's due messages by priority and ready time.
    fn pick(&self, room: &mut Room, now: i64, floor: i32) -> Vec<Pick> {
        let window = self.limits.group_concurrency.max(1) as usize;
        let mut heads: Vec<(i64, i64, String, Vec<u64>)> = Vec::new();
        for (key, g) in &self.groups {
            if g.priority < floor {
                continue;
            }
            let due: Vec<u64> = self
                .msgs
                .iter()
                .filter(|(_, m)| m.group.as_deref() == Some(key.as_str()))
                .take(window)
                .filter(|(_, m)| m.visible_at <= now)
                .map(|(id, _)| *id)
                .collect();
            if !due.is_empty() {
                heads.push((g.served, g.seq, key.clone(), due));
            }
        }
        heads.sort();
        let mut lane: Vec<(std::cmp::Reverse<i32>, i64, u64)> = self
            .msgs
            .iter()
            .filter(|(_, m)| m.group.is_none() && m.visible_at <= now && m.priority >= floor)
            .map(|(id, m)| (std::cmp::Reverse(m.priority), m.ready_at, *id))
            .collect();
        lane.sort();
        let mut picks = Vec::new();
        let mut lane_done = false;
        let take_lane = |room: &mut Room, state: &QueueState, picks: &mut Vec<Pick>| {
            let n = room
                .left
                .min(state.bucket_room(room, UNGROUPED_BUCKET, now));
            let ids: Vec<u64> = lane.iter().take(n).map(|l| l.2).collect();
            room.left -= ids.len();
            if let Some(t) = room.per_bucket.get_mut(UNGROUPED_BUCKET) {
                *t -= ids.len();
            }
            if !ids.is_empty() {
                picks.push(Pick::Lane(ids));
            }
        };
        for (served, seq, key, due) in heads {
            if !lane_done && (self.lane_served, 0) < (served, seq) {
                lane_done = true;
                take_lane(room, self, &mut picks);
            }
            if room.left == 0 {
                break;
            }
            let n = room.left.min(self.bucket_room(room, &key, now));
            let ids: Vec<u64> = due.into_iter().take(n).collect();
            room.left -= ids.len();
            if let Some(t) = room.per_bucket.get_mut(&key) {
                *t -= ids.len();
            }
            if !ids.is_empty() {
                picks.push(Pick::Group(key, ids));
            }
        }
        if !lane_done && room.left > 0 {
            take_lane(room, self, &mut picks);
        }
        picks
    }

    /// How many messages a claim of `max` may take at `now` under the
    /// queue's cap and queue-wide rate.
    fn room(&self, max: usize, now: i64) -> Room {
        let mut left = max;
        if let Some(cap) = self.limits.max_in_flight {
            let in_flight = self
                .msgs
                .values()
                .filter(|m| m.claim.is_some() && m.visible_at > now)
                .count();
            left = left.min((cap as usize).saturating_sub(in_flight));
        }
        if let Some(rate) = self.limits.rate.filter(|_| !self.limits.rate_per_group) {
            let b = self
                .buckets
                .get(UNGROUPED_BUCKET)
                .copied()
                .unwrap_or_else(|| Bucket::full(&rate, now));
            left = left.min(b.at(&rate, now).tokens.max(0) as usize);
        }
        Room {
            left,
            per_bucket: HashMap::new(),
        }
    }

    /// Charges the rate's buckets for `taken` messages claimed at `now`
    /// (`None` is the messages without a group), one token each.
    fn charge(&mut self, taken: &[Option<String>], now: i64) {
        let Some(rate) = self.limits.rate else {
            return;
        };
        let mut counts: HashMap<String, u32> = HashMap::new();
        for g in taken {
            let key = match g {
                Some(g) if self.limits.rate_per_group => g.clone(),
                _ => UNGROUPED_BUCKET.to_string(),
            };
            *counts.entry(key).or_default() += 1;
        }
        for (key, n) in counts {
            let b = self
                .buckets
                .get(&key)
                .copied()
                .unwrap_or_else(|| Bucket::full(&rate, now));
            let (_, after) = b.take_up_to(&rate, n, now);
            self.buckets.insert(key, after);
        }
    }

    /// [`QueueEngine::send_unique`]: one message unless the key is held.
    pub(super) fn send_unique(
        &mut self,
        payload: &Payload,
        stamp: &Stamp,
        unique: &Unique,
        now: i64,
    ) -> Sent {
        if let Some((id, until)) = self.unique.get(&unique.key)
            && Unique::blocks(*until, self.msgs.contains_key(id), now)
        {
            return Sent {
                id: *id,
                duplicate: true,
            };
        }
        let id = self.send(std::slice::from_ref(payload), stamp, now)[0];
        self.unique.insert(unique.key.clone(), (id, unique.until));
        Sent {
            id,
            duplicate: false,
        }
    }

    /// Whether a due message must go to the dead letters rather than be
    /// delivered: expired, or its last attempt's deadline passed.
    fn unfit(m: &Msg, now: i64) -> Option<String> {
        if m.expires_at.is_some_and(|at| at <= now) {
            Some(EXPIRED_ERROR.to_string())
        } else if m.max_attempts.is_some_and(|max| m.attempt >= max) {
            Some(lapsed_error(m.attempt))
        } else {
            None
        }
    }
}

#[async_trait]
impl QueueEngine for MemQueue {
    async fn send(&self, payloads: &[Payload], stamp: &Stamp, now: i64) -> AlkResult<Vec<u64>> {
        Ok(lock(&self.0).send(payloads, stamp, now))
    }

    async fn claim(
        &self,
        max: u32,
        visible_until: i64,
        floor: Option<i32>,
        now: i64,
    ) -> AlkResult<Vec<Delivery>> {
        let mut q = lock(&self.0);
        let floor = floor.unwrap_or(i32::MIN);
        let claim = CLAIMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        // Spelled like a version-4 UUID, as the other engines' claims are.
        let claim =
            uuid::Uuid::from_u128(0x0000_0000_0000_4000_8000_0000_0000_0000 | u128::from(claim));
        let mut out = Vec::new();
        // Participants of the round in the order they were served; `None`
        // is the lane (the messages without a group).
        let mut served: Vec<Option<String>> = Vec::new();
        let mut room = q.room(max as usize, now);
        loop {
            let picks = q.pick(&mut room, now, floor);
            if picks.is_empty() {
                break;
            }
            let mut buried = false;
            for pick in picks {
                let (who, ids) = match pick {
                    Pick::Group(key, ids) => (Some(key), ids),
                    Pick::Lane(ids) => (None, ids),
                };
                let mut gave = false;
                for id in ids {
                    let unfit = q.msgs.get(&id).and_then(|m| QueueState::unfit(m, now));
                    if let Some(error) = unfit {
                        q.bury(id, &error, now);
                        buried = true;
                        // Its place is free for another message.
                        room.left += 1;
                        let key = who.clone().unwrap_or_default();
                        if let Some(t) = room.per_bucket.get_mut(&key) {
                            *t += 1;
                        }
                        continue;
                    }
                    gave = true;
                    let m = q.msgs.get_mut(&id).expect("picked above");
                    m.visible_at = visible_until;
                    m.attempt += 1;
                    m.claim = Some(claim);
                    out.push(Delivery {
                        id,
                        payload: m.payload.clone(),
                        receipt: Receipt::new(id, claim).to_string(),
                        attempt: m.attempt,
                        priority: m.priority,
                        group: m.group.clone(),
                        max_attempts: m.max_attempts,
                    });
                }
                if gave && !served.contains(&who) {
                    served.push(who);
                }
            }
            if !buried || out.len() >= max as usize {
                break;
            }
        }
        let groups: Vec<Option<String>> = out.iter().map(|d| d.group.clone()).collect();
        q.charge(&groups, now);
        // Every participant served moves to the back of the round, in the
        // order served; the lane only when the queue has groups at all.
        let mut next = q.max_served();
        let any_group = !q.groups.is_empty();
        for who in served {
            match who {
                None if any_group => {
                    next += 1;
                    q.lane_served = next;
                }
                None => {}
                Some(key) => {
                    if let Some(g) = q.groups.get_mut(&key) {
                        next += 1;
                        g.served = next;
                    }
                }
            }
        }
        Ok(out)
    }

    async fn ack(&self, receipt: &Receipt) -> AlkResult<Settled> {
        Ok(lock(&self.0).settle(receipt, None))
    }

    async fn ack_batch(&self, receipts: &[Receipt]) -> AlkResult<AckedBatch> {
        let mut q = lock(&self.0);
        // Applied together, like a set-based statement: every current
        // receipt's message is deleted, then the others are looked up.
        let mut batch = AckedBatch::default();
        for r in receipts {
            if q.msgs.get(&r.id).is_some_and(|m| m.claim == Some(r.claim)) {
                batch.deleted.insert(r.id, r.claim);
            }
        }
        for id in batch.deleted.keys() {
            q.remove(*id);
        }
        for r in receipts {
            if q.msgs.contains_key(&r.id) {
                batch.present.insert(r.id);
            }
        }
        Ok(batch)
    }

    async fn nack(&self, receipt: &Receipt, now: i64) -> AlkResult<Settled> {
        Ok(lock(&self.0).settle(receipt, Some(now)))
    }

    async fn next_visible(&self, _now: i64) -> AlkResult<Option<i64>> {
        Ok(lock(&self.0).msgs.values().map(|m| m.visible_at).min())
    }

    async fn purge(&self) -> AlkResult<()> {
        let mut q = lock(&self.0);
        q.msgs.clear();
        q.groups.clear();
        Ok(())
    }

    async fn heartbeat(&self, receipt: &Receipt, deadline: i64, now: i64) -> AlkResult<Beat> {
        let mut q = lock(&self.0);
        let id = match q.current(receipt) {
            Ok(id) => id,
            Err(Settled::Stale) => return Ok(Beat::Stale),
            Err(_) => return Ok(Beat::Gone),
        };
        let m = q.msgs.get_mut(&id).expect("current");
        if m.visible_at <= now {
            return Ok(Beat::Lapsed);
        }
        m.visible_at = deadline;
        Ok(Beat::Extended)
    }

    async fn retry(
        &self,
        receipt: &Receipt,
        error: &str,
        delay: RetryDelay,
        now: i64,
    ) -> AlkResult<Retried> {
        let mut q = lock(&self.0);
        let id = match q.current(receipt) {
            Ok(id) => id,
            Err(Settled::Stale) => return Ok(Retried::Stale),
            Err(_) => return Ok(Retried::Gone),
        };
        let m = q.msgs.get_mut(&id).expect("current");
        if m.max_attempts.is_some_and(|max| m.attempt >= max) {
            q.bury(id, error, now);
            return Ok(Retried::Dead);
        }
        let due = delay.due_at(m.backoff_base_ms, m.attempt, now);
        m.visible_at = due;
        m.ready_at = due;
        m.claim = None;
        m.last_error = Some(error.to_string());
        Ok(Retried::Scheduled(due))
    }

    async fn fail(&self, receipt: &Receipt, error: &str, now: i64) -> AlkResult<Settled> {
        let mut q = lock(&self.0);
        match q.current(receipt) {
            Ok(id) => {
                q.bury(id, error, now);
                Ok(Settled::Done)
            }
            Err(s) => Ok(s),
        }
    }

    async fn cancel(&self, id: u64) -> AlkResult<bool> {
        let mut q = lock(&self.0);
        Ok(q.remove(id).is_some() || q.dead.remove(&id).is_some())
    }

    async fn job(&self, id: u64, now: i64) -> AlkResult<Option<JobInfo>> {
        let q = lock(&self.0);
        if let Some(m) = q.msgs.get(&id) {
            let state = JobState::of(m.claim.is_some(), m.visible_at, now);
            return Ok(Some(info(id, m, state, None)));
        }
        Ok(q.dead
            .get(&id)
            .map(|(m, died)| info(id, m, JobState::Dead, Some(*died))))
    }

    async fn sweep_expired(&self, now: i64) -> AlkResult<u64> {
        let mut q = lock(&self.0);
        let expired: Vec<u64> = q
            .msgs
            .iter()
            .filter(|(_, m)| m.expires_at.is_some_and(|at| at <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in &expired {
            q.bury(*id, EXPIRED_ERROR, now);
        }
        // Results whose time ran out, unique keys that hold nothing any
        // more, and rate buckets that are full again.
        q.results.retain(|_, r| r.expires_at > now);
        let QueueState {
            unique,
            msgs,
            buckets,
            limits,
            ..
        } = &mut *q;
        unique.retain(|_, (id, until)| Unique::blocks(*until, msgs.contains_key(id), now));
        // Buckets full again are what a bucket never taken from is.
        match limits.rate {
            Some(rate) => buckets.retain(|_, b| b.full_at(&rate) > now),
            None => buckets.clear(),
        }
        Ok(expired.len() as u64)
    }

    async fn dead_letters(&self, after: u64, max: u32, _now: i64) -> AlkResult<Vec<JobInfo>> {
        let q = lock(&self.0);
        Ok(q.dead
            .range(after.saturating_add(1)..)
            .take(max as usize)
            .map(|(id, (m, died))| info(*id, m, JobState::Dead, Some(*died)))
            .collect())
    }

    async fn jobs(&self, after: u64, max: u32, now: i64) -> AlkResult<Vec<JobInfo>> {
        let q = lock(&self.0);
        Ok(q.msgs
            .range(after.saturating_add(1)..)
            .take(max as usize)
            .map(|(id, m)| {
                let state = JobState::of(m.claim.is_some(), m.visible_at, now);
                info(*id, m, state, None)
            })
            .collect())
    }

    async fn redrive(&self, ids: &[u64], now: i64) -> AlkResult<Vec<Option<u64>>> {
        let mut q = lock(&self.0);
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let Some((mut m, _)) = q.dead.remove(id) else {
                out.push(None);
                continue;
            };
            m.attempt = 0;
            m.claim = None;
            m.enqueued_at = now;
            m.visible_at = now;
            m.ready_at = now;
            m.expires_at = None;
            if let Some(g) = m.group.clone() {
                q.join(&g, m.priority);
            }
            q.next_id += 1;
            let new = q.next_id;
            q.msgs.insert(new, m);
            out.push(Some(new));
        }
        Ok(out)
    }

    async fn purge_dead(&self) -> AlkResult<u64> {
        let mut q = lock(&self.0);
        let n = q.dead.len() as u64;
        q.dead.clear();
        Ok(n)
    }

    async fn send_unique(
        &self,
        payload: &Payload,
        stamp: &Stamp,
        unique: &Unique,
        now: i64,
    ) -> AlkResult<Sent> {
        Ok(lock(&self.0).send_unique(payload, stamp, unique, now))
    }

    async fn limits(&self) -> AlkResult<QueueLimits> {
        Ok(lock(&self.0).limits)
    }

    async fn set_limits(&self, limits: &QueueLimits) -> AlkResult<()> {
        lock(&self.0).limits = *limits;
        Ok(())
    }

    async fn try_take(&self, group: Option<&str>, n: u32, now: i64) -> AlkResult<Taken> {
        let mut q = lock(&self.0);
        let Some(rate) = q.limits.rate else {
            return Err(AlkError::InvalidArgument(
                "the queue has no rate limit to take tokens from; set one with set-limits".into(),
            ));
        };
        check_take(&rate, n)?;
        let key = match group {
            Some(g) if q.limits.rate_per_group => g.to_string(),
            _ => UNGROUPED_BUCKET.to_string(),
        };
        let b = q
            .buckets
            .get(&key)
            .copied()
            .unwrap_or_else(|| Bucket::full(&rate, now));
        let (taken, after) = b.take(&rate, n, now);
        q.buckets.insert(key, after);
        Ok(taken)
    }

    async fn throttled_until(&self, now: i64) -> AlkResult<Option<i64>> {
        let q = lock(&self.0);
        let Some(rate) = q.limits.rate else {
            return Ok(None);
        };
        let next = |b: &Bucket| {
            let b = b.at(&rate, now);
            (b.tokens <= 0).then(|| now.saturating_add(b.wait_ms(&rate, 1, now) as i64))
        };
        Ok(if q.limits.rate_per_group {
            q.buckets.values().filter_map(next).min()
        } else {
            q.buckets.get(UNGROUPED_BUCKET).and_then(next)
        })
    }

    async fn complete(
        &self,
        receipt: &Receipt,
        result: &Payload,
        expires_at: i64,
        now: i64,
    ) -> AlkResult<Settled> {
        let mut q = lock(&self.0);
        let settled = q.settle(receipt, None);
        if settled == Settled::Done {
            q.results.insert(
                receipt.id,
                JobResult {
                    id: receipt.id,
                    payload: result.clone(),
                    completed_at: now,
                    expires_at,
                },
            );
        }
        Ok(settled)
    }

    async fn result(&self, id: u64, now: i64) -> AlkResult<Option<JobResult>> {
        Ok(lock(&self.0)
            .results
            .get(&id)
            .filter(|r| r.expires_at > now)
            .cloned())
    }

    async fn delete_result(&self, id: u64, now: i64) -> AlkResult<bool> {
        Ok(lock(&self.0)
            .results
            .remove(&id)
            .is_some_and(|r| r.expires_at > now))
    }

    async fn stats(&self, now: i64) -> AlkResult<QueueStats> {
        let q = lock(&self.0);
        let mut stats = QueueStats {
            dead: q.dead.len() as u64,
            groups: q.groups.len() as u64,
            ..QueueStats::default()
        };
        let mut busy = std::collections::HashSet::new();
        for m in q.msgs.values() {
            match JobState::of(m.claim.is_some(), m.visible_at, now) {
                JobState::Waiting => {
                    stats.waiting += 1;
                    stats.oldest_waiting_enqueued_at = Some(
                        stats
                            .oldest_waiting_enqueued_at
                            .map_or(m.enqueued_at, |t| t.min(m.enqueued_at)),
                    );
                }
                JobState::Delayed => stats.delayed += 1,
                JobState::InFlight => {
                    stats.in_flight += 1;
                    if let Some(g) = &m.group {
                        busy.insert(g.clone());
                    }
                }
                JobState::Dead => {}
            }
        }
        stats.groups_in_flight = busy.len() as u64;
        Ok(stats)
    }
}
