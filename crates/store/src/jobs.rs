//! What a job queue adds to a plain queue: the options a message is sent
//! with, what a claim and an inspection return, the backoff curve, and the
//! checks of every job argument. Engines store what [`Stamp`] says and call
//! [`backoff_delay`] and [`JobState::of`]; nothing here depends on how
//! messages are kept.

use crate::error::{AlkError, AlkResult};
use crate::queue::Payload;
use crate::time::after;

/// Delay between attempts when the sender gives no backoff base: the
/// first retry waits about one second, and each further one about twice
/// as long, up to [`MAX_BACKOFF_MS`].
pub const DEFAULT_BACKOFF_BASE_MS: u64 = 1_000;

/// The longest delay the backoff curve reaches (one hour).
pub const MAX_BACKOFF_MS: u64 = 3_600_000;

/// The most attempts a message may be given.
pub const MAX_ATTEMPTS: u32 = 10_000;

/// Longest group key, in bytes.
pub const MAX_GROUP_BYTES: usize = 256;

/// Longest error text kept with a message; longer texts are cut at a
/// character boundary and end in `…`.
pub const MAX_ERROR_BYTES: usize = 4_096;

/// How a message is sent. Every field is optional; the default is a plain
/// message, due at once, priority 0, never dying.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendOptions {
    /// Higher is claimed first (default 0).
    pub priority: Option<i32>,
    /// Due this many milliseconds after the send.
    pub delay_ms: Option<u64>,
    /// Due at this time (epoch milliseconds; a time past is due at once).
    /// Not together with `delay_ms`.
    pub run_at_ms: Option<u64>,
    /// Deliveries after which a message that is not acknowledged goes to
    /// the dead letters (default: no limit).
    pub max_attempts: Option<u32>,
    /// Base of the retry backoff curve (default
    /// [`DEFAULT_BACKOFF_BASE_MS`]).
    pub backoff_base_ms: Option<u64>,
    /// The message goes to the dead letters this many milliseconds after
    /// the send if it has not been acknowledged by then.
    pub expires_in_ms: Option<u64>,
    /// The message group: one message of a group is in flight at a time,
    /// in send order, and groups take turns.
    pub group: Option<String>,
}

/// What is stored with a message: [`SendOptions`] resolved at the send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    /// Claim priority.
    pub priority: i32,
    /// When the message is first due (epoch ms).
    pub due_at: i64,
    /// Deliveries before the dead letters; `None` is no limit.
    pub max_attempts: Option<u32>,
    /// Backoff base; `None` is [`DEFAULT_BACKOFF_BASE_MS`].
    pub backoff_base_ms: Option<u64>,
    /// When the message dies unacknowledged (epoch ms).
    pub expires_at: Option<i64>,
    /// The message group.
    pub group: Option<String>,
}

impl Stamp {
    /// A plain message sent at `now`.
    pub fn plain(now: i64) -> Stamp {
        Stamp {
            priority: 0,
            due_at: now,
            max_attempts: None,
            backoff_base_ms: None,
            expires_at: None,
            group: None,
        }
    }

    /// Checks `options` and resolves them at `now`.
    pub fn resolve(options: &SendOptions, now: i64) -> AlkResult<Stamp> {
        let due_at = match (options.delay_ms, options.run_at_ms) {
            (Some(_), Some(_)) => {
                return Err(AlkError::InvalidArgument(
                    "give either delay-ms or run-at-ms, not both".into(),
                ));
            }
            (Some(0), None) | (None, None) => now,
            (Some(d), None) => after("delay-ms", d, now)?,
            (None, Some(at)) => i64::try_from(at)
                .map_err(|_| {
                    AlkError::InvalidArgument(format!("run-at-ms {at} overflows the clock"))
                })?
                .max(now),
        };
        if let Some(n) = options.max_attempts
            && !(1..=MAX_ATTEMPTS).contains(&n)
        {
            return Err(AlkError::InvalidArgument(format!(
                "max-attempts {n} is out of range; it must be 1 to {MAX_ATTEMPTS}"
            )));
        }
        if let Some(b) = options.backoff_base_ms
            && !(1..=MAX_BACKOFF_MS).contains(&b)
        {
            return Err(AlkError::InvalidArgument(format!(
                "backoff-base-ms {b} is out of range; it must be 1 to {MAX_BACKOFF_MS}"
            )));
        }
        let expires_at = options
            .expires_in_ms
            .map(|ms| after("expires-in-ms", ms, now))
            .transpose()?;
        if let Some(g) = &options.group {
            check_group(g)?;
        }
        Ok(Stamp {
            priority: options.priority.unwrap_or(0),
            due_at,
            max_attempts: options.max_attempts,
            backoff_base_ms: options.backoff_base_ms,
            expires_at,
            group: options.group.clone(),
        })
    }

    /// The first option of this stamp a plain (`localqueue.v1`) queue
    /// cannot keep, if any.
    pub fn beyond_plain(&self, now: i64) -> Option<&'static str> {
        if self.priority != 0 {
            Some("priority")
        } else if self.due_at != now {
            Some("delay-ms or run-at-ms")
        } else if self.max_attempts.is_some() {
            Some("max-attempts")
        } else if self.backoff_base_ms.is_some() {
            Some("backoff-base-ms")
        } else if self.expires_at.is_some() {
            Some("expires-in-ms")
        } else if self.group.is_some() {
            Some("group")
        } else {
            None
        }
    }
}

/// The most messages of one group a queue may let be in flight at once.
pub const MAX_GROUP_CONCURRENCY: u32 = 1_000;

/// The highest cap on a queue's messages in flight.
pub const MAX_IN_FLIGHT: u32 = 1_000_000;

/// How a queue limits its claims (since `alk:store@0.1.4`). The default
/// is what a queue without limits does: one message of a group in flight
/// at a time, no cap on the queue, no rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    /// Messages of one group in flight at once (1 to
    /// [`MAX_GROUP_CONCURRENCY`]; default 1). They are handed out in send
    /// order: a claim may take the group's oldest messages up to this many,
    /// counting those already in flight (and not yet due) among them.
    pub group_concurrency: u32,
    /// Messages of the whole queue in flight at once (1 to
    /// [`MAX_IN_FLIGHT`]); `None` is no cap.
    pub max_in_flight: Option<u32>,
    /// The token bucket claims take from: one token per message claimed,
    /// across every process and machine; `None` is no rate.
    pub rate: Option<crate::rate::RateLimit>,
    /// Whether `rate` applies to each group separately (the messages
    /// without a group sharing one more bucket) rather than to the whole
    /// queue.
    pub rate_per_group: bool,
}

impl Default for QueueLimits {
    fn default() -> Self {
        QueueLimits {
            group_concurrency: 1,
            max_in_flight: None,
            rate: None,
            rate_per_group: false,
        }
    }
}

impl QueueLimits {
    /// Checks every setting.
    pub fn check(&self) -> AlkResult<()> {
        if !(1..=MAX_GROUP_CONCURRENCY).contains(&self.group_concurrency) {
            return Err(AlkError::InvalidArgument(format!(
                "group-concurrency {} is out of range; it must be 1 to {MAX_GROUP_CONCURRENCY}",
                self.group_concurrency
            )));
        }
        match self.max_in_flight {
            Some(0) => {
                return Err(AlkError::InvalidArgument(
                    "max-in-flight 0 would stop every claim; leave it out for no cap".into(),
                ));
            }
            Some(n) if n > MAX_IN_FLIGHT => {
                return Err(AlkError::InvalidArgument(format!(
                    "max-in-flight {n} is out of range; it must be 1 to {MAX_IN_FLIGHT} (leave it out for no cap)"
                )));
            }
            _ => {}
        }
        if let Some(rate) = &self.rate {
            rate.check()?;
        } else if self.rate_per_group {
            return Err(AlkError::InvalidArgument(
                "rate-per-group needs a rate: give rate too, or leave rate-per-group false".into(),
            ));
        }
        Ok(())
    }

    /// Whether these are the limits of a queue that has none set.
    pub fn is_default(&self) -> bool {
        *self == QueueLimits::default()
    }
}

/// The bucket key of the messages without a group, when a rate applies
/// per group (no group key is empty, so it names no group).
pub const UNGROUPED_BUCKET: &str = "";

/// What makes a message unique in its queue (since `alk:store@0.1.4`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueOptions {
    /// The key (1 to [`MAX_UNIQUE_KEY_BYTES`] bytes).
    pub key: String,
    /// How long the key stays taken after the send, whether the message
    /// has finished or not; `None`: for as long as the message is live
    /// (waiting, delayed or in flight).
    pub for_ms: Option<u64>,
}

/// Longest unique key, in bytes.
pub const MAX_UNIQUE_KEY_BYTES: usize = 256;

/// A unique key as stored with a message: [`UniqueOptions`] resolved at
/// the send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unique {
    /// The key.
    pub key: String,
    /// Until when (epoch ms) the key is taken whatever becomes of the
    /// message; `None`: while the message is live.
    pub until: Option<i64>,
}

impl Unique {
    /// Checks `options` and resolves them at `now`.
    pub fn resolve(options: &UniqueOptions, now: i64) -> AlkResult<Unique> {
        if options.key.is_empty() {
            return Err(AlkError::InvalidArgument(
                "unique key is empty; leave the unique options out for a message that may repeat"
                    .into(),
            ));
        }
        if options.key.len() > MAX_UNIQUE_KEY_BYTES {
            return Err(AlkError::InvalidArgument(format!(
                "unique key is {} bytes; the limit is {MAX_UNIQUE_KEY_BYTES}",
                options.key.len()
            )));
        }
        let until = options
            .for_ms
            .map(|ms| after("unique for-ms", ms, now))
            .transpose()?;
        Ok(Unique {
            key: options.key.clone(),
            until,
        })
    }

    /// Whether a key held as `held` (the message `id` holding it, its
    /// `until`) still blocks a send at `now`; `live` is whether message
    /// `id` is still in the queue (not acknowledged, dead or deleted).
    pub fn blocks(until: Option<i64>, live: bool, now: i64) -> bool {
        match until {
            Some(t) => t > now,
            None => live,
        }
    }
}

/// What a send with a unique key did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// The message's id: the new one, or the one holding the key.
    pub id: u64,
    /// Whether the key was taken, so that nothing was stored.
    pub duplicate: bool,
}

/// How long a result is kept when the completing call does not say (one
/// day).
pub const DEFAULT_RESULT_KEEP_MS: u64 = 86_400_000;

/// The longest a result may be kept (30 days).
pub const MAX_RESULT_KEEP_MS: u64 = 30 * 86_400_000;

/// A stored result of a completed message (since `alk:store@0.1.4`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobResult {
    /// The message's id.
    pub id: u64,
    /// The result, as the completing call gave it.
    pub payload: Payload,
    /// When the message was completed (epoch ms).
    pub completed_at: i64,
    /// Until when the result is kept (epoch ms).
    pub expires_at: i64,
}

/// When a result stored at `now` with `keep_ms` (default
/// [`DEFAULT_RESULT_KEEP_MS`], at most [`MAX_RESULT_KEEP_MS`]) goes.
pub fn result_expiry(keep_ms: Option<u64>, now: i64) -> AlkResult<i64> {
    let keep = keep_ms.unwrap_or(DEFAULT_RESULT_KEEP_MS);
    if !(1..=MAX_RESULT_KEEP_MS).contains(&keep) {
        return Err(AlkError::InvalidArgument(format!(
            "keep-ms {keep} is out of range; it must be 1 to {MAX_RESULT_KEEP_MS} (30 days)"
        )));
    }
    after("keep-ms", keep, now)
}

/// Checks a group key: 1 to [`MAX_GROUP_BYTES`] bytes, any characters.
pub fn check_group(group: &str) -> AlkResult<()> {
    if group.is_empty() {
        return Err(AlkError::InvalidArgument(
            "group is empty; leave it out for a message without a group".into(),
        ));
    }
    if group.len() > MAX_GROUP_BYTES {
        return Err(AlkError::InvalidArgument(format!(
            "group is {} bytes; the limit is {MAX_GROUP_BYTES}",
            group.len()
        )));
    }
    Ok(())
}

/// An error text as it is kept: at most [`MAX_ERROR_BYTES`].
pub fn error_text(error: &str) -> String {
    if error.len() <= MAX_ERROR_BYTES {
        return error.to_string();
    }
    let mut end = MAX_ERROR_BYTES - '…'.len_utf8();
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &error[..end])
}

/// The delay before attempt `attempt + 1` after attempt `attempt` (1 for
/// the first delivery) failed: equal jitter over an exponential curve.
/// The curve is `base × 2^(attempt − 1)`, capped at [`MAX_BACKOFF_MS`];
/// the delay is half of it plus a random part of up to the other half,
/// taken from `random` (any 64-bit word; the same word gives the same
/// delay on every engine).
pub fn backoff_delay(base_ms: u64, attempt: u32, random: u64) -> u64 {
    let shift = attempt.saturating_sub(1).min(63);
    let curve = base_ms.saturating_mul(1u64 << shift).min(MAX_BACKOFF_MS);
    let half = curve / 2;
    (curve - half) + random % (half + 1)
}

/// How long a retried message waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDelay {
    /// This many milliseconds (0: due at once).
    Fixed(u64),
    /// The message's backoff curve at its attempt, with this random word
    /// (see [`backoff_delay`]).
    Backoff(u64),
}

impl RetryDelay {
    /// The time a message retried at `now` is due, given its stamp and
    /// the attempt that failed.
    pub fn due_at(self, base_ms: Option<u64>, attempt: u32, now: i64) -> i64 {
        let ms = match self {
            RetryDelay::Fixed(ms) => ms,
            RetryDelay::Backoff(word) => {
                backoff_delay(base_ms.unwrap_or(DEFAULT_BACKOFF_BASE_MS), attempt, word)
            }
        };
        now.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))
    }
}

/// A random word for the backoff jitter, from the standard library's
/// per-process random keys and a counter.
pub fn random_word() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

/// What a retry did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retried {
    /// The message is due again at this time (epoch ms).
    Scheduled(i64),
    /// Its attempts were used up: it went to the dead letters.
    Dead,
    /// The message was already gone (or the receipt is not one).
    Gone,
    /// The message exists but this is not its current receipt.
    Stale,
}

/// What a heartbeat did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    /// The delivery's deadline is now the new one.
    Extended,
    /// The delivery's deadline had passed: nothing changed.
    Lapsed,
    /// The message is gone (or the receipt is not one).
    Gone,
    /// The message was delivered again since.
    Stale,
}

/// Where a message is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Due: the next claim may take it (a grouped message waits for the
    /// messages sent to its group before it).
    Waiting,
    /// Not due yet: sent with a delay, or retried with one.
    Delayed,
    /// Claimed, and its delivery's deadline has not passed.
    InFlight,
    /// In the dead letters.
    Dead,
}

impl JobState {
    /// The state of a message that is not dead: `delivered` is whether it
    /// carries the receipt of a delivery that was neither given back nor
    /// retried, `visible_at` its due time or delivery deadline.
    pub fn of(delivered: bool, visible_at: i64, now: i64) -> JobState {
        match (delivered, visible_at > now) {
            (_, false) => JobState::Waiting,
            (true, true) => JobState::InFlight,
            (false, true) => JobState::Delayed,
        }
    }
}

/// A message as [`crate::queue::Queue::job`] and the dead-letter listing
/// show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// The message id.
    pub id: u64,
    /// The body.
    pub payload: Payload,
    /// Where it is.
    pub state: JobState,
    /// Deliveries so far.
    pub attempt: u32,
    /// Its attempt limit, if any.
    pub max_attempts: Option<u32>,
    /// Its priority.
    pub priority: i32,
    /// Its group, if any.
    pub group: Option<String>,
    /// When it was sent (epoch ms).
    pub enqueued_at: i64,
    /// When it is due, or when its delivery's deadline passes (epoch ms);
    /// for a dead message, the time it had then.
    pub due_at: i64,
    /// When it expires, if ever.
    pub expires_at: Option<i64>,
    /// The error of its last failed attempt, if any.
    pub last_error: Option<String>,
    /// When it went to the dead letters.
    pub died_at: Option<i64>,
}

/// The text a message that ran out of attempts is kept with in the dead
/// letters when its last delivery's deadline passed without an answer.
pub fn lapsed_error(attempt: u32) -> String {
    format!("the deadline of delivery {attempt} (the last attempt) passed without an ack")
}

/// The text an expired message is kept with in the dead letters.
pub const EXPIRED_ERROR: &str = "expired before it was acknowledged";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_curve_doubles_up_to_its_cap_with_equal_jitter() {
        // Without jitter (random 0) the delay is half the curve.
        assert_eq!(backoff_delay(1_000, 1, 0), 500);
        assert_eq!(backoff_delay(1_000, 2, 0), 1_000);
        assert_eq!(backoff_delay(1_000, 3, 0), 2_000);
        // The random part is at most the other half.
        assert_eq!(backoff_delay(1_000, 1, 500), 1_000);
        assert_eq!(backoff_delay(1_000, 1, 501), 500);
        assert_eq!(backoff_delay(1_000, 3, u64::MAX), 2_000 + u64::MAX % 2_001);
        // Capped, also far past the point where 2^n overflows.
        assert_eq!(backoff_delay(1_000, 40, 0), MAX_BACKOFF_MS / 2);
        assert_eq!(backoff_delay(MAX_BACKOFF_MS, 10_000, 0), MAX_BACKOFF_MS / 2);
        for attempt in 1..70 {
            for word in [0, 1, 12_345, u64::MAX] {
                let d = backoff_delay(7, attempt, word);
                assert!(d <= MAX_BACKOFF_MS, "{attempt} {word} {d}");
            }
        }
    }

    #[test]
    fn send_options_are_checked_and_resolved() {
        let now = 1_000;
        let plain = Stamp::resolve(&SendOptions::default(), now).unwrap();
        assert_eq!(plain, Stamp::plain(now));
        assert_eq!(plain.beyond_plain(now), None);
        let delayed = SendOptions {
            delay_ms: Some(50),
            ..Default::default()
        };
        assert_eq!(Stamp::resolve(&delayed, now).unwrap().due_at, 1_050);
        let past = SendOptions {
            run_at_ms: Some(10),
            ..Default::default()
        };
        assert_eq!(Stamp::resolve(&past, now).unwrap().due_at, now);
        for bad in [
            SendOptions {
                delay_ms: Some(1),
                run_at_ms: Some(1),
                ..Default::default()
            },
            SendOptions {
                run_at_ms: Some(u64::MAX),
                ..Default::default()
            },
            SendOptions {
                max_attempts: Some(0),
                ..Default::default()
            },
            SendOptions {
                backoff_base_ms: Some(0),
                ..Default::default()
            },
            SendOptions {
                expires_in_ms: Some(0),
                ..Default::default()
            },
            SendOptions {
                group: Some(String::new()),
                ..Default::default()
            },
            SendOptions {
                group: Some("g".repeat(MAX_GROUP_BYTES + 1)),
                ..Default::default()
            },
            SendOptions {
                delay_ms: Some(u64::MAX),
                ..Default::default()
            },
        ] {
            assert!(
                matches!(Stamp::resolve(&bad, now), Err(AlkError::InvalidArgument(_))),
                "{bad:?}"
            );
        }
        let grouped = Stamp::resolve(
            &SendOptions {
                group: Some("g".into()),
                ..Default::default()
            },
            now,
        )
        .unwrap();
        assert_eq!(grouped.beyond_plain(now), Some("group"));
    }

    #[test]
    fn long_error_texts_are_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_ERROR_BYTES);
        let kept = error_text(&long);
        assert!(kept.len() <= MAX_ERROR_BYTES);
        assert!(kept.ends_with('…'));
        assert_eq!(error_text("short"), "short");
    }

    #[test]
    fn states_follow_the_delivery_and_the_clock() {
        assert_eq!(JobState::of(false, 5, 10), JobState::Waiting);
        assert_eq!(JobState::of(true, 10, 10), JobState::Waiting);
        assert_eq!(JobState::of(true, 11, 10), JobState::InFlight);
        assert_eq!(JobState::of(false, 11, 10), JobState::Delayed);
    }
}
