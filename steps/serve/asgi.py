"""The ASGI plumbing of ``steps.serve.app``: a request body read under its bounds, a parse
kept off the event loop when the body is large, and a response written in two messages."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
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


async def read_body(
    receive: Receive,
    limit: int,
    bounds: JsonBounds | None = None,
    json_length: int | None = None,
) -> bytes | None:
    """The whole body, or None as soon as it passes ``limit`` bytes (the rest unread).
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
