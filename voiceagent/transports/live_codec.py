"""GPT-Live's wire for one connection: client text in → commands, session events → server events.

No sockets and no event loop (times come in as arguments).  The conversation core is the one the
Realtime transport drives; this is a second codec over it.  A delegation is the agent calling the
one tool a GPT-Live session offers its model (:data:`DELEGATE`): its call becomes
``session.delegation.created`` and the result the application appends becomes that call's output.

Every server event carries an ``event_id`` and, where it answers a client event, that event's id
as ``client_event_id``.  Times (``start_ms``, ``end_ms``, ``offset_ms``) are on the session's
timeline: milliseconds since the connection opened (the user's speech by its audio's position).
"""

from __future__ import annotations

import base64
import binascii
import itertools
from dataclasses import dataclass
from typing import Any

from voiceagent.audio import PIPELINE_RATE, Int16Array, StreamResampler
from voiceagent.errors import MAX_MESSAGE_CHARS, ProtocolError, bounded, excerpt
from voiceagent.events import (
    AudioDelta,
    ErrorEvent,
    Event,
    FunctionCallAdded,
    InputSpeechStarted,
    InputSpeechStopped,
    InputTranscriptDone,
    OutputTranscriptDelta,
    PlaybackCleared,
    ResponseCreated,
    ResponseDone,
)
from voiceagent.tools.spec import Tool
from voiceagent.transports.fields import parse_object
from voiceagent.transports.live_config import LiveSession, parse_start, parse_update
from voiceagent.transports.live_support import CLIENT_EVENTS
from voiceagent.transports.realtime_audio import WireAudio
from voiceagent.transports.realtime_support import Status
from voiceagent.transports.realtime_wire import WIRE_RATE

__all__ = [
    "AUDIO_DELTA",
    "DELEGATE",
    "MAX_APPEND_CHARS",
    "AppendAudio",
    "AppendContext",
    "Close",
    "Command",
    "LiveCodec",
    "Mute",
    "Start",
    "Update",
]

DELEGATE = Tool(
    name="delegate",
    description=(
        "Hand the user's request to the application when answering needs something you do not have: "
        "live or personal information (weather, news, orders, accounts), an action, or careful work. "
        "Say nothing about it yourself; the application's answer is told to the user."
    ),
    parameters={
        "type": "object",
        "properties": {"task": {"type": "string", "description": "what the user asked for, in a short sentence"}},
        "required": ["task"],
    },
)
"""The tool a GPT-Live session with client delegation offers its model: a call is a delegation."""

AUDIO_DELTA = "session.output_audio.delta"
"""The server event that carries reply audio."""

MAX_APPEND_TOKENS = 500
MAX_APPEND_CHARS = MAX_APPEND_TOKENS * 4
"""Appended instructions, thinking and commentary: 500 tokens at most (as OpenAI), counted as
four characters each (this server's models have different tokenizers)."""


@dataclass(frozen=True)
class Command:
    event_id: str | None


@dataclass(frozen=True)
class Start(Command):
    config: LiveSession


@dataclass(frozen=True)
class Update(Command):
    config: LiveSession


@dataclass(frozen=True)
class AppendAudio(Command):
    pcm: Int16Array


@dataclass(frozen=True)
class Mute(Command):
    muted: bool


@dataclass(frozen=True)
class AppendContext(Command):
    """``session.instructions.append`` / ``thinking.append`` / ``commentary.append``."""

    kind: str  # "instructions" | "thinking" | "commentary"
    content: str
    delegation_id: str | None


@dataclass(frozen=True)
class Close(Command):
    pass


@dataclass(frozen=True)
class SendKey(Command):
    """``transport.dtmf.send``: one key for a SIP call to press."""

    key: str


KEYS = frozenset("0123456789*#ABCD")
"""The keys a phone's keypad has (RFC 4733 events 0-15)."""


_ACCEPTED = frozenset(row.name for row in CLIENT_EVENTS if row.status is not Status.REFUSED)
_REFUSED = {row.name: row.note for row in CLIENT_EVENTS if row.status is Status.REFUSED}
_APPENDS = {"session.instructions.append": "instructions", "session.thinking.append": "thinking", "session.commentary.append": "commentary"}


class LiveCodec:
    """Per-connection protocol state: the configuration as the client knows it, its audio format,
    the delegations in flight and where each reply's audio has reached on the timeline."""

    def __init__(self, voice_rate: int) -> None:
        self.config: LiveSession | None = None
        self.audio = WireAudio(voice_rate)
        self._ids = itertools.count(1)
        self.delegations: dict[str, str] = {}
        """Delegations the application has not answered yet: call id → the response that made it."""
        self._speech: dict[str, tuple[float, float]] = {}  # user item → (start, end) ms of its speech
        self._out_at: dict[str, float] = {}  # response → timeline ms its next audio starts at
        self._reflected = WireAudio(voice_rate)  # sidebands hear PCM16 at 24 kHz, whatever the primary's format
        self._reflect_in = StreamResampler(PIPELINE_RATE, WIRE_RATE, quality="LQ")
        self._heard = False  # an input transcript was sent

    # ------------------------------------------------------------------ client → server

    def decode(self, text: str) -> Command:
        """One client text frame as a command; :class:`ProtocolError` when it is not valid."""
        msg = parse_object(text, "a client event")
        kind = msg.get("type")
        event_id = msg.get("event_id")
        if event_id is not None and not isinstance(event_id, str):
            raise ProtocolError("invalid_type", "event_id must be a string", param="event_id")
        if not isinstance(kind, str):
            raise ProtocolError("missing_required_parameter", "a client event needs a type", param="type", event_id=event_id)
        if kind in _REFUSED:
            why = f"{kind} is not supported by this server: {_REFUSED[kind]}"
            raise ProtocolError("unsupported_event", why, param="type", event_id=event_id)
        if kind not in _ACCEPTED:
            raise ProtocolError("unknown_event_type", f"unknown event type {excerpt(kind)}", param="type", event_id=event_id)
        try:
            return self._decode(kind, msg, event_id)
        except ProtocolError as exc:
            exc.event_id = event_id
            raise

    def _fields(self, msg: dict[str, Any], kind: str, keys: tuple[str, ...]) -> None:
        for key in msg:
            if key not in ("type", "event_id", *keys):
                raise ProtocolError("unknown_parameter", f"unknown parameter {excerpt(key)} in {kind}", param=key)

    def _decode(self, kind: str, msg: dict[str, Any], event_id: str | None) -> Command:
        if kind == "session.start":
            self._fields(msg, kind, ("session",))
            if self.config is not None:
                raise ProtocolError("session_already_started", "session.start is sent once", param="type")
            return Start(event_id, parse_start(msg.get("session")))
        if self.config is None:
            raise ProtocolError("session_not_started", f"send session.start and wait for session.started before {kind}", param="type")
        if kind == "session.update":
            self._fields(msg, kind, ("session",))
            return Update(event_id, parse_update(msg.get("session"), self.config))
        if kind == "session.input_audio.append":
            self._fields(msg, kind, ("audio",))
            return AppendAudio(event_id, self._audio(msg.get("audio")))
        if kind in ("session.input_audio.mute", "session.input_audio.unmute"):
            self._fields(msg, kind, ())
            return Mute(event_id, kind.endswith(".mute"))
        if kind in _APPENDS:
            self._fields(msg, kind, ("content", "delegation_id"))
            return self._append(_APPENDS[kind], msg, event_id)
        if kind == "transport.dtmf.send":
            self._fields(msg, kind, ("event",))
            key = msg.get("event")
            if not isinstance(key, str) or key.upper() not in KEYS or len(key) != 1:
                raise ProtocolError("invalid_value", "event must be one key: 0-9, *, # or A-D (send one event per key)", param="event")
            return SendKey(event_id, key.upper())
        self._fields(msg, kind, ())
        return Close(event_id)

    def _audio(self, value: Any) -> Int16Array:
        if not isinstance(value, str):
            raise ProtocolError("invalid_type", "audio must be a base64 string", param="audio")
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ProtocolError("invalid_value", "audio is not valid base64", param="audio") from None
        if self.audio.input_format == "audio/pcm" and len(raw) % 2:
            raise ProtocolError("invalid_value", "audio/pcm is 16-bit: an even number of bytes", param="audio")
        return self.audio.to_session(raw)

    def _append(self, kind: str, msg: dict[str, Any], event_id: str | None) -> AppendContext:
        content = msg.get("content")
        if not isinstance(content, str):
            raise ProtocolError("invalid_type", "content must be a string", param="content")
        if not content.strip():
            raise ProtocolError("invalid_value", "content is empty", param="content")
        if len(content) > MAX_APPEND_CHARS:
            raise ProtocolError("invalid_value", f"content is limited to {MAX_APPEND_TOKENS} tokens", param="content")
        if "delegation_id" not in msg:
            why = "delegation_id is required (null for the whole session)"
            raise ProtocolError("missing_required_parameter", why, param="delegation_id")
        delegation = msg["delegation_id"]
        if delegation is not None:
            if not isinstance(delegation, str):
                raise ProtocolError("invalid_type", "delegation_id must be a string or null", param="delegation_id")
            if delegation not in self.delegations:
                raise ProtocolError("delegation_not_found", f"no open delegation {excerpt(delegation)}", param="delegation_id")
        return AppendContext(event_id, kind, content, delegation)

    # ------------------------------------------------------------------ server → client

    def event_id(self) -> str:
        return f"event_{next(self._ids):06d}"

    def message(self, kind: str, client_event_id: str | None = None, **fields: Any) -> dict[str, Any]:
        """A server event; ``client_event_id`` echoes the client event it answers."""
        msg: dict[str, Any] = {"type": kind, "event_id": self.event_id(), **fields}
        if client_event_id is not None:
            msg["client_event_id"] = client_event_id
        return msg

    def key_received(self, key: str) -> dict[str, Any]:
        """``transport.dtmf.received``: the caller of a SIP call pressed ``key`` (sidebands only)."""
        return self.message("transport.dtmf.received", event=key)

    def key_sent(self, key: str, client_event_id: str | None) -> dict[str, Any]:
        """``transport.dtmf.sent``: ``key`` went to the SIP call (``transport.dtmf.send``'s answer)."""
        return self.message("transport.dtmf.sent", client_event_id, event=key)

    def error(self, exc: ProtocolError) -> dict[str, Any]:
        body = {"type": "invalid_request_error", "code": exc.code, "message": exc.message, "param": exc.param}
        body["client_event_id"] = exc.event_id
        return self.message("error", exc.event_id, error=body)

    def encode(self, ev: Event, now_ms: float) -> list[dict[str, Any]]:
        """The server events for session event ``ev``, happening ``now_ms`` into the session."""
        if isinstance(ev, InputSpeechStarted):
            self._speech[ev.item_id] = (ev.audio_ms, ev.audio_ms)
        elif isinstance(ev, InputSpeechStopped):
            start, _ = self._speech.get(ev.item_id, (ev.audio_ms, ev.audio_ms))
            self._speech[ev.item_id] = (start, ev.audio_ms)
        elif isinstance(ev, InputTranscriptDone):
            start, end = self._speech.pop(ev.item_id, (now_ms, now_ms))
            if ev.text.strip():
                # Deltas accumulate into one transcript: turns after the first are set apart by a space.
                delta = (" " if self._heard else "") + ev.text.strip()
                self._heard = True
                return [self.message("session.input_transcript.delta", delta=delta, start_ms=int(start), end_ms=int(max(start, end)))]
        elif isinstance(ev, ResponseCreated):
            if ev.audio:
                self.audio.open(ev.response_id)
            self._out_at[ev.response_id] = now_ms
        elif isinstance(ev, OutputTranscriptDelta):
            at = max(self._out_at.get(ev.response_id, now_ms), now_ms)
            return [self.message("session.output_transcript.delta", delta=ev.text, start_ms=int(at), end_ms=int(at + ev.clause_ms))]
        elif isinstance(ev, AudioDelta):
            raw = self.audio.out(ev.response_id, ev.pcm, ev.rate)
            at = max(self._out_at.get(ev.response_id, now_ms), now_ms)
            self._out_at[ev.response_id] = at + len(ev.pcm) * 1000.0 / ev.rate
            return [self._audio_delta(raw)] if raw else []
        elif isinstance(ev, PlaybackCleared):
            self.audio.close(ev.response_id, flush=False)
        elif isinstance(ev, ResponseDone):
            self._out_at.pop(ev.response_id, None)
            tail = self.audio.close(ev.response_id, flush=ev.status == "completed")
            return [self._audio_delta(tail)] if tail else []
        elif isinstance(ev, FunctionCallAdded) and ev.name == DELEGATE.name:
            self.delegations[ev.call_id] = ev.response_id
            delegation = {"id": ev.call_id, "target": "client", "type": "delegation"}
            return [self.message("session.delegation.created", delegation=delegation, offset_ms=int(now_ms))]
        elif isinstance(ev, ErrorEvent):
            body = {"type": "server_error", "code": ev.code, "message": bounded(ev.message, MAX_MESSAGE_CHARS), "param": None}
            return [self.message("error", error=body)]
        return []

    def reflect_output(self, ev: AudioDelta | ResponseDone | PlaybackCleared, now_ms: float) -> list[dict[str, Any]]:
        """Reply audio as a sideband gets it: PCM16 at 24 kHz with its place on the timeline
        (``start_ms``/``end_ms``); call it for every reply event while sidebands listen, before
        :meth:`encode` moves the timeline on."""
        if isinstance(ev, AudioDelta):
            if ev.response_id not in self._reflected.open_responses():
                self._reflected.open(ev.response_id)
            raw = self._reflected.out(ev.response_id, ev.pcm, ev.rate)
        else:
            raw = self._reflected.close(ev.response_id, flush=isinstance(ev, ResponseDone) and ev.status == "completed")
        if not raw:
            return []
        start = max(self._out_at.get(ev.response_id, now_ms), now_ms) if isinstance(ev, AudioDelta) else now_ms
        end = start + len(raw) / 2 * 1000.0 / WIRE_RATE
        return [{**self._audio_delta(raw), "start_ms": int(start), "end_ms": max(int(start), int(end))}]

    def reflect_input(self, pcm: Int16Array) -> dict[str, Any] | None:
        """The caller's audio as a sideband gets it: ``session.input_audio.append``, PCM16 at 24 kHz."""
        out = self._reflect_in.process(pcm)
        if len(out) == 0:
            return None
        return {"type": "session.input_audio.append", "audio": base64.b64encode(out.astype("<i2").tobytes()).decode("ascii")}

    def _audio_delta(self, raw: bytes) -> dict[str, Any]:
        # Primary-socket audio carries no event_id and no times (openai.types.live.OutputAudioDeltaEvent).
        return {"type": AUDIO_DELTA, "delta": base64.b64encode(raw).decode("ascii")}
