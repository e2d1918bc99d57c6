//! `alk-postgres.v1`: the schema and every statement of the database
//! engine, defined here once and pinned by `docs/formats/alk-postgres.v1.md`
//! (a test checks that the document carries the same text).
//!
//! Statements name their tables `alk.<table>`; an engine configured with
//! another schema gets the same text with its schema in place of `alk`
//! ([`Sql::for_schema`]). Schema names are checked to be plain lower-case
//! identifiers, so nothing is quoted.

/// The value of the `format` row of `meta`.
pub const FORMAT: &str = "alk-postgres";

/// The newest schema version this engine knows (the `version` row of
/// `meta`). A schema at a higher version is refused untouched.
pub const VERSION: i64 = 1;

/// The format and version, as reported in errors.
pub const SUPPORTED: &str = "alk-postgres.v1";

/// Version 1: every table, then the marker.
pub const V1: &str = r#"CREATE TABLE alk.meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
CREATE TABLE alk.kv (
    bucket     text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    value      bytea NOT NULL,
    expires_at bigint,
    PRIMARY KEY (bucket, key)
);
CREATE TABLE alk.queues (
    queue   text COLLATE "C" PRIMARY KEY,
    last_id bigint NOT NULL
);
CREATE TABLE alk.messages (
    queue          text COLLATE "C" NOT NULL,
    id             bigint NOT NULL,
    payload_type   text NOT NULL CHECK (payload_type IN ('json', 'text')),
    payload_data   bytea NOT NULL,
    enqueued_at    bigint NOT NULL,
    visible_at     bigint NOT NULL,
    attempt        integer NOT NULL DEFAULT 0,
    receipt_handle uuid,
    PRIMARY KEY (queue, id)
);
CREATE INDEX messages_claim ON alk.messages (queue, enqueued_at, id);
CREATE INDEX messages_visible ON alk.messages (queue, visible_at);
CREATE TABLE alk.streams (
    stream      text COLLATE "C" PRIMARY KEY,
    last_offset bigint NOT NULL
);
CREATE TABLE alk.events (
    stream     text COLLATE "C" NOT NULL,
    seq        bigint NOT NULL,
    key        text,
    payload    bytea NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (stream, seq)
);
CREATE TABLE alk.consumer_offsets (
    stream   text COLLATE "C" NOT NULL,
    consumer text COLLATE "C" NOT NULL,
    seq      bigint NOT NULL,
    PRIMARY KEY (stream, consumer)
);
CREATE TABLE alk.locks (
    name        text COLLATE "C" PRIMARY KEY,
    owner       text,
    token       bigint NOT NULL,
    acquired_at bigint,
    expires_at  bigint
);
INSERT INTO alk.meta (key, value) VALUES ('format', 'alk-postgres'), ('version', '1');
"#;

/// The migrations, in order: entry `i` brings a schema from version `i` to
/// version `i + 1` (entry 0 creates version 1 in an empty schema).
pub const MIGRATIONS: &[&str] = &[V1];

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
/// The database's clock, epoch milliseconds.
pub const DB_NOW: &str = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// A key's value and expiry.
pub const KV_GET: &str = "SELECT value, expires_at FROM alk.kv WHERE bucket = $1 AND key = $2";
/// Lazily deletes a key found expired by a read.
pub const KV_DELETE_EXPIRED: &str =
    "DELETE FROM alk.kv WHERE bucket = $1 AND key = $2 AND expires_at <= $3";
/// Lazily deletes the expired keys among several found by a read.
pub const KV_DELETE_EXPIRED_MANY: &str =
    "DELETE FROM alk.kv WHERE bucket = $1 AND key = ANY($2) AND expires_at <= $3";
/// Several keys at once, in the order asked (`ord`, from 1), with each
/// value's size; a value itself only while the sizes of the live values up
/// to it stay within `$4` bytes (or it is the first): what a read of many
/// returns in one answer is cut here, so values past the cap never leave
/// the server.
pub const KV_GET_MANY: &str = "SELECT ord, size, CASE WHEN running <= $4 OR running = size THEN value END, expired FROM (\
SELECT r.ord, length(k.value)::bigint AS size, k.value, k.expires_at <= $3 IS TRUE AS expired, \
sum(CASE WHEN k.expires_at <= $3 THEN 0 ELSE length(k.value) END) OVER (ORDER BY r.ord ROWS UNBOUNDED PRECEDING) AS running \
FROM unnest($2::text[]) WITH ORDINALITY AS r(key, ord) JOIN alk.kv AS k ON k.bucket = $1 AND k.key = r.key) AS sized ORDER BY ord";
/// Unconditional upsert of keys `$2` with values `$3` (one key once).
pub const KV_PUT: &str = "INSERT INTO alk.kv (bucket, key, value, expires_at) \
SELECT $1, t.key, t.value, $4 FROM unnest($2::text[], $3::bytea[]) AS t(key, value) \
ON CONFLICT (bucket, key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at";
/// Conditional upsert: returns a row when the key was absent or expired.
pub const KV_PUT_IF_ABSENT: &str = "INSERT INTO alk.kv AS cur (bucket, key, value, expires_at) \
VALUES ($1, $2, $3, $4) ON CONFLICT (bucket, key) DO UPDATE SET value = EXCLUDED.value, \
expires_at = EXCLUDED.expires_at WHERE cur.expires_at <= $5 RETURNING 1";
/// Deletes a key.
pub const KV_DELETE: &str = "DELETE FROM alk.kv WHERE bucket = $1 AND key = $2";
/// Live keys in `[$2, $3)` in byte order (the range of a prefix), after
/// skipping `$5`, at most `$6`, with each value's size; a value itself only
/// while the sizes up to it stay within `$7` bytes (or it is the first).
pub const KV_SCAN_RANGE: &str = "SELECT key, size, CASE WHEN running <= $7 OR running = size THEN value END FROM (\
SELECT key, value, length(value)::bigint AS size, sum(length(value)) OVER (ORDER BY key ROWS UNBOUNDED PRECEDING) AS running \
FROM (SELECT key, value FROM alk.kv WHERE bucket = $1 AND key >= $2 AND key < $3 \
AND (expires_at IS NULL OR expires_at > $4) ORDER BY key OFFSET $5 LIMIT $6) AS page) AS sized ORDER BY key";
/// [`KV_SCAN_RANGE`] from `$2` on, without an upper end (the empty
/// prefix): now `$3`, skip `$4`, at most `$5`, cap `$6`.
pub const KV_SCAN_FROM: &str = "SELECT key, size, CASE WHEN running <= $6 OR running = size THEN value END FROM (\
SELECT key, value, length(value)::bigint AS size, sum(length(value)) OVER (ORDER BY key ROWS UNBOUNDED PRECEDING) AS running \
FROM (SELECT key, value FROM alk.kv WHERE bucket = $1 AND key >= $2 \
AND (expires_at IS NULL OR expires_at > $3) ORDER BY key OFFSET $4 LIMIT $5) AS page) AS sized ORDER BY key";

/// Appends messages: `$2` of them, kinds `$3`, bodies `$4`, sent at `$5`.
/// The queue's counter row hands out the ids and stays locked until commit,
/// so ids of one queue commit in order.
pub const Q_SEND: &str = "WITH n AS (INSERT INTO alk.queues AS q (queue, last_id) VALUES ($1, $2) \
ON CONFLICT (queue) DO UPDATE SET last_id = q.last_id + $2 RETURNING last_id) \
INSERT INTO alk.messages (queue, id, payload_type, payload_data, enqueued_at, visible_at) \
SELECT $1, n.last_id - $2 + t.ord, t.kind, t.data, $5, $5 FROM n, \
unnest($3::text[], $4::bytea[]) WITH ORDINALITY AS t(kind, data, ord) RETURNING id";
/// Claims up to `$3` messages due at `$2`, oldest sent first, hidden until
/// `$4`, under the claim's UUID `$5`. Rows locked by another claimer are
/// skipped, and the update checks again that each row is still due.
pub const Q_CLAIM: &str = "WITH due AS (SELECT id FROM alk.messages WHERE queue = $1 AND visible_at <= $2 \
ORDER BY enqueued_at, id LIMIT $3 FOR UPDATE SKIP LOCKED) \
UPDATE alk.messages AS m SET visible_at = $4, attempt = m.attempt + 1, receipt_handle = $5 \
FROM due WHERE m.queue = $1 AND m.id = due.id AND m.visible_at <= $2 \
RETURNING m.id, m.payload_type, m.payload_data, m.attempt, m.enqueued_at";
/// Deletes a message by its current receipt.
pub const Q_ACK: &str =
    "DELETE FROM alk.messages WHERE queue = $1 AND id = $2 AND receipt_handle = $3";
/// Makes a message due at `$4`, by its current receipt.
pub const Q_NACK: &str =
    "UPDATE alk.messages SET visible_at = $4 WHERE queue = $1 AND id = $2 AND receipt_handle = $3";
/// Whether a message still exists (a stale receipt, or a gone message).
pub const Q_EXISTS: &str = "SELECT 1 FROM alk.messages WHERE queue = $1 AND id = $2";
/// Deletes the messages of every current receipt (pairs of `$2`, `$3`).
pub const Q_ACK_BATCH: &str = "DELETE FROM alk.messages AS m USING unnest($2::bigint[], $3::uuid[]) AS r(id, receipt) \
WHERE m.queue = $1 AND m.id = r.id AND m.receipt_handle = r.receipt RETURNING m.id, m.receipt_handle";
/// Which of the ids `$2` still exist.
pub const Q_EXISTING: &str = "SELECT id FROM alk.messages WHERE queue = $1 AND id = ANY($2)";
/// When the next message becomes due.
pub const Q_NEXT_VISIBLE: &str = "SELECT min(visible_at) FROM alk.messages WHERE queue = $1";
/// Deletes every message of a queue (its ids are never reused).
pub const Q_PURGE: &str = "DELETE FROM alk.messages WHERE queue = $1";

/// Appends events: `$2` of them, keys `$3`, payloads `$4`, at `$5`. The
/// stream's counter row stays locked until commit: a publisher of the same
/// stream waits, so offsets become visible in order and a reader that saw
/// offset n never later finds a lower one appear.
pub const S_PUBLISH: &str = "WITH n AS (INSERT INTO alk.streams AS s (stream, last_offset) VALUES ($1, $2) \
ON CONFLICT (stream) DO UPDATE SET last_offset = s.last_offset + $2 RETURNING last_offset) \
INSERT INTO alk.events (stream, seq, key, payload, created_at) \
SELECT $1, n.last_offset - $2 + t.ord, t.key, t.payload, $5 FROM n, \
unnest($3::text[], $4::bytea[]) WITH ORDINALITY AS t(key, payload, ord) RETURNING seq";
/// Events after an offset, in offset order, at most `$3`, with each
/// payload's size; a payload itself only while the sizes up to it stay
/// within `$4` bytes (or it is the first).
pub const S_READ: &str = "SELECT seq, key, size, CASE WHEN running <= $4 OR running = size THEN payload END, created_at FROM (\
SELECT seq, key, payload, created_at, length(payload)::bigint AS size, \
sum(length(payload)) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) AS running \
FROM (SELECT seq, key, payload, created_at FROM alk.events WHERE stream = $1 AND seq > $2 ORDER BY seq LIMIT $3) AS page) AS sized ORDER BY seq";
/// The highest offset ever assigned in a stream.
pub const S_LAST: &str = "SELECT last_offset FROM alk.streams WHERE stream = $1";
/// Saves a consumer's offset unless that would move it back.
pub const S_SAVE: &str = "INSERT INTO alk.consumer_offsets AS c (stream, consumer, seq) VALUES ($1, $2, $3) \
ON CONFLICT (stream, consumer) DO UPDATE SET seq = EXCLUDED.seq WHERE EXCLUDED.seq > c.seq";
/// A consumer's saved offset.
pub const S_GET_OFFSET: &str =
    "SELECT seq FROM alk.consumer_offsets WHERE stream = $1 AND consumer = $2";
/// Deletes the events at or below a horizon.
pub const S_TRIM: &str = "DELETE FROM alk.events WHERE stream = $1 AND seq <= $2";

/// Serializes the stream transactions of a schema (`$1` =
/// `alk-stream-tx:<schema>`) until commit or rollback, as the file engine's
/// store lock does: two transactions never wait for each other's streams
/// in opposite orders (a deadlock the server would break by aborting one).
pub const S_TX_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))";

/// Takes a lock that is free or expired at `$3`, until `$4`; its new token.
pub const L_ACQUIRE: &str = "INSERT INTO alk.locks AS l (name, owner, token, acquired_at, expires_at) \
VALUES ($1, $2, 1, $3, $4) ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, token = l.token + 1, \
acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at \
WHERE l.owner IS NULL OR l.expires_at <= $3 RETURNING token";
/// Moves the deadline of a live acquisition.
pub const L_RENEW: &str = "UPDATE alk.locks SET expires_at = $4 \
WHERE name = $1 AND owner = $2 AND token = $3 AND expires_at > $5";
/// Releases a live acquisition (the row and its token stay).
pub const L_RELEASE: &str = "UPDATE alk.locks SET owner = NULL, expires_at = NULL \
WHERE name = $1 AND owner = $2 AND token = $3 AND expires_at > $4";
/// The live holder of a lock.
pub const L_HOLDER: &str = "SELECT owner, expires_at, token FROM alk.locks \
WHERE name = $1 AND owner IS NOT NULL AND expires_at > $2";

/// Wakes other hosts: one notification per topic `$2` on channel `$1`.
pub const NOTIFY: &str = "SELECT pg_notify($1, t) FROM unnest($2::text[]) AS t";

/// Every statement, by name (the document lists each).
pub const STATEMENTS: &[(&str, &str)] = &[
    ("MIGRATE_LOCK", MIGRATE_LOCK),
    ("SCHEMA_RELATIONS", SCHEMA_RELATIONS),
    ("SCHEMA_EXISTS", SCHEMA_EXISTS),
    ("READ_META", READ_META),
    ("SET_VERSION", SET_VERSION),
    ("DB_NOW", DB_NOW),
    ("KV_GET", KV_GET),
    ("KV_DELETE_EXPIRED", KV_DELETE_EXPIRED),
    ("KV_GET_MANY", KV_GET_MANY),
    ("KV_DELETE_EXPIRED_MANY", KV_DELETE_EXPIRED_MANY),
    ("KV_PUT", KV_PUT),
    ("KV_PUT_IF_ABSENT", KV_PUT_IF_ABSENT),
    ("KV_DELETE", KV_DELETE),
    ("KV_SCAN_RANGE", KV_SCAN_RANGE),
    ("KV_SCAN_FROM", KV_SCAN_FROM),
    ("Q_SEND", Q_SEND),
    ("Q_CLAIM", Q_CLAIM),
    ("Q_ACK", Q_ACK),
    ("Q_NACK", Q_NACK),
    ("Q_EXISTS", Q_EXISTS),
    ("Q_ACK_BATCH", Q_ACK_BATCH),
    ("Q_EXISTING", Q_EXISTING),
    ("Q_NEXT_VISIBLE", Q_NEXT_VISIBLE),
    ("Q_PURGE", Q_PURGE),
    ("S_PUBLISH", S_PUBLISH),
    ("S_READ", S_READ),
    ("S_LAST", S_LAST),
    ("S_SAVE", S_SAVE),
    ("S_GET_OFFSET", S_GET_OFFSET),
    ("S_TRIM", S_TRIM),
    ("S_TX_LOCK", S_TX_LOCK),
    ("L_ACQUIRE", L_ACQUIRE),
    ("L_RENEW", L_RENEW),
    ("L_RELEASE", L_RELEASE),
    ("L_HOLDER", L_HOLDER),
    ("NOTIFY", NOTIFY),
];

/// Checks a schema name: 1 to 40 characters of `a-z 0-9 _`, not starting
/// with a digit, not `pg_…` (Postgres reserves those). Longer names would
/// push the wake channel past Postgres's 63-byte identifiers.
pub fn check_schema(name: &str) -> Result<(), String> {
    // Words Postgres reserves cannot name a schema unquoted.
    const RESERVED: &[&str] = &[
        "all",
        "analyse",
        "analyze",
        "and",
        "any",
        "array",
        "as",
        "asc",
        "asymmetric",
        "both",
        "case",
        "cast",
        "check",
        "collate",
        "column",
        "constraint",
        "create",
        "current_catalog",
        "current_date",
        "current_role",
        "current_time",
        "current_timestamp",
        "current_user",
        "default",
        "deferrable",
        "desc",
        "distinct",
        "do",
        "else",
        "end",
        "except",
        "false",
        "fetch",
        "for",
        "foreign",
        "from",
        "grant",
        "group",
        "having",
        "in",
        "initially",
        "intersect",
        "into",
        "lateral",
        "leading",
        "limit",
        "localtime",
        "localtimestamp",
        "not",
        "null",
        "offset",
        "on",
        "only",
        "or",
        "order",
        "placing",
        "primary",
        "references",
        "returning",
        "select",
        "session_user",
        "some",
        "symmetric",
        "system_user",
        "table",
        "then",
        "to",
        "trailing",
        "true",
        "union",
        "unique",
        "user",
        "using",
        "variadic",
        "when",
        "where",
        "window",
        "with",
        "authorization",
        "binary",
        "collation",
        "concurrently",
        "cross",
        "current_schema",
        "freeze",
        "full",
        "ilike",
        "inner",
        "is",
        "isnull",
        "join",
        "left",
        "like",
        "natural",
        "notnull",
        "outer",
        "overlaps",
        "right",
        "similar",
        "tablesample",
        "verbose",
    ];
    if RESERVED.contains(&name) {
        return Err(format!(
            "schema name {name:?} is a word Postgres reserves; choose another"
        ));
    }
    let ok = !name.is_empty()
        && name.len() <= 40
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && !name.starts_with("pg_")
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "schema name {name:?} is not usable: 1 to 40 characters of a-z 0-9 _, not starting with a digit or pg_"
        ))
    }
}

/// The wake channel of a schema (`alk_wake_<schema>`, at most 49 bytes).
pub fn channel(schema: &str) -> String {
    format!("alk_wake_{schema}")
}

/// The statements of one schema, with its name in place of `alk`.
#[derive(Debug, Clone)]
pub struct Sql {
    schema: String,
}

impl Sql {
    /// The statements for `schema` (checked by [`check_schema`]).
    pub fn for_schema(schema: &str) -> Sql {
        Sql {
            schema: schema.to_string(),
        }
    }

    /// `sql` with this schema's name in place of `alk.`.
    pub fn get(&self, sql: &str) -> String {
        if self.schema == "alk" {
            sql.to_string()
        } else {
            sql.replace("alk.", &format!("{}.", self.schema))
        }
    }

    /// The schema's name.
    pub fn schema(&self) -> &str {
        &self.schema
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = include_str!("../../../docs/formats/alk-postgres.v1.md");

    fn squash(s: &str) -> String {
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn the_document_carries_the_schema_and_every_statement() {
        let doc = squash(DOC);
        assert!(doc.contains(&squash(V1)), "the document lacks the v1 DDL");
        for (name, sql) in STATEMENTS {
            assert!(
                doc.contains(&squash(sql)),
                "the document lacks {name}: {sql}"
            );
        }
        assert!(doc.contains(&format!("`{SUPPORTED}`")));
    }

    #[test]
    fn schema_names_are_plain_identifiers_and_channels_fit_postgres() {
        for ok in ["alk", "a", "tenant_7", &"x".repeat(40)] {
            check_schema(ok).unwrap();
            assert!(channel(ok).len() <= 63);
        }
        for bad in [
            "",
            "Alk",
            "1a",
            "pg_x",
            "a-b",
            "a.b",
            "a b",
            "é",
            &"x".repeat(41),
        ] {
            assert!(check_schema(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn another_schema_replaces_only_table_prefixes() {
        let sql = Sql::for_schema("t1");
        let q = sql.get(Q_SEND);
        assert!(!q.contains("alk."));
        assert!(q.contains("t1.queues") && q.contains("t1.messages"));
        assert_eq!(Sql::for_schema("alk").get(Q_SEND), Q_SEND);
        assert!(sql.get(V1).contains("'alk-postgres'"));
    }
}
