"""A SIP call accepted on GPT-Live's terms (``POST /v1/live/sessions/{session_id}/accept``).

The call's audio stays on the phone stream that carries it (the SIP gateway's Media Streams
socket, :class:`~voiceagent.transports.twilio.TwilioConnection`); what GPT-Live adds is the
protocol its sidebands speak (``/v1/live/sessions/{session_id}/attach``): the session's events,
the caller's audio before muting, ``transport.dtmf.received`` for each key the caller presses,
and the sideband's commands, ``transport.dtmf.send`` among them.  There is no primary socket: a
SIP session's events go to its sidebands alone, as OpenAI's do.

A sideband's ``session.close`` hangs the call up; the call's end (either side) tells the
sidebands ``session.closed`` (``remote_hangup`` when the caller hung up).

Cancellation: :meth:`LivePhoneCall.stop` cancels the protocol's speaker, acknowledgement timers
and usage reports.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from websockets.exceptions import ConnectionClosed

from voiceagent.audio import Int16Array
from voiceagent.errors import ProtocolError
from voiceagent.events import Event
from voiceagent.session import Session
from voiceagent.transports.live import LiveProtocol
from voiceagent.transports.live_codec import Start
from voiceagent.transports.live_config import parse_start

__all__ = ["LivePhoneCall"]

log = logging.getLogger(__name__)


class LivePhoneCall:
    """GPT-Live on one phone call.  ``press`` sends a key on the call; ``hang_up`` ends it."""

    def __init__(
        self,
        session: Session,
        voice_rate: int,
        session_id: str,
        *,
        press: Callable[[str], Awaitable[None]],
        hang_up: Callable[[], Awaitable[None]],
        audio_allowed: Callable[[float], bool],
    ) -> None:
        self._hang_up = hang_up
        self._press_key = press
        self.protocol = LiveProtocol(
            session,
            voice_rate,
            send=self._primary,
            close=self._close,
            audio_allowed=audio_allowed,
            started_at=session.clock.now(),
            fixed_audio=True,
            session_id=session_id,
            press=self._press,
        )

    async def start(self, config: dict[str, Any]) -> None:
        """Apply the accept's ``session`` (checked as ``session.start``'s, strictly; its ``type``
        is ``live``; the audio format is the call's): :class:`~voiceagent.errors.ProtocolError`
        for the first thing wrong, nothing applied then.  The protocol runs from here."""
        cfg = parse_start({k: v for k, v in config.items() if k != "type"}, media=True)
        await self.protocol.apply(Start(None, cfg))
        self.protocol.start()

    async def _press(self, key: str) -> None:
        """A sideband's ``transport.dtmf.send``: :class:`ProtocolError` (its ``error``, and the
        session goes on to its ``session.closed``) when the call's stream has closed."""
        try:
            await self._press_key(key)
        except ConnectionClosed:
            raise ProtocolError("call_ended", "the call has ended: no key was sent") from None

    async def _primary(self, message: dict[str, Any]) -> None:
        """A SIP session has no primary socket: what the protocol sends there goes nowhere (its
        events reach the sidebands too), but for errors that answer no sideband's command (a
        reply that failed, the call's time limit), which its sidebands are told."""
        if message.get("type") == "error":
            self.protocol.tell_sidebands(message)

    async def expire(self, code: str, message: str) -> None:
        """The call's time limit: ``error``, then ``session.closed`` (``expired``), to the sidebands."""
        await self.protocol.expire(code, message)

    async def _close(self, reason: str) -> None:
        log.info("session %s: GPT-Live sideband closed the call (%s)", self.protocol.session.id, reason)
        await self._hang_up()

    async def microphone(self, pcm: Int16Array) -> None:
        await self.protocol.microphone(pcm)

    def key(self, key: str) -> None:
        self.protocol.key_received(key)

    async def on_event(self, event: Event) -> None:
        await self.protocol.on_event(event)

    async def stop(self, reason: str) -> None:
        await self.protocol.stop(reason)
