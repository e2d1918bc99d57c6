//! A small app that remembers: a visit counter and a guest book kept in an
//! alk bucket, so every run sees what earlier runs (and other processes)
//! wrote.
//!
//! Usage: `hello [NAME]`

use std::time::{SystemTime, UNIX_EPOCH};

use alk_guest::kv::Bucket;

fn main() {
    let visitor = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "friend".to_string());
    if let Err(e) = run(&visitor) {
        eprintln!("hello: {e}");
        std::process::exit(1);
    }
}

fn run(visitor: &str) -> Result<(), alk_guest::Error> {
    let bucket = Bucket::open("hello")?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();

    // The first run ever claims the "since" key; later runs lose the race.
    let first = bucket.set_if_absent("since", now.to_string().as_bytes(), None)?;

    let visits = bucket
        .get("visits")?
        .and_then(|v| String::from_utf8(v).ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        + 1;
    bucket.set("visits", visits.to_string().as_bytes(), None)?;
    bucket.set(&format!("guest:{now:015}"), visitor.as_bytes(), None)?;

    println!("Hello, {visitor}!");
    if first {
        println!("This is the first run; alk will remember it.");
    } else {
        println!("This app has now run {visits} times.");
    }
    let page = bucket.scan_prefix("guest:", None, 1000)?;
    let recent: Vec<String> = page
        .entries
        .iter()
        .rev()
        .take(3)
        .map(|e| String::from_utf8_lossy(&e.value).into_owned())
        .collect();
    println!("Most recent visitors: {}", recent.join(", "));
    Ok(())
}
