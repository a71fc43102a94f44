"""A GPT-Live sideband: a trusted server's WebSocket attached to a running session
(``/v1/live/sessions/{id}/attach``, the ``openai`` package's ``client.live.sideband.connect()``).

It sees what the session's primary connection sees, with the audio reflected as OpenAI reflects
it: the caller's as ``session.input_audio.append`` and the agent's as
``session.output_audio.delta`` with ``start_ms``/``end_ms``, both PCM16 at 24 kHz.  On attaching
it is sent the session's ``session.started`` again (a short replay, not a history).  It steers
the session with the same client events as the primary (``session.instructions.append``,
``session.commentary.append``, ``session.update``, mute, ``session.close``, …); an event it gets
wrong is answered with an ``error`` to it alone.

Attaching opens no session and detaching leaves the session going; the session's end closes every
sideband (1000).  A sideband that stops reading, so that ``QUEUE`` events wait for it, is detached
and closed with 1008: it never slows the conversation.

Cancellation: cancelling :meth:`LiveSideband.run` detaches and closes the socket only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from voiceagent.transports.connection import CLOSE_POLICY
from voiceagent.transports.live import LiveProtocol

__all__ = ["QUEUE", "LiveSideband"]

log = logging.getLogger(__name__)

QUEUE = 2000
"""Events that may wait for a sideband (about 40 s of reflected audio) before it is detached."""

_END = None


class LiveSideband:
    """One sideband on the session ``conn`` serves."""

    def __init__(self, ws: ServerConnection, conn: LiveProtocol) -> None:
        self.ws = ws
        self.conn = conn
        self._queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(QUEUE + 1)
        self._send_lock = asyncio.Lock()
        self._slow = False
        self._ended = False

    def put(self, message: dict[str, Any]) -> None:
        if self._ended:
            return
        if self._queue.qsize() >= QUEUE:
            log.info("session %s: a sideband stopped reading; detached", self.conn.session.id)
            self._slow = True
            while not self._queue.empty():  # what it did not read is dropped: it is closed at once
                self._queue.get_nowait()
            self.end()
            return
        self._queue.put_nowait(message)

    def end(self) -> None:
        """No more events: the socket closes once those queued are sent."""
        if not self._ended:
            self._ended = True
            self.conn.sidebands.discard(self)
            self._queue.put_nowait(_END)

    async def send(self, message: dict[str, Any]) -> None:
        async with self._send_lock:
            await self.ws.send(json.dumps(message))

    async def _write(self) -> None:
        while (message := await self._queue.get()) is not _END:
            await self.send(message)
        await self.ws.close(CLOSE_POLICY if self._slow else 1000, "slow reader" if self._slow else "session closed")

    async def run(self) -> None:
        """Serve until the sideband or the session goes away."""
        conn = self.conn
        if conn.closed:  # the session ended between the handshake's check and now
            await self.ws.close(1000, "session closed")
            return
        if conn.started is not None:
            self.put(conn.started)
        conn.sidebands.add(self)
        log.info("session %s: a sideband attached", conn.session.id)
        writer = asyncio.create_task(self._write(), name=f"{conn.session.id}.sideband")
        try:
            async for frame in self.ws:
                if self._ended:  # detached: what it sends is no longer applied
                    break
                await conn.handle_frame(frame, self.send)
        except ConnectionClosed:
            pass
        finally:
            conn.sidebands.discard(self)
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await writer
            log.info("session %s: a sideband detached", conn.session.id)
