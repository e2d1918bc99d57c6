//! What operators see of the stores: read once through the engine (the
//! statistics of the WIT, and kv browsing), then shown as tables by
//! `inspect`, as JSON by `inspect --json` and the dashboard's API.
//!
//! Everything here reads; nothing creates a store (the catalog says which
//! exist, and only those are opened) or changes one.

use std::sync::Arc;

use alk_host::Engine;
use alk_host::store::jobs::{JobInfo, JobState, QueueLimits};
use alk_host::store::kv::Bucket;
use alk_host::store::lock::Holder;
use alk_host::store::queue::{Payload, Queue, QueueStats};
use alk_host::store::schedule::ScheduleRow;
use alk_host::store::stream::{StreamInfo, Streams};
use alk_host::store::{AlkResult, Catalog, KvLimits, StreamLimits};
use serde_json::{Value, json};

/// Everything the engine holds, with each store's figures.
#[derive(Debug, Clone)]
pub(super) struct Overview {
    /// Where (a directory, a database).
    pub place: String,
    /// When it was read (epoch milliseconds).
    pub now: i64,
    pub queues: Vec<(String, QueueStats)>,
    pub streams: Vec<(String, StreamInfo)>,
    pub buckets: Vec<String>,
    pub locks: Vec<(String, Holder)>,
    pub schedules: Vec<ScheduleRow>,
    pub unreadable: Vec<(String, String)>,
}

/// The most locks the overview lists (pages of the engine's listing).
const MAX_LOCKS_SHOWN: usize = 10_000;

pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Reads the overview of `catalog`'s stores.
pub(super) async fn overview(engine: &Arc<dyn Engine>, catalog: &Catalog) -> AlkResult<Overview> {
    let now = now_ms();
    let mut queues = Vec::with_capacity(catalog.queues.len());
    for name in &catalog.queues {
        let q = Queue::open(&**engine, name).await?;
        queues.push((name.clone(), q.stats(now).await?));
    }
    let mut streams = Vec::new();
    let mut schedules = Vec::new();
    if catalog.stream_store {
        let s = Streams::open(&**engine, StreamLimits::default()).await?;
        for name in &catalog.streams {
            streams.push((name.clone(), s.info(name).await?));
        }
        schedules = engine.schedules().await?.list().await?;
    }
    let mut locks = Vec::new();
    if catalog.lock_store {
        let l = engine.locks().await?;
        loop {
            let after = locks.last().map(|(n, _): &(String, Holder)| n.clone());
            let page = l.holders(after.as_deref(), 1000, now).await?;
            let done = page.len() < 1000;
            locks.extend(page);
            if done || locks.len() >= MAX_LOCKS_SHOWN {
                break;
            }
        }
    }
    Ok(Overview {
        place: engine.describe(),
        now,
        queues,
        streams,
        buckets: catalog.buckets.clone(),
        locks,
        schedules,
        unreadable: catalog.unreadable.clone(),
    })
}

pub(super) fn payload_json(p: &Payload) -> Value {
    match p {
        Payload::Json(t) => json!({"json": t}),
        Payload::Text(t) => json!({"text": t}),
    }
}

pub(super) fn state_name(s: JobState) -> &'static str {
    match s {
        JobState::Waiting => "waiting",
        JobState::Delayed => "delayed",
        JobState::InFlight => "in-flight",
        JobState::Dead => "dead",
    }
}

pub(super) fn stats_json(s: &QueueStats) -> Value {
    json!({
        "waiting": s.waiting,
        "delayed": s.delayed,
        "in_flight": s.in_flight,
        "dead": s.dead,
        "oldest_waiting_enqueued_at_ms": s.oldest_waiting_enqueued_at,
        "groups": s.groups,
        "groups_in_flight": s.groups_in_flight,
    })
}

pub(super) fn limits_json(l: &QueueLimits) -> Value {
    json!({
        "group_concurrency": l.group_concurrency,
        "max_in_flight": l.max_in_flight,
        "rate": l.rate.map(|r| json!({
            "capacity": r.capacity,
            "refill": r.refill,
            "interval_ms": r.interval_ms,
        })),
        "rate_per_group": l.rate_per_group,
    })
}

/// A queue's limits in words.
pub(super) fn limits_text(l: &QueueLimits) -> String {
    let mut parts = vec![format!(
        "{} of a group in flight at once",
        l.group_concurrency
    )];
    if let Some(m) = l.max_in_flight {
        parts.push(format!("at most {m} in flight"));
    }
    if let Some(r) = l.rate {
        parts.push(format!(
            "{} claims per {} ms, {} at once{}",
            r.refill,
            r.interval_ms,
            r.capacity,
            if l.rate_per_group { ", per group" } else { "" }
        ));
    }
    parts.join(", ")
}

pub(super) fn stream_json(name: &str, i: &StreamInfo) -> Value {
    json!({
        "name": name,
        "first": i.first,
        "last": i.last,
        "consumers": i.consumers.iter().map(|c| json!({
            "consumer": c.consumer, "offset": c.offset, "lag": c.lag,
        })).collect::<Vec<_>>(),
    })
}

pub(super) fn job_json(j: &JobInfo) -> Value {
    json!({
        "id": j.id,
        "state": state_name(j.state),
        "payload": payload_json(&j.payload),
        "attempt": j.attempt,
        "max_attempts": j.max_attempts,
        "priority": j.priority,
        "group": j.group,
        "enqueued_at_ms": j.enqueued_at,
        "due_at_ms": j.due_at,
        "expires_at_ms": j.expires_at,
        "last_error": j.last_error,
        "died_at_ms": j.died_at,
    })
}

impl Overview {
    pub(super) fn to_json(&self) -> Value {
        json!({
            "place": self.place,
            "now_ms": self.now,
            "queues": self.queues.iter().map(|(n, s)| {
                let mut v = stats_json(s);
                v["name"] = json!(n);
                v
            }).collect::<Vec<_>>(),
            "streams": self.streams.iter().map(|(n, i)| stream_json(n, i)).collect::<Vec<_>>(),
            "buckets": self.buckets,
            "locks": self.locks.iter().map(|(n, h)| json!({
                "name": n, "owner": h.owner, "token": h.token, "expires_at_ms": h.expires_at,
            })).collect::<Vec<_>>(),
            "schedules": self.schedules.iter().map(|r| json!({
                "name": r.name, "spec": r.spec, "every_ms": r.every_ms, "queue": r.queue,
                "payload": payload_json(&r.payload), "next_fire_ms": r.next_due,
            })).collect::<Vec<_>>(),
            "unreadable": self.unreadable.iter().map(|(p, w)| json!({"place": p, "why": w})).collect::<Vec<_>>(),
        })
    }

    /// The overview as tables, for a terminal.
    pub(super) fn tables(&self) -> String {
        let mut out = format!("alk stores in {}\n", self.place);
        if !self.queues.is_empty() {
            let rows = self
                .queues
                .iter()
                .map(|(n, s)| {
                    vec![
                        n.clone(),
                        s.waiting.to_string(),
                        s.delayed.to_string(),
                        s.in_flight.to_string(),
                        s.dead.to_string(),
                        s.oldest_waiting_enqueued_at
                            .map(|t| ago(self.now, t))
                            .unwrap_or_else(|| "-".into()),
                        format!("{}/{}", s.groups_in_flight, s.groups),
                    ]
                })
                .collect();
            out.push('\n');
            out.push_str(&table(
                &[
                    "QUEUE",
                    "WAITING",
                    "DELAYED",
                    "IN FLIGHT",
                    "DEAD",
                    "OLDEST WAITING",
                    "GROUPS BUSY/ALL",
                ],
                rows,
            ));
        }
        if !self.streams.is_empty() {
            let rows = self
                .streams
                .iter()
                .map(|(n, i)| {
                    vec![
                        n.clone(),
                        i.first.map(|f| f.to_string()).unwrap_or_else(|| "-".into()),
                        i.last.to_string(),
                        if i.consumers.is_empty() {
                            "-".into()
                        } else {
                            i.consumers
                                .iter()
                                .map(|c| format!("{} at {} (lag {})", c.consumer, c.offset, c.lag))
                                .collect::<Vec<_>>()
                                .join(", ")
                        },
                    ]
                })
                .collect();
            out.push('\n');
            out.push_str(&table(&["STREAM", "FIRST", "LAST", "CONSUMERS"], rows));
        }
        if !self.buckets.is_empty() {
            out.push('\n');
            out.push_str(&table(
                &["BUCKET"],
                self.buckets.iter().map(|b| vec![b.clone()]).collect(),
            ));
        }
        if !self.locks.is_empty() {
            let rows = self
                .locks
                .iter()
                .map(|(n, h)| {
                    vec![
                        n.clone(),
                        h.owner.clone(),
                        h.token.to_string(),
                        until(self.now, h.expires_at),
                    ]
                })
                .collect();
            out.push('\n');
            out.push_str(&table(&["LOCK", "OWNER", "TOKEN", "EXPIRES"], rows));
        }
        if !self.schedules.is_empty() {
            let rows = self
                .schedules
                .iter()
                .map(|r| {
                    vec![
                        r.name.clone(),
                        r.spec.clone(),
                        r.queue.clone(),
                        until(self.now, r.next_due),
                    ]
                })
                .collect();
            out.push('\n');
            out.push_str(&table(&["SCHEDULE", "SPEC", "QUEUE", "NEXT FIRING"], rows));
        }
        if !self.unreadable.is_empty() {
            out.push('\n');
            out.push_str(&table(
                &["NOT READ", "WHY"],
                self.unreadable
                    .iter()
                    .map(|(p, w)| vec![p.clone(), w.clone()])
                    .collect(),
            ));
        }
        out
    }
}

/// Rows under a header, each column as wide as its widest cell; numbers
/// (cells of digits) right-aligned.
pub(super) fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let mut l = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let pad = widths[i] - cell.chars().count();
            let numeric = !cell.is_empty() && cell.chars().all(|c| c.is_ascii_digit());
            if i > 0 {
                l.push_str("  ");
            }
            if numeric {
                l.push_str(&" ".repeat(pad));
                l.push_str(cell);
            } else {
                l.push_str(cell);
                if i + 1 < cells.len() {
                    l.push_str(&" ".repeat(pad));
                }
            }
        }
        l.push('\n');
        l
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    for row in rows {
        out.push_str(&line(row));
    }
    out
}

fn span(ms: i64) -> String {
    let s = ms / 1000;
    match s {
        _ if ms < 1000 => format!("{ms}ms"),
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// How long ago `t` was.
pub(super) fn ago(now: i64, t: i64) -> String {
    format!("{} ago", span((now - t).max(0)))
}

/// How long until `t`, or how long ago it passed.
pub(super) fn until(now: i64, t: i64) -> String {
    if t >= now {
        format!("in {}", span(t - now))
    } else {
        format!("{} ago", span(now - t))
    }
}

/// A key's value for showing: text when it is UTF-8, else hex.
pub(super) fn value_json(v: &[u8]) -> Value {
    match std::str::from_utf8(v) {
        Ok(t) => json!({"text": t}),
        Err(_) => json!({"hex": v.iter().map(|b| format!("{b:02x}")).collect::<String>()}),
    }
}

/// Opens bucket `name`, which the catalog listed.
pub(super) async fn bucket(engine: &Arc<dyn Engine>, name: &str) -> AlkResult<Bucket> {
    Bucket::open(&**engine, name, KvLimits::default()).await
}
