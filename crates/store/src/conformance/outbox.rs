//! Conformance cases of outboxes.

use super::text;
use crate::engine::Engine;
use crate::jobs::{JobState, Retried, SendOptions};
use crate::outbox::{Outbox, RunOnce};
use crate::time::ManualClock;

/// `run_once` acknowledges a job its worker succeeded with, and retries one
/// it failed with on the backoff curve; an idle outbox says so.
pub async fn outbox_run_once_acks_success_and_retries_failure(engine: &dyn Engine) {
    let outbox = Outbox::open(engine, "runs").await.unwrap();
    assert_eq!(outbox.name(), "runs");
    let clock = ManualClock::new(10_000);
    assert_eq!(
        outbox
            .run_once(None, &clock, |_| async { Ok(()) })
            .await
            .unwrap(),
        RunOnce::Idle
    );
    let first = outbox
        .enqueue(&text("first"), &SendOptions::default(), 10_000)
        .await
        .unwrap();
    let second = outbox
        .enqueue(&text("second"), &SendOptions::default(), 10_000)
        .await
        .unwrap();
    let failed = outbox
        .run_once(None, &clock, |job| async move {
            assert_eq!(job.payload, text("first"));
            Err("smtp down".to_string())
        })
        .await
        .unwrap();
    let RunOnce::Failed(id, Retried::Scheduled(at)) = failed else {
        panic!("{failed:?}")
    };
    assert_eq!(id, first);
    // The default backoff base is 1 s: the first retry waits 0.5 to 1 s.
    assert!((10_500..=11_000).contains(&at), "{at}");
    let info = outbox
        .queue()
        .job(first as u64, 10_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(info.last_error.as_deref(), Some("smtp down"));
    assert_eq!(info.state, JobState::Delayed);
    assert_eq!(
        outbox
            .run_once(None, &clock, |job| async move {
                assert_eq!(job.payload, text("second"));
                Ok(())
            })
            .await
            .unwrap(),
        RunOnce::Done(second)
    );
    assert_eq!(
        outbox
            .run_once(None, &clock, |_| async { Ok(()) })
            .await
            .unwrap(),
        RunOnce::Idle
    );
    clock.set(at);
    assert_eq!(
        outbox
            .run_once(None, &clock, |job| async move {
                assert_eq!(job.attempt, 2);
                Ok(())
            })
            .await
            .unwrap(),
        RunOnce::Done(first)
    );
    assert_eq!(outbox.queue().job(first as u64, at).await.unwrap(), None);
}
