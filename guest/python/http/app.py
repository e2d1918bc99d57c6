"""An HTTP handler in Python on alk's storage, for `alk-host serve`: a
guest book kept in an alk bucket, each entry also sent to an alk queue
for a worker. The Python twin of guest/http-guest.

Routes:
- `GET /` — `hello from python`;
- `POST /guestbook` — stores the request body as an entry, sends it to the
  queue `guestbook`, answers the number of entries;
- `GET /guestbook` — the number of entries;
- `GET /trap` — raises, so the host answers 500.

Usage: `alk-host serve http-py.wasm --data-dir DIR`
"""

import time

from componentize_py_types import Err, Ok
from wit_world import exports
from wit_world.imports.wasi_http_types import (
    Fields,
    IncomingRequest,
    Method_Get,
    Method_Post,
    OutgoingBody,
    OutgoingResponse,
    ResponseOutparam,
)

from alk_store.kv import Bucket
from alk_store.queue import Queue


def read_body(request: IncomingRequest) -> bytes:
    body = request.consume()
    data = b""
    with body.stream() as stream:
        while len(data) < 1 << 20:
            try:
                data += stream.blocking_read(64 * 1024)
            except Err:
                break
    return data


def respond(out: ResponseOutparam, status: int, text: str) -> None:
    response = OutgoingResponse(Fields.from_list([("content-type", b"text/plain; charset=utf-8")]))
    response.set_status_code(status)
    body = response.body()
    ResponseOutparam.set(out, Ok(response))
    with body.write() as stream:
        stream.blocking_write_and_flush(text.encode())
    OutgoingBody.finish(body, None)


def entries(book: Bucket) -> int:
    return sum(1 for _ in book.scan("entry:"))


class IncomingHandler(exports.IncomingHandler):
    def handle(self, request: IncomingRequest, response_out: ResponseOutparam) -> None:
        path = request.path_with_query() or "/"
        method = request.method()
        if path == "/" and isinstance(method, Method_Get):
            return respond(response_out, 200, "hello from python\n")
        if path == "/trap":
            raise RuntimeError("this handler fails on purpose")
        if path == "/guestbook":
            book = Bucket.open("guestbook")
            if isinstance(method, Method_Post):
                text = read_body(request).decode("utf-8", "replace")
                now = time.time_ns()
                book.set(f"entry:{now:020}", text)
                Queue.open("guestbook").send(text)
            return respond(response_out, 200, f"{entries(book)}\n")
        respond(response_out, 404, f"no route for {path}\n")
