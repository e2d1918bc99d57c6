//! alk's database engine: every store of every host in one schema of a
//! PostgreSQL database, so hosts on many machines share queues, streams,
//! buckets and locks; waits are woken across machines by `LISTEN/NOTIFY`.
//!
//! The schema is `alk-postgres.v4` (`docs/formats/alk-postgres.v4.md`,
//! every statement by name in [`sql`]). [`PostgresEngine::connect`]
//! applies its migrations at start and refuses a schema of a newer or
//! foreign format untouched.
//!
//! **Time.** The database's clock judges every expiry (keys, visibility
//! timeouts, locks). Hosts pass their own clock readings through the engine
//! seam; the engine measures how far the database's clock is from the
//! host's (at connect, then every minute) and moves every time it sends or
//! reads by that much. Hosts with skewed clocks therefore agree on when a
//! lock expires or a message is due, to within the round trip of the
//! measurement. A difference within the measurement's noise (the round
//! trip, at least [`SKEW_DEAD_BAND_MS`]) is not corrected: hosts whose
//! clocks agree keep judging by their own clocks exactly.
//!
//! **Layout.** One module per capability, as in the other engines, each
//! with the statements it runs: `kv` (buckets), `queue`, `stream`, `tx`
//! (stream transactions, which also carry sends to queues), `lock`,
//! `schedule`, and `wake` (`LISTEN/NOTIFY` between hosts). What they all
//! use: `conn` (the pool, the guard that closes a connection left inside a
//! transaction instead of pooling it, running a call with its retries, and
//! the errors guests see) and `clock` (the offset from the database's
//! clock). Around them: `options` ([`PostgresOptions`] from a URL),
//! `migrate` (the schema brought to the newest version at connect) and
//! [`sql`] (the schema's DDL and versions, the naming rules, and every
//! statement by name, pinned by the format document). This file holds
//! [`PostgresEngine`] and its [`Engine`] implementation.

use std::sync::Arc;
use std::time::Duration;

use alk_store::kv::KvEngine;
use alk_store::lock::LockEngine;
use alk_store::queue::QueueEngine;
use alk_store::stream::StreamEngine;
use alk_store::tx::TxEngine;
use alk_store::wake::Wakes;
use alk_store::{AlkError, AlkResult, Catalog, Engine};
use async_trait::async_trait;

mod catalog;
mod clock;
mod conn;
mod kv;
mod lock;
mod migrate;
mod options;
mod queue;
mod schedule;
pub mod sql;
mod stream;
mod tx;
mod wake;

pub use clock::SKEW_DEAD_BAND_MS;
pub use options::{DEFAULT_POOL_SIZE, DEFAULT_SCHEMA, PostgresOptions, is_postgres_url, redact};

use conn::{Fail, Inner, describe_pg};

/// alk's stores in one schema of a PostgreSQL database.
#[derive(Clone)]
pub struct PostgresEngine {
    inner: Arc<Inner>,
    /// The streams, whose statements transactions also run.
    streams: Arc<stream::PgStreams>,
    wakes: Wakes,
    describe: String,
}

impl std::fmt::Debug for PostgresEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe)
    }
}

impl PostgresEngine {
    /// Connects, applies the schema's migrations (refusing a newer or
    /// foreign schema untouched) and starts the wake connection.
    ///
    /// Errors: `busy` "cannot reach postgres at host:port: …" when the
    /// server does not answer or refuses the login; `store-setup` for a
    /// schema this engine must not touch.
    pub async fn connect(options: PostgresOptions) -> AlkResult<PostgresEngine> {
        let target = options.target();
        let inner = Arc::new(Inner::new(&options)?);
        {
            let mut conn = inner.conn().await?;
            migrate::migrate(&inner, &mut conn, &options.schema, options.existing_only).await?;
            inner
                .clock
                .measure(&conn)
                .await
                .map_err(|e| inner.error(Fail::Pg(e)))?;
        }
        let wakes = wake::start(
            options.config.clone(),
            sql::channel(&options.schema),
            inner.clock.clone(),
            target.clone(),
        )
        .await
        .map_err(|e| {
            AlkError::Busy(format!(
                "cannot reach postgres at {target}: {}",
                describe_pg(&e)
            ))
        })?;
        let db = options
            .config
            .get_dbname()
            .unwrap_or("postgres")
            .to_string();
        Ok(PostgresEngine {
            streams: Arc::new(stream::PgStreams::new(inner.clone())),
            inner,
            wakes,
            describe: format!("postgres {target}/{db} schema {}", options.schema),
        })
    }

    /// Connects to `url` (see [`PostgresOptions::from_url`]).
    pub async fn connect_url(url: &str) -> AlkResult<PostgresEngine> {
        PostgresEngine::connect(PostgresOptions::from_url(url)?).await
    }
}

#[async_trait]
impl Engine for PostgresEngine {
    async fn bucket(&self, name: &str) -> AlkResult<Arc<dyn KvEngine>> {
        Ok(Arc::new(kv::PgBucket::new(self.inner.clone(), name)))
    }

    async fn queue(&self, name: &str) -> AlkResult<Arc<dyn QueueEngine>> {
        Ok(Arc::new(queue::PgQueue::new(self.inner.clone(), name)))
    }

    async fn streams(&self) -> AlkResult<Arc<dyn StreamEngine>> {
        Ok(self.streams.clone())
    }

    async fn locks(&self) -> AlkResult<Arc<dyn LockEngine>> {
        Ok(Arc::new(lock::PgLocks::new(self.inner.clone())))
    }

    async fn schedules(&self) -> AlkResult<Arc<dyn alk_store::schedule::ScheduleEngine>> {
        Ok(Arc::new(schedule::PgSchedules::new(self.inner.clone())))
    }

    async fn begin(&self) -> AlkResult<Box<dyn TxEngine>> {
        Ok(Box::new(
            tx::PgTx::begin(&self.inner, self.streams.statements()).await?,
        ))
    }

    fn wakes(&self) -> AlkResult<Wakes> {
        Ok(self.wakes.clone())
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }

    async fn catalog(&self) -> AlkResult<Catalog> {
        let streams = alk_store::stream::all_names(&*self.streams).await?;
        catalog::catalog(&self.inner, streams).await
    }

    async fn flush(&self) {
        // Signals wait behind at most one round trip; a server that does
        // not answer does not hold the host's exit for long.
        let _ = tokio::time::timeout(Duration::from_secs(2), self.wakes.flush()).await;
    }
}

#[cfg(test)]
mod tests;
