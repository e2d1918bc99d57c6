//! How to reach the database, and where in it the stores live: the
//! options of a `postgres://` URL (alk's own parameters taken out of it),
//! and URLs made fit for messages.

use std::time::Duration;

use alk_store::{AlkError, AlkResult};

use crate::sql;

/// The default schema.
pub const DEFAULT_SCHEMA: &str = "alk";

/// Connections each engine keeps at most, besides the wake connection.
pub const DEFAULT_POOL_SIZE: usize = 8;

/// How to reach the database, and where in it the stores live.
#[derive(Clone)]
pub struct PostgresOptions {
    pub(crate) config: tokio_postgres::Config,
    pub(crate) schema: String,
    pub(crate) pool_size: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) existing_only: bool,
}

impl std::fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("target", &target(&self.config))
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .finish()
    }
}

/// `url` with its passwords replaced by `***` (for messages): the one
/// after the user name, and any `password=` parameter.
pub fn redact(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let base = match base.split_once("://") {
        Some((scheme, rest)) => match rest.rfind('@') {
            Some(at) => match rest[..at].split_once(':') {
                Some((user, _)) => format!("{scheme}://{user}:***{}", &rest[at..]),
                None => base.to_string(),
            },
            None => base.to_string(),
        },
        None => base.to_string(),
    };
    match query {
        None => base,
        Some(q) => {
            let params: Vec<String> = q
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => p.to_string(),
                })
                .collect();
            format!("{base}?{}", params.join("&"))
        }
    }
}

/// Whether `store` names a Postgres database (rather than a data directory).
pub fn is_postgres_url(store: &str) -> bool {
    store.starts_with("postgres://") || store.starts_with("postgresql://")
}

impl PostgresOptions {
    /// Options from a `postgres://user:password@host:port/database` URL (any
    /// parameter libpq-style URLs take). alk's own parameters, removed before
    /// the URL reaches the client: `schema=<name>` (default `alk`) and
    /// `pool_size=<n>`. Errors never repeat the password.
    pub fn from_url(url: &str) -> AlkResult<PostgresOptions> {
        let bad = |why: String| {
            AlkError::InvalidArgument(format!(
                "{} is not a usable postgres URL: {why}",
                redact(url)
            ))
        };
        if !is_postgres_url(url) {
            return Err(bad("it must start with postgres:// or postgresql://".into()));
        }
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (url, None),
        };
        let mut schema = DEFAULT_SCHEMA.to_string();
        let mut pool_size = DEFAULT_POOL_SIZE;
        let mut kept = Vec::new();
        for pair in query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|p| !p.is_empty())
        {
            match pair.split_once('=') {
                Some(("schema", v)) => schema = v.to_string(),
                Some(("pool_size", v)) => {
                    pool_size = v
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=1000).contains(n))
                        .ok_or_else(|| {
                            bad(format!("pool_size {v:?} is not a number from 1 to 1000"))
                        })?
                }
                _ => kept.push(pair),
            }
        }
        sql::check_schema(&schema).map_err(bad)?;
        let client_url = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        let mut config: tokio_postgres::Config =
            client_url.parse().map_err(|e: tokio_postgres::Error| {
                // The client's parse errors quote the offending part at most,
                // never the password; redact anyway.
                bad(redact(&e.to_string()))
            })?;
        let connect_timeout = config
            .get_connect_timeout()
            .copied()
            .unwrap_or(Duration::from_secs(5));
        config.connect_timeout(connect_timeout);
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(30));
        config.keepalives_interval(Duration::from_secs(10));
        config.keepalives_retries(3);
        if config.get_application_name().is_none() {
            config.application_name("alk-host");
        }
        Ok(PostgresOptions {
            config,
            schema,
            pool_size,
            connect_timeout,
            existing_only: false,
        })
    }

    /// Uses schema `name` (checked) instead of the URL's or the default.
    pub fn schema(mut self, name: &str) -> AlkResult<PostgresOptions> {
        sql::check_schema(name).map_err(AlkError::InvalidArgument)?;
        self.schema = name.to_string();
        Ok(self)
    }

    /// With `true`, a commit returns before the server has flushed it to
    /// disk (`synchronous_commit = off` for the engine's sessions): several
    /// times faster for small writes; a crash of the database server may
    /// lose the last commits, never consistency. A crash of the host loses
    /// nothing either way.
    pub fn relaxed(mut self, relaxed: bool) -> PostgresOptions {
        if relaxed {
            let setting = "-c synchronous_commit=off";
            let options = match self.config.get_options() {
                Some(o) if !o.is_empty() => format!("{o} {setting}"),
                _ => setting.to_string(),
            };
            self.config.options(&options);
        }
        self
    }

    /// With `true`, connecting neither creates nor migrates anything: a
    /// schema without alk's tables, or with an older version of them, is a
    /// `store-setup` error that says so. For operators' tools, which must
    /// not change what they look at.
    pub fn existing_only(mut self, existing_only: bool) -> PostgresOptions {
        self.existing_only = existing_only;
        self
    }

    /// Keeps at most `n` pooled connections (at least 1).
    pub fn pool_size(mut self, n: usize) -> PostgresOptions {
        self.pool_size = n.max(1);
        self
    }

    /// The schema the stores live in.
    pub fn schema_name(&self) -> &str {
        &self.schema
    }

    /// `host:port` (or the socket directory), for messages.
    pub fn target(&self) -> String {
        target(&self.config)
    }
}

fn target(config: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_password_in_messages() {
        assert_eq!(
            redact("postgres://u:s3cret@h:5432/db?schema=x"),
            "postgres://u:***@h:5432/db?schema=x"
        );
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
        assert_eq!(
            redact("postgres://u@h/db?password=s3cret&pool_size=0"),
            "postgres://u@h/db?password=***&pool_size=0"
        );
        let e =
            PostgresOptions::from_url("postgres://u@h/db?password=s3cret&pool_size=0").unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
        let e = PostgresOptions::from_url("postgres://u:s3cret@h:5432/db?schema=Bad").unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
        let e = PostgresOptions::from_url("postgres://u:s3cret@h:notaport/db").unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    #[test]
    fn alk_parameters_are_taken_out_of_the_url() {
        let o = PostgresOptions::from_url(
            "postgres://u:p@db.example:6543/app?schema=tenant_1&pool_size=3&sslmode=disable",
        )
        .unwrap();
        assert_eq!(o.schema_name(), "tenant_1");
        assert_eq!(o.pool_size, 3);
        assert_eq!(o.target(), "db.example:6543");
        assert!(PostgresOptions::from_url("postgres://h/db?pool_size=0").is_err());
        assert!(PostgresOptions::from_url("mysql://h/db").is_err());
    }
}
