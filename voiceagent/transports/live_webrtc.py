"""GPT-Live over WebRTC: ``POST /v1/live/sessions`` with ``{"session": {...}, "transport":
{"type": "webrtc", "sdp": OFFER}}``, as the ``openai`` package's ``client.live.create()`` and
OpenAI's browser guides send it; the answer is ``{"session": {"id"}, "transport": {"type":
"webrtc", "sdp": ANSWER}}``.

The peer connection is the Realtime call's (:class:`~voiceagent.transports.webrtc.WebRtcCall`:
the microphone track in, the agent's voice on a paced track out, ICE, the media time-out); its
data channel (``oai-events``) carries GPT-Live's events instead of Realtime's, through the same
:class:`~voiceagent.transports.live.LiveProtocol` as the WebSocket.  The session's configuration
comes with the offer (``audio.format`` is refused: the tracks negotiate theirs), so
``session.started`` is the first event on the channel.  A sideband may attach by the session's
id.  ``session.close`` on the channel, or the peer's going, ends the call.

Cancellation: as :class:`~voiceagent.transports.webrtc.WebRtcCall`.
"""

from __future__ import annotations

from voiceagent.audio import Int16Array
from voiceagent.errors import ProtocolError
from voiceagent.events import Event, PlaybackCleared
from voiceagent.session import Session
from voiceagent.transports.live import LiveProtocol
from voiceagent.transports.live_codec import AUDIO_DELTA, Start
from voiceagent.transports.live_config import create_body, parse_start
from voiceagent.transports.webrtc import WebRtcCall

__all__ = ["LiveWebRtcCall", "live_offer"]


def live_offer(body: bytes) -> tuple[dict[str, object], str]:
    """The POST's JSON → (the session's configuration, the SDP offer); :class:`ProtocolError`
    when it is not that shape."""
    shape = "{type: webrtc, sdp: the offer}"
    session, transport = create_body(body, shape)
    if transport.get("type") != "webrtc" or not isinstance(transport.get("sdp"), str):
        raise ProtocolError("invalid_value", f"transport must be {shape}", param="transport")
    return session, str(transport["sdp"])


class LiveWebRtcCall(WebRtcCall):
    """One GPT-Live WebRTC session."""

    audio_type = AUDIO_DELTA

    def __init__(self, session: Session, voice_rate: int, *, ice_servers: str = "", media_timeout_s: float = 10.0) -> None:
        super().__init__(session, voice_rate, ice_servers=ice_servers, media_timeout_s=media_timeout_s)
        self._pending = []  # GPT-Live opens with session.started, sent once the session is configured
        self.live = LiveProtocol(
            session,
            voice_rate,
            send=self._send,
            close=self._close_call,
            audio_allowed=self._appended.allow,
            started_at=session.clock.now(),
            fixed_audio=True,
        )

    async def configure(self, session: dict[str, object]) -> None:
        """Start the session with the offer's configuration; :class:`ProtocolError` when refused."""
        await self.live.apply(Start(None, parse_start(session, media=True)))

    async def _close_call(self, reason: str) -> None:
        self.hang_up(reason)

    async def run(self) -> None:
        self.live.start()
        try:
            await super().run()
        finally:
            await self.live.stop()

    async def _microphone(self, pcm: Int16Array) -> None:
        await self.live.microphone(pcm)

    async def _event(self, text: str) -> None:
        await self.live.handle_frame(text)

    async def _error(self, exc: ProtocolError) -> None:
        if exc.code == "session_expired":  # the call's limit: GPT-Live's session.closed follows the error
            await self.live.expire(exc.code, exc.message)
        else:
            await self.live.error(exc)

    async def _on_event(self, event: Event) -> None:
        if isinstance(event, PlaybackCleared):
            self.speaker.clear()  # GPT-Live tells no "cleared": the track simply stops
        await self.live.on_event(event)
