//! The native side of `cargo xtask bench`.
//!
//! `alk-bench op <turso|turso-v1|sqlite> <full|relaxed> <op> <n> <tag> <data-dir>`
//! runs the same operations as the `bench-guest` guest, with the same SQL:
//! - `turso` (`turso-v1`: new queues in `localqueue.v1`): alk's storage
//!   layer (`alk-store` over `alk-store-turso`) called directly from Rust — the same
//!   statements, the same connection strategy (pooled connections, cached
//!   prepared statements), the same retries — without a guest or host glue;
//! - `sqlite`: stock SQLite through rusqlite, WAL mode, one connection with
//!   cached prepared statements, `synchronous` FULL or NORMAL to match.
//!
//! - `postgres-direct`: the Postgres engine's statements through
//!   tokio-postgres on one connection (the last argument is the database
//!   URL, schema included, instead of a directory).
//!
//! It prints `ops <n> <elapsed-µs> <start-µs> <end-µs>` like the guest.
//!
//! `alk-bench mix sqlite <full|relaxed> <role…> <data-dir>` is one process
//! of the multi-process mix (see `tests/shared/mix.rs`) on stock SQLite:
//! the same roles, steps and output as the `soak` guest under `alk-host`.
//!
//! `alk-bench guests <count> <full|relaxed> <bench-guest.wasm> <op> <n>
//! <data-dir> <cache-dir>` runs `count` `bench-guest`s at once in one
//! process (each `n / count` operations, tags apart) and prints one `ops`
//! line for all of them: what several guests of one host achieve together.
//!
//! `alk-bench http-load <addr> <GET|POST> <path> <connections> <requests>`
//! loads an HTTP server on this machine (see `load.rs`).
//!
//! `alk-bench instances <count> <wake-tool.wasm> <data-dir> <cache-dir>`
//! runs `count` guests at once in one process, each blocked in a wait, and
//! prints `rss <before-KiB> <with-count-KiB>`.

mod load;
mod pg;

use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use alk_host::{AlkCtx, Durability, RunOptions, Runner};
use alk_store::jobs::{QueueLimits, SendOptions};
use alk_store::kv::Bucket;
use alk_store::lock::Locks;
use alk_store::queue::{Payload, Queue};
use alk_store::rate::RateLimit;
use alk_store::stream::Streams;
use alk_store::{Engine, KvLimits, StreamLimits};
use alk_store_turso::{RetryPolicy, StoreOptions, TursoEngine, kv, lock, queue, stream};
use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params};

fn wall_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros()
}

fn now_ms() -> i64 {
    (wall_us() / 1000) as i64
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    match a.as_slice() {
        ["op", engine, durability, op, n, tag, dir] => {
            let n: usize = n.parse().expect("n");
            let relaxed = *durability == "relaxed";
            let (done, elapsed, start, end) = match *engine {
                "turso" | "turso-v1" => runtime.block_on(turso(
                    op,
                    n,
                    tag,
                    Path::new(dir),
                    relaxed,
                    *engine == "turso-v1",
                )),
                "turso-fresh" | "turso-reused" => runtime.block_on(turso_raw(
                    *engine == "turso-fresh",
                    op,
                    n,
                    Path::new(dir),
                    relaxed,
                )),
                "sqlite" => sqlite(op, n, tag, Path::new(dir), relaxed),
                // The last argument is a postgres:// URL here.
                // Like `alk-host run --store`: a single-threaded runtime.
                "postgres-direct" => tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(pg::direct(op, n, tag, dir, relaxed)),
                other => panic!("unknown engine {other}"),
            };
            println!("ops {done} {elapsed} {start} {end}");
        }
        ["mix", "sqlite", durability, rest @ .., dir] => {
            mix_sqlite(rest, Path::new(dir), *durability == "relaxed");
        }
        ["guests", count, durability, guest, op, n, dir, cache] => {
            runtime.block_on(guests(
                count.parse().expect("count"),
                *durability == "relaxed",
                Path::new(guest),
                op,
                n.parse().expect("n"),
                Path::new(dir),
                Path::new(cache),
            ));
        }
        ["http-load", addr, method, path, connections, requests] => {
            let line = runtime.block_on(load::run(
                addr,
                method,
                path,
                connections.parse().expect("connections"),
                requests.parse().expect("requests"),
            ));
            println!("{line}");
        }
        ["instances", count, guest, dir, cache] => {
            let count: usize = count.parse().expect("count");
            runtime.block_on(instances(
                count,
                Path::new(guest),
                Path::new(dir),
                Path::new(cache),
            ));
        }
        _ => {
            eprintln!(
                "usage: alk-bench op <turso|turso-v1|sqlite|postgres-direct> <full|relaxed> <op> <n> <tag> <dir> | instances <count> <guest> <dir> <cache>"
            );
            std::process::exit(2);
        }
    }
}

type Timing = (usize, u128, u128, u128);

/// Groups the messages of a grouped claim benchmark are spread over.
const GROUPS: usize = 100;

/// `queue-gclaim-<depth>` (one claim at a time from `depth` messages in
/// [`GROUPS`] groups) as `depth`.
fn group_claim_op(op: &str) -> Option<usize> {
    op.strip_prefix("queue-gclaim-")?.parse().ok()
}

/// An op with a limits suffix: `<op>-rate` runs on a queue with a rate
/// that never runs dry (a million tokens, a million more every
/// millisecond: what the bucket costs, not what it holds back), `<op>-n3`
/// on a queue whose groups have three messages in flight at once. The op
/// without its suffix, and the limits.
fn limited_op(op: &str) -> (&str, Option<QueueLimits>) {
    if let Some(base) = op.strip_suffix("-rate") {
        let rate = RateLimit {
            capacity: 1_000_000,
            refill: 1_000_000,
            interval_ms: 1,
        };
        let limits = QueueLimits {
            rate: Some(rate),
            ..QueueLimits::default()
        };
        (base, Some(limits))
    } else if let Some(base) = op.strip_suffix("-n3") {
        let limits = QueueLimits {
            group_concurrency: 3,
            ..QueueLimits::default()
        };
        (base, Some(limits))
    } else {
        (op, None)
    }
}

/// `queue-claim-<batch>-<depth>` as `(batch, depth)`.
fn claim_op(op: &str) -> Option<(u32, usize)> {
    let (batch, depth) = op.strip_prefix("queue-claim-")?.split_once('-')?;
    Some((batch.parse().ok()?, depth.parse().ok()?))
}

async fn turso(op: &str, n: usize, tag: &str, dir: &Path, relaxed: bool, v1: bool) -> Timing {
    let opts = StoreOptions {
        new_queues: if v1 {
            alk_store_turso::NewQueues::V1
        } else {
            alk_store_turso::NewQueues::default()
        },
        retry: RetryPolicy::default(),
        durability: if relaxed {
            Durability::Relaxed
        } else {
            Durability::Full
        },
        ..StoreOptions::default()
    };
    let value = vec![7u8; 100];
    let text = "x".repeat(100);
    // The engine behind the same checking layer guests' calls go through.
    let engine = TursoEngine::new(dir, opts);
    let b = Bucket::open(&engine, "bench", KvLimits::default())
        .await
        .unwrap();
    let q = Queue::open(&engine, "bench").await.unwrap();
    let s = Streams::open(&engine, StreamLimits::default())
        .await
        .unwrap();
    let l = Locks::open(&engine).await.unwrap();
    let (op, limits) = limited_op(op);
    if let Some(limits) = limits {
        q.set_limits(&limits).await.unwrap();
    }
    match op {
        "kv-get" => b.set("k", &value, None, now_ms()).await.unwrap(),
        "kv-scan100" => {
            let entries: Vec<(String, Vec<u8>)> = (0..100)
                .map(|i| (format!("s/{i:03}"), value.clone()))
                .collect();
            b.set_many(&entries, None, now_ms()).await.unwrap();
        }
        "queue-recv-ack-1" | "queue-recv-ack-100" | "queue-preload" => {
            let batch: Vec<Payload> = (0..1000).map(|_| Payload::Text(text.clone())).collect();
            for _ in 0..n.div_ceil(1000) {
                q.send_batch(&batch, now_ms()).await.unwrap();
            }
        }
        "stream-read100" => {
            let events: Vec<(Option<String>, Vec<u8>)> =
                (0..1000).map(|_| (None, value.clone())).collect();
            s.publish_batch("bench", &events, now_ms()).await.unwrap();
        }
        "stream-replay" => {
            let events: Vec<(Option<String>, Vec<u8>)> =
                (0..1000).map(|_| (None, value.clone())).collect();
            for _ in 0..n.div_ceil(1000) {
                s.publish_batch("replay", &events, now_ms()).await.unwrap();
            }
        }
        op if claim_op(op).is_some() => {
            let (_, depth) = claim_op(op).unwrap();
            for start in (0..depth).step_by(1000) {
                let batch: Vec<Payload> = (start..depth.min(start + 1000))
                    .map(|_| Payload::Text(text.clone()))
                    .collect();
                q.send_batch(&batch, now_ms()).await.unwrap();
            }
        }
        op if group_claim_op(op).is_some() => {
            let per_group = group_claim_op(op).unwrap() / GROUPS;
            for g in 0..GROUPS {
                let options = SendOptions {
                    group: Some(format!("g{g}")),
                    ..SendOptions::default()
                };
                for start in (0..per_group).step_by(1000) {
                    let batch: Vec<Payload> = (start..per_group.min(start + 1000))
                        .map(|_| Payload::Text(text.clone()))
                        .collect();
                    q.send_batch_with(&batch, &options, now_ms()).await.unwrap();
                }
            }
        }
        _ => {}
    }
    let start_wall = wall_us();
    let start = Instant::now();
    let mut done = n;
    match op {
        "kv-get" => {
            for _ in 0..n {
                assert!(b.get("k", now_ms()).await.unwrap().is_some());
            }
        }
        "kv-set" => {
            for i in 0..n {
                b.set(&format!("{tag}/{}", i % 1000), &value, None, now_ms())
                    .await
                    .unwrap();
            }
        }
        "kv-set-if-absent" => {
            for i in 0..n {
                assert!(
                    b.set_if_absent(&format!("{tag}/c{i}"), &value, None, now_ms())
                        .await
                        .unwrap()
                );
            }
        }
        "kv-scan100" => {
            for _ in 0..n {
                assert_eq!(
                    b.scan_prefix("s/", None, 100, now_ms())
                        .await
                        .unwrap()
                        .entries
                        .len(),
                    100
                );
            }
        }
        "queue-send" => {
            for _ in 0..n {
                q.send(&Payload::Text(text.clone()), now_ms())
                    .await
                    .unwrap();
            }
        }
        "queue-recv-ack-1" => {
            for _ in 0..n {
                let got = q.receive(1, None, now_ms()).await.unwrap();
                q.ack(&got[0].receipt).await.unwrap();
            }
        }
        "queue-recv-ack-100" | "queue-drain-100" => {
            done = 0;
            loop {
                if op == "queue-recv-ack-100" && done >= n {
                    break;
                }
                let got = q.receive(100, None, now_ms()).await.unwrap();
                if got.is_empty() {
                    break;
                }
                let receipts: Vec<String> = got.iter().map(|m| m.receipt.clone()).collect();
                q.ack_batch(&receipts).await.unwrap();
                done += got.len();
            }
        }
        "queue-preload" => {}
        op if claim_op(op).is_some() || group_claim_op(op).is_some() => {
            let batch = claim_op(op).map(|(b, _)| b).unwrap_or(1);
            done = 0;
            while done < n {
                let got = q.receive(batch, None, now_ms()).await.unwrap();
                assert!(!got.is_empty(), "the queue ran dry");
                if batch == 1 {
                    q.ack(&got[0].receipt).await.unwrap();
                } else {
                    let receipts: Vec<String> = got.iter().map(|m| m.receipt.clone()).collect();
                    q.ack_batch(&receipts).await.unwrap();
                }
                done += got.len();
            }
        }
        "stream-publish" => {
            for _ in 0..n {
                s.publish("bench", None, &value, now_ms()).await.unwrap();
            }
        }
        "stream-replay" => {
            let (mut offset, mut read) = (0, 0);
            while read < n {
                let events = s.read_since("replay", offset, 1000).await.unwrap();
                assert!(!events.is_empty(), "the stream ended early");
                offset = events.last().unwrap().offset;
                read += events.len();
            }
        }
        "stream-read100" => {
            for i in 0..n {
                assert_eq!(
                    s.read_since("bench", ((i * 100) % 900) as u64, 100)
                        .await
                        .unwrap()
                        .len(),
                    100
                );
            }
        }
        "lock-cycle" => {
            for _ in 0..n {
                let got = l
                    .try_lock(&format!("bench-{tag}"), tag, 10_000, now_ms())
                    .await
                    .unwrap()
                    .expect("free");
                assert!(l.release(&got, now_ms()).await.unwrap());
            }
        }
        other => panic!("unknown op {other}"),
    }
    (done, start.elapsed().as_micros(), start_wall, wall_us())
}

/// The connection-strategy comparison: kv get and set through the turso
/// API itself, either with a new connection (and a freshly prepared
/// statement) per operation, or with one reused connection and a cached
/// prepared statement. It works on a file of its own that is not an alk
/// store, so it opens it here (multi-process WAL, like every alk open).
async fn turso_raw(fresh: bool, op: &str, n: usize, dir: &Path, relaxed: bool) -> Timing {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("raw.sqlite");
    let db = turso::Builder::new_local(path.to_str().unwrap())
        .experimental_multiprocess_wal(true)
        .build()
        .await
        .unwrap();
    let connect = || async {
        let c = db.connect().unwrap();
        c.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
        if relaxed {
            c.execute("PRAGMA synchronous = NORMAL", ()).await.unwrap();
        }
        c
    };
    let setup = connect().await;
    setup.execute_batch(kv::DDL).await.unwrap();
    setup
        .execute(kv::PUT, ("k", vec![7u8; 100], Option::<i64>::None))
        .await
        .unwrap();
    let reused = connect().await;
    let value = vec![7u8; 100];
    let start_wall = wall_us();
    let start = Instant::now();
    for i in 0..n {
        let conn = if fresh {
            connect().await
        } else {
            reused.clone()
        };
        match op {
            "kv-get" => {
                let mut st = if fresh {
                    conn.prepare(kv::SELECT).await.unwrap()
                } else {
                    conn.prepare_cached(kv::SELECT).await.unwrap()
                };
                let mut rows = st.query(("k",)).await.unwrap();
                let mut found = false;
                while rows.next().await.unwrap().is_some() {
                    found = true;
                }
                assert!(found);
            }
            "kv-set" => {
                let mut st = if fresh {
                    conn.prepare(kv::PUT).await.unwrap()
                } else {
                    conn.prepare_cached(kv::PUT).await.unwrap()
                };
                st.execute((
                    format!("r/{}", i % 1000),
                    value.clone(),
                    Option::<i64>::None,
                ))
                .await
                .unwrap();
            }
            other => panic!("{other} is not measured for connection strategies"),
        }
    }
    (n, start.elapsed().as_micros(), start_wall, wall_us())
}

/// A stock SQLite database in WAL mode with one format's DDL.
fn sqlite_db(dir: &Path, file: &str, ddl: &str, relaxed: bool) -> Connection {
    std::fs::create_dir_all(dir).unwrap();
    let conn = Connection::open(dir.join(file)).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .unwrap();
    // Switching to WAL takes an exclusive lock that the busy handler does
    // not wait for: several processes starting at once retry.
    for attempt in 0.. {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Ok(()) => break,
            Err(_) if attempt < 1000 => std::thread::sleep(std::time::Duration::from_millis(2)),
            Err(e) => panic!("cannot switch {file} to WAL: {e}"),
        }
    }
    conn.pragma_update(None, "synchronous", if relaxed { "NORMAL" } else { "FULL" })
        .unwrap();
    // Several processes may create the schema at once.
    for _ in 0..100 {
        if conn
            .execute_batch(&format!("BEGIN IMMEDIATE; {ddl} COMMIT;"))
            .is_ok()
        {
            break;
        }
        let _ = conn.execute_batch("ROLLBACK");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    conn
}

/// Runs `f` in a `BEGIN IMMEDIATE` transaction, retrying while busy.
fn immediate<T>(conn: &Connection, mut f: impl FnMut(&Connection) -> rusqlite::Result<T>) -> T {
    loop {
        match conn.execute_batch("BEGIN IMMEDIATE") {
            Ok(()) => {}
            Err(_) => {
                std::thread::sleep(std::time::Duration::from_micros(200));
                continue;
            }
        }
        match f(conn).and_then(|v| conn.execute_batch("COMMIT").map(|_| v)) {
            Ok(v) => return v,
            Err(_) => {
                let _ = conn.execute_batch("ROLLBACK");
            }
        }
    }
}

/// `localqueue.v2` send on stock SQLite: the engine's statement, a plain
/// message (or one of `group`, joining the round first, as the engine does).
fn send_sqlite(c: &Connection, text: &str, group: Option<&str>) -> rusqlite::Result<()> {
    let now = now_ms();
    if let Some(g) = group {
        let last: i64 = c
            .prepare_cached(queue::LAST_SERVED)?
            .query_map([], |r| r.get(0))?
            .next()
            .transpose()?
            .unwrap_or(0);
        c.prepare_cached(queue::JOIN)?
            .execute(params![g, 0, last])?;
    }
    c.prepare_cached(queue::SEND_V2)?.execute(params![
        "text",
        text,
        now,
        now,
        0,
        group,
        Option::<i64>::None,
        Option::<i64>::None,
        Option::<i64>::None
    ])?;
    Ok(())
}

/// alk's publish statements (docs/formats/localstream.v1.md) on SQLite,
/// inside the caller's write transaction.
fn publish_sqlite(c: &Connection, name: &str, payload: &[u8]) -> rusqlite::Result<i64> {
    let last: Option<i64> = c
        .prepare_cached(stream::LAST_OFFSET)?
        .query_row(params![name], |r| r.get(0))
        .optional()?;
    let offset = last.unwrap_or(0) + 1;
    c.prepare_cached(stream::APPEND)?.execute(params![
        name,
        offset,
        Option::<String>::None,
        payload,
        now_ms()
    ])?;
    let counter = if last.is_some() {
        stream::SET_LAST_OFFSET
    } else {
        stream::NEW_STREAM
    };
    c.prepare_cached(counter)?.execute(params![name, offset])?;
    Ok(offset)
}

/// The `localqueue.v2` claim on stock SQLite, statement for statement as
/// the engine runs it (the round, the lane's due messages or each group's
/// head, the claim, the moves in the round); `(id, uuid, body, attempt)`
/// per message claimed, in claim order.
fn claim_sqlite(qc: &Connection, max: i64, visibility: i64) -> Vec<(i64, String, String, i64)> {
    immediate(qc, |c| {
        let now = now_ms();
        let uuid = format!("{:032x}", wall_us());
        let round: Vec<(i64, String)> = c
            .prepare_cached(queue::ROUND)?
            .query_map(params![i32::MIN, i64::MIN, max + 32], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let mut picks: Vec<i64> = Vec::new();
        let mut served: Vec<i64> = Vec::new();
        let saw_group = round.iter().any(|(_, k)| !k.is_empty());
        for (gid, key) in &round {
            let left = max - picks.len() as i64;
            if left == 0 {
                break;
            }
            if key.is_empty() {
                let due: Vec<i64> = c
                    .prepare_cached(queue::DUE)?
                    .query_map(params![i32::MIN, now, left], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?;
                if !due.is_empty() && saw_group {
                    served.push(*gid);
                }
                picks.extend(due);
            } else {
                let head: Option<(i64, i64)> = c
                    .prepare_cached(queue::HEAD)?
                    .query_map(params![key], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .next()
                    .transpose()?;
                if let Some((id, visible_at)) = head
                    && visible_at <= now
                {
                    picks.push(id);
                    served.push(*gid);
                }
            }
        }
        let ids = format!(
            "[{}]",
            picks
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        let mut claimed: HashMap<i64, (String, i64)> = c
            .prepare_cached(queue::CLAIM_IDS)?
            .query_map(params![now + visibility, uuid, ids], |r| {
                Ok((r.get(0)?, (r.get(2)?, r.get(3)?)))
            })?
            .collect::<rusqlite::Result<_>>()?;
        if !served.is_empty() {
            let mut next: i64 = c
                .prepare_cached(queue::LAST_SERVED)?
                .query_map([], |r| r.get(0))?
                .next()
                .transpose()?
                .unwrap_or(0);
            for gid in served {
                next += 1;
                c.prepare_cached(queue::SERVE)?
                    .execute(params![next, gid])?;
            }
        }
        Ok(picks
            .iter()
            .filter_map(|id| {
                let (body, attempt) = claimed.remove(id)?;
                Some((*id, uuid.clone(), body, attempt))
            })
            .collect())
    })
}

/// `ack-batch` with the statements alk runs: the single-ack statements for
/// one receipt, the two set-based ones for more (and a group that empties
/// leaves the round).
fn ack_sqlite(qc: &Connection, receipts: &[String]) {
    let pairs: Vec<String> = receipts
        .iter()
        .map(|r| {
            let (id, uuid) = r.split_once(':').unwrap();
            format!("[{id},\"{uuid}\"]")
        })
        .collect();
    let pairs = format!("[{}]", pairs.join(","));
    let ids = format!(
        "[{}]",
        receipts
            .iter()
            .map(|r| r.split_once(':').unwrap().0)
            .collect::<Vec<_>>()
            .join(",")
    );
    immediate(qc, |c| {
        if receipts.len() == 1 {
            let (id, uuid) = receipts[0].split_once(':').unwrap();
            let id: i64 = id.parse().unwrap();
            // A message without a group first, as alk does.
            if c.prepare_cached(queue::ACK_UNGROUPED)?
                .execute(params![id, uuid])?
                == 1
            {
                return Ok(());
            }
            let group: Option<Option<String>> = c
                .prepare_cached(queue::ACK_V2)?
                .query_map(params![id, uuid], |r| r.get(0))?
                .next()
                .transpose()?;
            match group {
                None => {
                    c.prepare_cached(queue::EXISTS)?
                        .query_map(params![id], |_| Ok(()))?
                        .count();
                }
                Some(Some(g)) => {
                    c.prepare_cached(queue::LEAVE)?.execute(params![g])?;
                }
                Some(None) => {}
            }
            return Ok(());
        }
        let groups: Vec<Option<String>> = c
            .prepare_cached(queue::ACK_BATCH_V2)?
            .query_map(params![pairs], |r| r.get(2))?
            .collect::<rusqlite::Result<_>>()?;
        for g in groups.into_iter().flatten() {
            c.prepare_cached(queue::LEAVE)?.execute(params![g])?;
        }
        c.prepare_cached(queue::EXISTING)?
            .query_map(params![ids], |r| r.get::<_, i64>(0))?
            .count();
        Ok(())
    })
}

fn sqlite(op: &str, n: usize, tag: &str, dir: &Path, relaxed: bool) -> Timing {
    let value = vec![7u8; 100];
    let text = "x".repeat(100);
    let kvc = sqlite_db(dir, "kv.sqlite", kv::DDL, relaxed);
    let qc = sqlite_db(dir, "queue.sqlite", queue::DDL_V2, relaxed);
    let sc = sqlite_db(dir, "stream.sqlite", stream::DDL, relaxed);
    let lc = sqlite_db(dir, "lock.sqlite", lock::DDL, relaxed);
    let get = |key: &str| -> Option<Vec<u8>> {
        let mut st = kvc.prepare_cached(kv::SELECT).unwrap();
        let mut rows = st.query(params![key]).unwrap();
        let row = rows.next().unwrap()?;
        let value: Vec<u8> = row.get(0).unwrap();
        let expires: Option<i64> = row.get(1).unwrap();
        if expires.is_some_and(|e| e <= now_ms()) {
            None
        } else {
            Some(value)
        }
    };
    let claim = |max: i64| -> Vec<String> {
        claim_sqlite(&qc, max, 30_000)
            .into_iter()
            .map(|(id, uuid, _, _)| format!("{id}:{uuid}"))
            .collect()
    };
    let ack = |receipts: &[String]| ack_sqlite(&qc, receipts);
    let publish_to = |c: &Connection, name: &str| publish_sqlite(c, name, &value);
    let publish = |c: &Connection| publish_sqlite(c, "bench", &value);
    match op {
        "kv-get" => {
            kvc.execute(kv::PUT, params!["k", value, Option::<i64>::None])
                .unwrap();
        }
        "kv-scan100" => immediate(&kvc, |c| {
            for i in 0..100 {
                c.prepare_cached(kv::PUT)?.execute(params![
                    format!("s/{i:03}"),
                    value,
                    Option::<i64>::None
                ])?;
            }
            Ok(())
        }),
        "queue-recv-ack-1" | "queue-recv-ack-100" | "queue-preload" => {
            for _ in 0..n.div_ceil(1000) {
                immediate(&qc, |c| {
                    for _ in 0..1000 {
                        send_sqlite(c, &text, None)?;
                    }
                    Ok(())
                });
            }
        }
        "stream-read100" => immediate(&sc, |c| {
            for _ in 0..1000 {
                publish(c)?;
            }
            Ok(())
        }),
        "stream-replay" => {
            for _ in 0..n.div_ceil(1000) {
                immediate(&sc, |c| {
                    for _ in 0..1000 {
                        publish_to(c, "replay")?;
                    }
                    Ok(())
                });
            }
        }
        op if claim_op(op).is_some() => {
            let (_, depth) = claim_op(op).unwrap();
            for start in (0..depth).step_by(1000) {
                immediate(&qc, |c| {
                    for _ in start..depth.min(start + 1000) {
                        send_sqlite(c, &text, None)?;
                    }
                    Ok(())
                });
            }
        }
        op if group_claim_op(op).is_some() => {
            let per_group = group_claim_op(op).unwrap() / GROUPS;
            for g in 0..GROUPS {
                let group = format!("g{g}");
                for start in (0..per_group).step_by(1000) {
                    immediate(&qc, |c| {
                        for _ in start..per_group.min(start + 1000) {
                            send_sqlite(c, &text, Some(&group))?;
                        }
                        Ok(())
                    });
                }
            }
        }
        _ => {}
    }
    let mut done = n;
    let start_wall = wall_us();
    let start = Instant::now();
    match op {
        "kv-get" => (0..n).for_each(|_| assert!(get("k").is_some())),
        "kv-set" => (0..n).for_each(|i| {
            kvc.prepare_cached(kv::PUT)
                .unwrap()
                .execute(params![
                    format!("{tag}/{}", i % 1000),
                    value,
                    Option::<i64>::None
                ])
                .unwrap();
        }),
        "kv-set-if-absent" => (0..n).for_each(|i| {
            let won = kvc
                .prepare_cached(kv::PUT_IF_ABSENT)
                .unwrap()
                .execute(params![
                    format!("{tag}/c{i}"),
                    value,
                    Option::<i64>::None,
                    now_ms()
                ])
                .unwrap();
            assert_eq!(won, 1);
        }),
        "kv-scan100" => (0..n).for_each(|_| {
            let mut st = kvc.prepare_cached(kv::SCAN).unwrap();
            let rows = st
                .query_map(params!["s/"], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, Vec<u8>>(1)?,
                        r.get::<_, Option<i64>>(2)?,
                    ))
                })
                .unwrap()
                .map_while(|r| r.ok())
                .take_while(|(k, _, _)| k.starts_with("s/"))
                .take(100)
                .count();
            assert_eq!(rows, 100);
        }),
        "queue-send" => (0..n).for_each(|_| send_sqlite(&qc, &text, None).unwrap()),
        "queue-recv-ack-1" => (0..n).for_each(|_| {
            let got = claim(1);
            ack(&got);
        }),
        "queue-recv-ack-100" | "queue-drain-100" => {
            done = 0;
            loop {
                if op == "queue-recv-ack-100" && done >= n {
                    break;
                }
                let got = claim(100);
                if got.is_empty() {
                    break;
                }
                ack(&got);
                done += got.len();
            }
        }
        "queue-preload" => {}
        op if claim_op(op).is_some() || group_claim_op(op).is_some() => {
            let batch = claim_op(op).map(|(b, _)| b).unwrap_or(1);
            done = 0;
            while done < n {
                let got = claim(batch as i64);
                assert!(!got.is_empty(), "the queue ran dry");
                ack(&got);
                done += got.len();
            }
        }
        "stream-publish" => (0..n).for_each(|_| {
            immediate(&sc, |c| publish(c));
        }),
        "stream-replay" => {
            let (mut offset, mut read) = (0i64, 0usize);
            while read < n {
                let mut st = sc.prepare_cached(stream::READ_SINCE).unwrap();
                let events: Vec<(i64, Option<String>, Vec<u8>, i64)> = st
                    .query_map(params!["replay", offset, 1000], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                    })
                    .unwrap()
                    .map(|r| r.unwrap())
                    .collect();
                assert!(!events.is_empty(), "the stream ended early");
                offset = events.last().unwrap().0;
                read += events.len();
            }
        }
        "stream-read100" => (0..n).for_each(|i| {
            let mut st = sc.prepare_cached(stream::READ_SINCE).unwrap();
            let count = st
                .query_map(params!["bench", ((i * 100) % 900) as i64, 100], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, Option<String>>(1)?,
                        r.get::<_, Vec<u8>>(2)?,
                        r.get::<_, i64>(3)?,
                    ))
                })
                .unwrap()
                .count();
            assert_eq!(count, 100);
        }),
        "lock-cycle" => (0..n).for_each(|_| {
            let now = now_ms();
            let token: i64 = lc
                .prepare_cached(lock::ACQUIRE)
                .unwrap()
                .query_row(
                    params![format!("bench-{tag}"), tag, now, now + 10_000],
                    |r| r.get(0),
                )
                .unwrap();
            let released = lc
                .prepare_cached(lock::RELEASE)
                .unwrap()
                .execute(params![format!("bench-{tag}"), tag, token, now_ms()])
                .unwrap();
            assert_eq!(released, 1);
        }),
        other => panic!("unknown op {other}"),
    }
    (done, start.elapsed().as_micros(), start_wall, wall_us())
}

/// Timings of the calls one mix process made.
#[derive(Default)]
struct MixStats {
    lat: Vec<u32>,
    write_max: u32,
}

impl MixStats {
    fn call<T>(&mut self, writes: bool, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let v = f();
        let us = start.elapsed().as_micros().min(u32::MAX as u128) as u32;
        self.lat.push(us);
        if writes {
            self.write_max = self.write_max.max(us);
        }
        v
    }

    fn report(mut self) {
        self.lat.sort_unstable();
        let at = |q: f64| {
            self.lat
                .get(((self.lat.len() as f64 * q) as usize).min(self.lat.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0)
        };
        println!("ops {}", self.lat.len());
        println!(
            "lat {} {} {}",
            at(0.5),
            at(0.99),
            self.lat.last().copied().unwrap_or(0)
        );
        println!("write {}", self.write_max);
        // SQLite's busy handler waits (up to 5 s); a busy past it panics.
        println!("busy 0");
    }
}

/// One process of the mix on stock SQLite, with the statements of alk's
/// formats: a claim is `BEGIN IMMEDIATE`, the due ids, a claim per id.
fn mix_sqlite(role: &[&str], dir: &Path, relaxed: bool) {
    let kvc = sqlite_db(dir, "kv.sqlite", kv::DDL, relaxed);
    let qc = sqlite_db(dir, "queue.sqlite", queue::DDL_V2, relaxed);
    let sc = sqlite_db(dir, "stream.sqlite", stream::DDL, relaxed);
    let lc = sqlite_db(dir, "lock.sqlite", lock::DDL, relaxed);
    let mut stats = MixStats::default();
    let send = |text: &str| send_sqlite(&qc, text, None).unwrap();
    let lock_once = |stats: &mut MixStats, owner: &str| {
        let now = now_ms();
        let token: Option<i64> = stats.call(true, || {
            lc.prepare_cached(lock::ACQUIRE)
                .unwrap()
                .query_row(params!["soak", owner, now, now + 5_000], |r| r.get(0))
                .ok()
        });
        if let Some(token) = token {
            stats.call(true, || {
                lc.prepare_cached(lock::RELEASE)
                    .unwrap()
                    .execute(params!["soak", owner, token, now_ms()])
                    .unwrap()
            });
        }
    };
    match role {
        ["producer", tag, ms] => {
            let until = Instant::now() + std::time::Duration::from_millis(ms.parse().unwrap());
            let mut n = 0u64;
            while Instant::now() < until {
                n += 1;
                let payload = format!("{tag}-{n}");
                stats.call(true, || send(&payload));
                if n.is_multiple_of(10) {
                    stats.call(true, || {
                        kvc.prepare_cached(kv::PUT)
                            .unwrap()
                            .execute(params![
                                tag,
                                n.to_string().into_bytes(),
                                Option::<i64>::None
                            ])
                            .unwrap()
                    });
                }
                if n.is_multiple_of(20) {
                    stats.call(true, || {
                        immediate(&sc, |c| publish_sqlite(c, "soak", payload.as_bytes()))
                    });
                }
                if n.is_multiple_of(50) {
                    lock_once(&mut stats, tag);
                }
            }
            println!("sent {n}");
        }
        ["worker", batch, name] => {
            let batch: i64 = batch.parse().unwrap();
            let (mut acked, mut rounds, mut position, mut stopped) = (0u64, 0u64, 0i64, false);
            while !stopped {
                // Left out of `write`, as the soak guest's waiting receive is.
                let got: Vec<(i64, String, String, i64)> =
                    stats.call(false, || claim_sqlite(&qc, batch, 60_000));
                if got.is_empty() {
                    // No wake-up to wait for: poll, as SQLite queues do.
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    continue;
                }
                rounds += 1;
                let mut settle = Vec::new();
                for (id, uuid, body, attempt) in got {
                    if body == "stop" {
                        if stopped {
                            qc.prepare_cached(queue::NACK)
                                .unwrap()
                                .execute(params![id, uuid, now_ms()])
                                .unwrap();
                            continue;
                        }
                        stopped = true;
                    } else {
                        println!("got {body} {attempt}");
                        acked += 1;
                    }
                    settle.push((id, uuid));
                }
                stats.call(true, || {
                    let receipts: Vec<String> = settle
                        .iter()
                        .map(|(id, uuid)| format!("{id}:{uuid}"))
                        .collect();
                    ack_sqlite(&qc, &receipts)
                });
                if rounds % 10 == 0 {
                    stats.call(false, || {
                        kvc.prepare_cached(kv::SELECT)
                            .unwrap()
                            .query_map(params!["p0"], |r| r.get::<_, Vec<u8>>(0))
                            .unwrap()
                            .count()
                    });
                }
                if rounds % 20 == 0 {
                    let last: Option<i64> = stats.call(false, || {
                        sc.prepare_cached(stream::READ_SINCE)
                            .unwrap()
                            .query_map(params!["soak", position, 10], |r| r.get::<_, i64>(0))
                            .unwrap()
                            .filter_map(|r| r.ok())
                            .last()
                    });
                    position = last.unwrap_or(position);
                }
                if rounds % 50 == 0 {
                    lock_once(&mut stats, name);
                }
            }
            println!("acked {acked}");
        }
        ["stop", count] => {
            for _ in 0..count.parse::<usize>().unwrap() {
                stats.call(true, || send("stop"));
            }
            println!("stopped");
        }
        other => panic!("unknown mix role {other:?}"),
    }
    stats.report();
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Runs `count` guests at once, each waiting on a channel, and reports the
/// resident memory before and while they all wait.
async fn guests(
    count: usize,
    relaxed: bool,
    guest: &Path,
    op: &str,
    n: usize,
    dir: &Path,
    cache: &Path,
) {
    let runner = std::sync::Arc::new(Runner::with_cache(Some(cache)).unwrap());
    let component = runner.load(guest).unwrap();
    let durability = if relaxed {
        Durability::Relaxed
    } else {
        Durability::Full
    };
    let mut tasks = Vec::new();
    for i in 0..count {
        let (runner, component) = (runner.clone(), component.clone());
        let ctx = AlkCtx::builder()
            .data_dir(dir)
            .durability(durability)
            .build();
        let o = RunOptions {
            args: vec![op.to_string(), (n / count).to_string(), format!("g{i}")],
            capture_output: true,
            ..Default::default()
        };
        tasks.push(tokio::spawn(async move {
            runner.run(&component, "bench-guest", ctx, &o).await
        }));
    }
    let (mut total, mut start, mut end) = (0u128, u128::MAX, 0u128);
    for t in tasks {
        let out = t.await.unwrap().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let f: Vec<u128> = text
            .lines()
            .find_map(|l| l.strip_prefix("ops "))
            .unwrap_or_else(|| panic!("no ops line: {text}"))
            .split(' ')
            .filter_map(|x| x.parse().ok())
            .collect();
        total += f[0];
        start = start.min(f[2]);
        end = end.max(f[3]);
    }
    println!("ops {total} {} {start} {end}", end - start);
}

async fn instances(count: usize, guest: &Path, dir: &Path, cache: &Path) {
    let runner = std::sync::Arc::new(Runner::with_cache(Some(cache)).unwrap());
    let component = runner.load(guest).unwrap();
    let opts = |args: &[&str]| RunOptions {
        args: args.iter().map(|s| s.to_string()).collect(),
        capture_output: true,
        ..Default::default()
    };
    // One run first, so everything a single instance needs is in place.
    let ctx = AlkCtx::builder().data_dir(dir).build();
    runner
        .run(
            &component,
            "wake-tool",
            ctx,
            &opts(&["listen", "warm-up", "1"]),
        )
        .await
        .unwrap();
    let before = rss_kib();
    let mut tasks = Vec::new();
    for _ in 0..count {
        let (runner, component) = (runner.clone(), component.clone());
        let ctx = AlkCtx::builder().data_dir(dir).build();
        let o = opts(&["listen", "go", "60000"]);
        tasks.push(tokio::spawn(async move {
            runner.run(&component, "wake-tool", ctx, &o).await
        }));
    }
    // Every guest is attached once the wake topic has `count` listeners;
    // give them a moment, then measure while they wait.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let during = rss_kib();
    TursoEngine::new(dir, RetryPolicy::default())
        .wakes()
        .unwrap()
        .signal("notify.go");
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    println!("rss {before} {during}");
}
