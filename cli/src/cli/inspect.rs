//! `alk-host inspect`: what a data directory or database holds, read
//! through the one safe open path without creating or changing a store.

use std::process::ExitCode;

use alk_host::store::StreamLimits;
use alk_host::store::queue::Queue;
use alk_host::store::stream::Streams;
use serde_json::{Value, json};

use super::run::block_on;
use super::store::{StoreArgs, err};
use super::view::{
    self, ago, job_json, limits_json, limits_text, now_ms, payload_json, state_name, stats_json,
    stream_json, table, until, value_json,
};

/// Show what the stores hold: every store with its figures, or one queue,
/// stream or bucket in detail. Reads only: it never creates, converts or
/// migrates a store, and running workers are not disturbed.
#[derive(Debug, clap::Args)]
pub struct InspectCommand {
    #[command(flatten)]
    common: Common,

    #[command(subcommand)]
    what: Option<What>,
}

#[derive(Debug, Clone, clap::Args)]
struct Common {
    #[command(flatten)]
    store: StoreArgs,

    /// Print JSON (one document) instead of tables.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// A queue: its counts, then its messages by id (payload, state,
    /// attempts, last error), or its dead letters with --dead.
    Queue {
        /// The queue.
        name: String,
        /// List the dead letters instead of the live messages.
        #[arg(long)]
        dead: bool,
        /// List messages with ids above this one (for the next page).
        #[arg(long, value_name = "ID")]
        after: Option<u64>,
        /// Most messages to list (1 to 100).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100))]
        limit: u32,
        #[command(flatten)]
        common: Common,
    },
    /// A stream: its first and last offsets, each consumer's offset and lag.
    Stream {
        /// The stream.
        name: String,
        #[command(flatten)]
        common: Common,
    },
    /// A bucket's keys (by prefix, a page at a time), or one key's value
    /// with --get.
    Kv {
        /// The bucket.
        bucket: String,
        /// Only keys starting with this.
        #[arg(long, default_value = "")]
        prefix: String,
        /// The cursor a previous page printed, for the next page.
        #[arg(long)]
        cursor: Option<String>,
        /// Most keys to list (1 to 1000).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
        /// Print this key's value instead of listing keys.
        #[arg(long, value_name = "KEY", conflicts_with_all = ["prefix", "cursor"])]
        get: Option<String>,
        #[command(flatten)]
        common: Common,
    },
}

impl InspectCommand {
    /// Runs the command; the process exit code.
    pub fn execute(self) -> ExitCode {
        block_on(async { self.run().await.map(|()| ExitCode::SUCCESS) })
    }

    async fn run(self) -> wasmtime::Result<()> {
        let parent = self.common;
        // Options may come before the subcommand or after it.
        let merge = |c: Common| Common {
            store: c.store.or(&parent.store),
            json: c.json || parent.json,
        };
        match self.what {
            None => {
                let (engine, catalog) = parent.store.existing().await?;
                let o = view::overview(&engine, &catalog).await.map_err(err)?;
                emit(parent.json, o.to_json(), || o.tables());
            }
            Some(What::Queue {
                name,
                dead,
                after,
                limit,
                common,
            }) => {
                let common = merge(common);
                let (engine, catalog) = common.store.existing().await?;
                if !catalog.queues.contains(&name) {
                    wasmtime::bail!(
                        "there is no queue {name:?} in {} (its queues: {})",
                        engine.describe(),
                        listing(&catalog.queues)
                    );
                }
                let q = Queue::open(&*engine, &name).await.map_err(err)?;
                let now = now_ms();
                let stats = q.stats(now).await.map_err(err)?;
                let limits = q.limits().await.map_err(err)?;
                let jobs = if dead {
                    q.dead_letters(after, limit, now).await
                } else {
                    q.jobs(after, limit, now).await
                }
                .map_err(err)?;
                let doc = json!({
                    "queue": name,
                    "stats": stats_json(&stats),
                    "limits": limits_json(&limits),
                    if dead { "dead_letters" } else { "jobs" }: jobs.iter().map(job_json).collect::<Vec<_>>(),
                    "next_after": (jobs.len() == limit as usize).then(|| jobs.last().map(|j| j.id)).flatten(),
                });
                emit(common.json, doc, || {
                    let mut out = table(
                        &[
                            "QUEUE",
                            "WAITING",
                            "DELAYED",
                            "IN FLIGHT",
                            "DEAD",
                            "OLDEST WAITING",
                            "GROUPS BUSY/ALL",
                        ],
                        vec![vec![
                            name.clone(),
                            stats.waiting.to_string(),
                            stats.delayed.to_string(),
                            stats.in_flight.to_string(),
                            stats.dead.to_string(),
                            stats
                                .oldest_waiting_enqueued_at
                                .map(|t| ago(now, t))
                                .unwrap_or_else(|| "-".into()),
                            format!("{}/{}", stats.groups_in_flight, stats.groups),
                        ]],
                    );
                    out.push_str(&format!("limits: {}\n\n", limits_text(&limits)));
                    let rows = jobs
                        .iter()
                        .map(|j| {
                            vec![
                                j.id.to_string(),
                                state_name(j.state).to_string(),
                                j.attempt.to_string(),
                                j.group.clone().unwrap_or_else(|| "-".into()),
                                if dead {
                                    j.died_at.map(|t| ago(now, t)).unwrap_or_default()
                                } else {
                                    until(now, j.due_at)
                                },
                                j.last_error.clone().unwrap_or_else(|| "-".into()),
                                short(&payload_json(&j.payload)),
                            ]
                        })
                        .collect();
                    out.push_str(&table(
                        &[
                            "ID",
                            "STATE",
                            "ATTEMPT",
                            "GROUP",
                            if dead { "DIED" } else { "DUE" },
                            "LAST ERROR",
                            "PAYLOAD",
                        ],
                        rows,
                    ));
                    if jobs.len() == limit as usize
                        && let Some(last) = jobs.last()
                    {
                        out.push_str(&format!("(more: --after {})\n", last.id));
                    }
                    out
                });
            }
            Some(What::Stream { name, common }) => {
                let common = merge(common);
                let (engine, catalog) = common.store.existing().await?;
                if !catalog.streams.contains(&name) {
                    wasmtime::bail!(
                        "there is no stream {name:?} in {} (its streams: {})",
                        engine.describe(),
                        listing(&catalog.streams)
                    );
                }
                let s = Streams::open(&*engine, StreamLimits::default())
                    .await
                    .map_err(err)?;
                let info = s.info(&name).await.map_err(err)?;
                emit(common.json, stream_json(&name, &info), || {
                    let mut out = format!(
                        "stream {name}: first offset {}, last {}\n\n",
                        info.first
                            .map(|f| f.to_string())
                            .unwrap_or_else(|| "-".into()),
                        info.last
                    );
                    out.push_str(&table(
                        &["CONSUMER", "OFFSET", "LAG"],
                        info.consumers
                            .iter()
                            .map(|c| {
                                vec![c.consumer.clone(), c.offset.to_string(), c.lag.to_string()]
                            })
                            .collect(),
                    ));
                    out
                });
            }
            Some(What::Kv {
                bucket,
                prefix,
                cursor,
                limit,
                get,
                common,
            }) => {
                let common = merge(common);
                let (engine, catalog) = common.store.existing().await?;
                if !catalog.buckets.contains(&bucket) {
                    wasmtime::bail!(
                        "there is no bucket {bucket:?} in {} (its buckets: {})",
                        engine.describe(),
                        listing(&catalog.buckets)
                    );
                }
                let b = view::bucket(&engine, &bucket).await.map_err(err)?;
                let now = now_ms();
                match get {
                    Some(key) => {
                        let value = b.get(&key, now).await.map_err(err)?;
                        let Some(value) = value else {
                            wasmtime::bail!("bucket {bucket:?} has no key {key:?}");
                        };
                        let shown = value_json(&value);
                        emit(
                            common.json,
                            json!({"bucket": bucket, "key": key, "value": shown}),
                            || match (&shown["text"], &shown["hex"]) {
                                (Value::String(t), _) => format!("{t}\n"),
                                (_, Value::String(h)) => format!("(binary, hex) {h}\n"),
                                _ => String::new(),
                            },
                        );
                    }
                    None => {
                        let page = b
                            .scan_keys(&prefix, cursor.as_deref(), limit, now)
                            .await
                            .map_err(err)?;
                        emit(
                            common.json,
                            json!({"bucket": bucket, "prefix": prefix, "keys": page.keys, "next_cursor": page.next_cursor}),
                            || {
                                let mut out: String =
                                    page.keys.iter().map(|k| format!("{k}\n")).collect();
                                if let Some(c) = &page.next_cursor {
                                    out.push_str(&format!("(more: --cursor {c})\n"));
                                }
                                out
                            },
                        );
                    }
                }
            }
        }
        Ok(())
    }
}

fn emit(json: bool, doc: Value, tables: impl FnOnce() -> String) {
    if json {
        println!("{doc}");
    } else {
        print!("{}", tables());
    }
}

fn listing(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// A payload cut to one short line for a table.
fn short(p: &Value) -> String {
    let text = p
        .as_object()
        .and_then(|o| o.values().next())
        .and_then(Value::as_str)
        .unwrap_or_default();
    let one: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one.chars().count() > 60 {
        format!("{}…", one.chars().take(59).collect::<String>())
    } else {
        one
    }
}
