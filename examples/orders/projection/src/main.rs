//! The orders example's projection: totals per customer from the
//! `order-placed` events of the stream `order-events`.
//!
//!     alk-host run orders-projection.wasm --data-dir DIR
//!
//! Exactly once: the totals and the offset of the last event they include
//! live in one bucket, `orders-totals`, and each batch writes them with one
//! `set-many`, which stores all of its entries or none. A run resumes from
//! that offset, so an event is never counted twice nor skipped, whenever a
//! run stops. (The stream's own consumer offset, `totals`, is saved after
//! each batch too, so `alk-host inspect` and the dashboard show the
//! projection's lag; the bucket's offset is the one that counts.)
//!
//! A lock keeps it to one run at a time: two runs reading the same totals
//! and writing them back would lose one's additions.

use std::collections::BTreeMap;

use alk_guest::kv::{Bucket, Entry};
use alk_guest::{Error, lock, stream};
use orders_common::{
    EVENTS_STREAM, PROJECTION_CONSUMER, PROJECTION_LOCK, TOTALS_BUCKET, field_u64, json_of,
};
use serde_json::json;

fn main() {
    if let Err(e) = run() {
        eprintln!("orders-projection: store error: {e:?}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Error> {
    let owner = format!("projection-{}", orders_common::now_ms());
    // 60 s is far more than a run takes; a run that dies frees it then.
    let Some(held) = lock::try_lock(PROJECTION_LOCK, &owner, 60_000)? else {
        let holder = lock::holder(PROJECTION_LOCK)?.map(|h| h.owner);
        eprintln!(
            "orders-projection: another run holds the lock {PROJECTION_LOCK} ({}); run it again when that one ends",
            holder.unwrap_or_default()
        );
        std::process::exit(1);
    };
    let totals = Bucket::open(TOTALS_BUCKET)?;
    let start: u64 = totals
        .get("offset")?
        .and_then(|v| String::from_utf8(v).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut offset = start;
    let mut applied = 0u64;
    loop {
        let events = stream::read_since(EVENTS_STREAM, offset, 500)?;
        let Some(last) = events.last().map(|e| e.offset) else {
            break;
        };
        // The batch's customers, starting from their saved totals.
        let mut batch: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for event in &events {
            let v = json_of(&event.payload);
            if v.get("event").and_then(|e| e.as_str()) != Some("order-placed") {
                continue;
            }
            let Some(customer) = v.get("customer").and_then(|c| c.as_str()) else {
                continue;
            };
            if !batch.contains_key(customer) {
                let saved = totals
                    .get(&format!("customer/{customer}"))?
                    .map(|b| json_of(&b))
                    .map(|t| (field_u64(&t, "orders"), field_u64(&t, "cents")))
                    .unwrap_or((0, 0));
                batch.insert(customer.to_string(), saved);
            }
            let t = batch.get_mut(customer).unwrap();
            t.0 += 1;
            t.1 += field_u64(&v, "amount");
            applied += 1;
        }
        let mut entries: Vec<Entry> = batch
            .iter()
            .map(|(customer, (orders, cents))| Entry {
                key: format!("customer/{customer}"),
                value: json!({"orders": orders, "cents": cents})
                    .to_string()
                    .into_bytes(),
            })
            .collect();
        entries.push(Entry {
            key: "offset".into(),
            value: last.to_string().into_bytes(),
        });
        // The totals and the offset they reach: both stored, or neither.
        totals.set_many(&entries, None)?;
        stream::save_offset(EVENTS_STREAM, PROJECTION_CONSUMER, last)?;
        offset = last;
        if !held.renew(60_000)? {
            eprintln!("orders-projection: lost the lock {PROJECTION_LOCK}; stopping");
            std::process::exit(1);
        }
    }
    held.release()?;
    if offset == start {
        println!("projection: up to date at offset {offset}");
    } else {
        println!(
            "projection: applied {applied} order-placed event(s), offsets {}..={offset}; totals saved with offset {offset}",
            start + 1
        );
    }
    Ok(())
}
