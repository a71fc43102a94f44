"""A Realtime WebSocket attached to a phone call (``/v1/realtime?call_id=…``), as OpenAI's
call-control API has one: the application watches the call's session (every event its own
Realtime connection would get, and the caller's keys as
``input_audio_buffer.dtmf_event_received``) and steers it with ordinary client events
(``session.update``, ``conversation.item.create``, ``response.create``, …).

The session is the call's: attaching opens none, and detaching (the application closes its
socket) leaves the call going.  The call's end closes every attached socket (1000).  An attached
connection that stops reading is detached (:class:`~voiceagent.transports.phone_calls.PhoneCall`)
and closed with 1008.

Cancellation: cancelling :meth:`AttachedConnection.run` detaches and closes the socket only.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from voiceagent.errors import ProtocolError
from voiceagent.transports.connection import CLOSE_POLICY
from voiceagent.transports.phone_calls import Observed, PhoneCall
from voiceagent.transports.realtime import RealtimeCommands
from voiceagent.transports.realtime_codec import RealtimeCodec
from voiceagent.transports.realtime_wire import message

__all__ = ["AttachedConnection"]

log = logging.getLogger(__name__)


class AttachedConnection:
    """One application's socket on ``call``."""

    def __init__(self, ws: ServerConnection, call: PhoneCall, voice_rate: int) -> None:
        self.ws = ws
        self.call = call
        self.codec = RealtimeCodec(call.session.settings, voice_rate)
        self.commands = RealtimeCommands(call.session, self.codec, self.send)
        self._send_lock = asyncio.Lock()

    async def send(self, message: dict[str, Any]) -> None:
        async with self._send_lock:
            await self.ws.send(json.dumps(message))

    async def run(self) -> None:
        """Serve until the application or the call goes away."""
        queue = self.call.attach()
        log.info("call %s: a connection attached (session %s)", self.call.call_id, self.call.session.id)
        writer = asyncio.create_task(self._write(queue), name=f"{self.call.call_id}.attached")
        try:
            await self.send(self.codec.session_message("session.created", self.call.session.id))
            async for frame in self.ws:
                if isinstance(frame, bytes):
                    await self.commands.error(ProtocolError("binary_not_supported", "send JSON text frames"))
                    continue
                await self.commands.handle(frame)
        except ConnectionClosed:
            pass
        finally:
            self.call.detach(queue)
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)  # a cancellation of run() itself still propagates
            log.info("call %s: a connection detached", self.call.call_id)

    async def _write(self, queue: asyncio.Queue[Observed]) -> None:
        while True:
            item = await queue.get()
            if item is None:
                ended = self.call.state == "ended"
                await self.ws.close(1000 if ended else CLOSE_POLICY, "call ended" if ended else "stopped reading")
                return
            if isinstance(item, dict):
                await self.send(message(str(item["type"]), **{k: v for k, v in item.items() if k != "type"}))
                continue
            for encoded in self.codec.encode(item):
                await self.send(encoded)
