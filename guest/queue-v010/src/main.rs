//! A guest built against `alk:store@0.1.0`, frozen in
//! `tests/fixtures/wit-0.1.0`: newer hosts must run it unchanged.
//!
//! `queue-v010 <queue>`: sends three messages, receives them, acks two with
//! `ack-batch`, gives one back and acks it; stores a key and reads it back.
//! Prints `v0.1.0 guest ok` and exits 0, or names what went wrong and
//! exits 1.

wit_bindgen::generate!({
    path: "../../tests/fixtures/wit-0.1.0",
    inline: "
        package alk:fixture;
        world guest {
            include alk:store/imports@0.1.0;
        }
    ",
    world: "alk:fixture/guest",
    generate_all,
});

use alk::store::kv::Bucket;
use alk::store::queue::{AckOutcome, Payload, Queue};

fn check(cond: bool, what: &str) {
    if !cond {
        println!("FAIL {what}");
        std::process::exit(1);
    }
}

fn main() {
    let name = std::env::args().nth(1).unwrap_or_else(|| "fixture".into());
    let q = Queue::open(&name).expect("open queue");
    let ids = q
        .send_batch(&[
            Payload::Text("a".into()),
            Payload::Json("{\"n\":2}".into()),
            Payload::Text("c".into()),
        ])
        .expect("send-batch");
    check(ids.len() == 3 && ids[0] < ids[1], "ids increase");
    let got = q.receive(10, Some(30_000)).expect("receive");
    check(got.len() == 3, "three messages received");
    check(got[0].attempt == 1, "first delivery is attempt 1");
    check(
        matches!(&got[1].payload, Payload::Json(j) if j == "{\"n\":2}"),
        "json round-trips",
    );
    let acks = q
        .ack_batch(&[got[0].receipt.clone(), got[1].receipt.clone()])
        .expect("ack-batch");
    check(acks == [AckOutcome::Acked, AckOutcome::Acked], "two acked");
    q.nack(&got[2].receipt).expect("nack");
    let again = q.receive_wait(1, None, 1_000).expect("receive-wait");
    check(
        again.len() == 1 && again[0].attempt == 2,
        "given back, delivered again",
    );
    q.ack(&again[0].receipt).expect("ack");
    check(
        q.receive(10, None).expect("receive").is_empty(),
        "queue empty",
    );

    let kv = Bucket::open(&name).expect("open bucket");
    kv.set("k", b"v", None).expect("set");
    check(
        kv.get("k").expect("get").as_deref() == Some(&b"v"[..]),
        "kv round-trips",
    );
    println!("v0.1.0 guest ok");
}
