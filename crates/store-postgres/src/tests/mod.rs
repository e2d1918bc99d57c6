//! The conformance suite on a real server (here), and what only this
//! engine has, one file per area: migrations and refusals (`schema`),
//! groups and racing claimers, and agreement with the memory engine
//! (`queue`), unique keys, group windows, caps and rates across engines
//! and the move to version 4 (`jobs`), ordering under concurrent publishers (`stream`), exactly one
//! winner across connections, the database's clock and wakes between
//! engines (`engines`), unreachable servers and session settings
//! (`connect`), sends inside transactions and schedules (`coord`), and
//! statements cancelled by the server (`timeout`).

use std::sync::Arc;
use std::time::Duration;

use alk_store::conformance::Subject;
use alk_store::kv::Bucket;
use alk_store::limits::{KvLimits, StreamLimits};
use alk_store::lock::Locks;
use alk_store::notify::Channels;
use alk_store::queue::{Payload, Queue};
use alk_store::stream::Streams;
use alk_store::tx::Tx;
use alk_store::{AlkError, Engine};

use crate::{PostgresEngine, PostgresOptions};

mod connect;
mod coord;
mod engines;
mod jobs;
mod queue;
mod schema;
mod stream;
mod timeout;

/// A transaction of `e`, as the host begins one.
fn tx_of(e: &PostgresEngine) -> Tx {
    Tx::new(Arc::new(e.clone()), StreamLimits::default()).unwrap()
}

/// A schema no other test uses.
fn fresh_schema() -> String {
    format!("t_{}", &uuid::Uuid::new_v4().simple().to_string()[..16])
}

fn options(schema: &str) -> PostgresOptions {
    PostgresOptions::from_url(&alk_pg_cluster::test_url())
        .unwrap()
        .schema(schema)
        .unwrap()
        .pool_size(4)
}

async fn engine(schema: &str) -> PostgresEngine {
    PostgresEngine::connect(options(schema)).await.unwrap()
}

/// A plain client for looking at (and tampering with) the database.
async fn raw() -> tokio_postgres::Client {
    let (client, conn) =
        tokio_postgres::connect(&alk_pg_cluster::test_url(), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(conn);
    client
}

/// What a refused schema holds, to check that nothing changed.
async fn snapshot(db: &tokio_postgres::Client, schema: &str) -> Vec<String> {
    let tables: Vec<String> = db
        .query(
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 ORDER BY 1",
            &[&schema],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut out = tables.clone();
    for t in tables.iter().filter(|t| !t.contains("pkey")) {
        if let Ok(rows) = db
            .query(
                &format!("SELECT t::text FROM {schema}.{t} t ORDER BY 1"),
                &[],
            )
            .await
        {
            out.extend(
                rows.iter()
                    .map(|r| format!("{t}: {}", r.get::<_, String>(0))),
            );
        }
    }
    out
}

mod conformance {
    use super::*;

    async fn make() -> Subject {
        let schema = fresh_schema();
        Subject {
            engine: Arc::new(engine(&schema).await),
            keep: Box::new(schema),
        }
    }

    alk_store::conformance_tests!(make);
}
