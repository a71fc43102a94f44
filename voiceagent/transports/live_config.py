"""A GPT-Live session's configuration: ``session.start``'s and ``session.update``'s ``session``
checked strictly (as OpenAI does: an unknown field is refused), and the ``session`` object the
server answers with (``session.started``, ``session.updated``, ``session.closed``).

What each field does here is the table in :mod:`.live_support`.  Pure: no I/O, no session.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from voiceagent.errors import ProtocolError, excerpt
from voiceagent.transports.live_support import CONTAINERS, SESSION_FIELDS
from voiceagent.transports.realtime_support import refusals

__all__ = [
    "LIVE_VOICES",
    "MAX_INPUT_ITEMS",
    "MEDIA_ONLY_FIELDS",
    "LiveSession",
    "create_body",
    "parse_start",
    "parse_update",
    "session_resource",
]

LIVE_VOICES = (
    "alloy", "ash", "ballad", "beacon", "bossa", "cedar", "cinder", "coral", "delta", "echo", "gleam", "marin",
    "meridian", "quartz", "ripple", "sage", "shida", "shimmer", "stone", "tempo", "verse", "vesper", "willow",
)  # fmt: skip
"""GPT-Live's built-in voice names (``openai.types.live.BuiltInVoice``); each speaks with a voice
of this server's table."""

DEFAULT_VOICE = "marin"
MEDIA_ONLY_FIELDS = ("idle_timeout_s", "wake_policy")
"""Fields of a WebRTC session's configuration (``MediaSessionConfigParam``) beyond a WebSocket's:
refused with a value (null is taken as omitted)."""
MAX_INPUT_ITEMS = 128
_PCM_RATES = (16000, 24000)
_G711_RATE = 8000
_INPUT_ROLES = ("developer", "user", "assistant")
_DELEGATION_TYPES = ("client", "responses", "decisions")


@dataclass(frozen=True)
class LiveSession:
    """The configuration a GPT-Live client started its session with (and has since updated)."""

    model: str
    instructions: str = ""
    """The client's own instructions ("" when it gave none or blank ones: the server's are used)."""
    voice: str = DEFAULT_VOICE
    """The voice as the client named it (a built-in name, or a voice of the server's table)."""
    format: str = "audio/pcm"
    rate: int = 24000
    acknowledgement_delay_ms: int = 0
    input: tuple[tuple[str, str], ...] = ()
    """The startup history: (role, text) with role developer, user or assistant."""
    safety_identifier: str | None = None


def _object(value: Any, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError("invalid_type", f"{param} must be an object", param=param)
    return value


def _string(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise ProtocolError("invalid_type", f"{param} must be a string", param=param)
    return value


def _known(obj: dict[str, Any], keys: tuple[str, ...], param: str) -> None:
    """An object whose fields must all be among ``keys`` (OpenAI refuses unknown ones)."""
    for key in obj:
        if key not in keys:
            raise ProtocolError("unknown_parameter", f"unknown parameter {excerpt(f'{param}.{key}')}", param=f"{param}.{key}")


def _format(value: Any) -> tuple[str, int]:
    fmt = _object(value, "session.audio.format")
    _known(fmt, ("type", "rate"), "session.audio.format")
    kind, rate = fmt.get("type"), fmt.get("rate")
    if kind == "audio/pcm":
        if rate not in _PCM_RATES:
            raise ProtocolError("invalid_value", "audio/pcm takes rate 16000 or 24000", param="session.audio.format.rate")
    elif kind in ("audio/pcmu", "audio/pcma"):
        if rate != _G711_RATE:
            raise ProtocolError("invalid_value", f"{kind} takes rate 8000", param="session.audio.format.rate")
    else:
        why = f"unknown audio format {excerpt(str(kind))}: audio/pcm, audio/pcmu or audio/pcma"
        raise ProtocolError("invalid_value", why, param="session.audio.format.type")
    return str(kind), int(rate)


def _voice(value: Any) -> str:
    """A built-in name as it is; a custom voice ``{"id": ...}`` by its id (checked against the
    server's table by the session)."""
    if isinstance(value, dict):
        _known(value, ("id",), "session.audio.output.voice")
        return _string(value.get("id"), "session.audio.output.voice.id")
    return _string(value, "session.audio.output.voice")


def _ack_delay(obj: dict[str, Any], current: int) -> int:
    if "acknowledgement_delay_ms" not in obj or obj["acknowledgement_delay_ms"] is None:
        return current
    delay = obj["acknowledgement_delay_ms"]
    if isinstance(delay, bool) or not isinstance(delay, int) or delay < 0:
        why = "acknowledgement_delay_ms must be a whole number of ms, 0 or more"
        raise ProtocolError("invalid_value", why, param="session.delegation.acknowledgement_delay_ms")
    return delay


def _delegation(value: Any, current: int) -> int:
    """The delegation object → its acknowledgement delay; only ``client`` is served."""
    if value is None:
        return current
    obj = _object(value, "session.delegation")
    kind = obj.get("type")
    if kind not in _DELEGATION_TYPES:
        raise ProtocolError("invalid_value", "delegation.type is client, responses or decisions", param="session.delegation.type")
    if kind != "client":
        raise ProtocolError(
            "unsupported_value",
            f"delegation type {kind!r} is not supported by this server: use client delegation (the default)",
            param="session.delegation.type",
        )
    _known(obj, ("type", "acknowledgement_delay_ms"), "session.delegation")
    return _ack_delay(obj, current)


def _input(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list):
        raise ProtocolError("invalid_type", "session.input must be a list of messages", param="session.input")
    if len(value) > MAX_INPUT_ITEMS:
        raise ProtocolError("invalid_value", f"session.input holds at most {MAX_INPUT_ITEMS} messages", param="session.input")
    out = []
    for n, raw in enumerate(value):
        param = f"session.input[{n}]"
        item = _object(raw, param)
        _known(item, ("role", "content", "id", "status", "type"), param)
        role = item.get("role")
        if role not in _INPUT_ROLES:
            raise ProtocolError("invalid_value", f"{param}.role is developer, user or assistant", param=f"{param}.role")
        if item.get("type", "message") != "message":
            raise ProtocolError("invalid_value", f"{param}.type is message", param=f"{param}.type")
        content = item.get("content")
        if not isinstance(content, list) or len(content) != 1:
            raise ProtocolError("invalid_value", f"{param}.content holds exactly one text part", param=f"{param}.content")
        part = _object(content[0], f"{param}.content[0]")
        _known(part, ("type", "text"), f"{param}.content[0]")
        allowed = ("text", "output_text") if role == "assistant" else ("input_text",)
        if part.get("type", allowed[0]) not in allowed:
            raise ProtocolError("invalid_value", f"a {role} message's part is {' or '.join(allowed)}", param=f"{param}.content[0].type")
        out.append((str(role), _string(part.get("text"), f"{param}.content[0].text")))
    return tuple(out)


def _refuse_table_fields(session: dict[str, Any]) -> None:
    """Unknown fields and refused ones given a value, by the table (the first one is raised)."""
    errors = refusals(session, "session", SESSION_FIELDS, CONTAINERS)
    if errors:
        raise errors[0]


def create_body(body: bytes, transport_shape: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ``POST /v1/live/sessions`` body → (its ``session``, its ``transport``), both objects and
    nothing else beside them; :class:`ProtocolError` otherwise.  ``transport_shape`` is what the
    caller's transport must look like, for the message.  The two objects' own fields are the
    caller's to check."""
    try:
        obj = json.loads(body)
    except ValueError:
        raise ProtocolError("invalid_json", f"the body is not JSON: {{session, transport: {transport_shape}}}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("invalid_type", "the body must be an object: {session, transport}")
    for key in obj:
        if key not in ("session", "transport"):
            raise ProtocolError("unknown_parameter", f"unknown parameter {key[:64]!r}", param=key)
    transport = obj.get("transport")
    if not isinstance(transport, dict):
        raise ProtocolError("invalid_value", f"transport must be {transport_shape}", param="transport")
    if "session" not in obj:
        raise ProtocolError("missing_required_parameter", "session is required", param="session")
    session = obj["session"]
    if not isinstance(session, dict):
        raise ProtocolError("invalid_type", "session must be an object", param="session")
    return session, transport


def parse_start(value: Any, *, media: bool = False) -> LiveSession:
    """``session.start``'s ``session`` → the configuration; :class:`ProtocolError` for the first
    thing wrong with it (nothing is applied then).  ``media``: the session's audio travels on
    tracks (WebRTC, SIP), which negotiate their own format: ``audio.format`` is refused."""
    session = _object(value, "session")
    audio_obj = session.get("audio")
    if media and isinstance(audio_obj, dict) and "format" in audio_obj:
        why = "session.audio.format is for WebSockets: WebRTC and SIP negotiate their media format"
        raise ProtocolError("unknown_parameter", why, param="session.audio.format")
    if media:
        for key in MEDIA_ONLY_FIELDS:
            if session.get(key) is not None:
                why = f"session.{key} is not supported by this server (a media session's idle pause and wake-up)"
                raise ProtocolError("unsupported_field", why, param=f"session.{key}")
        session = {k: v for k, v in session.items() if k not in MEDIA_ONLY_FIELDS}
    _refuse_table_fields(session)
    if "model" not in session:
        raise ProtocolError("missing_required_parameter", "session.model is required", param="session.model")
    model = _string(session["model"], "session.model")
    if not model.strip():
        raise ProtocolError("invalid_value", "session.model is empty", param="session.model")
    cfg = LiveSession(model=model)
    audio = session.get("audio")
    if audio is not None:
        audio = _object(audio, "session.audio")
        if audio.get("format") is not None:
            kind, rate = _format(audio["format"])
            cfg = dataclasses.replace(cfg, format=kind, rate=rate)
        output = audio.get("output")
        if output is not None and _object(output, "session.audio.output").get("voice") is not None:
            cfg = dataclasses.replace(cfg, voice=_voice(output["voice"]))
    if session.get("store"):
        raise ProtocolError("unsupported_value", "store: this server keeps no sessions (false only)", param="session.store")
    instructions = session.get("instructions")
    if instructions is not None:
        cfg = dataclasses.replace(cfg, instructions=_string(instructions, "session.instructions").strip())
    if session.get("input") is not None:
        cfg = dataclasses.replace(cfg, input=_input(session["input"]))
    if session.get("safety_identifier") is not None:
        cfg = dataclasses.replace(cfg, safety_identifier=_string(session["safety_identifier"], "session.safety_identifier"))
    return dataclasses.replace(cfg, acknowledgement_delay_ms=_delegation(session.get("delegation"), 0))


def parse_update(value: Any, current: LiveSession) -> LiveSession:
    """``session.update``'s ``session`` (delegation settings and triggers only) → the new
    configuration.  The delegation's type cannot change (``immutable_field_update``)."""
    session = _object(value, "session")
    _known(session, ("delegation", "triggers"), "session")
    if session.get("triggers") is not None:
        raise ProtocolError("unsupported_field", "session.triggers is not supported by this server (Decisions)", param="session.triggers")
    if "delegation" not in session:
        return current
    if session["delegation"] is None:
        why = "the delegation's type cannot change in a running session"
        raise ProtocolError("immutable_field_update", why, param="session.delegation")
    obj = _object(session["delegation"], "session.delegation")
    if obj.get("type") != "client":
        why = "the delegation's type cannot change in a running session (it is client)"
        raise ProtocolError("immutable_field_update", why, param="session.delegation.type")
    return dataclasses.replace(current, acknowledgement_delay_ms=_delegation(obj, current.acknowledgement_delay_ms))


def session_resource(cfg: LiveSession, session_id: str, expires_at: int, instructions: str) -> dict[str, Any]:
    """The ``session`` object of ``session.started``/``updated``/``closed``: ``instructions``
    are those the session runs with (the server's when the client gave none)."""
    return {
        "id": session_id,
        "expires_at": expires_at,
        "model": cfg.model,
        "status": "active",
        "audio": {"format": {"type": cfg.format, "rate": cfg.rate}, "output": {"voice": cfg.voice}},
        "delegation": {"type": "client", "acknowledgement_delay_ms": cfg.acknowledgement_delay_ms},
        "input": [
            {"type": "message", "role": role, "content": [{"type": "output_text" if role == "assistant" else "input_text", "text": text}]}
            for role, text in cfg.input
        ],
        "instructions": instructions,
        "safety_identifier": cfg.safety_identifier,
        "store": False,
    }
