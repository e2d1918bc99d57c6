//! `alk-bench http-load <addr> <GET|POST> <path> <connections> <requests>`:
//! a bounded load test of an HTTP server on this machine. `connections`
//! keep-alive connections send `requests` requests in all, each waiting
//! for its answer before the next; it stops by itself when they are done.
//! Prints `http <requests> <elapsed-µs> <p50-µs> <p99-µs> <failed>`
//! (`failed`: answers other than 2xx, and broken connections).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt as _;

/// Runs the load; what it prints.
pub async fn run(addr: &str, method: &str, path: &str, connections: usize, requests: usize) -> String {
    let addr: SocketAddr = addr.parse().expect("address");
    assert!(
        addr.ip().is_loopback(),
        "http-load only loads servers on this machine (127.0.0.1 or ::1)"
    );
    let left = Arc::new(AtomicUsize::new(requests));
    let start = Instant::now();
    let workers: Vec<_> = (0..connections.max(1))
        .map(|_| {
            let left = left.clone();
            let (method, path) = (method.to_string(), path.to_string());
            tokio::spawn(async move { worker(addr, &method, &path, &left).await })
        })
        .collect();
    let mut latencies = Vec::with_capacity(requests);
    let mut failed = 0usize;
    for w in workers {
        let (l, f) = w.await.expect("worker");
        latencies.extend(l);
        failed += f;
    }
    let elapsed = start.elapsed().as_micros();
    latencies.sort_unstable();
    let pick = |p: f64| {
        latencies
            .get(((latencies.len().saturating_sub(1)) as f64 * p).round() as usize)
            .copied()
            .unwrap_or(0)
    };
    format!(
        "http {} {elapsed} {} {} {failed}",
        latencies.len(),
        pick(0.50),
        pick(0.99)
    )
}

/// One connection's requests: their latencies in µs, and how many failed.
async fn worker(addr: SocketAddr, method: &str, path: &str, left: &AtomicUsize) -> (Vec<u64>, usize) {
    let mut latencies = Vec::new();
    let mut failed = 0;
    let mut sender = None;
    while left
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
    {
        if sender.is_none() {
            sender = connect(addr).await;
        }
        let Some(s) = sender.as_mut() else {
            failed += 1;
            continue;
        };
        let request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, addr.to_string())
            .body(http_body_util::Full::new(Bytes::new()))
            .unwrap();
        let started = Instant::now();
        let ok = match s.send_request(request).await {
            Ok(response) => {
                let good = response.status().is_success();
                good && response.into_body().collect().await.is_ok()
            }
            Err(_) => false,
        };
        latencies.push(started.elapsed().as_micros() as u64);
        if !ok {
            failed += 1;
            sender = None;
        }
    }
    (latencies, failed)
}

type Sender = hyper::client::conn::http1::SendRequest<http_body_util::Full<Bytes>>;

async fn connect(addr: SocketAddr) -> Option<Sender> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) =
        hyper::client::conn::http1::handshake(wasmtime_wasi_http::io::TokioIo::new(stream))
            .await
            .ok()?;
    tokio::spawn(conn);
    Some(sender)
}
