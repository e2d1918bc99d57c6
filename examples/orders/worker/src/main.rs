//! The orders example's worker. Run several at once on one data directory:
//!
//!     alk-host run orders-worker.wasm --data-dir DIR -- w1 [--work-ms MS] [--give-up-ms MS]
//!
//! It claims orders from the queue `orders` one at a time and processes
//! them. Some fail on purpose (`orders_common::process`): a failed attempt
//! is retried on the queue's backoff curve, and an order whose last attempt
//! fails goes to the dead letters with its error. A processed order is
//! recorded in the bucket `orders-processed` with `set-if-absent`, so that
//! a repeated delivery (a worker that stalled past its visibility timeout,
//! say) finds the record and does not process the order again. Between
//! orders it writes the reports the schedule sends to the queue `reports`.
//!
//! It exits 0 once the queue is drained: nothing waiting, delayed or in
//! flight, and every placed order (each has an event in `order-events`)
//! processed or dead. It gives up (exit 1) after `--give-up-ms` (default
//! 60,000) without work while orders are still unaccounted for.

use std::time::Duration;

use alk_guest::kv::Bucket;
use alk_guest::queue::{ClaimOptions, Job, Payload, Queue, Retried};
use alk_guest::{Error, stream};
use orders_common::{
    EVENTS_STREAM, MAX_ATTEMPTS, ORDERS_QUEUE, Order, PROCESSED_BUCKET, REPORTS_BUCKET,
    REPORTS_QUEUE, WORKERS_BUCKET, now_ms, process,
};
use serde_json::json;

/// What this worker did; saved under its name in `orders-workers`.
#[derive(Default)]
struct Tally {
    processed: u64,
    retried: u64,
    dead: u64,
    repeats: u64,
    reports: u64,
}

struct Worker {
    name: String,
    work: Duration,
    orders: Queue,
    reports: Queue,
    processed: Bucket,
    workers: Bucket,
    report_log: Bucket,
    tally: Tally,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: orders-worker NAME [--work-ms MS] [--give-up-ms MS]";
    let Some(name) = args.first().filter(|n| !n.starts_with('-')).cloned() else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let mut work_ms = 20;
    let mut give_up_ms = 60_000;
    let mut rest = args[1..].iter();
    while let Some(flag) = rest.next() {
        let value = rest.next().and_then(|v| v.parse::<u64>().ok());
        match (flag.as_str(), value) {
            ("--work-ms", Some(v)) => work_ms = v,
            ("--give-up-ms", Some(v)) => give_up_ms = v,
            _ => {
                eprintln!("{name}: bad argument {flag:?}; {usage}");
                std::process::exit(2);
            }
        }
    }
    let worker = Worker::open(name.clone(), Duration::from_millis(work_ms));
    match worker.and_then(|w| w.run(give_up_ms)) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("{name}: store error: {e:?}");
            std::process::exit(1);
        }
    }
}

/// Runs `f`, again while the store answers `busy` (locked by other
/// processes for longer than the host's own retries), for up to a minute.
fn again<T>(mut f: impl FnMut() -> Result<T, Error>) -> Result<T, Error> {
    let mut tries = 0;
    loop {
        match f() {
            Err(Error::Busy(_)) if tries < 300 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

/// Keys under `prefix` in `bucket`.
fn count_keys(bucket: &Bucket, prefix: &str) -> Result<u64, Error> {
    let mut n = 0;
    let mut cursor = None;
    loop {
        let page = bucket.scan_prefix(prefix, cursor.as_deref(), 1000)?;
        n += page.entries.len() as u64;
        cursor = page.next_cursor;
        if cursor.is_none() {
            return Ok(n);
        }
    }
}

impl Worker {
    fn open(name: String, work: Duration) -> Result<Worker, Error> {
        Ok(Worker {
            name,
            work,
            orders: Queue::open(ORDERS_QUEUE)?,
            reports: Queue::open(REPORTS_QUEUE)?,
            processed: Bucket::open(PROCESSED_BUCKET)?,
            workers: Bucket::open(WORKERS_BUCKET)?,
            report_log: Bucket::open(REPORTS_BUCKET)?,
            tally: Tally::default(),
        })
    }

    /// Works until the queue is drained (true) or nothing happened for
    /// `give_up_ms` while orders are unaccounted for (false).
    fn run(mut self, give_up_ms: u64) -> Result<bool, Error> {
        let mut idle_since = now_ms();
        loop {
            self.write_reports()?;
            // Waits (without using CPU) up to 250 ms for an order that can
            // be claimed: of each customer's group only the oldest, and
            // only while no other order of that customer is in flight.
            let take = ClaimOptions {
                max: 1,
                visibility_ms: Some(30_000),
                min_priority: None,
                wait_ms: Some(250),
            };
            let jobs = again(|| self.orders.claim(take))?;
            if jobs.is_empty() {
                let (drained, missing) = self.drained()?;
                if drained {
                    self.save()?;
                    let t = &self.tally;
                    println!(
                        "{}: drained; processed {}, retried {}, dead-lettered {}, repeats skipped {}, reports {}",
                        self.name, t.processed, t.retried, t.dead, t.repeats, t.reports
                    );
                    return Ok(true);
                }
                if now_ms() - idle_since > give_up_ms {
                    self.save()?;
                    eprintln!(
                        "{}: giving up after {} s without work: {missing} placed order(s) are neither processed nor dead nor in the queue (see `alk-host inspect queue orders`)",
                        self.name,
                        give_up_ms / 1000
                    );
                    return Ok(false);
                }
                continue;
            }
            for job in jobs {
                self.handle(job)?;
            }
            self.save()?;
            idle_since = now_ms();
        }
    }

    /// Whether every placed order is processed or dead and the queue holds
    /// nothing more; else how many placed orders are unaccounted for.
    fn drained(&self) -> Result<(bool, u64), Error> {
        let s = again(|| self.orders.stats())?;
        if s.waiting + s.delayed + s.in_flight > 0 {
            return Ok((false, 0));
        }
        let placed = again(|| stream::info(EVENTS_STREAM))?.last;
        let done = again(|| count_keys(&self.processed, ""))? + s.dead;
        Ok((done >= placed, placed.saturating_sub(done)))
    }

    fn handle(&mut self, job: Job) -> Result<(), Error> {
        let name = &self.name;
        let text = match &job.payload {
            Payload::Json(s) | Payload::Text(s) => s.clone(),
        };
        let order = match Order::parse(text.as_bytes()) {
            Ok(o) => o,
            Err(why) => {
                // Retrying cannot help a message that is not an order.
                again(|| {
                    self.orders
                        .fail(&job.receipt, &format!("not an order: {why}"))
                })?;
                println!("{name}: message {} is not an order; dead-lettered", job.id);
                self.tally.dead += 1;
                return Ok(());
            }
        };
        std::thread::sleep(self.work);
        match process(&order, job.attempt) {
            Ok(()) => {
                let record = json!({
                    "worker": name,
                    "attempt": job.attempt,
                    "customer": order.customer,
                    "amount": order.amount,
                    "at_ms": now_ms(),
                })
                .to_string();
                // Exactly one record per order, whichever worker and
                // delivery gets here first.
                let first = again(|| {
                    self.processed
                        .set_if_absent(&order.id, record.as_bytes(), None)
                })?;
                if first {
                    self.tally.processed += 1;
                    println!("{name}: {} processed (attempt {})", order.id, job.attempt);
                } else {
                    self.tally.repeats += 1;
                    println!(
                        "{name}: {} was already processed; acknowledging the repeated delivery",
                        order.id
                    );
                }
                match again(|| self.orders.ack(&job.receipt)) {
                    Ok(()) => {}
                    // Delivered again since (this worker was too slow):
                    // whoever has it now finds the record and skips it.
                    Err(Error::StaleReceipt(_)) => {
                        println!("{name}: {} was redelivered meanwhile", order.id)
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(reason) => match again(|| self.orders.retry(&job.receipt, &reason, None)) {
                Ok(Retried::Scheduled(at)) => {
                    self.tally.retried += 1;
                    println!(
                        "{name}: {} failed on attempt {}: {reason}; due again in {} ms",
                        order.id,
                        job.attempt,
                        at.saturating_sub(now_ms())
                    );
                }
                Ok(Retried::DeadLettered) => {
                    self.tally.dead += 1;
                    println!(
                        "{name}: {} dead-lettered after {} of {MAX_ATTEMPTS} attempts: {reason}",
                        order.id, job.attempt
                    );
                }
                Ok(Retried::Gone) => println!("{name}: {} was gone", order.id),
                Err(Error::StaleReceipt(_)) => {
                    println!("{name}: {} was redelivered meanwhile", order.id)
                }
                Err(e) => return Err(e),
            },
        }
        Ok(())
    }

    /// Takes the report jobs the schedule sent (without waiting) and writes
    /// a report for each: where the orders stand now.
    fn write_reports(&mut self) -> Result<(), Error> {
        let take = ClaimOptions {
            max: 10,
            visibility_ms: Some(30_000),
            min_priority: None,
            wait_ms: None,
        };
        for job in again(|| self.reports.claim(take))? {
            let s = again(|| self.orders.stats())?;
            let processed = again(|| count_keys(&self.processed, ""))?;
            let report = json!({
                "by": self.name,
                "at_ms": now_ms(),
                "waiting": s.waiting,
                "delayed": s.delayed,
                "in_flight": s.in_flight,
                "dead": s.dead,
                "processed": processed,
            })
            .to_string();
            let key = format!("report/{:012}", job.id);
            again(|| self.report_log.set(&key, report.as_bytes(), None))?;
            match again(|| self.reports.ack(&job.receipt)) {
                Ok(()) | Err(Error::StaleReceipt(_)) => {}
                Err(e) => return Err(e),
            }
            self.tally.reports += 1;
            println!(
                "{}: report {}: {} processed, {} waiting, {} delayed, {} in flight, {} dead",
                self.name, job.id, processed, s.waiting, s.delayed, s.in_flight, s.dead
            );
        }
        Ok(())
    }

    /// Saves the tally under this worker's name (only this worker writes
    /// that key).
    fn save(&self) -> Result<(), Error> {
        let t = &self.tally;
        let value = json!({
            "processed": t.processed,
            "retried": t.retried,
            "dead": t.dead,
            "repeats": t.repeats,
            "reports": t.reports,
        })
        .to_string();
        again(|| self.workers.set(&self.name, value.as_bytes(), None))
    }
}
