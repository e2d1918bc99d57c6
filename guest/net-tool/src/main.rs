//! `net-tool connect <host:port>` opens a TCP connection; `net-tool fetch
//! <host:port>` sends `GET http://<host:port>/`. Each prints what it got —
//! `connected`, `upstream answered <status>`, or the error — and exits 0:
//! a denied use must be an error the guest sees, not a trap.

wit_bindgen::generate!({
    path: "../../wit",
    inline: "
        package alk:net-tool;
        world tool {
            import wasi:http/outgoing-handler@0.2.12;
        }
    ",
    world: "alk:net-tool/tool",
    generate_all,
});

use wasi::http::types::{Fields, OutgoingRequest, Scheme};

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

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["connect", addr] => match std::net::TcpStream::connect(addr) {
            Ok(_) => println!("connected"),
            Err(e) => println!("connect failed: {e}"),
        },
        ["fetch", authority] => match fetch(authority) {
            Ok(status) => println!("upstream answered {status}"),
            Err(e) => println!("fetch failed: {e}"),
        },
        _ => {
            eprintln!("usage: net-tool connect <host:port> | fetch <host:port>");
            std::process::exit(2);
        }
    }
}
