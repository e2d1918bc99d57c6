//! One kv operation per run, for tests and for poking at a data directory.
//!
//! Usage: `kv-tool <command> …`
//! - `get <bucket> <key>` prints the value or `(absent)`
//! - `set <bucket> <key> <value> [ttl-ms]` prints `ok`
//! - `set-if-absent <bucket> <key> <value> [ttl-ms]` prints `won` or `lost`
//! - `exists <bucket> <key>` prints `true` or `false`
//! - `delete <bucket> <key>` prints `ok`
//! - `scan <bucket> <prefix>` prints `key=value` lines
//! - `fill <bucket> <count> <value-bytes> <batch>` writes keys `k-000000`…
//!   with values of `value-bytes` bytes, `batch` keys per `set-many` (one
//!   transaction each), then prints `filled <count>`
//! - `getenv <name>` prints the variable or `(unset)`
//! - `read <path>` prints the file's contents
//!
//! An alk error is printed as `error: <variant>: <detail>` with exit status 1.

use alk_guest::kv::{Bucket, Entry};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let ttl = |i: usize| {
        a.get(i)
            .map(|t| t.parse::<u64>().expect("ttl-ms is a number"))
    };
    let result = match a.as_slice() {
        ["get", bucket, key] => Bucket::open(bucket)
            .and_then(|b| b.get(key))
            .map(|v| match v {
                Some(v) => String::from_utf8_lossy(&v).into_owned(),
                None => "(absent)".into(),
            }),
        ["set", bucket, key, value, ..] => Bucket::open(bucket)
            .and_then(|b| b.set(key, value.as_bytes(), ttl(4)))
            .map(|()| "ok".into()),
        ["set-if-absent", bucket, key, value, ..] => Bucket::open(bucket)
            .and_then(|b| b.set_if_absent(key, value.as_bytes(), ttl(4)))
            .map(|won| if won { "won" } else { "lost" }.into()),
        ["exists", bucket, key] => Bucket::open(bucket)
            .and_then(|b| b.exists(key))
            .map(|e| e.to_string()),
        ["delete", bucket, key] => Bucket::open(bucket)
            .and_then(|b| b.delete(key))
            .map(|()| "ok".into()),
        ["scan", bucket, prefix] => Bucket::open(bucket).and_then(|b| {
            let mut lines = Vec::new();
            let mut cursor = None;
            loop {
                let page = b.scan_prefix(prefix, cursor.as_deref(), 1000)?;
                lines.extend(
                    page.entries
                        .iter()
                        .map(|e| format!("{}={}", e.key, String::from_utf8_lossy(&e.value))),
                );
                match page.next_cursor {
                    Some(c) => cursor = Some(c),
                    None => break Ok(lines.join("\n")),
                }
            }
        }),
        ["fill", bucket, count, bytes, batch] => Bucket::open(bucket).and_then(|b| {
            let count: usize = count.parse().expect("count is a number");
            let bytes: usize = bytes.parse().expect("value-bytes is a number");
            let batch: usize = batch.parse().expect("batch is a number");
            let value = vec![b'v'; bytes];
            let keys: Vec<usize> = (0..count).collect();
            for chunk in keys.chunks(batch.max(1)) {
                let entries: Vec<Entry> = chunk
                    .iter()
                    .map(|i| Entry {
                        key: format!("k-{i:06}"),
                        value: value.clone(),
                    })
                    .collect();
                b.set_many(&entries, None)?;
            }
            Ok(format!("filled {count}"))
        }),
        ["getenv", name] => Ok(std::env::var(name).unwrap_or_else(|_| "(unset)".into())),
        ["read", path] => match std::fs::read_to_string(path) {
            Ok(s) => Ok(s),
            Err(e) => {
                eprintln!("read {path}: {e}");
                std::process::exit(1);
            }
        },
        _ => {
            eprintln!(
                "usage: kv-tool <get|set|set-if-absent|exists|delete|scan|fill|getenv|read> …"
            );
            std::process::exit(2);
        }
    };
    match result {
        Ok(out) => println!("{out}"),
        Err(e) => {
            println!("error: {e:?}");
            std::process::exit(1);
        }
    }
}
