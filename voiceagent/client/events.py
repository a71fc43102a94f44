"""Server → client: a Realtime server's JSON messages as typed events.

The events are the session's own (:mod:`voiceagent.events`): the server's codec renders
``InputSpeechStarted``, ``AudioDelta``, ``ResponseDone``… as wire messages, and
:class:`EventDecoder` reads them back as the same types, so a client of a remote server and a
client of an in-process :class:`~voiceagent.session.Session` handle one vocabulary.  Every event
gets ``t`` = the ``now`` given with its message and ``gen`` = 0 (the wire carries no generations).

The wire has a few things the session's events do not, typed here: :class:`SessionEvent`,
:class:`ResponseStarted` (``response.created``, before any item), :class:`OtherEvent` (a
well-formed message of a type no client here reads) and :class:`MalformedEvent`.

Two events are derived, not read, because the protocol asks a client to act on them: every
``input_audio_buffer.speech_started`` is preceded by a :class:`~voiceagent.events.PlaybackCleared`
with ``item_id`` ``''`` (the user is talking: whatever the client still plays was talked over),
and a ``response.done`` with status ``cancelled`` and a message item by one for that item (its
audio still in flight is stale).  ``heard_ms`` is 0 in both: only the client's player knows.

Never raises on what a server sends: text that is not JSON, not an object, without a ``type``, or
missing (or mistyping) a field a client needs becomes a :class:`MalformedEvent`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from voiceagent.audio import pcm16_from_bytes
from voiceagent.events import (
    AudioDelta,
    CallSummary,
    ErrorEvent,
    Event,
    FunctionCallAdded,
    InputSpeechStarted,
    InputSpeechStopped,
    InputTranscriptDelta,
    InputTranscriptDone,
    OutputTranscriptDelta,
    PlaybackCleared,
    ResponseCreated,
    ResponseDone,
    ResponseStatus,
    ToolOutputAdded,
    TurnMetrics,
)
from voiceagent.transports.realtime_wire import AUDIO_DELTA, TRANSCRIPT_DELTA, WIRE_RATE

__all__ = ["EventDecoder", "MalformedEvent", "OtherEvent", "ResponseStarted", "SessionEvent"]

_T = TypeVar("_T")
_RAW_CHARS = 200
"""How much of a malformed message a :class:`MalformedEvent` keeps."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionEvent(Event):
    """``session.created`` / ``session.updated`` (``type``): the session's effective configuration."""

    type: str
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class ResponseStarted(Event):
    """``response.created``: response ``response_id`` began; its items follow (its message item
    as a :class:`~voiceagent.events.ResponseCreated`)."""

    response_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class OtherEvent(Event):
    """A well-formed server message of a type not typed here (``conversation.item.added``,
    ``rate_limits.updated``, an unknown one…): its ``type`` and the message itself."""

    type: str
    message: dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class MalformedEvent(Event):
    """A server message this client cannot read: ``problem`` says why; ``type`` is its type when
    it had one; ``raw`` the start of the text."""

    type: str
    problem: str
    raw: str


class _FieldError(Exception):
    """A field is missing or of the wrong type (becomes a :class:`MalformedEvent`)."""


_MISSING: Any = object()


def _get(obj: dict[str, Any], key: str, kind: type[_T] | tuple[type, ...], default: Any = _MISSING) -> _T:
    """``obj[key]`` checked against ``kind``; ``default`` when absent or null (missing: malformed)."""
    value = obj.get(key)
    if value is None:
        if default is _MISSING:
            raise _FieldError(f"no {key!r}")
        return default  # type: ignore[no-any-return]
    if not isinstance(value, kind) or isinstance(value, bool):  # no field here is a bool: True is not a number
        raise _FieldError(f"{key!r} is {type(value).__name__}")
    return value  # type: ignore[return-value]


def _number(obj: dict[str, Any], key: str) -> float:
    return float(_get(obj, key, (int, float), 0.0))


class EventDecoder:
    """Turns each server message into events; keeps what that needs across messages (the partial
    transcript of each user item, and how much audio each assistant item has had)."""

    def __init__(self) -> None:
        self._partials: dict[str, str] = {}
        self._audio_samples: dict[str, int] = {}
        self._readers: dict[str, Callable[[dict[str, Any], float], list[Event]]] = {
            "session.created": self._session,
            "session.updated": self._session,
            "input_audio_buffer.speech_started": self._speech_started,
            "input_audio_buffer.speech_stopped": self._speech_stopped,
            "conversation.item.input_audio_transcription.delta": self._user_delta,
            "conversation.item.input_audio_transcription.completed": self._user_done,
            "response.created": self._response_created,
            "response.output_item.added": self._item_added,
            **dict.fromkeys((*TRANSCRIPT_DELTA, "response.output_text.delta"), self._agent_text),
            **dict.fromkeys(AUDIO_DELTA, self._audio),
            "response.function_call_arguments.done": self._call,
            "conversation.item.done": self._item_done,
            "response.done": self._response_done,
            "voiceagent.turn_metrics": self._metrics,
            "error": self._error,
        }

    def feed(self, data: str | bytes | dict[str, Any], now: float) -> list[Event]:
        """The events of one server message (a text frame, or one already parsed), at ``now``."""
        if isinstance(data, dict):
            msg: Any = data
        else:
            try:
                msg = json.loads(data)
            except ValueError as exc:
                return [MalformedEvent(t=now, gen=0, type="", problem=f"not JSON: {exc}", raw=_clip(data))]
        if not isinstance(msg, dict):
            return [MalformedEvent(t=now, gen=0, type="", problem="not a JSON object", raw=_clip(data))]
        kind = msg.get("type")
        if not isinstance(kind, str):
            return [MalformedEvent(t=now, gen=0, type="", problem="no 'type'", raw=_clip(data))]
        reader = self._readers.get(kind)
        if reader is None:
            return [OtherEvent(t=now, gen=0, type=kind, message=msg)]
        try:
            return reader(msg, now)
        except _FieldError as exc:
            return [MalformedEvent(t=now, gen=0, type=kind, problem=str(exc), raw=_clip(data))]

    # ------------------------------------------------------------------ session and user

    def _session(self, msg: dict[str, Any], now: float) -> list[Event]:
        return [SessionEvent(t=now, gen=0, type=msg["type"], config=_get(msg, "session", dict, {}))]

    def _speech_started(self, msg: dict[str, Any], now: float) -> list[Event]:
        item_id = _get(msg, "item_id", str, "")
        return [
            PlaybackCleared(t=now, gen=0, response_id="", item_id="", heard_ms=0.0),
            InputSpeechStarted(t=now, gen=0, item_id=item_id, audio_ms=_number(msg, "audio_start_ms")),
        ]

    def _speech_stopped(self, msg: dict[str, Any], now: float) -> list[Event]:
        return [InputSpeechStopped(t=now, gen=0, item_id=_get(msg, "item_id", str, ""), audio_ms=_number(msg, "audio_end_ms"))]

    def _user_delta(self, msg: dict[str, Any], now: float) -> list[Event]:
        item_id = _get(msg, "item_id", str)
        text = self._partials.get(item_id, "") + _get(msg, "delta", str, "")
        self._partials[item_id] = text
        return [InputTranscriptDelta(t=now, gen=0, item_id=item_id, text=text)]

    def _user_done(self, msg: dict[str, Any], now: float) -> list[Event]:
        item_id = _get(msg, "item_id", str)
        self._partials.pop(item_id, None)
        return [InputTranscriptDone(t=now, gen=0, item_id=item_id, text=_get(msg, "transcript", str, ""))]

    # ------------------------------------------------------------------ responses

    def _response_created(self, msg: dict[str, Any], now: float) -> list[Event]:
        return [ResponseStarted(t=now, gen=0, response_id=_get(_get(msg, "response", dict), "id", str))]

    def _item_added(self, msg: dict[str, Any], now: float) -> list[Event]:
        item = _get(msg, "item", dict)
        if _get(item, "type", str, "message") != "message":
            return [OtherEvent(t=now, gen=0, type=msg["type"], message=msg)]
        parts = _get(item, "content", list, [])
        text_only = bool(parts) and isinstance(parts[0], dict) and parts[0].get("type") in ("text", "output_text")
        response_id, item_id = _get(msg, "response_id", str), _get(item, "id", str)
        previous: str | None = _get(msg, "previous_item_id", str, None)
        return [ResponseCreated(t=now, gen=0, response_id=response_id, item_id=item_id, previous_item_id=previous, audio=not text_only)]

    def _agent_text(self, msg: dict[str, Any], now: float) -> list[Event]:
        response_id, item_id = _get(msg, "response_id", str), _get(msg, "item_id", str)
        return [OutputTranscriptDelta(t=now, gen=0, response_id=response_id, item_id=item_id, text=_get(msg, "delta", str))]

    def _audio(self, msg: dict[str, Any], now: float) -> list[Event]:
        response_id, item_id = _get(msg, "response_id", str), _get(msg, "item_id", str)
        try:
            pcm = pcm16_from_bytes(base64.b64decode(_get(msg, "delta", str), validate=True))
        except (binascii.Error, ValueError) as exc:
            raise _FieldError(f"'delta' is not base64 16-bit PCM: {exc}") from None
        before = self._audio_samples.get(item_id, 0)
        self._audio_samples[item_id] = before + len(pcm)
        offset_ms = before * 1000.0 / WIRE_RATE
        return [AudioDelta(t=now, gen=0, response_id=response_id, item_id=item_id, pcm=pcm, rate=WIRE_RATE, offset_ms=offset_ms)]

    def _call(self, msg: dict[str, Any], now: float) -> list[Event]:
        return [
            FunctionCallAdded(
                t=now,
                gen=0,
                response_id=_get(msg, "response_id", str, ""),
                item_id=_get(msg, "item_id", str, ""),
                previous_item_id=None,
                output_index=_get(msg, "output_index", int, 0),
                call_id=_get(msg, "call_id", str),
                name=_get(msg, "name", str, ""),
                arguments=_get(msg, "arguments", str, ""),
            )
        ]

    def _item_done(self, msg: dict[str, Any], now: float) -> list[Event]:
        item = _get(msg, "item", dict)
        if item.get("type") != "function_call_output":
            return [OtherEvent(t=now, gen=0, type=msg["type"], message=msg)]
        return [
            ToolOutputAdded(
                t=now,
                gen=0,
                item_id=_get(item, "id", str, ""),
                previous_item_id=_get(msg, "previous_item_id", str, None),
                call_id=_get(item, "call_id", str),
                output=_get(item, "output", str, ""),
            )
        ]

    def _response_done(self, msg: dict[str, Any], now: float) -> list[Event]:
        resp = _get(msg, "response", dict)
        said_status = _get(resp, "status", str, "")
        try:
            status = ResponseStatus(said_status)
        except ValueError:
            raise _FieldError(f"status {said_status!r} does not end a response") from None
        output = [o for o in _get(resp, "output", list, []) if isinstance(o, dict)]
        said = next((o for o in output if o.get("type", "message") == "message"), {})
        parts = said.get("content") or [{}]
        part = parts[0] if isinstance(parts, list) and isinstance(parts[0], dict) else {}
        text = part.get("transcript") or part.get("text") or ""
        calls = tuple(
            CallSummary(_get(o, "id", str, ""), _get(o, "call_id", str, ""), _get(o, "name", str, ""), _get(o, "arguments", str, ""))
            for o in output
            if o.get("type") == "function_call"
        )
        item_id = _get(said, "id", str, "")
        self._audio_samples.pop(item_id, None)
        done = ResponseDone(
            t=now,
            gen=0,
            response_id=_get(resp, "id", str),
            item_id=item_id,
            status=status,
            text=text if isinstance(text, str) else "",
            reason=_reason(resp.get("status_details")),
            audio_ms=_number(resp, "audio_ms"),
            calls=calls,
        )
        if status is ResponseStatus.CANCELLED and item_id:
            return [PlaybackCleared(t=now, gen=0, response_id=done.response_id, item_id=item_id, heard_ms=0.0), done]
        return [done]

    # ------------------------------------------------------------------ the rest

    def _metrics(self, msg: dict[str, Any], now: float) -> list[Event]:
        spans = _get(msg, "spans_ms", dict, {})
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in spans.values()):
            raise _FieldError("'spans_ms' holds a value that is not a number")
        queue = msg.get("llm_queue_ms")
        return [
            TurnMetrics(
                t=now,
                gen=0,
                response_id=_get(msg, "response_id", str),
                spans={str(k): float(v) for k, v in spans.items()},
                sessions_active=_get(msg, "sessions_active", int, 0),
                llm_queue_ms=float(queue) if isinstance(queue, int | float) and not isinstance(queue, bool) else None,
                llm_engine=_get(msg, "llm_engine", str, None),
                llm_route=_get(msg, "llm_route", str, None),
                playback_gap_ms=_number(msg, "playback_gap_ms"),
            )
        ]

    def _error(self, msg: dict[str, Any], now: float) -> list[Event]:
        err = _get(msg, "error", dict, {})
        # code and message as text, ``None`` included: what a reader is shown whatever the server sent
        return [
            ErrorEvent(
                t=now,
                gen=0,
                code=str(err.get("code")),
                message=str(err.get("message")),
                kind=_get(err, "type", str, "invalid_request_error"),
                param=_get(err, "param", str, None),
                event_id=_get(err, "event_id", str, None),
            )
        ]


def _reason(details: Any) -> str | None:
    """Why a response ended early: ``status_details.reason``, or a failure's error message."""
    if not isinstance(details, dict):
        return None
    reason = details.get("reason")
    if isinstance(reason, str):
        return reason
    error = details.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) else None


def _clip(data: Any) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data if isinstance(data, str) else repr(data)
    return text[:_RAW_CHARS]
