"""What every WebSocket transport shares: one connection driving one session.

A subclass decodes frames in :meth:`SessionConnection.serve` and encodes session events in
:meth:`SessionConnection.write`; this base serialises sends (the reader answers errors while the
writer streams audio), runs the writer beside the reader, and closes the session however the
connection ends.  Cancelling :meth:`run` closes the session too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from abc import ABC, abstractmethod
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from voiceagent.session import Session

__all__ = ["SessionConnection"]


class SessionConnection(ABC):
    def __init__(self, ws: ServerConnection, session: Session) -> None:
        self.ws = ws
        self.session = session
        self._send_lock = asyncio.Lock()

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
        try:
            await self.serve()
        except ConnectionClosed:
            pass
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await writer
            await self.session.aclose()
