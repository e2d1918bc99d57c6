//! `localqueue.v1` to `localqueue.v4`: the queue store formats and their
//! only implementation.
//!
//! The schemas and every statement are defined here, once (but the two
//! statements of the relay marks, which are with the rest of the relay in
//! [`crate::relay`]), and pinned by `docs/formats/localqueue.v1.md` to
//! `docs/formats/localqueue.v4.md`; tests check that the documents carry
//! the same DDL and statements.
//!
//! `localqueue.v2` is `localqueue.v1` plus [`UPGRADE`], `localqueue.v3` is
//! `localqueue.v2` plus [`UPGRADE_V3`], and `localqueue.v4` is
//! `localqueue.v3` plus [`UPGRADE_V4`]: a new v4 file is made by running
//! all four, an older file is moved to v4 by running the upgrades it lacks
//! ([`QueueStore::migrate`]), so all have the same schema. A v1, v2 or v3
//! file is used as it is (another program reads and writes v1 files, older
//! hosts v3 files) and is only ever upgraded on request.

use std::path::{Path, PathBuf};

use std::collections::HashMap;

use alk_store::jobs::{
    Beat, EXPIRED_ERROR, JobInfo, JobResult, JobState, QueueLimits, Retried, RetryDelay, Sent,
    Stamp, UNGROUPED_BUCKET, Unique, lapsed_error,
};
use alk_store::queue::{AckedBatch, Delivery, Payload, QueueEngine, QueueStats, Receipt, Settled};
use alk_store::rate::{Bucket, RateLimit, Taken, check_take};
use alk_store::{AlkError, AlkResult};
use async_trait::async_trait;
use turso::Value;

use crate::conn::Connection;
use crate::format::Format;
use crate::options::{NewQueues, StoreOptions};
use crate::retry::{Failure, exec, query, text_or_null};
use crate::store::{Store, open_store};

macro_rules! v1_ddl {
    () => {
        "\
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT OR IGNORE INTO meta (key, value) VALUES ('format', 'localqueue.v1');
CREATE TABLE IF NOT EXISTS messages (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    payload_type   TEXT NOT NULL,              -- \"json\" | \"text\"
    payload_data   TEXT NOT NULL,              -- serialized JSON for \"json\", raw string for \"text\"
    enqueued_at    INTEGER NOT NULL,           -- unix epoch MILLISECONDS
    visible_at     INTEGER NOT NULL,           -- unix epoch MILLISECONDS; due when <= now
    attempt        INTEGER NOT NULL DEFAULT 0, -- delivery count, incremented per receive
    receipt_handle TEXT                        -- UUID of the CURRENT delivery, NULL if never delivered
);
CREATE INDEX IF NOT EXISTS idx_messages_visible ON messages (visible_at, enqueued_at, id);
CREATE INDEX IF NOT EXISTS idx_messages_claim ON messages (enqueued_at, id);
"
    };
}

macro_rules! upgrade {
    () => {
        "\
ALTER TABLE messages ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;   -- higher is claimed first
ALTER TABLE messages ADD COLUMN ready_at INTEGER NOT NULL DEFAULT 0;   -- unix epoch MILLISECONDS; claim order
ALTER TABLE messages ADD COLUMN group_key TEXT;                        -- NULL: no group
ALTER TABLE messages ADD COLUMN max_attempts INTEGER;                  -- NULL: no limit
ALTER TABLE messages ADD COLUMN backoff_ms INTEGER;                    -- NULL: the default base
ALTER TABLE messages ADD COLUMN expires_at INTEGER;                    -- unix epoch MILLISECONDS; NULL: never
ALTER TABLE messages ADD COLUMN last_error TEXT;                       -- error of the last failed attempt
UPDATE messages SET ready_at = CASE WHEN receipt_handle IS NULL THEN visible_at ELSE enqueued_at END;
CREATE INDEX IF NOT EXISTS idx_messages_ready ON messages (priority DESC, ready_at, id) WHERE group_key IS NULL;
CREATE INDEX IF NOT EXISTS idx_messages_group ON messages (group_key, id) WHERE group_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_messages_expiry ON messages (expires_at) WHERE expires_at IS NOT NULL;
DROP INDEX IF EXISTS idx_messages_claim;
CREATE TABLE IF NOT EXISTS message_groups (
    id        INTEGER PRIMARY KEY AUTOINCREMENT, -- order of joining the round
    group_key TEXT NOT NULL UNIQUE,             -- '' is the messages without a group
    priority  INTEGER NOT NULL DEFAULT 0,       -- highest priority sent since the group joined
    served    INTEGER NOT NULL DEFAULT 0        -- place in the round: lowest is served next
);
CREATE INDEX IF NOT EXISTS idx_groups_served ON message_groups (served, id);
INSERT OR IGNORE INTO message_groups (group_key, priority, served) VALUES ('', 0, 0);
CREATE TABLE IF NOT EXISTS dead_letters (
    id           INTEGER PRIMARY KEY,  -- the message's id
    payload_type TEXT NOT NULL,
    payload_data TEXT NOT NULL,
    enqueued_at  INTEGER NOT NULL,
    visible_at   INTEGER NOT NULL,
    attempt      INTEGER NOT NULL,
    priority     INTEGER NOT NULL,
    group_key    TEXT,
    max_attempts INTEGER,
    backoff_ms   INTEGER,
    expires_at   INTEGER,
    last_error   TEXT,
    died_at      INTEGER NOT NULL      -- unix epoch MILLISECONDS
);
UPDATE meta SET value = 'localqueue.v2' WHERE key = 'format';
"
    };
}

macro_rules! upgrade_v3 {
    () => {
        "\
CREATE TABLE IF NOT EXISTS queue_limits (
    id                INTEGER PRIMARY KEY,         -- always 1: the queue's one row
    group_concurrency INTEGER NOT NULL DEFAULT 1,  -- messages of one group in flight at once
    max_in_flight     INTEGER,                     -- messages of the queue in flight at once; NULL: no cap
    rate_capacity     INTEGER,                     -- tokens of a full bucket; NULL: no rate
    rate_refill       INTEGER,                     -- tokens added at the end of every interval
    rate_interval_ms  INTEGER,                     -- the interval, MILLISECONDS
    rate_per_group    INTEGER NOT NULL DEFAULT 0   -- 1: a bucket per group ('' the messages without one)
);
CREATE TABLE IF NOT EXISTS rate_buckets (
    bucket TEXT PRIMARY KEY,   -- '': the queue's bucket, or the messages without a group's; else a group key
    tokens INTEGER NOT NULL,   -- tokens held at since
    since  INTEGER NOT NULL    -- unix epoch MILLISECONDS; start of the interval now running
);
CREATE INDEX IF NOT EXISTS idx_rate_buckets_empty ON rate_buckets (since) WHERE tokens = 0;
CREATE INDEX IF NOT EXISTS idx_rate_buckets_since ON rate_buckets (since);
CREATE TABLE IF NOT EXISTS unique_keys (
    key   TEXT PRIMARY KEY,
    id    INTEGER NOT NULL,    -- the message that took the key
    until INTEGER              -- unix epoch MILLISECONDS; NULL: while the message is in messages
);
CREATE INDEX IF NOT EXISTS idx_unique_until ON unique_keys (until) WHERE until IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_unique_live ON unique_keys (id) WHERE until IS NULL;
CREATE TABLE IF NOT EXISTS results (
    id           INTEGER PRIMARY KEY,  -- the completed message's id
    payload_type TEXT NOT NULL,        -- \"json\" | \"text\"
    payload_data TEXT NOT NULL,
    completed_at INTEGER NOT NULL,     -- unix epoch MILLISECONDS
    expires_at   INTEGER NOT NULL      -- unix epoch MILLISECONDS; gone when <= now
);
CREATE INDEX IF NOT EXISTS idx_results_expiry ON results (expires_at);
CREATE INDEX IF NOT EXISTS idx_messages_in_flight ON messages (visible_at) WHERE receipt_handle IS NOT NULL;
UPDATE meta SET value = 'localqueue.v3' WHERE key = 'format';
"
    };
}

macro_rules! upgrade_v4 {
    () => {
        "\
DROP INDEX IF EXISTS idx_messages_visible;
DROP INDEX IF EXISTS idx_messages_ready;
DROP INDEX IF EXISTS idx_messages_in_flight;
UPDATE messages SET ready_at = -1 - ready_at WHERE receipt_handle IS NOT NULL AND ready_at >= 0;
CREATE INDEX IF NOT EXISTS idx_messages_waiting ON messages (priority DESC, ready_at, id) WHERE group_key IS NULL AND ready_at >= 0;
CREATE INDEX IF NOT EXISTS idx_messages_claimed ON messages (visible_at) WHERE ready_at < 0;
CREATE INDEX IF NOT EXISTS idx_messages_group_due ON messages (visible_at) WHERE group_key IS NOT NULL AND ready_at >= 0;
UPDATE meta SET value = 'localqueue.v4' WHERE key = 'format';
"
    };
}

/// The DDL of `localqueue.v1`.
pub const DDL: &str = v1_ddl!();

/// What turns a `localqueue.v1` file into a `localqueue.v2` one, in one
/// `BEGIN IMMEDIATE` transaction.
pub const UPGRADE: &str = upgrade!();

/// The DDL of a new `localqueue.v2` file: [`DDL`], then [`UPGRADE`].
pub const DDL_V2: &str = concat!(v1_ddl!(), upgrade!());

/// What turns a `localqueue.v2` file into a `localqueue.v3` one, in one
/// `BEGIN IMMEDIATE` transaction.
pub const UPGRADE_V3: &str = upgrade_v3!();

/// What turns a `localqueue.v1` file into a `localqueue.v3` one, in one
/// transaction: [`UPGRADE`], then [`UPGRADE_V3`].
pub const UPGRADE_V1_V3: &str = concat!(upgrade!(), upgrade_v3!());

/// The DDL of a new `localqueue.v3` file: [`DDL`], [`UPGRADE`], then
/// [`UPGRADE_V3`].
pub const DDL_V3: &str = concat!(v1_ddl!(), upgrade!(), upgrade_v3!());

/// What turns a `localqueue.v3` file into a `localqueue.v4` one, in one
/// `BEGIN IMMEDIATE` transaction.
pub const UPGRADE_V4: &str = upgrade_v4!();

/// What turns a `localqueue.v2` file into a `localqueue.v4` one, in one
/// transaction: [`UPGRADE_V3`], then [`UPGRADE_V4`].
pub const UPGRADE_V2_V4: &str = concat!(upgrade_v3!(), upgrade_v4!());

/// What turns a `localqueue.v1` file into a `localqueue.v4` one, in one
/// transaction: [`UPGRADE`], [`UPGRADE_V3`], then [`UPGRADE_V4`].
pub const UPGRADE_V1_V4: &str = concat!(upgrade!(), upgrade_v3!(), upgrade_v4!());

/// The DDL of a new `localqueue.v4` file: [`DDL_V3`], then [`UPGRADE_V4`].
pub const DDL_V4: &str = concat!(v1_ddl!(), upgrade!(), upgrade_v3!(), upgrade_v4!());

/// The `localqueue.v1` format, alone.
pub static FORMAT: Format = Format {
    marker: "localqueue.v1",
    ddl: DDL,
    also: &[],
    upgrades: &[],
};

/// The `localqueue.v2` format, alone.
pub static FORMAT_V2: Format = Format {
    marker: "localqueue.v2",
    ddl: DDL_V2,
    also: &[],
    upgrades: &[],
};

/// The `localqueue.v3` format, alone.
pub static FORMAT_V3: Format = Format {
    marker: "localqueue.v3",
    ddl: DDL_V3,
    also: &[],
    upgrades: &[],
};

/// The `localqueue.v4` format, alone.
pub static FORMAT_V4: Format = Format {
    marker: "localqueue.v4",
    ddl: DDL_V4,
    also: &[],
    upgrades: &[],
};

/// Queues whose new files are `localqueue.v4`; v1, v2 and v3 files are
/// used as they are.
pub static NEW_V4: Format = Format {
    marker: "localqueue.v4",
    ddl: DDL_V4,
    also: &[&FORMAT, &FORMAT_V2, &FORMAT_V3],
    upgrades: &[],
};

/// Queues whose new files are `localqueue.v3` (for a data directory shared
/// with hosts that know no newer format); v1, v2 and v4 files are used as
/// they are.
pub static NEW_V3: Format = Format {
    marker: "localqueue.v3",
    ddl: DDL_V3,
    also: &[&FORMAT, &FORMAT_V2, &FORMAT_V4],
    upgrades: &[],
};

/// Queues whose new files are `localqueue.v1` (for a data directory shared
/// with a program that reads only v1); v2, v3 and v4 files are used as they
/// are.
pub static NEW_V1: Format = Format {
    marker: "localqueue.v1",
    ddl: DDL,
    also: &[&FORMAT_V2, &FORMAT_V3, &FORMAT_V4],
    upgrades: &[],
};

/// Appends a message, due at once.
pub const SEND: &str = "INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt) \
VALUES (?1, ?2, ?3, ?3, 0)";
/// Claims up to `?4` due messages for one delivery, oldest first (`id`
/// breaks ties of one millisecond), in one statement. The due messages are
/// found by walking `idx_messages_claim` in claim order, so the cost does not
/// grow with the number of waiting messages. Every message of one claim gets
/// the same fresh UUID `?2`; receipts `{id}:{uuid}` stay unique per delivery.
pub const CLAIM: &str = "UPDATE messages SET visible_at = ?1, attempt = attempt + 1, receipt_handle = ?2 \
WHERE id IN (SELECT id FROM messages INDEXED BY idx_messages_claim \
WHERE visible_at <= ?3 ORDER BY enqueued_at, id LIMIT ?4) \
RETURNING id, payload_type, payload_data, attempt, enqueued_at";
/// Deletes a message by its current receipt.
pub const ACK: &str = "DELETE FROM messages WHERE id = ?1 AND receipt_handle = ?2";
/// Makes a message due now, by its current receipt.
pub const NACK: &str = "UPDATE messages SET visible_at = ?3 WHERE id = ?1 AND receipt_handle = ?2";
/// Whether a message still exists (tells a stale receipt from a gone message).
pub const EXISTS: &str = "SELECT 1 FROM messages WHERE id = ?1";
/// Deletes the messages of every current receipt of a batch in one
/// statement; `?1` is a JSON array of `[id, uuid]` pairs. Returns what it
/// deleted.
pub const ACK_BATCH: &str = "DELETE FROM messages WHERE id IN (SELECT m.id FROM json_each(?1) AS r \
JOIN messages AS m ON m.id = json_extract(r.value, '$[0]') \
AND m.receipt_handle = json_extract(r.value, '$[1]')) RETURNING id, receipt_handle";
/// [`ACK_BATCH`] for receipts of one claim (one UUID, `?1`); `?2` is the
/// JSON array of the ids. Returns the ids deleted.
pub const ACK_CLAIMED: &str = "DELETE FROM messages WHERE receipt_handle = ?1 \
AND id IN (SELECT value FROM json_each(?2)) RETURNING id";
/// Which of the ids in the JSON array `?1` still exist.
pub const EXISTING: &str = "SELECT id FROM messages WHERE id IN (SELECT value FROM json_each(?1))";
/// Deletes every message.
pub const PURGE: &str = "DELETE FROM messages";
/// When the next message becomes due (a waiting receive sleeps until then).
pub const NEXT_VISIBLE: &str = "SELECT visible_at FROM messages ORDER BY visible_at LIMIT 1";
/// The counts of a queue at `?1`, in one statement (one snapshot), each
/// from a range of `idx_messages_visible`: waiting (due), the oldest
/// waiting message's send time, in flight (not due, delivered), delayed
/// (not due, not delivered).
pub const STATS: &str = "SELECT (SELECT COUNT(*) FROM messages INDEXED BY idx_messages_visible WHERE visible_at <= ?1), (SELECT MIN(enqueued_at) FROM messages INDEXED BY idx_messages_visible WHERE visible_at <= ?1), (SELECT COUNT(*) FROM messages INDEXED BY idx_messages_visible WHERE visible_at > ?1 AND receipt_handle IS NOT NULL), (SELECT COUNT(*) FROM messages INDEXED BY idx_messages_visible WHERE visible_at > ?1 AND receipt_handle IS NULL)";

/// `localqueue.v2`: appends a message with its options (`?4` its due time,
/// which is also its ready time).
pub const SEND_V2: &str = "INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt, \
priority, ready_at, group_key, max_attempts, backoff_ms, expires_at) \
VALUES (?1, ?2, ?3, ?4, 0, ?5, ?4, ?6, ?7, ?8, ?9)";
/// The last place in the round (a group joining goes there).
pub const LAST_SERVED: &str = "SELECT served FROM message_groups INDEXED BY idx_groups_served \
ORDER BY served DESC, id DESC LIMIT 1";
/// A group joins the round at place `?3`, or raises its priority to `?2`.
pub const JOIN: &str = "INSERT INTO message_groups (group_key, priority, served) VALUES (?1, ?2, ?3) \
ON CONFLICT (group_key) DO UPDATE SET priority = max(priority, excluded.priority)";
/// The round after place `?2`: groups of priority `?1` or more, and the
/// messages without a group (`''`), the one served longest ago first.
pub const ROUND: &str = "SELECT id, group_key, served FROM message_groups INDEXED BY idx_groups_served \
WHERE served > ?2 AND (priority >= ?1 OR group_key = '') ORDER BY served, id LIMIT ?3";
/// The rest of place `?2` of the round, after participant `?4` (ties of a
/// place go to the lower id).
pub const ROUND_TIES: &str = "SELECT id, group_key, served FROM message_groups INDEXED BY idx_groups_served \
WHERE served = ?2 AND id > ?4 AND (priority >= ?1 OR group_key = '') ORDER BY served, id LIMIT ?3";
/// [`ROUND`] with a rate per group: participants whose bucket is empty
/// (no token, its interval running since after `?4`) are passed over.
pub const ROUND_OPEN: &str = "SELECT id, group_key, served FROM message_groups INDEXED BY idx_groups_served \
WHERE served > ?2 AND (priority >= ?1 OR group_key = '') AND NOT EXISTS (SELECT 1 FROM rate_buckets \
WHERE bucket = group_key AND tokens <= 0 AND since > ?4) ORDER BY served, id LIMIT ?3";
/// [`ROUND_TIES`] with a rate per group, as [`ROUND_OPEN`] (`?5`).
pub const ROUND_TIES_OPEN: &str = "SELECT id, group_key, served FROM message_groups INDEXED BY idx_groups_served \
WHERE served = ?2 AND id > ?4 AND (priority >= ?1 OR group_key = '') AND NOT EXISTS (SELECT 1 FROM rate_buckets \
WHERE bucket = group_key AND tokens <= 0 AND since > ?5) ORDER BY served, id LIMIT ?3";
/// The oldest message of group `?1` (only it can be claimed).
pub const HEAD: &str = "SELECT id, visible_at, attempt, max_attempts, expires_at FROM messages \
INDEXED BY idx_messages_group WHERE group_key IS NOT NULL AND group_key = ?1 ORDER BY id LIMIT 1";
/// Due messages without a group, of priority `?1` or more, in claim order.
pub const DUE: &str = "SELECT id, attempt, max_attempts, expires_at FROM messages INDEXED BY idx_messages_ready \
WHERE group_key IS NULL AND priority >= ?1 AND visible_at <= ?2 ORDER BY priority DESC, ready_at, id LIMIT ?3";
/// Claims the messages of the JSON array of ids `?3` for one delivery.
pub const CLAIM_IDS: &str = "UPDATE messages SET visible_at = ?1, attempt = attempt + 1, receipt_handle = ?2 \
WHERE id IN (SELECT value FROM json_each(?3)) \
RETURNING id, payload_type, payload_data, attempt, priority, group_key, max_attempts";
/// [`CLAIM_PLAIN`] with `$also`, one more condition, before its `RETURNING`.
macro_rules! claim_plain {
    ($also:literal) => {
        concat!(
            "UPDATE messages SET visible_at = ?1, attempt = attempt + 1, receipt_handle = ?2 \
WHERE id IN (SELECT id FROM messages INDEXED BY idx_messages_ready \
WHERE group_key IS NULL AND priority >= ?3 AND visible_at <= ?4 ORDER BY priority DESC, ready_at, id LIMIT ?5) \
AND (expires_at IS NULL OR expires_at > ?4) AND (max_attempts IS NULL OR attempt < max_attempts) \
AND NOT EXISTS (SELECT 1 FROM message_groups WHERE group_key > '') ",
            $also,
            "RETURNING id, payload_type, payload_data, attempt, priority, ready_at, max_attempts"
        )
    };
}
/// The plain claim, in one statement, as in v1: when the queue has no
/// group (`message_groups` holds only the lane), claims the first `?5` due
/// messages of the lane in claim order (priority `?3` or more, due at
/// `?4`), those fit for delivery: not expired, attempts left. A candidate
/// that is not fit is left as it is, for [`DUE`]'s walk to move to the dead
/// letters; a queue with groups claims nothing here.
pub const CLAIM_PLAIN: &str = claim_plain!("");
/// [`CLAIM_PLAIN`] on a `localqueue.v3` file: also only when the queue has
/// neither a cap on messages in flight nor a rate.
pub const CLAIM_PLAIN_V3: &str = claim_plain!(
    "AND NOT EXISTS (SELECT 1 FROM queue_limits WHERE max_in_flight IS NOT NULL OR rate_capacity IS NOT NULL) "
);
/// Moves a participant of the round to place `?1`.
pub const SERVE: &str = "UPDATE message_groups SET served = ?1 WHERE id = ?2";
/// Copies message `?1` into the dead letters with error `?2` at `?3`.
pub const BURY: &str = "INSERT INTO dead_letters (id, payload_type, payload_data, enqueued_at, visible_at, attempt, \
priority, group_key, max_attempts, backoff_ms, expires_at, last_error, died_at) \
SELECT id, payload_type, payload_data, enqueued_at, visible_at, attempt, priority, group_key, max_attempts, \
backoff_ms, expires_at, ?2, ?3 FROM messages WHERE id = ?1";
/// Deletes message `?1`; its group, for [`LEAVE`].
pub const DELETE_V2: &str = "DELETE FROM messages WHERE id = ?1 RETURNING group_key";
/// Group `?1` leaves the round when it has no message left.
pub const LEAVE: &str = "DELETE FROM message_groups WHERE group_key = ?1 \
AND NOT EXISTS (SELECT 1 FROM messages INDEXED BY idx_messages_group WHERE group_key IS NOT NULL AND group_key = ?1)";
/// `localqueue.v2` ack of a message without a group (no group can leave
/// the round): [`ACK`] for those only, tried before [`ACK_V2`].
pub const ACK_UNGROUPED: &str =
    "DELETE FROM messages WHERE id = ?1 AND receipt_handle = ?2 AND group_key IS NULL";
/// `localqueue.v2` ack: deletes a message by its current receipt; its group.
pub const ACK_V2: &str =
    "DELETE FROM messages WHERE id = ?1 AND receipt_handle = ?2 RETURNING group_key";
/// [`ACK_BATCH`] returning the groups too.
pub const ACK_BATCH_V2: &str = "DELETE FROM messages WHERE id IN (SELECT m.id FROM json_each(?1) AS r \
JOIN messages AS m ON m.id = json_extract(r.value, '$[0]') \
AND m.receipt_handle = json_extract(r.value, '$[1]')) RETURNING id, receipt_handle, group_key";
/// [`ACK_CLAIMED`] returning the groups too.
pub const ACK_CLAIMED_V2: &str = "DELETE FROM messages WHERE receipt_handle = ?1 \
AND id IN (SELECT value FROM json_each(?2)) RETURNING id, group_key";
/// Moves the deadline of a live delivery (`?4` is now).
pub const HEARTBEAT: &str =
    "UPDATE messages SET visible_at = ?3 WHERE id = ?1 AND receipt_handle = ?2 AND visible_at > ?4";
/// What a receipt's message holds, to tell a stale receipt and a lapsed
/// delivery apart, and to retry it.
pub const DELIVERY: &str =
    "SELECT receipt_handle, attempt, max_attempts, backoff_ms FROM messages WHERE id = ?1";
/// [`DELIVERY`] on a `localqueue.v1` file (no attempt limit, no backoff).
pub const DELIVERY_V1: &str =
    "SELECT receipt_handle, attempt, NULL, NULL FROM messages WHERE id = ?1";
/// A retried message: due (and ready) at `?2`, its delivery ended.
pub const RETRY: &str = "UPDATE messages SET visible_at = ?2, ready_at = ?2, receipt_handle = NULL, last_error = ?3 \
WHERE id = ?1";
/// Deletes a dead letter.
pub const DELETE_DEAD: &str = "DELETE FROM dead_letters WHERE id = ?1";
/// A message as inspected (`localqueue.v2`).
pub const JOB: &str = "SELECT payload_type, payload_data, attempt, max_attempts, priority, group_key, enqueued_at, \
visible_at, expires_at, last_error, receipt_handle IS NOT NULL FROM messages WHERE id = ?1";
/// A message as inspected (`localqueue.v1`).
pub const JOB_V1: &str = "SELECT payload_type, payload_data, attempt, NULL, 0, NULL, enqueued_at, \
visible_at, NULL, NULL, receipt_handle IS NOT NULL FROM messages WHERE id = ?1";
/// Up to `?2` live messages with ids above `?1`, by id, as inspected
/// (`localqueue.v2`): a range of the primary key.
pub const JOBS_PAGE: &str = "SELECT payload_type, payload_data, attempt, max_attempts, priority, group_key, enqueued_at, \
visible_at, expires_at, last_error, receipt_handle IS NOT NULL, id FROM messages WHERE id > ?1 ORDER BY id LIMIT ?2";
/// Up to `?2` live messages with ids above `?1`, by id, as inspected
/// (`localqueue.v1`).
pub const JOBS_PAGE_V1: &str = "SELECT payload_type, payload_data, attempt, NULL, 0, NULL, enqueued_at, \
visible_at, NULL, NULL, receipt_handle IS NOT NULL, id FROM messages WHERE id > ?1 ORDER BY id LIMIT ?2";
/// A dead letter as inspected.
pub const DEAD_JOB: &str = "SELECT payload_type, payload_data, attempt, max_attempts, priority, group_key, enqueued_at, \
visible_at, expires_at, last_error, died_at FROM dead_letters WHERE id = ?1";
/// Dead letters with ids above `?1`, by id.
pub const DEAD_PAGE: &str = "SELECT payload_type, payload_data, attempt, max_attempts, priority, group_key, enqueued_at, \
visible_at, expires_at, last_error, died_at, id FROM dead_letters WHERE id > ?1 ORDER BY id LIMIT ?2";
/// The expired messages (expiry at or before `?1`).
pub const EXPIRED: &str = "SELECT id FROM messages INDEXED BY idx_messages_expiry \
WHERE expires_at IS NOT NULL AND expires_at <= ?1 LIMIT ?2";
/// Sends dead letter `?1` again as a new message, due (and ready) at `?2`.
pub const REDRIVE: &str = "INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt, \
priority, ready_at, group_key, max_attempts, backoff_ms, expires_at, last_error) \
SELECT payload_type, payload_data, ?2, ?2, 0, priority, ?2, group_key, max_attempts, backoff_ms, \
NULL, last_error FROM dead_letters WHERE id = ?1 RETURNING id, group_key, priority";
/// Every group leaves the round (after a purge).
pub const PURGE_GROUPS: &str = "DELETE FROM message_groups WHERE group_key <> ''";
/// Deletes every dead letter.
pub const PURGE_DEAD: &str = "DELETE FROM dead_letters";
/// [`STATS`] of a v2 file, and in the same statement the dead letters, the
/// groups with messages (`''` is the messages without a group) and the
/// groups with a message in flight.
pub const STATS_V2: &str = "SELECT (SELECT COUNT(*) FROM messages INDEXED BY idx_messages_visible WHERE visible_at <= ?1), (SELECT MIN(enqueued_at) FROM messages INDEXED BY idx_messages_visible WHERE visible_at <= ?1), (SELECT COUNT(*) FROM messages INDEXED BY idx_messages_visible WHERE visible_at > ?1 AND receipt_handle IS NOT NULL), (SELECT COUNT(*) FROM messages INDEXED BY idx_messages_visible WHERE visible_at > ?1 AND receipt_handle IS NULL), (SELECT COUNT(*) FROM dead_letters), (SELECT COUNT(*) FROM message_groups WHERE group_key <> ''), (SELECT COUNT(*) FROM (SELECT DISTINCT group_key FROM messages INDEXED BY idx_messages_visible WHERE visible_at > ?1 AND receipt_handle IS NOT NULL AND group_key IS NOT NULL))";
/// Whether the queue has any group (the lane's key `''` sorts first).
pub const ANY_GROUP: &str = "SELECT id FROM message_groups WHERE group_key > '' LIMIT 1";

/// `localqueue.v3`: the queue's limits (no row: the defaults).
pub const LIMITS: &str = "SELECT group_concurrency, max_in_flight, rate_capacity, rate_refill, rate_interval_ms, \
rate_per_group FROM queue_limits WHERE id = 1";
/// Sets the queue's limits.
pub const SET_LIMITS: &str = "INSERT INTO queue_limits (id, group_concurrency, max_in_flight, rate_capacity, \
rate_refill, rate_interval_ms, rate_per_group) VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6) \
ON CONFLICT (id) DO UPDATE SET group_concurrency = excluded.group_concurrency, \
max_in_flight = excluded.max_in_flight, rate_capacity = excluded.rate_capacity, \
rate_refill = excluded.rate_refill, rate_interval_ms = excluded.rate_interval_ms, \
rate_per_group = excluded.rate_per_group";
/// The messages in flight at `?1`, counted up to `?2` (the cap: a range
/// of `idx_messages_in_flight`, which holds only delivered messages).
pub const IN_FLIGHT: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM messages INDEXED BY idx_messages_in_flight \
WHERE receipt_handle IS NOT NULL AND visible_at > ?1 LIMIT ?2)";
/// The oldest `?2` messages of group `?1` (the ones that may be in flight).
pub const HEADS: &str = "SELECT id, visible_at, attempt, max_attempts, expires_at FROM messages \
INDEXED BY idx_messages_group WHERE group_key IS NOT NULL AND group_key = ?1 ORDER BY id LIMIT ?2";
/// A rate bucket's state.
pub const BUCKET: &str = "SELECT tokens, since FROM rate_buckets WHERE bucket = ?1";
/// Writes a rate bucket's state.
pub const SET_BUCKET: &str = "INSERT INTO rate_buckets (bucket, tokens, since) VALUES (?1, ?2, ?3) \
ON CONFLICT (bucket) DO UPDATE SET tokens = excluded.tokens, since = excluded.since";
/// The earliest start of an interval among the buckets left empty within
/// the last interval (`?1` is now minus the interval).
pub const EMPTY_SINCE: &str = "SELECT MIN(since) FROM rate_buckets INDEXED BY idx_rate_buckets_empty \
WHERE tokens = 0 AND since > ?1";
/// Deletes up to `?2` buckets whose interval started at or before `?1`
/// (by then every bucket is full again, as a bucket without a row is).
pub const SWEEP_BUCKETS: &str = "DELETE FROM rate_buckets WHERE bucket IN (SELECT bucket FROM rate_buckets \
INDEXED BY idx_rate_buckets_since WHERE since <= ?1 LIMIT ?2)";
/// Who holds unique key `?1`, and until when (`NULL`: while it is live).
pub const UNIQUE_HOLDER: &str = "SELECT id, until FROM unique_keys WHERE key = ?1";
/// Unique key `?1` is taken by message `?2` until `?3`.
pub const TAKE_UNIQUE: &str = "INSERT INTO unique_keys (key, id, until) VALUES (?1, ?2, ?3) \
ON CONFLICT (key) DO UPDATE SET id = excluded.id, until = excluded.until";
/// Deletes up to `?2` unique keys whose time ran out at `?1`.
pub const SWEEP_UNIQUE_UNTIL: &str = "DELETE FROM unique_keys WHERE key IN (SELECT key FROM unique_keys \
INDEXED BY idx_unique_until WHERE until IS NOT NULL AND until <= ?1 LIMIT ?2)";
/// Deletes up to `?1` unique keys held while their message is live whose
/// message is gone.
pub const SWEEP_UNIQUE_GONE: &str = "DELETE FROM unique_keys WHERE key IN (SELECT u.key FROM unique_keys AS u \
INDEXED BY idx_unique_live LEFT JOIN messages AS m ON m.id = u.id WHERE u.until IS NULL AND m.id IS NULL LIMIT ?1)";
/// Stores the result of message `?1` (replacing one stored before).
pub const STORE_RESULT: &str = "INSERT OR REPLACE INTO results (id, payload_type, payload_data, completed_at, \
expires_at) VALUES (?1, ?2, ?3, ?4, ?5)";
/// The result of message `?1`, unless its time ran out at `?2`.
pub const RESULT: &str = "SELECT payload_type, payload_data, completed_at, expires_at FROM results \
WHERE id = ?1 AND expires_at > ?2";
/// Deletes the result of message `?1`; when it would have gone.
pub const DELETE_RESULT: &str = "DELETE FROM results WHERE id = ?1 RETURNING expires_at";
/// Deletes up to `?2` results whose time ran out at `?1`.
pub const SWEEP_RESULTS: &str = "DELETE FROM results WHERE id IN (SELECT id FROM results \
INDEXED BY idx_results_expiry WHERE expires_at <= ?1 LIMIT ?2)";

/// `localqueue.v4`: puts back up to `?2` claimed messages whose delivery
/// lapsed by `?1` (a claimed message keeps its ready time negated, `-1 -
/// ready_at`, which takes it out of `idx_messages_waiting`; putting it back
/// restores it, so it is claimed again in its old place of the order).
pub const PUT_BACK: &str = "UPDATE messages SET ready_at = -1 - ready_at WHERE id IN (SELECT id FROM messages \
INDEXED BY idx_messages_claimed WHERE ready_at < 0 AND visible_at <= ?1 ORDER BY visible_at LIMIT ?2) \
AND ready_at < 0";
/// `localqueue.v4`'s plain claim, first of its two statements: the first
/// `?3` waiting messages without a group in claim order (priority `?1` or
/// more, due at `?2`), read from `idx_messages_waiting`, which holds only
/// messages not claimed, so the walk never passes over messages in flight.
/// It reads nothing while the queue has a group, a cap or a rate, or while
/// a delivery has lapsed (one seek of `idx_messages_claimed`: the claim then
/// puts those back with [`PUT_BACK`] and walks the round). The candidates
/// that are fit for delivery (not expired, attempts left) are then claimed
/// with [`TAKE_V4`] or [`TAKE_IDS_V4`]; the others are left as they are,
/// for the walk to move to the dead letters.
pub const PLAIN_PICK_V4: &str = "SELECT id, payload_type, payload_data, attempt, priority, max_attempts, expires_at \
FROM messages INDEXED BY idx_messages_waiting \
WHERE group_key IS NULL AND ready_at >= 0 AND priority >= ?1 AND visible_at <= ?2 \
AND NOT EXISTS (SELECT 1 FROM message_groups WHERE group_key > '') \
AND NOT EXISTS (SELECT 1 FROM queue_limits WHERE max_in_flight IS NOT NULL OR rate_capacity IS NOT NULL) \
AND NOT EXISTS (SELECT 1 FROM messages INDEXED BY idx_messages_claimed WHERE ready_at < 0 AND visible_at <= ?2) \
ORDER BY priority DESC, ready_at, id LIMIT ?3";
/// `localqueue.v4`'s claim of waiting message `?3` for one delivery (the
/// plain claim's), without returning it: its ready time negated, which
/// moves it from `idx_messages_waiting` to `idx_messages_claimed`.
pub const TAKE_V4: &str = "UPDATE messages SET visible_at = ?1, attempt = attempt + 1, receipt_handle = ?2, \
ready_at = -1 - ready_at WHERE id = ?3";
/// [`TAKE_V4`] for the waiting messages of the JSON array of ids `?3`.
/// `OR FAIL`: nothing it sets can break a constraint (the `NOT NULL`
/// columns get values, no `CHECK` and no unique index covers a column it
/// sets), and a statement that writes several rows and cannot abort
/// halfway spares the engine a copy of every page it touches (turso's
/// statement journal); an engine error rolls back the whole transaction.
pub const TAKE_IDS_V4: &str = "UPDATE OR FAIL messages SET visible_at = ?1, attempt = attempt + 1, receipt_handle = ?2, \
ready_at = -1 - ready_at WHERE id IN (SELECT value FROM json_each(?3))";
/// [`TAKE_V4`] for a message the walk picked, which may be claimed already
/// (a group's head whose delivery lapsed): a negated ready time is kept.
/// With `CASE` rather than `min()`: turso keeps the statement journal for
/// any statement that calls a function, whatever its `OR`.
pub const RETAKE_V4: &str = "UPDATE messages SET visible_at = ?1, attempt = attempt + 1, receipt_handle = ?2, \
ready_at = CASE WHEN ready_at < 0 THEN ready_at ELSE -1 - ready_at END WHERE id = ?3";
/// [`RETAKE_V4`] for the messages of the JSON array of ids `?3`, `OR FAIL`
/// as [`TAKE_IDS_V4`].
pub const RETAKE_IDS_V4: &str = "UPDATE OR FAIL messages SET visible_at = ?1, attempt = attempt + 1, receipt_handle = ?2, \
ready_at = CASE WHEN ready_at < 0 THEN ready_at ELSE -1 - ready_at END WHERE id IN (SELECT value FROM json_each(?3))";
/// `localqueue.v4`: [`DUE`] over `idx_messages_waiting`.
pub const DUE_V4: &str = "SELECT id, attempt, max_attempts, expires_at FROM messages INDEXED BY idx_messages_waiting \
WHERE group_key IS NULL AND ready_at >= 0 AND priority >= ?1 AND visible_at <= ?2 \
ORDER BY priority DESC, ready_at, id LIMIT ?3";
/// `localqueue.v4`: what the deliveries of the walk's picks (the JSON
/// array of ids `?1`) carry, read before [`RETAKE_V4`] or
/// [`RETAKE_IDS_V4`] claims them.
pub const PICKED_V4: &str = "SELECT id, payload_type, payload_data, attempt, priority, group_key, max_attempts \
FROM messages WHERE id IN (SELECT value FROM json_each(?1))";
/// `localqueue.v4`: [`NACK`], the message put back at once.
pub const NACK_V4: &str = "UPDATE messages SET visible_at = ?3, ready_at = max(ready_at, -1 - ready_at) \
WHERE id = ?1 AND receipt_handle = ?2";
/// `localqueue.v4`: [`IN_FLIGHT`] over `idx_messages_claimed`.
pub const IN_FLIGHT_V4: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM messages INDEXED BY idx_messages_claimed \
WHERE ready_at < 0 AND visible_at > ?1 LIMIT ?2)";
/// `localqueue.v4`: the first deadline of a claimed message, the first
/// due time of a waiting message of a group, and the priority and due time
/// of the first waiting message without a group (the highest priority's),
/// each the first entry of its index.
pub const NEXT_DUE: &str = "SELECT (SELECT visible_at FROM messages INDEXED BY idx_messages_claimed \
WHERE ready_at < 0 ORDER BY visible_at LIMIT 1), (SELECT visible_at FROM messages INDEXED BY idx_messages_group_due \
WHERE group_key IS NOT NULL AND ready_at >= 0 ORDER BY visible_at LIMIT 1), \
(SELECT priority FROM messages INDEXED BY idx_messages_waiting WHERE group_key IS NULL AND ready_at >= 0 \
ORDER BY priority DESC, ready_at, id LIMIT 1), \
(SELECT visible_at FROM messages INDEXED BY idx_messages_waiting WHERE group_key IS NULL AND ready_at >= 0 \
ORDER BY priority DESC, ready_at, id LIMIT 1)";
/// `localqueue.v4`: the priority and due time of the first waiting
/// message without a group below priority `?1`.
pub const NEXT_DUE_BELOW: &str = "SELECT priority, visible_at FROM messages INDEXED BY idx_messages_waiting \
WHERE group_key IS NULL AND ready_at >= 0 AND priority < ?1 ORDER BY priority DESC, ready_at, id LIMIT 1";
/// `localqueue.v4`: the earliest due time of the waiting messages without
/// a group below priority `?1`, by reading them all (after
/// [`NEXT_DUE_STEPS`] priorities).
pub const NEXT_DUE_REST: &str = "SELECT MIN(visible_at) FROM messages INDEXED BY idx_messages_waiting \
WHERE group_key IS NULL AND ready_at >= 0 AND priority < ?1";
/// [`STATS_V2`] on a `localqueue.v4` file, which has no index by due
/// time: the four counts of the messages in one pass over the table.
pub const STATS_V4: &str = "SELECT COUNT(CASE WHEN visible_at <= ?1 THEN 1 END), \
MIN(CASE WHEN visible_at <= ?1 THEN enqueued_at END), \
COUNT(CASE WHEN visible_at > ?1 AND receipt_handle IS NOT NULL THEN 1 END), \
COUNT(CASE WHEN visible_at > ?1 AND receipt_handle IS NULL THEN 1 END), \
(SELECT COUNT(*) FROM dead_letters), (SELECT COUNT(*) FROM message_groups WHERE group_key <> ''), \
(SELECT COUNT(*) FROM (SELECT DISTINCT group_key FROM messages \
WHERE visible_at > ?1 AND receipt_handle IS NOT NULL AND group_key IS NOT NULL)) FROM messages";

/// How many priorities of waiting messages [`NEXT_DUE_BELOW`] steps
/// through, one seek each, before [`NEXT_DUE_REST`] reads the rest.
pub const NEXT_DUE_STEPS: usize = 16;
/// The most participants of the round one claim looks at (every row of
/// a group's window beyond the first counting as one more), and the most
/// messages it moves to the dead letters: what one claim may cost while it
/// holds the write lock, whatever guests sent. What is left is for the next
/// claim.
pub const CLAIM_WORK: usize = 1000;

/// The most expired messages one transaction of `sweep-expired` moves.
pub const SWEEP_BATCH: i64 = 1000;

/// A queue: `<data-dir>/queue/<name>/localqueue.sqlite`, in
/// `localqueue.v1`, `localqueue.v2`, `localqueue.v3` or `localqueue.v4`.
#[derive(Debug, Clone)]
pub struct QueueStore {
    pub(crate) store: Store,
    pub(crate) name: String,
    /// Whether the host makes new queues as `localqueue.v1`.
    new_v1: bool,
}

/// What [`QueueStore::migrate`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Migrated {
    /// The file was of format `from` (`localqueue.v1` or `localqueue.v2`)
    /// and is now `localqueue.v3`.
    Upgraded {
        /// The format the file had.
        from: &'static str,
    },
    /// The file was already `localqueue.v3`; nothing changed.
    AlreadyCurrent,
}

/// The file of queue `name` under `data_dir`.
pub fn queue_path(data_dir: &Path, name: &str) -> PathBuf {
    data_dir.join("queue").join(name).join("localqueue.sqlite")
}

/// A receipt as the store's columns hold it: the id, and the claim's
/// UUID in its hyphenated lower-case spelling.
fn receipt_columns(receipt: &Receipt) -> (i64, String) {
    (receipt.id as i64, receipt.claim.hyphenated().to_string())
}

/// Runs `sql` (ACK or NACK) for one parsed receipt and tells what it found.
async fn settle_on(
    conn: &Connection,
    sql: &str,
    id: i64,
    uuid: &str,
    now: i64,
) -> Result<Settled, Failure> {
    if sql == ACK_V2 {
        if exec(conn, ACK_UNGROUPED, (id, uuid)).await? == 1 {
            return Ok(Settled::Done);
        }
        let mut rows = query(conn, sql, (id, uuid)).await?;
        let mut deleted = None;
        while let Some(row) = rows.next().await? {
            deleted = Some(text_or_null(&row, 0)?);
        }
        drop(rows);
        if let Some(group) = deleted {
            leave_on(conn, group.as_deref()).await?;
            return Ok(Settled::Done);
        }
    } else {
        let changed = if sql == NACK || sql == NACK_V4 {
            exec(conn, sql, (id, uuid, now)).await?
        } else {
            exec(conn, sql, (id, uuid)).await?
        };
        if changed == 1 {
            return Ok(Settled::Done);
        }
    }
    let mut rows = query(conn, EXISTS, (id,)).await?;
    let mut exists = false;
    while rows.next().await?.is_some() {
        exists = true;
    }
    Ok(if exists {
        Settled::Stale
    } else {
        Settled::Gone
    })
}

/// `[[id, "uuid"], …]` for [`ACK_BATCH`] (ids are numbers, UUIDs hex and
/// dashes: nothing to escape).
fn serde_json_array(pairs: &[(i64, &str)]) -> String {
    let items: Vec<String> = pairs
        .iter()
        .map(|(id, uuid)| format!("[{id},\"{uuid}\"]"))
        .collect();
    format!("[{}]", items.join(","))
}

/// `[id, …]`, a JSON array of ids, for `json_each`.
fn json_ids<T: std::fmt::Display>(ids: impl IntoIterator<Item = T>) -> String {
    let items: Vec<String> = ids.into_iter().map(|id| id.to_string()).collect();
    format!("[{}]", items.join(","))
}

/// The error for a row that breaks the format (a wrong type where the
/// format says otherwise): `internal`, naming the store and the row.
fn corrupt(path: &Path, id: i64, column: &str, found: &Value) -> AlkError {
    AlkError::Internal(format!(
        "{}: message {id} has {found:?} in {column}, which the format does not allow; the store is corrupt",
        path.display()
    ))
}

fn int_or_null(row: &turso::Row, i: usize) -> Result<Option<i64>, Failure> {
    Ok(match row.get_value(i)? {
        Value::Integer(n) => Some(n),
        _ => None,
    })
}

fn count(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

/// The payload of columns `kind` and `data` of a row of message `id`.
fn payload_at(
    row: &turso::Row,
    kind: usize,
    data: usize,
    path: &Path,
    id: i64,
) -> Result<Payload, Failure> {
    let text = match row.get_value(data)? {
        Value::Text(t) => t,
        other => return Err(Failure::Alk(corrupt(path, id, "payload_data", &other))),
    };
    match row.get_value(kind)? {
        Value::Text(k) if k == "json" => Ok(Payload::Json(text)),
        Value::Text(k) if k == "text" => Ok(Payload::Text(text)),
        other => Err(Failure::Alk(corrupt(path, id, "payload_type", &other))),
    }
}

/// A [`JobInfo`] from a row of [`JOB`], [`JOB_V1`], [`DEAD_JOB`] or
/// [`DEAD_PAGE`] (column 10: delivered, or died at).
fn job_at(
    row: &turso::Row,
    id: i64,
    dead: bool,
    now: i64,
    path: &Path,
) -> Result<JobInfo, Failure> {
    let visible_at = row.get::<i64>(7)?;
    let (state, died_at) = if dead {
        (JobState::Dead, Some(row.get::<i64>(10)?))
    } else {
        (
            JobState::of(row.get::<i64>(10)? != 0, visible_at, now),
            None,
        )
    };
    Ok(JobInfo {
        id: id as u64,
        payload: payload_at(row, 0, 1, path, id)?,
        state,
        attempt: count(row.get::<i64>(2)?),
        max_attempts: int_or_null(row, 3)?.map(count),
        priority: i32::try_from(row.get::<i64>(4)?).unwrap_or(0),
        group: text_or_null(row, 5)?,
        enqueued_at: row.get::<i64>(6)?,
        due_at: visible_at,
        expires_at: int_or_null(row, 8)?,
        last_error: text_or_null(row, 9)?,
        died_at,
    })
}

/// Group `group` leaves the round if it has no message left.
async fn leave_on(conn: &Connection, group: Option<&str>) -> Result<(), Failure> {
    if let Some(g) = group {
        exec(conn, LEAVE, (g,)).await?;
    }
    Ok(())
}

/// The last place in the round.
async fn last_served(conn: &Connection) -> Result<i64, Failure> {
    let mut rows = query(conn, LAST_SERVED, ()).await?;
    let mut last = 0;
    while let Some(row) = rows.next().await? {
        last = row.get::<i64>(0)?;
    }
    Ok(last)
}

/// Group `group` joins the round at its back (or raises its priority).
async fn join_on(conn: &Connection, group: &str, priority: i64) -> Result<(), Failure> {
    let last = last_served(conn).await?;
    exec(conn, JOIN, (group, priority, last)).await?;
    Ok(())
}

/// Moves message `id` to the dead letters with `error`.
async fn bury_on(conn: &Connection, id: i64, error: &str, now: i64) -> Result<(), Failure> {
    exec(conn, BURY, (id, error, now)).await?;
    let mut rows = query(conn, DELETE_V2, (id,)).await?;
    let mut group = None;
    while let Some(row) = rows.next().await? {
        group = text_or_null(&row, 0)?;
    }
    drop(rows);
    leave_on(conn, group.as_deref()).await
}

/// Why a due message goes to the dead letters instead of a delivery.
fn unfit(
    attempt: i64,
    max_attempts: Option<i64>,
    expires_at: Option<i64>,
    now: i64,
) -> Option<String> {
    if expires_at.is_some_and(|at| at <= now) {
        Some(EXPIRED_ERROR.to_string())
    } else if max_attempts.is_some_and(|max| attempt >= max) {
        Some(lapsed_error(count(attempt)))
    } else {
        None
    }
}

/// What a claim obeys per group beyond one message in flight at a time
/// (`localqueue.v3`): more messages of a group in flight, and a rate
/// bucket per group. Buckets are read when first needed and written once,
/// at the end of the claim, with what it took.
pub(crate) struct Grouped {
    /// Messages of one group in flight at once.
    concurrency: i64,
    /// The rate of each group's bucket, when the rate applies per group.
    rate: Option<RateLimit>,
    /// Per bucket read: its state at the claim's time and the tokens taken.
    buckets: HashMap<String, (Bucket, i64)>,
}

impl Grouped {
    /// One message of a group at a time, no rate per group (v2).
    pub(crate) fn plain() -> Grouped {
        Grouped::of(&QueueLimits::default())
    }

    /// What `limits` say per group.
    fn of(limits: &QueueLimits) -> Grouped {
        Grouped {
            concurrency: i64::from(limits.group_concurrency.max(1)),
            rate: limits.rate.filter(|_| limits.rate_per_group),
            buckets: HashMap::new(),
        }
    }

    /// Tokens bucket `key` has left for this claim (no rate: no bound).
    async fn room(&mut self, conn: &Connection, key: &str, now: i64) -> Result<i64, Failure> {
        let Some(rate) = self.rate else {
            return Ok(i64::MAX);
        };
        if !self.buckets.contains_key(key) {
            let b = bucket_on(conn, key, &rate, now).await?;
            self.buckets.insert(key.to_string(), (b, 0));
        }
        let (b, taken) = self.buckets[key];
        Ok(b.tokens - taken)
    }

    /// One token of bucket `key` was used (no rate: nothing).
    fn take(&mut self, key: &str) {
        if let Some((_, taken)) = self.buckets.get_mut(key) {
            *taken += 1;
        }
    }

    /// Writes every bucket tokens were taken from.
    async fn write(&self, conn: &Connection) -> Result<(), Failure> {
        for (key, (b, taken)) in &self.buckets {
            if *taken > 0 {
                exec(conn, SET_BUCKET, (key.as_str(), b.tokens - taken, b.since)).await?;
            }
        }
        Ok(())
    }
}

/// Bucket `key` of `rate` as of `now` (a bucket without a row is full).
async fn bucket_on(
    conn: &Connection,
    key: &str,
    rate: &RateLimit,
    now: i64,
) -> Result<Bucket, Failure> {
    let mut rows = query(conn, BUCKET, (key,)).await?;
    let mut found = None;
    while let Some(row) = rows.next().await? {
        found = Some(Bucket {
            tokens: row.get::<i64>(0)?,
            since: row.get::<i64>(1)?,
        });
    }
    Ok(found
        .unwrap_or_else(|| Bucket::full(rate, now))
        .at(rate, now))
}

/// The queue's limits (`localqueue.v3`; no row: the defaults).
async fn limits_on(conn: &Connection, path: &Path) -> Result<QueueLimits, Failure> {
    let mut rows = query(conn, LIMITS, ()).await?;
    let mut limits = QueueLimits::default();
    while let Some(row) = rows.next().await? {
        let bad = |what: &str| {
            Failure::Alk(AlkError::Internal(format!(
                "{}: the queue's limits hold an invalid {what}; the store is corrupt",
                path.display()
            )))
        };
        let fit = |i: usize, what: &str| -> Result<Option<u32>, Failure> {
            int_or_null(&row, i)?
                .map(|n| u32::try_from(n).map_err(|_| bad(what)))
                .transpose()
        };
        limits.group_concurrency =
            fit(0, "group_concurrency")?.ok_or_else(|| bad("group_concurrency"))?;
        limits.max_in_flight = fit(1, "max_in_flight")?;
        limits.rate = match (
            fit(2, "rate_capacity")?,
            fit(3, "rate_refill")?,
            int_or_null(&row, 4)?,
        ) {
            (Some(capacity), Some(refill), Some(interval)) => Some(RateLimit {
                capacity,
                refill,
                interval_ms: u64::try_from(interval).map_err(|_| bad("rate_interval_ms"))?,
            }),
            (None, None, None) => None,
            _ => return Err(bad("rate")),
        };
        limits.rate_per_group = row.get::<i64>(5)? != 0;
        if limits.check().is_err() {
            return Err(bad("combination of limits"));
        }
    }
    Ok(limits)
}

/// What one claim is: its deadline, its time, its priority floor and the
/// UUID its receipts share.
#[derive(Clone, Copy)]
struct Claim<'a> {
    visible_until: i64,
    now: i64,
    floor: i64,
    uuid: &'a str,
    /// The file is `localqueue.v4` (its own claim statements).
    v4: bool,
}

/// When the next message of a `localqueue.v4` file is due (see
/// [`QueueEngine::next_visible`]), which has no index by due time: the
/// earliest of the first claimed message's deadline, the first waiting
/// message of a group's due time ([`NEXT_DUE`]), and the due times of the
/// first waiting message of each priority without a group — the first of a
/// priority is due first, as a waiting message that is not due yet has its
/// due time as its ready time, and one whose ready time is earlier is due.
/// Priorities are stepped through one seek each ([`NEXT_DUE_BELOW`]) until
/// a due message is found or [`NEXT_DUE_STEPS`] were seen; the rest are
/// read in one statement ([`NEXT_DUE_REST`]).
async fn next_due_on(conn: &Connection, now: i64) -> Result<Option<i64>, Failure> {
    let earliest = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let mut found = None;
    let mut first = None;
    let mut rows = query(conn, NEXT_DUE, ()).await?;
    while let Some(row) = rows.next().await? {
        found = earliest(int_or_null(&row, 0)?, int_or_null(&row, 1)?);
        first = int_or_null(&row, 2)?.zip(int_or_null(&row, 3)?);
    }
    drop(rows);
    let mut steps = 0;
    while let Some((priority, due)) = first {
        found = earliest(found, Some(due));
        if found.is_some_and(|at| at <= now) {
            return Ok(found);
        }
        if steps == NEXT_DUE_STEPS {
            let mut rows = query(conn, NEXT_DUE_REST, (priority,)).await?;
            while let Some(row) = rows.next().await? {
                found = earliest(found, int_or_null(&row, 0)?);
            }
            return Ok(found);
        }
        steps += 1;
        first = None;
        let mut rows = query(conn, NEXT_DUE_BELOW, (priority,)).await?;
        while let Some(row) = rows.next().await? {
            first = Some((row.get::<i64>(0)?, row.get::<i64>(1)?));
        }
    }
    Ok(found)
}

/// A `localqueue.v2`/`v3`/`v4` claim, inside its transaction: the plain
/// claim first ([`CLAIM_PLAIN`], one statement; on v4 [`plain_claim_v4`],
/// a read and an update), and the walk of the round ([`claim_v3_on`],
/// [`claim_v2_on`]) only for what it could not take: a queue with groups or
/// limits, a candidate to move to the dead letters, or fewer due messages
/// than asked for. Both take candidates in the same order, so the messages
/// claimed are those the walk alone would claim.
async fn claim_jobs_on(
    conn: &Connection,
    path: &Path,
    v3: bool,
    claim: &Claim<'_>,
    max: u32,
) -> Result<Vec<Delivery>, Failure> {
    let mut out = if claim.v4 {
        plain_claim_v4(conn, path, claim, max).await?
    } else {
        plain_claim(conn, path, v3, claim, max).await?
    };
    if out.len() < max as usize {
        if claim.v4 && out.is_empty() {
            // The plain claim takes nothing while a delivery has lapsed:
            // those go back to the waiting messages first, so the walk
            // claims them in their place of the order, as on v2 and v3.
            // (When it took some, none had lapsed.)
            exec(conn, PUT_BACK, (claim.now, CLAIM_WORK as i64)).await?;
        }
        let left = max - out.len() as u32;
        out.extend(if v3 {
            claim_v3_on(conn, path, claim, left).await?
        } else {
            claim_v2_on(conn, path, claim, left, &mut Grouped::plain()).await?
        });
    }
    Ok(out)
}

/// `localqueue.v4`'s plain claim: the candidates read in claim order
/// ([`PLAIN_PICK_V4`]), then those fit for delivery claimed ([`take_v4`]),
/// statements that return nothing. A candidate that is not fit (expired,
/// attempts used up) is left as it is, for the walk to move to the dead
/// letters.
async fn plain_claim_v4(
    conn: &Connection,
    path: &Path,
    claim: &Claim<'_>,
    max: u32,
) -> Result<Vec<Delivery>, Failure> {
    let mut rows = query(
        conn,
        PLAIN_PICK_V4,
        (claim.floor, claim.now, i64::from(max)),
    )
    .await?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().await? {
        let id = row.get::<i64>(0)?;
        let attempt = row.get::<i64>(3)?;
        let max_attempts = int_or_null(&row, 5)?;
        let expires_at = int_or_null(&row, 6)?;
        if unfit(attempt, max_attempts, expires_at, claim.now).is_some() {
            continue;
        }
        out.push(Delivery {
            id: id as u64,
            payload: payload_at(&row, 1, 2, path, id)?,
            receipt: format!("{id}:{}", claim.uuid),
            attempt: count(attempt.saturating_add(1)),
            priority: i32::try_from(row.get::<i64>(4)?).unwrap_or(0),
            group: None,
            max_attempts: max_attempts.map(count),
        });
    }
    drop(rows);
    let ids: Vec<i64> = out.iter().map(|d| d.id as i64).collect();
    take_v4(conn, path, claim, &ids, false).await?;
    Ok(out)
}

/// Claims the messages `ids` read under this transaction's write lock
/// (`localqueue.v4`): waiting messages with [`TAKE_V4`] or [`TAKE_IDS_V4`],
/// the walk's picks (`picked`) with [`RETAKE_V4`] or [`RETAKE_IDS_V4`].
async fn take_v4(
    conn: &Connection,
    path: &Path,
    claim: &Claim<'_>,
    ids: &[i64],
    picked: bool,
) -> Result<(), Failure> {
    let (one_sql, many_sql) = if picked {
        (RETAKE_V4, RETAKE_IDS_V4)
    } else {
        (TAKE_V4, TAKE_IDS_V4)
    };
    let taken = match ids {
        [] => 0,
        [one] => exec(conn, one_sql, (claim.visible_until, claim.uuid, *one)).await?,
        many => {
            let json = json_ids(many);
            exec(
                conn,
                many_sql,
                (claim.visible_until, claim.uuid, json.as_str()),
            )
            .await?
        }
    };
    // Nothing else can have changed them since they were read.
    if taken != ids.len() as u64 {
        return Err(Failure::Alk(AlkError::Internal(format!(
            "{}: a claim took {taken} of the {} messages it read",
            path.display(),
            ids.len()
        ))));
    }
    Ok(())
}

/// The plain claim of a `localqueue.v2`/`v3` file ([`CLAIM_PLAIN`],
/// [`CLAIM_PLAIN_V3`]), one statement.
async fn plain_claim(
    conn: &Connection,
    path: &Path,
    v3: bool,
    claim: &Claim<'_>,
    max: u32,
) -> Result<Vec<Delivery>, Failure> {
    let sql = if v3 { CLAIM_PLAIN_V3 } else { CLAIM_PLAIN };
    let mut rows = query(
        conn,
        sql,
        (
            claim.visible_until,
            claim.uuid,
            claim.floor,
            claim.now,
            i64::from(max),
        ),
    )
    .await?;
    let mut out = Vec::new();
    // Drain: a live RETURNING statement makes the next write fail.
    while let Some(row) = rows.next().await? {
        let id = row.get::<i64>(0)?;
        let priority = row.get::<i64>(4)?;
        out.push((
            (std::cmp::Reverse(priority), row.get::<i64>(5)?, id),
            Delivery {
                id: id as u64,
                payload: payload_at(&row, 1, 2, path, id)?,
                receipt: format!("{id}:{}", claim.uuid),
                attempt: count(row.get::<i64>(3)?),
                priority: i32::try_from(priority).unwrap_or(0),
                group: None,
                max_attempts: int_or_null(&row, 6)?.map(count),
            },
        ));
    }
    drop(rows);
    // In claim order (the statement returns rows in any order).
    out.sort_by_key(|(order, _)| *order);
    Ok(out.into_iter().map(|(_, d)| d).collect())
}

/// The `localqueue.v3` claim, inside its transaction: the queue's limits
/// read, the queue's cap and rate applied to how many the claim may take,
/// then the v2 claim with the limits per group, then the queue's bucket
/// written with what was taken.
async fn claim_v3_on(
    conn: &Connection,
    path: &Path,
    claim: &Claim<'_>,
    max: u32,
) -> Result<Vec<Delivery>, Failure> {
    let now = claim.now;
    let limits = limits_on(conn, path).await?;
    let mut max = i64::from(max);
    if let Some(cap) = limits.max_in_flight {
        let sql = if claim.v4 { IN_FLIGHT_V4 } else { IN_FLIGHT };
        let mut rows = query(conn, sql, (now, i64::from(cap))).await?;
        let mut in_flight = 0;
        while let Some(row) = rows.next().await? {
            in_flight = row.get::<i64>(0)?;
        }
        max = max.min(i64::from(cap) - in_flight);
    }
    let mut queue_bucket = None;
    if let Some(rate) = limits.rate.filter(|_| !limits.rate_per_group) {
        let b = bucket_on(conn, UNGROUPED_BUCKET, &rate, now).await?;
        max = max.min(b.tokens);
        queue_bucket = Some(b);
    }
    if max <= 0 {
        return Ok(Vec::new());
    }
    let mut grouped = Grouped::of(&limits);
    let out = claim_v2_on(conn, path, claim, max as u32, &mut grouped).await?;
    grouped.write(conn).await?;
    if let Some(b) = queue_bucket
        && !out.is_empty()
    {
        exec(
            conn,
            SET_BUCKET,
            (UNGROUPED_BUCKET, b.tokens - out.len() as i64, b.since),
        )
        .await?;
    }
    Ok(out)
}

/// The `localqueue.v2` claim, inside its transaction (see
/// [`QueueEngine::claim`] for the rules), with `grouped`'s limits per
/// group ([`Grouped::plain`] on a v2 file).
async fn claim_v2_on(
    conn: &Connection,
    path: &Path,
    claim: &Claim<'_>,
    max: u32,
    grouped: &mut Grouped,
) -> Result<Vec<Delivery>, Failure> {
    let Claim {
        visible_until,
        now,
        floor,
        uuid,
        v4,
    } = *claim;
    let mut out: Vec<Delivery> = Vec::new();
    // Participants (their rows) in the order served; the lane's row too.
    let mut served: Vec<i64> = Vec::new();
    let mut lane_row = None;
    // Whether a group was seen in the round, and whether the whole round
    // was read (then, without a floor, no group was seen means none).
    let mut saw_group = false;
    let mut whole_round = false;
    // A group may have left the round when its head went to the dead
    // letters: then only the table can tell whether any group is left.
    let mut group_left = false;
    // Work of the whole claim: participants looked at, messages buried.
    let mut looked = 0usize;
    let mut burials = 0usize;
    // With a rate per group, a bucket whose interval began after this has
    // had no refill yet: when it holds no token, its group is passed over.
    let refilled = grouped
        .rate
        .map(|r| now.saturating_sub(i64::try_from(r.interval_ms).unwrap_or(i64::MAX).max(1)));
    loop {
        let mut left = max as usize - out.len();
        let mut picks: Vec<i64> = Vec::new();
        let mut buried = false;
        // The place (served, id) the walk has reached; places are >= 0.
        let mut at = (-1i64, i64::MAX);
        'round: loop {
            let page = (left + 32) as i64;
            let mut round = Vec::new();
            for ties in [true, false] {
                // Nothing ties with the start of the walk.
                if round.len() as i64 >= page || (ties && at.0 == -1) {
                    continue;
                }
                let want = page - round.len() as i64;
                let mut rows = match (ties, refilled) {
                    (true, None) => query(conn, ROUND_TIES, (floor, at.0, want, at.1)).await?,
                    (true, Some(r)) => {
                        query(conn, ROUND_TIES_OPEN, (floor, at.0, want, at.1, r)).await?
                    }
                    (false, None) => query(conn, ROUND, (floor, at.0, want)).await?,
                    (false, Some(r)) => query(conn, ROUND_OPEN, (floor, at.0, want, r)).await?,
                };
                while let Some(row) = rows.next().await? {
                    round.push((
                        row.get::<i64>(0)?,
                        row.get::<String>(1)?,
                        row.get::<i64>(2)?,
                    ));
                }
            }
            let full = round.len() as i64 == page;
            // A walk that passes over empty buckets does not see every group.
            whole_round |= !full && at.0 == -1 && refilled.is_none();
            saw_group |= round.iter().any(|(_, key, _)| !key.is_empty());
            for (gid, key, served_at) in round {
                at = (served_at, gid);
                looked += 1;
                if key.is_empty() {
                    lane_row = Some(gid);
                    // With a rate per group, no more than the lane's
                    // bucket holds (none: the lane is skipped).
                    let limit = (left as i64).min(grouped.room(conn, &key, now).await?);
                    let mut due = Vec::new();
                    if limit > 0 {
                        let sql = if v4 { DUE_V4 } else { DUE };
                        let mut rows = query(conn, sql, (floor, now, limit)).await?;
                        while let Some(row) = rows.next().await? {
                            due.push((
                                row.get::<i64>(0)?,
                                row.get::<i64>(1)?,
                                int_or_null(&row, 2)?,
                                int_or_null(&row, 3)?,
                            ));
                        }
                    }
                    let mut gave = false;
                    for (id, attempt, max_attempts, expires_at) in due {
                        // A candidate takes its slot either way, as in the
                        // reference engine.
                        left -= 1;
                        match unfit(attempt, max_attempts, expires_at, now) {
                            Some(error) => {
                                bury_on(conn, id, &error, now).await?;
                                buried = true;
                                burials += 1;
                            }
                            None => {
                                picks.push(id);
                                grouped.take(&key);
                                gave = true;
                            }
                        }
                    }
                    if gave && !served.contains(&gid) {
                        served.push(gid);
                    }
                } else {
                    // The group's oldest messages up to its concurrency:
                    // those due are claimable in id order, the others
                    // (in flight, not due yet) hold their places.
                    let mut rows = if grouped.concurrency == 1 {
                        query(conn, HEAD, (key.as_str(),)).await?
                    } else {
                        query(conn, HEADS, (key.as_str(), grouped.concurrency)).await?
                    };
                    let mut heads = Vec::new();
                    while let Some(row) = rows.next().await? {
                        heads.push((
                            row.get::<i64>(0)?,
                            row.get::<i64>(1)?,
                            row.get::<i64>(2)?,
                            int_or_null(&row, 3)?,
                            int_or_null(&row, 4)?,
                        ));
                    }
                    drop(rows);
                    // Every row read counts: at a high concurrency one
                    // participant may bring many.
                    looked += heads.len().saturating_sub(1);
                    for (id, visible_at, attempt, max_attempts, expires_at) in heads {
                        if visible_at > now {
                            continue;
                        }
                        if left == 0 {
                            break;
                        }
                        match unfit(attempt, max_attempts, expires_at, now) {
                            Some(error) => {
                                left -= 1;
                                bury_on(conn, id, &error, now).await?;
                                buried = true;
                                burials += 1;
                                group_left = true;
                            }
                            None => {
                                if grouped.room(conn, &key, now).await? <= 0 {
                                    break;
                                }
                                left -= 1;
                                picks.push(id);
                                grouped.take(&key);
                                if !served.contains(&gid) {
                                    served.push(gid);
                                }
                            }
                        }
                    }
                }
                if left == 0 || looked >= CLAIM_WORK || burials >= CLAIM_WORK {
                    break 'round;
                }
            }
            if !full {
                break;
            }
        }
        if !picks.is_empty() {
            let ids = json_ids(&picks);
            // v4 reads the deliveries, then claims them without returning
            // rows; v2 and v3 return them from the claim. The attempt read
            // before the claim is one less.
            let (mut rows, read_before) = if v4 {
                (query(conn, PICKED_V4, (ids.as_str(),)).await?, 1)
            } else {
                let params = (visible_until, uuid, ids.as_str());
                (query(conn, CLAIM_IDS, params).await?, 0)
            };
            let mut claimed = std::collections::HashMap::new();
            while let Some(row) = rows.next().await? {
                let id = row.get::<i64>(0)?;
                claimed.insert(
                    id,
                    Delivery {
                        id: id as u64,
                        payload: payload_at(&row, 1, 2, path, id)?,
                        receipt: format!("{id}:{uuid}"),
                        attempt: count(row.get::<i64>(3)?.saturating_add(read_before)),
                        priority: i32::try_from(row.get::<i64>(4)?).unwrap_or(0),
                        group: text_or_null(&row, 5)?,
                        max_attempts: int_or_null(&row, 6)?.map(count),
                    },
                );
            }
            drop(rows);
            if v4 {
                // Each participant is looked at once per round and its
                // messages picked once: the ids are distinct, so the
                // update changes as many rows as there are picks.
                take_v4(conn, path, claim, &picks, true).await?;
            }
            // In the order picked (the statement returns rows in any order).
            out.extend(picks.iter().filter_map(|id| claimed.remove(id)));
        }
        if !buried || out.len() >= max as usize || looked >= CLAIM_WORK || burials >= CLAIM_WORK {
            break;
        }
    }
    // Every participant served moves to the back of the round, in the
    // order served; the lane only when the queue has groups at all.
    if served.iter().any(|gid| Some(*gid) == lane_row) {
        let any_group = if saw_group && !group_left {
            true
        } else if !saw_group && whole_round && floor == i64::from(i32::MIN) {
            false
        } else {
            let mut rows = query(conn, ANY_GROUP, ()).await?;
            let mut found = false;
            while rows.next().await?.is_some() {
                found = true;
            }
            found
        };
        if !any_group {
            served.retain(|gid| Some(*gid) != lane_row);
        }
    }
    if !served.is_empty() {
        let mut next = last_served(conn).await?;
        for gid in served {
            next += 1;
            exec(conn, SERVE, (next, gid)).await?;
        }
    }
    Ok(out)
}

/// Appends a message with its options (`localqueue.v2`), its group joining
/// the round first; its id.
pub(crate) async fn send_v2_on(
    conn: &Connection,
    payload: &Payload,
    stamp: &Stamp,
    now: i64,
    join: bool,
) -> Result<i64, Failure> {
    if join && let Some(g) = &stamp.group {
        join_on(conn, g, i64::from(stamp.priority)).await?;
    }
    let (kind, data) = payload.parts();
    exec(
        conn,
        SEND_V2,
        (
            kind,
            data,
            now,
            stamp.due_at,
            i64::from(stamp.priority),
            stamp.group.as_deref(),
            stamp.max_attempts.map(i64::from),
            stamp.backoff_base_ms.map(|b| b as i64),
            stamp.expires_at,
        ),
    )
    .await?;
    Ok(conn.last_insert_rowid())
}

/// Builds the error of a job option used on a `localqueue.v1` file;
/// `new_v1`: the host makes new queues as `localqueue.v1`.
pub(crate) fn needs_v2(store: &Store, name: &str, what: &str, new_v1: bool) -> AlkError {
    needs(store, name, FORMAT.marker, what, new_v1)
}

/// Builds the error of a feature of `localqueue.v3` used on a file of
/// format `found` (`localqueue.v1` or `localqueue.v2`); `new_v1`: the host
/// makes new queues as `localqueue.v1`.
pub(crate) fn needs(store: &Store, name: &str, found: &str, what: &str, new_v1: bool) -> AlkError {
    let path = store.path().display();
    let migrate = format!(
        "migrate it to localqueue.v3 with `alk-host migrate queue {name}` (with every process using it stopped)"
    );
    AlkError::InvalidArgument(if new_v1 {
        format!(
            "queue {name} is stored as {found} ({path}), which has no {what}; this host makes new queues \
             as localqueue.v1 (`--new-queues v1`), so a new queue would not take them either: {migrate}, \
             or run the host without `--new-queues v1` to have new queues made as localqueue.v3"
        )
    } else {
        format!(
            "queue {name} is stored as {found} ({path}), which has no {what}; {migrate}, or use a new queue"
        )
    })
}

/// Whether message `id` is still in `messages` (live: waiting, delayed or
/// in flight).
async fn exists_on(conn: &Connection, id: i64) -> Result<bool, Failure> {
    let mut rows = query(conn, EXISTS, (id,)).await?;
    let mut exists = false;
    while rows.next().await?.is_some() {
        exists = true;
    }
    Ok(exists)
}

/// Sends one message with `stamp` (sent at `sent_at`) unless `unique`'s
/// key blocks it at `now`, inside the caller's transaction
/// (`localqueue.v3`): the new message's id, or the holder's.
pub(crate) async fn send_unique_on(
    conn: &Connection,
    payload: &Payload,
    stamp: &Stamp,
    unique: &Unique,
    sent_at: i64,
    now: i64,
) -> Result<Sent, Failure> {
    let mut rows = query(conn, UNIQUE_HOLDER, (unique.key.as_str(),)).await?;
    let mut held = None;
    while let Some(row) = rows.next().await? {
        held = Some((row.get::<i64>(0)?, int_or_null(&row, 1)?));
    }
    drop(rows);
    if let Some((holder, until)) = held {
        // Whether the holder is live matters only for a key held while it is.
        let live = until.is_none() && exists_on(conn, holder).await?;
        if Unique::blocks(until, live, now) {
            return Ok(Sent {
                id: holder as u64,
                duplicate: true,
            });
        }
    }
    let id = send_v2_on(conn, payload, stamp, sent_at, true).await?;
    exec(conn, TAKE_UNIQUE, (unique.key.as_str(), id, unique.until)).await?;
    Ok(Sent {
        id: id as u64,
        duplicate: false,
    })
}

/// Most queue names [`Queues`] remembers; past it, it starts over.
const MAX_CACHED_QUEUES: usize = 1024;

/// The queues of one data directory an engine has used, by name. A
/// [`QueueStore`] only names its file (it holds no database open), so this
/// costs a few bytes per queue and saves repeating the open's directory and
/// marker work for every handle a guest opens, and for every relay.
#[derive(Debug)]
pub(crate) struct Queues {
    data_dir: PathBuf,
    options: StoreOptions,
    known: std::sync::Mutex<std::collections::HashMap<String, QueueStore>>,
}

impl Queues {
    /// The queues under `data_dir`, new files made as `options` says.
    pub(crate) fn new(data_dir: &Path, options: StoreOptions) -> Queues {
        Queues {
            data_dir: data_dir.to_path_buf(),
            options,
            known: Default::default(),
        }
    }

    /// Queue `name` (a checked name, maybe reserved), opened (and created
    /// on first use) unless known. An outbox's backing queue is never made
    /// as `localqueue.v1` (transactional sends need v2 or later): when the
    /// engine makes other new queues as v1, it is made as v4.
    pub(crate) async fn get(&self, name: &str) -> AlkResult<QueueStore> {
        let known = self
            .known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned();
        // A file removed behind the engine's back is opened (made) anew.
        if let Some(q) = known
            && q.path().exists()
        {
            return Ok(q);
        }
        let mut options = self.options;
        if options.new_queues == NewQueues::V1
            && name
                .strip_prefix(alk_store::names::RESERVED_PREFIX)
                .is_some_and(|rest| rest.starts_with("outbox_"))
        {
            options.new_queues = NewQueues::V4;
        }
        let q = QueueStore::open(&self.data_dir, name, options).await?;
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        if known.len() >= MAX_CACHED_QUEUES {
            known.clear();
        }
        known.insert(name.to_string(), q.clone());
        Ok(q)
    }
}

impl QueueStore {
    /// Opens (creating on first use) queue `name` under `data_dir`; the
    /// name is checked by the caller. A new file gets the format
    /// `options.new_queues` says; an existing one keeps its own.
    pub async fn open(
        data_dir: &Path,
        name: &str,
        options: impl Into<StoreOptions>,
    ) -> AlkResult<Self> {
        let options = options.into();
        let format = match options.new_queues {
            NewQueues::V4 => &NEW_V4,
            NewQueues::V3 => &NEW_V3,
            NewQueues::V1 => &NEW_V1,
        };
        let store = open_store(&queue_path(data_dir, name), format, options).await?;
        Ok(QueueStore {
            store,
            name: name.to_string(),
            new_v1: options.new_queues == NewQueues::V1,
        })
    }

    /// Moves queue `name` under `data_dir` from `localqueue.v1`,
    /// `localqueue.v2` or `localqueue.v3` to `localqueue.v4`, in one
    /// transaction (an older file gets every upgrade it lacks in it): ids, attempts, receipts, due times,
    /// groups, dead letters and relay marks are kept. Refused (`busy`)
    /// while any process has the store open; no process can open it while
    /// the migration runs. A file that does not exist is not created.
    pub async fn migrate(
        data_dir: &Path,
        name: &str,
        options: impl Into<StoreOptions>,
    ) -> AlkResult<Migrated> {
        let path = queue_path(data_dir, name);
        if !path.exists() {
            return Err(AlkError::InvalidArgument(format!(
                "there is no queue {name} under {} ({} does not exist)",
                data_dir.display(),
                path.display()
            )));
        }
        let store = Store::unopened(&path, &NEW_V4, options.into());
        let from = store
            .migrate_exclusive(
                &[
                    (&FORMAT, UPGRADE_V1_V4),
                    (&FORMAT_V2, UPGRADE_V2_V4),
                    (&FORMAT_V3, UPGRADE_V4),
                ],
                &FORMAT_V4,
            )
            .await?;
        Ok(match from {
            Some(from) => Migrated::Upgraded { from },
            None => Migrated::AlreadyCurrent,
        })
    }

    /// The queue's file.
    pub fn path(&self) -> &Path {
        self.store.path()
    }

    /// The store (tests).
    #[cfg(test)]
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// Whether the file has the job options of `localqueue.v2`: it is
    /// `localqueue.v2` or `localqueue.v3`.
    pub async fn is_v2(&self) -> AlkResult<bool> {
        Ok(is_v2(self.store.file_format().await?))
    }

    /// Whether the file has everything of `localqueue.v3`: it is
    /// `localqueue.v3` or `localqueue.v4`.
    pub async fn is_v3(&self) -> AlkResult<bool> {
        Ok(is_v3(self.store.file_format().await?))
    }

    /// Whether the file is `localqueue.v4`.
    pub async fn is_v4(&self) -> AlkResult<bool> {
        Ok(is_v4(self.store.file_format().await?))
    }

    /// Refuses (`invalid-argument`, naming the migration) unless the file
    /// is `localqueue.v3`; `what` is what older formats lack.
    pub(crate) async fn require_v3(&self, what: &str) -> AlkResult<()> {
        let format = self.store.file_format().await?;
        if is_v3(format) {
            Ok(())
        } else {
            Err(needs(
                &self.store,
                &self.name,
                format.marker,
                what,
                self.new_v1,
            ))
        }
    }

    /// Refuses (`invalid-argument`, naming the migration) unless the file
    /// is `localqueue.v2`; `what` is what v1 lacks.
    pub(crate) async fn require_v2(&self, what: &str) -> AlkResult<()> {
        if self.is_v2().await? {
            Ok(())
        } else {
            Err(needs_v2(&self.store, &self.name, what, self.new_v1))
        }
    }

    async fn settle(&self, sql: &'static str, receipt: &Receipt, now: i64) -> AlkResult<Settled> {
        let (id, uuid) = receipt_columns(receipt);
        let uuid = uuid.as_str();
        self.store
            .run_immediate_in(|conn: Connection, format| {
                let sql = if sql == ACK && is_v2(format) {
                    ACK_V2
                } else if sql == NACK && is_v4(format) {
                    NACK_V4
                } else {
                    sql
                };
                Box::pin(async move { settle_on(&conn, sql, id, uuid, now).await })
            })
            .await
    }

    /// The current delivery of a receipt, inside a transaction: `Ok` with
    /// (attempt, max attempts, backoff base), or how it settles without.
    async fn delivery_on(
        conn: &Connection,
        id: i64,
        uuid: &str,
        v2: bool,
    ) -> Result<Result<(i64, Option<i64>, Option<i64>), Settled>, Failure> {
        let sql = if v2 { DELIVERY } else { DELIVERY_V1 };
        let mut rows = query(conn, sql, (id,)).await?;
        let mut found = None;
        while let Some(row) = rows.next().await? {
            found = Some((
                text_or_null(&row, 0)?,
                row.get::<i64>(1)?,
                int_or_null(&row, 2)?,
                int_or_null(&row, 3)?,
            ));
        }
        Ok(match found {
            None => Err(Settled::Gone),
            Some((receipt, ..)) if receipt.as_deref() != Some(uuid) => Err(Settled::Stale),
            Some((_, attempt, max, backoff)) => Ok((attempt, max, backoff)),
        })
    }
}

impl QueueStore {
    /// What `sweep-expired` does on a `localqueue.v3` file beyond moving
    /// expired messages: deletes results whose time ran out, unique keys
    /// that no longer hold (their time ran out, or their message is gone),
    /// and rate buckets that are full again (as a bucket without a row
    /// is); at most [`SWEEP_BATCH`] of each per transaction.
    async fn sweep_v3(&self, now: i64) -> AlkResult<()> {
        let path = self.store.path();
        loop {
            let more = self
                .store
                .run_immediate(|conn: Connection| {
                    Box::pin(async move {
                        let mut most = 0;
                        for (sql, params) in [
                            (
                                SWEEP_RESULTS,
                                vec![Value::Integer(now), Value::Integer(SWEEP_BATCH)],
                            ),
                            (
                                SWEEP_UNIQUE_UNTIL,
                                vec![Value::Integer(now), Value::Integer(SWEEP_BATCH)],
                            ),
                            (SWEEP_UNIQUE_GONE, vec![Value::Integer(SWEEP_BATCH)]),
                        ] {
                            most = most.max(exec(&conn, sql, params).await?);
                        }
                        let limits = limits_on(&conn, path).await?;
                        if let Some(rate) = limits.rate {
                            // After this long any bucket is full again.
                            let refills = i64::from(rate.capacity.div_ceil(rate.refill));
                            let full_after = refills.saturating_mul(rate.interval_ms as i64);
                            let before = now.saturating_sub(full_after);
                            most =
                                most.max(exec(&conn, SWEEP_BUCKETS, (before, SWEEP_BATCH)).await?);
                        }
                        Ok(most as i64 >= SWEEP_BATCH)
                    })
                })
                .await?;
            if !more {
                return Ok(());
            }
        }
    }
}

/// Whether a file opened as `format` has the job options of
/// `localqueue.v2` (it is v2 or v3).
fn is_v2(format: &Format) -> bool {
    format.marker == FORMAT_V2.marker || is_v3(format)
}

/// Whether a file opened as `format` has everything of `localqueue.v3`
/// (it is v3 or v4).
fn is_v3(format: &Format) -> bool {
    format.marker == FORMAT_V3.marker || is_v4(format)
}

/// Whether a file opened as `format` is `localqueue.v4`.
fn is_v4(format: &Format) -> bool {
    format.marker == FORMAT_V4.marker
}

#[async_trait]
impl QueueEngine for QueueStore {
    async fn send(&self, payloads: &[Payload], stamp: &Stamp, now: i64) -> AlkResult<Vec<u64>> {
        let v2 = self.is_v2().await?;
        if !v2 && let Some(what) = stamp.beyond_plain(now) {
            return Err(needs_v2(&self.store, &self.name, what, self.new_v1));
        }
        let one = payloads.len() == 1 && stamp.group.is_none();
        // The statements follow the file as the database running them
        // opened it: a v1 file migrated meanwhile gets v2 rows.
        let op =
            |conn: Connection, format: &'static Format| -> crate::retry::OpFuture<'_, Vec<u64>> {
                let v2 = is_v2(format);
                Box::pin(async move {
                    let mut ids = Vec::with_capacity(payloads.len());
                    for (i, p) in payloads.iter().enumerate() {
                        if v2 {
                            // The group joins once per send.
                            ids.push(send_v2_on(&conn, p, stamp, now, i == 0).await? as u64);
                        } else {
                            let (kind, data) = p.parts();
                            exec(&conn, SEND, (kind, data, now)).await?;
                            ids.push(conn.last_insert_rowid() as u64);
                        }
                    }
                    Ok(ids)
                })
            };
        if one {
            self.store.run_write_in(op).await
        } else {
            self.store.run_immediate_in(op).await
        }
    }

    async fn claim(
        &self,
        max: u32,
        visible_at: i64,
        floor: Option<i32>,
        now: i64,
    ) -> AlkResult<Vec<Delivery>> {
        let path = self.store.path();
        if self.is_v2().await? {
            let floor = i64::from(floor.unwrap_or(i32::MIN));
            return self
                .store
                .run_immediate_in(|conn: Connection, format| {
                    let v3 = is_v3(format);
                    let v4 = is_v4(format);
                    Box::pin(async move {
                        let uuid = Receipt::new_claim().hyphenated().to_string();
                        let claim = Claim {
                            visible_until: visible_at,
                            now,
                            floor,
                            uuid: &uuid,
                            v4,
                        };
                        claim_jobs_on(&conn, path, v3, &claim, max).await
                    })
                })
                .await;
        }
        if floor.is_some() {
            return Err(needs_v2(&self.store, &self.name, "priorities", self.new_v1));
        }
        let max = i64::from(max);
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(async move {
                    let uuid = Receipt::new_claim().hyphenated().to_string();
                    let mut rows =
                        query(&conn, CLAIM, (visible_at, uuid.as_str(), now, max)).await?;
                    let mut claimed = Vec::new();
                    // Drain: a live RETURNING statement makes the next write
                    // on this connection fail with Busy.
                    while let Some(row) = rows.next().await? {
                        let id = row.get::<i64>(0)?;
                        let payload = payload_at(&row, 1, 2, path, id)?;
                        let attempt = row.get::<i64>(3)?;
                        let enqueued_at = row.get::<i64>(4)?;
                        claimed.push((
                            enqueued_at,
                            Delivery {
                                id: id as u64,
                                payload,
                                receipt: format!("{id}:{uuid}"),
                                attempt: count(attempt),
                                priority: 0,
                                group: None,
                                max_attempts: None,
                            },
                        ));
                    }
                    // The statement returns rows in no particular order.
                    claimed.sort_by_key(|(at, d)| (*at, d.id));
                    Ok(claimed.into_iter().map(|(_, d)| d).collect())
                })
            })
            .await
    }

    async fn ack(&self, receipt: &Receipt) -> AlkResult<Settled> {
        self.settle(ACK, receipt, 0).await
    }

    async fn ack_batch(&self, receipts: &[Receipt]) -> AlkResult<AckedBatch> {
        let columns: Vec<(i64, String)> = receipts.iter().map(receipt_columns).collect();
        let pairs: Vec<(i64, &str)> = columns
            .iter()
            .map(|(id, uuid)| (*id, uuid.as_str()))
            .collect();
        if pairs.is_empty() {
            return Ok(AckedBatch::default());
        }
        let v2 = self.is_v2().await?;
        let ids_json = json_ids(pairs.iter().map(|(id, _)| id));
        // Receipts of one claim share its UUID: the simpler statement. Any
        // mix: the general one, pairs of id and UUID.
        let shared = pairs
            .iter()
            .all(|(_, u)| *u == pairs[0].1)
            .then_some(pairs[0].1);
        let pairs_json = match shared {
            Some(_) => String::new(),
            None => serde_json_array(&pairs),
        };
        let unique: std::collections::HashSet<i64> = pairs.iter().map(|(id, _)| *id).collect();
        let (pairs_json, ids_json) = (&pairs_json, &ids_json);
        let (deleted, existing) = self
            .store
            .run_immediate(|conn: Connection| {
                let unique = &unique;
                Box::pin(async move {
                    let mut deleted: Vec<(i64, String)> = Vec::new();
                    let mut groups: Vec<String> = Vec::new();
                    let mut rows = match (shared, v2) {
                        (Some(uuid), false) => {
                            query(&conn, ACK_CLAIMED, (uuid, ids_json.as_str())).await?
                        }
                        (Some(uuid), true) => {
                            query(&conn, ACK_CLAIMED_V2, (uuid, ids_json.as_str())).await?
                        }
                        (None, false) => query(&conn, ACK_BATCH, (pairs_json.as_str(),)).await?,
                        (None, true) => query(&conn, ACK_BATCH_V2, (pairs_json.as_str(),)).await?,
                    };
                    while let Some(row) = rows.next().await? {
                        let uuid = match shared {
                            Some(u) => u.to_string(),
                            None => row.get::<String>(1)?,
                        };
                        if v2 {
                            let at = if shared.is_some() { 1 } else { 2 };
                            if let Some(g) = text_or_null(&row, at)?
                                && !groups.contains(&g)
                            {
                                groups.push(g);
                            }
                        }
                        deleted.push((row.get::<i64>(0)?, uuid));
                    }
                    drop(rows);
                    for g in &groups {
                        leave_on(&conn, Some(g)).await?;
                    }
                    // Every message acked: none can be stale, no need to look.
                    let mut existing = std::collections::HashSet::new();
                    if deleted.len() < unique.len() {
                        let mut rows = query(&conn, EXISTING, (ids_json.as_str(),)).await?;
                        while let Some(row) = rows.next().await? {
                            existing.insert(row.get::<i64>(0)?);
                        }
                    }
                    Ok((deleted, existing))
                })
            })
            .await?;
        // The core tells each receipt's outcome from what was deleted and
        // what is still there (`AckedBatch::settle`).
        let mut batch = AckedBatch::default();
        for (id, uuid) in deleted {
            let claim = uuid::Uuid::parse_str(&uuid).map_err(|_| {
                AlkError::Internal(format!(
                    "{}: message {id} was claimed under {uuid:?}, which is not a UUID",
                    self.store.path().display()
                ))
            })?;
            batch.deleted.insert(id as u64, claim);
        }
        batch.present = existing.into_iter().map(|id| id as u64).collect();
        Ok(batch)
    }

    async fn nack(&self, receipt: &Receipt, now: i64) -> AlkResult<Settled> {
        self.settle(NACK, receipt, now).await
    }

    async fn next_visible(&self, now: i64) -> AlkResult<Option<i64>> {
        self.store
            .run_in(|conn: Connection, format| {
                let v4 = is_v4(format);
                Box::pin(async move {
                    if v4 {
                        return next_due_on(&conn, now).await;
                    }
                    let mut rows = query(&conn, NEXT_VISIBLE, ()).await?;
                    let mut at = None;
                    while let Some(row) = rows.next().await? {
                        at = Some(row.get::<i64>(0)?);
                    }
                    Ok(at)
                })
            })
            .await
    }

    async fn purge(&self) -> AlkResult<()> {
        let v2 = self.is_v2().await?;
        let op = |conn: Connection| -> crate::retry::OpFuture<'_, ()> {
            Box::pin(async move {
                exec(&conn, PURGE, ()).await?;
                if v2 {
                    exec(&conn, PURGE_GROUPS, ()).await?;
                }
                Ok(())
            })
        };
        if v2 {
            self.store.run_immediate(op).await
        } else {
            self.store.run_write(op).await
        }
    }

    async fn heartbeat(&self, receipt: &Receipt, deadline: i64, now: i64) -> AlkResult<Beat> {
        let v2 = self.is_v2().await?;
        let (id, uuid) = receipt_columns(receipt);
        let uuid = uuid.as_str();
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(async move {
                    if exec(&conn, HEARTBEAT, (id, uuid, deadline, now)).await? == 1 {
                        return Ok(Beat::Extended);
                    }
                    Ok(match Self::delivery_on(&conn, id, uuid, v2).await? {
                        Ok(_) => Beat::Lapsed,
                        Err(Settled::Stale) => Beat::Stale,
                        Err(_) => Beat::Gone,
                    })
                })
            })
            .await
    }

    async fn retry(
        &self,
        receipt: &Receipt,
        error: &str,
        delay: RetryDelay,
        now: i64,
    ) -> AlkResult<Retried> {
        self.require_v2("retries").await?;
        let v2 = true;
        let (id, uuid) = receipt_columns(receipt);
        let uuid = uuid.as_str();
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(async move {
                    let (attempt, max, backoff) =
                        match Self::delivery_on(&conn, id, uuid, v2).await? {
                            Ok(d) => d,
                            Err(Settled::Stale) => return Ok(Retried::Stale),
                            Err(_) => return Ok(Retried::Gone),
                        };
                    if max.is_some_and(|m| attempt >= m) {
                        bury_on(&conn, id, error, now).await?;
                        return Ok(Retried::Dead);
                    }
                    let due = delay.due_at(backoff.map(|b| b.max(0) as u64), count(attempt), now);
                    exec(&conn, RETRY, (id, due, error)).await?;
                    Ok(Retried::Scheduled(due))
                })
            })
            .await
    }

    async fn fail(&self, receipt: &Receipt, error: &str, now: i64) -> AlkResult<Settled> {
        self.require_v2("dead letters").await?;
        let v2 = true;
        let (id, uuid) = receipt_columns(receipt);
        let uuid = uuid.as_str();
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(async move {
                    match Self::delivery_on(&conn, id, uuid, v2).await? {
                        Ok(_) => {
                            bury_on(&conn, id, error, now).await?;
                            Ok(Settled::Done)
                        }
                        Err(s) => Ok(s),
                    }
                })
            })
            .await
    }

    async fn cancel(&self, id: u64) -> AlkResult<bool> {
        let id = id as i64;
        let v2 = self.is_v2().await?;
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(async move {
                    if !v2 {
                        return Ok(exec(&conn, "DELETE FROM messages WHERE id = ?1", (id,))
                            .await?
                            == 1);
                    }
                    let mut rows = query(&conn, DELETE_V2, (id,)).await?;
                    let mut deleted = None;
                    while let Some(row) = rows.next().await? {
                        deleted = Some(text_or_null(&row, 0)?);
                    }
                    drop(rows);
                    if let Some(group) = deleted {
                        leave_on(&conn, group.as_deref()).await?;
                        return Ok(true);
                    }
                    Ok(exec(&conn, DELETE_DEAD, (id,)).await? == 1)
                })
            })
            .await
    }

    async fn job(&self, id: u64, now: i64) -> AlkResult<Option<JobInfo>> {
        let id = id as i64;
        let v2 = self.is_v2().await?;
        let path = self.store.path();
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, if v2 { JOB } else { JOB_V1 }, (id,)).await?;
                    let mut found = None;
                    while let Some(row) = rows.next().await? {
                        found = Some(job_at(&row, id, false, now, path)?);
                    }
                    drop(rows);
                    if found.is_some() || !v2 {
                        return Ok(found);
                    }
                    let mut rows = query(&conn, DEAD_JOB, (id,)).await?;
                    while let Some(row) = rows.next().await? {
                        found = Some(job_at(&row, id, true, now, path)?);
                    }
                    Ok(found)
                })
            })
            .await
    }

    async fn sweep_expired(&self, now: i64) -> AlkResult<u64> {
        self.require_v2("expiry").await?;
        // In transactions of at most SWEEP_BATCH messages, so other writers
        // get the lock between them.
        let mut moved = 0u64;
        loop {
            let n = self
                .store
                .run_immediate(|conn: Connection| {
                    Box::pin(async move {
                        let mut rows = query(&conn, EXPIRED, (now, SWEEP_BATCH)).await?;
                        let mut ids = Vec::new();
                        while let Some(row) = rows.next().await? {
                            ids.push(row.get::<i64>(0)?);
                        }
                        drop(rows);
                        for id in &ids {
                            bury_on(&conn, *id, EXPIRED_ERROR, now).await?;
                        }
                        Ok(ids.len() as u64)
                    })
                })
                .await?;
            moved += n;
            if (n as i64) < SWEEP_BATCH {
                break;
            }
        }
        if self.is_v3().await? {
            self.sweep_v3(now).await?;
        }
        Ok(moved)
    }

    async fn dead_letters(&self, after: u64, max: u32, now: i64) -> AlkResult<Vec<JobInfo>> {
        let after = after as i64;
        if !self.is_v2().await? {
            return Ok(Vec::new());
        }
        let path = self.store.path();
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, DEAD_PAGE, (after, i64::from(max))).await?;
                    let mut out = Vec::new();
                    while let Some(row) = rows.next().await? {
                        let id = row.get::<i64>(11)?;
                        out.push(job_at(&row, id, true, now, path)?);
                    }
                    Ok(out)
                })
            })
            .await
    }

    async fn jobs(&self, after: u64, max: u32, now: i64) -> AlkResult<Vec<JobInfo>> {
        let after = after as i64;
        let v2 = self.is_v2().await?;
        let path = self.store.path();
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let sql = if v2 { JOBS_PAGE } else { JOBS_PAGE_V1 };
                    let mut rows = query(&conn, sql, (after, i64::from(max))).await?;
                    let mut out = Vec::new();
                    while let Some(row) = rows.next().await? {
                        let id = row.get::<i64>(11)?;
                        out.push(job_at(&row, id, false, now, path)?);
                    }
                    Ok(out)
                })
            })
            .await
    }

    async fn redrive(&self, ids: &[u64], now: i64) -> AlkResult<Vec<Option<u64>>> {
        if !self.is_v2().await? {
            return Ok(vec![None; ids.len()]);
        }
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(async move {
                    let mut out = Vec::with_capacity(ids.len());
                    for id in ids {
                        let id = *id as i64;
                        let mut rows = query(&conn, REDRIVE, (id, now)).await?;
                        let mut back = None;
                        while let Some(row) = rows.next().await? {
                            back = Some((
                                row.get::<i64>(0)?,
                                text_or_null(&row, 1)?,
                                row.get::<i64>(2)?,
                            ));
                        }
                        drop(rows);
                        let Some((new, group, priority)) = back else {
                            out.push(None);
                            continue;
                        };
                        exec(&conn, DELETE_DEAD, (id,)).await?;
                        if let Some(g) = group {
                            join_on(&conn, &g, priority).await?;
                        }
                        out.push(Some(new as u64));
                    }
                    Ok(out)
                })
            })
            .await
    }

    async fn stats(&self, now: i64) -> AlkResult<QueueStats> {
        let path = self.store.path();
        self.store
            .run_in(|conn: Connection, format| {
                let v2 = is_v2(format);
                let v4 = is_v4(format);
                Box::pin(async move {
                    let sql = match (v4, v2) {
                        (true, _) => STATS_V4,
                        (false, true) => STATS_V2,
                        (false, false) => STATS,
                    };
                    let mut rows = query(&conn, sql, (now,)).await?;
                    let mut found = None;
                    while let Some(row) = rows.next().await? {
                        let n = |i: usize| -> Result<u64, Failure> {
                            match row.get_value(i)? {
                                Value::Integer(n) if n >= 0 => Ok(n as u64),
                                other => Err(Failure::Alk(AlkError::Internal(format!(
                                    "{}: a count of the queue's statistics read {other:?}",
                                    path.display()
                                )))),
                            }
                        };
                        let mut stats = QueueStats {
                            waiting: n(0)?,
                            oldest_waiting_enqueued_at: int_or_null(&row, 1)?,
                            in_flight: n(2)?,
                            delayed: n(3)?,
                            ..QueueStats::default()
                        };
                        if v2 {
                            stats.dead = n(4)?;
                            stats.groups = n(5)?;
                            stats.groups_in_flight = n(6)?;
                        }
                        found = Some(stats);
                    }
                    Ok(found.unwrap_or_default())
                })
            })
            .await
    }

    async fn purge_dead(&self) -> AlkResult<u64> {
        if !self.is_v2().await? {
            return Ok(0);
        }
        self.store
            .run_write(|conn: Connection| {
                Box::pin(async move { Ok(exec(&conn, PURGE_DEAD, ()).await?) })
            })
            .await
    }

    async fn send_unique(
        &self,
        payload: &Payload,
        stamp: &Stamp,
        unique: &Unique,
        now: i64,
    ) -> AlkResult<Sent> {
        self.require_v3("unique sends").await?;
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(
                    async move { send_unique_on(&conn, payload, stamp, unique, now, now).await },
                )
            })
            .await
    }

    async fn limits(&self) -> AlkResult<QueueLimits> {
        if !self.is_v3().await? {
            return Ok(QueueLimits::default());
        }
        let path = self.store.path();
        self.store
            .run(|conn: Connection| Box::pin(async move { limits_on(&conn, path).await }))
            .await
    }

    async fn set_limits(&self, limits: &QueueLimits) -> AlkResult<()> {
        self.require_v3("queue limits").await?;
        let rate = limits.rate;
        let params = (
            i64::from(limits.group_concurrency),
            limits.max_in_flight.map(i64::from),
            rate.map(|r| i64::from(r.capacity)),
            rate.map(|r| i64::from(r.refill)),
            rate.map(|r| r.interval_ms as i64),
            i64::from(limits.rate_per_group),
        );
        self.store
            .run_write(|conn: Connection| {
                Box::pin(async move {
                    exec(&conn, SET_LIMITS, params).await?;
                    Ok(())
                })
            })
            .await
    }

    async fn try_take(&self, group: Option<&str>, n: u32, now: i64) -> AlkResult<Taken> {
        self.require_v3("rate limits").await?;
        let (path, name) = (self.store.path(), self.name.as_str());
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(async move {
                    let limits = limits_on(&conn, path).await?;
                    let Some(rate) = limits.rate else {
                        return Err(Failure::Alk(AlkError::InvalidArgument(format!(
                            "queue {name} has no rate to take tokens from; set one with its limits"
                        ))));
                    };
                    check_take(&rate, n).map_err(Failure::Alk)?;
                    let key = match (limits.rate_per_group, group) {
                        (true, Some(g)) => g,
                        _ => UNGROUPED_BUCKET,
                    };
                    let b = bucket_on(&conn, key, &rate, now).await?;
                    let (taken, after) = b.take(&rate, n, now);
                    if let Taken::Granted(_) = taken {
                        exec(&conn, SET_BUCKET, (key, after.tokens, after.since)).await?;
                    }
                    Ok(taken)
                })
            })
            .await
    }

    async fn throttled_until(&self, now: i64) -> AlkResult<Option<i64>> {
        if !self.is_v3().await? {
            return Ok(None);
        }
        let path = self.store.path();
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let limits = limits_on(&conn, path).await?;
                    let Some(rate) = limits.rate else {
                        return Ok(None);
                    };
                    let interval = rate.interval_ms as i64;
                    if !limits.rate_per_group {
                        let b = bucket_on(&conn, UNGROUPED_BUCKET, &rate, now).await?;
                        return Ok((b.tokens <= 0)
                            .then(|| now.saturating_add(b.wait_ms(&rate, 1, now) as i64)));
                    }
                    // An empty bucket (no token stored, no interval ended
                    // since) gets its first token one interval after its
                    // interval started.
                    let mut rows =
                        query(&conn, EMPTY_SINCE, (now.saturating_sub(interval),)).await?;
                    let mut since = None;
                    while let Some(row) = rows.next().await? {
                        since = int_or_null(&row, 0)?;
                    }
                    Ok(since.map(|s| s.saturating_add(interval)))
                })
            })
            .await
    }

    async fn complete(
        &self,
        receipt: &Receipt,
        result: &Payload,
        expires_at: i64,
        now: i64,
    ) -> AlkResult<Settled> {
        self.require_v3("results").await?;
        let (id, uuid) = receipt_columns(receipt);
        let uuid = uuid.as_str();
        let (kind, data) = result.parts();
        self.store
            .run_immediate(|conn: Connection| {
                Box::pin(async move {
                    let settled = settle_on(&conn, ACK_V2, id, uuid, now).await?;
                    if settled == Settled::Done {
                        exec(&conn, STORE_RESULT, (id, kind, data, now, expires_at)).await?;
                    }
                    Ok(settled)
                })
            })
            .await
    }

    async fn result(&self, id: u64, now: i64) -> AlkResult<Option<JobResult>> {
        if !self.is_v3().await? {
            return Ok(None);
        }
        let id = id as i64;
        let path = self.store.path();
        self.store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, RESULT, (id, now)).await?;
                    let mut found = None;
                    while let Some(row) = rows.next().await? {
                        found = Some(JobResult {
                            id: id as u64,
                            payload: payload_at(&row, 0, 1, path, id)?,
                            completed_at: row.get::<i64>(2)?,
                            expires_at: row.get::<i64>(3)?,
                        });
                    }
                    Ok(found)
                })
            })
            .await
    }

    async fn delete_result(&self, id: u64, now: i64) -> AlkResult<bool> {
        if !self.is_v3().await? {
            return Ok(false);
        }
        let id = id as i64;
        self.store
            .run_write(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = query(&conn, DELETE_RESULT, (id,)).await?;
                    let mut live = false;
                    while let Some(row) = rows.next().await? {
                        live = row.get::<i64>(0)? > now;
                    }
                    Ok(live)
                })
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RetryPolicy;
    use crate::relay::{RELAYED, SET_RELAYED};
    use alk_store::rate::RateLimit;

    const DOC: &str = include_str!("../../../docs/formats/localqueue.v1.md");

    /// The receipt a delivery names.
    fn r(text: &str) -> Receipt {
        Receipt::parse(text).unwrap()
    }

    #[tokio::test]
    async fn a_row_that_breaks_the_format_is_an_internal_error_naming_the_store() {
        for (new_queues, columns) in [
            (
                NewQueues::V1,
                ["payload_type", "enqueued_at", "payload_data"].as_slice(),
            ),
            (NewQueues::V3, &["payload_type", "payload_data"]),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let options = StoreOptions {
                new_queues,
                ..StoreOptions::default()
            };
            let q = QueueStore::open(dir.path(), "q", options).await.unwrap();
            q.send(&[text("m")], &Stamp::plain(0), 0).await.unwrap();
            for column in columns {
                let value = match *column {
                    "payload_type" => "'xml'",
                    "enqueued_at" => "'soon'",
                    _ => "x'00'",
                };
                crate::write_sql(&q.store, &format!("UPDATE messages SET {column} = {value}"))
                    .await;
                match q.claim(1, 1_000, None, 0).await {
                    Err(AlkError::Internal(m)) => {
                        assert!(m.contains("localqueue.sqlite"), "{column}: {m}")
                    }
                    other => panic!("{new_queues:?} {column}: expected internal, got {other:?}"),
                }
                crate::write_sql(
                    &q.store,
                    "UPDATE messages SET payload_type = 'text', enqueued_at = 0, payload_data = 'm'",
                )
                .await;
            }
            // Nothing was claimed: the message is still due.
            assert_eq!(q.next_visible(0).await.unwrap(), Some(0));
        }
    }

    fn text(s: &str) -> Payload {
        Payload::Text(s.into())
    }

    #[test]
    fn the_format_document_pins_the_ddl_and_every_statement() {
        crate::assert_document_pins(
            "localqueue.v1.md",
            DOC,
            &[
                ("DDL", DDL),
                ("SEND", SEND),
                ("CLAIM", CLAIM),
                ("ACK", ACK),
                ("NACK", NACK),
                ("EXISTS", EXISTS),
                ("ACK_BATCH", ACK_BATCH),
                ("ACK_CLAIMED", ACK_CLAIMED),
                ("EXISTING", EXISTING),
                ("PURGE", PURGE),
                ("NEXT_VISIBLE", NEXT_VISIBLE),
                ("STATS", STATS),
                ("JOB_V1", JOB_V1),
                ("JOBS_PAGE_V1", JOBS_PAGE_V1),
            ],
        );
    }

    async fn queue(dir: &Path) -> QueueStore {
        QueueStore::open(dir, "q", RetryPolicy::default())
            .await
            .unwrap()
    }

    /// A `localqueue.v3` queue, as a host started with `--new-queues v3`
    /// makes it.
    async fn queue_v3(dir: &Path) -> QueueStore {
        let v3 = StoreOptions {
            new_queues: NewQueues::V3,
            ..StoreOptions::default()
        };
        let q = QueueStore::open(dir, "q3", v3).await.unwrap();
        assert!(q.is_v3().await.unwrap() && !q.is_v4().await.unwrap());
        q
    }

    #[tokio::test]
    async fn the_claim_walks_the_claim_index_and_sorts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = StoreOptions {
            new_queues: NewQueues::V1,
            ..StoreOptions::default()
        };
        let q = QueueStore::open(dir.path(), "q", v1).await.unwrap();
        let plan: Vec<String> = q
            .store
            .run(|conn: Connection| {
                Box::pin(async move {
                    let mut rows = conn
                        .query(&format!("EXPLAIN QUERY PLAN {CLAIM}"), (1, "u", 1, 1))
                        .await?;
                    let mut plan = Vec::new();
                    while let Some(row) = rows.next().await? {
                        plan.push(row.get::<String>(3)?);
                    }
                    Ok(plan)
                })
            })
            .await
            .unwrap();
        let plan = plan.join(" | ");
        assert!(plan.contains("USING INDEX idx_messages_claim"), "{plan}");
        assert!(
            !plan.contains("SORTER") && !plan.contains("TEMP B-TREE"),
            "{plan}"
        );
    }

    /// Statements `f` runs (the store's own, on this thread).
    async fn statements_of<T>(f: impl std::future::Future<Output = T>) -> (T, usize) {
        let before = crate::retry::STATEMENTS.with(|n| n.get());
        let out = f.await;
        (out, crate::retry::STATEMENTS.with(|n| n.get()) - before)
    }

    #[tokio::test]
    async fn a_plain_claim_costs_no_walk_and_limits_or_groups_take_the_walk() {
        let dir = tempfile::tempdir().unwrap();
        let msgs: Vec<Payload> = (0..20).map(|i| text(&format!("m{i}"))).collect();
        // What a claim costs on v1 (its transaction's statements too).
        let v1 = StoreOptions {
            new_queues: NewQueues::V1,
            ..StoreOptions::default()
        };
        let old = QueueStore::open(dir.path(), "old", v1).await.unwrap();
        old.send(&msgs, &Stamp::plain(0), 0).await.unwrap();
        old.claim(1, 1_000, None, 0).await.unwrap();
        let (got, on_v1) = statements_of(old.claim(1, 1_000, None, 0)).await;
        assert_eq!(got.unwrap().len(), 1);
        // On v3, exactly v1's.
        let v3 = queue_v3(dir.path()).await;
        v3.send(&msgs, &Stamp::plain(0), 0).await.unwrap();
        v3.claim(1, 1_000, None, 0).await.unwrap();
        for max in [1, 8] {
            let (got, n) = statements_of(v3.claim(max, 1_000, None, 0)).await;
            assert_eq!(got.unwrap().len(), max as usize);
            assert_eq!(n, on_v1, "a plain claim of {max} on v3");
        }
        // On v4, one more: the candidates are read (lapsed deliveries are
        // looked for in the same statement), then claimed by their ids.
        let q = queue(dir.path()).await;
        assert!(q.is_v4().await.unwrap());
        q.send(&msgs, &Stamp::plain(0), 0).await.unwrap();
        // Warm: the format is read once per open store.
        q.claim(1, 1_000, None, 0).await.unwrap();
        let (got, n) = statements_of(q.claim(1, 1_000, None, 0)).await;
        assert_eq!(got.unwrap().len(), 1);
        assert_eq!(n, on_v1 + 1, "a plain claim of one");
        let (got, n) = statements_of(q.claim(8, 1_000, None, 0)).await;
        let got = got.unwrap();
        assert_eq!(got.len(), 8);
        assert_eq!(n, on_v1 + 1, "a plain claim of eight");
        // In claim order, one UUID for the claim.
        let ids: Vec<u64> = got.iter().map(|d| d.id).collect();
        assert_eq!(ids, (3..=10).collect::<Vec<u64>>());
        let uuid = |d: &Delivery| d.receipt.split_once(':').unwrap().1.to_string();
        assert!(got.iter().all(|d| uuid(d) == uuid(&got[0])));
        // Fewer due than asked for: the plain claim takes them, the walk
        // finds there is nothing more; together what the walk alone takes.
        let (got, n) = statements_of(q.claim(100, 1_000, None, 0)).await;
        assert_eq!(got.unwrap().len(), 10);
        assert!(n > on_v1 + 1);
        // A cap on the queue: the walk, which applies it.
        q.send(&msgs, &Stamp::plain(0), 0).await.unwrap();
        q.set_limits(&limited(|l| l.max_in_flight = Some(21)))
            .await
            .unwrap();
        let (got, n) = statements_of(q.claim(8, 1_000, None, 0)).await;
        assert_eq!(got.unwrap().len(), 1, "20 in flight, a cap of 21");
        assert!(n > on_v1 + 1);
        // A group: the walk, which takes turns.
        q.set_limits(&QueueLimits::default()).await.unwrap();
        q.send(&[text("g")], &grouped("a", 0), 0).await.unwrap();
        let (got, n) = statements_of(q.claim(1, 1_000, None, 0)).await;
        assert_eq!(got.unwrap().len(), 1);
        assert!(n > on_v1 + 1);
    }

    #[tokio::test]
    async fn the_plain_claim_leaves_expired_and_spent_candidates_to_the_walk() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path()).await;
        let mut expiring = Stamp::plain(0);
        expiring.expires_at = Some(50);
        q.send(&[text("old")], &expiring, 0).await.unwrap();
        q.send(&[text("a"), text("b"), text("c")], &Stamp::plain(0), 0)
            .await
            .unwrap();
        // At 100 the first has expired: it goes to the dead letters and
        // the claim of two goes on past it, as the walk alone does.
        let got = q.claim(2, 1_000, None, 100).await.unwrap();
        assert_eq!(got.iter().map(|d| d.id).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(q.stats(100).await.unwrap().dead, 1);
        let got = q.claim(5, 1_000, None, 100).await.unwrap();
        assert_eq!(got.iter().map(|d| d.id).collect::<Vec<_>>(), vec![4]);
    }

    #[tokio::test]
    async fn a_plain_claim_of_several_passes_over_unfit_candidates_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path()).await;
        let mut once = Stamp::plain(0);
        once.max_attempts = Some(1);
        let mut expiring = Stamp::plain(0);
        expiring.expires_at = Some(50);
        q.send(&[text("a")], &once, 0).await.unwrap();
        q.send(&[text("b")], &Stamp::plain(0), 0).await.unwrap();
        q.send(&[text("c")], &expiring, 0).await.unwrap();
        q.send(&[text("d"), text("e")], &Stamp::plain(0), 0)
            .await
            .unwrap();
        // a delivered once and given back: waiting, its one attempt spent.
        let a = q.claim(1, 1_000, None, 0).await.unwrap();
        assert_eq!((a[0].id, a[0].attempt), (1, 1));
        assert_eq!(q.nack(&r(&a[0].receipt), 0).await.unwrap(), Settled::Done);
        // At 100, of the first four in claim order a is spent and c
        // expired: the plain claim takes b and d (one update of both) and
        // leaves those two, which the walk moves to the dead letters before
        // it fills the slots left with e, as the walk alone would have it.
        let got = q.claim(4, 1_000, None, 100).await.unwrap();
        let seen: Vec<(u64, u32, Option<u32>)> = got
            .iter()
            .map(|d| (d.id, d.attempt, d.max_attempts))
            .collect();
        assert_eq!(seen, [(2, 1, None), (4, 1, None), (5, 1, None)]);
        assert_eq!(q.stats(100).await.unwrap().dead, 2);
        assert!(q.claim(4, 1_000, None, 100).await.unwrap().is_empty());
        // Each claimed once, under the claim's receipt.
        for d in &got {
            assert_eq!(q.ack(&r(&d.receipt)).await.unwrap(), Settled::Done);
        }
    }

    #[tokio::test]
    async fn the_messages_of_one_claim_share_its_uuid_and_every_claim_mints_one() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path()).await;
        q.send(&[text("a"), text("b"), text("c")], &Stamp::plain(0), 0)
            .await
            .unwrap();
        let uuid = |d: &Delivery| d.receipt.split_once(':').unwrap().1.to_string();
        let first = q.claim(1, 1_000, None, 0).await.unwrap();
        let rest = q.claim(10, 1_000, None, 0).await.unwrap();
        assert_eq!(rest.len(), 2);
        assert!(rest.iter().all(|d| uuid(d) == uuid(&rest[0])));
        assert_ne!(uuid(&first[0]), uuid(&rest[0]));
        assert!(uuid::Uuid::parse_str(&uuid(&first[0])).is_ok());
        // One ack-batch statement for one claim's receipts: all acked.
        let receipts: Vec<Receipt> = rest.iter().map(|d| r(&d.receipt)).collect();
        let batch = q.ack_batch(&receipts).await.unwrap();
        assert_eq!(
            batch.settle(&receipts.iter().copied().map(Some).collect::<Vec<_>>()),
            [Settled::Done, Settled::Done]
        );
    }

    #[tokio::test]
    async fn a_v1_file_made_without_the_claim_index_gets_it_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = queue_path(dir.path(), "q");
        // The other program's DDL: the v1 schema without alk's index.
        static OTHER: Format = Format {
            marker: "localqueue.v1",
            ddl: "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);\n\
                  INSERT OR IGNORE INTO meta (key, value) VALUES ('format', 'localqueue.v1');\n\
                  CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY AUTOINCREMENT, payload_type TEXT NOT NULL, payload_data TEXT NOT NULL, enqueued_at INTEGER NOT NULL, visible_at INTEGER NOT NULL, attempt INTEGER NOT NULL DEFAULT 0, receipt_handle TEXT);\n\
                  CREATE INDEX IF NOT EXISTS idx_messages_visible ON messages (visible_at, enqueued_at, id);",
            also: &[],
            upgrades: &[],
        };
        {
            let other = open_store(&path, &OTHER, RetryPolicy::default())
                .await
                .unwrap();
            other
                .run_write(|conn: Connection| {
                    Box::pin(async move {
                        exec(&conn, SEND, ("text", "from the other program", 5)).await?;
                        Ok(())
                    })
                })
                .await
                .unwrap();
            // As if that program were another process: close its database.
            other.close_for_test();
        }
        let q = queue(dir.path()).await;
        let got = q.claim(1, 1_000, None, 10).await.unwrap();
        assert_eq!(got[0].payload, text("from the other program"));
    }

    #[tokio::test]
    async fn a_write_lock_held_past_the_deadline_is_busy_and_writes_nothing() {
        use std::time::{Duration, Instant};
        let dir = tempfile::tempdir().unwrap();
        let policy = RetryPolicy {
            deadline: Duration::from_millis(300),
            ..RetryPolicy::default()
        };
        let q = QueueStore::open(dir.path(), "q", policy).await.unwrap();
        // Another writer, outside alk's gate, holds the write lock.
        let handle = q.store.handle().await.unwrap();
        let holder = q.store.check_out(&handle).await.unwrap();
        holder.execute("BEGIN IMMEDIATE", ()).await.unwrap();
        let cpu_before = cpu_time();
        let started = Instant::now();
        let result = q.send(&[text("x")], &Stamp::plain(0), 0).await;
        let waited = started.elapsed();
        let cpu = cpu_time() - cpu_before;
        assert!(matches!(result, Err(AlkError::Busy(_))), "{result:?}");
        assert!(waited >= policy.deadline, "gave up after {waited:?}");
        // The wait sleeps between short engine waits: it must not burn a
        // core for the whole deadline (a spinning wait costs ~100% of it).
        eprintln!("waited {waited:?} using {cpu:?} of CPU");
        holder.execute("ROLLBACK", ()).await.unwrap();
        q.store.check_in(&handle, holder);
        // Nothing was written by the refused send; the next one goes through.
        assert!(q.claim(10, 30_001, None, 1).await.unwrap().is_empty());
        q.send(&[text("y")], &Stamp::plain(0), 0).await.unwrap();
        assert_eq!(q.claim(10, 30_001, None, 1).await.unwrap().len(), 1);
    }

    fn cpu_time() -> std::time::Duration {
        // utime + stime of this process, from /proc (Linux).
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, r)| r)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        let ticks: u64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0)
            + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0);
        std::time::Duration::from_millis(ticks * 10)
    }

    const DOC_V2: &str = include_str!("../../../docs/formats/localqueue.v2.md");

    #[test]
    fn the_v2_document_pins_the_ddl_and_every_statement() {
        crate::assert_document_pins(
            "localqueue.v2.md",
            DOC_V2,
            &[
                ("DDL_V2", DDL_V2),
                ("UPGRADE", UPGRADE),
                ("SEND_V2", SEND_V2),
                ("LAST_SERVED", LAST_SERVED),
                ("JOIN", JOIN),
                ("ROUND", ROUND),
                ("ROUND_TIES", ROUND_TIES),
                ("HEAD", HEAD),
                ("DUE", DUE),
                ("CLAIM_PLAIN", CLAIM_PLAIN),
                ("CLAIM_IDS", CLAIM_IDS),
                ("SERVE", SERVE),
                ("ANY_GROUP", ANY_GROUP),
                ("BURY", BURY),
                ("DELETE_V2", DELETE_V2),
                ("LEAVE", LEAVE),
                ("ACK_UNGROUPED", ACK_UNGROUPED),
                ("ACK_V2", ACK_V2),
                ("ACK_BATCH_V2", ACK_BATCH_V2),
                ("ACK_CLAIMED_V2", ACK_CLAIMED_V2),
                ("HEARTBEAT", HEARTBEAT),
                ("DELIVERY", DELIVERY),
                ("DELIVERY_V1", DELIVERY_V1),
                ("RETRY", RETRY),
                ("DELETE_DEAD", DELETE_DEAD),
                ("JOB", JOB),
                ("DEAD_JOB", DEAD_JOB),
                ("DEAD_PAGE", DEAD_PAGE),
                ("JOBS_PAGE", JOBS_PAGE),
                ("EXPIRED", EXPIRED),
                ("REDRIVE", REDRIVE),
                ("PURGE_GROUPS", PURGE_GROUPS),
                ("PURGE_DEAD", PURGE_DEAD),
                ("STATS_V2", STATS_V2),
                ("RELAYED", RELAYED),
                ("SET_RELAYED", SET_RELAYED),
            ],
        );
        // A new v2 file is the v1 DDL followed by the upgrade.
        assert_eq!(DDL_V2, format!("{DDL}{UPGRADE}"));
    }

    async fn plan_of(q: &QueueStore, sql: &'static str, params: Vec<Value>) -> String {
        crate::plan_of(&q.store, sql, params).await
    }

    #[tokio::test]
    async fn every_v2_claim_statement_is_index_driven_and_sorts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue_v3(dir.path()).await;
        let i = |n: i64| Value::Integer(n);
        let t = |s: &str| Value::Text(s.into());
        for (sql, params, index) in [
            (ROUND, vec![i(0), i(0), i(10)], "idx_groups_served"),
            (
                ROUND_TIES,
                vec![i(0), i(0), i(10), i(1)],
                "idx_groups_served",
            ),
            (HEAD, vec![t("g")], "idx_messages_group"),
            (DUE, vec![i(0), i(0), i(10)], "idx_messages_ready"),
            (
                CLAIM_PLAIN,
                vec![i(1), t("u"), i(0), i(0), i(10)],
                "idx_messages_ready",
            ),
            (
                CLAIM_PLAIN_V3,
                vec![i(1), t("u"), i(0), i(0), i(10)],
                "idx_messages_ready",
            ),
            (
                CLAIM_IDS,
                vec![i(1), t("u"), t("[1]")],
                "INTEGER PRIMARY KEY",
            ),
            (LAST_SERVED, vec![], "idx_groups_served"),
            (LEAVE, vec![t("g")], "idx_messages_group"),
            (EXPIRED, vec![i(0), i(10)], "idx_messages_expiry"),
            (ANY_GROUP, vec![], "INDEX"),
            (SERVE, vec![i(1), i(1)], "INTEGER PRIMARY KEY"),
        ] {
            let plan = plan_of(&q, sql, params).await;
            assert!(plan.contains(index), "{sql}: {plan}");
            assert!(
                !plan.contains("SORTER") && !plan.contains("TEMP B-TREE"),
                "{sql}: {plan}"
            );
            assert!(
                !plan.contains("SCAN messages |") && !plan.ends_with("SCAN messages"),
                "{sql}: {plan}"
            );
        }
    }

    /// Every message count of the statistics is a range of
    /// `idx_messages_visible`, never a pass over the table.
    #[tokio::test]
    async fn the_statistics_read_ranges_of_the_visibility_index() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue_v3(dir.path()).await;
        let v1 = StoreOptions {
            new_queues: NewQueues::V1,
            ..StoreOptions::default()
        };
        let old = QueueStore::open(dir.path(), "old", v1).await.unwrap();
        for (q, sql) in [(&q, STATS_V2), (&old, STATS)] {
            let plan = plan_of(q, sql, vec![Value::Integer(0)]).await;
            assert!(plan.contains("idx_messages_visible"), "{sql}: {plan}");
            assert!(
                !plan.contains("SCAN messages |") && !plan.ends_with("SCAN messages"),
                "{sql}: {plan}"
            );
        }
    }

    #[tokio::test]
    async fn job_options_on_a_v1_file_name_the_migration_and_store_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = StoreOptions {
            new_queues: NewQueues::V1,
            ..StoreOptions::default()
        };
        let q = QueueStore::open(dir.path(), "old", v1).await.unwrap();
        assert!(!q.is_v2().await.unwrap());
        let mut stamp = Stamp::plain(0);
        stamp.priority = 3;
        match q.send(&[text("x")], &stamp, 0).await {
            Err(AlkError::InvalidArgument(m)) => {
                assert!(
                    m.contains("alk-host migrate queue old") && m.contains("priority"),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            q.claim(1, 100, Some(1), 0).await,
            Err(AlkError::InvalidArgument(_))
        ));
        assert_eq!(q.next_visible(0).await.unwrap(), None);
        // A host that makes v2 files still uses this one as v1.
        let again = QueueStore::open(dir.path(), "old", StoreOptions::default())
            .await
            .unwrap();
        assert!(!again.is_v2().await.unwrap());
    }

    /// What the v1 code wrote, read back the same way after the migration.
    #[tokio::test]
    async fn a_migrated_v1_store_keeps_ids_attempts_receipts_and_order() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = StoreOptions {
            new_queues: NewQueues::V1,
            ..StoreOptions::default()
        };
        let (receipt, high) = {
            let q = QueueStore::open(dir.path(), "q", v1).await.unwrap();
            let ids = q
                .send(
                    &[text("a"), text("b"), text("c"), text("d")],
                    &Stamp::plain(10),
                    10,
                )
                .await
                .unwrap();
            // "a" in flight (attempt 1); "d" acked, so the high-water mark is
            // above every remaining id; "b" delivered and given back.
            let a = q.claim(1, 1_000_000, None, 20).await.unwrap().remove(0);
            let b = q.claim(1, 1_000_000, None, 20).await.unwrap().remove(0);
            q.nack(&r(&b.receipt), 30).await.unwrap();
            let rest = q.claim(2, 1_000_000, None, 30).await.unwrap();
            assert_eq!(
                rest.iter().map(|d| d.id).collect::<Vec<_>>(),
                [ids[1], ids[2]]
            );
            for d in &rest {
                q.nack(&r(&d.receipt), 40).await.unwrap();
            }
            let d = q.claim(4, 1_000_000, None, 40).await.unwrap();
            let last = d.iter().find(|d| d.id == ids[3]).unwrap();
            q.ack(&r(&last.receipt)).await.unwrap();
            for other in d.iter().filter(|d| d.id != ids[3]) {
                q.nack(&r(&other.receipt), 50).await.unwrap();
            }
            q.store.close_for_test();
            (a.receipt, ids[3])
        };
        // Refused while this process has it open.
        let held = QueueStore::open(dir.path(), "q", v1).await.unwrap();
        match QueueStore::migrate(dir.path(), "q", StoreOptions::default()).await {
            Err(AlkError::Busy(m)) => assert!(m.contains("stop every process"), "{m}"),
            other => panic!("{other:?}"),
        }
        held.store.close_for_test();
        drop(held);
        assert_eq!(
            QueueStore::migrate(dir.path(), "q", StoreOptions::default())
                .await
                .unwrap(),
            Migrated::Upgraded {
                from: "localqueue.v1"
            }
        );
        assert_eq!(
            QueueStore::migrate(dir.path(), "q", StoreOptions::default())
                .await
                .unwrap(),
            Migrated::AlreadyCurrent
        );
        let q = queue(dir.path()).await;
        assert!(q.is_v3().await.unwrap());
        // The in-flight message keeps its attempt; its receipt still acks.
        let a = q.job(1, 60).await.unwrap().unwrap();
        assert_eq!((a.state, a.attempt), (JobState::InFlight, 1));
        // Due messages come in their old order; attempts continue.
        let got = q.claim(10, 1_000, None, 60).await.unwrap();
        assert_eq!(
            got.iter().map(|d| (d.id, d.attempt)).collect::<Vec<_>>(),
            [(2, 4), (3, 3)]
        );
        assert_eq!(q.ack(&r(&receipt)).await.unwrap(), Settled::Done);
        // New ids continue above the old high-water mark.
        let next = q.send(&[text("e")], &Stamp::plain(70), 70).await.unwrap();
        assert_eq!(next, [high + 1]);
        // And the new options work.
        let mut stamp = Stamp::plain(70);
        stamp.group = Some("g".into());
        q.send(&[text("f")], &stamp, 70).await.unwrap();
        assert_eq!(
            QueueStore::migrate(dir.path(), "missing", StoreOptions::default())
                .await
                .map_err(|e| matches!(e, AlkError::InvalidArgument(_))),
            Err(true)
        );
    }

    /// A migration that fails part-way (here: a column the upgrade adds
    /// last already exists) rolls back entirely: the file is still a valid
    /// v1 store, with its schema, marker and messages as before.
    #[tokio::test]
    async fn a_migration_that_fails_part_way_leaves_the_v1_file_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let v1 = StoreOptions {
            new_queues: NewQueues::V1,
            ..StoreOptions::default()
        };
        let q = QueueStore::open(dir.path(), "q", v1).await.unwrap();
        q.send(&[text("kept")], &Stamp::plain(1), 1).await.unwrap();
        crate::write_sql(&q.store, "ALTER TABLE messages ADD COLUMN last_error TEXT").await;
        let schema = |q: QueueStore| async move {
            q.store
                .run(|conn: Connection| {
                    Box::pin(async move {
                        let mut rows = conn
                            .query(
                                "SELECT type, name, sql FROM sqlite_schema ORDER BY name",
                                (),
                            )
                            .await?;
                        let mut all = Vec::new();
                        while let Some(row) = rows.next().await? {
                            all.push(format!(
                                "{:?}",
                                (row.get_value(0)?, row.get_value(1)?, row.get_value(2)?)
                            ));
                        }
                        Ok(all)
                    })
                })
                .await
                .unwrap()
        };
        let before = schema(q.clone()).await;
        q.store.close_for_test();
        drop(q);
        let failed = QueueStore::migrate(dir.path(), "q", StoreOptions::default()).await;
        assert!(failed.is_err(), "{failed:?}");
        let q = QueueStore::open(dir.path(), "q", v1).await.unwrap();
        assert!(!q.is_v2().await.unwrap());
        assert_eq!(schema(q.clone()).await, before);
        let got = q.claim(1, 1_000, None, 10).await.unwrap();
        assert_eq!(got[0].payload, text("kept"));
    }

    const DOC_V3: &str = include_str!("../../../docs/formats/localqueue.v3.md");

    #[test]
    fn the_v3_document_pins_the_ddl_and_every_statement() {
        crate::assert_document_pins(
            "localqueue.v3.md",
            DOC_V3,
            &[
                ("DDL_V3", DDL_V3),
                ("UPGRADE_V3", UPGRADE_V3),
                ("LIMITS", LIMITS),
                ("CLAIM_PLAIN_V3", CLAIM_PLAIN_V3),
                ("SET_LIMITS", SET_LIMITS),
                ("IN_FLIGHT", IN_FLIGHT),
                ("HEADS", HEADS),
                ("ROUND_OPEN", ROUND_OPEN),
                ("ROUND_TIES_OPEN", ROUND_TIES_OPEN),
                ("BUCKET", BUCKET),
                ("SET_BUCKET", SET_BUCKET),
                ("EMPTY_SINCE", EMPTY_SINCE),
                ("SWEEP_BUCKETS", SWEEP_BUCKETS),
                ("UNIQUE_HOLDER", UNIQUE_HOLDER),
                ("TAKE_UNIQUE", TAKE_UNIQUE),
                ("SWEEP_UNIQUE_UNTIL", SWEEP_UNIQUE_UNTIL),
                ("SWEEP_UNIQUE_GONE", SWEEP_UNIQUE_GONE),
                ("STORE_RESULT", STORE_RESULT),
                ("RESULT", RESULT),
                ("DELETE_RESULT", DELETE_RESULT),
                ("SWEEP_RESULTS", SWEEP_RESULTS),
            ],
        );
        // A new v3 file is the v1 DDL followed by both upgrades; a v1 file
        // is migrated by both upgrades.
        assert_eq!(DDL_V3, format!("{DDL}{UPGRADE}{UPGRADE_V3}"));
        assert_eq!(UPGRADE_V1_V3, format!("{UPGRADE}{UPGRADE_V3}"));
    }

    #[tokio::test]
    async fn every_v3_statement_is_index_driven_and_sorts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue_v3(dir.path()).await;
        let i = |n: i64| Value::Integer(n);
        let t = |s: &str| Value::Text(s.into());
        for (sql, params, index) in [
            (IN_FLIGHT, vec![i(0), i(10)], "idx_messages_in_flight"),
            (SWEEP_BUCKETS, vec![i(0), i(10)], "idx_rate_buckets_since"),
            (HEADS, vec![t("g"), i(2)], "idx_messages_group"),
            (
                ROUND_OPEN,
                vec![i(0), i(0), i(10), i(0)],
                "idx_groups_served",
            ),
            (
                ROUND_TIES_OPEN,
                vec![i(0), i(0), i(10), i(1), i(0)],
                "idx_groups_served",
            ),
            (EMPTY_SINCE, vec![i(0)], "idx_rate_buckets_empty"),
            (SWEEP_RESULTS, vec![i(0), i(10)], "idx_results_expiry"),
            (SWEEP_UNIQUE_UNTIL, vec![i(0), i(10)], "idx_unique_until"),
            (SWEEP_UNIQUE_GONE, vec![i(10)], "idx_unique_live"),
            (LIMITS, vec![], "PRIMARY KEY"),
            (RESULT, vec![i(1), i(0)], "PRIMARY KEY"),
            (BUCKET, vec![t("")], "INDEX"),
            (UNIQUE_HOLDER, vec![t("k")], "INDEX"),
        ] {
            let plan = plan_of(&q, sql, params).await;
            assert!(plan.contains(index), "{sql}: {plan}");
            assert!(
                !plan.contains("SORTER") && !plan.contains("TEMP B-TREE"),
                "{sql}: {plan}"
            );
            assert!(
                !plan.contains("SCAN messages |") && !plan.ends_with("SCAN messages"),
                "{sql}: {plan}"
            );
        }
    }

    #[tokio::test]
    async fn an_ack_deletes_a_message_without_a_group_alone_and_a_grouped_one_with_its_group() {
        let dir = tempfile::tempdir().unwrap();
        async fn groups(q: &QueueStore) -> Vec<String> {
            crate::stream::tests::sql_rows(
                &q.store,
                "SELECT group_key FROM message_groups WHERE group_key <> '' ORDER BY group_key",
            )
            .await
        }
        for q in [
            v2_file(dir.path(), "two").await,
            queue_v3(dir.path()).await,
            queue(dir.path()).await,
        ] {
            q.send(&[text("plain")], &Stamp::plain(10), 10)
                .await
                .unwrap();
            q.send(&[text("in g")], &grouped("g", 10), 10)
                .await
                .unwrap();
            let got = q.claim(2, 1_000, None, 20).await.unwrap();
            assert_eq!(got.len(), 2, "{}", q.path().display());
            let (plain, in_g) = if got[0].group.is_none() {
                (&got[0], &got[1])
            } else {
                (&got[1], &got[0])
            };
            // A receipt of another delivery deletes nothing.
            let other = format!("{}:00000000-0000-0000-0000-000000000000", plain.id);
            assert_eq!(q.ack(&r(&other)).await.unwrap(), Settled::Stale);
            assert_eq!(q.ack(&r(&plain.receipt)).await.unwrap(), Settled::Done);
            assert_eq!(q.ack(&r(&plain.receipt)).await.unwrap(), Settled::Gone);
            // The grouped message is deleted, and its group, left without
            // messages, leaves the round.
            assert_eq!(groups(&q).await, ["Text(\"g\")"]);
            assert_eq!(q.ack(&r(&in_g.receipt)).await.unwrap(), Settled::Done);
            assert!(groups(&q).await.is_empty(), "{}", q.path().display());
            assert_eq!(q.stats(30).await.unwrap().waiting, 0);
        }
    }

    /// A `localqueue.v2` file made as an older host made it.
    async fn v2_file(dir: &Path, name: &str) -> QueueStore {
        let store = open_store(&queue_path(dir, name), &FORMAT_V2, StoreOptions::default())
            .await
            .unwrap();
        store.close_for_test();
        let q = QueueStore::open(dir, name, StoreOptions::default())
            .await
            .unwrap();
        assert!(q.is_v2().await.unwrap() && !q.is_v3().await.unwrap());
        q
    }

    fn grouped(group: &str, now: i64) -> Stamp {
        let mut stamp = Stamp::plain(now);
        stamp.group = Some(group.into());
        stamp
    }

    fn limited(f: impl FnOnce(&mut QueueLimits)) -> QueueLimits {
        let mut l = QueueLimits::default();
        f(&mut l);
        l
    }

    #[tokio::test]
    async fn v3_features_on_a_v2_file_name_the_migration_and_store_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let q = v2_file(dir.path(), "old").await;
        let named = |r: AlkResult<()>| match r {
            Err(AlkError::InvalidArgument(m)) => assert!(
                m.contains("alk-host migrate queue old")
                    && m.contains("localqueue.v2")
                    && m.contains("localqueue.v3"),
                "{m}"
            ),
            other => panic!("{other:?}"),
        };
        named(q.set_limits(&limited(|l| l.max_in_flight = Some(1))).await);
        let unique = Unique {
            key: "k".into(),
            until: None,
        };
        named(
            q.send_unique(&text("x"), &Stamp::plain(0), &unique, 0)
                .await
                .map(|_| ()),
        );
        q.send(&[text("a")], &Stamp::plain(0), 0).await.unwrap();
        let d = q.claim(1, 1_000, None, 0).await.unwrap().remove(0);
        named(
            q.complete(&r(&d.receipt), &text("r"), 100, 1)
                .await
                .map(|_| ()),
        );
        named(q.try_take(None, 1, 0).await.map(|_| ()));
        assert_eq!(q.limits().await.unwrap(), QueueLimits::default());
        assert_eq!(q.result(d.id, 0).await.unwrap(), None);
        assert!(!q.delete_result(d.id, 0).await.unwrap());
        assert_eq!(q.throttled_until(0).await.unwrap(), None);
        // The message is still in flight: nothing was acked by complete.
        assert_eq!(q.ack(&r(&d.receipt)).await.unwrap(), Settled::Done);
        assert!(!q.is_v3().await.unwrap());
        // A v1 file names its own format.
        let v1 = StoreOptions {
            new_queues: NewQueues::V1,
            ..StoreOptions::default()
        };
        let old = QueueStore::open(dir.path(), "older", v1).await.unwrap();
        match old.set_limits(&QueueLimits::default()).await {
            Err(AlkError::InvalidArgument(m)) => {
                assert!(
                    m.contains("localqueue.v1") && m.contains("--new-queues v1"),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_migrated_v2_store_keeps_ids_receipts_groups_and_its_high_water_mark() {
        let dir = tempfile::tempdir().unwrap();
        let (receipt, high) = {
            let q = v2_file(dir.path(), "q").await;
            let ids = q
                .send(&[text("a"), text("b")], &grouped("g", 10), 10)
                .await
                .unwrap();
            let last = q.send(&[text("c")], &Stamp::plain(10), 10).await.unwrap();
            // "a" in flight (its group parked), "c" acked: the high-water
            // mark is above every remaining id.
            let got = q.claim(10, 1_000_000, None, 20).await.unwrap();
            assert_eq!(got.len(), 2);
            let a = got.iter().find(|d| d.id == ids[0]).unwrap().clone();
            let c = got.iter().find(|d| d.id == last[0]).unwrap();
            q.ack(&r(&c.receipt)).await.unwrap();
            q.store.close_for_test();
            (a.receipt, last[0])
        };
        assert_eq!(
            QueueStore::migrate(dir.path(), "q", StoreOptions::default())
                .await
                .unwrap(),
            Migrated::Upgraded {
                from: "localqueue.v2"
            }
        );
        assert_eq!(
            QueueStore::migrate(dir.path(), "q", StoreOptions::default())
                .await
                .unwrap(),
            Migrated::AlreadyCurrent
        );
        let q = queue(dir.path()).await;
        assert!(q.is_v3().await.unwrap());
        // The group is still parked behind its message in flight.
        assert!(q.claim(10, 1_000_000, None, 30).await.unwrap().is_empty());
        assert_eq!(q.ack(&r(&receipt)).await.unwrap(), Settled::Done);
        let b = q.claim(10, 1_000_000, None, 30).await.unwrap();
        assert_eq!(b.iter().map(|d| d.id).collect::<Vec<_>>(), [2]);
        assert_eq!(
            q.send(&[text("d")], &Stamp::plain(40), 40).await.unwrap(),
            [high + 1]
        );
        // And the v3 features work.
        q.set_limits(&limited(|l| l.max_in_flight = Some(5)))
            .await
            .unwrap();
        assert_eq!(q.limits().await.unwrap().max_in_flight, Some(5));
        // The same schema as a file made as v3.
        let fresh_dir = tempfile::tempdir().unwrap();
        let fresh = queue(fresh_dir.path()).await;
        let schema = "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name";
        assert_eq!(
            crate::stream::tests::sql_rows(&q.store, schema).await,
            crate::stream::tests::sql_rows(&fresh.store, schema).await
        );
    }

    #[tokio::test]
    async fn a_group_hands_out_up_to_its_concurrency_in_send_order() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path()).await;
        q.set_limits(&limited(|l| l.group_concurrency = 2))
            .await
            .unwrap();
        let ids = q
            .send(
                &[text("1"), text("2"), text("3"), text("4")],
                &grouped("g", 0),
                0,
            )
            .await
            .unwrap();
        let first = q.claim(10, 1_000, None, 0).await.unwrap();
        assert_eq!(first.iter().map(|d| d.id).collect::<Vec<_>>(), ids[..2]);
        assert!(q.claim(10, 1_000, None, 0).await.unwrap().is_empty());
        // The second done first: the first still holds its place.
        q.ack(&r(&first[1].receipt)).await.unwrap();
        let next = q.claim(10, 1_000, None, 0).await.unwrap();
        assert_eq!(next.iter().map(|d| d.id).collect::<Vec<_>>(), [ids[2]]);
        // A lapsed delivery is due again, ahead of the rest.
        let again = q.claim(10, 1_000, None, 2_000).await.unwrap();
        assert_eq!(
            again.iter().map(|d| d.id).collect::<Vec<_>>(),
            [ids[0], ids[2]]
        );
    }

    #[tokio::test]
    async fn a_cap_and_a_rate_bound_every_claim() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path()).await;
        let payloads: Vec<Payload> = (0..10).map(|i| text(&i.to_string())).collect();
        q.send(&payloads, &Stamp::plain(0), 0).await.unwrap();
        q.set_limits(&limited(|l| l.max_in_flight = Some(3)))
            .await
            .unwrap();
        assert_eq!(q.claim(10, 1_000, None, 0).await.unwrap().len(), 3);
        assert!(q.claim(10, 1_000, None, 0).await.unwrap().is_empty());
        // Their deadline passed: no longer in flight.
        let rate = RateLimit {
            capacity: 2,
            refill: 1,
            interval_ms: 100,
        };
        q.set_limits(&limited(|l| l.rate = Some(rate)))
            .await
            .unwrap();
        assert_eq!(q.claim(10, 10_000, None, 1_000).await.unwrap().len(), 2);
        assert!(q.claim(10, 10_000, None, 1_050).await.unwrap().is_empty());
        assert_eq!(q.throttled_until(1_050).await.unwrap(), Some(1_100));
        assert_eq!(q.claim(10, 10_000, None, 1_100).await.unwrap().len(), 1);
        // try-take draws from the same bucket.
        assert_eq!(q.try_take(None, 1, 1_200).await.unwrap(), Taken::Granted(0));
        assert!(q.claim(10, 10_000, None, 1_250).await.unwrap().is_empty());
        assert!(matches!(
            q.try_take(None, 3, 1_250).await,
            Err(AlkError::InvalidArgument(_))
        ));
        // A bucket full again is swept: it reads as full without its row.
        q.sweep_expired(5_000).await.unwrap();
        assert!(
            crate::stream::tests::sql_rows(&q.store, "SELECT * FROM rate_buckets")
                .await
                .is_empty()
        );
        assert_eq!(q.claim(10, 10_000, None, 5_000).await.unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_rate_per_group_gives_each_group_its_own_bucket() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path()).await;
        let rate = RateLimit {
            capacity: 1,
            refill: 1,
            interval_ms: 1_000,
        };
        q.set_limits(&QueueLimits {
            group_concurrency: 5,
            rate: Some(rate),
            rate_per_group: true,
            ..QueueLimits::default()
        })
        .await
        .unwrap();
        q.send(&[text("a1"), text("a2")], &grouped("a", 0), 0)
            .await
            .unwrap();
        q.send(&[text("b1"), text("b2")], &grouped("b", 0), 0)
            .await
            .unwrap();
        q.send(&[text("x1"), text("x2")], &Stamp::plain(0), 0)
            .await
            .unwrap();
        let got = q.claim(10, 100_000, None, 0).await.unwrap();
        let mut names: Vec<String> = got
            .iter()
            .map(|d| match &d.payload {
                Payload::Text(t) => t.clone(),
                _ => unreachable!(),
            })
            .collect();
        names.sort();
        assert_eq!(names, ["a1", "b1", "x1"]);
        assert!(q.claim(10, 100_000, None, 10).await.unwrap().is_empty());
        assert_eq!(q.throttled_until(10).await.unwrap(), Some(1_000));
        assert_eq!(
            q.try_take(Some("a"), 1, 10).await.unwrap(),
            Taken::WaitMs(990)
        );
        assert_eq!(q.claim(10, 100_000, None, 1_000).await.unwrap().len(), 3);
    }

    #[tokio::test]
    async fn a_unique_key_holds_while_its_message_lives_or_until_its_time() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path()).await;
        let live = Unique {
            key: "k".into(),
            until: None,
        };
        let first = q
            .send_unique(&text("1"), &Stamp::plain(0), &live, 0)
            .await
            .unwrap();
        assert!(!first.duplicate);
        let again = q
            .send_unique(&text("2"), &Stamp::plain(0), &live, 0)
            .await
            .unwrap();
        assert_eq!((again.id, again.duplicate), (first.id, true));
        let d = q.claim(1, 1_000, None, 0).await.unwrap().remove(0);
        q.ack(&r(&d.receipt)).await.unwrap();
        let after = q
            .send_unique(&text("3"), &Stamp::plain(1), &live, 1)
            .await
            .unwrap();
        assert!(!after.duplicate && after.id > first.id);
        // Held until a time, whatever becomes of the message.
        let timed = Unique {
            key: "t".into(),
            until: Some(100),
        };
        let t = q
            .send_unique(&text("t"), &Stamp::plain(0), &timed, 0)
            .await
            .unwrap();
        q.cancel(t.id).await.unwrap();
        assert!(
            q.send_unique(&text("t"), &Stamp::plain(50), &timed, 50)
                .await
                .unwrap()
                .duplicate
        );
        let later = Unique {
            key: "t".into(),
            until: Some(300),
        };
        assert!(
            !q.send_unique(&text("t"), &Stamp::plain(100), &later, 100)
                .await
                .unwrap()
                .duplicate
        );
        // The sweep deletes keys that no longer hold, and only those.
        let gone = Unique {
            key: "gone".into(),
            until: None,
        };
        let g = q
            .send_unique(&text("g"), &Stamp::plain(0), &gone, 0)
            .await
            .unwrap();
        q.cancel(g.id).await.unwrap();
        assert_eq!(q.sweep_expired(400).await.unwrap(), 0);
        let keys =
            crate::stream::tests::sql_rows(&q.store, "SELECT key FROM unique_keys ORDER BY key")
                .await;
        assert_eq!(keys, ["Text(\"k\")"]);
    }

    #[tokio::test]
    async fn a_completed_message_keeps_its_result_until_its_time() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path()).await;
        q.send(&[text("a"), text("b")], &grouped("g", 0), 0)
            .await
            .unwrap();
        let a = q.claim(1, 1_000, None, 0).await.unwrap().remove(0);
        assert_eq!(
            q.complete(&r(&a.receipt), &text("done"), 500, 10)
                .await
                .unwrap(),
            Settled::Done
        );
        // The group left its place to the next message.
        let b = q.claim(1, 1_000, None, 10).await.unwrap().remove(0);
        let got = q.result(a.id, 20).await.unwrap().unwrap();
        assert_eq!(
            (got.payload, got.completed_at, got.expires_at),
            (text("done"), 10, 500)
        );
        assert_eq!(q.result(a.id, 500).await.unwrap(), None);
        // A stale receipt stores nothing.
        assert_eq!(
            q.complete(&r(&a.receipt), &text("again"), 900, 30)
                .await
                .unwrap(),
            Settled::Gone
        );
        assert_eq!(
            q.result(a.id, 30).await.unwrap().unwrap().payload,
            text("done")
        );
        q.complete(&r(&b.receipt), &text("b"), 100, 30)
            .await
            .unwrap();
        // cancel and purge leave results alone.
        assert!(!q.cancel(b.id).await.unwrap());
        q.purge().await.unwrap();
        assert!(q.result(b.id, 40).await.unwrap().is_some());
        assert!(q.delete_result(b.id, 40).await.unwrap());
        assert!(!q.delete_result(b.id, 40).await.unwrap());
        assert_eq!(q.sweep_expired(600).await.unwrap(), 0);
        assert!(
            crate::stream::tests::sql_rows(&q.store, "SELECT id FROM results")
                .await
                .is_empty()
        );
    }

    const DOC_V4: &str = include_str!("../../../docs/formats/localqueue.v4.md");

    #[test]
    fn the_v4_document_pins_the_ddl_and_every_statement() {
        crate::assert_document_pins(
            "localqueue.v4.md",
            DOC_V4,
            &[
                ("DDL_V4", DDL_V4),
                ("UPGRADE_V4", UPGRADE_V4),
                ("PUT_BACK", PUT_BACK),
                ("PLAIN_PICK_V4", PLAIN_PICK_V4),
                ("TAKE_V4", TAKE_V4),
                ("TAKE_IDS_V4", TAKE_IDS_V4),
                ("RETAKE_V4", RETAKE_V4),
                ("RETAKE_IDS_V4", RETAKE_IDS_V4),
                ("DUE_V4", DUE_V4),
                ("PICKED_V4", PICKED_V4),
                ("IN_FLIGHT_V4", IN_FLIGHT_V4),
                ("NACK_V4", NACK_V4),
                ("NEXT_DUE", NEXT_DUE),
                ("NEXT_DUE_BELOW", NEXT_DUE_BELOW),
                ("NEXT_DUE_REST", NEXT_DUE_REST),
                ("STATS_V4", STATS_V4),
            ],
        );
        // A new v4 file is the v3 DDL followed by the v4 upgrade; older
        // files get the upgrades they lack, in order.
        assert_eq!(DDL_V4, format!("{DDL_V3}{UPGRADE_V4}"));
        assert_eq!(UPGRADE_V2_V4, format!("{UPGRADE_V3}{UPGRADE_V4}"));
        assert_eq!(UPGRADE_V1_V4, format!("{UPGRADE}{UPGRADE_V3}{UPGRADE_V4}"));
        // The bounds the document names.
        assert!(DOC_V4.contains("up to 1,000") && CLAIM_WORK == 1000);
        assert!(DOC_V4.contains("or 16\npriorities were seen") && NEXT_DUE_STEPS == 16);
    }

    #[tokio::test]
    async fn every_v4_statement_is_index_driven_and_sorts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path()).await;
        assert!(q.is_v4().await.unwrap());
        let i = |n: i64| Value::Integer(n);
        let t = |s: &str| Value::Text(s.into());
        for (sql, params, index) in [
            (PUT_BACK, vec![i(0), i(10)], "idx_messages_claimed"),
            (
                PLAIN_PICK_V4,
                vec![i(0), i(0), i(10)],
                "idx_messages_waiting",
            ),
            // Its guard against lapsed deliveries: one seek.
            (
                PLAIN_PICK_V4,
                vec![i(0), i(0), i(10)],
                "idx_messages_claimed",
            ),
            (TAKE_V4, vec![i(1), t("u"), i(1)], "INTEGER PRIMARY KEY"),
            (RETAKE_V4, vec![i(1), t("u"), i(1)], "INTEGER PRIMARY KEY"),
            (
                RETAKE_IDS_V4,
                vec![i(1), t("u"), t("[1]")],
                "INTEGER PRIMARY KEY",
            ),
            (
                TAKE_IDS_V4,
                vec![i(1), t("u"), t("[1]")],
                "INTEGER PRIMARY KEY",
            ),
            (DUE_V4, vec![i(0), i(0), i(10)], "idx_messages_waiting"),
            (PICKED_V4, vec![t("[1]")], "INTEGER PRIMARY KEY"),
            (IN_FLIGHT_V4, vec![i(0), i(10)], "idx_messages_claimed"),
            (NACK_V4, vec![i(1), t("u"), i(0)], "INTEGER PRIMARY KEY"),
            (NEXT_DUE, vec![], "idx_messages_group_due"),
            (NEXT_DUE, vec![], "idx_messages_claimed"),
            (NEXT_DUE, vec![], "idx_messages_waiting"),
            (NEXT_DUE_BELOW, vec![i(0)], "idx_messages_waiting"),
            (NEXT_DUE_REST, vec![i(0)], "idx_messages_waiting"),
        ] {
            let plan = plan_of(&q, sql, params).await;
            assert!(plan.contains(index), "{sql}: {plan}");
            assert!(
                !plan.contains("SORTER") && !plan.contains("TEMP B-TREE"),
                "{sql}: {plan}"
            );
            assert!(
                !plan.contains("SCAN messages |") && !plan.ends_with("SCAN messages"),
                "{sql}: {plan}"
            );
        }
    }

    /// `ready_at` of every message, by id (negative: claimed).
    async fn ready_times(q: &QueueStore) -> Vec<String> {
        crate::stream::tests::sql_rows(&q.store, "SELECT id, ready_at FROM messages ORDER BY id")
            .await
    }

    #[tokio::test]
    async fn a_v4_claim_takes_a_message_out_of_the_waiting_order_and_puts_it_back_in_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path()).await;
        q.send(&[text("a"), text("b"), text("c")], &Stamp::plain(10), 10)
            .await
            .unwrap();
        // "a" claimed until 100: its ready time is negated, -1 - 10.
        let a = q.claim(1, 100, None, 20).await.unwrap().remove(0);
        assert_eq!(a.id, 1);
        assert_eq!(
            ready_times(&q).await,
            [
                "Integer(1) | Integer(-11)",
                "Integer(2) | Integer(10)",
                "Integer(3) | Integer(10)"
            ]
        );
        let b = q.claim(1, 1_000, None, 50).await.unwrap().remove(0);
        assert_eq!(b.id, 2);
        // "a" lapsed at 100: the next claim puts it back, and takes it
        // before "c", in its old place; its old receipt is stale after.
        let stats = q.stats(150).await.unwrap();
        assert_eq!((stats.waiting, stats.in_flight), (2, 1));
        let got = q.claim(2, 1_000, None, 150).await.unwrap();
        assert_eq!(
            got.iter().map(|d| (d.id, d.attempt)).collect::<Vec<_>>(),
            [(1, 2), (3, 1)]
        );
        assert_eq!(q.ack(&r(&a.receipt)).await.unwrap(), Settled::Stale);
        // A nack puts "b" back at once, in its place before "a" and "c"
        // (claimed again, so not waiting).
        assert_eq!(q.nack(&r(&b.receipt), 160).await.unwrap(), Settled::Done);
        assert_eq!(
            ready_times(&q).await,
            [
                "Integer(1) | Integer(-11)",
                "Integer(2) | Integer(10)",
                "Integer(3) | Integer(-11)"
            ]
        );
        assert_eq!(q.next_visible(160).await.unwrap(), Some(160));
        let again = q.claim(5, 1_000, None, 170).await.unwrap();
        assert_eq!(again.iter().map(|d| d.id).collect::<Vec<_>>(), [2]);
        // A retry gives the message its new due time as its ready time.
        q.retry(&r(&again[0].receipt), "later", RetryDelay::Fixed(320), 180)
            .await
            .unwrap();
        assert!(
            ready_times(&q)
                .await
                .contains(&"Integer(2) | Integer(500)".to_string())
        );
        // With a cap, the messages in flight are the claimed ones not lapsed.
        q.set_limits(&limited(|l| l.max_in_flight = Some(3)))
            .await
            .unwrap();
        q.send(&[text("d"), text("e")], &Stamp::plain(190), 190)
            .await
            .unwrap();
        let capped = q.claim(5, 1_000, None, 200).await.unwrap();
        assert_eq!(capped.iter().map(|d| d.id).collect::<Vec<_>>(), [4]);
    }

    #[tokio::test]
    async fn a_v4_claim_is_not_stopped_by_its_own_lapsed_deliveries_and_the_next_puts_them_back() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path()).await;
        let msgs: Vec<Payload> = (0..4).map(|i| text(&format!("m{i}"))).collect();
        q.send(&msgs, &Stamp::plain(0), 0).await.unwrap();
        let ids = |got: &[Delivery]| got.iter().map(|d| (d.id, d.attempt)).collect::<Vec<_>>();
        // Claimed until 5 at 5: each delivery has lapsed as soon as it is
        // made, and the claim still takes all three it asked for.
        let got = q.claim(3, 5, None, 5).await.unwrap();
        assert_eq!(ids(&got), [(1, 1), (2, 1), (3, 1)]);
        // The next claim puts them back and takes them again in their
        // place, before the one never claimed; it costs more statements
        // than a plain claim, as it must.
        let (again, n) = statements_of(q.claim(4, 1_000, None, 5)).await;
        assert_eq!(ids(&again.unwrap()), [(1, 2), (2, 2), (3, 2), (4, 1)]);
        q.send(&[text("m4")], &Stamp::plain(5), 5).await.unwrap();
        let (plain, on_plain) = statements_of(q.claim(1, 1_000, None, 5)).await;
        assert_eq!(ids(&plain.unwrap()), [(5, 1)]);
        assert!(
            n > on_plain,
            "{n} statements with lapsed deliveries, {on_plain} without"
        );
        for d in &got {
            assert_eq!(q.ack(&r(&d.receipt)).await.unwrap(), Settled::Stale);
        }
    }

    #[tokio::test]
    async fn the_walks_claim_keeps_a_negated_ready_time_and_negates_a_waiting_one() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path()).await;
        q.send(&[text("a"), text("b"), text("c")], &Stamp::plain(10), 10)
            .await
            .unwrap();
        // Message 1 claimed: its ready time negated, -1 - 10.
        assert_eq!(q.claim(1, 100, None, 10).await.unwrap()[0].id, 1);
        let retake = |sql: &'static str, ids: &'static str| {
            q.store.run_write(move |conn: Connection| {
                Box::pin(async move {
                    let n = if ids.starts_with('[') {
                        exec(&conn, sql, (500, "u", ids)).await?
                    } else {
                        exec(&conn, sql, (500, "u", ids.parse::<i64>().unwrap())).await?
                    };
                    Ok(n)
                })
            })
        };
        // Claimed and waiting, one by one and together: a negated time is
        // kept, a waiting one negated; every row gets the new delivery.
        assert_eq!(retake(RETAKE_V4, "1").await.unwrap(), 1);
        assert_eq!(retake(RETAKE_IDS_V4, "[1,2]").await.unwrap(), 2);
        assert_eq!(retake(RETAKE_V4, "3").await.unwrap(), 1);
        let rows = crate::stream::tests::sql_rows(
            &q.store,
            "SELECT id, ready_at, attempt, visible_at, receipt_handle FROM messages ORDER BY id",
        )
        .await;
        let row = |id: i64, attempt: i64| {
            format!(
                "Integer({id}) | Integer(-11) | Integer({attempt}) | Integer(500) | Text(\"u\")"
            )
        };
        assert_eq!(rows, [row(1, 3), row(2, 1), row(3, 1)]);
    }

    /// The earliest due time of any message, read from every row.
    async fn earliest_due(q: &QueueStore) -> Option<i64> {
        let rows =
            crate::stream::tests::sql_rows(&q.store, "SELECT MIN(visible_at) FROM messages").await;
        rows[0]
            .strip_prefix("Integer(")
            .and_then(|n| n.strip_suffix(')'))
            .map(|n| n.parse().unwrap())
    }

    #[tokio::test]
    async fn the_v4_next_due_time_is_the_earliest_of_every_index_and_every_priority() {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path()).await;
        assert_eq!(q.next_visible(0).await.unwrap(), None);
        let at = |priority: i32, due_at: i64, group: Option<&str>| {
            let mut stamp = Stamp::plain(0);
            stamp.priority = priority;
            stamp.due_at = due_at;
            stamp.group = group.map(str::to_string);
            stamp
        };
        // Delayed messages at 40 priorities, the earliest at the lowest
        // priority, so every step and the read of the rest are needed.
        for p in 0..40 {
            q.send(&[text("x")], &at(p, 9_610 + i64::from(p) * 10, None), 0)
                .await
                .unwrap();
        }
        // Later at the same priorities: never the first of theirs.
        q.send(&[text("y")], &at(39, 20_000, None), 0)
            .await
            .unwrap();
        assert_eq!(q.next_visible(0).await.unwrap(), Some(9_610));
        assert_eq!(earliest_due(&q).await, Some(9_610));
        // A group's delayed message, earlier still.
        q.send(&[text("g")], &at(0, 9_000, Some("g")), 0)
            .await
            .unwrap();
        assert_eq!(q.next_visible(0).await.unwrap(), Some(9_000));
        // A claimed message's deadline, earlier still.
        q.send(&[text("now")], &at(5, 0, None), 0).await.unwrap();
        let d = q.claim(1, 500, None, 0).await.unwrap().remove(0);
        assert_eq!(q.next_visible(0).await.unwrap(), Some(500));
        assert_eq!(earliest_due(&q).await, Some(500));
        // Nothing due at 400; due by 600 (the lapsed delivery).
        assert!(q.next_visible(400).await.unwrap().unwrap() > 400);
        assert!(q.next_visible(600).await.unwrap().unwrap() <= 600);
        // Acked: the group's message is the earliest again; then due.
        q.ack(&r(&d.receipt)).await.unwrap();
        assert_eq!(q.next_visible(600).await.unwrap(), Some(9_000));
        assert!(q.next_visible(9_700).await.unwrap().unwrap() <= 9_700);
    }

    /// A `localqueue.v3` file as hosts before v4 made it.
    async fn v3_file(dir: &Path, name: &str) -> QueueStore {
        let store = open_store(&queue_path(dir, name), &FORMAT_V3, StoreOptions::default())
            .await
            .unwrap();
        store.close_for_test();
        let q = QueueStore::open(dir, name, StoreOptions::default())
            .await
            .unwrap();
        assert!(q.is_v3().await.unwrap() && !q.is_v4().await.unwrap());
        q
    }

    #[tokio::test]
    async fn a_migrated_v3_store_reads_and_claims_as_it_did() {
        let dir = tempfile::tempdir().unwrap();
        let mut stamps = Vec::new();
        for (priority, due_at, group) in [
            (0, 10, None),
            (0, 10, None),
            (3, 10, None),
            (0, 5_000, None),
            (0, 10, Some("g")),
            (0, 10, Some("g")),
            (1, 10, None),
        ] {
            let mut stamp = Stamp::plain(10);
            stamp.priority = priority;
            stamp.due_at = due_at;
            stamp.group = group.map(str::to_string);
            stamps.push(stamp);
        }
        let (live, views, stats) = {
            let q = v3_file(dir.path(), "q").await;
            for stamp in &stamps {
                q.send(&[text("m")], stamp, 10).await.unwrap();
            }
            // Priority 3 (id 3) in flight until 10,000; priority 1 (id 7)
            // lapsed at 100; the group's head (id 5) in flight; id 1
            // delivered and given back.
            let got = q.claim(1, 10_000, Some(3), 20).await.unwrap();
            assert_eq!(got[0].id, 3);
            let lapsing = q.claim(1, 100, Some(1), 20).await.unwrap();
            assert_eq!(lapsing[0].id, 7);
            let mut rest = q.claim(2, 10_000, None, 20).await.unwrap();
            rest.sort_by_key(|d| d.id);
            let ids: Vec<u64> = rest.iter().map(|d| d.id).collect();
            assert_eq!(ids, [1, 5]);
            q.nack(&r(&rest[0].receipt), 30).await.unwrap();
            let mut views = Vec::new();
            for id in 1..=7 {
                views.push(q.job(id, 200).await.unwrap());
            }
            let stats = q.stats(200).await.unwrap();
            q.store.close_for_test();
            (got[0].receipt.clone(), views, stats)
        };
        assert_eq!(
            QueueStore::migrate(dir.path(), "q", StoreOptions::default())
                .await
                .unwrap(),
            Migrated::Upgraded {
                from: "localqueue.v3"
            }
        );
        let q = queue(dir.path()).await;
        assert!(q.is_v4().await.unwrap());
        // Every message reads as it did, and the counts are the same.
        for id in 1..=7 {
            assert_eq!(
                q.job(id, 200).await.unwrap(),
                views[id as usize - 1],
                "{id}"
            );
        }
        assert_eq!(q.stats(200).await.unwrap(), stats);
        assert!(q.next_visible(200).await.unwrap().unwrap() <= 200);
        // The order holds: the lapsed priority 1 first, then the one given
        // back, then the next waiting one; the group stays parked; the
        // delayed one waits.
        let got = q.claim(10, 10_000, None, 200).await.unwrap();
        assert_eq!(
            got.iter().map(|d| (d.id, d.attempt)).collect::<Vec<_>>(),
            [(7, 2), (1, 2), (2, 1)]
        );
        assert_eq!(q.ack(&r(&live)).await.unwrap(), Settled::Done);
        // The group's second message is due (behind its head), as v3 said.
        assert_eq!(q.next_visible(200).await.unwrap(), Some(10));
        assert_eq!(earliest_due(&q).await, Some(10));
    }
}
