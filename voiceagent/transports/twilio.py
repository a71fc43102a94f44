"""The Twilio Media Streams transport: one phone call's WebSocket ↔ one :class:`~voiceagent.session.Session`.

Reader: each text frame is decoded by :class:`~voiceagent.transports.twilio_codec.TwilioCodec`;
caller audio goes to the session at 16 kHz, echoed marks advance the playback position, ``stop``
ends the call.  Media Streams has no error message, so a frame the codec refuses (bad JSON, an
unknown event, bad base64, media before ``start``, a binary frame) is logged and the connection is
closed with code 1008 and the reason; other calls are not affected.

Writer: reply audio goes out as ``media`` + ``mark`` pairs as soon as each chunk exists.  On
barge-in (:class:`~voiceagent.events.PlaybackCleared`) a ``clear`` is sent at once and the
assistant item is truncated to what the echoed marks say the caller heard.
"""

from __future__ import annotations

import logging

from websockets.asyncio.server import ServerConnection

from voiceagent.audio import PIPELINE_RATE
from voiceagent.errors import ProtocolError
from voiceagent.events import InputTranscriptDone, PlaybackCleared, ResponseDone
from voiceagent.session import Session
from voiceagent.transports.connection import SessionConnection
from voiceagent.transports.twilio_codec import Dtmf, MarkEcho, Media, Start, Stop, TwilioCodec

__all__ = ["CLOSE_POLICY", "TwilioConnection"]

log = logging.getLogger(__name__)

CLOSE_POLICY = 1008  # RFC 6455 "policy violation": the peer broke the protocol
CLOSE_UNSUPPORTED = 1003  # RFC 6455 "unsupported data": a binary frame


class TwilioConnection(SessionConnection):
    """Serves one Media Streams connection.  ``dtmf`` collects the digits the caller pressed."""

    def __init__(self, ws: ServerConnection, session: Session, voice_rate: int) -> None:
        super().__init__(ws, session)
        self.codec = TwilioCodec(voice_rate)
        self.dtmf: list[str] = []
        self.dropped_ms = 0.0
        """Caller audio refused for arriving faster than real time (``server.audio_burst_s``)."""

    async def serve(self) -> None:
        """Serve until ``stop`` or the peer goes away."""
        async for frame in self.frames():
            if isinstance(frame, bytes):
                await self._refuse(CLOSE_UNSUPPORTED, "binary frames are not part of Media Streams")
                return
            try:
                cmd = self.codec.decode(frame)
            except ProtocolError as exc:
                await self._refuse(CLOSE_POLICY, f"{exc.code}: {exc.message}")
                return
            if isinstance(cmd, Stop):
                log.info("twilio call %s stopped (session %s)", cmd.call_sid or self.codec.call_sid, self.session.id)
                await self.ws.close()
                return
            await self._apply(cmd)

    async def expire(self, code: str, message: str) -> None:
        """Media Streams has no error message: the close code and reason (1008) say it."""
        log.warning("twilio stream %s: %s: %s", self.codec.stream_sid or "-", code, message)

    async def _refuse(self, code: int, reason: str) -> None:
        log.warning("twilio stream %s: closing: %s", self.codec.stream_sid or "-", reason)
        # A close reason is at most 123 bytes (RFC 6455); keep it readable rather than cut mid-character.
        await self.ws.close(code, reason.encode("utf-8")[:120].decode("utf-8", "ignore"))

    async def _apply(self, cmd: object) -> None:
        if isinstance(cmd, Media):
            if len(cmd.pcm) and self.audio_allowed(len(cmd.pcm) * 1000.0 / PIPELINE_RATE):
                await self.session.append_audio(cmd.pcm)
            elif len(cmd.pcm):
                self.dropped_ms += len(cmd.pcm) * 1000.0 / PIPELINE_RATE  # faster than a phone line can send
        elif isinstance(cmd, MarkEcho):
            pass  # the codec recorded the playback position
        elif isinstance(cmd, Dtmf):
            self.dtmf.append(cmd.digit)
            log.info("twilio stream %s: caller pressed %s", self.codec.stream_sid, cmd.digit)
        elif isinstance(cmd, Start):
            log.info("twilio call %s started: stream %s, session %s", cmd.call_sid, cmd.stream_sid, self.session.id)

    async def write(self) -> None:
        async for event in self.session.events():
            for message in self.codec.encode(event):
                await self.send(message)
            if isinstance(event, PlaybackCleared):
                await self._cut_to_heard(event)
            elif isinstance(event, InputTranscriptDone) and self.session.config.log_transcripts:
                log.info("twilio stream %s: caller: %s", self.codec.stream_sid, event.text)
            elif isinstance(event, ResponseDone) and self.session.config.log_transcripts:
                log.info("twilio stream %s: agent (%s): %s", self.codec.stream_sid, event.status.value, event.text)

    async def _cut_to_heard(self, event: PlaybackCleared) -> None:
        # The session cut the item to its own estimate; the marks are what the phone actually
        # played, and ``truncate`` only ever cuts further.
        if self.codec.fully_played(event.item_id):
            return  # the caller heard all of it: nothing to cut
        heard = self.codec.played_ms(event.item_id)
        try:
            await self.session.truncate(event.item_id, heard)
        except ProtocolError as exc:  # the item was deleted meanwhile: nothing left to cut
            log.debug("twilio truncate of %s skipped: %s", event.item_id, exc.message)
        log.info("twilio stream %s: barge-in, caller heard %.0f ms of %s", self.codec.stream_sid, heard, event.item_id)
