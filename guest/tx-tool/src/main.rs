//! Transactions from the command line, for the crash and rollback tests.
//!
//! Usage: `tx-tool <command> …`:
//! - `produce <stream> <n>`: publishes events `e1` … `e<n>`; prints `produced <n>`
//! - `work <src> <out> <queue> <outbox> <consumer> <channel>`: until `src`
//!   has nothing after `consumer`'s saved offset, takes the next event and in
//!   one transaction publishes it to `out` keyed by its offset, sends its
//!   offset to `queue` and to `outbox`, saves the offset and notifies
//!   `channel`; prints `done <offset>` after each commit, `idle` at the end
//! - `work-streams <src> <out> <consumer> <channel>`: the same without the
//!   sends (the cost of a transaction that stays in the stream store)
//! - `abandon <src> <out> <queue> <outbox> <consumer> <channel> rollback|drop|trap`:
//!   does the same for the next event, then rolls the transaction back,
//!   drops it, or traps with it open; prints `abandoned`

use alk_guest::queue::{Payload, SendOptions};
use alk_guest::stream::{self, NewEvent};
use alk_guest::tool::{fail, num};
use alk_guest::tx::Transaction;

fn plain() -> SendOptions {
    SendOptions {
        priority: Some(1),
        delay_ms: None,
        run_at_ms: None,
        max_attempts: None,
        backoff_base_ms: None,
        expires_in_ms: None,
        group: None,
    }
}

/// The transaction of the next event after `consumer`'s offset, open; or
/// `None` when there is none. `a` is src, out, queue, outbox, consumer,
/// channel; the sends are left out when queue and outbox are empty.
fn next(a: &[String]) -> Option<(u64, Transaction)> {
    let (src, out, queue, outbox, consumer, channel) = (&a[0], &a[1], &a[2], &a[3], &a[4], &a[5]);
    let sends = !queue.is_empty();
    let from = stream::get_offset(src, consumer)
        .unwrap_or_else(|e| fail(e))
        .unwrap_or(0);
    let events = stream::read_since(src, from, 1).unwrap_or_else(|e| fail(e));
    let e = events.into_iter().next()?;
    let tx = Transaction::new();
    let key = e.offset.to_string();
    tx.publish_with_key(out, &key, &e.payload)
        .unwrap_or_else(|e| fail(e));
    if sends {
        tx.enqueue(queue, &[Payload::Text(key.clone())], &plain())
            .unwrap_or_else(|e| fail(e));
        tx.outbox_enqueue(outbox, &[Payload::Text(key.clone())], &plain())
            .unwrap_or_else(|e| fail(e));
    }
    tx.save_offset(src, consumer, e.offset)
        .unwrap_or_else(|e| fail(e));
    tx.notify(channel).unwrap_or_else(|e| fail(e));
    Some((e.offset, tx))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("produce") if args.len() == 3 => {
            let n = num(&args[2]);
            let mut i = 0;
            while i < n {
                let batch: Vec<NewEvent> = (i + 1..=(i + 1000).min(n))
                    .map(|k| NewEvent {
                        key: None,
                        payload: format!("e{k}").into_bytes(),
                    })
                    .collect();
                i += batch.len() as u64;
                stream::publish_batch(&args[1], &batch).unwrap_or_else(|e| fail(e));
            }
            println!("produced {n}");
        }
        Some("work") if args.len() == 7 => {
            while let Some((offset, tx)) = next(&args[1..]) {
                tx.commit().unwrap_or_else(|e| fail(e));
                println!("done {offset}");
            }
            println!("idle");
        }
        Some("work-streams") if args.len() == 5 => {
            let a = [
                args[1].clone(),
                args[2].clone(),
                String::new(),
                String::new(),
                args[3].clone(),
                args[4].clone(),
            ];
            while let Some((offset, tx)) = next(&a) {
                tx.commit().unwrap_or_else(|e| fail(e));
                println!("done {offset}");
            }
            println!("idle");
        }
        Some("abandon") if args.len() == 8 => {
            let Some((_, tx)) = next(&args[1..]) else {
                println!("nothing to abandon");
                return;
            };
            match args[7].as_str() {
                "rollback" => tx.rollback(),
                "drop" => drop(tx),
                "trap" => {
                    // Left open on purpose: the host must roll it back.
                    std::mem::forget(tx);
                    unreachable!("trap with a transaction open");
                }
                other => {
                    eprintln!("unknown ending {other}");
                    std::process::exit(2);
                }
            }
            println!("abandoned");
        }
        _ => {
            eprintln!("usage: tx-tool produce|work|abandon … (see the source)");
            std::process::exit(2);
        }
    }
}
