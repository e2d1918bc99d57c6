//! `alk-host dashboard`: a web page for operators, served by the binary
//! itself (the page is compiled in; nothing is fetched at run time), over
//! the same reads as `inspect`, with a few actions on dead letters and
//! `/metrics`.
//!
//! Access: loopback by default. Any other address needs a token (`--token`
//! or `$ALK_DASHBOARD_TOKEN`), checked on every request, `/metrics`
//! included: `Authorization: Bearer <token>`, or the cookie a browser gets
//! by opening `/?token=<token>` once. Actions are POSTs carrying the header
//! `x-alk-action` (which a page of another origin cannot send without
//! being allowed to), so a link or a form elsewhere cannot trigger one.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use alk_host::store::queue::Queue;
use alk_host::store::stream::Streams;
use alk_host::store::{Catalog, StreamLimits};
use alk_host::{AlkError, Engine};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use wasmtime_wasi_http::io::TokioIo;

use super::run::block_on;
use super::store::StoreArgs;
use super::view::{
    self, job_json, limits_json, now_ms, stats_json, stream_json, value_json,
};

/// The page, compiled into the binary.
const PAGE: &str = include_str!("dashboard.html");

/// The environment variable the token may come from.
pub const TOKEN_ENV: &str = "ALK_DASHBOARD_TOKEN";

/// Most bytes of an action's body.
const MAX_BODY: usize = 64 * 1024;

/// Serve a web page showing every store (counts, a queue's jobs, dead
/// letters with redrive, cancel and purge, streams with consumer lags,
/// locks, schedules, keys) and `/metrics`, refreshing by itself.
///
/// It listens on loopback unless told otherwise; any other address needs a
/// token. It reads like `inspect` (creating nothing) and acts only when an
/// operator confirms an action on the page.
#[derive(Debug, clap::Args)]
pub struct DashboardCommand {
    #[command(flatten)]
    store: StoreArgs,

    /// The address to listen on (port 0 picks a free one, printed at
    /// start).
    #[arg(long, value_name = "SOCKADDR", default_value = "127.0.0.1:8090")]
    addr: SocketAddr,

    /// The token every request must carry (as `Authorization: Bearer …`,
    /// or in the browser by opening `/?token=…` once) [default:
    /// $ALK_DASHBOARD_TOKEN]. Required to listen on anything but loopback.
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
}

struct State {
    engine: Arc<dyn Engine>,
    token: Option<String>,
}

type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>;

fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed_unsync());
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn json_response(status: StatusCode, v: &Value) -> Response<Body> {
    respond(status, "application/json", v.to_string())
}

fn fail(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    json_response(status, &json!({"error": message.into()}))
}

fn engine_error(e: AlkError) -> Response<Body> {
    let status = match e {
        AlkError::InvalidName(_) | AlkError::ReservedName(_) | AlkError::InvalidArgument(_) => {
            StatusCode::BAD_REQUEST
        }
        AlkError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    fail(status, e.to_string())
}

/// Compares without stopping at the first difference.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

fn cookie_token(req: &Request<Incoming>) -> Option<String> {
    req.headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix("alk_token="))
        .map(str::to_string)
        .next()
}

fn bearer(req: &Request<Incoming>) -> Option<String> {
    req.headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(|t| t.trim().to_string())
}

fn query(req: &Request<Incoming>) -> Vec<(String, String)> {
    form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

fn param<'a>(q: &'a [(String, String)], name: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

impl DashboardCommand {
    /// Serves until SIGINT or SIGTERM; the process exit code.
    pub fn execute(self) -> ExitCode {
        block_on(async { self.run().await.map(|()| ExitCode::SUCCESS) })
    }

    async fn run(self) -> wasmtime::Result<()> {
        let token = self
            .token
            .clone()
            .or_else(|| std::env::var(TOKEN_ENV).ok())
            .filter(|t| !t.is_empty());
        if !self.addr.ip().is_loopback() && token.is_none() {
            wasmtime::bail!(
                "listening on {} (not loopback) needs a token: give --token or set {TOKEN_ENV}",
                self.addr
            );
        }
        if let Some(t) = &token
            && (t.len() < 16
                || !t
                    .chars()
                    .all(|c| c.is_ascii_graphic() && c != ';' && c != ','))
        {
            wasmtime::bail!(
                "the token must be at least 16 printable characters without spaces, ';' or ','"
            );
        }
        let (engine, _) = self.store.existing().await?;
        let listener = TcpListener::bind(self.addr)
            .await
            .map_err(|e| wasmtime::format_err!("cannot listen on {}: {e}", self.addr))?;
        let addr = listener.local_addr()?;
        eprintln!(
            "Dashboard of {} on http://{addr}/{}",
            engine.describe(),
            if token.is_some() {
                " (token required)"
            } else {
                ""
            }
        );
        let state = Arc::new(State { engine, token });
        let stop = super::serve::signal();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => break,
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    };
                    let state = state.clone();
                    tokio::spawn(async move {
                        let service = service_fn(move |req| {
                            let state = state.clone();
                            async move { Ok::<_, Infallible>(handle(&state, req).await) }
                        });
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            }
        }
        eprintln!("alk-host: dashboard stopped");
        Ok(())
    }
}

async fn handle(state: &State, req: Request<Incoming>) -> Response<Body> {
    let q = query(&req);
    if let Some(expected) = &state.token {
        // Opening `/?token=…` once gives the browser a cookie.
        if req.uri().path() == "/"
            && let Some(given) = param(&q, "token")
        {
            if !same(given, expected) {
                return respond(
                    StatusCode::UNAUTHORIZED,
                    "text/plain; charset=utf-8",
                    "wrong token\n",
                );
            }
            let mut r = respond(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", "");
            r.headers_mut()
                .insert(header::LOCATION, HeaderValue::from_static("/"));
            if let Ok(v) = HeaderValue::from_str(&format!(
                "alk_token={expected}; HttpOnly; SameSite=Strict; Path=/"
            )) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            return r;
        }
        let given = bearer(&req).or_else(|| cookie_token(&req));
        if !given.is_some_and(|g| same(&g, expected)) {
            let mut r = respond(
                StatusCode::UNAUTHORIZED,
                "text/plain; charset=utf-8",
                "this dashboard needs its token: send `Authorization: Bearer <token>`, or open /?token=<token> in the browser\n",
            );
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
    }
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    match (method, path.as_str()) {
        (Method::GET, "/") => respond(StatusCode::OK, "text/html; charset=utf-8", PAGE),
        (Method::GET, "/metrics") => {
            match alk_host::metrics::render(Some(&state.engine), None, now_ms()).await {
                Ok(text) => respond(StatusCode::OK, alk_host::metrics::CONTENT_TYPE, text),
                Err(e) => engine_error(e),
            }
        }
        (Method::GET, "/api/overview") => match overview(&state.engine).await {
            Ok(v) => json_response(StatusCode::OK, &v),
            Err(e) => engine_error(e),
        },
        (Method::GET, "/api/queue") => queue_page(&state.engine, &q).await,
        (Method::GET, "/api/stream") => {
            let Some(name) = param(&q, "name") else {
                return fail(StatusCode::BAD_REQUEST, "name is missing");
            };
            let result = async {
                let catalog = state.engine.catalog().await?;
                if !catalog.streams.iter().any(|s| s == name) {
                    return Ok(None);
                }
                let s = Streams::open(&*state.engine, StreamLimits::default()).await?;
                Ok::<_, AlkError>(Some(stream_json(name, &s.info(name).await?)))
            }
            .await;
            match result {
                Ok(Some(v)) => json_response(StatusCode::OK, &v),
                Ok(None) => fail(
                    StatusCode::NOT_FOUND,
                    format!("there is no stream {name:?}"),
                ),
                Err(e) => engine_error(e),
            }
        }
        (Method::GET, "/api/kv") => kv(&state.engine, &q).await,
        (Method::POST, action) if action.starts_with("/api/actions/") => {
            if req.headers().get("x-alk-action").is_none() {
                return fail(
                    StatusCode::FORBIDDEN,
                    "actions must carry the header x-alk-action (the page sends it)",
                );
            }
            let action = action.trim_start_matches("/api/actions/").to_string();
            let body = match read_body(req).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            act(&state.engine, &action, &body).await
        }
        (Method::GET | Method::POST, _) => {
            fail(StatusCode::NOT_FOUND, format!("no such page: {path}"))
        }
        _ => fail(StatusCode::METHOD_NOT_ALLOWED, "only GET and POST"),
    }
}

async fn read_body(req: Request<Incoming>) -> Result<Value, Response<Body>> {
    let limited = http_body_util::Limited::new(req.into_body(), MAX_BODY);
    let bytes = match limited.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return Err(fail(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is over {MAX_BODY} bytes, or was cut"),
            ));
        }
    };
    serde_json::from_slice(&bytes).map_err(|e| {
        fail(
            StatusCode::BAD_REQUEST,
            format!("the body is not JSON: {e}"),
        )
    })
}

async fn overview(engine: &Arc<dyn Engine>) -> Result<Value, AlkError> {
    let catalog: Catalog = engine.catalog().await?;
    Ok(view::overview(engine, &catalog).await?.to_json())
}

async fn open_queue(engine: &Arc<dyn Engine>, name: &str) -> Result<Option<Queue>, AlkError> {
    let catalog = engine.catalog().await?;
    if !catalog.queues.iter().any(|q| q == name) {
        return Ok(None);
    }
    Ok(Some(Queue::open(&**engine, name).await?))
}

async fn queue_page(engine: &Arc<dyn Engine>, q: &[(String, String)]) -> Response<Body> {
    let Some(name) = param(q, "name") else {
        return fail(StatusCode::BAD_REQUEST, "name is missing");
    };
    let after = match param(q, "after").map(str::parse::<u64>).transpose() {
        Ok(a) => a,
        Err(_) => return fail(StatusCode::BAD_REQUEST, "after is not a message id"),
    };
    let dead = param(q, "dead").is_some_and(|d| d == "1" || d == "true");
    let result = async {
        let Some(queue) = open_queue(engine, name).await? else {
            return Ok(None);
        };
        let now = now_ms();
        let stats = queue.stats(now).await?;
        let limits = queue.limits().await?;
        let jobs = if dead {
            queue.dead_letters(after, 100, now).await?
        } else {
            queue.jobs(after, 100, now).await?
        };
        Ok::<_, AlkError>(Some(json!({
            "queue": name,
            "now_ms": now,
            "stats": stats_json(&stats),
            "limits": limits_json(&limits),
            "dead": dead,
            "jobs": jobs.iter().map(job_json).collect::<Vec<_>>(),
            "next_after": (jobs.len() == 100).then(|| jobs.last().map(|j| j.id)).flatten(),
        })))
    }
    .await;
    match result {
        Ok(Some(v)) => json_response(StatusCode::OK, &v),
        Ok(None) => fail(StatusCode::NOT_FOUND, format!("there is no queue {name:?}")),
        Err(e) => engine_error(e),
    }
}

async fn kv(engine: &Arc<dyn Engine>, q: &[(String, String)]) -> Response<Body> {
    let Some(name) = param(q, "bucket") else {
        return fail(StatusCode::BAD_REQUEST, "bucket is missing");
    };
    let result = async {
        let catalog = engine.catalog().await?;
        if !catalog.buckets.iter().any(|b| b == name) {
            return Ok(None);
        }
        let bucket = view::bucket(engine, name).await?;
        let now = now_ms();
        if let Some(key) = param(q, "key") {
            let value = bucket.get(key, now).await?;
            return Ok(Some(json!({
                "bucket": name, "key": key, "value": value.as_deref().map(value_json),
            })));
        }
        let prefix = param(q, "prefix").unwrap_or("");
        let page = bucket
            .scan_keys(prefix, param(q, "cursor"), 100, now)
            .await?;
        Ok::<_, AlkError>(Some(json!({
            "bucket": name, "prefix": prefix, "keys": page.keys, "next_cursor": page.next_cursor,
        })))
    }
    .await;
    match result {
        Ok(Some(v)) => json_response(StatusCode::OK, &v),
        Ok(None) => fail(
            StatusCode::NOT_FOUND,
            format!("there is no bucket {name:?}"),
        ),
        Err(e) => engine_error(e),
    }
}

/// One action: `redrive` (`{"queue", "ids": [..]}`), `cancel` (`{"queue",
/// "id"}`) or `purge-dead` (`{"queue"}`); what it did.
async fn act(engine: &Arc<dyn Engine>, action: &str, body: &Value) -> Response<Body> {
    let Some(name) = body["queue"].as_str() else {
        return fail(
            StatusCode::BAD_REQUEST,
            "the body names no queue (\"queue\")",
        );
    };
    let queue = match open_queue(engine, name).await {
        Ok(Some(q)) => q,
        Ok(None) => return fail(StatusCode::NOT_FOUND, format!("there is no queue {name:?}")),
        Err(e) => return engine_error(e),
    };
    let now = now_ms();
    let done = match action {
        "redrive" => {
            let Some(ids) = body["ids"]
                .as_array()
                .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
            else {
                return fail(
                    StatusCode::BAD_REQUEST,
                    "\"ids\" is not a list of message ids",
                );
            };
            queue
                .redrive(&ids, now)
                .await
                .map(|new| json!({"redriven": new}))
        }
        "cancel" => {
            let Some(id) = body["id"].as_u64() else {
                return fail(StatusCode::BAD_REQUEST, "\"id\" is not a message id");
            };
            queue
                .cancel(id)
                .await
                .map(|found| json!({"cancelled": found}))
        }
        "purge-dead" => queue.purge_dead().await.map(|n| json!({"purged": n})),
        other => return fail(StatusCode::NOT_FOUND, format!("no such action: {other}")),
    };
    match done {
        Ok(v) => {
            tracing::info!(target: "alk", "dashboard action {action} on queue {name}: {v}");
            engine.flush().await;
            json_response(StatusCode::OK, &v)
        }
        Err(e) => engine_error(e),
    }
}
