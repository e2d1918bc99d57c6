//! The stores of a schema, as operators' tools list them
//! ([`alk_store::Catalog`]): read from the primary keys, nothing created.

use alk_store::{AlkResult, Catalog};

use crate::conn::Inner;

// The statements of this module (each listed by name in
// `sql::STATEMENTS`, which a test checks against the format document).

/// The buckets holding at least one key: a walk of `kv`'s primary key that
/// jumps from one bucket to the next (one index lookup per bucket, never a
/// pass over the keys).
pub const C_BUCKETS: &str = "WITH RECURSIVE b(bucket) AS (\
SELECT min(bucket) FROM alk.kv \
UNION ALL SELECT (SELECT min(k.bucket) FROM alk.kv AS k WHERE k.bucket > b.bucket) FROM b WHERE b.bucket IS NOT NULL) \
SELECT bucket::text FROM b WHERE bucket IS NOT NULL";
/// The queues ever sent to, by name.
pub const C_QUEUES: &str = "SELECT queue::text FROM alk.queues ORDER BY queue";

/// Lists the schema's stores.
pub(crate) async fn catalog(inner: &Inner, streams: Vec<String>) -> AlkResult<Catalog> {
    let (buckets, queues) = (inner.sql.get(C_BUCKETS), inner.sql.get(C_QUEUES));
    let (buckets, queues) = inner
        .run(|c| {
            let (buckets, queues) = (&buckets, &queues);
            Box::pin(async move {
                let names = |rows: Vec<tokio_postgres::Row>| {
                    rows.iter()
                        .map(|r| r.try_get::<_, String>(0))
                        .collect::<Result<Vec<_>, _>>()
                };
                let b = names(c.query(buckets.as_str(), &[]).await?)?;
                let q = names(c.query(queues.as_str(), &[]).await?)?;
                Ok((b, q))
            })
        })
        .await?;
    Ok(Catalog {
        buckets,
        queues,
        // A schema holds every store from its creation.
        stream_store: true,
        streams,
        lock_store: true,
        unreadable: Vec::new(),
    })
}
