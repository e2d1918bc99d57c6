//! Lock operations from the command line, for tests.
//!
//! Usage: `lock-tool <command> <lock> …`
//! - `contend <lock> <owner> <rounds> <ttl-ms> <work-ms>`: `rounds` times,
//!   waits for the lock (trying every millisecond), then inside the
//!   critical section sleeps `work-ms` and records
//!   `<owner> <start-µs> <end-µs>` under key `<token>` in bucket `sections`,
//!   releases, and prints `section <token> <start-µs> <end-µs>`
//! - `hold <lock> <owner> <ttl-ms>`: takes the lock, prints
//!   `held <token> <expires-at>`, then sleeps forever
//! - `hold-until <lock> <owner> <ttl-ms> <channel>`: takes the lock, prints
//!   `held <token>`, releases it when `channel` is notified
//! - `acquire <lock> <owner> <ttl-ms> <timeout-ms>`: tries every 5 ms until
//!   it gets the lock (`acquired <token> <acquired-at-ms>`) or the time is
//!   up (`timeout`, exit 1)
//! - `holder <lock>`: `<owner> <expires-at> <token>` or `none`

use std::io::Write;

use alk_guest::tool::{fail, num};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use alk_guest::kv::Bucket;
use alk_guest::lock;

fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros()
}

fn wait_for(
    name: &str,
    owner: &str,
    ttl: u64,
    every: Duration,
    timeout: Duration,
) -> Option<lock::Lock> {
    let start = Instant::now();
    loop {
        if let Some(l) = lock::try_lock(name, owner, ttl).unwrap_or_else(|e| fail(e)) {
            return Some(l);
        }
        if start.elapsed() >= timeout {
            return None;
        }
        std::thread::sleep(every);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut out = std::io::stdout().lock();
    let forever = Duration::from_secs(3600);
    match a.as_slice() {
        ["contend", name, owner, rounds, ttl, work] => {
            let sections = Bucket::open("sections").unwrap_or_else(|e| fail(e));
            for _ in 0..num(rounds) {
                let l = wait_for(name, owner, num(ttl), Duration::from_millis(1), forever).unwrap();
                let start = now_us();
                std::thread::sleep(Duration::from_millis(num(work)));
                let token = l.token();
                let record = format!("{owner} {start} {}", now_us());
                sections
                    .set(&format!("{token:012}"), record.as_bytes(), None)
                    .unwrap_or_else(|e| fail(e));
                let end = now_us();
                if !l.release().unwrap_or_else(|e| fail(e)) {
                    println!("error: lock {token} expired inside its critical section");
                    std::process::exit(1);
                }
                writeln!(out, "section {token} {start} {end}").unwrap();
            }
        }
        ["hold", name, owner, ttl] => {
            let l = wait_for(name, owner, num(ttl), Duration::from_millis(1), forever).unwrap();
            let info = lock::holder(name)
                .unwrap_or_else(|e| fail(e))
                .expect("held");
            writeln!(out, "held {} {}", l.token(), info.expires_at).unwrap();
            out.flush().unwrap();
            loop {
                std::thread::sleep(forever);
            }
        }
        ["hold-until", name, owner, ttl, channel] => {
            let until = alk_guest::notify::listen(channel).unwrap_or_else(|e| fail(e));
            let l = wait_for(name, owner, num(ttl), Duration::from_millis(1), forever).unwrap();
            writeln!(out, "held {}", l.token()).unwrap();
            out.flush().unwrap();
            while !until.wait(60_000) {}
            let released = l.release().unwrap_or_else(|e| fail(e));
            writeln!(out, "released {released}").unwrap();
        }
        ["acquire", name, owner, ttl, timeout] => {
            match wait_for(
                name,
                owner,
                num(ttl),
                Duration::from_millis(5),
                Duration::from_millis(num(timeout)),
            ) {
                Some(l) => {
                    let at = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap()
                        .as_millis();
                    writeln!(out, "acquired {} {at}", l.token()).unwrap();
                }
                None => {
                    writeln!(out, "timeout").unwrap();
                    std::process::exit(1);
                }
            }
        }
        ["holder", name] => match lock::holder(name).unwrap_or_else(|e| fail(e)) {
            Some(h) => writeln!(out, "{} {} {}", h.owner, h.expires_at, h.token).unwrap(),
            None => writeln!(out, "none").unwrap(),
        },
        _ => {
            eprintln!("usage: lock-tool <contend|hold|acquire|holder> <lock> …");
            std::process::exit(2);
        }
    }
}
