"""Hostile clients on raw sockets: stalled readers that never answer a ping, partial handshakes,
bad upgrade requests and garbage."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import struct

from benchmarks.fuzz.frames import b64, server_frames
from benchmarks.fuzz.hostile_base import HostileBase
from benchmarks.fuzz.pacing import pace


class TcpScenarios(HostileBase):
    """The hostile scenarios below the WebSocket library: raw TCP."""

    async def stalled_reader(self, route: str) -> None:
        """A client that completes the handshake, then reads bytes but never answers a ping (as a
        client whose reading has stopped looks to the server): the server's keepalive must end it
        with 1008, not the WebSocket library's 1011.  Takes about ping_interval + ping_timeout."""
        name = "realtime" if route == "/v1/realtime" else "twilio"
        self.stats.sent[f"{name}.stalled_reader"] += 1
        reader, writer = await asyncio.open_connection(self.host, self.port)
        key = b64(os.urandom(16))
        writer.write(
            f"GET {route} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        data = b""
        try:
            async with asyncio.timeout(180):
                while chunk := await reader.read(65536):
                    data += chunk
        except (OSError, TimeoutError) as exc:
            self.stats.exception("stalled_reader", exc)
        finally:
            writer.transport.abort()
        body = data.split(b"\r\n\r\n", 1)[-1]
        closes = [payload for opcode, payload in server_frames(body) if opcode == 0x8]
        code = struct.unpack("!H", closes[0][:2])[0] if closes and len(closes[0]) >= 2 else None
        self.stats.close(name, code, {1008}, "stalled_reader")

    async def raw_tcp(self, rng: random.Random, tag: str) -> None:
        kind = rng.choices(("partial_handshake", "bad_upgrade", "garbage"), (45, 30, 25))[0]
        await pace()
        self.stats.sent[f"tcp.{kind}"] += 1
        reader, writer = await asyncio.open_connection(self.host, self.port)
        path = rng.choice(("/v1/realtime", "/twilio", "/healthz", "/", "/twilio/twiml"))
        key = b64(os.urandom(16))
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
        try:
            if kind == "partial_handshake":
                writer.write(request[: rng.randint(1, len(request) - 2)])
                await writer.drain()
                if rng.random() < 0.5:
                    await asyncio.sleep(rng.uniform(0.1, 3.0))  # a client that stalls mid-request, then goes
                return
            if kind == "bad_upgrade":
                data = rng.choice(
                    (
                        request.replace(b"Sec-WebSocket-Version: 13", b"Sec-WebSocket-Version: 8"),
                        request.replace(f"Sec-WebSocket-Key: {key}\r\n".encode(), b""),
                        request.replace(key.encode(), b"short"),
                        request.replace(b"GET", b"POST"),
                        request.replace(b"HTTP/1.1", b"HTTP/1.0"),
                        request.replace(b"Upgrade: websocket", b"Upgrade: h2c"),
                        request[:-2] + b"X-Long: " + b"a" * rng.randint(9000, 20000) + b"\r\n\r\n",
                        request[:-2] + b"".join(b"X-H%d: v\r\n" % i for i in range(rng.randint(100, 300))) + b"\r\n",
                        f"GET /{'a' * rng.randint(9000, 12000)} HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
                    )
                )
            else:
                data = rng.choice(
                    (os.urandom(rng.randint(1, 4000)), b"\r\n" * 50, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(64))
                )
            writer.write(data)
            await writer.drain()
            with contextlib.suppress(TimeoutError, OSError):
                answer = await asyncio.wait_for(reader.read(4096), self.timeout)
                status = answer.split(b"\r\n", 1)[0].decode("latin-1")
                self.stats.http_answers[f"{kind}:{status[9:12] or 'closed'}"] += 1
        finally:
            writer.transport.abort()
