//! The Postgres baseline: the Postgres engine's own statements
//! (`alk_store_postgres::sql`), driven straight from Rust with
//! tokio-postgres on one connection with prepared statements — no guest,
//! no host, no pool. `alk-bench op postgres-direct <full|relaxed> <op> <n>
//! <tag> <url>`; the URL names the schema (`?schema=…`), which the engine
//! creates first so both sides use the same tables.

use std::time::Instant;

use alk_store_postgres::sql::{self, Sql};
use alk_store_postgres::{PostgresEngine, PostgresOptions};
use tokio_postgres::NoTls;

use crate::{Timing, now_ms, wall_us};

/// The schema named by `?schema=` (default `alk`) and the URL without it.
fn split(url: &str) -> (String, String) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_string(), "alk".into());
    };
    let mut schema = "alk".to_string();
    let rest: Vec<&str> = query
        .split('&')
        .filter(|p| match p.strip_prefix("schema=") {
            Some(s) => {
                schema = s.to_string();
                false
            }
            None => true,
        })
        .collect();
    let base = if rest.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    (base, schema)
}

/// Runs `op` `n` times; what the guest's `ops` line reports.
pub async fn direct(op: &str, n: usize, tag: &str, url: &str, relaxed: bool) -> Timing {
    // The engine makes (or checks) the schema, as it does for the guests.
    let options = PostgresOptions::from_url(url).unwrap();
    drop(PostgresEngine::connect(options).await.unwrap());
    let (base, schema) = split(url);
    let (client, conn) = tokio_postgres::connect(&base, NoTls).await.unwrap();
    tokio::spawn(conn);
    if relaxed {
        client
            .batch_execute("SET synchronous_commit = off")
            .await
            .unwrap();
    }
    let s = Sql::for_schema(&schema);
    let get = client.prepare(&s.get(sql::KV_GET)).await.unwrap();
    let put = client.prepare(&s.get(sql::KV_PUT)).await.unwrap();
    let send = client.prepare(&s.get(sql::Q_SEND)).await.unwrap();
    let claim = client.prepare(&s.get(sql::Q_CLAIM_LANE)).await.unwrap();
    let ack_batch = client.prepare(&s.get(sql::Q_ACK_BATCH)).await.unwrap();
    let value = vec![7u8; 100];
    let text = "x".repeat(100);
    let (bucket, queue) = ("bench", "bench");
    let put_one = |key: String| {
        let keys = vec![key];
        let values = vec![value.clone()];
        (keys, values)
    };
    let send_many = |count: usize| {
        let kinds = vec!["text"; count];
        let bodies = vec![text.as_bytes().to_vec(); count];
        (count as i64, kinds, bodies)
    };
    match op {
        "kv-get" => {
            let (k, v) = put_one("k".into());
            client
                .execute(&put, &[&bucket, &k, &v, &None::<i64>])
                .await
                .unwrap();
        }
        "queue-recv-ack-1" | "queue-preload" => {
            for _ in 0..n.div_ceil(1000) {
                let (count, kinds, bodies) = send_many(1000);
                let now = now_ms();
                client
                    .query(
                        &send,
                        &[
                            &queue,
                            &count,
                            &kinds,
                            &bodies,
                            &now,
                            &None::<&[u8]>,
                            &0i32,
                            &now,
                            &None::<i32>,
                            &None::<i64>,
                            &None::<i64>,
                        ],
                    )
                    .await
                    .unwrap();
            }
        }
        _ => {}
    }
    let start_wall = wall_us();
    let start = Instant::now();
    let mut done = n;
    match op {
        "kv-get" => {
            for _ in 0..n {
                let row = client
                    .query_opt(&get, &[&bucket, &"k"])
                    .await
                    .unwrap()
                    .unwrap();
                let _: Vec<u8> = row.get(0);
            }
        }
        "kv-set" => {
            for i in 0..n {
                let (k, v) = put_one(format!("{tag}/{}", i % 1000));
                client
                    .execute(&put, &[&bucket, &k, &v, &None::<i64>])
                    .await
                    .unwrap();
            }
        }
        "queue-send" => {
            for _ in 0..n {
                let (count, kinds, bodies) = send_many(1);
                let now = now_ms();
                client
                    .query(
                        &send,
                        &[
                            &queue,
                            &count,
                            &kinds,
                            &bodies,
                            &now,
                            &None::<&[u8]>,
                            &0i32,
                            &now,
                            &None::<i32>,
                            &None::<i64>,
                            &None::<i64>,
                        ],
                    )
                    .await
                    .unwrap();
            }
        }
        "queue-recv-ack-1" => {
            for _ in 0..n {
                let now = now_ms();
                let uuid = uuid::Uuid::new_v4();
                let rows = client
                    .query(
                        &claim,
                        &[
                            &queue,
                            &now,
                            &i32::MIN,
                            &1i64,
                            &(now + 30_000),
                            &uuid,
                            &true,
                        ],
                    )
                    .await
                    .unwrap();
                let id: i64 = rows[0].get(1);
                assert_eq!(
                    client
                        .query(&ack_batch, &[&queue, &vec![id], &vec![uuid], &false])
                        .await
                        .unwrap()
                        .len(),
                    1
                );
            }
        }
        "queue-drain-100" => {
            done = 0;
            loop {
                let now = now_ms();
                let uuid = uuid::Uuid::new_v4();
                let rows = client
                    .query(
                        &claim,
                        &[
                            &queue,
                            &now,
                            &i32::MIN,
                            &100i64,
                            &(now + 30_000),
                            &uuid,
                            &true,
                        ],
                    )
                    .await
                    .unwrap();
                if rows.is_empty() {
                    break;
                }
                let ids: Vec<i64> = rows.iter().map(|r| r.get(1)).collect();
                let uuids = vec![uuid; ids.len()];
                let acked = client
                    .query(&ack_batch, &[&queue, &ids, &uuids, &false])
                    .await
                    .unwrap();
                assert_eq!(acked.len(), ids.len());
                done += ids.len();
            }
        }
        "queue-preload" => {}
        other => panic!("no direct Postgres version of {other}"),
    }
    (done, start.elapsed().as_micros(), start_wall, wall_us())
}
