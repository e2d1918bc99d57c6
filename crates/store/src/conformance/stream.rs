//! Conformance cases of streams: offsets, saved offsets, trims and paged
//! reads.

use crate::engine::Engine;
use crate::error::AlkError;
use crate::limits::{MAX_READ_BYTES, StreamLimits};
use crate::stream::{ConsumerLag, StreamInfo, Streams};

/// Offsets are 1, 2, 3… per stream, never reused after a trim; saved
/// offsets only move forward and never beyond the last offset.
pub async fn stream_offsets_survive_trim_and_saves_only_move_forward(engine: &dyn Engine) {
    let s = Streams::open(engine, StreamLimits::default())
        .await
        .unwrap();
    for i in 1..=5u64 {
        assert_eq!(s.publish("s", None, b"x", 0).await.unwrap(), i);
    }
    assert_eq!(s.publish("other", Some("k"), b"y", 0).await.unwrap(), 1);
    assert_eq!(s.trim_to("s", 5).await.unwrap(), 5);
    assert_eq!(s.publish("s", None, b"x", 0).await.unwrap(), 6);
    s.save_offset("s", "c", 4).await.unwrap();
    s.save_offset("s", "c", 2).await.unwrap();
    assert_eq!(s.get_offset("s", "c").await.unwrap(), Some(4));
    assert!(matches!(
        s.save_offset("s", "c", 7).await,
        Err(AlkError::InvalidArgument(_))
    ));
    let read = s.read_since("s", 0, 10).await.unwrap();
    assert_eq!(read.iter().map(|e| e.offset).collect::<Vec<_>>(), [6]);
    let other = s.read_since("other", 0, 10).await.unwrap();
    assert_eq!(other[0].key.as_deref(), Some("k"));
    assert_eq!(other[0].payload, b"y");
    assert!(matches!(
        s.publish("s", Some(""), b"x", 0).await,
        Err(AlkError::InvalidArgument(_))
    ));
}

/// A read of many large events stops at the read cap, after at least
/// one, and the next read goes on from there.
pub async fn stream_reads_of_large_events_come_in_pages(engine: &dyn Engine) {
    let s = Streams::open(engine, StreamLimits::default())
        .await
        .unwrap();
    let mib = vec![3u8; 1024 * 1024];
    let events: Vec<(Option<String>, Vec<u8>)> = (0..20).map(|_| (None, mib.clone())).collect();
    s.publish_batch("big", &events, 0).await.unwrap();
    let cap = MAX_READ_BYTES / mib.len();
    let first = s.read_since("big", 0, 1000).await.unwrap();
    assert_eq!(first.len(), cap);
    assert!(first.iter().all(|e| e.payload == mib));
    let rest = s.read_since("big", cap as u64, 1000).await.unwrap();
    let offsets: Vec<u64> = rest.iter().map(|e| e.offset).collect();
    assert_eq!(offsets, ((cap as u64 + 1)..=20).collect::<Vec<u64>>());
    // A single event larger than what is left still comes, alone.
    let one = s.read_since("big", 19, 1000).await.unwrap();
    assert_eq!(one.len(), 1);
}

/// A stream's information: its first stored and last assigned offsets
/// (trims raise the first, never the last) and each consumer's offset and
/// lag, by name.
pub async fn stream_info_tells_offsets_and_lags(engine: &dyn Engine) {
    let s = Streams::open(engine, StreamLimits::default())
        .await
        .unwrap();
    assert_eq!(s.info("info").await.unwrap(), StreamInfo::default());
    for i in 0..5 {
        s.publish("info", None, format!("{i}").as_bytes(), 0)
            .await
            .unwrap();
    }
    s.publish("other", None, b"x", 0).await.unwrap();
    s.save_offset("info", "b-reader", 2).await.unwrap();
    s.save_offset("info", "a-reader", 5).await.unwrap();
    s.save_offset("other", "c-reader", 1).await.unwrap();
    let lag = |consumer: &str, offset, lag| ConsumerLag {
        consumer: consumer.into(),
        offset,
        lag,
    };
    assert_eq!(
        s.info("info").await.unwrap(),
        StreamInfo {
            first: Some(1),
            last: 5,
            consumers: vec![lag("a-reader", 5, 0), lag("b-reader", 2, 3)],
        }
    );
    s.trim_to("info", 3).await.unwrap();
    let info = s.info("info").await.unwrap();
    assert_eq!((info.first, info.last), (Some(4), 5));
    s.trim_to("info", 5).await.unwrap();
    let info = s.info("info").await.unwrap();
    assert_eq!((info.first, info.last), (None, 5));
    assert!(matches!(
        s.info("bad name!").await,
        Err(AlkError::InvalidName(_))
    ));
}
