//! What a store file's format is, and how a file gets it.
//!
//! A [`Format`] is an on-disk format: the marker stored in `meta`, the DDL
//! that creates it, the formats a store of it also opens, and the
//! [`Upgrade`]s from older ones. [`create_schema`] checks a file's marker
//! through the engine and creates (or completes, or upgrades) its schema.

use crate::conn::Connection;

/// An on-disk format: the marker stored in `meta` and the DDL that creates
/// it. The DDL is idempotent (`IF NOT EXISTS`, `INSERT OR IGNORE`).
#[derive(Debug)]
pub struct Format {
    /// The value of the `('format', …)` row of the `meta` table.
    pub marker: &'static str,
    /// The complete DDL of the format, run when a file is created (and
    /// its `CREATE … IF NOT EXISTS` statements when an object is missing).
    pub ddl: &'static str,
    /// Other formats of the same store that are opened and used as they
    /// are (such a file is never converted by opening it).
    pub also: &'static [&'static Format],
    /// Older formats of the same store that a file is upgraded from, in
    /// place, when it is opened (only for formats no other program reads).
    pub upgrades: &'static [Upgrade],
}

/// How a file of an older format becomes a file of a newer one.
#[derive(Debug)]
pub struct Upgrade {
    /// The older format.
    pub from: &'static Format,
    /// What turns a complete file of `from` into one of the newer format,
    /// run in one `BEGIN IMMEDIATE` transaction with the marker check.
    pub script: &'static str,
}

impl Format {
    /// Whether a file carrying `marker` is opened as this format or one of
    /// its [`Format::also`] formats; which.
    pub fn accepts(&'static self, marker: &str) -> Option<&'static Format> {
        std::iter::once(self)
            .chain(self.also.iter().copied())
            .find(|f| f.marker == marker)
    }

    /// The statements of the DDL that create a missing table or index, or
    /// insert a row a table is made with, and change nothing else (run on a
    /// file of this format that lacks one).
    fn repair(&self) -> String {
        // Comments may hold a `;`: drop them before splitting statements
        // (no DDL of ours has `--` inside a string).
        let bare: String = self
            .ddl
            .lines()
            .map(|line| line.split("--").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        let dropped = self.dropped();
        bare.split(';')
            .filter(|stmt| {
                let words: Vec<&str> = stmt.split_whitespace().take(6).collect();
                match words.as_slice() {
                    ["CREATE", "TABLE" | "INDEX", "IF", "NOT", "EXISTS", name] => {
                        !dropped.contains(name)
                    }
                    // Rows a table is made with (a marker, a fixed row).
                    ["INSERT", "OR", "IGNORE", ..] => true,
                    _ => false,
                }
            })
            .map(|stmt| format!("{};\n", stmt.trim()))
            .collect()
    }

    /// The upgrade of a file carrying `marker` to this format, if there is
    /// one.
    pub fn upgrade_from(&'static self, marker: &str) -> Option<&'static Upgrade> {
        self.upgrades.iter().find(|u| u.from.marker == marker)
    }

    /// Why a file of another format is refused, naming the formats this one
    /// opens.
    pub(crate) fn refusal(&self) -> String {
        let also: Vec<&str> = self.also.iter().map(|f| f.marker).collect();
        let upgrades: Vec<&str> = self.upgrades.iter().map(|u| u.from.marker).collect();
        let opens = match (also.is_empty(), upgrades.is_empty()) {
            (true, true) => String::new(),
            (false, true) => format!(" (it also opens {} files)", also.join(", ")),
            (true, false) => format!(
                " (it also opens {} files, which it upgrades)",
                upgrades.join(", ")
            ),
            (false, false) => format!(
                " (it also opens {} files, and {} files, which it upgrades)",
                also.join(", "),
                upgrades.join(", ")
            ),
        };
        format!(
            "the file was left untouched{opens}; use a data directory of the matching alk version"
        )
    }

    /// The names of the tables and indexes its DDL creates (and does not
    /// drop again further on).
    pub fn objects(&self) -> impl Iterator<Item = &'static str> {
        let dropped = self.dropped();
        self.ddl
            .split(';')
            .filter_map(|stmt| {
                let words: Vec<&str> = stmt.split_whitespace().collect();
                match words.as_slice() {
                    ["CREATE", "TABLE" | "INDEX", "IF", "NOT", "EXISTS", name, ..] => Some(*name),
                    _ => None,
                }
            })
            .filter(move |name| !dropped.contains(name))
    }

    /// The indexes its DDL drops (`DROP INDEX IF EXISTS`).
    fn dropped(&self) -> Vec<&'static str> {
        self.ddl
            .split(';')
            .filter_map(|stmt| {
                let words: Vec<&str> = stmt.split_whitespace().collect();
                match words.as_slice() {
                    ["DROP", "INDEX", "IF", "EXISTS", name, ..] => Some(*name),
                    _ => None,
                }
            })
            .collect()
    }
}

/// What the schema check found in a file.
pub(crate) enum Found {
    /// A file of this format (or one it also opens), ready for use.
    Format(&'static Format),
    /// Another format's marker: the file is refused.
    Other(String),
}

/// Creates the schema of `format` in one `BEGIN IMMEDIATE` transaction,
/// unless the file (read again, now through the engine: another process may
/// have made the store since the check without it) carries another
/// format's marker, which is returned. A file of one of the formats it also
/// opens is used in its own format, its missing objects created. A store
/// that already has its marker and every table and index of its DDL is not
/// written at all (so opening one works on a full disk, and costs no write
/// transaction).
pub(crate) async fn create_schema(
    conn: &Connection,
    format: &'static Format,
) -> Result<Found, turso::Error> {
    let mut present = Vec::new();
    let mut rows = conn
        .query(
            "SELECT name FROM sqlite_schema WHERE type IN ('table', 'index')",
            (),
        )
        .await?;
    while let Some(row) = rows.next().await? {
        present.push(row.get::<String>(0)?);
    }
    drop(rows);
    let mut script = format.ddl.to_string();
    let mut found = format;
    let mut upgrading: Option<&'static Upgrade> = None;
    if present.iter().any(|n| n == "meta") {
        let mut rows = conn
            .query("SELECT value FROM meta WHERE key = 'format'", ())
            .await?;
        let mut marker = None;
        while let Some(row) = rows.next().await? {
            marker = row.get_value(0)?.as_text().cloned();
        }
        drop(rows);
        if let Some(m) = marker {
            if let Some(f) = format.accepts(&m) {
                if f.objects().all(|o| present.iter().any(|p| p == o)) {
                    return Ok(Found::Format(f));
                }
                found = f;
                script = f.repair();
            } else if let Some(up) = format.upgrade_from(&m) {
                // An older format: completed (its own repair) and upgraded,
                // in the transaction below.
                upgrading = Some(up);
                script = format!("{}{}", up.from.repair(), up.script);
            } else {
                return Ok(Found::Other(m));
            }
        }
    }
    conn.execute("BEGIN IMMEDIATE", ()).await?;
    if let Some(up) = upgrading {
        // The marker again, now under the write lock: a process that opened
        // the store before this one took the open lock cannot have changed
        // it, but a writer that is not an alk host could have.
        let reread = async {
            let mut rows = conn
                .query("SELECT value FROM meta WHERE key = 'format'", ())
                .await?;
            let mut marker = None;
            while let Some(row) = rows.next().await? {
                marker = row.get_value(0)?.as_text().cloned();
            }
            Ok::<_, turso::Error>(marker)
        }
        .await;
        let m = match reread {
            Ok(marker) => marker.unwrap_or_default(),
            Err(e) => {
                if let Err(r) = conn.execute("ROLLBACK", ()).await {
                    tracing::warn!(target: "alk", "rollback of a failed upgrade failed: {r}");
                }
                return Err(e);
            }
        };
        if m != up.from.marker {
            if let Some(f) = format.accepts(&m) {
                // Upgraded meanwhile: only completed.
                found = f;
                script = f.repair();
            } else {
                conn.execute("ROLLBACK", ()).await?;
                return Ok(Found::Other(m));
            }
        }
    }
    match conn.execute_batch(&script).await {
        Ok(()) => conn
            .execute("COMMIT", ())
            .await
            .map(|_| Found::Format(found)),
        Err(e) => {
            if let Err(r) = conn.execute("ROLLBACK", ()).await {
                tracing::warn!(target: "alk", "rollback of a failed schema creation failed: {r}");
            }
            Err(e)
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A format for tests: its marker, `meta`, and a table `t` with an
    /// index.
    pub(crate) static FORMAT: Format = Format {
        marker: "test.v1",
        ddl: "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);\n\
              INSERT OR IGNORE INTO meta (key, value) VALUES ('format', 'test.v1');\n\
              CREATE TABLE IF NOT EXISTS t (x INTEGER);\n\
              CREATE INDEX IF NOT EXISTS idx_t ON t (x);",
        also: &[],
        upgrades: &[],
    };

    #[test]
    fn the_objects_of_a_format_are_the_tables_and_indexes_of_its_ddl() {
        assert_eq!(FORMAT.objects().collect::<Vec<_>>(), ["meta", "t", "idx_t"]);
        assert_eq!(
            crate::queue::FORMAT.objects().collect::<Vec<_>>(),
            [
                "meta",
                "messages",
                "idx_messages_visible",
                "idx_messages_claim"
            ]
        );
    }
}
