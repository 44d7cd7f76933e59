"""The ASGI plumbing of ``steps.serve.app``: a request body read under its bounds, a parse
kept off the event loop when the body is large, a response written in two messages, and a
refusal answered before its body was read whole, with the rest of that body drained.

Why the drain is here. uvicorn (0.54, ``protocols/http/httptools_impl.py``) does one of two
things with the unread rest of a body the app answered early. With ``Connection: close``
in the answer, ``RequestResponseCycle.send`` closes the transport right after the answer's
last byte; the kernel, closing a socket with received bytes unread, sends RST at once
(Linux ``tcp_close``; RFC 2525 2.17), and a client still sending gets ECONNRESET from its
``send`` and, losing what it had not read yet, never sees the status. Without it,
uvicorn keeps the connection and its parser drops the rest (``on_body`` returns once the
response is complete) without any bound: each chunk cancels the keep-alive timer
(``data_received``), so a client may trickle a body of any size forever. uvicorn has no
setting between the two, and only the app knows the body is refused and the bounds.

So ``refuse`` does what nginx's lingering close does (``ngx_http_request.c``
``ngx_http_set_lingering_close`` / ``ngx_http_lingering_close_handler``, directives
``lingering_time`` 30 s and ``lingering_timeout`` 5 s): the answer goes out whole, with
``Connection: close`` and its ``Content-Length``, so a client reads it complete while
sending; then the rest of the body is read and dropped until it ends, the client leaves,
or a bound passes (``Linger``: bytes, all in all time, time without a byte); only then is
the response ended, and uvicorn closes. ASGI holds the response open by its last empty
``http.response.body`` message, and ``receive`` hands over body chunks until then. What
ASGI cannot do is nginx's ``shutdown(SHUT_WR)`` first: the FIN comes with the close, which
an HTTP/1.1 client, reading by ``Content-Length``, does not wait for."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from steps.serve.bounds import JsonBounds

JSON = b"application/json"
BINARY = b"application/octet-stream"
# Sent with a refusal before the body was read whole: uvicorn then closes the connection
# instead of receiving (and discarding) what is left of a body it will never use.
CLOSE = [(b"connection", b"close")]
# Bodies larger than this are parsed on a worker thread: the event loop goes on serving
# the other connections meanwhile (simdjson releases the GIL while it parses).
THREAD_PARSE_BYTES = 256 * 1024
# Bodies up to this size are parsed without a structural check: a one-image request (16 KB
# of JSON) pays nothing for it, and no body this small takes long to parse or refuse.
BOUNDS_FROM = 64 * 1024
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def off_loop(parse: Callable[..., Any], body: bytes, *args: Any) -> Any:
    """``parse(body, *args)``: here for a small body, on a worker thread for a large one."""
    if len(body) <= THREAD_PARSE_BYTES:
        return parse(body, *args)
    return await asyncio.to_thread(parse, body, *args)


@dataclass
class Received:
    """How far a body's read went: ``ended`` once its last chunk came (a refusal after
    that has nothing left to drain)."""

    ended: bool = False


async def read_body(
    receive: Receive,
    limit: int,
    bounds: JsonBounds | None = None,
    json_length: int | None = None,
    received: Received | None = None,
) -> bytes | None:
    """The whole body, or None as soon as it passes ``limit`` bytes (the rest unread; with
    ``received``, ``received.ended`` says whether any rest is left to come).
    Once it passes BOUNDS_FROM bytes, ``bounds`` checks its JSON (the first ``json_length``
    bytes where binary data follows) from its start and then chunk by chunk as it arrives,
    raising BodyRefused at the first bound passed. A smaller body is not checked: whatever
    its structure, its parse is short, and the parsers refuse what they cannot read."""
    chunks: list[bytes] = []
    size, checked = 0, 0  # bytes received; bytes of them the bounds have read
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionError("the client went away")
        chunk = message.get("body", b"")
        if received is not None:
            received.ended = not message.get("more_body", False)
        if size + len(chunk) > limit:
            return None
        chunks.append(chunk)
        size += len(chunk)
        if bounds is not None and size > BOUNDS_FROM:
            end = size if json_length is None else min(size, json_length)
            if checked < end:
                begins = size - len(chunk)  # where this chunk starts in the body
                if checked < begins:  # the first check: from the body's start
                    bounds.feed(b"".join(chunks)[checked:end])
                else:
                    bounds.feed(chunk[checked - begins : end - begins])
                checked = end
        if not message.get("more_body", False):
            if bounds is not None and checked:
                bounds.finish()
            return b"".join(chunks)


async def respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes = JSON,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                *(extra or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True)
class Linger:
    """How much of a refused body's rest is read and dropped (serving.linger_*): at most
    ``max_bytes``, for at most ``time_s`` in all, each wait for a chunk at most
    ``timeout_s``."""

    max_bytes: int
    time_s: float
    timeout_s: float


async def refuse(send: Send, receive: Receive, status: int, body: bytes, linger: Linger) -> int:
    """Answer ``status`` with ``body`` and ``Connection: close`` to a request whose body was
    not read whole, then read and drop the rest of that body within ``linger``, then end
    the response (uvicorn closes the connection). The bytes dropped back."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", JSON),
                (b"content-length", str(len(body)).encode()),
                *CLOSE,
            ],
        }
    )
    # All of the answer goes out now; the response stays open until the drain is done.
    await send({"type": "http.response.body", "body": body, "more_body": True})
    try:
        return await drain(receive, linger)
    finally:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def drain(receive: Receive, linger: Linger) -> int:
    """Receive and drop body chunks until the body ends, the client leaves,
    ``linger.max_bytes`` came (or more: the chunk that passed it is the last read),
    ``linger.time_s`` passed, or no chunk came for ``linger.timeout_s``. The bytes dropped
    back."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + linger.time_s
    dropped = 0
    while dropped < linger.max_bytes:
        left = deadline - loop.time()
        if left <= 0:
            break
        try:
            message = await asyncio.wait_for(receive(), min(left, linger.timeout_s))
        except asyncio.TimeoutError:
            break
        if message["type"] == "http.disconnect":
            break
        dropped += len(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return dropped
