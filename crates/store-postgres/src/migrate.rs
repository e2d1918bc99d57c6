//! Bringing a schema to the newest version of the format at connect, or
//! refusing it untouched.

use alk_store::{AlkError, AlkResult};

use crate::conn::{Conn, Fail, Inner, describe_pg};
use crate::sql;

// The statements of this module (each listed by name in
// `sql::STATEMENTS`, which a test checks against the format document).

/// Serializes engines starting on one schema (`$1` = `alk-migrate:<schema>`)
/// for the rest of the migration transaction.
pub const MIGRATE_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))";
/// The relations already in a schema (`$1` = its name): `meta` or nothing
/// means alk's or empty; anything else without `meta` is foreign.
pub const SCHEMA_RELATIONS: &str = "SELECT c.relname::text FROM pg_class AS c \
JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')";
/// Whether a schema exists.
pub const SCHEMA_EXISTS: &str = "SELECT 1 FROM pg_namespace WHERE nspname = $1";
/// The marker rows.
pub const READ_META: &str =
    "SELECT key::text, value::text FROM alk.meta WHERE key::text IN ('format', 'version')";
/// Records the version a migration reached.
pub const SET_VERSION: &str = "UPDATE alk.meta SET value = $1 WHERE key = 'version'";

/// Brings the schema to [`sql::VERSION`] in one transaction, serialized
/// with other starting engines; refuses (and changes nothing in) a schema
/// that holds anything but alk's tables, or alk's tables of a newer
/// version.
///
/// With `existing_only`, nothing is created or migrated: an empty schema
/// and an older version are refused too.
pub(crate) async fn migrate(
    inner: &Inner,
    conn: &mut Conn,
    schema: &str,
    existing_only: bool,
) -> AlkResult<()> {
    let place =
        || std::path::PathBuf::from(format!("postgres://{}/ schema {schema}", inner.target));
    let refuse = |found: Option<String>, message: String| AlkError::StoreSetup {
        path: place(),
        found,
        supported: sql::SUPPORTED,
        message,
    };
    let result: Result<Result<(), AlkError>, Fail> = async {
        let tx = conn.transaction().await?;
        tx.execute(MIGRATE_LOCK, &[&format!("alk-migrate:{schema}")])
            .await?;
        let relations: Vec<String> = tx
            .query(SCHEMA_RELATIONS, &[&schema])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let version = if relations.is_empty() {
            0
        } else if !relations.iter().any(|r| r == "meta") {
            return Ok(Err(refuse(
                None,
                format!(
                    "the schema holds other tables ({}) and no alk marker; choose another schema (?schema=…)",
                    relations.join(", ")
                ),
            )));
        } else {
            let rows = tx.query(&inner.sql.get(READ_META), &[]).await?;
            let get = |k: &str| {
                rows.iter()
                    .find(|r| r.try_get::<_, Option<&str>>(0).ok().flatten() == Some(k))
                    .and_then(|r| r.try_get::<_, Option<String>>(1).ok().flatten())
            };
            let format = get("format");
            let version = get("version");
            match (format.as_deref(), version.as_deref().map(str::parse::<i64>)) {
                (Some(sql::FORMAT), Some(Ok(v))) if (1..=sql::VERSION).contains(&v) => v,
                (Some(sql::FORMAT), Some(Ok(v))) if v > sql::VERSION => {
                    return Ok(Err(refuse(
                        Some(format!("{}.v{v}", sql::FORMAT)),
                        "it was made by a newer alk; upgrade this host".into(),
                    )));
                }
                (f, _) => {
                    return Ok(Err(refuse(
                        f.map(|f| format!("{f}.v{}", version.as_deref().unwrap_or("?"))),
                        "the schema's marker is not alk's; choose another schema (?schema=…)".into(),
                    )));
                }
            }
        };
        if existing_only && version == 0 {
            return Ok(Err(refuse(
                None,
                "it holds no alk stores (nothing was created); check the URL and ?schema=…".into(),
            )));
        }
        if existing_only && version < sql::VERSION {
            return Ok(Err(refuse(
                Some(format!("{}.v{version}", sql::FORMAT)),
                format!(
                    "it was made by an older alk (version {version}; this one reads {}): a host of this version migrates it when it starts; nothing was changed",
                    sql::VERSION
                ),
            )));
        }
        if version < sql::VERSION {
            // Only when missing: creating a schema needs a privilege on the
            // database that the owner of an existing schema may lack.
            if tx.query_opt(SCHEMA_EXISTS, &[&schema]).await?.is_none() {
                tx.batch_execute(&format!("CREATE SCHEMA {schema}")).await?;
            }
            for (i, step) in sql::MIGRATIONS.iter().enumerate().skip(version as usize) {
                tx.batch_execute(&inner.sql.get(step)).await?;
                if i > 0 {
                    tx.execute(&inner.sql.get(SET_VERSION), &[&(i as i64 + 1).to_string()])
                        .await?;
                }
            }
        }
        tx.commit().await?;
        Ok(Ok(()))
    }
    .await;
    match result {
        Ok(r) => r,
        Err(Fail::Pg(e)) if e.code().is_some_and(|c| c.code() == "42501") => Err(refuse(
            None,
            format!("not allowed to create or read it: {}", describe_pg(&e)),
        )),
        // A `meta` table of another shape: not alk's.
        Err(Fail::Pg(e))
            if e.code().is_some_and(|c| {
                matches!(c.code(), "42703" | "42804" | "42883" | "22P02" | "42846")
            }) =>
        {
            Err(refuse(
                None,
                format!(
                    "its meta table is not alk's ({}); choose another schema (?schema=…)",
                    describe_pg(&e)
                ),
            ))
        }
        Err(e) => Err(inner.error(e)),
    }
}
