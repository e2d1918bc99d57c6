//! Metrics in the Prometheus text format (OpenMetrics), for `/metrics` of
//! the dashboard and of `alk-host serve --metrics-addr`: this process's
//! counters ([`alk_store::counters`], the HTTP server's) and, read at each
//! scrape, gauges of every queue's statistics, every stream's offsets and
//! lags and the held locks. Encoded by `prometheus-client`.
//!
//! The gauges come from the stores that exist ([`alk_store::Catalog`]);
//! reading them creates nothing. A scrape reads each queue's counts with a
//! few index lookups, so its cost grows with the number of queues, not of
//! messages.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use alk_store::counters::{Count, get};
use alk_store::stream::Streams;
use alk_store::{AlkResult, Engine, StreamLimits};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The `content-type` of the text [`render`] returns.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Labels = Vec<(String, String)>;

/// What an HTTP server of the host counts (`alk-host serve`).
#[derive(Debug, Default)]
pub struct HttpCounters {
    /// Requests answered, by the handler or by the host.
    pub requests: AtomicU64,
    /// Requests refused at once because the server was at its limit.
    pub refused: AtomicU64,
    /// Requests whose handler ran past its time limit.
    pub timed_out: AtomicU64,
    /// Requests whose handler trapped or failed to answer.
    pub failed: AtomicU64,
}

impl HttpCounters {
    /// Adds one to `counter`.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let c: Counter = Counter::default();
    c.inc_by(value);
    registry.register(name, help, c);
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let g: Gauge = Gauge::default();
    g.set(value);
    registry.register(name, help, g);
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The metrics text: the process's counters, `http` when given, and the
/// gauges of `engine`'s stores when given (at `now`, epoch milliseconds).
pub async fn render(
    engine: Option<&Arc<dyn Engine>>,
    http: Option<&HttpCounters>,
    now: i64,
) -> AlkResult<String> {
    let mut r = <Registry>::default();
    counter(
        &mut r,
        "alk_messages_sent",
        "Messages sent to queues by this process.",
        get(Count::Sent),
    );
    counter(
        &mut r,
        "alk_messages_claimed",
        "Deliveries handed out by this process's claims.",
        get(Count::Claimed),
    );
    counter(
        &mut r,
        "alk_messages_acked",
        "Messages acknowledged by this process.",
        get(Count::Acked),
    );
    counter(
        &mut r,
        "alk_messages_dead_lettered",
        "Messages this process moved to the dead letters (fail, or retry with no attempts left).",
        get(Count::DeadLettered),
    );
    counter(
        &mut r,
        "alk_busy_answers",
        "Busy errors answered to guests.",
        get(Count::Busy),
    );
    counter(
        &mut r,
        "alk_engine_failures",
        "Internal errors answered to guests.",
        get(Count::Failure),
    );
    #[cfg(feature = "turso")]
    gauge(
        &mut r,
        "alk_open_stores",
        "Store files this process holds open.",
        to_i64(alk_store_turso::pool::open_databases() as u64),
    );
    if let Some(h) = http {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        counter(
            &mut r,
            "alk_http_requests",
            "HTTP requests answered.",
            load(&h.requests),
        );
        counter(
            &mut r,
            "alk_http_requests_refused",
            "HTTP requests refused at the concurrency limit.",
            load(&h.refused),
        );
        counter(
            &mut r,
            "alk_http_requests_timed_out",
            "HTTP requests whose handler ran past its time limit.",
            load(&h.timed_out),
        );
        counter(
            &mut r,
            "alk_http_handler_failures",
            "HTTP requests whose handler trapped or gave no response.",
            load(&h.failed),
        );
    }
    if let Some(engine) = engine {
        stores(&mut r, engine, now).await?;
    }
    let mut out = String::new();
    encode(&mut out, &r)
        .map_err(|e| alk_store::AlkError::Internal(format!("encoding metrics: {e}")))?;
    Ok(out)
}

/// The gauges of every store.
async fn stores(r: &mut Registry, engine: &Arc<dyn Engine>, now: i64) -> AlkResult<()> {
    let catalog = engine.catalog().await?;
    let messages = Family::<Labels, Gauge>::default();
    let oldest = Family::<Labels, Gauge>::default();
    let groups = Family::<Labels, Gauge>::default();
    let groups_busy = Family::<Labels, Gauge>::default();
    for name in &catalog.queues {
        let q = alk_store::queue::Queue::open(&**engine, name).await?;
        let s = q.stats(now).await?;
        for (state, n) in [
            ("waiting", s.waiting),
            ("delayed", s.delayed),
            ("in_flight", s.in_flight),
            ("dead", s.dead),
        ] {
            messages
                .get_or_create(&vec![
                    ("queue".into(), name.clone()),
                    ("state".into(), state.into()),
                ])
                .set(to_i64(n));
        }
        let label = vec![("queue".to_string(), name.clone())];
        oldest.get_or_create(&label).set(
            s.oldest_waiting_enqueued_at
                .map_or(0, |t| ((now - t).max(0)) / 1000),
        );
        groups.get_or_create(&label).set(to_i64(s.groups));
        groups_busy
            .get_or_create(&label)
            .set(to_i64(s.groups_in_flight));
    }
    r.register(
        "alk_queue_messages",
        "Messages of a queue, by state.",
        messages,
    );
    r.register(
        "alk_queue_oldest_waiting_age_seconds",
        "Seconds since the oldest waiting message of a queue was sent (0 when none waits).",
        oldest,
    );
    r.register(
        "alk_queue_groups",
        "Groups of a queue with at least one message.",
        groups,
    );
    r.register(
        "alk_queue_groups_in_flight",
        "Groups of a queue with a message in flight.",
        groups_busy,
    );
    gauge(
        r,
        "alk_queues",
        "Queues in the stores.",
        to_i64(catalog.queues.len() as u64),
    );
    gauge(
        r,
        "alk_buckets",
        "Buckets in the stores.",
        to_i64(catalog.buckets.len() as u64),
    );
    let last = Family::<Labels, Gauge>::default();
    let lag = Family::<Labels, Gauge>::default();
    if catalog.stream_store {
        let streams = Streams::open(&**engine, StreamLimits::default()).await?;
        for name in &catalog.streams {
            let info = streams.info(name).await?;
            last.get_or_create(&vec![("stream".into(), name.clone())])
                .set(to_i64(info.last));
            for c in &info.consumers {
                lag.get_or_create(&vec![
                    ("stream".into(), name.clone()),
                    ("consumer".into(), c.consumer.clone()),
                ])
                .set(to_i64(c.lag));
            }
        }
    }
    r.register(
        "alk_stream_last_offset",
        "The last offset assigned in a stream.",
        last,
    );
    r.register(
        "alk_stream_consumer_lag",
        "Offsets of a stream after a consumer's saved one.",
        lag,
    );
    let mut held = 0u64;
    if catalog.lock_store {
        let locks = engine.locks().await?;
        let mut after: Option<String> = None;
        loop {
            let page = locks.holders(after.as_deref(), 1000, now).await?;
            held += page.len() as u64;
            if page.len() < 1000 {
                break;
            }
            after = page.last().map(|(n, _)| n.clone());
        }
    }
    gauge(r, "alk_locks_held", "Locks held now.", to_i64(held));
    Ok(())
}
