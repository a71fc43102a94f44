"""What every hostile scenario shares: the target server, the counts, the limits it aims past, and
the endings that break the protocol (oversized, invalid UTF-8, frames RFC 6455 forbids)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import struct
import threading
from typing import Any
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from benchmarks.fuzz.frames import ws_frame
from benchmarks.fuzz.stats import Stats


class HostileBase:
    """The server the hostile clients aim at, their :class:`Stats`, and the endings every route shares."""

    def __init__(
        self, base: str, target: int, stats: Stats, max_bytes: int, burst_s: float, seed: int, kinds: set[str], go_on: threading.Event
    ) -> None:
        self.base = base.rstrip("/")
        parts = urlsplit(self.base)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.target = target
        self.reached = threading.Event()
        self.stats = stats
        self.max_bytes = max_bytes
        self.burst_s = burst_s
        self.seed = seed
        self.kinds = kinds
        self.go_on = go_on  # set while the good session still has turns to do under load
        self.timeout = 30.0

    async def _await_close(self, pump: asyncio.Task[None]) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(pump), self.timeout)
        if not pump.done():
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)

    async def _oversized(self, ws: ClientConnection, rng: random.Random, template: dict[str, Any], key: str) -> None:
        over = self.max_bytes + rng.randint(1, 64 * 1024)
        text = json.dumps({**template, key: "A" * over})
        with contextlib.suppress(ConnectionClosed):
            if rng.random() < 0.3:  # the same in fragments: the whole message is what counts
                third = len(text) // 3
                await ws.send([text[:third], text[third : 2 * third], text[2 * third :]])
            else:
                await ws.send(text)

    async def _invalid_utf8(self, ws: ClientConnection, rng: random.Random, prefix: str) -> None:
        bad = rng.choice(
            (b"\xff", b"\xfe\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\xf8\x88\x80\x80\x80", b"\x80", b"\xf4\x90\x80\x80")
        )
        data = prefix.encode() + bad + b'"}}'
        with contextlib.suppress(ConnectionClosed):
            if rng.random() < 0.3:
                await ws.send([data[: len(prefix) + 1], data[len(prefix) + 1 :]], text=True)
            else:
                await ws.send(data, text=True)

    def _protocol_violation(self, ws: ClientConnection, rng: random.Random) -> None:
        """Write one frame RFC 6455 forbids, under the client library (the server closes with 1002)."""
        kind = rng.randrange(9)
        text = b'{"type": "response.cancel"}'
        frames = [
            ws_frame(0x1, text, masked=False),  # a client frame must be masked
            ws_frame(0x1, text, rsv=rng.choice((1, 2, 4))),  # reserved bits, no extension negotiated
            ws_frame(rng.choice((0x3, 0x4, 0x5, 0xB, 0xF)), text),  # reserved opcodes
            ws_frame(0x0, text),  # a continuation with nothing to continue
            ws_frame(0x9, b"x", fin=False),  # a fragmented control frame
            ws_frame(0x9, b"x" * 200),  # a control frame over 125 bytes
            ws_frame(
                0x8, struct.pack("!H", rng.choice((999, 1004, 1005, 1006, 1015, 5000))) + b"bye"
            ),  # a close code not allowed on the wire
            ws_frame(0x1, text[:5], fin=False) + ws_frame(0x1, text[5:]),  # a new message inside a fragmented one
            ws_frame(0x8, b"\x03"),  # a close payload of one byte
        ]
        ws.transport.write(frames[kind])
