//! The orders example's HTTP handler, served by `alk-host serve`
//! (`wasi:http/incoming-handler`). Every request runs in a fresh instance;
//! what lasts is in the stores.
//!
//! - `POST /orders` with `{"id": "o-0001", "customer": "ada", "amount":
//!   1250}` (cents): in one transaction, sends the order to the queue
//!   `orders` (group: the customer, so one customer's orders are handled
//!   one at a time and in order; three attempts; a backoff between them)
//!   and publishes an `order-placed` event to the stream `order-events`.
//!   Either both happen or neither. Answers 202 with the event's offset.
//!   A bad body is a 400 saying what to send; a store that stays locked is
//!   a 503 with `retry-after: 1`.
//! - `GET /summary` — the queue's counts, how many orders were placed and
//!   processed, and the projection's totals per customer, as JSON;
//!   `GET /progress` — the counts as one line of text.

wit_bindgen::generate!({
    path: "../../../wit",
    inline: "
        package alk:orders-api;
        world handler {
            import alk:store/kv@0.1.4;
            import alk:store/queue@0.1.4;
            import alk:store/%stream@0.1.4;
            import alk:store/tx@0.1.4;
            export wasi:http/incoming-handler@0.2.12;
        }
    ",
    world: "alk:orders-api/handler",
    generate_all,
});

use alk::store::kv::Bucket;
use alk::store::queue::{Payload, Queue, SendOptions};
use alk::store::stream;
use alk::store::tx::Transaction;
use alk::store::types::Error;
use exports::wasi::http::incoming_handler::Guest;
use orders_common::{
    BACKOFF_BASE_MS, EVENTS_STREAM, MAX_ATTEMPTS, ORDERS_QUEUE, Order, PROCESSED_BUCKET,
    TOTALS_BUCKET, json_of,
};
use serde_json::{Map, Value, json};
use wasi::http::types::{
    Fields, IncomingRequest, Method, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

struct Handler;

impl Guest for Handler {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let path = request.path_with_query().unwrap_or_default();
        let reply = match (request.method(), path.as_str()) {
            (Method::Post, "/orders") => place(&read_body(&request)),
            (Method::Get, "/summary") => summary(),
            (Method::Get, "/progress") => progress(),
            (Method::Get, "/") => Reply::text(
                200,
                "POST /orders {\"id\": \"o-1\", \"customer\": \"ada\", \"amount\": 1250}; GET /summary; GET /progress\n",
            ),
            (_, "/orders" | "/summary" | "/progress") => Reply::text(405, "method not allowed\n"),
            _ => Reply::text(404, &format!("no route for {path}; try GET /\n")),
        };
        reply.send(out);
    }
}

/// `POST /orders`: the queue message and the event, in one transaction.
fn place(body: &[u8]) -> Reply {
    let order = match Order::parse(body) {
        Ok(o) => o,
        Err(why) => return Reply::json(400, json!({ "error": why })),
    };
    let options = SendOptions {
        priority: None,
        delay_ms: None,
        run_at_ms: None,
        max_attempts: Some(MAX_ATTEMPTS),
        backoff_base_ms: Some(BACKOFF_BASE_MS),
        expires_in_ms: None,
        // One customer's orders are handled one at a time, in the order
        // they were placed; different customers' in parallel.
        group: Some(order.customer.clone()),
    };
    let placed = (|| -> Result<u64, Error> {
        let tx = Transaction::new();
        tx.enqueue(ORDERS_QUEUE, &[Payload::Json(order.to_json())], &options)?;
        let offset =
            tx.publish_with_key(EVENTS_STREAM, &order.id, order.placed_event().as_bytes())?;
        tx.commit()?;
        Ok(offset)
    })();
    match placed {
        // The queue assigns message ids at the commit and a transaction
        // does not return them: the event's offset identifies the order.
        Ok(offset) => Reply::json(202, json!({ "accepted": order.id, "event": offset })),
        Err(e) => store_error(e),
    }
}

/// `GET /summary`.
fn summary() -> Reply {
    match read_summary() {
        Ok(v) => Reply::json(200, v),
        Err(e) => store_error(e),
    }
}

/// `GET /progress`: one line, for a terminal.
fn progress() -> Reply {
    match read_summary() {
        Ok(v) => {
            let n = |path: &str| v.pointer(path).and_then(Value::as_u64).unwrap_or(0);
            Reply::text(
                200,
                &format!(
                    "placed {}, processed {}, waiting {}, delayed {}, in flight {}, dead {}\n",
                    n("/placed"),
                    n("/processed"),
                    n("/queue/waiting"),
                    n("/queue/delayed"),
                    n("/queue/in_flight"),
                    n("/queue/dead")
                ),
            )
        }
        Err(e) => store_error(e),
    }
}

fn read_summary() -> Result<Value, Error> {
    let stats = Queue::open(ORDERS_QUEUE)?.stats()?;
    let placed = stream::info(EVENTS_STREAM)?.last;
    let processed = count_keys(&Bucket::open(PROCESSED_BUCKET)?, "")?;
    let totals = Bucket::open(TOTALS_BUCKET)?;
    let mut customers = Map::new();
    let mut cursor = None;
    loop {
        let page = totals.scan_prefix("customer/", cursor.as_deref(), 1000)?;
        for e in page.entries {
            let name = e.key.trim_start_matches("customer/").to_string();
            customers.insert(name, json_of(&e.value));
        }
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    let projected: u64 = totals
        .get("offset")?
        .and_then(|v| String::from_utf8(v).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok(json!({
        "placed": placed,
        "processed": processed,
        "queue": {
            "waiting": stats.waiting,
            "delayed": stats.delayed,
            "in_flight": stats.in_flight,
            "dead": stats.dead,
        },
        "projection": { "offset": projected, "customers": customers },
    }))
}

fn count_keys(bucket: &Bucket, prefix: &str) -> Result<u64, Error> {
    let mut n = 0;
    let mut cursor = None;
    loop {
        let page = bucket.scan_prefix(prefix, cursor.as_deref(), 1000)?;
        n += page.entries.len() as u64;
        cursor = page.next_cursor;
        if cursor.is_none() {
            return Ok(n);
        }
    }
}

/// An alk error as an answer: a locked store is worth retrying (503 with
/// `"retry": true`: nothing was stored, so sending the same request again
/// places the order once), a refused argument is the client's (400), the
/// rest is the server's (500).
fn store_error(e: Error) -> Reply {
    let (status, why) = match &e {
        Error::Busy(m) | Error::TransactionAborted(m) => {
            let why = format!("the store is busy ({m}); nothing was stored, send it again");
            return Reply::json(503, json!({ "error": why, "retry": true }));
        }
        Error::InvalidArgument(m) | Error::InvalidName(m) => (400, m.clone()),
        Error::PayloadTooLarge(t) => (400, format!("too large: {} > {} bytes", t.size, t.limit)),
        other => (500, format!("{other:?}")),
    };
    Reply::json(status, json!({ "error": why }))
}

struct Reply {
    status: u16,
    content_type: &'static str,
    body: String,
}

impl Reply {
    fn text(status: u16, body: &str) -> Reply {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.to_string(),
        }
    }

    fn json(status: u16, v: Value) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            body: format!("{v}\n"),
        }
    }

    fn send(self, out: ResponseOutparam) {
        let headers = Fields::new();
        let _ = headers.set("content-type", &[self.content_type.as_bytes().to_vec()]);
        if self.status == 503 {
            let _ = headers.set("retry-after", &[b"1".to_vec()]);
        }
        let response = OutgoingResponse::new(headers);
        let _ = response.set_status_code(self.status);
        let Ok(body) = response.body() else {
            return;
        };
        ResponseOutparam::set(out, Ok(response));
        if let Ok(stream) = body.write() {
            for chunk in self.body.as_bytes().chunks(4096) {
                if stream.blocking_write_and_flush(chunk).is_err() {
                    break;
                }
            }
        }
        let _ = OutgoingBody::finish(body, None);
    }
}

/// The request's body, up to 64 KiB (an order is a few dozen bytes).
fn read_body(request: &IncomingRequest) -> Vec<u8> {
    let Ok(body) = request.consume() else {
        return Vec::new();
    };
    let Ok(stream) = body.stream() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Ok(chunk) = stream.blocking_read(16 * 1024) {
        out.extend(chunk);
        if out.len() > 64 * 1024 {
            break;
        }
    }
    out
}

export!(Handler);
