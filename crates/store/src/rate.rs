//! Rate limits: token buckets, the arithmetic every engine shares, and the
//! free-standing named buckets guests take from.
//!
//! A bucket holds up to `capacity` tokens and gains `refill` tokens at the
//! end of every `interval_ms` since it was last full (whole intervals only,
//! so no fraction of a token is ever lost or invented between readers).
//! Its state is two integers, the tokens and the time the current interval
//! started; engines keep them in one row and update that row in the same
//! transaction as what the tokens pay for (a claim, a take), so the rate
//! holds exactly across processes and machines. [`Bucket::take`] is the
//! only place the arithmetic is written.
//!
//! A queue may be tied to a bucket of its own ([`crate::jobs::QueueLimits`]):
//! its claims then take one token per message. A bucket on its own is named
//! and kept with the locks ([`Limiters`]).

use std::sync::Arc;

use crate::engine::Engine;
use crate::error::{AlkError, AlkResult};
use crate::lock::LockEngine;
use crate::names::check_name;

/// The most tokens a bucket may hold.
pub const MAX_CAPACITY: u32 = 1_000_000;

/// The longest refill interval (one day).
pub const MAX_INTERVAL_MS: u64 = 86_400_000;

/// A token bucket's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Tokens the bucket holds when full (1 to [`MAX_CAPACITY`]); a new
    /// bucket starts full.
    pub capacity: u32,
    /// Tokens added at the end of every interval (1 to [`MAX_CAPACITY`]).
    pub refill: u32,
    /// The interval, in milliseconds (1 to [`MAX_INTERVAL_MS`]).
    pub interval_ms: u64,
}

impl RateLimit {
    /// Checks the settings: every number in its range.
    pub fn check(&self) -> AlkResult<()> {
        if !(1..=MAX_CAPACITY).contains(&self.capacity) {
            return Err(AlkError::InvalidArgument(format!(
                "rate capacity {} is out of range; it must be 1 to {MAX_CAPACITY}",
                self.capacity
            )));
        }
        if !(1..=MAX_CAPACITY).contains(&self.refill) {
            return Err(AlkError::InvalidArgument(format!(
                "rate refill {} is out of range; it must be 1 to {MAX_CAPACITY}",
                self.refill
            )));
        }
        if !(1..=MAX_INTERVAL_MS).contains(&self.interval_ms) {
            return Err(AlkError::InvalidArgument(format!(
                "rate interval-ms {} is out of range; it must be 1 to {MAX_INTERVAL_MS}",
                self.interval_ms
            )));
        }
        Ok(())
    }
}

/// A bucket's state as an engine keeps it: one row of two integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// Tokens held at `since` (0 to the capacity).
    pub tokens: i64,
    /// When the interval now running started (epoch ms); tokens are added
    /// at `since + interval`, `since + 2 × interval`, …
    pub since: i64,
}

/// What taking tokens did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// The tokens were taken; this many are left.
    Granted(u32),
    /// Not enough tokens: none were taken; this many milliseconds from now
    /// enough will have been added (if nobody else takes them first).
    WaitMs(u64),
}

impl Bucket {
    /// A full bucket at `now` (what a bucket that has no row yet is).
    pub fn full(rate: &RateLimit, now: i64) -> Bucket {
        Bucket {
            tokens: i64::from(rate.capacity),
            since: now,
        }
    }

    /// The bucket at `now`: the whole intervals since `since` added, never
    /// above the capacity (a full bucket's interval starts anew at `now`).
    /// A stored state beyond the capacity (the capacity was lowered) is cut
    /// to it; a clock that went back adds nothing.
    pub fn at(self, rate: &RateLimit, now: i64) -> Bucket {
        let capacity = i64::from(rate.capacity);
        let interval = i64::try_from(rate.interval_ms).unwrap_or(i64::MAX).max(1);
        let tokens = self.tokens.clamp(0, capacity);
        if tokens >= capacity {
            return Bucket {
                tokens: capacity,
                since: now.max(self.since),
            };
        }
        let elapsed = now.saturating_sub(self.since).max(0);
        let intervals = elapsed / interval;
        let added = intervals.saturating_mul(i64::from(rate.refill));
        let tokens = tokens.saturating_add(added);
        if tokens >= capacity {
            Bucket {
                tokens: capacity,
                since: now,
            }
        } else {
            Bucket {
                tokens,
                since: self.since + intervals * interval,
            }
        }
    }

    /// Takes up to `want` tokens at `now`: how many were taken (all of
    /// `want`, or as many as the bucket has) and the bucket after.
    pub fn take_up_to(self, rate: &RateLimit, want: u32, now: i64) -> (u32, Bucket) {
        let b = self.at(rate, now);
        let got = b.tokens.min(i64::from(want)).max(0);
        (
            got as u32,
            Bucket {
                tokens: b.tokens - got,
                since: b.since,
            },
        )
    }

    /// Takes exactly `n` tokens at `now`, or none: what happened, and the
    /// bucket after (unchanged but for the refill when refused).
    pub fn take(self, rate: &RateLimit, n: u32, now: i64) -> (Taken, Bucket) {
        let b = self.at(rate, now);
        let n = i64::from(n);
        if b.tokens >= n {
            let left = b.tokens - n;
            (
                Taken::Granted(left as u32),
                Bucket {
                    tokens: left,
                    since: b.since,
                },
            )
        } else {
            (Taken::WaitMs(b.wait_ms(rate, n, now)), b)
        }
    }

    /// When a bucket left as it is is full again (epoch ms): from then on
    /// it is what a bucket without a row is, so its row may go.
    pub fn full_at(self, rate: &RateLimit) -> i64 {
        let missing = i64::from(rate.capacity) - self.tokens.max(0);
        if missing <= 0 {
            return self.since;
        }
        let refill = i64::from(rate.refill);
        let intervals = (missing + refill - 1) / refill;
        let interval = i64::try_from(rate.interval_ms).unwrap_or(i64::MAX);
        self.since
            .saturating_add(intervals.saturating_mul(interval))
    }

    /// When (milliseconds after `now`) a bucket as of `now` holds `n`
    /// tokens, if nobody takes any.
    pub fn wait_ms(self, rate: &RateLimit, n: i64, now: i64) -> u64 {
        let missing = n - self.tokens;
        if missing <= 0 {
            return 0;
        }
        let refill = i64::from(rate.refill);
        let intervals = (missing + refill - 1) / refill;
        let interval = i64::try_from(rate.interval_ms).unwrap_or(i64::MAX);
        let at = self
            .since
            .saturating_add(intervals.saturating_mul(interval));
        u64::try_from(at.saturating_sub(now)).unwrap_or(0)
    }
}

/// Checks a take of `n` tokens from a bucket of `rate`: at least one, at
/// most the capacity (more could never be granted).
pub fn check_take(rate: &RateLimit, n: u32) -> AlkResult<()> {
    rate.check()?;
    if n == 0 || n > rate.capacity {
        return Err(AlkError::InvalidArgument(format!(
            "cannot take {n} tokens from a bucket of capacity {}: take 1 to {}",
            rate.capacity, rate.capacity
        )));
    }
    Ok(())
}

/// The free-standing named token buckets, as guests use them. They are
/// kept with the locks (one row per bucket); the settings come with every
/// take, so changing them needs no separate call (a bucket holding more
/// than a lowered capacity is cut to it).
#[derive(Clone)]
pub struct Limiters {
    engine: Arc<dyn LockEngine>,
}

impl std::fmt::Debug for Limiters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiters").finish_non_exhaustive()
    }
}

impl Limiters {
    /// The buckets of `engine`.
    pub async fn open(engine: &dyn Engine) -> AlkResult<Limiters> {
        Ok(Limiters {
            engine: engine.locks().await?,
        })
    }

    /// Takes `n` tokens from bucket `name` (a name like a lock's) of
    /// settings `rate` at `now`, or none.
    pub async fn try_take(
        &self,
        name: &str,
        rate: &RateLimit,
        n: u32,
        now: i64,
    ) -> AlkResult<Taken> {
        check_name("rate limiter", name)?;
        check_take(rate, n)?;
        self.engine.take_tokens(name, rate, n, now).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: RateLimit = RateLimit {
        capacity: 5,
        refill: 2,
        interval_ms: 100,
    };

    #[test]
    fn a_bucket_refills_whole_intervals_up_to_its_capacity() {
        let b = Bucket::full(&R, 1_000);
        let (t, b) = b.take(&R, 5, 1_000);
        assert_eq!(t, Taken::Granted(0));
        // 99 ms later nothing was added: the first token pair is 1 ms away.
        let (t, b2) = b.take(&R, 1, 1_099);
        assert_eq!(t, Taken::WaitMs(1));
        assert_eq!(b2, b);
        // At 100 ms two tokens; a take of 3 waits for the next interval.
        assert_eq!(b.take(&R, 3, 1_100).0, Taken::WaitMs(100));
        let (t, b) = b.take(&R, 2, 1_150);
        assert_eq!(t, Taken::Granted(0));
        // The partial interval is kept: the next pair comes at 1_200.
        assert_eq!(b.since, 1_100);
        assert_eq!(b.take(&R, 2, 1_199).0, Taken::WaitMs(1));
        // Long idle: full, not more.
        assert_eq!(b.at(&R, 100_000).tokens, 5);
        assert_eq!(b.at(&R, 100_000).since, 100_000);
    }

    #[test]
    fn a_bucket_is_full_again_at_full_at() {
        for tokens in 0..=5 {
            let b = Bucket {
                tokens,
                since: 1_000,
            };
            let at = b.full_at(&R);
            assert_eq!(b.at(&R, at).tokens, 5, "{tokens} tokens");
            if at > 1_000 {
                assert!(b.at(&R, at - 1).tokens < 5, "{tokens} tokens");
            }
        }
        assert_eq!(
            Bucket {
                tokens: 0,
                since: 0
            }
            .full_at(&R),
            300
        );
        assert_eq!(
            Bucket {
                tokens: 5,
                since: 7
            }
            .full_at(&R),
            7
        );
    }

    #[test]
    fn take_up_to_grants_what_there_is() {
        let b = Bucket {
            tokens: 3,
            since: 0,
        };
        let (got, after) = b.take_up_to(&R, 10, 50);
        assert_eq!(got, 3);
        assert_eq!(after.tokens, 0);
        let (got, _) = after.take_up_to(&R, 10, 60);
        assert_eq!(got, 0);
    }

    #[test]
    fn a_lowered_capacity_and_a_clock_gone_back_add_nothing() {
        let b = Bucket {
            tokens: 50,
            since: 0,
        };
        assert_eq!(b.at(&R, 0).tokens, 5);
        let b = Bucket {
            tokens: 1,
            since: 1_000,
        };
        assert_eq!(
            b.at(&R, 500),
            Bucket {
                tokens: 1,
                since: 1_000
            }
        );
        assert_eq!(b.wait_ms(&R, 3, 500), 600);
    }

    #[test]
    fn settings_and_takes_are_checked() {
        assert!(R.check().is_ok());
        for bad in [
            RateLimit { capacity: 0, ..R },
            RateLimit { refill: 0, ..R },
            RateLimit {
                interval_ms: 0,
                ..R
            },
            RateLimit {
                capacity: MAX_CAPACITY + 1,
                ..R
            },
            RateLimit {
                interval_ms: MAX_INTERVAL_MS + 1,
                ..R
            },
        ] {
            assert!(matches!(bad.check(), Err(AlkError::InvalidArgument(_))));
        }
        assert!(check_take(&R, 0).is_err());
        assert!(check_take(&R, 6).is_err());
        assert!(check_take(&R, 5).is_ok());
    }
}
