"""The OpenAI Realtime transport: one WebSocket connection ↔ one :class:`~voiceagent.session.Session`.

Reader: each text frame is decoded by :class:`RealtimeCodec` and applied to the session
(:class:`RealtimeCommands`, which the WebRTC transport shares); a bad frame (non-JSON, unknown
type, bad base64, odd PCM length, a binary frame, an invalid value) gets an ``error`` event and
the connection stays open.  Oversized frames are refused by the WebSocket layer with close code
1009.  Writer: every session event is encoded and sent as soon as it exists.  When the client
goes away the session is closed; nothing else is affected.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from websockets.asyncio.server import ServerConnection

from voiceagent.audio import PIPELINE_RATE
from voiceagent.errors import ProtocolError, excerpt
from voiceagent.session import Session
from voiceagent.transports.audio_budget import too_fast
from voiceagent.transports.connection import SessionConnection
from voiceagent.transports.realtime_codec import RealtimeCodec
from voiceagent.transports.realtime_commands import (
    AppendAudio,
    CancelResponse,
    ClearInput,
    ClearOutput,
    Command,
    CommitInput,
    CreateItem,
    CreateResponse,
    CreateToolOutput,
    DeleteItem,
    RetrieveItem,
    TruncateItem,
    UpdateSession,
)

__all__ = ["RealtimeCommands", "RealtimeConnection"]

log = logging.getLogger(__name__)

_MIN_COMMIT_MS = 100.0


class RealtimeCommands:
    """Client events → the session, whatever carries them: decoded by ``codec``, applied in order
    (one event is applied, and answered, before the next is read), answered through ``send``.
    ``audio_allowed`` is asked for each ``input_audio_buffer.append`` (ms of audio; False: refused
    as faster than real time).  A bad event gets an ``error`` and changes nothing."""

    def __init__(
        self,
        session: Session,
        codec: RealtimeCodec,
        send: Callable[[dict[str, Any]], Awaitable[None]],
        audio_allowed: Callable[[float], bool] = lambda ms: True,
    ) -> None:
        self.session = session
        self.codec = codec
        self.send = send
        self._audio_allowed = audio_allowed
        self._committed_ms = 0.0

    async def handle(self, frame: str) -> None:
        """Decode ``frame`` and apply it; its errors are sent, never raised."""
        try:
            cmd = self.codec.decode(frame)
        except ProtocolError as exc:
            await self.error(exc)
            return
        try:
            await self.apply(cmd)
        except ProtocolError as exc:
            if exc.event_id is None:
                exc.event_id = cmd.event_id  # errors raised by the session echo the client's event too
            await self.error(exc)

    async def error(self, exc: ProtocolError) -> None:
        """Tell the client, and count it (``voiceagent_errors_total{code}``, as the session's own)."""
        self.session.metrics.error(exc.code)
        await self.send(self.codec.error(exc))

    def _appends_at_the_end(self, previous_item_id: str | None) -> None:
        """Tool outputs are added at the end of the history only: a ``previous_item_id`` other than
        the last item's is refused (``unsupported_value``), not ignored (messages may go anywhere)."""
        last = self.session.history.last_id
        if previous_item_id is not None and previous_item_id != last:
            raise ProtocolError(
                "unsupported_value",
                f"items are added at the end only: previous_item_id must be null or the last item's id ({last})",
                param="previous_item_id",
            )

    async def _update_session(self, cmd: UpdateSession) -> None:
        """Apply ``cmd`` and answer ``session.updated`` (the session as it runs now), then one
        ``error`` for each field it asked for that this server does not honour."""
        s = self.session
        await s.check_update(**cmd.changes)  # instructions too long for the LLM's window: refused, settings kept
        self.codec.settings = s.update(**cmd.changes)
        await self.send(self.codec.session_message("session.updated", s.id))
        for refused in cmd.refused:
            refused.event_id = cmd.event_id
            await self.error(refused)

    async def apply(self, cmd: Command) -> None:
        """Apply one decoded event; :class:`ProtocolError` when the session refuses it."""
        s = self.session
        if isinstance(cmd, AppendAudio):
            if not self._audio_allowed(len(cmd.pcm) * 1000.0 / PIPELINE_RATE):
                raise too_fast(s.config.server.audio_burst_s, cmd.event_id)
            await s.append_audio(cmd.pcm)
        elif isinstance(cmd, UpdateSession):
            await self._update_session(cmd)
        elif isinstance(cmd, CommitInput):
            if s.settings.turn_detection is not None:
                raise ProtocolError(
                    "invalid_state",
                    "input_audio_buffer.commit is for turn_detection null; server VAD commits by itself",
                    event_id=cmd.event_id,
                )
            if s.input_ms - self._committed_ms < _MIN_COMMIT_MS:
                raise ProtocolError(
                    "input_audio_buffer_commit_empty",
                    f"buffer too small: at least {_MIN_COMMIT_MS:.0f} ms of audio needed",
                    event_id=cmd.event_id,
                )
            self._committed_ms = s.input_ms
            await s.commit_input()
        elif isinstance(cmd, ClearInput):
            self._committed_ms = s.input_ms
            await s.clear_input()
        elif isinstance(cmd, ClearOutput):
            await s.clear_output()
        elif isinstance(cmd, CreateItem):
            if cmd.role == "system":
                raise ProtocolError(
                    "unsupported_role",
                    "system items are not supported; use session.update instructions",
                    param="item.role",
                    event_id=cmd.event_id,
                )
            await s.add_text(cmd.text, cmd.role, cmd.previous_item_id)
        elif isinstance(cmd, CreateToolOutput):
            self._appends_at_the_end(cmd.previous_item_id)
            await s.add_tool_output(cmd.call_id, cmd.output)
        elif isinstance(cmd, TruncateItem):
            await s.truncate(cmd.item_id, cmd.audio_end_ms)
        elif isinstance(cmd, DeleteItem):
            s.delete_item(cmd.item_id)
            await self.send(self.codec.item_deleted(cmd.item_id, cmd.event_id))
        elif isinstance(cmd, RetrieveItem):
            item = s.history.find(cmd.item_id)
            if item is None:
                raise ProtocolError("item_not_found", f"no item {excerpt(cmd.item_id)}", param="item_id", event_id=cmd.event_id)
            await self.send(self.codec.item_retrieved(item, cmd.event_id))
        elif isinstance(cmd, CreateResponse):
            await s.respond(cmd.options)
        elif isinstance(cmd, CancelResponse):
            active = s.active_response_id
            if active is None:
                raise ProtocolError("response_cancel_not_active", "there is no active response to cancel", event_id=cmd.event_id)
            if cmd.response_id is not None and cmd.response_id != active:
                raise ProtocolError(
                    "response_cancel_not_active",
                    f"response {excerpt(cmd.response_id)} is not active",
                    param="response_id",
                    event_id=cmd.event_id,
                )
            await s.cancel_response()


class RealtimeConnection(SessionConnection):
    def __init__(self, ws: ServerConnection, session: Session, voice_rate: int, *, send_metrics: bool) -> None:
        super().__init__(ws, session)
        self.codec = RealtimeCodec(session.settings, voice_rate, send_metrics=send_metrics)
        self.commands = RealtimeCommands(session, self.codec, self.send, self.audio_allowed)

    async def serve(self) -> None:
        await self.send(self.codec.session_message("session.created", self.session.id))
        async for frame in self.frames():
            if isinstance(frame, bytes):
                await self.commands.error(
                    ProtocolError("binary_not_supported", "send JSON text frames; audio goes base64 in input_audio_buffer.append")
                )
                continue
            await self.commands.handle(frame)

    async def expire(self, code: str, message: str) -> None:
        await self.commands.error(ProtocolError(code, message))

    async def write(self) -> None:
        async for event in self.session.events():
            for message in self.codec.encode(event):
                await self.send(message)
