//! Which stores a command works on: a data directory on this machine or a
//! database; and, for the operators' commands, opening only stores that
//! exist.

use std::path::PathBuf;
use std::sync::Arc;

use alk_host::store::Catalog;
use alk_host::{AlkCtx, AlkError, Durability, Engine};

use super::guest::{bare, connect_with};

/// Which stores: a data directory on this machine or a database.
#[derive(Debug, Clone, clap::Args)]
pub(super) struct StoreArgs {
    /// Where stores live, on this machine [default: .alk].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,

    /// Keep the stores in a PostgreSQL database instead (as for `run`)
    /// [default: $ALK_STORE when --data-dir is not given].
    #[arg(long, value_name = "URL", conflicts_with = "data_dir")]
    store: Option<String>,
}

impl StoreArgs {
    /// These, or `fallback` when neither option was given here.
    pub(super) fn or(self, fallback: &StoreArgs) -> StoreArgs {
        if self.data_dir.is_none() && self.store.is_none() {
            fallback.clone()
        } else {
            self
        }
    }

    /// The database URL in force, if the stores are in a database.
    fn url(&self) -> Option<String> {
        match (&self.data_dir, &self.store) {
            (Some(_), _) => None,
            (None, Some(url)) => Some(url.clone()),
            (None, None) => std::env::var("ALK_STORE").ok().filter(|s| !s.is_empty()),
        }
    }

    fn dir(&self) -> PathBuf {
        self.data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(".alk"))
    }

    /// The engine, creating stores on first use (for the scheduler).
    pub(super) async fn engine(&self) -> wasmtime::Result<Arc<dyn Engine>> {
        Ok(match self.url() {
            Some(url) => Arc::new(connect_with(&url, Durability::Full, false).await?),
            None => AlkCtx::builder()
                .data_dir(self.dir())
                .build()
                .engine()
                .clone(),
        })
    }

    /// The engine over stores that exist already, and what they are:
    /// nothing is created, migrated or converted. A place that holds no
    /// alk store is an error that says where it looked.
    pub(super) async fn existing(&self) -> wasmtime::Result<(Arc<dyn Engine>, Catalog)> {
        let engine: Arc<dyn Engine> = match self.url() {
            Some(url) => Arc::new(connect_with(&url, Durability::Full, true).await?),
            None => {
                let dir = self.dir();
                if !dir.is_dir() {
                    wasmtime::bail!(
                        "{} is not a directory: no alk stores there (give the data directory the workers use with --data-dir, or a database with --store)",
                        dir.display()
                    );
                }
                AlkCtx::builder().data_dir(dir).build().engine().clone()
            }
        };
        let catalog = engine.catalog().await.map_err(err)?;
        if catalog.is_empty() {
            let mut why = format!(
                "{} holds no alk stores (no bucket, queue, stream or lock store)",
                engine.describe()
            );
            for (place, what) in &catalog.unreadable {
                why.push_str(&format!("; {place}: {what}"));
            }
            why.push_str(": check --data-dir or --store");
            wasmtime::bail!("{why}");
        }
        Ok((engine, catalog))
    }
}

/// An engine error as one line for the command's error message.
pub(super) fn err(e: AlkError) -> wasmtime::Error {
    wasmtime::format_err!("{}", bare(e))
}
