"""What every WebSocket transport shares: one connection driving one session.

A subclass decodes frames in :meth:`SessionConnection.serve` (reading them through
:meth:`SessionConnection.frames`) and encodes session events in :meth:`SessionConnection.write`;
this base serialises sends (the reader answers errors while the writer streams audio), runs the
writer beside the reader, and closes the session however the connection ends.  Cancelling
:meth:`run` closes the session too.

Limits (``server.*``, on the session's clock): a session older than ``max_session_s``, or whose
client has sent nothing for ``idle_timeout_s``, is ended through :meth:`SessionConnection.expire`
(the subclass says why in its protocol, then the connection closes with 1008).  Audio more than
``audio_burst_s`` ahead of real time is refused by :meth:`SessionConnection.audio_allowed`.

Keepalive: the server pings every ``ping_interval`` (the WebSocket server's setting); a peer that
answers none within ``ping_timeout`` has stopped reading (or is gone) and is ended the same way
(``ping_timeout``, close code 1008).  The WebSocket library would otherwise fail it with 1011
(internal error), which reads as a server fault; this base takes its timeout over.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from voiceagent.session import Session
from voiceagent.transports.audio_budget import AudioBudget

__all__ = ["CLOSE_POLICY", "SessionConnection"]

log = logging.getLogger(__name__)

CLOSE_POLICY = 1008  # RFC 6455 "policy violation"


class SessionConnection(ABC):
    def __init__(self, ws: ServerConnection, session: Session) -> None:
        self.ws = ws
        self.session = session
        self._send_lock = asyncio.Lock()
        cfg = session.config.server
        self._clock = session.clock
        self.started_at = self._clock.now()
        self.last_seen = self.started_at
        self._max_session_s = cfg.max_session_s
        self._idle_s = cfg.idle_timeout_s
        self._audio = AudioBudget(self._clock, cfg.audio_burst_s)
        # The keepalive's timeout is ours (see the module docstring); the library only pings.
        self._ping_interval, self._ping_timeout = ws.ping_interval, ws.ping_timeout
        ws.ping_timeout = None

    async def frames(self) -> AsyncIterator[str | bytes]:
        """The client's frames, noting when each arrived (for the idle limit)."""
        async for frame in self.ws:
            self.last_seen = self._clock.now()
            yield frame

    def audio_allowed(self, ms: float) -> bool:
        """Count ``ms`` of client audio; False (and not counted) if it would put the client more
        than ``audio_burst_s`` ahead of real time since the session began."""
        return self._audio.allow(ms)

    @abstractmethod
    async def expire(self, code: str, message: str) -> None:
        """Tell the client, in its protocol, that the session ends for ``code`` (then it is closed)."""

    async def _watch_limits(self) -> None:
        """End the session at ``max_session_s`` or after ``idle_timeout_s`` without a frame."""
        while True:
            deadlines = []
            if self._max_session_s > 0:
                limit = f"sessions last at most {self._max_session_s:g} s"
                deadlines.append((self.started_at + self._max_session_s, "session_expired", limit))
            if self._idle_s > 0:
                deadlines.append((self.last_seen + self._idle_s, "session_idle", f"nothing received for {self._idle_s:g} s"))
            if not deadlines:
                return
            at, code, message = min(deadlines)
            if self._clock.now() >= at:
                log.info("session %s ended: %s (%s)", self.session.id, code, message)
                with contextlib.suppress(ConnectionClosed):
                    await self.expire(code, message)
                await self.ws.close(CLOSE_POLICY, code)
                return
            await self._clock.sleep_until(at)

    async def _watch_pongs(self) -> None:
        """End the session when a ping goes unanswered for ``ping_timeout`` (real time: the network's)."""
        if self._ping_interval is None or self._ping_timeout is None:
            return
        while True:
            await asyncio.sleep(self._ping_interval)
            try:
                # ping() itself waits while the client reads nothing and the send buffer is full.
                async with asyncio.timeout(self._ping_timeout):
                    await (await self.ws.ping())
            except TimeoutError:
                break
        message = f"no answer to a ping in {self._ping_timeout:g} s: the client stopped reading"
        log.info("session %s ended: ping_timeout (%s)", self.session.id, message)
        # Say why where the client may still read it, but neither that nor the close frame may wait
        # on a client that reads nothing: past the close timeout the connection is dropped.
        with contextlib.suppress(ConnectionClosed, TimeoutError):
            async with asyncio.timeout(1.0):
                await self.expire("ping_timeout", message)
        try:
            async with asyncio.timeout(self.ws.close_timeout or 10.0):
                await self.ws.close(CLOSE_POLICY, "ping_timeout")
        except TimeoutError:
            self.ws.transport.abort()

    async def send(self, message: dict[str, Any]) -> None:
        async with self._send_lock:
            await self.ws.send(json.dumps(message))

    @abstractmethod
    async def serve(self) -> None:
        """Read and apply client frames until the connection or the call ends."""

    @abstractmethod
    async def write(self) -> None:
        """Send every session event to the client, encoded, as soon as it exists."""

    async def run(self) -> None:
        """Serve until the peer goes away; the session is closed whatever happens."""
        writer = asyncio.create_task(self.write(), name=f"{self.session.id}.writer")
        watchdog = asyncio.create_task(self._watch_limits(), name=f"{self.session.id}.limits")
        keepalive = asyncio.create_task(self._watch_pongs(), name=f"{self.session.id}.keepalive")
        try:
            await self.serve()
        except ConnectionClosed:
            pass
        finally:
            for task in (writer, watchdog, keepalive):
                task.cancel()
            for task in (writer, watchdog, keepalive):
                with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                    await task
            await self.session.aclose()
