//! Conformance cases of the catalog: what operators' tools list.

use crate::engine::Engine;
use crate::kv::Bucket;
use crate::limits::{KvLimits, StreamLimits};
use crate::lock::Locks;
use crate::queue::Queue;
use crate::stream::Streams;

use super::text;

/// Stream names come by name, a page at a time, after the last name of
/// the previous page.
pub async fn stream_names_come_by_name_in_pages(engine: &dyn Engine) {
    let s = Streams::open(engine, StreamLimits::default())
        .await
        .unwrap();
    assert!(s.names(None, 10).await.unwrap().is_empty());
    for name in ["names-c", "names-a", "names-b", "names-d"] {
        s.publish(name, None, b"x", 0).await.unwrap();
    }
    let first = s.names(None, 2).await.unwrap();
    assert_eq!(first, ["names-a", "names-b"]);
    let rest = s.names(Some("names-b"), 10).await.unwrap();
    assert_eq!(rest, ["names-c", "names-d"]);
    // A trimmed-out stream keeps its offsets, and its name.
    s.trim_to("names-a", 1).await.unwrap();
    assert_eq!(s.names(None, 1).await.unwrap(), ["names-a"]);
    assert!(s.names(Some("bad name!"), 1).await.is_err());
    assert_eq!(
        crate::stream::all_names(&*engine.streams().await.unwrap())
            .await
            .unwrap()
            .len(),
        4
    );
}

/// The catalog lists every bucket holding a key, every queue sent to and
/// every stream published to, by name, and the stores of streams and locks
/// once used.
pub async fn catalog_lists_the_stores_in_use(engine: &dyn Engine) {
    let b = Bucket::open(engine, "cat-bucket", KvLimits::default())
        .await
        .unwrap();
    b.set("k", b"v", None, 0).await.unwrap();
    let q = Queue::open(engine, "cat-queue").await.unwrap();
    q.send(&text("x"), 0).await.unwrap();
    let s = Streams::open(engine, StreamLimits::default())
        .await
        .unwrap();
    s.publish("cat-stream", None, b"x", 0).await.unwrap();
    let locks = Locks::open(engine).await.unwrap();
    locks.try_lock("cat-lock", "me", 60_000, 0).await.unwrap();
    let c = engine.catalog().await.unwrap();
    assert!(c.buckets.iter().any(|n| n == "cat-bucket"), "{c:?}");
    assert!(c.queues.iter().any(|n| n == "cat-queue"), "{c:?}");
    assert!(c.streams.iter().any(|n| n == "cat-stream"), "{c:?}");
    assert!(c.stream_store && c.lock_store && !c.is_empty(), "{c:?}");
    assert!(c.unreadable.is_empty(), "{c:?}");
    for list in [&c.buckets, &c.queues, &c.streams] {
        assert!(
            list.windows(2).all(|w| w[0] < w[1]),
            "not by name: {list:?}"
        );
    }
}
