//! `alk-store-turso`: alk's file engine.
//!
//! Stores are [turso](https://crates.io/crates/turso) database files in
//! multi-process WAL mode under one data directory, so several host
//! processes share them safely:
//!
//! - `kv/<bucket>/localkv.sqlite` — [`kv`], format `localkv.v1`;
//! - `queue/<name>/localqueue.sqlite` — [`queue`], format `localqueue.v4`
//!   (or `localqueue.v1`, `localqueue.v2`, `localqueue.v3`);
//! - `stream/localstream.sqlite` — [`stream`], format `localstream.v3`:
//!   streams and offsets, and in the same file transactions (the `tx`
//!   module), their sends to queues until they are relayed ([`relay`]),
//!   and [`schedule`]s;
//! - `lock/locallock.sqlite` — [`lock`], format `locallock.v2`: locks and
//!   named token buckets;
//! - `wake/` — the files that carry wakes between processes ([`wake`]).
//!
//! Each format is pinned by its document in `docs/formats/`: a test checks
//! that the document carries the same DDL and statements as the code.
//!
//! Under every format, a [`Store`] names one file and runs every operation
//! on it (the `store` module). Its parts, one module each:
//!
//! - `options` — [`StoreOptions`]: the [`RetryPolicy`], the [`Durability`]
//!   of commits, the formats of new files ([`NewQueues`], [`NewKv`]);
//! - `format` — [`Format`]: a format's marker, DDL and [`Upgrade`]s, and
//!   the creation of the schema;
//! - `open` — the one open path: every file is opened through it, and it
//!   is the only place that builds a turso database;
//! - [`pool`] — the databases open in this process, a bounded number;
//! - `retry` — retrying contention ([`RetryPolicy`]) and the failure of an
//!   attempt;
//! - `gate` — the write gate, through which writers take turns and share
//!   commits;
//! - [`inspect`] — reading a file's format marker without the engine;
//! - `catalog` — the stores of a data directory, for operators' tools.

#![deny(missing_docs)]

mod catalog;
mod conn;
mod format;
mod gate;
pub mod inspect;
pub mod kv;
pub mod lock;
mod open;
mod options;
pub mod pool;
pub mod queue;
pub mod relay;
mod retry;
pub mod schedule;
mod store;
pub mod stream;
mod tx;
pub mod wake;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use alk_store::kv::KvEngine;
use alk_store::lock::LockEngine;
use alk_store::queue::QueueEngine;
use alk_store::schedule::ScheduleEngine;
use alk_store::stream::StreamEngine;
use alk_store::tx::TxEngine;
use alk_store::wake::Wakes;
use alk_store::{AlkError, AlkResult, Catalog, Engine};
use async_trait::async_trait;

pub use format::{Format, Upgrade};
pub use options::{Durability, NewKv, NewQueues, StoreOptions};
pub use retry::RetryPolicy;
pub use store::{Store, open_store};

/// Moves bucket `name` under `data_dir` from `localkv.v1` to `localkv.v2`
/// (every key, value and expiry kept, each given a version), in one
/// transaction. Refused with `busy` while any process — this one included
/// — has the bucket open: run it before the host uses the bucket.
pub async fn migrate_kv(data_dir: &Path, name: &str) -> AlkResult<kv::Migrated> {
    alk_store::names::check_name("bucket", name)?;
    kv::KvStore::migrate(data_dir, name, RetryPolicy::default()).await
}

/// Moves queue `name` under `data_dir` from `localqueue.v1`,
/// `localqueue.v2` or `localqueue.v3` to `localqueue.v4` (ids, attempts,
/// receipts, due times,
/// groups and dead letters kept), in one transaction; what it did names
/// the format the file had. Refused with `busy` while any process — this
/// one included — has the queue open: run it before the host uses the
/// queue.
pub async fn migrate_queue(data_dir: &Path, name: &str) -> AlkResult<queue::Migrated> {
    alk_store::names::check_name("queue", name)?;
    queue::QueueStore::migrate(data_dir, name, RetryPolicy::default()).await
}

/// The file engine on one data directory.
pub struct TursoEngine {
    data_dir: PathBuf,
    options: StoreOptions,
    queues: Arc<queue::Queues>,
    streams: tokio::sync::OnceCell<Arc<stream::StreamStore>>,
    locks: tokio::sync::OnceCell<Arc<lock::LockStore>>,
}

impl std::fmt::Debug for TursoEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TursoEngine")
            .field("data_dir", &self.data_dir)
            .finish_non_exhaustive()
    }
}

impl TursoEngine {
    /// The engine on `data_dir` (created on first use of a store, not
    /// before).
    pub fn new(data_dir: impl Into<PathBuf>, options: impl Into<StoreOptions>) -> TursoEngine {
        let (data_dir, options) = (data_dir.into(), options.into());
        TursoEngine {
            queues: Arc::new(queue::Queues::new(&data_dir, options)),
            data_dir,
            options,
            streams: Default::default(),
            locks: Default::default(),
        }
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The stream store, opened (and its pending relays done, its
    /// background relayer started) at first use.
    async fn stream_store(&self) -> AlkResult<Arc<stream::StreamStore>> {
        let s = self
            .streams
            .get_or_try_init(|| async {
                Ok::<_, AlkError>(Arc::new(
                    stream::StreamStore::open_with(
                        &self.data_dir,
                        self.options,
                        self.queues.clone(),
                        true,
                    )
                    .await?,
                ))
            })
            .await?;
        Ok(s.clone())
    }
}

#[async_trait]
impl Engine for TursoEngine {
    async fn bucket(&self, name: &str) -> AlkResult<Arc<dyn KvEngine>> {
        Ok(Arc::new(
            kv::KvStore::open(&self.data_dir, name, self.options).await?,
        ))
    }

    async fn queue(&self, name: &str) -> AlkResult<Arc<dyn QueueEngine>> {
        Ok(Arc::new(self.queues.get(name).await?))
    }

    async fn streams(&self) -> AlkResult<Arc<dyn StreamEngine>> {
        Ok(self.stream_store().await?)
    }

    async fn locks(&self) -> AlkResult<Arc<dyn LockEngine>> {
        let l = self
            .locks
            .get_or_try_init(|| async {
                Ok::<_, AlkError>(Arc::new(
                    lock::LockStore::open(&self.data_dir, self.options).await?,
                ))
            })
            .await?;
        Ok(l.clone())
    }

    async fn schedules(&self) -> AlkResult<Arc<dyn ScheduleEngine>> {
        Ok(self.stream_store().await?)
    }

    async fn begin(&self) -> AlkResult<Box<dyn TxEngine>> {
        Ok(Box::new(self.stream_store().await?.begin_tx().await?))
    }

    fn wakes(&self) -> AlkResult<Wakes> {
        wake::wakes_of(&self.data_dir)
    }

    fn describe(&self) -> String {
        format!("data directory {}", self.data_dir.display())
    }

    async fn catalog(&self) -> AlkResult<Catalog> {
        catalog::catalog(&self.data_dir, || async {
            alk_store::stream::all_names(&*self.stream_store().await?).await
        })
        .await
    }
}

/// Asserts that a format document carries each `(name, sql)` verbatim
/// (whitespace aside): the document and the code pin the same format.
#[cfg(test)]
pub(crate) fn assert_document_pins(doc_name: &str, doc: &str, statements: &[(&str, &str)]) {
    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let doc = squash(doc);
    for (name, sql) in statements {
        assert!(
            doc.contains(&squash(sql)),
            "{name} differs from docs/formats/{doc_name}"
        );
    }
}

/// Runs `sql` on `store` as one write, bypassing the format's rules: how
/// tests make a row the format does not allow.
#[cfg(test)]
pub(crate) async fn write_sql(store: &Store, sql: &str) {
    store
        .run_write(|conn: crate::conn::Connection| {
            let sql = sql.to_string();
            Box::pin(async move {
                retry::exec(&conn, &sql, ()).await?;
                Ok(())
            })
        })
        .await
        .unwrap();
}

/// The plan (`EXPLAIN QUERY PLAN`) of `sql` with `params` on `store`, its
/// steps joined by ` | `: how tests pin that a statement uses its index.
#[cfg(test)]
pub(crate) async fn plan_of(store: &Store, sql: &str, params: Vec<turso::Value>) -> String {
    store
        .run(|conn: crate::conn::Connection| {
            let (sql, params) = (sql.to_string(), params.clone());
            Box::pin(async move {
                let mut rows = conn
                    .query(&format!("EXPLAIN QUERY PLAN {sql}"), params)
                    .await?;
                let mut plan = Vec::new();
                while let Some(row) = rows.next().await? {
                    plan.push(row.get::<String>(3)?);
                }
                Ok(plan.join(" | "))
            })
        })
        .await
        .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alk_store::KvLimits;
    use alk_store::kv::Bucket;
    use alk_store::queue::Queue;

    #[tokio::test]
    async fn bad_names_are_refused_before_any_file_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let engine = TursoEngine::new(dir.path().join("data"), RetryPolicy::default());
        for bad in ["..", "a/b", "__alkstore_x", "", "a\0b"] {
            assert!(matches!(
                Bucket::open(&engine, bad, KvLimits::default()).await,
                Err(AlkError::InvalidName(_) | AlkError::ReservedName(_))
            ));
            assert!(matches!(
                Queue::open(&engine, bad).await,
                Err(AlkError::InvalidName(_) | AlkError::ReservedName(_))
            ));
        }
        assert!(!dir.path().join("data").exists());
    }
}

#[cfg(test)]
mod conformance {
    use super::*;
    use alk_store::conformance::Subject;

    async fn make() -> Subject {
        let dir = tempfile::tempdir().unwrap();
        Subject {
            engine: Arc::new(TursoEngine::new(dir.path(), RetryPolicy::default())),
            keep: Box::new(dir),
        }
    }

    alk_store::conformance_tests!(make);

    /// The plain queue cases on `localqueue.v1` files.
    mod localqueue_v1 {
        use super::*;

        async fn make() -> Subject {
            let dir = tempfile::tempdir().unwrap();
            let options = StoreOptions {
                new_queues: NewQueues::V1,
                ..StoreOptions::default()
            };
            Subject {
                engine: Arc::new(TursoEngine::new(dir.path(), options)),
                keep: Box::new(dir),
            }
        }

        alk_store::conformance_tests!(@cases make;
            queue_visibility_and_redelivery_follow_the_clock,
            queue_claims_oldest_first_and_skips_in_flight,
            queue_ack_batch_reports_each_receipt,
            queue_receipts_of_another_queue_are_stale_there,
            queue_receive_wait_wakes_on_a_send,
            queue_stats_count_waiting_and_in_flight,
            queue_stats_hold_under_concurrent_writers,
        );
    }

    /// The queue, job and rate cases on `localqueue.v3` files (still made
    /// by hosts started with `--new-queues v3`).
    mod localqueue_v3 {
        use super::*;

        async fn make() -> Subject {
            let dir = tempfile::tempdir().unwrap();
            let options = StoreOptions {
                new_queues: NewQueues::V3,
                ..StoreOptions::default()
            };
            Subject {
                engine: Arc::new(TursoEngine::new(dir.path(), options)),
                keep: Box::new(dir),
            }
        }

        alk_store::conformance_tests!(@in make;
            queue: [
                queue_visibility_and_redelivery_follow_the_clock,
                queue_claims_oldest_first_and_skips_in_flight,
                queue_ack_batch_reports_each_receipt,
                queue_receive_wait_wakes_on_a_send,
                queue_stats_count_waiting_and_in_flight,
            ],
            jobs: [
                jobs_claim_by_priority_then_ready_time,
                jobs_retry_backs_off_and_ends_in_the_dead_letters,
                jobs_a_lapsed_last_attempt_goes_to_the_dead_letters,
                jobs_heartbeat_extends_only_a_live_delivery,
                jobs_expired_messages_end_in_the_dead_letters,
                jobs_cancel_and_fail,
                jobs_groups_take_turns_one_in_flight_each,
                jobs_claims_look_past_parked_groups_and_count_burials,
                jobs_stats_count_delays_groups_and_dead_letters,
                jobs_groups_hand_out_up_to_their_concurrency_in_order,
                jobs_max_in_flight_caps_the_queue,
                jobs_unique_sends_store_one_message_per_key,
                jobs_completed_results_are_kept_until_their_time,
            ],
            rate: [
                rate_claims_take_one_token_per_message,
                rate_per_group_buckets_are_separate,
            ],
        );
    }

    /// The kv cases on `localkv.v2` files.
    mod localkv_v2 {
        use super::*;

        async fn make() -> Subject {
            let dir = tempfile::tempdir().unwrap();
            let options = StoreOptions {
                new_kv: NewKv::V2,
                ..StoreOptions::default()
            };
            Subject {
                engine: Arc::new(TursoEngine::new(dir.path(), options)),
                keep: Box::new(dir),
            }
        }

        alk_store::conformance_tests!(@cases make;
            kv_expiry_follows_the_clock,
            kv_refuses_oversized_and_bad_input_before_writing,
            kv_reads_of_many_large_values_come_in_pages,
            kv_scans_in_byte_order_of_the_key,
            kv_set_if_absent_has_exactly_one_winner,
            kv_scan_cursors_resume_after_their_key,
            kv_swaps_compare_in_one_step_and_increments_all_count,
        );
    }
}
