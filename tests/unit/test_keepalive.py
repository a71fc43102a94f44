"""A client that stops answering pings (it reads nothing, or is gone without a FIN) is ended with
close code 1008 and the reason ``ping_timeout``, not the WebSocket library's 1011 (internal
error), which reads as a server fault.  Found by the fuzzer, benchmarks/fuzz/ (a stalled reader).

Real sockets on loopback, the transports over a real session on fake models, and a server with
short keepalive settings; the client is a raw socket that completes the handshake and then only
reads bytes, never answering a ping (as a client whose reading has stopped looks to the server).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from benchmarks.fuzz.frames import server_frames  # the fuzzer's reader of raw server frames
from tests.unit.fakes import FakeEngines
from voiceagent.config import Config
from voiceagent.session import Session
from voiceagent.transports.realtime import RealtimeConnection
from voiceagent.transports.twilio import TwilioConnection

SCALE = float(os.environ.get("VOICEAGENT_TEST_TIMEOUT_SCALE", "1"))


async def _silent_client(port: int, path: str) -> list[tuple[int, bytes]]:
    """Handshake, then read to the end without ever writing (no pong, no close frame)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head
    data = b""
    while chunk := await reader.read(65536):
        data += chunk
    writer.close()
    return server_frames(data)


@pytest.mark.parametrize("route", ["/v1/realtime", "/twilio"])
def test_a_client_that_answers_no_ping_is_closed_with_1008_not_1011(route: str) -> None:
    fakes = FakeEngines()
    config = Config()
    ended: list[str] = []

    async def handler(ws: ServerConnection) -> None:
        session = Session(fakes.engines, config)
        await session.start()
        conn: Any = (
            RealtimeConnection(ws, session, 22050, send_metrics=False) if route == "/v1/realtime" else TwilioConnection(ws, session, 22050)
        )
        try:
            await conn.run()
        finally:
            await session.aclose()
            ended.append(session.id)

    async def scenario() -> list[tuple[int, bytes]]:
        async with serve(handler, "127.0.0.1", 0, ping_interval=0.2, ping_timeout=0.5, close_timeout=1.0) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            return await _silent_client(port, route)

    try:
        frames = asyncio.run(asyncio.wait_for(scenario(), 20 * SCALE))
    finally:
        fakes.close()
    closes = [payload for opcode, payload in frames if opcode == 0x8]
    assert closes, frames
    code, reason = struct.unpack("!H", closes[0][:2])[0], closes[0][2:].decode()
    assert (code, reason) == (1008, "ping_timeout")
    assert any(opcode == 0x9 for opcode, _ in frames)  # it was pinged
    if route == "/v1/realtime":
        errors = [json.loads(p) for op, p in frames if op == 0x1 and json.loads(p)["type"] == "error"]
        assert [e["error"]["code"] for e in errors] == ["ping_timeout"]
    assert len(ended) == 1  # the session was closed with the connection
