//! The power-loss tests' workload and reader (`tests/integration/powerloss.rs`).
//!
//! Writers run until killed (or for `count` operations, `0` = forever) and
//! print one line per acknowledged operation, after the call returned `Ok`,
//! flushing each line:
//! - `kv <bucket> <writer> <count>`: sets `k/<writer>/<i>` = `v<i>`, then
//!   `last/<writer>` = `<i>`; prints `kv <writer> <i>`
//! - `send <queue> <writer> <count>`: sends `<writer>-<i>`; prints
//!   `sent <writer> <i> <id>`
//! - `work <queue> <writer> <count>`: receives one message at a time (600 s
//!   visibility), prints `claimed <payload>`, acks it, prints
//!   `acked <payload>`
//! - `tx <stream> <queue> <writer> <count>`: in one transaction publishes
//!   `<writer>-<i>` (key and payload) to `stream` and sends it to `queue`;
//!   prints `tx <writer> <i>` after the commit
//! - `probe <bucket> <stream> <jobs> <txq> <writer>`: a new writer after a
//!   cut: 5 of each of `kv`, `send`, `tx` and up to 5 `work`, then `probe ok`
//!
//! The reader:
//! - `dump <bucket> <stream> <jobs> <jobs-max-id> <txq>`: `event <offset>
//!   <key>` per event of `stream` (read first: opening the stream store
//!   relays sends a cut left pending), `job <queue> <id> <state> <payload>`
//!   per message of `jobs` with an id up to `jobs-max-id` and of `txq`
//!   (ids from 1 until 200 in a row are missing), `kv <key> <value>` per
//!   key of `bucket`, then `dump ok`.
//!
//! An alk error is printed to stderr as `error: <variant>` with exit
//! status 1.

use std::io::Write;

use alk_guest::kv::Bucket;
use alk_guest::queue::{JobState, Payload, Queue, SendOptions};
use alk_guest::stream;
use alk_guest::tool::num;
use alk_guest::tx::Transaction;

fn fail(what: &str, e: alk_guest::Error) -> ! {
    eprintln!("error: {what}: {e:?}");
    std::process::exit(1);
}

fn line(text: String) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").unwrap();
    out.flush().unwrap();
}

fn plain() -> SendOptions {
    SendOptions {
        priority: None,
        delay_ms: None,
        run_at_ms: None,
        max_attempts: None,
        backoff_base_ms: None,
        expires_in_ms: None,
        group: None,
    }
}

fn body(p: &Payload) -> &str {
    match p {
        Payload::Text(t) | Payload::Json(t) => t,
    }
}

fn forever(count: u64) -> impl Iterator<Item = u64> {
    (1..).take_while(move |i| count == 0 || *i <= count)
}

fn kv(bucket: &str, writer: &str, count: u64) {
    let b = Bucket::open(bucket).unwrap_or_else(|e| fail("open bucket", e));
    for i in forever(count) {
        b.set(&format!("k/{writer}/{i}"), format!("v{i}").as_bytes(), None)
            .unwrap_or_else(|e| fail("kv set", e));
        b.set(&format!("last/{writer}"), i.to_string().as_bytes(), None)
            .unwrap_or_else(|e| fail("kv set last", e));
        line(format!("kv {writer} {i}"));
    }
}

fn send(queue: &str, writer: &str, count: u64) {
    let q = Queue::open(queue).unwrap_or_else(|e| fail("open queue", e));
    for i in forever(count) {
        let id = q
            .send(&Payload::Text(format!("{writer}-{i}")))
            .unwrap_or_else(|e| fail("send", e));
        line(format!("sent {writer} {i} {id}"));
    }
}

fn work(queue: &str, count: u64, wait_ms: u64) {
    let q = Queue::open(queue).unwrap_or_else(|e| fail("open queue", e));
    let mut done = 0;
    while count == 0 || done < count {
        let got = q
            .receive_wait(1, Some(600_000), wait_ms)
            .unwrap_or_else(|e| fail("receive", e));
        if got.is_empty() && count != 0 {
            return;
        }
        for m in got {
            let p = body(&m.payload).to_string();
            line(format!("claimed {p}"));
            q.ack(&m.receipt).unwrap_or_else(|e| fail("ack", e));
            line(format!("acked {p}"));
            done += 1;
        }
    }
}

fn tx(stream_name: &str, queue: &str, writer: &str, count: u64) {
    for i in forever(count) {
        let key = format!("{writer}-{i}");
        let t = Transaction::new();
        t.publish_with_key(stream_name, &key, key.as_bytes())
            .unwrap_or_else(|e| fail("tx publish", e));
        t.enqueue(queue, &[Payload::Text(key.clone())], &plain())
            .unwrap_or_else(|e| fail("tx enqueue", e));
        t.commit().unwrap_or_else(|e| fail("tx commit", e));
        line(format!("tx {writer} {i}"));
    }
}

fn state(s: JobState) -> &'static str {
    match s {
        JobState::Waiting => "waiting",
        JobState::Delayed => "delayed",
        JobState::InFlight => "in-flight",
        JobState::Dead => "dead",
    }
}

fn dump_queue(name: &str, max_id: Option<u64>) {
    let q = Queue::open(name).unwrap_or_else(|e| fail("open queue", e));
    let mut missing = 0;
    let mut id = 0;
    loop {
        id += 1;
        match max_id {
            Some(max) if id > max => break,
            None if missing >= 200 => break,
            _ => {}
        }
        match q.get_job(id).unwrap_or_else(|e| fail("get-job", e)) {
            Some(j) => {
                missing = 0;
                line(format!(
                    "job {name} {id} {} {}",
                    state(j.state),
                    body(&j.payload)
                ));
            }
            None => missing += 1,
        }
    }
}

fn dump(bucket: &str, stream_name: &str, jobs: &str, jobs_max: u64, txq: &str) {
    let mut from = 0;
    loop {
        let events =
            stream::read_since(stream_name, from, 1000).unwrap_or_else(|e| fail("read stream", e));
        let Some(last) = events.last() else { break };
        from = last.offset;
        for e in &events {
            line(format!(
                "event {} {}",
                e.offset,
                e.key.as_deref().unwrap_or("-")
            ));
        }
    }
    dump_queue(jobs, Some(jobs_max));
    dump_queue(txq, None);
    let b = Bucket::open(bucket).unwrap_or_else(|e| fail("open bucket", e));
    let mut cursor = None;
    loop {
        let page = b
            .scan_prefix("", cursor.as_deref(), 1000)
            .unwrap_or_else(|e| fail("scan", e));
        for e in &page.entries {
            line(format!(
                "kv {} {}",
                e.key,
                String::from_utf8_lossy(&e.value)
            ));
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    line("dump ok".into());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["kv", bucket, writer, count] => kv(bucket, writer, num(count)),
        ["send", queue, writer, count] => send(queue, writer, num(count)),
        ["work", queue, _writer, count] => work(queue, num(count), 1_000),
        ["tx", stream_name, queue, writer, count] => tx(stream_name, queue, writer, num(count)),
        ["probe", bucket, stream_name, jobs, txq, writer] => {
            kv(bucket, writer, 5);
            send(jobs, writer, 5);
            tx(stream_name, txq, writer, 5);
            work(jobs, 5, 0);
            line("probe ok".into());
        }
        ["dump", bucket, stream_name, jobs, jobs_max, txq] => {
            dump(bucket, stream_name, jobs, num(jobs_max), txq)
        }
        _ => {
            eprintln!("usage: powerloss-tool kv|send|work|tx|probe|dump … (see the source)");
            std::process::exit(2);
        }
    }
}
