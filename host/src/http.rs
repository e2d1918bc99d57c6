//! `wasi:http` for guests: the `types` and `outgoing-handler` interfaces
//! (every component may import them; `serve` also calls the guest's
//! `incoming-handler`, `serve.rs`), with outgoing requests made only when
//! the [`NetworkPolicy`](crate::NetworkPolicy) allows them.

use std::future::Future;

use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpHooks};

/// The HTTP part of a guest's store data.
pub(crate) struct HttpState {
    pub(crate) ctx: WasiHttpCtx,
    pub(crate) hooks: Hooks,
}

impl HttpState {
    /// The state of a guest that may make outgoing requests or not.
    pub(crate) fn new(outgoing: bool) -> HttpState {
        HttpState {
            ctx: WasiHttpCtx::new(),
            hooks: Hooks { outgoing },
        }
    }
}

/// How the host answers the guest's outgoing requests.
pub(crate) struct Hooks {
    /// Outgoing requests are allowed (`-S http`).
    outgoing: bool,
}

type Sent = Box<
    dyn Future<
            Output = Result<(
                http::Response<WasiBody>,
                Box<dyn Future<Output = Result<(), Error>> + Send>,
            ), Error>,
        > + Send,
>;

impl WasiHttpHooks for Hooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Sent {
        drop(fut);
        if !self.outgoing {
            // The guest sees `HTTP-request-denied`, an error it can report,
            // rather than a trap.
            tracing::debug!(target: "alk", uri = %request.uri(), "outgoing HTTP request denied (allow it with -S http)");
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        Box::new(async move {
            use http_body_util::BodyExt;
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((
                response.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = Result<(), Error>> + Send>,
            ))
        })
    }
}
