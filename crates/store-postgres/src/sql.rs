//! `alk-postgres.v4`: the schema and every statement of the database
//! engine, pinned by `docs/formats/alk-postgres.v4.md` (a test checks that
//! the document carries the same text).
//!
//! The schema's DDL (one migration per version), its marker and the rules
//! for schema names are defined here. Each statement is defined next to
//! the code that runs it (`kv.rs`, `queue.rs`, `stream.rs`, `tx.rs`,
//! `lock.rs`, `schedule.rs`, `wake.rs`, `clock.rs`, `migrate.rs`) and
//! re-exported here by its name, and [`STATEMENTS`] lists every one: the
//! test checks each against the document, and code outside the engine
//! (the benchmarks) runs the engine's own text.
//!
//! Statements name their tables `alk.<table>`; an engine configured with
//! another schema gets the same text with its schema in place of `alk`
//! ([`Sql::for_schema`]). Schema names are checked to be plain lower-case
//! identifiers, so nothing is quoted.

pub use crate::catalog::{C_BUCKETS, C_QUEUES};
pub use crate::clock::DB_NOW;
pub use crate::kv::{
    KV_DELETE, KV_DELETE_EXPIRED, KV_DELETE_EXPIRED_MANY, KV_DELETE_MANY, KV_GET, KV_GET_MANY,
    KV_KEYS_FROM, KV_KEYS_RANGE, KV_PUT, KV_PUT_IF_ABSENT, KV_SCAN_FROM, KV_SCAN_RANGE, KV_SWAP,
};
pub use crate::lock::{
    L_ACQUIRE, L_HOLDER, L_HOLDERS, L_RELEASE, L_RENEW, L_TOKENS_HOLD, L_TOKENS_NEW, L_TOKENS_SAVE,
    L_TOKENS_SWEEP,
};
pub use crate::migrate::{MIGRATE_LOCK, READ_META, SCHEMA_EXISTS, SCHEMA_RELATIONS, SET_VERSION};
pub use crate::queue::{
    Q_ACK_BATCH, Q_BUCKETS, Q_BUCKETS_HOLD, Q_BUCKETS_SAVE, Q_BUCKETS_SWEEP, Q_BURY, Q_CANCEL,
    Q_CANCEL_DEAD, Q_CLAIM_HEADS, Q_CLAIM_LANE, Q_DEAD_LOOKUP, Q_DEAD_PAGE, Q_EXISTING,
    Q_EXPIRED_GROUPS, Q_GROUP_DROP, Q_GROUP_LOCK, Q_HEADS, Q_HEARTBEAT, Q_IN_FLIGHT, Q_JOB,
    Q_JOBS_PAGE, Q_JOIN, Q_LIMITS, Q_LIMITS_CLEAR, Q_LIMITS_HOLD, Q_LIMITS_SET, Q_LOCK_ROUND,
    Q_LOOKUP, Q_NACK, Q_NEXT_VISIBLE, Q_PURGE, Q_PURGE_DEAD, Q_PURGE_GROUPS, Q_REDRIVE, Q_RESULT,
    Q_RESULT_DELETE, Q_RESULT_PUT, Q_RESULTS_SWEEP, Q_RETRY, Q_SEND, Q_SERVE, Q_STATS, Q_SWEEP,
    Q_UNIQUE_DROP, Q_UNIQUE_HOLD, Q_UNIQUE_SET, Q_UNIQUE_STALE,
};
pub use crate::schedule::{SC_FIRE, SC_GET, SC_LIST, SC_PUT, SC_REMOVE};
pub use crate::stream::{
    S_CONSUMERS, S_GET_OFFSET, S_INFO, S_LAST, S_NAMES, S_PUBLISH, S_READ, S_SAVE, S_TRIM,
};
pub use crate::tx::S_TX_LOCK;
pub use crate::wake::NOTIFY;

/// The value of the `format` row of `meta`.
pub const FORMAT: &str = "alk-postgres";

/// The newest schema version this engine knows (the `version` row of
/// `meta`). A schema at a higher version is refused untouched.
pub const VERSION: i64 = 4;

/// The format and version, as reported in errors.
pub const SUPPORTED: &str = "alk-postgres.v4";

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

/// Version 2, from version 1: the job options of a message, the round of
/// the message groups, the dead letters. Messages already there keep their
/// ids, attempts and receipts; they become ready at the time they were
/// sent, which keeps their claim order.
pub const V2: &str = r#"ALTER TABLE alk.messages
    ADD COLUMN ready_at        bigint,
    ADD COLUMN priority        integer NOT NULL DEFAULT 0,
    ADD COLUMN group_key       bytea,
    ADD COLUMN max_attempts    integer,
    ADD COLUMN backoff_base_ms bigint,
    ADD COLUMN expires_at      bigint,
    ADD COLUMN last_error      bytea;
UPDATE alk.messages SET ready_at = enqueued_at;
ALTER TABLE alk.messages ALTER COLUMN ready_at SET NOT NULL;
DROP INDEX alk.messages_claim;
CREATE INDEX messages_ready ON alk.messages (queue, priority DESC, ready_at, id) WHERE group_key IS NULL;
CREATE INDEX messages_group ON alk.messages (queue, group_key, id) WHERE group_key IS NOT NULL;
CREATE INDEX messages_expiry ON alk.messages (queue, expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE alk.groups (
    queue     text COLLATE "C" NOT NULL,
    group_key bytea NOT NULL,
    seq       bigint GENERATED BY DEFAULT AS IDENTITY,
    priority  integer NOT NULL,
    served    bigint NOT NULL,
    PRIMARY KEY (queue, group_key)
);
CREATE INDEX groups_round ON alk.groups (queue, served, seq);
CREATE TABLE alk.dead (
    queue           text COLLATE "C" NOT NULL,
    id              bigint NOT NULL,
    payload_type    text NOT NULL CHECK (payload_type IN ('json', 'text')),
    payload_data    bytea NOT NULL,
    enqueued_at     bigint NOT NULL,
    visible_at      bigint NOT NULL,
    ready_at        bigint NOT NULL,
    attempt         integer NOT NULL,
    priority        integer NOT NULL,
    group_key       bytea,
    max_attempts    integer,
    backoff_base_ms bigint,
    expires_at      bigint,
    last_error      bytea,
    died_at         bigint NOT NULL,
    PRIMARY KEY (queue, id)
);
"#;

/// Version 3, from version 2: the schedules, one row each, with every send
/// option in its own column (NULL: not given). Nothing else changes.
pub const V3: &str = r#"CREATE TABLE alk.schedules (
    name            text COLLATE "C" PRIMARY KEY,
    spec            text NOT NULL,
    every_ms        bigint NOT NULL CHECK (every_ms > 0),
    queue           text COLLATE "C" NOT NULL,
    payload_type    text NOT NULL CHECK (payload_type IN ('json', 'text')),
    payload_data    bytea NOT NULL,
    priority        integer,
    delay_ms        bigint,
    run_at_ms       bigint,
    max_attempts    bigint,
    backoff_base_ms bigint,
    expires_in_ms   bigint,
    group_key       bytea,
    next_due        bigint NOT NULL
);
"#;

/// Version 4, from version 3: the limits of a queue (no row: the
/// defaults), the token buckets its claims take from, the unique keys of
/// its messages, the results of completed messages, and the free-standing
/// token buckets kept with the locks, and an index of the delivered
/// messages (what a cap on the messages in flight counts). Nothing else
/// changes; a queue without a row in `queue_limits` is claimed as before.
pub const V4: &str = r#"CREATE TABLE alk.queue_limits (
    queue             text COLLATE "C" PRIMARY KEY,
    group_concurrency integer NOT NULL CHECK (group_concurrency >= 1),
    max_in_flight     integer CHECK (max_in_flight >= 1),
    rate_capacity     bigint CHECK (rate_capacity >= 1),
    rate_refill       bigint CHECK (rate_refill >= 1),
    rate_interval_ms  bigint CHECK (rate_interval_ms >= 1),
    rate_per_group    boolean NOT NULL,
    CHECK ((rate_capacity IS NULL) = (rate_refill IS NULL) AND (rate_refill IS NULL) = (rate_interval_ms IS NULL)),
    CHECK (rate_capacity IS NOT NULL OR NOT rate_per_group)
);
CREATE TABLE alk.rate_buckets (
    queue  text COLLATE "C" NOT NULL,
    bucket bytea NOT NULL,
    tokens bigint NOT NULL,
    since  bigint NOT NULL,
    PRIMARY KEY (queue, bucket)
);
CREATE INDEX rate_buckets_since ON alk.rate_buckets (queue, since);
CREATE TABLE alk.unique_keys (
    queue      text COLLATE "C" NOT NULL,
    key        bytea NOT NULL,
    id         bigint NOT NULL,
    held_until bigint,
    PRIMARY KEY (queue, key)
);
CREATE INDEX unique_keys_until ON alk.unique_keys (queue, held_until) WHERE held_until IS NOT NULL;
CREATE INDEX unique_keys_live ON alk.unique_keys (queue, id) WHERE held_until IS NULL;
CREATE TABLE alk.results (
    queue        text COLLATE "C" NOT NULL,
    id           bigint NOT NULL,
    payload_type text NOT NULL CHECK (payload_type IN ('json', 'text')),
    payload_data bytea NOT NULL,
    completed_at bigint NOT NULL,
    expires_at   bigint NOT NULL,
    PRIMARY KEY (queue, id)
);
CREATE INDEX results_expiry ON alk.results (queue, expires_at);
CREATE TABLE alk.limiters (
    name    text COLLATE "C" PRIMARY KEY,
    tokens  bigint NOT NULL,
    since   bigint NOT NULL,
    full_at bigint NOT NULL
);
CREATE INDEX limiters_full ON alk.limiters (full_at);
CREATE INDEX messages_in_flight ON alk.messages (queue, visible_at) WHERE receipt_handle IS NOT NULL;
"#;

/// The migrations, in order: entry `i` brings a schema from version `i` to
/// version `i + 1` (entry 0 creates version 1 in an empty schema).
pub const MIGRATIONS: &[&str] = &[V1, V2, V3, V4];

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
    ("KV_KEYS_RANGE", KV_KEYS_RANGE),
    ("KV_KEYS_FROM", KV_KEYS_FROM),
    ("KV_SWAP", KV_SWAP),
    ("KV_DELETE_MANY", KV_DELETE_MANY),
    ("Q_SEND", Q_SEND),
    ("Q_CLAIM_LANE", Q_CLAIM_LANE),
    ("Q_HEADS", Q_HEADS),
    ("Q_LOCK_ROUND", Q_LOCK_ROUND),
    ("Q_CLAIM_HEADS", Q_CLAIM_HEADS),
    ("Q_BURY", Q_BURY),
    ("Q_SERVE", Q_SERVE),
    ("Q_GROUP_LOCK", Q_GROUP_LOCK),
    ("Q_GROUP_DROP", Q_GROUP_DROP),
    ("Q_LOOKUP", Q_LOOKUP),
    ("Q_NACK", Q_NACK),
    ("Q_HEARTBEAT", Q_HEARTBEAT),
    ("Q_RETRY", Q_RETRY),
    ("Q_ACK_BATCH", Q_ACK_BATCH),
    ("Q_EXISTING", Q_EXISTING),
    ("Q_CANCEL", Q_CANCEL),
    ("Q_CANCEL_DEAD", Q_CANCEL_DEAD),
    ("Q_JOB", Q_JOB),
    ("Q_EXPIRED_GROUPS", Q_EXPIRED_GROUPS),
    ("Q_SWEEP", Q_SWEEP),
    ("Q_DEAD_PAGE", Q_DEAD_PAGE),
    ("Q_JOBS_PAGE", Q_JOBS_PAGE),
    ("Q_DEAD_LOOKUP", Q_DEAD_LOOKUP),
    ("Q_JOIN", Q_JOIN),
    ("Q_REDRIVE", Q_REDRIVE),
    ("Q_PURGE_DEAD", Q_PURGE_DEAD),
    ("Q_PURGE_GROUPS", Q_PURGE_GROUPS),
    ("Q_NEXT_VISIBLE", Q_NEXT_VISIBLE),
    ("Q_STATS", Q_STATS),
    ("Q_PURGE", Q_PURGE),
    ("Q_UNIQUE_HOLD", Q_UNIQUE_HOLD),
    ("Q_UNIQUE_SET", Q_UNIQUE_SET),
    ("Q_UNIQUE_STALE", Q_UNIQUE_STALE),
    ("Q_UNIQUE_DROP", Q_UNIQUE_DROP),
    ("Q_LIMITS", Q_LIMITS),
    ("Q_LIMITS_HOLD", Q_LIMITS_HOLD),
    ("Q_LIMITS_SET", Q_LIMITS_SET),
    ("Q_LIMITS_CLEAR", Q_LIMITS_CLEAR),
    ("Q_IN_FLIGHT", Q_IN_FLIGHT),
    ("Q_BUCKETS_HOLD", Q_BUCKETS_HOLD),
    ("Q_BUCKETS_SAVE", Q_BUCKETS_SAVE),
    ("Q_BUCKETS_SWEEP", Q_BUCKETS_SWEEP),
    ("Q_BUCKETS", Q_BUCKETS),
    ("Q_RESULT_PUT", Q_RESULT_PUT),
    ("Q_RESULT", Q_RESULT),
    ("Q_RESULT_DELETE", Q_RESULT_DELETE),
    ("Q_RESULTS_SWEEP", Q_RESULTS_SWEEP),
    ("S_PUBLISH", S_PUBLISH),
    ("S_READ", S_READ),
    ("S_LAST", S_LAST),
    ("S_SAVE", S_SAVE),
    ("S_GET_OFFSET", S_GET_OFFSET),
    ("S_TRIM", S_TRIM),
    ("S_INFO", S_INFO),
    ("S_CONSUMERS", S_CONSUMERS),
    ("S_NAMES", S_NAMES),
    ("C_BUCKETS", C_BUCKETS),
    ("C_QUEUES", C_QUEUES),
    ("S_TX_LOCK", S_TX_LOCK),
    ("L_ACQUIRE", L_ACQUIRE),
    ("L_RENEW", L_RENEW),
    ("L_RELEASE", L_RELEASE),
    ("L_HOLDER", L_HOLDER),
    ("L_HOLDERS", L_HOLDERS),
    ("L_TOKENS_HOLD", L_TOKENS_HOLD),
    ("L_TOKENS_NEW", L_TOKENS_NEW),
    ("L_TOKENS_SAVE", L_TOKENS_SAVE),
    ("L_TOKENS_SWEEP", L_TOKENS_SWEEP),
    ("SC_PUT", SC_PUT),
    ("SC_REMOVE", SC_REMOVE),
    ("SC_GET", SC_GET),
    ("SC_LIST", SC_LIST),
    ("SC_FIRE", SC_FIRE),
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

    const DOC: &str = include_str!("../../../docs/formats/alk-postgres.v4.md");

    fn squash(s: &str) -> String {
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn the_document_carries_the_schema_and_every_statement() {
        let doc = squash(DOC);
        assert!(doc.contains(&squash(V1)), "the document lacks the v1 DDL");
        assert!(
            doc.contains(&squash(V2)),
            "the document lacks the v2 migration"
        );
        assert!(
            doc.contains(&squash(V3)),
            "the document lacks the v3 migration"
        );
        assert!(
            doc.contains(&squash(V4)),
            "the document lacks the v4 migration"
        );
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
