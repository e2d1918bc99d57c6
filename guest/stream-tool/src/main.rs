//! Stream operations from the command line, for tests.
//!
//! Usage: `stream-tool <command> <stream> …`
//! - `publish <s> <count> <tag>`: publishes `<tag>-0` … `<tag>-<count-1>`
//!   one by one, then prints `published <count>`
//! - `follow <s> <consumer> <until-offset> <timeout-ms> [pause-ms]`:
//!   subscribes and reads batches of up to 100 events, printing
//!   `ev <offset> <payload>` for each and saving the position after each
//!   batch (`saved <offset>`), pausing `pause-ms` between batches, until
//!   the position reaches `until-offset` or the time is up; then
//!   `done <position>`
//! - `get-offset <s> <consumer>`: prints the saved offset or `none`
//!
//! An alk error is printed as `error: <variant>` with exit status 1.

use std::io::Write;

use alk_guest::tool::{fail, num};
use std::time::{Duration, Instant};

use alk_guest::stream;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut out = std::io::stdout().lock();
    match a.as_slice() {
        ["publish", s, count, tag] => {
            let count = num(count);
            for i in 0..count {
                stream::publish(s, format!("{tag}-{i}").as_bytes()).unwrap_or_else(|e| fail(e));
            }
            writeln!(out, "published {count}").unwrap();
        }
        ["follow", s, consumer, until, timeout, rest @ ..] => {
            let (until, timeout) = (num(until), Duration::from_millis(num(timeout)));
            let pause = Duration::from_millis(rest.first().map(|p| num(p)).unwrap_or(0));
            let sub = stream::subscribe(s, consumer).unwrap_or_else(|e| fail(e));
            let start = Instant::now();
            while sub.position() < until && start.elapsed() < timeout {
                let events = sub.next(100).unwrap_or_else(|e| fail(e));
                if events.is_empty() {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                }
                for e in &events {
                    writeln!(
                        out,
                        "ev {} {}",
                        e.offset,
                        String::from_utf8_lossy(&e.payload)
                    )
                    .unwrap();
                }
                sub.save().unwrap_or_else(|e| fail(e));
                writeln!(out, "saved {}", sub.position()).unwrap();
                out.flush().unwrap();
                std::thread::sleep(pause);
            }
            writeln!(out, "done {}", sub.position()).unwrap();
        }
        ["get-offset", s, consumer] => {
            match stream::get_offset(s, consumer).unwrap_or_else(|e| fail(e)) {
                Some(o) => writeln!(out, "{o}").unwrap(),
                None => writeln!(out, "none").unwrap(),
            }
        }
        _ => {
            eprintln!("usage: stream-tool <publish|follow|get-offset> <stream> …");
            std::process::exit(2);
        }
    }
}
