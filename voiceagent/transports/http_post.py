"""Plain HTTP POST on the WebSocket port: what WebRTC signalling needs (an SDP offer in, the answer out).

The ``websockets`` server parses GET requests only (the opening handshake).  :class:`PostConnection`
is its connection class with one addition: when the first bytes a client sends are a ``POST``
request, it reads the request line, the headers and a body of ``Content-Length`` bytes itself, and
hands the server a :class:`~websockets.http11.Request` for the path with :attr:`PostConnection.post`
set.  The server's ``process_request`` then answers it like any plain HTTP request (a
:class:`~websockets.http11.Response`, awaited if it is a coroutine) and the connection closes after
the response.  Anything else goes to ``websockets`` untouched.

Limits: a head over :data:`MAX_HEAD` bytes is answered 431, a body over :data:`MAX_BODY` bytes 413,
a malformed head 400, a body without exactly one ``Content-Length`` 411, all at once;
``Expect: 100-continue`` is answered; a body that does not arrive is the server's open timeout, as
a slow handshake.
"""

from __future__ import annotations

import http
from dataclasses import dataclass

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request

__all__ = ["MAX_BODY", "MAX_HEAD", "Post", "PostConnection"]

MAX_HEAD = 16 * 1024
MAX_BODY = 256 * 1024
"""An SDP offer is a few kilobytes; a multipart form with a session object is not much more."""


@dataclass(frozen=True)
class Post:
    """A POST request's body (the head is the :class:`Request`'s); ``error`` set when it was refused
    while being read (413: too large, 400: malformed), before anything else looked at it."""

    body: bytes
    error: tuple[http.HTTPStatus, str] | None = None


class PostConnection(ServerConnection):
    """A :class:`ServerConnection` that also takes one plain ``POST`` request (see the module docstring)."""

    post: Post | None = None
    """Set when the request was a POST (the server answers it instead of a WebSocket handshake)."""

    _sniffed = False
    _continued = False
    _buffer = b""

    def data_received(self, data: bytes) -> None:
        if self.post is not None:
            return  # the rest of a POST already answered (or refused): nothing more is read
        if self._sniffed:
            super().data_received(data)
            return
        self._buffer += data
        if len(self._buffer) < 5 and b"POST ".startswith(self._buffer):
            return  # too few bytes to tell yet
        if not self._buffer.startswith(b"POST "):
            self._sniffed = True
            buffered, self._buffer = self._buffer, b""
            super().data_received(buffered)
            return
        head_end = self._buffer.find(b"\r\n\r\n")
        if head_end < 0:
            if len(self._buffer) > MAX_HEAD:
                self._deliver("/", Headers(), Post(b"", (http.HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "request head too large")))
            return
        path, headers, error = _parse_head(self._buffer[:head_end])
        if error is not None:
            self._deliver(path, headers, Post(b"", (http.HTTPStatus.BAD_REQUEST, error)))
            return
        lengths = headers.get_all("Content-Length")
        if len(lengths) != 1 or not lengths[0].isdigit():
            why = "a POST needs one Content-Length (a chunked body is not taken)"
            self._deliver(path, headers, Post(b"", (http.HTTPStatus.LENGTH_REQUIRED, why)))
            return
        length = int(lengths[0])
        if length > MAX_BODY:
            self._deliver(path, headers, Post(b"", (http.HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY} bytes")))
            return
        body = self._buffer[head_end + 4 :]
        if len(body) < length:
            if headers.get("Expect", "").lower() == "100-continue" and not self._continued:
                self._continued = True
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            return  # the rest of the body is on its way
        self._deliver(path, headers, Post(body[:length]))

    def _deliver(self, path: str, headers: Headers, post: Post) -> None:
        """Hand the server the request (once); later bytes are ignored (the connection closes
        after the response)."""
        self._sniffed = True
        self._buffer = b""
        self.post = post
        if self.request is None and not self.request_rcvd.done():
            self.request = Request(path, headers)
            self.request_rcvd.set_result(None)


def _parse_head(head: bytes) -> tuple[str, Headers, str | None]:
    """The path and headers of an HTTP/1.1 request head; an error text when it is malformed."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    headers = Headers()
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0") or not parts[1].startswith(b"/"):
        return "/", headers, "malformed request line"
    try:
        path = parts[1].decode("ascii")
    except UnicodeDecodeError:
        return "/", headers, "malformed request line"
    for line in lines[1:]:
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep or not name or name != name.strip() or any(ord(c) < 32 and c != "\t" for c in name + value):
            return path, headers, "malformed header line"
        headers[name] = value.strip()
    return path, headers, None
