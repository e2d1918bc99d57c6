//! The handler of the `serve` benchmarks. `GET /` answers `hello` and
//! touches no storage; `POST /incr` increments key `n` of the store `""`
//! (`wasi:keyvalue@0.2.0-draft` `atomics.increment`) and answers the count.
//! It imports nothing but `wasi:http` and `wasi:keyvalue`, so `alk-host
//! serve` and `wasmtime serve` run the very same component.

wit_bindgen::generate!({
    path: "../../wit",
    inline: "
        package alk:http-bench;
        world handler {
            import wasi:keyvalue/store@0.2.0-draft;
            import wasi:keyvalue/atomics@0.2.0-draft;
            export wasi:http/incoming-handler@0.2.12;
        }
    ",
    world: "alk:http-bench/handler",
    generate_all,
});

use exports::wasi::http::incoming_handler::Guest;
use wasi::http::types::{Fields, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam};
use wasi::keyvalue0_2_0_draft::{atomics, store};

struct Handler;

impl Guest for Handler {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let path = request.path_with_query().unwrap_or_default();
        let (status, body) = match path.as_str() {
            "/" => (200, "hello\n".to_string()),
            "/incr" => match store::open("").and_then(|b| atomics::increment(&b, "n", 1)) {
                Ok(n) => (200, format!("{n}\n")),
                Err(e) => (500, format!("{e:?}\n")),
            },
            _ => (404, "no such route\n".to_string()),
        };
        let response = OutgoingResponse::new(Fields::new());
        let _ = response.set_status_code(status);
        let Ok(outgoing) = response.body() else {
            return;
        };
        ResponseOutparam::set(out, Ok(response));
        if let Ok(stream) = outgoing.write() {
            let _ = stream.blocking_write_and_flush(body.as_bytes());
        }
        let _ = OutgoingBody::finish(outgoing, None);
    }
}

export!(Handler);
