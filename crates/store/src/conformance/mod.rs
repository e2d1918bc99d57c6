//! The behaviour every engine must show, as a suite of cases any engine
//! runs (`alk_store::conformance_tests!`), clock-driven: every time is a
//! parameter, so expiry, visibility and leases are checked exactly and
//! without sleeping. The guest contracts check the same through the WIT;
//! these check it at the engine seam, per engine.
//!
//! The cases live one file per capability, named as in the engine crates:
//! [`kv`], [`queue`] (with payloads of every kind), [`jobs`] (the job
//! options of queues: priorities, delays, retries, dead letters,
//! heartbeats, expiry, groups, unique keys, results, caps), [`rate`]
//! (rate limits), [`stream`], [`tx`] (transactions of
//! streams alone and across mechanisms), [`lock`], [`notify`], [`outbox`]
//! and [`schedule`], and [`catalog`] (what operators' tools list). Each case is also here by name, for the
//! `@cases` form of the macro.

use std::sync::Arc;

use crate::engine::Engine;
use crate::jobs::SendOptions;
use crate::queue::{Payload, Queue};

pub mod catalog;
pub mod jobs;
pub mod kv;
pub mod lock;
pub mod notify;
pub mod outbox;
pub mod queue;
pub mod rate;
pub mod schedule;
pub mod stream;
pub mod tx;
pub use catalog::*;
pub use jobs::*;
pub use kv::*;
pub use lock::*;
pub use notify::*;
pub use outbox::*;
pub use queue::*;
pub use rate::*;
pub use schedule::*;
pub use stream::*;
pub use tx::*;

/// An engine under test, and whatever must live as long as it (a
/// temporary directory, a database schema).
pub struct Subject {
    /// The engine.
    pub engine: Arc<dyn Engine>,
    /// Kept alive for the test.
    pub keep: Box<dyn std::any::Any + Send>,
}

/// Generates one `#[tokio::test]` per conformance case for the engine that
/// `$make` (an `async fn() -> Subject`) builds.
///
/// `conformance_tests!(make)` generates every case;
/// `conformance_tests!(@cases make; case_a, case_b)` only the cases named.
#[macro_export]
macro_rules! conformance_tests {
    ($make:path) => {
        $crate::conformance_tests!(@in $make;
            kv: [
                kv_expiry_follows_the_clock,
                kv_refuses_oversized_and_bad_input_before_writing,
                kv_reads_of_many_large_values_come_in_pages,
                kv_scans_in_byte_order_of_the_key,
                kv_set_if_absent_has_exactly_one_winner,
                kv_scan_cursors_resume_after_their_key,
                kv_swaps_compare_in_one_step_and_increments_all_count,
            ],
            queue: [
                queue_visibility_and_redelivery_follow_the_clock,
                queue_claims_oldest_first_and_skips_in_flight,
                queue_ack_batch_reports_each_receipt,
                queue_receipts_of_another_queue_are_stale_there,
                queue_receive_wait_wakes_on_a_send,
                payloads_round_trip_every_byte,
                queue_stats_count_waiting_and_in_flight,
                queue_stats_hold_under_concurrent_writers,
            ],
            jobs: [
                jobs_claim_by_priority_then_ready_time,
                jobs_retry_backs_off_and_ends_in_the_dead_letters,
                jobs_a_lapsed_last_attempt_goes_to_the_dead_letters,
                jobs_heartbeat_extends_only_a_live_delivery,
                jobs_expired_messages_end_in_the_dead_letters,
                jobs_cancel_and_fail,
                jobs_groups_take_turns_one_in_flight_each,
                jobs_ack_batch_of_one_claim_tells_each_receipt,
                jobs_claims_look_past_parked_groups_and_count_burials,
                jobs_stats_count_delays_groups_and_dead_letters,
                jobs_listing_pages_the_live_messages_by_id,
                jobs_groups_hand_out_up_to_their_concurrency_in_order,
                jobs_max_in_flight_caps_the_queue,
                jobs_unique_sends_store_one_message_per_key,
                jobs_racing_unique_sends_store_one_message,
                jobs_completed_results_are_kept_until_their_time,
            ],
            rate: [
                rate_claims_take_one_token_per_message,
                rate_throttled_until_names_the_next_token,
                rate_per_group_buckets_are_separate,
                rate_groups_with_tokens_are_reached_past_throttled_ones,
                rate_racing_claimers_share_one_bucket,
                rate_limiters_take_tokens_by_name,
                rate_buckets_are_forgotten_only_when_full,
            ],
            stream: [
                stream_offsets_survive_trim_and_saves_only_move_forward,
                stream_reads_of_large_events_come_in_pages,
                stream_info_tells_offsets_and_lags,
            ],
            tx: [
                stream_transactions_commit_all_or_nothing,
                stream_transactions_held_too_long_are_rolled_back,
                stream_offsets_run_on_across_batches_and_transactions,
                tx_commit_applies_every_mechanism_at_once,
                tx_rollback_leaves_nothing_anywhere,
                tx_refusals_leave_the_transaction_usable,
                tx_enqueue_unique_stores_one_message_per_key,
            ],
            lock: [
                lock_expiry_renewal_and_takeover_follow_the_clock,
                lock_wait_is_granted_at_release,
                lock_holders_list_the_live_locks_by_name,
            ],
            notify: [
                notify_wakes_a_listener_attached_before,
            ],
            outbox: [
                outbox_run_once_acks_success_and_retries_failure,
            ],
            schedule: [
                schedules_fire_once_per_boundary_with_bounded_catch_up,
                scheduler_runners_elect_one_leader_and_report_loss,
            ],
            catalog: [
                stream_names_come_by_name_in_pages,
                catalog_lists_the_stores_in_use,
            ],
        );
    };
    (@cases $make:path; $($case:ident),* $(,)?) => {
        $(
            $crate::conformance_tests!(@case $make; $case; $crate::conformance::$case);
        )*
    };
    (@in $make:path; $($module:ident: [$($case:ident),* $(,)?]),* $(,)?) => {
        $($(
            $crate::conformance_tests!(@case $make; $case; $crate::conformance::$module::$case);
        )*)*
    };
    (@case $make:path; $name:ident; $case:path) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let subject = $make().await;
            $case(&subject.engine).await;
        }
    };
}

fn text(s: &str) -> Payload {
    Payload::Text(s.into())
}

fn priority(p: i32) -> SendOptions {
    SendOptions {
        priority: Some(p),
        ..SendOptions::default()
    }
}

/// Everything in the claimable part of `queue` at `now`, claimed.
async fn drain(queue: &Queue, now: i64) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let got = queue.claim(1000, Some(60_000), None, now).await.unwrap();
        if got.is_empty() {
            return out;
        }
        for d in got {
            out.push(match d.payload {
                Payload::Text(t) | Payload::Json(t) => t,
            });
            queue.ack(&d.receipt).await.unwrap();
        }
    }
}

#[cfg(test)]
mod memory_engine {
    use super::*;

    async fn make() -> Subject {
        Subject {
            engine: Arc::new(crate::memory::MemoryEngine::new()),
            keep: Box::new(()),
        }
    }

    crate::conformance_tests!(make);
}
