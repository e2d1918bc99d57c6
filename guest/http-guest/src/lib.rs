//! An HTTP handler component (`wasi:http/incoming-handler`) on alk's
//! storage, for `alk-host serve`. Routes:
//!
//! - `GET /` — `hello`, touching no storage;
//! - `POST /count/<name>` — increments counter `<name>` in the default
//!   `wasi:keyvalue` bucket (draft2 `atomics.increment`) and answers the
//!   new count; `GET /count/<name>` reads it;
//! - `POST /visit` — sends the request's body to the alk queue `visits`
//!   and answers the message id;
//! - `GET /env/<name>` — the value of an environment variable;
//! - `GET /grow/<mib>` — allocates that much (past the memory limit, a
//!   trap);
//! - `GET /trap`, `GET /loop`, `GET /sleep/<ms>` — a handler that traps,
//!   one that computes forever, one that sleeps (counting itself in
//!   counter `sleeping` first; the server's limits stop them);
//! - `GET /connect/<host:port>` — opens a TCP connection and answers
//!   `connected` or the WASI error (sockets are denied unless the server
//!   allows the network);
//! - `GET /fetch/<host:port>` — an outgoing HTTP request to
//!   `http://<host:port>/`, answering its status or the error.

wit_bindgen::generate!({
    path: "../../wit",
    inline: "
        package alk:http-guest;
        world handler {
            import alk:store/queue@0.1.4;
            import wasi:keyvalue/store@0.2.0-draft2;
            import wasi:keyvalue/atomics@0.2.0-draft2;
            import wasi:http/outgoing-handler@0.2.12;
            export wasi:http/incoming-handler@0.2.12;
        }
    ",
    world: "alk:http-guest/handler",
    generate_all,
});

use exports::wasi::http::incoming_handler::Guest;
use wasi::http::types::{
    Fields, IncomingRequest, Method, OutgoingBody, OutgoingRequest, OutgoingResponse,
    ResponseOutparam, Scheme,
};

struct Handler;

impl Guest for Handler {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let path = request.path_with_query().unwrap_or_default();
        let method = request.method();
        let (status, body) = route(&method, &path, &request);
        respond(out, status, &body);
    }
}

fn route(method: &Method, path: &str, request: &IncomingRequest) -> (u16, String) {
    let parts: Vec<&str> = path.trim_start_matches('/').splitn(2, '/').collect();
    match (method, parts.as_slice()) {
        (Method::Get, [""]) => (200, "hello\n".into()),
        (Method::Post, ["count", name]) => match count(name, 1) {
            Ok(n) => (200, format!("{n}\n")),
            Err(e) => (500, format!("{e}\n")),
        },
        (Method::Get, ["count", name]) => match count(name, 0) {
            Ok(n) => (200, format!("{n}\n")),
            Err(e) => (500, format!("{e}\n")),
        },
        (Method::Post, ["visit"]) => {
            let body = read_body(request);
            match visit(&body) {
                Ok(id) => (200, format!("{id}\n")),
                Err(e) => (500, format!("{e}\n")),
            }
        }
        (Method::Get, ["env", name]) => match std::env::var(name) {
            Ok(v) => (200, format!("{v}\n")),
            Err(_) => (404, format!("{name} is not set\n")),
        },
        (Method::Get, ["trap"]) => panic!("this handler traps on purpose"),
        (Method::Get, ["grow", mib]) => {
            let mib: usize = mib.parse().unwrap_or(1);
            let block = vec![1u8; mib << 20];
            (200, format!("grew by {} MiB\n", std::hint::black_box(block).len() >> 20))
        }
        (Method::Get, ["loop"]) => {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        (Method::Get, ["sleep", ms]) => {
            // Counted before it sleeps, so a caller can see it is in flight.
            let _ = count("sleeping", 1);
            let ms: u64 = ms.parse().unwrap_or(1_000);
            std::thread::sleep(std::time::Duration::from_millis(ms));
            (200, "slept\n".into())
        }
        (Method::Get, ["connect", addr]) => match std::net::TcpStream::connect(addr) {
            Ok(_) => (200, "connected\n".into()),
            Err(e) => (502, format!("connect failed: {e}\n")),
        },
        (Method::Get, ["fetch", authority]) => match fetch(authority) {
            Ok(status) => (200, format!("upstream answered {status}\n")),
            Err(e) => (502, format!("fetch failed: {e}\n")),
        },
        _ => (404, format!("no route for {path}\n")),
    }
}

/// Adds `delta` to counter `name` of the default bucket; the new value.
fn count(name: &str, delta: i64) -> Result<i64, String> {
    let bucket = wasi::keyvalue0_2_0_draft2::store::open("").map_err(|e| format!("{e:?}"))?;
    if delta == 0 {
        let value = bucket.get(name).map_err(|e| format!("{e:?}"))?;
        return Ok(value
            .and_then(|v| String::from_utf8(v).ok())
            .and_then(|t| t.parse().ok())
            .unwrap_or(0));
    }
    wasi::keyvalue0_2_0_draft2::atomics::increment(&bucket, name, delta).map_err(|e| format!("{e:?}"))
}

/// Sends `body` to the queue `visits`; the message id.
fn visit(body: &[u8]) -> Result<u64, String> {
    use alk::store::queue::{Payload, Queue};
    let queue = Queue::open("visits").map_err(|e| format!("{e:?}"))?;
    let text = String::from_utf8_lossy(body).into_owned();
    queue
        .send(&Payload::Text(text))
        .map_err(|e| format!("{e:?}"))
}

fn read_body(request: &IncomingRequest) -> Vec<u8> {
    let Ok(body) = request.consume() else {
        return Vec::new();
    };
    let Ok(stream) = body.stream() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Ok(chunk) = stream.blocking_read(64 * 1024) {
        out.extend(chunk);
        if out.len() > 1 << 20 {
            break;
        }
    }
    out
}

/// `GET http://<authority>/`; the status.
fn fetch(authority: &str) -> Result<u16, String> {
    let request = OutgoingRequest::new(Fields::new());
    request.set_scheme(Some(&Scheme::Http)).map_err(|()| "bad scheme")?;
    request
        .set_authority(Some(authority))
        .map_err(|()| "bad authority")?;
    request.set_path_with_query(Some("/")).map_err(|()| "bad path")?;
    let future = wasi::http::outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
    future.subscribe().block();
    match future.get() {
        Some(Ok(Ok(response))) => Ok(response.status()),
        Some(Ok(Err(e))) => Err(format!("{e:?}")),
        Some(Err(())) => Err("the response was already taken".into()),
        None => Err("no response".into()),
    }
}

fn respond(out: ResponseOutparam, status: u16, text: &str) {
    let headers = Fields::new();
    let _ = headers.set("content-type", &[b"text/plain; charset=utf-8".to_vec()]);
    let response = OutgoingResponse::new(headers);
    let _ = response.set_status_code(status);
    let Ok(body) = response.body() else {
        return;
    };
    ResponseOutparam::set(out, Ok(response));
    if let Ok(stream) = body.write() {
        for chunk in text.as_bytes().chunks(4096) {
            if stream.blocking_write_and_flush(chunk).is_err() {
                break;
            }
        }
    }
    let _ = OutgoingBody::finish(body, None);
}

export!(Handler);
