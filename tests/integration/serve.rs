//! `alk-host serve` and `Runner::serve`: HTTP handler components on the
//! stores, through the CLI and through the library; handlers that trap,
//! loop or sleep past their limit; several servers on one data directory
//! or database; the network policy; graceful shutdown; the wrong kind of
//! component.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alk_host::{NetworkPolicy, ServeOptions};
use bytes::Bytes;
use http_body_util::BodyExt as _;

use crate::common::{self, Killed, Store, StoreArgs, alk_host, guest, text};

/// One request on a fresh connection: the status and the body (what
/// arrived of it, when the connection was cut).
async fn request_async(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(wasmtime_wasi_http::io::TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(conn);
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, addr.to_string())
        .body(http_body_util::Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = sender.send_request(request).await.expect("send");
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    (status, text(&bytes))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// One request, waiting for its answer.
fn request(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    runtime().block_on(request_async(addr, method, path, ""))
}

/// A server run by the library on this test's runtime: its address, the
/// sender that stops it, and its task.
async fn serve_lib(
    name: &str,
    ctx: alk_host::AlkCtx,
    opts: ServeOptions,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<wasmtime::Result<()>>,
) {
    let server = common::runner()
        .bind(&common::component(name), ctx, &opts)
        .await
        .expect("bind");
    let addr = server.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    (addr, stop, serving)
}

/// An `alk-host serve` process and what it printed.
struct Serving {
    child: Killed,
    addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
}

impl Serving {
    /// Starts `alk-host serve <guest> --addr 127.0.0.1:0 <store> [extra…]`
    /// and waits for its "Serving HTTP on" line.
    fn start(name: &str, store: &(impl StoreArgs + ?Sized), extra: &[&str]) -> Serving {
        let mut child = alk_host()
            .arg("serve")
            .arg(guest(name))
            .args(["--addr", "127.0.0.1:0"])
            .args(store.store_args())
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn alk-host serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut seen = String::new();
        let addr = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    seen.push_str(&line);
                    seen.push('\n');
                    if let Some(rest) = line.strip_prefix("Serving HTTP on http://") {
                        break rest.trim_end_matches('/').parse().expect("address");
                    }
                }
                _ => {
                    let status = child.wait().unwrap();
                    panic!("alk-host serve exited ({status}) before serving:\n{seen}");
                }
            }
        };
        let stderr = Arc::new(Mutex::new(seen));
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        Serving {
            child: Killed(child),
            addr,
            stderr,
        }
    }

    /// Sends SIGTERM and waits: the exit status and everything printed.
    fn stop(mut self) -> (std::process::ExitStatus, String) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        let status = self.child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let printed = self.stderr.lock().unwrap().clone();
        (status, printed)
    }
}

/// Through the CLI: a handler without storage, a counter over
/// `wasi:keyvalue`, a send to an alk queue; SIGTERM stops it with 0.
#[test]
fn a_handler_answers_counts_and_sends_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let server = Serving::start("http-guest", dir.path(), &["--env", "GREETING=hi"]);
    assert_eq!(request(server.addr, "GET", "/"), (200, "hello\n".into()));
    assert_eq!(request(server.addr, "POST", "/count/visits"), (200, "1\n".into()));
    assert_eq!(request(server.addr, "POST", "/count/visits"), (200, "2\n".into()));
    assert_eq!(request(server.addr, "GET", "/count/visits"), (200, "2\n".into()));
    assert_eq!(
        runtime().block_on(request_async(server.addr, "POST", "/visit", "from-test")),
        (200, "1\n".into())
    );
    assert_eq!(request(server.addr, "GET", "/env/GREETING"), (200, "hi\n".into()));
    assert_eq!(request(server.addr, "GET", "/nowhere").0, 404);
    let (status, printed) = server.stop();
    assert!(status.success(), "{status}: {printed}");
    // The data stays: a command reads the queue the handler sent to.
    let out = common::run_cli("queue-tool", dir.path(), &[], &["receive", "visits", "10"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("from-test"), "{}", text(&out.stdout));
}

/// Through the library: a handler that traps, or grows past its memory
/// limit, gets its request a 500, one that loops or sleeps past the time
/// limit a 503; the server goes on.
#[test]
fn misbehaving_handlers_end_only_their_own_request() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    rt.block_on(async {
        let opts = ServeOptions {
            addr: "127.0.0.1:0".parse().unwrap(),
            // Long enough for any machine to start an instance and trap;
            // the loop and the sleep outlast it by far.
            request_timeout: Some(Duration::from_secs(2)),
            max_memory_bytes: Some(64 << 20),
            ..ServeOptions::default()
        };
        let (addr, stop, serving) = serve_lib("http-guest", common::ctx(dir.path()), opts).await;
        let (status, body) = request_async(addr, "GET", "/trap", "").await;
        assert_eq!(status, 500, "{body}");
        assert!(body.contains("trapped"), "{body}");
        let (status, body) = request_async(addr, "GET", "/grow/256", "").await;
        assert_eq!(status, 500, "{body}");
        assert!(body.contains("the memory limit is 67108864 bytes"), "{body}");
        assert_eq!(
            request_async(addr, "GET", "/grow/8", "").await,
            (200, "grew by 8 MiB\n".into())
        );
        let (status, body) = request_async(addr, "GET", "/loop", "").await;
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("time limit"), "{body}");
        let (status, body) = request_async(addr, "GET", "/sleep/600000", "").await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(request_async(addr, "GET", "/", "").await, (200, "hello\n".into()));
        assert_eq!(
            request_async(addr, "POST", "/count/n", "").await,
            (200, "1\n".into())
        );
        let _ = stop.send(());
        serving.await.unwrap().expect("served");
    });
}

/// Several servers on one store, many concurrent increments of one
/// counter, one server restarted in the middle: every increment counted
/// once.
fn concurrent_increments_across_servers_are_all_counted(store: &Store) {
    const ROUNDS: usize = 3;
    const PER_ROUND: usize = 40;
    let a = Serving::start("http-guest", store, &[]);
    let mut b = Serving::start("http-guest", store, &[]);
    let rt = runtime();
    for round in 0..ROUNDS {
        let addrs = [a.addr, b.addr];
        let answers: Vec<u16> = rt.block_on(async {
            let tasks: Vec<_> = (0..PER_ROUND)
                .map(|i| {
                    let addr = addrs[i % 2];
                    tokio::spawn(async move { request_async(addr, "POST", "/count/n", "").await.0 })
                })
                .collect();
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.unwrap());
            }
            out
        });
        assert!(answers.iter().all(|s| *s == 200), "round {round}: {answers:?}");
        if round == 0 {
            // A restart between rounds loses nothing.
            let (status, printed) = b.stop();
            assert!(status.success(), "{printed}");
            b = Serving::start("http-guest", store, &[]);
        }
    }
    assert_eq!(
        request(a.addr, "GET", "/count/n"),
        (200, format!("{}\n", ROUNDS * PER_ROUND))
    );
    assert_eq!(
        request(b.addr, "GET", "/count/n"),
        (200, format!("{}\n", ROUNDS * PER_ROUND))
    );
}

common::on_every_engine! {
    concurrent_increments_across_servers_are_all_counted;
}

/// SIGTERM while a request is in flight: the request finishes, then the
/// server exits 0; new connections are refused.
#[test]
fn a_shutdown_finishes_the_requests_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let server = Serving::start("http-guest", dir.path(), &[]);
    let addr = server.addr;
    let slow = std::thread::spawn(move || request(addr, "GET", "/sleep/3000"));
    // The signal comes once the handler is running (it counts itself
    // before it sleeps), however long the machine took to get there.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while request(addr, "GET", "/count/sleeping") != (200, "1\n".into()) {
        assert!(std::time::Instant::now() < deadline, "the slow request never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, printed) = server.stop();
    assert!(status.success(), "{status}: {printed}");
    assert_eq!(slow.join().unwrap(), (200, "slept\n".into()));
    assert!(std::net::TcpStream::connect(addr).is_err());
}

/// A tiny HTTP server on 127.0.0.1 that answers every request 204; its
/// address.
fn upstream() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n");
        }
    });
    addr
}

/// Sockets and outgoing HTTP are denied by default — an error the handler
/// reports, not a trap — and allowed by `-S inherit-network` and `-S http`.
#[test]
fn the_network_is_denied_unless_allowed() {
    let up = upstream();
    let dir = tempfile::tempdir().unwrap();
    let closed = Serving::start("http-guest", dir.path(), &[]);
    let (status, body) = request(closed.addr, "GET", &format!("/connect/{up}"));
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("connect failed"), "{body}");
    let (status, body) = request(closed.addr, "GET", &format!("/fetch/{up}"));
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("HttpRequestDenied"), "{body}");
    drop(closed);
    let open = Serving::start(
        "http-guest",
        dir.path(),
        &["-S", "inherit-network", "-S", "http"],
    );
    assert_eq!(
        request(open.addr, "GET", &format!("/connect/{up}")),
        (200, "connected\n".into())
    );
    assert_eq!(
        request(open.addr, "GET", &format!("/fetch/{up}")),
        (200, "upstream answered 204\n".into())
    );
    // The library's policy is the same switch.
    assert_eq!(NetworkPolicy::default(), NetworkPolicy {
        inherit_network: false,
        allow_ip_name_lookup: false,
        outgoing_http: false,
    });
}

/// Each wrong kind of component gets one line saying what it is and what
/// to do.
#[test]
fn the_wrong_kind_of_component_gets_one_line() {
    let dir = tempfile::tempdir().unwrap();
    // An HTTP handler given to `run`.
    let out = common::run_cli("http-guest", dir.path(), &[], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("wasi:http/incoming-handler") && err.contains("alk-host serve"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // A command given to `serve`.
    let out = alk_host()
        .arg("serve")
        .arg(guest("hello"))
        .args(["--addr", "127.0.0.1:0"])
        .args(dir.path().store_args())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("wasi:cli/run") && err.contains("alk-host run"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // A core module.
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\x00\x00\x00").unwrap();
    for command in ["run", "serve"] {
        let out = alk_host()
            .arg(command)
            .arg(&core)
            .args(dir.path().store_args())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = text(&out.stderr);
        assert!(err.contains("core WebAssembly module"), "{command}: {err}");
    }
    // A component importing an interface alk does not provide.
    let out = common::run_cli("foreign-import", dir.path(), &[], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("alk:test/nowhere") && err.contains("does not provide"), "{err}");
    // A component exporting neither.
    let out = common::run_cli("no-export", dir.path(), &[], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("exports neither"), "{err}");
}

/// A Python handler (componentize-py, the `alk:store/http-handler` world)
/// keeps a guest book in an alk bucket and queue, through the CLI; its
/// exception is a 500 and the server goes on.
#[test]
fn a_python_handler_serves_from_the_stores() {
    let dir = tempfile::tempdir().unwrap();
    let server = Serving::start("http-py", dir.path(), &[]);
    assert_eq!(request(server.addr, "GET", "/"), (200, "hello from python\n".into()));
    let rt = runtime();
    for (i, entry) in ["first", "second"].iter().enumerate() {
        assert_eq!(
            rt.block_on(request_async(server.addr, "POST", "/guestbook", entry)),
            (200, format!("{}\n", i + 1))
        );
    }
    assert_eq!(request(server.addr, "GET", "/trap").0, 500);
    assert_eq!(request(server.addr, "GET", "/guestbook"), (200, "2\n".into()));
    let (status, printed) = server.stop();
    assert!(status.success(), "{printed}");
    let out = common::run_cli("queue-tool", dir.path(), &[], &["receive", "guestbook", "10"]);
    let got = text(&out.stdout);
    assert!(got.contains("first") && got.contains("second"), "{got}");
}

/// A bounded load on 127.0.0.1 (it stops by itself after its requests):
/// 32 clients at once against a server that takes 8 requests at a time.
/// The ones beyond are told 503 and to retry; every increment answered 200
/// is counted exactly once, none answered 503 is counted.
#[test]
fn a_bounded_load_sheds_what_it_cannot_take_and_counts_the_rest() {
    const CLIENTS: usize = 32;
    const EACH: usize = 25;
    let dir = tempfile::tempdir().unwrap();
    let server = Serving::start(
        "http-guest",
        dir.path(),
        &["--max-concurrent-requests", "8", "--durability", "relaxed"],
    );
    let addr = server.addr;
    let statuses: Vec<u16> = runtime().block_on(async move {
        let clients: Vec<_> = (0..CLIENTS)
            .map(|_| {
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    for _ in 0..EACH {
                        got.push(request_async(addr, "POST", "/count/load", "").await.0);
                    }
                    got
                })
            })
            .collect();
        let mut all = Vec::new();
        for c in clients {
            all.extend(c.await.unwrap());
        }
        all
    });
    assert_eq!(statuses.len(), CLIENTS * EACH);
    assert!(statuses.iter().all(|s| *s == 200 || *s == 503), "{statuses:?}");
    let counted = statuses.iter().filter(|s| **s == 200).count();
    assert!(counted > 0);
    assert_eq!(request(addr, "GET", "/count/load"), (200, format!("{counted}\n")));
}

/// `alk-host run` has the same policy: a command's socket and outgoing
/// request are refused (errors it prints, not traps) until allowed.
#[test]
fn a_command_reaches_the_network_only_when_allowed() {
    let up = upstream();
    let dir = tempfile::tempdir().unwrap();
    let up = up.to_string();
    let run = |extra: &[&str], args: &[&str]| {
        let out = common::run_cli("net-tool", dir.path(), extra, args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let got = run(&[], &["connect", &up]);
    assert!(got.starts_with("connect failed"), "{got}");
    let got = run(&[], &["fetch", &up]);
    assert!(got.contains("HttpRequestDenied"), "{got}");
    assert_eq!(run(&["-S", "inherit-network"], &["connect", &up]), "connected\n");
    assert_eq!(run(&["-S", "http"], &["fetch", &up]), "upstream answered 204\n");
    // Sockets and outgoing HTTP are separate permissions.
    let got = run(&["-S", "http"], &["connect", &up]);
    assert!(got.starts_with("connect failed"), "{got}");
}

/// The Python handler through the library: an embedder serving its
/// plugins over HTTP in one call, on the memory engine.
#[test]
fn a_python_handler_serves_through_the_library() {
    let rt = runtime();
    rt.block_on(async {
        let engine: Arc<dyn alk_host::Engine> = Arc::new(alk_host::MemoryEngine::new());
        let ctx = alk_host::AlkCtx::builder().engine(engine).build();
        let opts = ServeOptions {
            addr: "127.0.0.1:0".parse().unwrap(),
            ..ServeOptions::default()
        };
        let (addr, stop, serving) = serve_lib("http-py", ctx, opts).await;
        assert_eq!(
            request_async(addr, "POST", "/guestbook", "library").await,
            (200, "1\n".into())
        );
        assert_eq!(
            request_async(addr, "GET", "/guestbook", "").await,
            (200, "1\n".into())
        );
        let _ = stop.send(());
        serving.await.unwrap().expect("served");
    });
}
