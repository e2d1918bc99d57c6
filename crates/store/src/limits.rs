//! What a guest may send and hold, and what one call may return.
//!
//! Guest input is hostile: every limit here exists so that one call cannot
//! make the host buffer, lock or hold without bound. Limits on what is
//! stored (key and value sizes) are settings; limits on one call (batch
//! sizes, pages, read bytes) are fixed.

use std::time::Duration;

use crate::error::{AlkError, AlkResult};

/// Size limits of keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvLimits {
    /// Longest key, in bytes.
    pub max_key_bytes: usize,
    /// Largest value, in bytes.
    pub max_value_bytes: usize,
}

impl Default for KvLimits {
    fn default() -> Self {
        KvLimits {
            max_key_bytes: 1024,
            max_value_bytes: 1024 * 1024,
        }
    }
}

/// Size limits of stream input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// Largest payload, in bytes.
    pub max_payload_bytes: usize,
    /// Longest event key, in bytes.
    pub max_key_bytes: usize,
    /// Longest a transaction may hold the stream store's write lock before
    /// the host rolls it back.
    pub max_transaction: Duration,
}

impl Default for StreamLimits {
    fn default() -> Self {
        StreamLimits {
            max_payload_bytes: 1024 * 1024,
            max_key_bytes: 1024,
            max_transaction: Duration::from_secs(10),
        }
    }
}

/// Limits applied to what a guest sends and holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Key-value limits.
    pub kv: KvLimits,
    /// Stream limits.
    pub stream: StreamLimits,
    /// Most alk resources (buckets, queues, subscriptions, transactions,
    /// locks, listeners, and the pollables made from them) one instance may
    /// hold at once. Opening one more is an `invalid-argument` error (or a
    /// trap, for calls that cannot return an error) until the guest drops
    /// some.
    pub max_open_resources: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            kv: KvLimits::default(),
            stream: StreamLimits::default(),
            max_open_resources: 1024,
        }
    }
}

/// The most items one batch call takes; more is an `invalid-argument`
/// error, so one call cannot hold the write lock for unbounded time.
pub const MAX_BATCH: usize = 1000;

/// A read that returns many values (kv `get-many` and `scan-prefix`, stream
/// reads) stops adding values once their bytes reach this many (it always
/// returns at least one), so a guest cannot make the host buffer a thousand
/// maximum-size values at once. The caller learns it from a shorter list or
/// a next cursor and asks again for the rest.
pub const MAX_READ_BYTES: usize = 16 * 1024 * 1024;

/// The bounds of one answer of a read of many: at most `limit` items, and
/// after the first only while their sizes stay within `max_bytes` in all
/// ([`MAX_READ_BYTES`]). Every engine pages its reads of many with it, so
/// the same data gives the same pages everywhere.
#[derive(Debug, Clone)]
pub struct Pager {
    limit: usize,
    max_bytes: usize,
    taken: usize,
    bytes: usize,
}

impl Pager {
    /// An empty answer of at most `limit` items and `max_bytes` bytes.
    pub fn new(limit: usize, max_bytes: usize) -> Pager {
        Pager {
            limit,
            max_bytes,
            taken: 0,
            bytes: 0,
        }
    }

    /// Whether the next item, of `size` bytes (0 for an entry without a
    /// value), belongs in this answer; it is counted when it does. Once
    /// this is false the answer is full: the item and everything after it
    /// are left for the next answer.
    pub fn admit(&mut self, size: usize) -> bool {
        if self.taken == self.limit
            || (self.taken > 0 && self.bytes.saturating_add(size) > self.max_bytes)
        {
            return false;
        }
        self.taken += 1;
        self.bytes = self.bytes.saturating_add(size);
        true
    }
}

/// What a read of many returns in one answer, by a [`Pager`] of `limit`
/// and `max_bytes`: the first of `items` it admits, and `true` when some
/// were left for the next answer.
pub fn page<T>(
    items: impl IntoIterator<Item = T>,
    size: impl Fn(&T) -> usize,
    limit: usize,
    max_bytes: usize,
) -> (Vec<T>, bool) {
    let mut pager = Pager::new(limit, max_bytes);
    let mut out = Vec::new();
    for item in items {
        if !pager.admit(size(&item)) {
            return (out, true);
        }
        out.push(item);
    }
    (out, false)
}

/// The most entries one scan page returns; larger limits are clamped so a
/// guest cannot make the host buffer an unbounded page.
pub const MAX_SCAN_LIMIT: u32 = 1000;

/// The largest queue payload, in bytes of its text.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;

/// The visibility timeout of a receive that names none.
pub const DEFAULT_VISIBILITY_MS: u64 = 30_000;

/// The most messages one receive claims; larger requests are clamped so a
/// guest cannot make one transaction hold the write lock unboundedly.
pub const MAX_RECEIVE: u32 = 1000;

/// The most events one stream read returns.
pub const MAX_READ: u32 = 1000;

/// The longest lock owner string, in bytes.
pub const MAX_OWNER_BYTES: usize = 256;

/// Refuses a batch over [`MAX_BATCH`] items.
pub fn check_batch(what: &str, len: usize) -> AlkResult<()> {
    if len > MAX_BATCH {
        return Err(AlkError::InvalidArgument(format!(
            "{len} {what} in one batch; the limit is {MAX_BATCH}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_takes_the_first_item_whatever_its_size_then_stops_at_either_bound() {
        let mut pager = Pager::new(3, 10);
        assert!(pager.admit(25), "the first item always fits");
        assert!(!pager.admit(0), "over the bytes, even an empty entry waits");
        let mut pager = Pager::new(3, 10);
        assert!(pager.admit(4) && pager.admit(6) && !pager.admit(1));
        let mut pager = Pager::new(2, 100);
        assert!(pager.admit(0) && pager.admit(0) && !pager.admit(0));
        assert_eq!(page([5, 5, 5], |n| *n, 10, 10), (vec![5, 5], true));
        assert_eq!(page([5, 5], |n| *n, 10, 10), (vec![5, 5], false));
    }
}
