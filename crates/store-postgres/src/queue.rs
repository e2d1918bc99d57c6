//! Queues: rows of `messages`, ids from the queue's row in `queues`,
//! claims with `FOR UPDATE SKIP LOCKED`; the round of the message groups in
//! `groups`, dead letters in `dead`.
//!
//! Receipts are the core's [`Receipt`] (`{id}:{uuid}`, the UUID of the
//! claim, as on every engine); the core settles one that does not parse
//! before it reaches this file.
//!
//! Locks are taken in one order: a group's row before the rows of its
//! messages, and a queue's counter row after the group row of a send.
//! Whatever adds a message to a group or takes one out holds the group's
//! row, and a group is deleted, when its last message leaves, by a
//! statement that starts after that lock was granted, so it sees every
//! message a racing send committed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use alk_store::jobs::{
    Beat, EXPIRED_ERROR, JobInfo, JobResult, JobState, QueueLimits, Retried, RetryDelay, Sent,
    Stamp, UNGROUPED_BUCKET, Unique, lapsed_error,
};
use alk_store::queue::{AckedBatch, Delivery, Payload, QueueEngine, QueueStats, Receipt, Settled};
use alk_store::rate::{Bucket, RateLimit, Taken, check_take};
use alk_store::{AlkError, AlkResult};
use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::clock::Clockwork;
use crate::conn::{Conn, Fail, Inner};

// The statements of this module (each listed by name in
// `sql::STATEMENTS`, which a test checks against the format document).

/// Appends messages: `$2` of them, kinds `$3`, bodies `$4`, sent at `$5`,
/// with the stamp: group `$6` (or NULL), priority `$7`, due at `$8`,
/// attempt limit `$9`, backoff base `$10`, expiry `$11`. A message with a
/// group first joins it to the round (`joined`): a new group comes in
/// at the highest place served so far, an existing one keeps its place
/// and takes the higher priority. The group row, then the queue's counter
/// row (which hands out the ids) stay locked until commit, so ids of one
/// queue commit in order.
pub const Q_SEND: &str = "WITH joined AS (INSERT INTO alk.groups AS g (queue, group_key, priority, served) \
SELECT $1::text, $6::bytea, $7::integer, coalesce((SELECT max(served) FROM alk.groups WHERE queue = $1), 0) \
WHERE $6::bytea IS NOT NULL ON CONFLICT (queue, group_key) DO UPDATE SET priority = greatest(g.priority, EXCLUDED.priority) RETURNING 1), \
n AS (INSERT INTO alk.queues AS q (queue, last_id) SELECT $1, $2::bigint WHERE (SELECT count(*) FROM joined) >= 0 \
ON CONFLICT (queue) DO UPDATE SET last_id = q.last_id + $2 RETURNING last_id) \
INSERT INTO alk.messages (queue, id, payload_type, payload_data, enqueued_at, visible_at, ready_at, priority, group_key, max_attempts, backoff_base_ms, expires_at) \
SELECT $1, n.last_id - $2 + t.ord, t.kind, t.data, $5::bigint, $8::bigint, $8, $7, $6, $9::integer, $10::bigint, $11::bigint FROM n, \
unnest($3::text[], $4::bytea[]) WITH ORDINALITY AS t(kind, data, ord) RETURNING id";
/// Claims up to `$4` due messages without a group of priority `$3` or
/// more, by priority, ready time and id, hidden until `$5`, under the
/// claim's UUID `$6`; with `$7`, only while the queue has no group and no
/// limits. Rows locked by another claimer are skipped, and the update
/// checks again that each row is still due. Rows: kind 0, a claimed
/// message; 1, a due message that expired; 2, a due message whose attempts
/// are used up (neither is claimed); 3, the queue has a group or limits
/// (with `$7`: nothing was claimed).
pub const Q_CLAIM_LANE: &str = "WITH refused AS (SELECT $7::boolean AND (EXISTS (SELECT 1 FROM alk.groups AS g \
WHERE g.queue = $1 AND g.group_key <> ''::bytea) OR EXISTS (SELECT 1 FROM alk.queue_limits AS l WHERE l.queue = $1)) AS r), \
due AS (SELECT m.id, m.attempt, (m.expires_at <= $2) IS TRUE AS expired, \
(m.attempt >= m.max_attempts) IS TRUE AS spent FROM alk.messages AS m \
WHERE m.queue = $1 AND m.group_key IS NULL AND m.visible_at <= $2 AND m.priority >= $3 \
AND NOT (SELECT r FROM refused) \
ORDER BY m.priority DESC, m.ready_at, m.id LIMIT $4 FOR UPDATE SKIP LOCKED), \
took AS (UPDATE alk.messages AS m SET visible_at = $5, attempt = m.attempt + 1, receipt_handle = $6 FROM due \
WHERE m.queue = $1 AND m.id = due.id AND m.visible_at <= $2 AND NOT due.expired AND NOT due.spent \
RETURNING m.id, m.payload_type, m.payload_data, m.attempt, m.priority, m.ready_at, m.group_key, m.max_attempts) \
SELECT 0, id, payload_type, payload_data, attempt, priority, ready_at, group_key, max_attempts FROM took \
UNION ALL SELECT CASE WHEN expired THEN 1 ELSE 2 END, id, NULL, NULL, attempt, NULL, NULL, NULL, NULL FROM due WHERE expired OR spent \
UNION ALL SELECT 3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM refused WHERE r";
/// The groups of priority `$3` or more with a message due at `$2` among
/// their first `$5` messages (by id: the group's window), in the order of
/// the round (served longest ago first, then the first to join), at most
/// `$4`: each group's key, place, the due messages of its window (by id),
/// and the place of the messages without a group. With a rate per group
/// of interval `$6` (else NULL), a group whose bucket is empty at `$2` (no
/// token left, no interval ended since) is passed over.
pub const Q_HEADS: &str = "SELECT g.group_key, g.served, h.ids, \
coalesce((SELECT l.served FROM alk.groups AS l WHERE l.queue = $1 AND l.group_key = ''::bytea), 0) \
FROM alk.groups AS g CROSS JOIN LATERAL (SELECT array_agg(w.id ORDER BY w.id) FILTER (WHERE w.visible_at <= $2) AS ids \
FROM (SELECT m.id, m.visible_at FROM alk.messages AS m \
WHERE m.queue = $1 AND m.group_key = g.group_key ORDER BY m.id LIMIT $5) AS w) AS h \
WHERE g.queue = $1 AND g.group_key <> ''::bytea AND g.priority >= $3 AND h.ids IS NOT NULL \
AND ($6::bigint IS NULL OR NOT EXISTS (SELECT 1 FROM alk.rate_buckets AS b WHERE b.queue = $1 AND b.bucket = g.group_key \
AND b.tokens <= 0 AND b.since + $6 > $2)) \
ORDER BY g.served, g.seq LIMIT $4";
/// Locks up to `$3` of the groups `$2`, in the order of the round, passing
/// over groups another claimer holds; the keys locked.
pub const Q_LOCK_ROUND: &str = "SELECT group_key FROM alk.groups WHERE queue = $1 AND group_key = ANY($2::bytea[]) \
ORDER BY served, seq LIMIT $3 FOR UPDATE SKIP LOCKED";
/// Claims the messages `$3` that are due at `$2` and still among the first
/// `$6` messages of their group, hidden until `$4`, under the claim's UUID
/// `$5`; rows as [`Q_CLAIM_LANE`]'s (kinds 0 to 2).
pub const Q_CLAIM_HEADS: &str = "WITH due AS (SELECT m.id, m.attempt, (m.expires_at <= $2) IS TRUE AS expired, \
(m.attempt >= m.max_attempts) IS TRUE AS spent FROM alk.messages AS m \
WHERE m.queue = $1 AND m.id = ANY($3::bigint[]) AND m.visible_at <= $2 \
AND (SELECT count(*) FROM (SELECT 1 FROM alk.messages AS o WHERE o.queue = $1 AND o.group_key = m.group_key AND o.id < m.id \
LIMIT $6) AS w) < $6 FOR UPDATE), \
took AS (UPDATE alk.messages AS m SET visible_at = $4, attempt = m.attempt + 1, receipt_handle = $5 FROM due \
WHERE m.queue = $1 AND m.id = due.id AND m.visible_at <= $2 AND NOT due.expired AND NOT due.spent \
RETURNING m.id, m.payload_type, m.payload_data, m.attempt, m.priority, m.ready_at, m.group_key, m.max_attempts) \
SELECT 0, id, payload_type, payload_data, attempt, priority, ready_at, group_key, max_attempts FROM took \
UNION ALL SELECT CASE WHEN expired THEN 1 ELSE 2 END, id, NULL, NULL, attempt, NULL, NULL, NULL, NULL FROM due WHERE expired OR spent";
/// Moves the messages `$2` to the dead letters with the errors `$3`, at
/// `$5`; a message whose receipt in `$4` is not NULL only while that
/// receipt is current. The ids moved, and their groups.
pub const Q_BURY: &str = "WITH gone AS (DELETE FROM alk.messages AS m \
USING unnest($2::bigint[], $3::bytea[], $4::uuid[]) AS u(id, error, receipt) \
WHERE m.queue = $1 AND m.id = u.id AND (u.receipt IS NULL OR m.receipt_handle = u.receipt) \
RETURNING m.queue, m.id, m.payload_type, m.payload_data, m.enqueued_at, m.visible_at, m.ready_at, m.attempt, m.priority, \
m.group_key, m.max_attempts, m.backoff_base_ms, m.expires_at, u.error) \
INSERT INTO alk.dead (queue, id, payload_type, payload_data, enqueued_at, visible_at, ready_at, attempt, priority, \
group_key, max_attempts, backoff_base_ms, expires_at, last_error, died_at) \
SELECT queue, id, payload_type, payload_data, enqueued_at, visible_at, ready_at, attempt, priority, \
group_key, max_attempts, backoff_base_ms, expires_at, error, $5::bigint FROM gone RETURNING id, group_key";
/// Moves the participants `$2` that delivered messages to a claim (the
/// empty key: the messages without a group) to the back of the round, in
/// that order: groups no longer there are passed over, and the messages
/// without a group move only while the queue has a group.
pub const Q_SERVE: &str = "WITH top AS (SELECT coalesce(max(served), 0) AS m FROM alk.groups WHERE queue = $1), \
s AS (SELECT t.key, top.m + row_number() OVER (ORDER BY t.ord) AS served FROM top, unnest($2::bytea[]) WITH ORDINALITY AS t(key, ord) \
WHERE EXISTS (SELECT 1 FROM alk.groups AS e WHERE e.queue = $1 AND e.group_key <> ''::bytea AND (t.key = ''::bytea OR e.group_key = t.key))), \
lane AS (INSERT INTO alk.groups AS g (queue, group_key, seq, priority, served) SELECT $1::text, s.key, 0, 0, s.served FROM s \
WHERE s.key = ''::bytea ON CONFLICT (queue, group_key) DO UPDATE SET served = EXCLUDED.served) \
UPDATE alk.groups AS g SET served = s.served FROM s WHERE g.queue = $1 AND g.group_key = s.key AND s.key <> ''::bytea";
/// Locks the groups `$2`, in key order, waiting for their holders.
pub const Q_GROUP_LOCK: &str = "SELECT group_key FROM alk.groups WHERE queue = $1 AND group_key = ANY($2::bytea[]) \
ORDER BY group_key FOR UPDATE";
/// Deletes those of the groups `$2` that have no message left.
pub const Q_GROUP_DROP: &str = "DELETE FROM alk.groups AS g WHERE g.queue = $1 AND g.group_key = ANY($2::bytea[]) \
AND g.group_key <> ''::bytea AND NOT EXISTS (SELECT 1 FROM alk.messages AS m WHERE m.queue = $1 AND m.group_key = g.group_key)";
/// A message's group, receipt, attempts and backoff base.
pub const Q_LOOKUP: &str = "SELECT group_key, receipt_handle, attempt, max_attempts, backoff_base_ms \
FROM alk.messages WHERE queue = $1 AND id = $2";
/// Makes a message due at `$4`, by its current receipt.
pub const Q_NACK: &str =
    "UPDATE alk.messages SET visible_at = $4 WHERE queue = $1 AND id = $2 AND receipt_handle = $3";
/// Moves the deadline of a delivery to `$4`, by its current receipt,
/// unless it passed by `$5`.
pub const Q_HEARTBEAT: &str = "UPDATE alk.messages SET visible_at = $4 \
WHERE queue = $1 AND id = $2 AND receipt_handle = $3 AND visible_at > $5";
/// Ends a delivery as failed, by its current receipt: due and ready again
/// at `$4`, with the error `$5`; the receipt is no longer current.
pub const Q_RETRY: &str = "UPDATE alk.messages SET visible_at = $4, ready_at = $4, receipt_handle = NULL, last_error = $5 \
WHERE queue = $1 AND id = $2 AND receipt_handle = $3";
/// Deletes the messages of every current receipt (pairs of `$2`, `$3`);
/// only those without a group unless `$4`.
pub const Q_ACK_BATCH: &str = "DELETE FROM alk.messages AS m USING unnest($2::bigint[], $3::uuid[]) AS r(id, receipt) \
WHERE m.queue = $1 AND m.id = r.id AND m.receipt_handle = r.receipt AND (m.group_key IS NULL OR $4::boolean) \
RETURNING m.id, m.receipt_handle";
/// Which of the ids `$2` still exist, and their groups.
pub const Q_EXISTING: &str =
    "SELECT id, group_key FROM alk.messages WHERE queue = $1 AND id = ANY($2::bigint[])";
/// Deletes a message, whatever its state; its group.
pub const Q_CANCEL: &str =
    "DELETE FROM alk.messages WHERE queue = $1 AND id = $2 RETURNING group_key";
/// Deletes a dead letter.
pub const Q_CANCEL_DEAD: &str = "DELETE FROM alk.dead WHERE queue = $1 AND id = $2";
/// Message `$2`, in the queue or in the dead letters.
pub const Q_JOB: &str = "SELECT id, payload_type, payload_data, receipt_handle IS NOT NULL, visible_at, attempt, max_attempts, \
priority, group_key, enqueued_at, expires_at, last_error, NULL::bigint FROM alk.messages WHERE queue = $1 AND id = $2 \
UNION ALL SELECT id, payload_type, payload_data, false, visible_at, attempt, max_attempts, \
priority, group_key, enqueued_at, expires_at, last_error, died_at FROM alk.dead WHERE queue = $1 AND id = $2";
/// The groups of the messages that expired by `$2`.
pub const Q_EXPIRED_GROUPS: &str = "SELECT DISTINCT group_key FROM alk.messages \
WHERE queue = $1 AND expires_at <= $2 AND group_key IS NOT NULL";
/// Moves every message that expired by `$2` to the dead letters with the
/// error `$3`; the ids moved, and their groups.
pub const Q_SWEEP: &str = "WITH gone AS (DELETE FROM alk.messages WHERE queue = $1 AND expires_at <= $2 \
RETURNING queue, id, payload_type, payload_data, enqueued_at, visible_at, ready_at, attempt, priority, \
group_key, max_attempts, backoff_base_ms, expires_at) \
INSERT INTO alk.dead (queue, id, payload_type, payload_data, enqueued_at, visible_at, ready_at, attempt, priority, \
group_key, max_attempts, backoff_base_ms, expires_at, last_error, died_at) \
SELECT queue, id, payload_type, payload_data, enqueued_at, visible_at, ready_at, attempt, priority, \
group_key, max_attempts, backoff_base_ms, expires_at, $3::bytea, $2::bigint FROM gone RETURNING id, group_key";
/// Up to `$3` dead letters with ids above `$2`, by id (columns as
/// [`Q_JOB`]'s).
pub const Q_DEAD_PAGE: &str = "SELECT id, payload_type, payload_data, false, visible_at, attempt, max_attempts, \
priority, group_key, enqueued_at, expires_at, last_error, died_at FROM alk.dead \
WHERE queue = $1 AND id > $2 ORDER BY id LIMIT $3";
/// Up to `$3` live messages with ids above `$2`, by id, as inspected.
pub const Q_JOBS_PAGE: &str = "SELECT id, payload_type, payload_data, receipt_handle IS NOT NULL, visible_at, attempt, max_attempts, \
priority, group_key, enqueued_at, expires_at, last_error, NULL::bigint FROM alk.messages \
WHERE queue = $1 AND id > $2 ORDER BY id LIMIT $3";
/// Locks the dead letters `$2`; their groups and priorities.
pub const Q_DEAD_LOOKUP: &str = "SELECT id, group_key, priority FROM alk.dead \
WHERE queue = $1 AND id = ANY($2::bigint[]) ORDER BY id FOR UPDATE";
/// Joins the groups `$2` (each once) to the round with the priorities
/// `$3`, in that order, as a send does.
pub const Q_JOIN: &str = "INSERT INTO alk.groups AS g (queue, group_key, priority, served) \
SELECT $1::text, t.key, t.priority, coalesce((SELECT max(served) FROM alk.groups WHERE queue = $1), 0) \
FROM unnest($2::bytea[], $3::integer[]) WITH ORDINALITY AS t(key, priority, ord) ORDER BY t.ord \
ON CONFLICT (queue, group_key) DO UPDATE SET priority = greatest(g.priority, EXCLUDED.priority)";
/// Sends the dead letters `$2` again as new messages, due and ready at
/// `$3`, attempts reset, expiry cleared, other options and last error kept.
/// New ids come from the queue's counter row, one per dead letter, in the
/// order of `$4` (the ids found, in the caller's order).
pub const Q_REDRIVE: &str = "WITH back AS (DELETE FROM alk.dead WHERE queue = $1 AND id = ANY($2::bigint[]) \
RETURNING id, payload_type, payload_data, priority, group_key, max_attempts, backoff_base_ms, last_error), \
n AS (INSERT INTO alk.queues AS q (queue, last_id) SELECT $1, count(*) FROM back HAVING count(*) > 0 \
ON CONFLICT (queue) DO UPDATE SET last_id = q.last_id + EXCLUDED.last_id RETURNING last_id) \
INSERT INTO alk.messages (queue, id, payload_type, payload_data, enqueued_at, visible_at, ready_at, attempt, priority, \
group_key, max_attempts, backoff_base_ms, expires_at, last_error) \
SELECT $1, n.last_id - (SELECT count(*) FROM back) + array_position($4::bigint[], b.id), b.payload_type, b.payload_data, \
$3::bigint, $3::bigint, $3::bigint, 0, b.priority, b.group_key, b.max_attempts, b.backoff_base_ms, NULL, b.last_error \
FROM n, back AS b RETURNING id";
/// Deletes every dead letter of a queue.
pub const Q_PURGE_DEAD: &str = "DELETE FROM alk.dead WHERE queue = $1";
/// Deletes every group of a queue (the place of the messages without a
/// group stays).
pub const Q_PURGE_GROUPS: &str =
    "DELETE FROM alk.groups WHERE queue = $1 AND group_key <> ''::bytea";
/// When the next message becomes due.
pub const Q_NEXT_VISIBLE: &str = "SELECT min(visible_at) FROM alk.messages WHERE queue = $1";
/// The counts of queue `$1` at `$2`, in one statement (one snapshot): due
/// messages and the oldest one's send time, in flight, delayed (each a
/// range of `messages_visible`), dead letters, groups with messages (the
/// row `''` is the messages without a group), groups with a message in
/// flight.
pub const Q_STATS: &str = "SELECT (SELECT count(*) FROM alk.messages WHERE queue = $1 AND visible_at <= $2), (SELECT min(enqueued_at) FROM alk.messages WHERE queue = $1 AND visible_at <= $2), (SELECT count(*) FROM alk.messages WHERE queue = $1 AND visible_at > $2 AND receipt_handle IS NOT NULL), (SELECT count(*) FROM alk.messages WHERE queue = $1 AND visible_at > $2 AND receipt_handle IS NULL), (SELECT count(*) FROM alk.dead WHERE queue = $1), (SELECT count(*) FROM alk.groups WHERE queue = $1 AND group_key <> ''::bytea), (SELECT count(DISTINCT group_key) FROM alk.messages WHERE queue = $1 AND visible_at > $2 AND receipt_handle IS NOT NULL AND group_key IS NOT NULL)";
/// Deletes every message of a queue (its ids are never reused).
pub const Q_PURGE: &str = "DELETE FROM alk.messages WHERE queue = $1";

/// Holds unique key `$2` of the queue for the rest of the transaction:
/// the row is made (holding nothing: message 0, no time) unless it exists,
/// and locked either way; the message holding it and until when. A sender
/// that finds the row locked waits for the holder's commit.
pub const Q_UNIQUE_HOLD: &str = "INSERT INTO alk.unique_keys AS u (queue, key, id, held_until) VALUES ($1, $2, 0, NULL) \
ON CONFLICT (queue, key) DO UPDATE SET id = u.id RETURNING id, held_until";
/// Gives unique key `$2` to message `$3`, until `$4` (NULL: while the
/// message is live).
pub const Q_UNIQUE_SET: &str =
    "UPDATE alk.unique_keys SET id = $3, held_until = $4 WHERE queue = $1 AND key = $2";
/// Locks up to 1,000 unique keys whose time passed at `$2` (a range of
/// `unique_keys_until`) and up to 1,000 held while their message is live
/// whose message is gone (a walk of `unique_keys_live`), passing over keys
/// a sender holds; their keys.
pub const Q_UNIQUE_STALE: &str = "SELECT u.key FROM alk.unique_keys AS u WHERE u.queue = $1 AND u.key IN (\
(SELECT t.key FROM alk.unique_keys AS t WHERE t.queue = $1 AND t.held_until <= $2 ORDER BY t.held_until LIMIT 1000) \
UNION ALL (SELECT l.key FROM alk.unique_keys AS l WHERE l.queue = $1 AND l.held_until IS NULL \
AND NOT EXISTS (SELECT 1 FROM alk.messages AS m WHERE m.queue = $1 AND m.id = l.id) LIMIT 1000)) \
FOR UPDATE SKIP LOCKED";
/// Deletes those of the unique keys `$3` (locked by this transaction) that
/// still hold nothing at `$2`.
pub const Q_UNIQUE_DROP: &str = "DELETE FROM alk.unique_keys AS u WHERE u.queue = $1 AND u.key = ANY($3::bytea[]) \
AND (u.held_until <= $2 OR (u.held_until IS NULL AND NOT EXISTS (SELECT 1 FROM alk.messages AS m WHERE m.queue = $1 AND m.id = u.id)))";
/// The queue's limits (no row: the defaults).
pub const Q_LIMITS: &str = "SELECT group_concurrency, max_in_flight, rate_capacity, rate_refill, rate_interval_ms, rate_per_group \
FROM alk.queue_limits WHERE queue = $1";
/// The queue's limits, locked until commit: claims of a queue with a cap
/// or a rate take turns on this row.
pub const Q_LIMITS_HOLD: &str = "SELECT group_concurrency, max_in_flight, rate_capacity, rate_refill, rate_interval_ms, rate_per_group \
FROM alk.queue_limits WHERE queue = $1 FOR UPDATE";
/// Sets the queue's limits.
pub const Q_LIMITS_SET: &str = "INSERT INTO alk.queue_limits AS l (queue, group_concurrency, max_in_flight, rate_capacity, rate_refill, \
rate_interval_ms, rate_per_group) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (queue) DO UPDATE SET \
group_concurrency = EXCLUDED.group_concurrency, max_in_flight = EXCLUDED.max_in_flight, rate_capacity = EXCLUDED.rate_capacity, \
rate_refill = EXCLUDED.rate_refill, rate_interval_ms = EXCLUDED.rate_interval_ms, rate_per_group = EXCLUDED.rate_per_group";
/// Back to the defaults: the queue's row goes (its buckets stay).
pub const Q_LIMITS_CLEAR: &str = "DELETE FROM alk.queue_limits WHERE queue = $1";
/// How many messages are in flight at `$2`, counted up to `$3` (the cap):
/// a range of `messages_in_flight`, which holds only delivered messages.
pub const Q_IN_FLIGHT: &str = "SELECT count(*) FROM (SELECT 1 FROM alk.messages \
WHERE queue = $1 AND receipt_handle IS NOT NULL AND visible_at > $2 LIMIT $3) AS f";
/// Holds the rate buckets `$2` (distinct keys) of the queue for the rest of
/// the transaction: those without a row are made full (`$3` tokens since
/// `$4`), all are locked; each one's key, tokens and start of interval.
pub const Q_BUCKETS_HOLD: &str = "INSERT INTO alk.rate_buckets AS b (queue, bucket, tokens, since) \
SELECT $1::text, k.key, $3::bigint, $4::bigint FROM unnest($2::bytea[]) AS k(key) ORDER BY k.key \
ON CONFLICT (queue, bucket) DO UPDATE SET tokens = b.tokens RETURNING bucket, tokens, since";
/// Writes back the rate buckets `$2` (held by this transaction) with the
/// tokens `$3` and interval starts `$4`.
pub const Q_BUCKETS_SAVE: &str = "UPDATE alk.rate_buckets AS b SET tokens = u.tokens, since = u.since \
FROM unnest($2::bytea[], $3::bigint[], $4::bigint[]) AS u(bucket, tokens, since) \
WHERE b.queue = $1 AND b.bucket = u.bucket";
/// Deletes up to 1,000 of the queue's rate buckets whose interval started
/// at or before `$2` (full again by then, as a bucket without a row is),
/// passing over buckets a claim holds (a range of `rate_buckets_since`).
pub const Q_BUCKETS_SWEEP: &str = "DELETE FROM alk.rate_buckets AS b USING (SELECT bucket FROM alk.rate_buckets \
WHERE queue = $1 AND since <= $2 ORDER BY since LIMIT 1000 FOR UPDATE SKIP LOCKED) AS x \
WHERE b.queue = $1 AND b.bucket = x.bucket";
/// The queue's rate buckets: only the queue-wide one (key `''`) unless
/// `$2`.
pub const Q_BUCKETS: &str = "SELECT bucket, tokens, since FROM alk.rate_buckets \
WHERE queue = $1 AND (bucket = ''::bytea OR $2::boolean)";
/// Stores the result of message `$2` (replacing one stored before).
pub const Q_RESULT_PUT: &str = "INSERT INTO alk.results (queue, id, payload_type, payload_data, completed_at, expires_at) \
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (queue, id) DO UPDATE SET payload_type = EXCLUDED.payload_type, \
payload_data = EXCLUDED.payload_data, completed_at = EXCLUDED.completed_at, expires_at = EXCLUDED.expires_at";
/// The result of message `$2`, unless its time ran out by `$3`.
pub const Q_RESULT: &str = "SELECT payload_type, payload_data, completed_at, expires_at FROM alk.results \
WHERE queue = $1 AND id = $2 AND expires_at > $3";
/// Deletes the result of message `$2`; whether it was still kept at `$3`.
pub const Q_RESULT_DELETE: &str =
    "DELETE FROM alk.results WHERE queue = $1 AND id = $2 RETURNING expires_at > $3";
/// Deletes up to 1,000 results whose time ran out by `$2` (a range of
/// `results_expiry`).
pub const Q_RESULTS_SWEEP: &str = "DELETE FROM alk.results AS r USING (SELECT id FROM alk.results \
WHERE queue = $1 AND expires_at <= $2 ORDER BY expires_at LIMIT 1000) AS x WHERE r.queue = $1 AND r.id = x.id";

/// The key of the messages without a group in `groups` (group keys are
/// never empty), and of the queue-wide rate bucket (or, with a rate per
/// group, the bucket of the messages without a group) in `rate_buckets`.
const LANE: &[u8] = UNGROUPED_BUCKET.as_bytes();

/// About the most rows of group windows one round of a claim reads (the
/// groups it looks at times the window): what one claim may cost while it
/// holds its locks, whatever guests sent. What is left is for the next
/// round or claim.
const CLAIM_WORK: usize = 1000;

/// The most rows one statement of `sweep-expired` deletes of each kind.
const SWEEP_BATCH: u64 = 1000;

/// The statements of the queue store, for one schema.
struct Statements {
    send: String,
    claim_lane: String,
    heads: String,
    lock_round: String,
    claim_heads: String,
    bury: String,
    serve: String,
    group_lock: String,
    group_drop: String,
    lookup: String,
    nack: String,
    heartbeat: String,
    retry: String,
    ack_batch: String,
    existing: String,
    cancel: String,
    cancel_dead: String,
    job: String,
    expired_groups: String,
    sweep: String,
    dead_page: String,
    jobs_page: String,
    dead_lookup: String,
    join: String,
    redrive: String,
    purge_dead: String,
    purge_groups: String,
    next_visible: String,
    purge: String,
    stats: String,
    pub(crate) unique: UniqueStatements,
    unique_stale: String,
    unique_drop: String,
    limits: String,
    limits_hold: String,
    limits_set: String,
    limits_clear: String,
    in_flight: String,
    buckets_hold: String,
    buckets_save: String,
    buckets: String,
    result_put: String,
    result: String,
    result_delete: String,
    results_sweep: String,
    buckets_sweep: String,
}

/// The statements of a send with a unique key, for one schema (a queue's
/// own, and those of a transaction).
pub(crate) struct UniqueStatements {
    pub(crate) send: String,
    hold: String,
    lookup: String,
    set: String,
}

impl UniqueStatements {
    pub(crate) fn new(s: &crate::sql::Sql) -> UniqueStatements {
        UniqueStatements {
            send: s.get(Q_SEND),
            hold: s.get(Q_UNIQUE_HOLD),
            lookup: s.get(Q_LOOKUP),
            set: s.get(Q_UNIQUE_SET),
        }
    }
}

/// One queue.
pub(crate) struct PgQueue {
    inner: Arc<Inner>,
    name: String,
    sql: Statements,
}

/// Runs a prepared (and cached) statement; its rows.
async fn rows<C: GenericClient + Sync>(
    c: &C,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, Fail> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.query(&stmt, params).await?)
}

/// Runs a prepared (and cached) statement; how many rows it changed.
async fn exec<C: GenericClient + Sync>(
    c: &C,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64, Fail> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.execute(&stmt, params).await?)
}

/// Sends `payloads` to `queue` with `stamp` at `now` (host times, moved to
/// the database's clock here) on `c` — a pooled connection or an open
/// transaction — by [`Q_SEND`] (`sql`, for the engine's schema); the
/// new ids, in increasing order. Every send runs this: a queue's `send`,
/// an enqueue inside a transaction, the jobs of a schedule's firing.
pub(crate) async fn send_on<C: GenericClient + Sync>(
    c: &C,
    sql: &str,
    clock: &Clockwork,
    queue: &str,
    payloads: &[Payload],
    stamp: &Stamp,
    now: i64,
) -> Result<Vec<i64>, Fail> {
    let now = clock.to_db(now);
    let due = clock.to_db(stamp.due_at);
    let expires_at = stamp.expires_at.map(|t| clock.to_db(t));
    let count = payloads.len() as i64;
    let kinds: Vec<&str> = payloads.iter().map(|p| p.parts().0).collect();
    let bodies: Vec<&[u8]> = payloads.iter().map(|p| p.parts().1.as_bytes()).collect();
    let group: Option<&[u8]> = stamp.group.as_deref().map(str::as_bytes);
    let max_attempts: Option<i32> = stamp
        .max_attempts
        .map(|n| i32::try_from(n).unwrap_or(i32::MAX));
    let base: Option<i64> = stamp
        .backoff_base_ms
        .map(|b| i64::try_from(b).unwrap_or(i64::MAX));
    let found = rows(
        c,
        sql,
        &[
            &queue,
            &count,
            &kinds,
            &bodies,
            &now,
            &group,
            &stamp.priority,
            &due,
            &max_attempts,
            &base,
            &expires_at,
        ],
    )
    .await?;
    let mut ids = found
        .iter()
        .map(|r| r.try_get::<_, i64>(0).map_err(Fail::from))
        .collect::<Result<Vec<i64>, Fail>>()?;
    ids.sort_unstable();
    Ok(ids)
}

/// Sends one message with `stamp` to `queue` unless `unique`'s key is taken
/// at `now` (host times, moved to the database's clock here), on `c`: an
/// open transaction, a queue's own or a cross-mechanism one. The key's row
/// is held first ([`Q_UNIQUE_HOLD`]: senders of one key take turns), then
/// its holder is looked up by a statement that starts after the hold was
/// granted, so it sees whatever the previous holder committed; a free key
/// is given to the new message in the same transaction. A taken key
/// changes nothing (the row holding nothing that a hold makes is never
/// left: such a key is free).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn send_unique_on<C: GenericClient + Sync>(
    c: &C,
    sql: &UniqueStatements,
    clock: &Clockwork,
    queue: &str,
    payload: &Payload,
    stamp: &Stamp,
    unique: &Unique,
    now: i64,
) -> Result<Sent, Fail> {
    let key = unique.key.as_bytes();
    let held = rows(c, &sql.hold, &[&queue, &key]).await?;
    let row = held.first().ok_or_else(|| {
        Fail::Alk(AlkError::Internal(
            "holding a unique key returned no row".into(),
        ))
    })?;
    let holder: i64 = row.try_get(0)?;
    let until: Option<i64> = row.try_get(1)?;
    let live = until.is_none()
        && holder > 0
        && !rows(c, &sql.lookup, &[&queue, &holder]).await?.is_empty();
    if holder > 0 && Unique::blocks(until, live, clock.to_db(now)) {
        return Ok(Sent {
            id: holder as u64,
            duplicate: true,
        });
    }
    let ids = send_on(
        c,
        &sql.send,
        clock,
        queue,
        std::slice::from_ref(payload),
        stamp,
        now,
    )
    .await?;
    let id = *ids
        .first()
        .ok_or_else(|| Fail::Alk(AlkError::Internal("a send returned no id".into())))?;
    let until = unique.until.map(|t| clock.to_db(t));
    exec(c, &sql.set, &[&queue, &key, &id, &until]).await?;
    Ok(Sent {
        id: id as u64,
        duplicate: false,
    })
}

/// A queue's limits from its row of `queue_limits` (none: the defaults).
fn limits_of(row: Option<&Row>) -> Result<QueueLimits, Fail> {
    let Some(row) = row else {
        return Ok(QueueLimits::default());
    };
    let wide = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
    let rate = match (
        row.try_get::<_, Option<i64>>(2)?,
        row.try_get::<_, Option<i64>>(3)?,
        row.try_get::<_, Option<i64>>(4)?,
    ) {
        (Some(capacity), Some(refill), Some(interval)) => Some(RateLimit {
            capacity: wide(capacity),
            refill: wide(refill),
            interval_ms: u64::try_from(interval).unwrap_or(1),
        }),
        _ => None,
    };
    Ok(QueueLimits {
        group_concurrency: count(row.try_get(0)?).max(1),
        max_in_flight: row.try_get::<_, Option<i32>>(1)?.map(count),
        rate,
        rate_per_group: rate.is_some() && row.try_get::<_, bool>(5)?,
    })
}

/// What one claim may still take under the queue's limits, and the rate
/// buckets it holds (rows locked by its transaction).
struct Gate {
    /// Messages the queue's cap and queue-wide rate still allow.
    left: usize,
    /// The group window.
    window: i64,
    rate: Option<RateLimit>,
    per_group: bool,
    /// The buckets held, each as of the claim's `now`, with the tokens
    /// taken from it so far.
    buckets: HashMap<Vec<u8>, (Bucket, usize)>,
}

impl Gate {
    /// Whether a bucket's tokens bound each participant (a rate per group).
    fn per_group(&self) -> bool {
        self.per_group
    }

    /// Tokens participant `key` may still take (its bucket must be held).
    fn room(&self, key: &[u8]) -> usize {
        if !self.per_group {
            return usize::MAX;
        }
        self.buckets.get(key).map_or(0, |(b, taken)| {
            (b.tokens.max(0) as usize).saturating_sub(*taken)
        })
    }

    /// Counts `n` messages claimed from participant `key`.
    fn spend(&mut self, key: &[u8], n: usize) {
        if n == 0 {
            return;
        }
        self.left = self.left.saturating_sub(n);
        if self.rate.is_some() {
            let bucket = if self.per_group { key } else { LANE };
            if let Some((_, taken)) = self.buckets.get_mut(bucket) {
                *taken += n;
            }
        }
    }
}

/// Hands the messages `due` of participant `key` that a claim statement
/// took (found in `by_id`) to the claim, in that order, counting them
/// against `gate` and noting `key` as served.
fn deliver(
    key: &[u8],
    due: &[i64],
    by_id: &mut HashMap<i64, Delivery>,
    gate: &mut Gate,
    out: &mut Vec<Delivery>,
    served: &mut Vec<Vec<u8>>,
) {
    let mut n = 0;
    for id in due {
        if let Some(d) = by_id.remove(id) {
            out.push(d);
            n += 1;
        }
    }
    if n > 0 {
        if !served.iter().any(|s| s == key) {
            served.push(key.to_vec());
        }
        gate.spend(key, n);
    }
}

/// What a message's row says about its current delivery and retries.
struct Found {
    group: Option<Vec<u8>>,
    receipt: Option<Uuid>,
    attempt: u32,
    max_attempts: Option<u32>,
    backoff_base_ms: Option<u64>,
}

/// What one claim statement did: the messages claimed (with their ready
/// time), the due messages it left for the dead letters, and whether it
/// found the queue has groups.
#[derive(Default)]
struct Step {
    took: Vec<(i64, Delivery)>,
    unfit: Vec<(i64, String)>,
    grouped: bool,
}

impl Step {
    /// How many messages the step gave to the claim, claimed or not.
    fn gave(&self) -> usize {
        self.took.len() + self.unfit.len()
    }
}

fn corrupt(queue: &str, id: i64, what: &str) -> Fail {
    Fail::Alk(AlkError::Internal(format!(
        "queue {queue:?}: message {id} has {what}, which the schema does not allow"
    )))
}

fn payload_of(queue: &str, id: i64, kind: &str, data: Vec<u8>) -> Result<Payload, Fail> {
    let text =
        String::from_utf8(data).map_err(|_| corrupt(queue, id, "a body that is not UTF-8"))?;
    match kind {
        "json" => Ok(Payload::Json(text)),
        "text" => Ok(Payload::Text(text)),
        other => Err(corrupt(queue, id, &format!("payload type {other:?}"))),
    }
}

/// A text column kept as bytes (Postgres `text` cannot hold NUL).
fn text_of(
    queue: &str,
    id: i64,
    what: &str,
    data: Option<Vec<u8>>,
) -> Result<Option<String>, Fail> {
    data.map(|d| {
        String::from_utf8(d).map_err(|_| corrupt(queue, id, &format!("a {what} that is not UTF-8")))
    })
    .transpose()
}

fn count(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

impl PgQueue {
    pub(crate) fn new(inner: Arc<Inner>, name: &str) -> PgQueue {
        let s = &inner.sql;
        let sql = Statements {
            send: s.get(Q_SEND),
            claim_lane: s.get(Q_CLAIM_LANE),
            heads: s.get(Q_HEADS),
            lock_round: s.get(Q_LOCK_ROUND),
            claim_heads: s.get(Q_CLAIM_HEADS),
            bury: s.get(Q_BURY),
            serve: s.get(Q_SERVE),
            group_lock: s.get(Q_GROUP_LOCK),
            group_drop: s.get(Q_GROUP_DROP),
            lookup: s.get(Q_LOOKUP),
            nack: s.get(Q_NACK),
            heartbeat: s.get(Q_HEARTBEAT),
            retry: s.get(Q_RETRY),
            ack_batch: s.get(Q_ACK_BATCH),
            existing: s.get(Q_EXISTING),
            cancel: s.get(Q_CANCEL),
            cancel_dead: s.get(Q_CANCEL_DEAD),
            job: s.get(Q_JOB),
            expired_groups: s.get(Q_EXPIRED_GROUPS),
            sweep: s.get(Q_SWEEP),
            dead_page: s.get(Q_DEAD_PAGE),
            jobs_page: s.get(Q_JOBS_PAGE),
            dead_lookup: s.get(Q_DEAD_LOOKUP),
            join: s.get(Q_JOIN),
            redrive: s.get(Q_REDRIVE),
            purge_dead: s.get(Q_PURGE_DEAD),
            purge_groups: s.get(Q_PURGE_GROUPS),
            next_visible: s.get(Q_NEXT_VISIBLE),
            purge: s.get(Q_PURGE),
            stats: s.get(Q_STATS),
            unique: UniqueStatements::new(s),
            unique_stale: s.get(Q_UNIQUE_STALE),
            unique_drop: s.get(Q_UNIQUE_DROP),
            limits: s.get(Q_LIMITS),
            limits_hold: s.get(Q_LIMITS_HOLD),
            limits_set: s.get(Q_LIMITS_SET),
            limits_clear: s.get(Q_LIMITS_CLEAR),
            in_flight: s.get(Q_IN_FLIGHT),
            buckets_hold: s.get(Q_BUCKETS_HOLD),
            buckets_save: s.get(Q_BUCKETS_SAVE),
            buckets: s.get(Q_BUCKETS),
            result_put: s.get(Q_RESULT_PUT),
            result: s.get(Q_RESULT),
            result_delete: s.get(Q_RESULT_DELETE),
            results_sweep: s.get(Q_RESULTS_SWEEP),
            buckets_sweep: s.get(Q_BUCKETS_SWEEP),
        };
        PgQueue {
            sql,
            name: name.to_string(),
            inner,
        }
    }

    async fn lookup<C: GenericClient + Sync>(&self, c: &C, id: i64) -> Result<Option<Found>, Fail> {
        let found = rows(c, &self.sql.lookup, &[&self.name, &id]).await?;
        let Some(row) = found.first() else {
            return Ok(None);
        };
        Ok(Some(Found {
            group: row.try_get(0)?,
            receipt: row.try_get(1)?,
            attempt: count(row.try_get(2)?),
            max_attempts: row.try_get::<_, Option<i32>>(3)?.map(count),
            backoff_base_ms: row
                .try_get::<_, Option<i64>>(4)?
                .map(|b| u64::try_from(b).unwrap_or(0)),
        }))
    }

    /// How a receipt of message `id` that changed nothing settles: stale
    /// while the message exists, else gone.
    async fn missed<C: GenericClient + Sync>(&self, c: &C, id: i64) -> Result<Settled, Fail> {
        Ok(if self.lookup(c, id).await?.is_some() {
            Settled::Stale
        } else {
            Settled::Gone
        })
    }

    /// Locks the groups `keys` (sorted, each once), waiting for holders.
    async fn lock_groups<C: GenericClient + Sync>(
        &self,
        c: &C,
        keys: &[Vec<u8>],
    ) -> Result<(), Fail> {
        if !keys.is_empty() {
            rows(c, &self.sql.group_lock, &[&self.name, &keys]).await?;
        }
        Ok(())
    }

    /// Deletes those of the groups `keys` (locked by this transaction)
    /// that have no message left.
    async fn drop_empty<C: GenericClient + Sync>(
        &self,
        c: &C,
        keys: &[Vec<u8>],
    ) -> Result<(), Fail> {
        if !keys.is_empty() {
            exec(c, &self.sql.group_drop, &[&self.name, &keys]).await?;
        }
        Ok(())
    }

    /// Moves messages to the dead letters at `died_at` (database time):
    /// each `(id, error, receipt)`, by its current receipt when one is
    /// given. The groups they leave must be locked by this transaction;
    /// those left empty are deleted. The ids moved.
    async fn bury<C: GenericClient + Sync>(
        &self,
        c: &C,
        dead: &[(i64, String, Option<Uuid>)],
        died_at: i64,
    ) -> Result<Vec<i64>, Fail> {
        if dead.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = dead.iter().map(|d| d.0).collect();
        let errors: Vec<&[u8]> = dead.iter().map(|d| d.1.as_bytes()).collect();
        let receipts: Vec<Option<Uuid>> = dead.iter().map(|d| d.2).collect();
        let moved = rows(
            c,
            &self.sql.bury,
            &[&self.name, &ids, &errors, &receipts, &died_at],
        )
        .await?;
        let mut buried = Vec::with_capacity(moved.len());
        let mut groups: Vec<Vec<u8>> = Vec::new();
        for row in &moved {
            buried.push(row.try_get::<_, i64>(0)?);
            if let Some(g) = row.try_get::<_, Option<Vec<u8>>>(1)? {
                groups.push(g);
            }
        }
        groups.sort();
        groups.dedup();
        self.drop_empty(c, &groups).await?;
        Ok(buried)
    }

    /// Moves the message of a current receipt to the dead letters with
    /// `error` at `died_at` (database time) — for a message of a group, in
    /// one transaction holding the group's lock; whether it moved.
    async fn bury_current(
        &self,
        c: &mut Conn,
        id: i64,
        receipt: Uuid,
        group: Option<Vec<u8>>,
        error: &str,
        died_at: i64,
    ) -> Result<bool, Fail> {
        let dead = [(id, error.to_string(), Some(receipt))];
        match group {
            None => Ok(!self.bury(&**c, &dead, died_at).await?.is_empty()),
            Some(g) => {
                let tx = c.transaction().await?;
                self.lock_groups(&*tx, std::slice::from_ref(&g)).await?;
                let moved = !self.bury(&*tx, &dead, died_at).await?.is_empty();
                tx.commit().await?;
                Ok(moved)
            }
        }
    }

    /// Reads the rows of a claim statement; receipts under `claim`.
    fn step(&self, found: Vec<Row>, claim: Uuid) -> Result<Step, Fail> {
        let queue = &self.name;
        let mut step = Step::default();
        for row in found {
            let kind: i32 = row.try_get(0)?;
            if kind == 3 {
                step.grouped = true;
                continue;
            }
            let id: i64 = row.try_get(1)?;
            let attempt = count(row.try_get(4)?);
            match kind {
                0 => {
                    let kind: &str = row.try_get(2)?;
                    let payload = payload_of(queue, id, kind, row.try_get(3)?)?;
                    let group = text_of(queue, id, "group", row.try_get(7)?)?;
                    step.took.push((
                        row.try_get(6)?,
                        Delivery {
                            id: id as u64,
                            payload,
                            receipt: Receipt::new(id as u64, claim).to_string(),
                            attempt,
                            priority: row.try_get(5)?,
                            group,
                            max_attempts: row.try_get::<_, Option<i32>>(8)?.map(count),
                        },
                    ));
                }
                1 => step.unfit.push((id, EXPIRED_ERROR.to_string())),
                _ => step.unfit.push((id, lapsed_error(attempt))),
            }
        }
        Ok(step)
    }

    /// The messages without a group a claim takes: up to `max` of priority
    /// `floor` or more, with `only_ungrouped` only while the queue has no
    /// group; in claim order.
    #[allow(clippy::too_many_arguments)]
    async fn claim_lane<C: GenericClient + Sync>(
        &self,
        c: &C,
        max: usize,
        now: i64,
        floor: i32,
        visible_until: i64,
        claim: Uuid,
        only_ungrouped: bool,
    ) -> Result<Step, Fail> {
        let max = max as i64;
        let found = rows(
            c,
            &self.sql.claim_lane,
            &[
                &self.name,
                &now,
                &floor,
                &max,
                &visible_until,
                &claim,
                &only_ungrouped,
            ],
        )
        .await?;
        let mut step = self.step(found, claim)?;
        step.took
            .sort_by_key(|(ready_at, d)| (std::cmp::Reverse(d.priority), *ready_at, d.id));
        Ok(step)
    }

    /// The limits a claim inside `tx` follows at `now` (database time): a
    /// queue with a cap or a rate holds its `queue_limits` row, so that
    /// its claims take turns, and counts what is in flight after the row
    /// was granted; a queue-wide rate's bucket is held too.
    async fn gate<C: GenericClient + Sync>(&self, tx: &C, now: i64) -> Result<Gate, Fail> {
        let mut limits = limits_of(rows(tx, &self.sql.limits, &[&self.name]).await?.first())?;
        if limits.max_in_flight.is_some() || limits.rate.is_some() {
            limits = limits_of(
                rows(tx, &self.sql.limits_hold, &[&self.name])
                    .await?
                    .first(),
            )?;
        }
        let mut gate = Gate {
            left: usize::MAX,
            window: i64::from(limits.group_concurrency.max(1)),
            rate: limits.rate,
            per_group: limits.rate_per_group,
            buckets: HashMap::new(),
        };
        if let Some(cap) = limits.max_in_flight {
            let most = i64::from(cap);
            let found = rows(tx, &self.sql.in_flight, &[&self.name, &now, &most]).await?;
            let busy = found
                .first()
                .map(|r| r.try_get::<_, i64>(0))
                .transpose()?
                .unwrap_or(0)
                .max(0) as usize;
            gate.left = (cap as usize).saturating_sub(busy);
        }
        if gate.rate.is_some() && !gate.per_group {
            self.hold_buckets(tx, &mut gate, &[LANE.to_vec()], now)
                .await?;
            let tokens = gate.buckets.get(LANE).map_or(0, |(b, _)| b.tokens.max(0));
            gate.left = gate.left.min(tokens as usize);
        }
        Ok(gate)
    }

    /// Holds the rate buckets `keys` not yet held by this claim (each at
    /// `now`; a bucket without a row starts full).
    async fn hold_buckets<C: GenericClient + Sync>(
        &self,
        tx: &C,
        gate: &mut Gate,
        keys: &[Vec<u8>],
        now: i64,
    ) -> Result<(), Fail> {
        let Some(rate) = gate.rate else {
            return Ok(());
        };
        let mut new: Vec<&[u8]> = keys
            .iter()
            .map(Vec::as_slice)
            .filter(|k| !gate.buckets.contains_key(*k))
            .collect();
        new.sort();
        new.dedup();
        if new.is_empty() {
            return Ok(());
        }
        let full = i64::from(rate.capacity);
        for row in rows(tx, &self.sql.buckets_hold, &[&self.name, &new, &full, &now]).await? {
            let key: Vec<u8> = row.try_get(0)?;
            let b = Bucket {
                tokens: row.try_get(1)?,
                since: row.try_get(2)?,
            };
            gate.buckets.insert(key, (b.at(&rate, now), 0));
        }
        Ok(())
    }

    /// Writes back the buckets a claim took tokens from, less those
    /// tokens (a bucket it held but took nothing from is left as it was:
    /// its refill is worked out again by the next reader).
    async fn save_buckets<C: GenericClient + Sync>(&self, tx: &C, gate: &Gate) -> Result<(), Fail> {
        let mut keys: Vec<&[u8]> = Vec::new();
        let mut tokens: Vec<i64> = Vec::new();
        let mut since: Vec<i64> = Vec::new();
        for (k, (b, taken)) in gate.buckets.iter().filter(|(_, (_, t))| *t > 0) {
            keys.push(k);
            tokens.push((b.tokens - *taken as i64).max(0));
            since.push(b.since);
        }
        if keys.is_empty() {
            return Ok(());
        }
        exec(
            tx,
            &self.sql.buckets_save,
            &[&self.name, &keys, &tokens, &since],
        )
        .await?;
        Ok(())
    }

    /// The rounds of a claim that groups (or limits) take part in, inside
    /// `tx`, with each group's row locked while it is served: of each
    /// group, the due messages of its window, within what `gate` allows.
    /// `out` holds what the claim delivered so far, `served` who delivered
    /// it (the empty key: the messages without a group), in the order they
    /// first did.
    #[allow(clippy::too_many_arguments)]
    async fn rounds<C: GenericClient + Sync>(
        &self,
        tx: &C,
        max: usize,
        now: i64,
        floor: i32,
        visible_until: i64,
        claim: Uuid,
        gate: &mut Gate,
        out: &mut Vec<Delivery>,
        served: &mut Vec<Vec<u8>>,
    ) -> Result<(), Fail> {
        loop {
            let remaining = max.saturating_sub(out.len()).min(gate.left);
            if remaining == 0 {
                break;
            }
            // At most about CLAIM_WORK rows of windows per round. With a
            // rate per group the statement passes over groups whose bucket
            // is empty; one of them may still be found empty once locked
            // (a racing claim), so a few more groups than needed are read.
            let work = (CLAIM_WORK / gate.window.max(1) as usize).max(1);
            let (limit, interval) = match gate.rate.filter(|_| gate.per_group()) {
                Some(rate) => (
                    work,
                    Some(i64::try_from(rate.interval_ms).unwrap_or(i64::MAX)),
                ),
                None => (remaining.min(work), None),
            };
            let limit = limit as i64;
            let heads = rows(
                tx,
                &self.sql.heads,
                &[&self.name, &now, &floor, &limit, &gate.window, &interval],
            )
            .await?;
            let mut before: Vec<(Vec<u8>, Vec<i64>)> = Vec::new();
            let mut after: Vec<(Vec<u8>, Vec<i64>)> = Vec::new();
            for row in &heads {
                let key: Vec<u8> = row.try_get(0)?;
                let place: i64 = row.try_get(1)?;
                let due: Vec<i64> = row.try_get(2)?;
                let lane_place: i64 = row.try_get(3)?;
                // The messages without a group come first among equals:
                // they joined the round before every group.
                if place < lane_place {
                    before.push((key, due));
                } else {
                    after.push((key, due));
                }
            }
            let before = self.lock_round(tx, before, remaining).await?;
            let mut keys: Vec<Vec<u8>> = before.iter().map(|(k, _)| k.clone()).collect();
            keys.push(LANE.to_vec());
            if gate.per_group() {
                self.hold_buckets(tx, gate, &keys, now).await?;
            }
            let mut picked: Vec<(Vec<u8>, Vec<i64>)> = Vec::new();
            let mut taken = 0;
            for (key, due) in before {
                let n = (remaining - taken).min(gate.room(&key)).min(due.len());
                if n > 0 {
                    taken += n;
                    picked.push((key, due[..n].to_vec()));
                }
            }
            let split = picked.len();
            let quota = remaining - taken;
            let lane_max = quota.min(gate.room(LANE));
            let lane = if lane_max > 0 {
                self.claim_lane(tx, lane_max, now, floor, visible_until, claim, false)
                    .await?
            } else {
                Step::default()
            };
            let mut left = quota - lane.gave().min(quota);
            let after = if left > 0 {
                self.lock_round(tx, after, left).await?
            } else {
                Vec::new()
            };
            if gate.per_group() {
                let keys: Vec<Vec<u8>> = after.iter().map(|(k, _)| k.clone()).collect();
                self.hold_buckets(tx, gate, &keys, now).await?;
            }
            for (key, due) in after {
                let n = left.min(gate.room(&key)).min(due.len());
                if n > 0 {
                    left -= n;
                    picked.push((key, due[..n].to_vec()));
                }
            }
            if picked.is_empty() && lane.gave() == 0 {
                break;
            }
            let ids: Vec<i64> = picked
                .iter()
                .flat_map(|(_, due)| due.iter().copied())
                .collect();
            let heads = if ids.is_empty() {
                Step::default()
            } else {
                let found = rows(
                    tx,
                    &self.sql.claim_heads,
                    &[&self.name, &now, &ids, &visible_until, &claim, &gate.window],
                )
                .await?;
                self.step(found, claim)?
            };
            let mut by_id: HashMap<i64, Delivery> = heads
                .took
                .into_iter()
                .map(|(_, d)| (d.id as i64, d))
                .collect();
            for (key, due) in &picked[..split] {
                deliver(key, due, &mut by_id, gate, out, served);
            }
            if !lane.took.is_empty() {
                let lane_ids: Vec<i64> = lane.took.iter().map(|(_, d)| d.id as i64).collect();
                by_id.extend(lane.took.into_iter().map(|(_, d)| (d.id as i64, d)));
                deliver(LANE, &lane_ids, &mut by_id, gate, out, served);
            }
            for (key, due) in &picked[split..] {
                deliver(key, due, &mut by_id, gate, out, served);
            }
            let unfit: Vec<(i64, String, Option<Uuid>)> = lane
                .unfit
                .into_iter()
                .chain(heads.unfit)
                .map(|(id, e)| (id, e, None))
                .collect();
            if unfit.is_empty() {
                break;
            }
            self.bury(tx, &unfit, now).await?;
        }
        Ok(())
    }

    /// Moves the participants of a claim to the back of the round, in the
    /// order `served` (see [`Q_SERVE`]).
    async fn serve<C: GenericClient + Sync>(&self, tx: &C, served: &[Vec<u8>]) -> Result<(), Fail> {
        if !served.is_empty() {
            exec(tx, &self.sql.serve, &[&self.name, &served]).await?;
        }
        Ok(())
    }

    /// Locks up to `max` of the groups of `picked` (in round order),
    /// passing over those another claimer holds; those locked, in order.
    async fn lock_round<C: GenericClient + Sync, T>(
        &self,
        tx: &C,
        picked: Vec<(Vec<u8>, T)>,
        max: usize,
    ) -> Result<Vec<(Vec<u8>, T)>, Fail> {
        if picked.is_empty() {
            return Ok(picked);
        }
        let keys: Vec<&[u8]> = picked.iter().map(|(k, _)| k.as_slice()).collect();
        let limit = max.min(picked.len()) as i64;
        let locked: HashSet<Vec<u8>> = rows(tx, &self.sql.lock_round, &[&self.name, &keys, &limit])
            .await?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?;
        Ok(picked
            .into_iter()
            .filter(|(k, _)| locked.contains(k))
            .collect())
    }

    fn job_of(&self, row: &Row, now: i64) -> Result<JobInfo, Fail> {
        let queue = &self.name;
        let clock = &self.inner.clock;
        let id: i64 = row.try_get(0)?;
        let kind: &str = row.try_get(1)?;
        let payload = payload_of(queue, id, kind, row.try_get(2)?)?;
        let delivered: bool = row.try_get(3)?;
        let due_at = clock.to_host(row.try_get(4)?);
        let died_at = row.try_get::<_, Option<i64>>(12)?.map(|t| clock.to_host(t));
        let state = if died_at.is_some() {
            JobState::Dead
        } else {
            JobState::of(delivered, due_at, now)
        };
        Ok(JobInfo {
            id: id as u64,
            payload,
            state,
            attempt: count(row.try_get(5)?),
            max_attempts: row.try_get::<_, Option<i32>>(6)?.map(count),
            priority: row.try_get(7)?,
            group: text_of(queue, id, "group", row.try_get(8)?)?,
            enqueued_at: clock.to_host(row.try_get(9)?),
            due_at,
            expires_at: row.try_get::<_, Option<i64>>(10)?.map(|t| clock.to_host(t)),
            last_error: text_of(queue, id, "last error", row.try_get(11)?)?,
            died_at,
        })
    }
}

#[async_trait]
impl QueueEngine for PgQueue {
    async fn send(&self, payloads: &[Payload], stamp: &Stamp, now: i64) -> AlkResult<Vec<u64>> {
        let (queue, sql, clock) = (&self.name, &self.sql.send, &*self.inner.clock);
        let ids = self
            .inner
            .run(|c| {
                Box::pin(async move { send_on(&*c, sql, clock, queue, payloads, stamp, now).await })
            })
            .await?;
        Ok(ids.into_iter().map(|id| id as u64).collect())
    }

    async fn claim(
        &self,
        max: u32,
        visible_until: i64,
        floor: Option<i32>,
        now: i64,
    ) -> AlkResult<Vec<Delivery>> {
        let now = self.inner.clock.to_db(now);
        let visible_until = self.inner.clock.to_db(visible_until);
        let floor = floor.unwrap_or(i32::MIN);
        let max = max as usize;
        let claim = Receipt::new_claim();
        // One statement while the queue has no group and no limits, which
        // is all such a queue needs unless a due message must go to the
        // dead letters.
        let first = self
            .inner
            .run(|c| {
                Box::pin(async move {
                    self.claim_lane(&*c, max, now, floor, visible_until, claim, true)
                        .await
                })
            })
            .await?;
        let mut out: Vec<Delivery> = first.took.iter().map(|(_, d)| d.clone()).collect();
        if !first.grouped && first.unfit.is_empty() {
            return Ok(out);
        }
        let (first, out_ref) = (&first, &out);
        let more = self
            .inner
            .run(|c| {
                Box::pin(async move {
                    let mut c = c;
                    let tx = c.transaction().await?;
                    let mut got = out_ref.clone();
                    let mut served: Vec<Vec<u8>> = Vec::new();
                    if !got.is_empty() {
                        served.push(LANE.to_vec());
                    }
                    let unfit: Vec<(i64, String, Option<Uuid>)> = first
                        .unfit
                        .iter()
                        .map(|(id, e)| (*id, e.clone(), None))
                        .collect();
                    self.bury(&*tx, &unfit, now).await?;
                    // On after the first statement when it was refused for
                    // the groups or the limits, or when it buried some and
                    // has room left.
                    if first.grouped || got.len() < max {
                        let mut gate = self.gate(&*tx, now).await?;
                        self.rounds(
                            &*tx,
                            max,
                            now,
                            floor,
                            visible_until,
                            claim,
                            &mut gate,
                            &mut got,
                            &mut served,
                        )
                        .await?;
                        self.save_buckets(&*tx, &gate).await?;
                    }
                    self.serve(&*tx, &served).await?;
                    tx.commit().await?;
                    Ok(got.split_off(out_ref.len()))
                })
            })
            .await?;
        out.extend(more);
        Ok(out)
    }

    async fn ack(&self, receipt: &Receipt) -> AlkResult<Settled> {
        let batch = self.ack_batch(std::slice::from_ref(receipt)).await?;
        Ok(batch.settle(&[Some(*receipt)])[0])
    }

    async fn ack_batch(&self, receipts: &[Receipt]) -> AlkResult<AckedBatch> {
        // In id order: batches over the same messages lock them in the same
        // order, so they never deadlock.
        let mut pairs: Vec<(i64, Uuid)> = receipts.iter().map(|r| (r.id as i64, r.claim)).collect();
        pairs.sort_unstable();
        let ids: Vec<i64> = pairs.iter().map(|(id, _)| *id).collect();
        let uuids: Vec<Uuid> = pairs.iter().map(|(_, u)| *u).collect();
        if ids.is_empty() {
            return Ok(AckedBatch::default());
        }
        let unique: HashSet<i64> = ids.iter().copied().collect();
        let (queue, sql) = (&self.name, &self.sql);
        let (pairs, ids, uuids, unique) = (&pairs, &ids, &uuids, &unique);
        // One statement deletes every current receipt's message without a
        // group; only when some receipt found nothing does a second one
        // tell stale from gone, and find the messages of groups, which are
        // acknowledged under their groups' locks.
        let (deleted, present) = self
            .inner
            .run(|c| {
                Box::pin(async move {
                    let mut deleted: HashMap<i64, Uuid> = HashMap::new();
                    for row in rows(&*c, &sql.ack_batch, &[queue, ids, uuids, &false]).await? {
                        deleted.insert(row.try_get(0)?, row.try_get(1)?);
                    }
                    let mut present = HashSet::new();
                    if deleted.len() == unique.len() {
                        return Ok((deleted, present));
                    }
                    let mut groups: Vec<Vec<u8>> = Vec::new();
                    let mut grouped: HashSet<i64> = HashSet::new();
                    for row in rows(&*c, &sql.existing, &[queue, ids]).await? {
                        let id: i64 = row.try_get(0)?;
                        present.insert(id);
                        if let Some(g) = row.try_get::<_, Option<Vec<u8>>>(1)? {
                            grouped.insert(id);
                            groups.push(g);
                        }
                    }
                    if grouped.is_empty() {
                        return Ok((deleted, present));
                    }
                    groups.sort();
                    groups.dedup();
                    let (gids, guuids): (Vec<i64>, Vec<Uuid>) = pairs
                        .iter()
                        .filter(|(id, _)| grouped.contains(id))
                        .copied()
                        .unzip();
                    let mut c = c;
                    let tx = c.transaction().await?;
                    self.lock_groups(&*tx, &groups).await?;
                    for row in rows(&*tx, &sql.ack_batch, &[queue, &gids, &guuids, &true]).await? {
                        deleted.insert(row.try_get(0)?, row.try_get(1)?);
                    }
                    self.drop_empty(&*tx, &groups).await?;
                    present.clear();
                    for row in rows(&*tx, &sql.existing, &[queue, ids]).await? {
                        present.insert(row.try_get::<_, i64>(0)?);
                    }
                    tx.commit().await?;
                    Ok((deleted, present))
                })
            })
            .await?;
        // The core tells each receipt's outcome (`AckedBatch::settle`).
        Ok(AckedBatch {
            deleted: deleted.into_iter().map(|(id, u)| (id as u64, u)).collect(),
            present: present.into_iter().map(|id| id as u64).collect(),
        })
    }

    async fn nack(&self, receipt: &Receipt, now: i64) -> AlkResult<Settled> {
        let (id, uuid) = (receipt.id as i64, receipt.claim);
        let now = self.inner.clock.to_db(now);
        let (queue, nack) = (&self.name, &self.sql.nack);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    if exec(&*c, nack, &[queue, &id, &uuid, &now]).await? == 1 {
                        return Ok(Settled::Done);
                    }
                    self.missed(&*c, id).await
                })
            })
            .await
    }

    async fn next_visible(&self, _now: i64) -> AlkResult<Option<i64>> {
        let (queue, next) = (&self.name, &self.sql.next_visible);
        let at = self
            .inner
            .run(|c| {
                Box::pin(async move {
                    let found = rows(&*c, next, &[queue]).await?;
                    let row = found.first().ok_or_else(|| {
                        Fail::Alk(AlkError::Internal("min() returned no row".into()))
                    })?;
                    Ok(row.try_get::<_, Option<i64>>(0)?)
                })
            })
            .await?;
        Ok(at.map(|t| self.inner.clock.to_host(t)))
    }

    async fn purge(&self) -> AlkResult<()> {
        let (queue, sql) = (&self.name, &self.sql);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let mut c = c;
                    let tx = c.transaction().await?;
                    exec(&*tx, &sql.purge_groups, &[queue]).await?;
                    exec(&*tx, &sql.purge, &[queue]).await?;
                    tx.commit().await?;
                    Ok(())
                })
            })
            .await
    }

    async fn heartbeat(&self, receipt: &Receipt, deadline: i64, now: i64) -> AlkResult<Beat> {
        let (id, uuid) = (receipt.id as i64, receipt.claim);
        let deadline = self.inner.clock.to_db(deadline);
        let now = self.inner.clock.to_db(now);
        let (queue, heartbeat) = (&self.name, &self.sql.heartbeat);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    if exec(&*c, heartbeat, &[queue, &id, &uuid, &deadline, &now]).await? == 1 {
                        return Ok(Beat::Extended);
                    }
                    Ok(match self.lookup(&*c, id).await? {
                        None => Beat::Gone,
                        Some(f) if f.receipt != Some(uuid) => Beat::Stale,
                        Some(_) => Beat::Lapsed,
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
        let (id, uuid) = (receipt.id as i64, receipt.claim);
        let clock = &self.inner.clock;
        let now_db = clock.to_db(now);
        let (queue, retry) = (&self.name, &self.sql.retry);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let mut c = c;
                    let as_retried = |s: Settled| match s {
                        Settled::Stale => Retried::Stale,
                        _ => Retried::Gone,
                    };
                    let found = match self.lookup(&*c, id).await? {
                        None => return Ok(Retried::Gone),
                        Some(f) if f.receipt != Some(uuid) => return Ok(Retried::Stale),
                        Some(f) => f,
                    };
                    if found.max_attempts.is_some_and(|max| found.attempt >= max) {
                        if self
                            .bury_current(&mut c, id, uuid, found.group, error, now_db)
                            .await?
                        {
                            return Ok(Retried::Dead);
                        }
                        return Ok(as_retried(self.missed(&*c, id).await?));
                    }
                    let due = delay.due_at(found.backoff_base_ms, found.attempt, now);
                    let due_db = clock.to_db(due);
                    let changed =
                        exec(&*c, retry, &[queue, &id, &uuid, &due_db, &error.as_bytes()]).await?;
                    if changed == 1 {
                        return Ok(Retried::Scheduled(due));
                    }
                    Ok(as_retried(self.missed(&*c, id).await?))
                })
            })
            .await
    }

    async fn fail(&self, receipt: &Receipt, error: &str, now: i64) -> AlkResult<Settled> {
        let (id, uuid) = (receipt.id as i64, receipt.claim);
        let now = self.inner.clock.to_db(now);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let mut c = c;
                    let found = match self.lookup(&*c, id).await? {
                        None => return Ok(Settled::Gone),
                        Some(f) if f.receipt != Some(uuid) => return Ok(Settled::Stale),
                        Some(f) => f,
                    };
                    if self
                        .bury_current(&mut c, id, uuid, found.group, error, now)
                        .await?
                    {
                        return Ok(Settled::Done);
                    }
                    self.missed(&*c, id).await
                })
            })
            .await
    }

    async fn cancel(&self, id: u64) -> AlkResult<bool> {
        let id = id as i64;
        let (queue, sql) = (&self.name, &self.sql);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let mut c = c;
                    if let Some(found) = self.lookup(&*c, id).await? {
                        let deleted = match found.group {
                            None => exec(&*c, &sql.cancel, &[queue, &id]).await? == 1,
                            Some(g) => {
                                let tx = c.transaction().await?;
                                let keys = [g];
                                self.lock_groups(&*tx, &keys).await?;
                                let n = rows(&*tx, &sql.cancel, &[queue, &id]).await?.len();
                                self.drop_empty(&*tx, &keys).await?;
                                tx.commit().await?;
                                n == 1
                            }
                        };
                        if deleted {
                            return Ok(true);
                        }
                    }
                    Ok(exec(&*c, &sql.cancel_dead, &[queue, &id]).await? == 1)
                })
            })
            .await
    }

    async fn job(&self, id: u64, now: i64) -> AlkResult<Option<JobInfo>> {
        let id = id as i64;
        let (queue, job) = (&self.name, &self.sql.job);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let found = rows(&*c, job, &[queue, &id]).await?;
                    found.first().map(|r| self.job_of(r, now)).transpose()
                })
            })
            .await
    }

    async fn sweep_expired(&self, now: i64) -> AlkResult<u64> {
        let now = self.inner.clock.to_db(now);
        let (queue, sql) = (&self.name, &self.sql);
        let error = EXPIRED_ERROR.as_bytes();
        let moved = self
            .inner
            .run(|c| {
                Box::pin(async move {
                    let mut c = c;
                    let tx = c.transaction().await?;
                    let mut locked: Vec<Vec<u8>> = rows(&*tx, &sql.expired_groups, &[queue, &now])
                        .await?
                        .iter()
                        .map(|r| r.try_get(0))
                        .collect::<Result<_, _>>()?;
                    locked.sort();
                    self.lock_groups(&*tx, &locked).await?;
                    let moved = rows(&*tx, &sql.sweep, &[queue, &now, &error]).await?;
                    let mut left: Vec<Vec<u8>> = Vec::new();
                    for row in &moved {
                        if let Some(g) = row.try_get::<_, Option<Vec<u8>>>(1)?
                            && locked.binary_search(&g).is_err()
                        {
                            left.push(g);
                        }
                    }
                    // Groups a message joined after the first look (a
                    // redrive) are locked now, before they are checked.
                    left.sort();
                    left.dedup();
                    self.lock_groups(&*tx, &left).await?;
                    locked.extend(left);
                    self.drop_empty(&*tx, &locked).await?;
                    tx.commit().await?;
                    Ok(moved.len() as u64)
                })
            })
            .await?;
        // Results whose time ran out, unique keys that hold nothing any
        // more, and rate buckets full again, in bounded batches until
        // fewer are left, apart from the groups' locks (a sender holds its
        // key before its group).
        loop {
            let more = self
                .inner
                .run(|c| {
                    Box::pin(async move {
                        let mut c = c;
                        let mut most = exec(&*c, &sql.results_sweep, &[queue, &now]).await?;
                        let limits = limits_of(rows(&*c, &sql.limits, &[queue]).await?.first())?;
                        if let Some(rate) = limits.rate {
                            // After this long any bucket is full again.
                            let refills = i64::from(rate.capacity.div_ceil(rate.refill));
                            let full_after = refills.saturating_mul(
                                i64::try_from(rate.interval_ms).unwrap_or(i64::MAX),
                            );
                            let before = now.saturating_sub(full_after);
                            most =
                                most.max(exec(&*c, &sql.buckets_sweep, &[queue, &before]).await?);
                        }
                        let tx = c.transaction().await?;
                        let stale: Vec<Vec<u8>> = rows(&*tx, &sql.unique_stale, &[queue, &now])
                            .await?
                            .iter()
                            .map(|r| r.try_get(0))
                            .collect::<Result<_, _>>()?;
                        if !stale.is_empty() {
                            most = most
                                .max(exec(&*tx, &sql.unique_drop, &[queue, &now, &stale]).await?);
                        }
                        tx.commit().await?;
                        Ok(most >= SWEEP_BATCH)
                    })
                })
                .await?;
            if !more {
                break;
            }
        }
        Ok(moved)
    }

    async fn dead_letters(&self, after: u64, max: u32, now: i64) -> AlkResult<Vec<JobInfo>> {
        let after = after as i64;
        let (queue, page) = (&self.name, &self.sql.dead_page);
        let limit = i64::from(max);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    rows(&*c, page, &[queue, &after, &limit])
                        .await?
                        .iter()
                        .map(|r| self.job_of(r, now))
                        .collect()
                })
            })
            .await
    }

    async fn jobs(&self, after: u64, max: u32, now: i64) -> AlkResult<Vec<JobInfo>> {
        let after = after as i64;
        let (queue, page) = (&self.name, &self.sql.jobs_page);
        let limit = i64::from(max);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    rows(&*c, page, &[queue, &after, &limit])
                        .await?
                        .iter()
                        .map(|r| self.job_of(r, now))
                        .collect()
                })
            })
            .await
    }

    async fn redrive(&self, ids: &[u64], now: i64) -> AlkResult<Vec<Option<u64>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = ids.iter().map(|id| *id as i64).collect();
        let ids = ids.as_slice();
        let now = self.inner.clock.to_db(now);
        let (queue, sql) = (&self.name, &self.sql);
        let moved = self
            .inner
            .run(|c| {
                Box::pin(async move {
                    let mut c = c;
                    let tx = c.transaction().await?;
                    let mut dead: HashMap<i64, (Option<Vec<u8>>, i32)> = HashMap::new();
                    for row in rows(&*tx, &sql.dead_lookup, &[queue, &ids]).await? {
                        dead.insert(row.try_get(0)?, (row.try_get(1)?, row.try_get(2)?));
                    }
                    // The dead letters found, in the caller's order (each
                    // once): the order of their new ids. Each group joins
                    // once, in the order its first message comes back, with
                    // the highest priority among them.
                    let mut ordered: Vec<i64> = Vec::new();
                    let mut keys: Vec<Vec<u8>> = Vec::new();
                    let mut priorities: Vec<i32> = Vec::new();
                    for id in ids {
                        let Some((group, p)) = dead.get(id) else {
                            continue;
                        };
                        if ordered.contains(id) {
                            continue;
                        }
                        ordered.push(*id);
                        let Some(g) = group else {
                            continue;
                        };
                        match keys.iter().position(|k| k == g) {
                            Some(i) => priorities[i] = priorities[i].max(*p),
                            None => {
                                keys.push(g.clone());
                                priorities.push(*p);
                            }
                        }
                    }
                    if ordered.is_empty() {
                        tx.rollback().await?;
                        return Ok(HashMap::new());
                    }
                    if !keys.is_empty() {
                        exec(&*tx, &sql.join, &[queue, &keys, &priorities]).await?;
                    }
                    let mut new: Vec<i64> =
                        rows(&*tx, &sql.redrive, &[queue, &ordered, &now, &ordered])
                            .await?
                            .iter()
                            .map(|r| r.try_get(0))
                            .collect::<Result<_, _>>()?;
                    tx.commit().await?;
                    new.sort_unstable();
                    Ok(ordered.into_iter().zip(new).collect::<HashMap<i64, i64>>())
                })
            })
            .await?;
        let mut moved = moved;
        Ok(ids
            .iter()
            .map(|id| moved.remove(id).map(|new| new as u64))
            .collect())
    }

    async fn purge_dead(&self) -> AlkResult<u64> {
        let (queue, purge_dead) = (&self.name, &self.sql.purge_dead);
        self.inner
            .run(|c| Box::pin(async move { exec(&*c, purge_dead, &[queue]).await }))
            .await
    }

    async fn stats(&self, now: i64) -> AlkResult<QueueStats> {
        let clock = &self.inner.clock;
        let now_db = clock.to_db(now);
        let (queue, stats) = (&self.name, &self.sql.stats);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let found = rows(&*c, stats, &[queue, &now_db]).await?;
                    let row = found.first().ok_or_else(|| {
                        Fail::Alk(AlkError::Internal("the statistics returned no row".into()))
                    })?;
                    let n = |i: usize| -> Result<u64, Fail> {
                        Ok(row.try_get::<_, i64>(i)?.max(0) as u64)
                    };
                    Ok(QueueStats {
                        waiting: n(0)?,
                        oldest_waiting_enqueued_at: row
                            .try_get::<_, Option<i64>>(1)?
                            .map(|t| clock.to_host(t)),
                        in_flight: n(2)?,
                        delayed: n(3)?,
                        dead: n(4)?,
                        groups: n(5)?,
                        groups_in_flight: n(6)?,
                    })
                })
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
        let (queue, sql, clock) = (&self.name, &self.sql.unique, &*self.inner.clock);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let mut c = c;
                    let tx = c.transaction().await?;
                    let sent = send_unique_on(&*tx, sql, clock, queue, payload, stamp, unique, now)
                        .await?;
                    if sent.duplicate {
                        tx.rollback().await?;
                    } else {
                        tx.commit().await?;
                    }
                    Ok(sent)
                })
            })
            .await
    }

    async fn limits(&self) -> AlkResult<QueueLimits> {
        let (queue, sql) = (&self.name, &self.sql.limits);
        self.inner
            .run(|c| Box::pin(async move { limits_of(rows(&*c, sql, &[queue]).await?.first()) }))
            .await
    }

    async fn set_limits(&self, limits: &QueueLimits) -> AlkResult<()> {
        let (queue, sql) = (&self.name, &self.sql);
        if limits.is_default() {
            return self
                .inner
                .run(|c| {
                    Box::pin(async move {
                        exec(&*c, &sql.limits_clear, &[queue]).await?;
                        Ok(())
                    })
                })
                .await;
        }
        let n = i32::try_from(limits.group_concurrency).unwrap_or(i32::MAX);
        let cap: Option<i32> = limits
            .max_in_flight
            .map(|c| i32::try_from(c).unwrap_or(i32::MAX));
        let capacity = limits.rate.map(|r| i64::from(r.capacity));
        let refill = limits.rate.map(|r| i64::from(r.refill));
        let interval = limits
            .rate
            .map(|r| i64::try_from(r.interval_ms).unwrap_or(i64::MAX));
        let per_group = limits.rate.is_some() && limits.rate_per_group;
        self.inner
            .run(|c| {
                Box::pin(async move {
                    exec(
                        &*c,
                        &sql.limits_set,
                        &[queue, &n, &cap, &capacity, &refill, &interval, &per_group],
                    )
                    .await?;
                    Ok(())
                })
            })
            .await
    }

    async fn try_take(&self, group: Option<&str>, n: u32, now: i64) -> AlkResult<Taken> {
        let now = self.inner.clock.to_db(now);
        let (queue, sql) = (&self.name, &self.sql);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let mut c = c;
                    let tx = c.transaction().await?;
                    let limits = limits_of(rows(&*tx, &sql.limits, &[queue]).await?.first())?;
                    let Some(rate) = limits.rate else {
                        return Err(Fail::Alk(AlkError::InvalidArgument(
                            "the queue has no rate limit to take tokens from; set one with set-limits"
                                .into(),
                        )));
                    };
                    check_take(&rate, n).map_err(Fail::Alk)?;
                    let key: &[u8] = match group {
                        Some(g) if limits.rate_per_group => g.as_bytes(),
                        _ => LANE,
                    };
                    let full = i64::from(rate.capacity);
                    let keys = vec![key];
                    let held = rows(&*tx, &sql.buckets_hold, &[queue, &keys, &full, &now]).await?;
                    let row = held.first().ok_or_else(|| {
                        Fail::Alk(AlkError::Internal("holding a bucket returned no row".into()))
                    })?;
                    let stored = Bucket {
                        tokens: row.try_get(1)?,
                        since: row.try_get(2)?,
                    };
                    let (taken, after) = stored.take(&rate, n, now);
                    exec(
                        &*tx,
                        &sql.buckets_save,
                        &[queue, &keys, &vec![after.tokens], &vec![after.since]],
                    )
                    .await?;
                    tx.commit().await?;
                    Ok(taken)
                })
            })
            .await
    }

    async fn throttled_until(&self, now: i64) -> AlkResult<Option<i64>> {
        let clock = &self.inner.clock;
        let now_db = clock.to_db(now);
        let (queue, sql) = (&self.name, &self.sql);
        let at = self
            .inner
            .run(|c| {
                Box::pin(async move {
                    let limits = limits_of(rows(&*c, &sql.limits, &[queue]).await?.first())?;
                    let Some(rate) = limits.rate else {
                        return Ok(None);
                    };
                    let per_group = limits.rate_per_group;
                    let mut earliest: Option<i64> = None;
                    for row in rows(&*c, &sql.buckets, &[queue, &per_group]).await? {
                        let b = Bucket {
                            tokens: row.try_get(1)?,
                            since: row.try_get(2)?,
                        }
                        .at(&rate, now_db);
                        if b.tokens <= 0 {
                            let wait =
                                i64::try_from(b.wait_ms(&rate, 1, now_db)).unwrap_or(i64::MAX);
                            let t = now_db.saturating_add(wait);
                            earliest = Some(earliest.map_or(t, |e| e.min(t)));
                        }
                    }
                    Ok(earliest)
                })
            })
            .await?;
        Ok(at.map(|t| clock.to_host(t)))
    }

    async fn complete(
        &self,
        receipt: &Receipt,
        result: &Payload,
        expires_at: i64,
        now: i64,
    ) -> AlkResult<Settled> {
        let (id, uuid) = (receipt.id as i64, receipt.claim);
        let clock = &self.inner.clock;
        let (completed_at, expires_at) = (clock.to_db(now), clock.to_db(expires_at));
        let (kind, text) = result.parts();
        let (queue, sql) = (&self.name, &self.sql);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let mut c = c;
                    let found = match self.lookup(&*c, id).await? {
                        None => return Ok(Settled::Gone),
                        Some(f) if f.receipt != Some(uuid) => return Ok(Settled::Stale),
                        Some(f) => f,
                    };
                    let tx = c.transaction().await?;
                    let keys: Vec<Vec<u8>> = found.group.into_iter().collect();
                    self.lock_groups(&*tx, &keys).await?;
                    let acked = rows(
                        &*tx,
                        &sql.ack_batch,
                        &[queue, &vec![id], &vec![uuid], &true],
                    )
                    .await?
                    .len()
                        == 1;
                    if !acked {
                        tx.rollback().await?;
                        return self.missed(&*c, id).await;
                    }
                    exec(
                        &*tx,
                        &sql.result_put,
                        &[
                            queue,
                            &id,
                            &kind,
                            &text.as_bytes(),
                            &completed_at,
                            &expires_at,
                        ],
                    )
                    .await?;
                    self.drop_empty(&*tx, &keys).await?;
                    tx.commit().await?;
                    Ok(Settled::Done)
                })
            })
            .await
    }

    async fn result(&self, id: u64, now: i64) -> AlkResult<Option<JobResult>> {
        let id = id as i64;
        let clock = &self.inner.clock;
        let now_db = clock.to_db(now);
        let (queue, sql) = (&self.name, &self.sql.result);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let found = rows(&*c, sql, &[queue, &id, &now_db]).await?;
                    let Some(row) = found.first() else {
                        return Ok(None);
                    };
                    let kind: &str = row.try_get(0)?;
                    Ok(Some(JobResult {
                        id: id as u64,
                        payload: payload_of(queue, id, kind, row.try_get(1)?)?,
                        completed_at: clock.to_host(row.try_get(2)?),
                        expires_at: clock.to_host(row.try_get(3)?),
                    }))
                })
            })
            .await
    }

    async fn delete_result(&self, id: u64, now: i64) -> AlkResult<bool> {
        let id = id as i64;
        let now = self.inner.clock.to_db(now);
        let (queue, sql) = (&self.name, &self.sql.result_delete);
        self.inner
            .run(|c| {
                Box::pin(async move {
                    let found = rows(&*c, sql, &[queue, &id, &now]).await?;
                    Ok(match found.first() {
                        Some(row) => row.try_get::<_, bool>(0)?,
                        None => false,
                    })
                })
            })
            .await
    }
}
