//! Operators' tools: `alk-host inspect`, `alk-host dashboard` and its
//! `/metrics`, on every engine, and pointed at stores that workers use.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use alk_host::store::jobs::{QueueLimits, SendOptions};
use alk_host::store::rate::RateLimit;
use alk_host::store::kv::Bucket;
use alk_host::store::lock::Locks;
use alk_host::store::queue::{Payload, Queue};
use alk_host::store::schedule::Schedules;
use alk_host::store::stream::Streams;
use alk_host::store::{KvLimits, StreamLimits};
use serde_json::Value;

use crate::common::{self, Killed, Store, StoreArgs, alk_host, on_every_engine, text};

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A queue `orders` with 2 waiting, 1 delayed and 1 dead message (`a`,
/// failed with "no"); a stream `events` of 4 events with consumer `proj`
/// at 1; lock `leader` held by `w1`; bucket `settings` with `theme` =
/// `dark`; schedule `sweep` sending to `orders` every hour.
pub fn populate(store: &Store) {
    let ctx = store.ctx();
    let engine = ctx.engine().clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let t = now();
        let q = Queue::open(&*engine, "orders").await.unwrap();
        for body in ["a", "b", "c"] {
            q.send(&Payload::Text(body.into()), t).await.unwrap();
        }
        let later = SendOptions {
            delay_ms: Some(3_600_000),
            ..SendOptions::default()
        };
        q.send_with(&Payload::Text("later".into()), &later, t)
            .await
            .unwrap();
        let got = q.claim(1, None, None, t).await.unwrap();
        assert!(q.fail(&got[0].receipt, "no", t).await.unwrap());
        // Limits that hold nothing back here, for the tools to show.
        q.set_limits(&QueueLimits {
            group_concurrency: 2,
            max_in_flight: Some(50),
            rate: Some(RateLimit {
                capacity: 100,
                refill: 10,
                interval_ms: 1_000,
            }),
            rate_per_group: false,
        })
        .await
        .unwrap();
        let s = Streams::open(&*engine, StreamLimits::default())
            .await
            .unwrap();
        for i in 0..4u8 {
            s.publish("events", None, &[i], t).await.unwrap();
        }
        s.save_offset("events", "proj", 1).await.unwrap();
        let locks = Locks::open(&*engine).await.unwrap();
        std::mem::forget(locks.try_lock("leader", "w1", 600_000, t).await.unwrap());
        let b = Bucket::open(&*engine, "settings", KvLimits::default())
            .await
            .unwrap();
        b.set("theme", b"dark", None, t).await.unwrap();
        let sc = Schedules::open(&*engine).await.unwrap();
        sc.schedule(
            "sweep",
            "@every 1h",
            "orders",
            &Payload::Text("sweep".into()),
            &SendOptions::default(),
            t,
        )
        .await
        .unwrap();
        engine.flush().await;
    });
}

fn inspect(store: &(impl StoreArgs + ?Sized), args: &[&str]) -> std::process::Output {
    alk_host()
        .arg("inspect")
        .args(store.store_args())
        .args(args)
        .output()
        .unwrap()
}

fn inspect_json(store: &(impl StoreArgs + ?Sized), args: &[&str]) -> Value {
    let out = inspect(store, args);
    assert!(
        out.status.success(),
        "inspect {args:?}: {}",
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "inspect {args:?} printed no JSON ({e}): {}",
            text(&out.stdout)
        )
    })
}

fn store_files(dir: &Path) -> Vec<String> {
    let mut files: Vec<String> = common::sqlite_store_files(dir)
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    files.sort();
    files
}

fn find<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .and_then(|a| a.iter().find(|v| v["name"] == name))
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

fn inspect_shows_every_store_and_changes_none(store: &Store) {
    populate(store);
    let before = store.path().map(store_files);
    let o = inspect_json(store, &["--json"]);
    let q = find(&o["queues"], "orders");
    assert_eq!(
        (&q["waiting"], &q["delayed"], &q["in_flight"], &q["dead"]),
        (
            &Value::from(2),
            &Value::from(1),
            &Value::from(0),
            &Value::from(1)
        ),
        "{q}"
    );
    assert!(q["oldest_waiting_enqueued_at_ms"].as_i64().is_some(), "{q}");
    let s = find(&o["streams"], "events");
    assert_eq!(
        (&s["first"], &s["last"]),
        (&Value::from(1), &Value::from(4)),
        "{s}"
    );
    assert_eq!(s["consumers"][0]["consumer"], "proj");
    assert_eq!(s["consumers"][0]["lag"], 3);
    assert!(
        o["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b == "settings"),
        "{o}"
    );
    let l = find(&o["locks"], "leader");
    assert_eq!(l["owner"], "w1");
    let sc = find(&o["schedules"], "sweep");
    assert_eq!(sc["queue"], "orders");
    assert!(o["unreadable"].as_array().unwrap().is_empty(), "{o}");

    // The same as tables.
    let out = inspect(store, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let tables = text(&out.stdout);
    for word in [
        "QUEUE",
        "orders",
        "STREAM",
        "events",
        "proj at 1 (lag 3)",
        "settings",
        "leader",
        "sweep",
    ] {
        assert!(tables.contains(word), "no {word:?} in\n{tables}");
    }

    // One queue: its live messages, then its dead letters.
    let live = inspect_json(store, &["queue", "orders", "--json"]);
    let states: Vec<&str> = live["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["waiting", "waiting", "delayed"], "{live}");
    assert_eq!(
        live["limits"],
        serde_json::json!({
            "group_concurrency": 2,
            "max_in_flight": 50,
            "rate": {"capacity": 100, "refill": 10, "interval_ms": 1000},
            "rate_per_group": false,
        }),
        "{live}"
    );
    let tables = text(&inspect(store, &["queue", "orders"]).stdout);
    assert!(
        tables.contains("limits: 2 of a group in flight at once, at most 50 in flight, 10 claims per 1000 ms, 100 at once"),
        "{tables}"
    );
    let dead = inspect_json(store, &["queue", "orders", "--dead", "--json"]);
    assert_eq!(dead["dead_letters"][0]["payload"]["text"], "a", "{dead}");
    assert_eq!(dead["dead_letters"][0]["last_error"], "no", "{dead}");
    let tables = text(&inspect(store, &["queue", "orders", "--dead"]).stdout);
    assert!(tables.contains("dead") && tables.contains("no"), "{tables}");

    // A stream, a bucket's keys and a value.
    let ev = inspect_json(store, &["stream", "events", "--json"]);
    assert_eq!(ev["consumers"][0]["offset"], 1);
    let keys = inspect_json(store, &["kv", "settings", "--prefix", "th", "--json"]);
    assert_eq!(keys["keys"], serde_json::json!(["theme"]));
    let value = inspect(store, &["kv", "settings", "--get", "theme"]);
    assert_eq!(text(&value.stdout), "dark\n", "{}", text(&value.stderr));

    // What is not there is an error that lists what is.
    let missing = inspect(store, &["queue", "nope"]);
    assert!(!missing.status.success());
    let why = text(&missing.stderr);
    assert!(
        why.contains("no queue \"nope\"") && why.contains("orders"),
        "{why}"
    );
    let missing = inspect(store, &["kv", "settings", "--get", "nope"]);
    assert!(!missing.status.success());

    // Nothing was created.
    if let Some(before) = before {
        assert_eq!(store.path().map(store_files), Some(before));
    }
}

on_every_engine! {
    inspect_shows_every_store_and_changes_none;
}

#[test]
fn inspect_refuses_a_place_without_alk_stores_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = inspect(dir.path(), &[]);
    assert!(!out.status.success());
    let why = text(&out.stderr);
    assert!(
        why.contains("holds no alk stores") && why.contains("--data-dir"),
        "{why}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "something was created"
    );
    // The scheduler's listing no longer prints nothing on a mistyped
    // directory.
    let out = alk_host()
        .args(["schedules", "list"])
        .args(dir.path().store_args())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("holds no alk stores"));
    let missing = dir.path().join("typo");
    let out = inspect(&missing, &[]);
    assert!(
        text(&out.stderr).contains("is not a directory"),
        "{}",
        text(&out.stderr)
    );
    assert!(!missing.exists());
    // Another program's database where a bucket belongs is named, not read.
    let foreign = dir.path().join("kv").join("theirs");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(
        foreign.join("localkv.sqlite"),
        b"not a database, not at all",
    )
    .unwrap();
    let out = inspect(dir.path(), &[]);
    assert!(!out.status.success());
    let why = text(&out.stderr);
    assert!(
        why.contains("theirs") && why.contains("not a database"),
        "{why}"
    );
    // A fresh schema on the database server is not created either.
    let url = common::postgres_url();
    let out = alk_host()
        .args(["inspect", "--store", &url])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("holds no alk stores"),
        "{}",
        text(&out.stderr)
    );
}

/// A minimal HTTP/1.1 exchange (the test's own client): status, body.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = text(&raw);
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    // A chunked body: join the chunks.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut rest = rest;
        while let Some((size, after)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            out.push_str(&after[..n.min(after.len())]);
            rest = after.get(n + 2..).unwrap_or("");
        }
        out
    } else {
        rest.to_string()
    };
    (status, body)
}

/// A running dashboard, stopped when dropped.
pub struct Dashboard {
    _child: Killed,
    pub addr: SocketAddr,
}

/// Starts `alk-host dashboard` with `args`; waits for its address.
pub fn dashboard(store: &(impl StoreArgs + ?Sized), args: &[&str]) -> Dashboard {
    let mut child = alk_host()
        .arg("dashboard")
        .args(store.store_args())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|a| a.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("the dashboard did not start: {first}"));
    // Keep draining its stderr so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Dashboard {
        _child: Killed(child),
        addr,
    }
}

/// The samples of a metrics text, by name and labels, read by a
/// Prometheus text parser.
pub fn metrics(text: &str) -> Vec<prometheus_parse::Sample> {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    prometheus_parse::Scrape::parse(lines)
        .unwrap_or_else(|e| panic!("not Prometheus text ({e}):\n{text}"))
        .samples
}

pub fn sample(samples: &[prometheus_parse::Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let s = samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
        .unwrap_or_else(|| panic!("no {name} {labels:?} among {} samples", samples.len()));
    match s.value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => v,
        _ => panic!("{name} is not a number"),
    }
}

fn the_dashboard_serves_counts_metrics_and_confirmed_actions(store: &Store) {
    populate(store);
    let d = dashboard(store, &["--addr", "127.0.0.1:0"]);
    let (status, page) = http(d.addr, "GET", "/", &[], "");
    assert_eq!(status, 200);
    assert!(
        page.contains("<title>alk dashboard</title>")
            && !page.contains("http://")
            && !page.contains("https://"),
        "the page fetches nothing from elsewhere"
    );
    let (status, body) = http(d.addr, "GET", "/api/overview", &[], "");
    assert_eq!(status, 200, "{body}");
    let o: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(find(&o["queues"], "orders")["dead"], 1);

    // The metrics agree with the statistics.
    let (status, text) = http(d.addr, "GET", "/metrics", &[], "");
    assert_eq!(status, 200);
    let m = metrics(&text);
    for (state, n) in [
        ("waiting", 2.0),
        ("delayed", 1.0),
        ("in_flight", 0.0),
        ("dead", 1.0),
    ] {
        assert_eq!(
            sample(
                &m,
                "alk_queue_messages",
                &[("queue", "orders"), ("state", state)]
            ),
            n,
            "{state}"
        );
    }
    assert_eq!(
        sample(
            &m,
            "alk_stream_consumer_lag",
            &[("stream", "events"), ("consumer", "proj")]
        ),
        3.0
    );
    assert_eq!(sample(&m, "alk_locks_held", &[]), 1.0);

    // An action without the page's header is refused; with it, done.
    let (_, dead) = http(d.addr, "GET", "/api/queue?name=orders&dead=1", &[], "");
    let dead: Value = serde_json::from_str(&dead).unwrap();
    let id = dead["jobs"][0]["id"].as_u64().unwrap();
    let action = format!("{{\"queue\":\"orders\",\"ids\":[{id}]}}");
    let (status, _) = http(
        d.addr,
        "POST",
        "/api/actions/redrive",
        &[("content-type", "application/json")],
        &action,
    );
    assert_eq!(status, 403);
    let (status, _) = http(d.addr, "GET", "/api/actions/redrive", &[], "");
    assert_eq!(status, 404);
    let (status, body) = http(
        d.addr,
        "POST",
        "/api/actions/redrive",
        &[("x-alk-action", "1")],
        &action,
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = http(
        d.addr,
        "POST",
        "/api/actions/redrive",
        &[("x-alk-action", "1")],
        "{\"queue\":\"nope\",\"ids\":[1]}",
    );
    assert_eq!(status, 404, "{body}");
    let (status, _) = http(
        d.addr,
        "POST",
        "/api/actions/redrive",
        &[("x-alk-action", "1")],
        "not json",
    );
    assert_eq!(status, 400);
    // A guest now receives the redriven message.
    let out = common::run_cli("queue-tool", store, &[], &["receive", "orders", "10"]);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    assert!(
        common::text(&out.stdout).lines().any(|l| l.ends_with(" a")),
        "{}",
        common::text(&out.stdout)
    );
}

on_every_engine! {
    the_dashboard_serves_counts_metrics_and_confirmed_actions;
}

#[test]
fn a_dashboard_off_loopback_needs_its_token_on_every_request() {
    let store = Store::dir();
    populate(&store);
    let out = alk_host()
        .arg("dashboard")
        .args(store.store_args())
        .args(["--addr", "0.0.0.0:0"])
        .env_remove(alk_dashboard_token_env())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("needs a token"),
        "{}",
        text(&out.stderr)
    );
    let token = "s3cret-token-of-the-test";
    let d = dashboard(&store, &["--addr", "0.0.0.0:0", "--token", token]);
    let addr = SocketAddr::from(([127, 0, 0, 1], d.addr.port()));
    for path in ["/", "/api/overview", "/metrics", "/api/queue?name=orders"] {
        assert_eq!(http(addr, "GET", path, &[], "").0, 401, "{path}");
        assert_eq!(
            http(
                addr,
                "GET",
                path,
                &[("authorization", "Bearer wrong-token-wrong-token")],
                ""
            )
            .0,
            401,
            "{path}"
        );
    }
    let action = "{\"queue\":\"orders\"}";
    assert_eq!(
        http(
            addr,
            "POST",
            "/api/actions/purge-dead",
            &[("x-alk-action", "1")],
            action
        )
        .0,
        401
    );
    let bearer = format!("Bearer {token}");
    assert_eq!(
        http(
            addr,
            "GET",
            "/api/overview",
            &[("authorization", &bearer)],
            ""
        )
        .0,
        200
    );
    // The browser's way: /?token=… once sets a cookie.
    let (status, _) = http(addr, "GET", &format!("/?token={token}"), &[], "");
    assert_eq!(status, 303);
    let cookie = format!("alk_token={token}");
    assert_eq!(
        http(addr, "GET", "/metrics", &[("cookie", &cookie)], "").0,
        200
    );
    assert_eq!(http(addr, "GET", "/?token=nope", &[], "").0, 401);
    // Nothing was purged by the refused action.
    let o = inspect_json(&store, &["--json"]);
    assert_eq!(find(&o["queues"], "orders")["dead"], 1);
}

fn alk_dashboard_token_env() -> &'static str {
    "ALK_DASHBOARD_TOKEN"
}

/// Runs 4 workers and 2 producers on one queue, with `watch` polling the
/// stores all along; the workers' wall time and what they printed.
fn workload(
    store: &Store,
    queue: &str,
    per_producer: u32,
    watch: &mut dyn FnMut(),
) -> (Duration, Vec<String>) {
    let start = Instant::now();
    let workers: Vec<Child> = (0..4)
        .map(|_| common::spawn_guest(store, "queue-tool", &["work", queue, "16", "30000", "5000"]))
        .collect();
    let producers: Vec<Child> = (0..2)
        .map(|i| {
            common::spawn_guest(
                store,
                "queue-tool",
                &[
                    "produce",
                    queue,
                    &per_producer.to_string(),
                    &format!("p{i}"),
                ],
            )
        })
        .collect();
    let mut running: Vec<(Child, &str)> = workers
        .into_iter()
        .map(|c| (c, "worker"))
        .chain(producers.into_iter().map(|c| (c, "producer")))
        .collect();
    let mut outputs = Vec::new();
    while !running.is_empty() {
        watch();
        let mut still = Vec::new();
        for (mut c, who) in running {
            if c.try_wait().unwrap().is_some() {
                outputs.push(common::finish(c, who));
            } else {
                still.push((c, who));
            }
        }
        running = still;
        std::thread::sleep(Duration::from_millis(50));
    }
    (start.elapsed(), outputs)
}

fn operators_watching_do_not_disturb_workers(store: &Store) {
    populate(store);
    let per_producer = 1500;
    // Once alone, once watched by inspect and a dashboard all along.
    let (alone, out_alone) = workload(store, "work-alone", per_producer, &mut || {});
    let d = dashboard(store, &["--addr", "127.0.0.1:0"]);
    let mut looks = 0u32;
    let (watched, out_watched) = workload(store, "work-watched", per_producer, &mut || {
        let o = inspect(store, &["--json"]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let (status, body) = http(d.addr, "GET", "/api/overview", &[], "");
        assert_eq!(status, 200, "{body}");
        assert_eq!(http(d.addr, "GET", "/metrics", &[], "").0, 200);
        looks += 1;
    });
    for (what, outputs) in [("alone", &out_alone), ("watched", &out_watched)] {
        let all = outputs.join("\n");
        assert!(
            !all.lines().any(|l| l.starts_with("error")),
            "{what}: a worker saw errors:\n{}",
            all.lines()
                .filter(|l| l.starts_with("error"))
                .take(5)
                .collect::<Vec<_>>()
                .join("\n")
        );
        let acked: u64 = all
            .lines()
            .filter_map(|l| l.strip_prefix("done "))
            .map(|n| n.trim().parse::<u64>().unwrap())
            .sum();
        assert_eq!(acked, 2 * u64::from(per_producer), "{what}");
    }
    // When they stop, the counts add up: nothing left anywhere.
    let o = inspect_json(store, &["--json"]);
    for q in ["work-alone", "work-watched"] {
        let s = find(&o["queues"], q);
        assert_eq!(
            (&s["waiting"], &s["in_flight"], &s["dead"]),
            (&Value::from(0), &Value::from(0), &Value::from(0)),
            "{s}"
        );
    }
    let (_, text) = http(d.addr, "GET", "/metrics", &[], "");
    let m = metrics(&text);
    assert_eq!(
        sample(
            &m,
            "alk_queue_messages",
            &[("queue", "work-watched"), ("state", "waiting")]
        ),
        0.0
    );
    // A figure, not an assertion: the machine's speed is not the test's.
    println!(
        "4 workers + 2 producers, {} messages: {:.2} s alone, {:.2} s watched ({looks} looks by inspect, the dashboard and /metrics); ratio {:.2}",
        2 * per_producer,
        alone.as_secs_f64(),
        watched.as_secs_f64(),
        watched.as_secs_f64() / alone.as_secs_f64()
    );
}

on_every_engine! {
    operators_watching_do_not_disturb_workers;
}

#[test]
fn serve_answers_metrics_on_a_listener_of_its_own() {
    let store = Store::dir();
    populate(&store);
    let mut child = alk_host()
        .arg("serve")
        .arg(common::guest("http-guest"))
        .args(store.store_args())
        .args(["--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut addr_of = |what: &str| -> SocketAddr {
        let line = lines.next().and_then(Result::ok).unwrap_or_default();
        assert!(line.contains(what), "{line}");
        line.split("http://")
            .nth(1)
            .and_then(|a| a.split('/').next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line}"))
    };
    let app = addr_of("Serving HTTP");
    let metrics_addr = addr_of("metrics");
    std::thread::spawn(move || for _ in lines {});
    for _ in 0..3 {
        assert_eq!(http(app, "GET", "/count/1", &[], "").0, 200);
    }
    assert_eq!(http(app, "GET", "/trap", &[], "").0, 500);
    // The handler's own paths are the handler's: /metrics there is its.
    let (status, text) = http(metrics_addr, "GET", "/metrics", &[], "");
    assert_eq!(status, 200, "{text}");
    let m = metrics(&text);
    assert_eq!(sample(&m, "alk_http_requests_total", &[]), 4.0);
    assert_eq!(sample(&m, "alk_http_handler_failures_total", &[]), 1.0);
    assert_eq!(
        sample(
            &m,
            "alk_queue_messages",
            &[("queue", "orders"), ("state", "dead")]
        ),
        1.0
    );
    assert_eq!(http(metrics_addr, "GET", "/other", &[], "").0, 404);
    let _ = child.kill();
    let _ = child.wait();
}
