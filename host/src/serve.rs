//! Serving HTTP handler components (`wasi:http/incoming-handler`, the
//! `wasi:http/proxy` world): what `alk-host serve` does, usable by
//! embedders in one call ([`Runner::serve`]).
//!
//! The component is checked and pre-instantiated once; every request gets
//! an instance of its own, with a fresh [`AlkCtx`] clone over the shared
//! engine (so handlers coordinate through the stores, never through
//! memory), its own memory limit and its own wall-time limit. A handler
//! that traps, loops or sleeps past its limit ends its own request (500,
//! or 503 for the time limit) and nothing else. Requests beyond the bound
//! on concurrent requests are answered 503 at once. On shutdown the server
//! stops accepting, lets the requests in flight finish within a deadline,
//! then drops what is left.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use tokio::net::TcpListener;
use wasmtime::component::{Component, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi_http::WasiHttpView as _;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use crate::ctx::AlkCtx;
use crate::http::HttpState;
use crate::kind::Kind;
use crate::metrics::HttpCounters;
use crate::network::NetworkPolicy;
use crate::run::{RunState, Runner, guest_wasi, memory_limits};

/// Options of a server of one HTTP handler component.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Where to listen [default: 127.0.0.1:8080]. Port 0 picks a free one
    /// ([`Server::local_addr`] says which).
    pub addr: SocketAddr,
    /// Environment variables every instance sees (nothing is inherited).
    pub env: Vec<(String, String)>,
    /// Host directories preopened for every instance: `(host path, guest
    /// path)`.
    pub dirs: Vec<(PathBuf, String)>,
    /// Most linear memory one instance (one request) may grow to, in bytes.
    pub max_memory_bytes: Option<usize>,
    /// Wall-time limit of one request, from the instance's start to the end
    /// of its response body [default: 30 s]. A handler past it is stopped
    /// and its request answered 503 (or cut, when its response had
    /// started).
    pub request_timeout: Option<Duration>,
    /// Requests handled at once [default: 100]; more are answered 503 with
    /// `retry-after: 1` at once.
    pub max_concurrent_requests: usize,
    /// How long a shutdown waits for the requests in flight [default:
    /// 10 s]; what is still running then is dropped.
    pub shutdown_timeout: Duration,
    /// What handlers may reach on the network (nothing by default).
    pub network: NetworkPolicy,
    /// Where to serve `GET /metrics` (Prometheus text, see
    /// [`crate::metrics`]) [default: nowhere]. A listener of its own, so
    /// that no path of the handler's is taken.
    pub metrics_addr: Option<SocketAddr>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            env: Vec::new(),
            dirs: Vec::new(),
            max_memory_bytes: None,
            request_timeout: Some(Duration::from_secs(30)),
            max_concurrent_requests: 100,
            shutdown_timeout: Duration::from_secs(10),
            network: NetworkPolicy::default(),
            metrics_addr: None,
        }
    }
}

/// A bound server, ready to [`Server::run`].
pub struct Server {
    listener: TcpListener,
    metrics: Option<TcpListener>,
    shared: Arc<Shared>,
}

/// What every request's task shares.
struct Shared {
    engine: Engine,
    pre: ProxyPre<RunState>,
    alk: AlkCtx,
    opts: ServeOptions,
    permits: Arc<tokio::sync::Semaphore>,
    counters: HttpCounters,
}

impl Runner {
    /// Checks that `component` is an HTTP handler whose imports alk
    /// provides, pre-instantiates it and binds `opts.addr`. `Err` says
    /// what is wrong in one line (a command, a component exporting
    /// neither, an import alk does not provide, an address in use).
    pub async fn bind(
        &self,
        component: &Component,
        alk: AlkCtx,
        opts: &ServeOptions,
    ) -> wasmtime::Result<Server> {
        crate::kind::require(self.kind(component), Kind::HttpHandler)?;
        let pre = self
            .linker
            .instantiate_pre(component)
            .map_err(crate::kind::explain_instantiate)?;
        let pre = ProxyPre::new(pre).map_err(crate::kind::explain_instantiate)?;
        // Checked once here so a bad directory is a start-up error, not a
        // 500 on every request.
        guest_wasi(&opts.env, &opts.dirs, &opts.network)?;
        if opts.request_timeout.is_some() {
            self.start_ticker();
        }
        let listener = TcpListener::bind(opts.addr)
            .await
            .map_err(|e| wasmtime::format_err!("cannot listen on {}: {e}", opts.addr))?;
        let metrics = match opts.metrics_addr {
            Some(addr) => Some(TcpListener::bind(addr).await.map_err(|e| {
                wasmtime::format_err!("cannot listen on {addr} (--metrics-addr): {e}")
            })?),
            None => None,
        };
        Ok(Server {
            listener,
            metrics,
            shared: Arc::new(Shared {
                engine: self.engine.clone(),
                pre,
                alk,
                opts: opts.clone(),
                permits: Arc::new(tokio::sync::Semaphore::new(
                    opts.max_concurrent_requests.max(1),
                )),
                counters: HttpCounters::default(),
            }),
        })
    }

    /// [`Runner::bind`], then [`Server::run`] until `shutdown` completes.
    pub async fn serve(
        &self,
        component: &Component,
        alk: AlkCtx,
        opts: &ServeOptions,
        shutdown: impl Future<Output = ()>,
    ) -> wasmtime::Result<()> {
        self.bind(component, alk, opts).await?.run(shutdown).await
    }
}

impl Server {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or(self.shared.opts.addr)
    }

    /// The address `/metrics` is served on, when it is.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Serves until `shutdown` completes, then stops accepting, lets the
    /// requests in flight finish within [`ServeOptions::shutdown_timeout`]
    /// and returns.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> wasmtime::Result<()> {
        let Server {
            listener,
            metrics,
            shared,
        } = self;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let metrics_task = metrics.map(|l| {
            let shared = shared.clone();
            tokio::spawn(serve_metrics(l, shared))
        });
        let mut connections = tokio::task::JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => {
                    let stream = match accepted {
                        Ok((stream, _)) => stream,
                        Err(e) => {
                            // Out of file descriptors, say: the listener
                            // stays; try again shortly.
                            tracing::warn!(target: "alk", "accepting a connection failed: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let shared = shared.clone();
                    let mut stopped = stopped.clone();
                    connections.spawn(async move {
                        let service = service_fn(move |req| handle(shared.clone(), req));
                        let conn = http1::Builder::new()
                            .keep_alive(true)
                            .serve_connection(TokioIo::new(stream), service);
                        tokio::pin!(conn);
                        tokio::select! {
                            _ = conn.as_mut() => {}
                            _ = stopped.changed() => {
                                // Finish the request in flight, then close.
                                conn.as_mut().graceful_shutdown();
                                let _ = conn.await;
                            }
                        }
                    });
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(listener);
        if let Some(task) = metrics_task {
            task.abort();
        }
        let _ = stop.send(true);
        let drained = tokio::time::timeout(shared.opts.shutdown_timeout, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                target: "alk",
                "{} connection(s) still busy after {:?}; dropping them",
                connections.len(),
                shared.opts.shutdown_timeout
            );
            connections.abort_all();
        }
        shared.alk.engine().flush().await;
        Ok(())
    }
}

/// Answers `GET /metrics` on `listener` until aborted; every other path
/// is 404.
async fn serve_metrics(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let shared = shared.clone();
                async move {
                    if req.uri().path() != "/metrics" {
                        return Ok::<_, Infallible>(plain(404, "only /metrics is served here"));
                    }
                    let engine = shared.alk.engine().clone();
                    let now = shared.alk.clock().now_ms();
                    Ok(
                        match crate::metrics::render(Some(&engine), Some(&shared.counters), now)
                            .await
                        {
                            Ok(text) => {
                                let mut r = plain(200, "");
                                *r.body_mut() = http_body_util::Full::new(Bytes::from(text))
                                    .map_err(|never: Infallible| match never {})
                                    .boxed_unsync();
                                r.headers_mut().insert(
                                    hyper::header::CONTENT_TYPE,
                                    hyper::header::HeaderValue::from_static(
                                        crate::metrics::CONTENT_TYPE,
                                    ),
                                );
                                r
                            }
                            Err(e) => plain(500, &format!("reading the metrics failed: {e}")),
                        },
                    )
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// A plain-text response of the host's own (a refused or failed request).
fn plain(status: u16, text: &str) -> hyper::Response<HyperOutgoingBody> {
    let body = http_body_util::Full::new(Bytes::from(format!("{text}\n")))
        .map_err(|never: Infallible| match never {})
        .boxed_unsync();
    let mut response = hyper::Response::new(body);
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Why an instance's run ended without a response.
#[derive(Debug)]
struct TimedOut(Duration);

impl std::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the handler ran past its time limit of {:?}", self.0)
    }
}

impl std::error::Error for TimedOut {}

/// One request: a new instance of the handler, which answers through the
/// response outparam; the host's own answer when it does not.
async fn handle(
    shared: Arc<Shared>,
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<HyperOutgoingBody>, Infallible> {
    HttpCounters::bump(&shared.counters.requests);
    let Ok(permit) = shared.permits.clone().try_acquire_owned() else {
        HttpCounters::bump(&shared.counters.refused);
        let mut busy = plain(
            503,
            &format!(
                "the server is handling its limit of {} requests at once; retry",
                shared.opts.max_concurrent_requests
            ),
        );
        busy.headers_mut().insert(
            hyper::header::RETRY_AFTER,
            hyper::header::HeaderValue::from_static("1"),
        );
        return Ok(busy);
    };
    let opts = &shared.opts;
    let wasi = match guest_wasi(&opts.env, &opts.dirs, &opts.network) {
        Ok(mut wasi) => {
            wasi.inherit_stdout().inherit_stderr();
            wasi.build()
        }
        Err(e) => return Ok(plain(500, &format!("cannot start the handler: {e}"))),
    };
    let state = RunState {
        wasi,
        alk: shared.alk.clone(),
        http: HttpState::new(opts.network.outgoing_http),
        table: ResourceTable::new(),
        limits: memory_limits(opts.max_memory_bytes),
    };
    let mut store = Store::new(&shared.engine, state);
    store.limiter(|s| &mut s.limits);
    // The epoch makes a handler that computes without calling the host
    // yield every tick, so its time limit can fire while it runs.
    store.set_epoch_deadline(1);
    store.epoch_deadline_async_yield_and_update(1);
    let (sender, receiver) = tokio::sync::oneshot::channel();
    let incoming = match store.data_mut().http().new_incoming_request(Scheme::Http, request) {
        Ok(r) => r,
        Err(e) => return Ok(plain(400, &format!("bad request: {e}"))),
    };
    let out = match store.data_mut().http().new_response_outparam(sender) {
        Ok(o) => o,
        Err(e) => return Ok(plain(500, &format!("cannot start the handler: {e}"))),
    };
    let pre = shared.pre.clone();
    let limit = opts.request_timeout;
    let engine = shared.alk.engine().clone();
    let task = tokio::spawn(async move {
        let guest = async {
            let proxy = pre.instantiate_async(&mut store).await?;
            proxy
                .wasi_http_incoming_handler()
                .call_handle(&mut store, incoming, out)
                .await
        };
        let result = match limit {
            Some(limit) => match tokio::time::timeout(limit, guest).await {
                Ok(result) => result,
                Err(_) => Err(wasmtime::Error::new(TimedOut(limit))),
            },
            None => guest.await,
        };
        // The store (and with it a response body still being written) is
        // dropped here: a handler stopped mid-body cuts its connection.
        drop(store);
        // Background work of the handler's last calls (a wake for other
        // hosts) is finished before its permit is given back.
        engine.flush().await;
        drop(permit);
        result
    });
    match receiver.await {
        Ok(Ok(response)) => Ok(response),
        Ok(Err(code)) => {
            tracing::warn!(target: "alk", "the handler answered an error: {code:?}");
            Ok(plain(500, &format!("the handler failed: {code:?}")))
        }
        // The instance ended without a response: how.
        Err(_) => Ok(match task.await {
            Ok(Ok(())) => plain(
                500,
                "the handler returned without setting a response (response-outparam.set)",
            ),
            Ok(Err(e)) if e.downcast_ref::<TimedOut>().is_some() => {
                HttpCounters::bump(&shared.counters.timed_out);
                tracing::warn!(target: "alk", "{e}; answered 503");
                plain(503, &e.to_string())
            }
            Ok(Err(e)) => {
                HttpCounters::bump(&shared.counters.failed);
                let text = describe(&e, opts.max_memory_bytes);
                tracing::warn!(target: "alk", "the handler trapped: {text}");
                plain(500, &format!("the handler trapped: {text}"))
            }
            Err(join) => plain(500, &format!("the handler's task failed: {join}")),
        }),
    }
}

/// A trap in one line — its root cause, naming the memory limit when that
/// was it — for the answer and the log (the backtrace is logged at debug).
fn describe(e: &wasmtime::Error, max_memory_bytes: Option<usize>) -> String {
    tracing::debug!(target: "alk", "the handler trapped: {e:?}");
    let mut text = match e.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => trap.to_string(),
        None => e.chain().last().map(|c| c.to_string()).unwrap_or_default(),
    };
    if let Some(max) = max_memory_bytes
        && e.chain().any(|c| c.to_string().contains("memory"))
    {
        text.push_str(&format!(" (the memory limit is {max} bytes)"));
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
