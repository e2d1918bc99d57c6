//! The orders example's setup and check.
//!
//!     alk-host run orders-admin.wasm --data-dir DIR -- setup [SPEC]
//!     alk-host run orders-admin.wasm --data-dir DIR -- check SENT CENTS
//!
//! `setup` stores the schedule `orders-report`: at every interval of SPEC
//! (default `@every 1s`) a job goes to the queue `reports` — while an
//! `alk-host schedules run` runner runs. It also opens the example's queue
//! and stream, so the dashboard has stores to show from the start.
//!
//! `check` reads every store of the example and compares them with what
//! the client says it sent (SENT orders of CENTS cents in all), then prints
//! the SUMMARY and exits 0 when everything holds, 1 otherwise:
//!
//! - every placed order was processed exactly once or is a dead letter,
//!   none both, none neither (lost), none still in the queue;
//! - the orders that died are the ones the failure rule declines, and each
//!   dead letter carries its last error; processed records match their
//!   orders;
//! - the projection's totals per customer equal the sums of the placed
//!   orders, the queue side (processed records and dead letters) adds up
//!   to the same, and the projection has reached the stream's end;
//! - the schedule's report jobs were handled (at least one report).

use std::collections::{BTreeMap, BTreeSet};

use alk_guest::kv::Bucket;
use alk_guest::queue::{Payload, Queue, SendOptions};
use alk_guest::schedule::{self, ScheduleError};
use alk_guest::{Error, stream};
use orders_common::{
    EVENTS_STREAM, Fate, MAX_ATTEMPTS, ORDERS_QUEUE, Order, PROCESSED_BUCKET, REPORT_SCHEDULE,
    REPORTS_BUCKET, REPORTS_QUEUE, TOTALS_BUCKET, WORKERS_BUCKET, field_u64, json_of,
};
use serde_json::{Value, json};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["setup"] => setup("@every 1s"),
        ["setup", spec] => setup(spec),
        ["check", sent, cents] => match (sent.parse(), cents.parse()) {
            (Ok(sent), Ok(cents)) => check(sent, cents),
            _ => usage(),
        },
        _ => usage(),
    };
    match result {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("orders-admin: store error: {e}");
            std::process::exit(1);
        }
    }
}

fn usage() -> Result<bool, String> {
    eprintln!("usage: orders-admin setup [@every 1s] | orders-admin check SENT CENTS");
    std::process::exit(2);
}

fn store(e: Error) -> String {
    format!("{e:?}")
}

fn setup(spec: &str) -> Result<bool, String> {
    let options = SendOptions {
        priority: None,
        delay_ms: None,
        run_at_ms: None,
        max_attempts: Some(3),
        backoff_base_ms: None,
        // A report nobody takes within a minute is stale: it dies.
        expires_in_ms: Some(60_000),
        group: None,
    };
    let payload = Payload::Json(json!({"report": "orders"}).to_string());
    match schedule::schedule(REPORT_SCHEDULE, spec, REPORTS_QUEUE, &payload, &options) {
        Ok(()) => {}
        Err(ScheduleError::InvalidSpec(why)) => {
            return Err(format!(
                "the schedule {spec:?} is refused: {why}; give `@every <n><s|m|h|d>`"
            ));
        }
        Err(e) => return Err(format!("{e:?}")),
    }
    // Opening creates them: the dashboard shows them before the first order.
    Queue::open(ORDERS_QUEUE)
        .map_err(store)?
        .stats()
        .map_err(store)?;
    Queue::open(REPORTS_QUEUE)
        .map_err(store)?
        .stats()
        .map_err(store)?;
    stream::info(EVENTS_STREAM).map_err(store)?;
    println!(
        "setup: schedule {REPORT_SCHEDULE} sends a job to queue {REPORTS_QUEUE} {spec} (while a runner runs)"
    );
    Ok(true)
}

/// Every entry of `bucket` under `prefix`, in key order.
fn scan(bucket: &Bucket, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, String> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = bucket
            .scan_prefix(prefix, cursor.as_deref(), 1000)
            .map_err(store)?;
        out.extend(page.entries.into_iter().map(|e| (e.key, e.value)));
        cursor = page.next_cursor;
        if cursor.is_none() {
            return Ok(out);
        }
    }
}

fn payload_text(p: &Payload) -> &str {
    match p {
        Payload::Json(s) | Payload::Text(s) => s,
    }
}

fn check(sent: u64, sent_cents: u64) -> Result<bool, String> {
    let mut problems: Vec<String> = Vec::new();

    // What was placed: the stream's order-placed events.
    let mut placed: BTreeMap<String, Order> = BTreeMap::new();
    let mut placed_twice = 0u64;
    let mut offset = 0;
    loop {
        let events = stream::read_since(EVENTS_STREAM, offset, 1000).map_err(store)?;
        let Some(last) = events.last() else { break };
        offset = last.offset;
        for e in &events {
            let v = json_of(&e.payload);
            if v.get("event").and_then(Value::as_str) != Some("order-placed") {
                continue;
            }
            match Order::parse(&e.payload) {
                Ok(o) => {
                    if placed.insert(o.id.clone(), o).is_some() {
                        placed_twice += 1;
                    }
                }
                Err(why) => problems.push(format!("event {} is not an order: {why}", e.offset)),
            }
        }
    }
    let stream_end = stream::info(EVENTS_STREAM).map_err(store)?.last;

    // What the workers did: one record per processed order.
    let mut processed: BTreeMap<String, Value> = BTreeMap::new();
    for (id, value) in scan(&Bucket::open(PROCESSED_BUCKET).map_err(store)?, "")? {
        processed.insert(id, json_of(&value));
    }
    let mut per_worker: BTreeMap<String, Value> = BTreeMap::new();
    for (name, value) in scan(&Bucket::open(WORKERS_BUCKET).map_err(store)?, "")? {
        per_worker.insert(name, json_of(&value));
    }
    let tally = |field: &str| -> u64 { per_worker.values().map(|v| field_u64(v, field)).sum() };

    // What died: the dead letters, with their last errors.
    let queue = Queue::open(ORDERS_QUEUE).map_err(store)?;
    let mut dead: BTreeMap<String, (Order, Option<String>, u32)> = BTreeMap::new();
    let mut after = None;
    loop {
        let page = queue.dead_letters(after, 100).map_err(store)?;
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        for job in &page {
            match Order::parse(payload_text(&job.payload).as_bytes()) {
                Ok(o) => {
                    dead.insert(o.id.clone(), (o, job.last_error.clone(), job.attempt));
                }
                Err(why) => problems.push(format!("dead letter {} is not an order: {why}", job.id)),
            }
        }
    }
    let stats = queue.stats().map_err(store)?;
    let left = stats.waiting + stats.delayed + stats.in_flight;
    if left > 0 {
        problems.push(format!(
            "{left} order(s) are still in the queue ({} waiting, {} delayed, {} in flight): the workers stopped early",
            stats.waiting, stats.delayed, stats.in_flight
        ));
    }

    // Every placed order: processed once, or dead; never both, never neither.
    let ids: BTreeSet<&String> = placed.keys().collect();
    let lost: Vec<&&String> = ids
        .iter()
        .filter(|id| !processed.contains_key(**id) && !dead.contains_key(**id))
        .collect();
    let both: Vec<&&String> = ids
        .iter()
        .filter(|id| processed.contains_key(**id) && dead.contains_key(**id))
        .collect();
    let unknown = processed
        .keys()
        .chain(dead.keys())
        .filter(|id| !placed.contains_key(*id))
        .count();
    // Each worker counts the orders it processed: more than there are
    // records means some order was processed by two workers.
    let recorded = processed.len() as u64;
    let twice = tally("processed").saturating_sub(recorded) + both.len() as u64 + placed_twice;
    if placed.len() as u64 != sent {
        problems.push(format!(
            "the client sent {sent} orders but the stream holds {} order-placed events",
            placed.len()
        ));
    }
    if !lost.is_empty() {
        problems.push(format!(
            "{} order(s) neither processed nor dead: {}",
            lost.len(),
            lost.iter()
                .take(5)
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if twice > 0 {
        problems.push(format!(
            "{twice} order(s) handled twice ({} both processed and dead, {placed_twice} placed twice)",
            both.len()
        ));
    }
    if unknown > 0 {
        problems.push(format!(
            "{unknown} processed or dead order(s) were never placed"
        ));
    }

    // Processed records match their orders; the rule's failures are the dead.
    for (id, record) in &processed {
        let Some(order) = placed.get(id) else {
            continue;
        };
        if record.get("customer").and_then(Value::as_str) != Some(order.customer.as_str())
            || field_u64(record, "amount") != order.amount
        {
            problems.push(format!(
                "the record of {id} does not match the order: {record}"
            ));
        }
        if order.fate() == Fate::AlwaysFails {
            problems.push(format!("{id} should have been declined but was processed"));
        }
    }
    let mut example_error = None;
    for (id, (order, error, attempt)) in &dead {
        if order.fate() != Fate::AlwaysFails {
            problems.push(format!("{id} died but the rule lets it succeed"));
        }
        match error {
            Some(e) if !e.is_empty() => {
                if example_error.is_none() {
                    example_error = Some(format!("{id}: {e}"));
                }
            }
            _ => problems.push(format!("the dead letter of {id} carries no error")),
        }
        if *attempt != MAX_ATTEMPTS {
            problems.push(format!(
                "{id} died after {attempt} attempts, not {MAX_ATTEMPTS}"
            ));
        }
    }

    // Totals: the projection against the events, and the queue side.
    let totals = Bucket::open(TOTALS_BUCKET).map_err(store)?;
    let mut projected: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (key, value) in scan(&totals, "customer/")? {
        let v = json_of(&value);
        projected.insert(
            key.trim_start_matches("customer/").to_string(),
            (field_u64(&v, "orders"), field_u64(&v, "cents")),
        );
    }
    let projected_offset: u64 = totals
        .get("offset")
        .map_err(store)?
        .and_then(|v| String::from_utf8(v).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut expected: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for order in placed.values() {
        let t = expected.entry(order.customer.clone()).or_default();
        t.0 += 1;
        t.1 += order.amount;
    }
    let mut queue_side: BTreeMap<String, u64> = BTreeMap::new();
    for record in processed.values() {
        let customer = record
            .get("customer")
            .and_then(Value::as_str)
            .unwrap_or("?");
        *queue_side.entry(customer.to_string()).or_default() += field_u64(record, "amount");
    }
    for (order, _, _) in dead.values() {
        *queue_side.entry(order.customer.clone()).or_default() += order.amount;
    }
    let event_cents: u64 = expected.values().map(|t| t.1).sum();
    let mut totals_right = true;
    if projected != expected {
        totals_right = false;
        problems.push(format!(
            "the projection's totals {projected:?} differ from the placed orders' {expected:?}"
        ));
    }
    let expected_cents: BTreeMap<String, u64> =
        expected.iter().map(|(c, t)| (c.clone(), t.1)).collect();
    if queue_side != expected_cents {
        totals_right = false;
        problems.push(format!(
            "processed plus dead orders add up to {queue_side:?}, the placed ones to {expected_cents:?}"
        ));
    }
    if event_cents != sent_cents {
        totals_right = false;
        problems.push(format!(
            "the client sent {sent_cents} cents in all, the placed orders hold {event_cents}"
        ));
    }
    if projected_offset != stream_end {
        totals_right = false;
        problems.push(format!(
            "the projection stopped at offset {projected_offset}, the stream ends at {stream_end}"
        ));
    }

    let reports = scan(&Bucket::open(REPORTS_BUCKET).map_err(store)?, "report/")?.len();
    if reports == 0 {
        problems.push(
            "no report was written: the schedule runner fired no job while the workers ran"
                .to_string(),
        );
    }

    for (customer, (orders, cents)) in &projected {
        println!("customer {customer}: {orders} orders, {cents} cents");
    }
    for (name, v) in &per_worker {
        println!(
            "worker {name}: processed {}, retried {}, dead-lettered {}, repeats skipped {}, reports {}",
            field_u64(v, "processed"),
            field_u64(v, "retried"),
            field_u64(v, "dead"),
            field_u64(v, "repeats"),
            field_u64(v, "reports")
        );
    }
    for p in &problems {
        println!("problem: {p}");
    }
    println!("SUMMARY");
    println!(
        "orders: {sent} sent, {} processed, {} dead-lettered, {} lost, {twice} processed twice",
        processed.len(),
        dead.len(),
        lost.len()
    );
    println!(
        "retries: {} failed attempts retried, {} repeated deliveries skipped",
        tally("retried"),
        tally("repeats")
    );
    println!(
        "dead letters: {} with their last error{}",
        dead.len(),
        example_error
            .map(|e| format!(", e.g. {e}"))
            .unwrap_or_default()
    );
    println!(
        "totals: {} ({} customers, {} orders, {event_cents} cents; projection at offset {projected_offset} of {stream_end})",
        if totals_right { "right" } else { "WRONG" },
        projected.len(),
        projected.values().map(|t| t.0).sum::<u64>(),
    );
    println!(
        "workers: {} ({})",
        per_worker.len(),
        per_worker
            .iter()
            .map(|(n, v)| format!("{n} {}", field_u64(v, "processed")))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("reports: {reports} written for the schedule's jobs");
    if problems.is_empty() {
        println!("check: passed");
        Ok(true)
    } else {
        println!(
            "check: FAILED ({} problem(s), listed above)",
            problems.len()
        );
        Ok(false)
    }
}
