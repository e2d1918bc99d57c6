//! The database's clock against this host's: the offset every time the
//! engine sends or reads is moved by (see the crate's documentation).

use std::sync::atomic::{AtomicI64, Ordering};

// The statements of this module (each listed by name in
// `sql::STATEMENTS`, which a test checks against the format document).

/// The database's clock, epoch milliseconds.
pub const DB_NOW: &str = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// How far the database's clock is ahead of this host's, in milliseconds.
#[derive(Debug, Default)]
pub(crate) struct Clockwork(pub(crate) AtomicI64);

impl Clockwork {
    /// A host time as the database's clock reads it.
    pub(crate) fn to_db(&self, host_ms: i64) -> i64 {
        host_ms.saturating_add(self.0.load(Ordering::Relaxed))
    }

    /// A database time as this host's clock reads it.
    pub(crate) fn to_host(&self, db_ms: i64) -> i64 {
        db_ms.saturating_sub(self.0.load(Ordering::Relaxed))
    }

    /// Measures the offset on `client`: three readings, the one with the
    /// shortest round trip, against the midpoint of that round trip. An
    /// offset within the measurement's noise (the round trip, and at least
    /// [`SKEW_DEAD_BAND_MS`]) counts as none: hosts whose clocks agree (on
    /// one machine, or kept by NTP) then judge by exactly their own clocks,
    /// and only real skew is corrected.
    pub(crate) async fn measure(
        &self,
        client: &tokio_postgres::Client,
    ) -> Result<(), tokio_postgres::Error> {
        let mut best: Option<(i64, i64)> = None;
        for _ in 0..3 {
            let before = host_now();
            let row = client.query_one(DB_NOW, &[]).await?;
            let after = host_now();
            let db: i64 = row.try_get(0)?;
            let rtt = after - before;
            if best.is_none_or(|(r, _)| rtt < r) {
                best = Some((rtt, db - (before + after) / 2));
            }
        }
        let (rtt, offset) = best.unwrap_or((0, 0));
        let offset = if offset.abs() <= rtt.max(SKEW_DEAD_BAND_MS) {
            0
        } else {
            offset
        };
        self.0.store(offset, Ordering::Relaxed);
        Ok(())
    }
}

/// Clock differences up to this many milliseconds are not corrected.
pub const SKEW_DEAD_BAND_MS: i64 = 25;

pub(crate) fn host_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
