//! Streams across engines: racing publishers never let a reader skip an
//! offset.

use super::*;

/// Two publishers of one stream interleave their commits: the second's
/// offset is assigned only after the first commits, so a reader never sees
/// a higher offset before a lower one (it would skip it for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interleaved_publishers_never_let_a_reader_skip_an_offset() {
    let schema = fresh_schema();
    let (a, b) = (engine(&schema).await, engine(&schema).await);
    let (sa, sb) = (
        Streams::open(&a, StreamLimits::default()).await.unwrap(),
        Streams::open(&b, StreamLimits::default()).await.unwrap(),
    );
    sa.publish("s", None, b"0", 0).await.unwrap();
    let first = tx_of(&a);
    assert_eq!(first.publish("s", None, b"1", 0).await.unwrap(), 2);
    // The second publisher commits on its own while the first is open.
    let second = tokio::spawn(async move { sb.publish("s", None, b"2", 0).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Whatever the second publisher did meanwhile, a reader sees only
    // offset 1: offset 3 is not visible ahead of the open offset 2.
    let seen: Vec<u64> = sa
        .read_since("s", 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.offset)
        .collect();
    assert_eq!(seen, [1]);
    first.commit().await.unwrap();
    assert_eq!(second.await.unwrap().unwrap(), 3);
    let seen: Vec<u64> = sa
        .read_since("s", 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.offset)
        .collect();
    assert_eq!(seen, [1, 2, 3]);
}

/// Many publishers on several engines, each committing after a random
/// pause inside its transaction, and a reader that follows the stream: it
/// sees every offset, each exactly once, in order, without a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_following_reader_sees_every_offset_of_racing_publishers() {
    let schema = fresh_schema();
    let publishers = 6;
    let per = 40;
    let mut tasks = Vec::new();
    for p in 0..publishers {
        let e = engine(&schema).await;
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                let tx = tx_of(&e);
                tx.publish("race", None, format!("{p}/{i}").as_bytes(), 0)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(rand_ms(p * 1000 + i))).await;
                tx.commit().await.unwrap();
            }
        }));
    }
    let reader = engine(&schema).await;
    let s = Streams::open(&reader, StreamLimits::default())
        .await
        .unwrap();
    let total = publishers * per;
    let mut last = 0;
    while last < total {
        for e in s.read_since("race", last, 7).await.unwrap() {
            assert_eq!(
                e.offset,
                last + 1,
                "the reader skipped or repeated an offset"
            );
            last = e.offset;
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// A small deterministic pause (0–3 ms) per step.
fn rand_ms(seed: u64) -> u64 {
    (seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        >> 33)
        % 4
}
