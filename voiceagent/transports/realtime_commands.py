"""Client → server: each Realtime client event validated into a typed :data:`Command`.

:meth:`CommandDecoder.decode` turns one text frame into a command or raises
:class:`~voiceagent.errors.ProtocolError` naming the offending ``param`` (the transport sends it
as an ``error`` event and keeps the connection).  A rejected event changes nothing; an accepted
``session.update`` applies its audio formats to the connection's :class:`WireAudio` last.
Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from voiceagent.audio import Int16Array
from voiceagent.conversation.reply import ResponseOptions
from voiceagent.denoise import NOISE_REDUCTION_TYPES
from voiceagent.errors import ProtocolError, excerpt
from voiceagent.settings import EAGERNESS_LEVELS, InputItem, SessionSettings, Tracing, TurnDetection
from voiceagent.tools.mcp import McpServer
from voiceagent.tools.spec import Tool
from voiceagent.transports.fields import parse_object, require_str
from voiceagent.transports.realtime_audio import WireAudio
from voiceagent.transports.realtime_mcp import mcp_server
from voiceagent.transports.realtime_support import RESPONSE_FIELDS, SESSION_FIELDS, VENDOR_SESSION_FIELDS, refusals
from voiceagent.transports.realtime_wire import FORMATS, WIRE_RATE

__all__ = [
    "MAX_TOOLS",
    "MAX_TRANSCRIPTION_PROMPT",
    "AppendAudio",
    "CancelResponse",
    "ClearInput",
    "ClearOutput",
    "Command",
    "CommandDecoder",
    "CommitInput",
    "CreateItem",
    "CreateResponse",
    "CreateToolOutput",
    "DeleteItem",
    "RetrieveItem",
    "TruncateItem",
    "UpdateSession",
]

MAX_TOOLS = 128
MAX_TRANSCRIPTION_PROMPT = 2000
"""Characters of ``audio.input.transcription.prompt``; Whisper reads only its last
:data:`voiceagent.backends.whisper.MAX_PROMPT_TOKENS` tokens."""
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SERVER_FIELDS = frozenset(
    {"type", "threshold", "prefix_padding_ms", "silence_duration_ms", "create_response", "interrupt_response", "idle_timeout_ms"}
)
_SEMANTIC_FIELDS = frozenset({"type", "eagerness", "create_response", "interrupt_response"})


@dataclass(frozen=True)
class UpdateSession:
    """``changes`` to apply; ``refused``: the errors of fields this server does not honour (the
    rest of the update applies, and each of these is sent as an ``error``)."""

    changes: dict[str, Any]
    event_id: str | None = None
    refused: tuple[ProtocolError, ...] = ()


@dataclass(frozen=True)
class AppendAudio:
    pcm: Int16Array  # 16 kHz
    event_id: str | None = None


@dataclass(frozen=True)
class CommitInput:
    event_id: str | None = None


@dataclass(frozen=True)
class ClearInput:
    event_id: str | None = None


@dataclass(frozen=True)
class ClearOutput:
    """``output_audio_buffer.clear``: the client dropped the reply audio it had buffered."""

    event_id: str | None = None


@dataclass(frozen=True)
class CreateItem:
    role: str
    text: str
    event_id: str | None = None
    previous_item_id: str | None = None
    """Insert after this item (None: at the end); an id not in the history is refused."""


@dataclass(frozen=True)
class CreateToolOutput:
    """A ``function_call_output`` item: the result of the call ``call_id``."""

    call_id: str
    output: str
    event_id: str | None = None
    previous_item_id: str | None = None


@dataclass(frozen=True)
class TruncateItem:
    item_id: str
    audio_end_ms: float
    event_id: str | None = None


@dataclass(frozen=True)
class DeleteItem:
    item_id: str
    event_id: str | None = None


@dataclass(frozen=True)
class RetrieveItem:
    item_id: str
    event_id: str | None = None


@dataclass(frozen=True)
class CreateResponse:
    options: ResponseOptions = field(default_factory=ResponseOptions)
    """What this response is asked with (a field left None: the session's)."""
    event_id: str | None = None


@dataclass(frozen=True)
class CancelResponse:
    response_id: str | None = None
    event_id: str | None = None


Command = (
    UpdateSession
    | AppendAudio
    | CommitInput
    | ClearInput
    | ClearOutput
    | CreateItem
    | CreateToolOutput
    | TruncateItem
    | DeleteItem
    | RetrieveItem
    | CreateResponse
    | CancelResponse
)


class CommandDecoder:
    """Validates client events against the session's current ``settings`` (tool names, turn
    detection defaults) and the connection's ``audio`` formats."""

    def __init__(self, settings: SessionSettings, audio: WireAudio) -> None:
        self.settings = settings
        self.audio = audio

    def decode(self, text: str) -> Command:
        msg = parse_object(text, "a client event")
        event_id = msg.get("event_id") if isinstance(msg.get("event_id"), str) else None
        kind = msg.get("type")
        if not isinstance(kind, str):
            raise ProtocolError("missing_type", "a client event needs a string 'type'", param="type", event_id=event_id)
        handler = _DECODERS.get(kind)
        if handler is None:
            raise ProtocolError("unknown_event_type", f"unknown event type {excerpt(kind)}", param="type", event_id=event_id)
        try:
            cmd: Command = handler(self, msg, event_id)
            return cmd
        except ProtocolError as exc:
            if exc.event_id is None:
                exc.event_id = event_id
            raise

    def _session_update(self, msg: dict[str, Any], event_id: str | None) -> UpdateSession:
        sess = _obj(msg, "session", "session", required=True)
        changes: dict[str, Any] = {}
        kind = sess.get("type", self.settings.kind)
        if kind not in ("realtime", "transcription"):
            raise ProtocolError(
                "invalid_value", f"session.type {excerpt(kind)} is not supported (realtime or transcription)", param="session.type"
            )
        refused: list[ProtocolError] = []
        if kind == "realtime":
            refused = refusals(sess, "session", SESSION_FIELDS + VENDOR_SESSION_FIELDS) + _partial_refusals(sess, "session")
        if kind == "transcription":
            # The GA transcription session's fields only: what it has no use for is refused, not dropped.
            extra = sorted(set(sess) - {"type", "audio", "include", "object", "id"}) + (
                ["audio.output"] if isinstance(sess.get("audio"), dict) and "output" in sess["audio"] else []
            )
            if extra:
                raise ProtocolError("invalid_value", f"a transcription session has no {excerpt(extra[0])}", param=f"session.{extra[0]}")
            # Its fields go through the same table as a realtime session's: unknown or refused ones
            # (include) are errors, not silently accepted.
            refused = refusals({k: v for k, v in sess.items() if k not in ("object", "id")}, "session", SESSION_FIELDS)
            td = _obj(_obj(sess, "audio", "session.audio"), "input", "session.audio.input").get("turn_detection")
            if isinstance(td, dict) and td.get("idle_timeout_ms") is not None:
                refused.append(
                    ProtocolError(
                        "unsupported_value",
                        "idle_timeout_ms is for a conversation (it starts a response); a transcription session has none",
                        param="session.audio.input.turn_detection.idle_timeout_ms",
                    )
                )
        if kind != self.settings.kind:
            changes["kind"] = str(kind)
        if "instructions" in sess:
            changes["instructions"] = require_str(sess, "instructions", "session.instructions")
        if "max_output_tokens" in sess:
            changes["max_output_tokens"] = _max_tokens(sess["max_output_tokens"], "session.max_output_tokens")
        audio = _obj(sess, "audio", "session.audio")
        inp = _obj(audio, "input", "session.audio.input")
        out = _obj(audio, "output", "session.audio.output")
        # Formats are validated here but applied last: a rejected update must change nothing.
        in_format = _format(inp, "session.audio.input.format") if "format" in inp else None
        out_format = _format(out, "session.audio.output.format") if "format" in out else None
        transcription = _obj(inp, "transcription", "session.audio.input.transcription")
        changes.update(_transcription(transcription))
        if "turn_detection" in inp:
            changes["turn_detection"] = self._turn_detection(inp["turn_detection"])
        if "noise_reduction" in inp:
            changes["noise_reduction"] = _noise_reduction(inp["noise_reduction"])
        if "output_modalities" in sess:
            changes["audio"] = _modalities(sess["output_modalities"], "session.output_modalities")
        tools: tuple[Tool, ...] | None = None
        servers = self.settings.mcp_servers
        if "tools" in sess:
            found: list[McpServer] = []
            tools = _tools(sess["tools"], "session.tools", mcp=found)
            changes["tools"] = tools
            changes["mcp_servers"] = servers = tuple(found)
        if "tool_choice" in sess:
            changes["tool_choice"] = _tool_choice(
                sess["tool_choice"], tools if tools is not None else self.settings.tools, "session.tool_choice", servers
            )
        elif tools is not None and self.settings.tool_choice not in ("auto", "none", "required", *(t.name for t in tools)):
            changes["tool_choice"] = "auto"  # the named tool is gone
        changes.update(_vendor(_obj(sess, "voiceagent", "session.voiceagent")))
        if "tracing" in sess and kind == "realtime":
            changes["tracing"] = _tracing(sess["tracing"])
        changes.update(_voice(out))
        if in_format is not None and not self.audio.fixed:
            self.audio.set_input_format(in_format)
        if out_format is not None and not self.audio.fixed:
            self.audio.output_format = out_format
        return UpdateSession(changes, event_id, tuple(refused))

    def _turn_detection(self, td: Any) -> TurnDetection | None:
        if td is None:
            return None
        if not isinstance(td, dict):
            raise ProtocolError("invalid_value", "turn_detection must be an object or null", param="session.audio.input.turn_detection")
        kind = td.get("type", "server_vad")
        if kind not in ("server_vad", "semantic_vad"):
            raise ProtocolError(
                "invalid_value", f"unsupported turn_detection type {excerpt(kind)}", param="session.audio.input.turn_detection.type"
            )
        cur = self.settings.turn_detection or TurnDetection(0.5, 300, 500)
        # Each mode takes only its own fields (the GA types'): a server_vad field sent with
        # semantic_vad, or eagerness with server_vad, is refused rather than silently dropped.
        own = _SEMANTIC_FIELDS if kind == "semantic_vad" else _SERVER_FIELDS
        for key in td:
            if key not in own:
                raise ProtocolError(
                    "invalid_value",
                    f"{excerpt(key)} is not a field of {kind} turn detection",
                    param=f"session.audio.input.turn_detection.{key}",
                )
        threshold = td.get("threshold", cur.threshold)
        if not isinstance(threshold, int | float) or isinstance(threshold, bool) or not 0.0 < threshold < 1.0:
            raise ProtocolError("invalid_value", "threshold must be between 0 and 1", param="session.audio.input.turn_detection.threshold")
        ints: dict[str, int] = {}
        for key, default, low in (("prefix_padding_ms", cur.prefix_padding_ms, 0), ("silence_duration_ms", cur.silence_duration_ms, 100)):
            value = td.get(key, default)
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= 10_000:
                raise ProtocolError(
                    "invalid_value", f"{key} must be an integer {low}..10000", param=f"session.audio.input.turn_detection.{key}"
                )
            ints[key] = value
        bools: dict[str, bool] = {}
        for key, default_b in (("create_response", cur.create_response), ("interrupt_response", cur.interrupt_response)):
            value = td.get(key, default_b)
            if not isinstance(value, bool):
                raise ProtocolError("invalid_value", f"{key} must be a boolean", param=f"session.audio.input.turn_detection.{key}")
            bools[key] = value
        # A partial update of the same mode keeps the fields it does not name (as for the
        # others above); a change of mode starts from that mode's defaults.
        same = self.settings.turn_detection is not None and cur.type == kind
        eagerness = td.get("eagerness", cur.eagerness if same else "auto")
        if eagerness not in EAGERNESS_LEVELS:
            raise ProtocolError(
                "invalid_value",
                f"eagerness must be one of {', '.join(EAGERNESS_LEVELS)}",
                param="session.audio.input.turn_detection.eagerness",
            )
        idle = td.get("idle_timeout_ms", cur.idle_timeout_ms if same else None)  # an explicit null turns it off
        if idle is not None and (not isinstance(idle, int) or isinstance(idle, bool) or not 1_000 <= idle <= 300_000):
            raise ProtocolError(
                "invalid_value",
                "idle_timeout_ms must be an integer 1000..300000 or null",
                param="session.audio.input.turn_detection.idle_timeout_ms",
            )
        return TurnDetection(
            float(threshold),
            ints["prefix_padding_ms"],
            ints["silence_duration_ms"],
            bools["create_response"],
            bools["interrupt_response"],
            type=str(kind),
            eagerness=str(eagerness),
            idle_timeout_ms=idle,
        )

    def _append(self, msg: dict[str, Any], event_id: str | None) -> AppendAudio:
        data = require_str(msg, "audio", "audio")
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ProtocolError("invalid_base64", "audio is not valid base64", param="audio") from None
        if self.audio.input_format == "audio/pcm" and len(raw) % 2:
            raise ProtocolError(
                "invalid_audio_length", f"audio/pcm needs an even number of bytes (16-bit samples), got {len(raw)}", param="audio"
            )
        return AppendAudio(self.audio.to_session(raw), event_id)

    def _item_create(self, msg: dict[str, Any], event_id: str | None) -> CreateItem | CreateToolOutput:
        item = _obj(msg, "item", "item", required=True)
        previous = msg.get("previous_item_id")
        if previous is not None and not isinstance(previous, str):
            raise ProtocolError("invalid_value", "previous_item_id must be a string or null", param="previous_item_id")
        if item.get("type") == "function_call_output":
            call_id = require_str(item, "call_id", "item.call_id")
            output = require_str(item, "output", "item.output")
            return CreateToolOutput(call_id, output, event_id, previous)
        if item.get("type", "message") != "message":
            raise ProtocolError("unsupported_item_type", f"item type {excerpt(item.get('type'))} is not supported", param="item.type")
        role = item.get("role")
        if role not in ("user", "assistant", "system"):
            raise ProtocolError("invalid_value", "item.role must be user, assistant or system", param="item.role")
        return CreateItem(str(role), _text_parts(item.get("content"), "item.content"), event_id, previous)

    def _truncate(self, msg: dict[str, Any], event_id: str | None) -> TruncateItem:
        ms = _finite(msg.get("audio_end_ms"))
        if ms is None or ms < 0:
            raise ProtocolError("invalid_value", "audio_end_ms must be a non-negative number", param="audio_end_ms")
        return TruncateItem(require_str(msg, "item_id", "item_id"), ms, event_id)

    def _response_create(self, msg: dict[str, Any], event_id: str | None) -> CreateResponse:
        resp = _obj(msg, "response", "response")
        refused = refusals(resp, "response", RESPONSE_FIELDS) + _partial_refusals(resp, "response")
        if refused:
            raise refused[0]  # a response other than the one asked for would be worse than none
        instr = resp.get("instructions")
        if instr is not None and not isinstance(instr, str):
            raise ProtocolError("invalid_value", "response.instructions must be a string", param="response.instructions")
        tools = _tools(resp["tools"], "response.tools") if "tools" in resp else None
        choice = None
        if "tool_choice" in resp:
            choice = _tool_choice(
                resp["tool_choice"], tools if tools is not None else self.settings.tools, "response.tool_choice", self.settings.mcp_servers
            )
        audio = _modalities(resp["output_modalities"], "response.output_modalities") if "output_modalities" in resp else None
        conversation = resp.get("conversation", "auto")
        if conversation not in ("auto", "none", None):
            raise ProtocolError(
                "invalid_value",
                f"response.conversation {excerpt(conversation)} is not supported (auto or none)",
                param="response.conversation",
            )
        items = _input_items(resp["input"], "response.input") if resp.get("input") is not None else None
        mot = _max_tokens(resp["max_output_tokens"], "response.max_output_tokens") if resp.get("max_output_tokens") is not None else None
        options = ResponseOptions(
            instr,
            tools,
            choice,
            audio,
            out_of_band=conversation == "none",
            input=items,
            metadata=_metadata(resp.get("metadata"), "response.metadata"),
            max_tokens=mot,
        )
        return CreateResponse(options, event_id)

    def _response_cancel(self, msg: dict[str, Any], event_id: str | None) -> CancelResponse:
        rid = msg.get("response_id")
        if rid is not None and not isinstance(rid, str):
            # Not "no id" (which would cancel whatever response is active): a wrong id cancels nothing.
            raise ProtocolError("invalid_value", "response_id must be a string", param="response_id")
        return CancelResponse(rid, event_id)


def _partial_refusals(obj: dict[str, Any], where: str) -> list[ProtocolError]:
    """Values of partly supported fields this server cannot honour: ``parallel_tool_calls: false``
    and a ``truncation`` other than ``"auto"``."""
    errors = []
    if obj.get("parallel_tool_calls") is False:
        errors.append(
            ProtocolError(
                "unsupported_value",
                f"{where}.parallel_tool_calls false is not supported: a response may make several calls",
                param=f"{where}.parallel_tool_calls",
            )
        )
    if where == "session" and obj.get("truncation", "auto") not in ("auto", None):
        errors.append(
            ProtocolError(
                "unsupported_value",
                'session.truncation: only "auto" is supported (the oldest items leave to fit the LLM\'s window)',
                param="session.truncation",
            )
        )
    return errors


def _tools(value: Any, param: str, *, mcp: list[McpServer] | None = None) -> tuple[Tool, ...]:
    """A ``tools`` list: function tools (unique names, an object schema each), and where ``mcp``
    is given (the session's tools) ``mcp`` tools, collected there (unique labels)."""
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        raise ProtocolError("invalid_value", f"'{param}' must be a list of at most {MAX_TOOLS} tools", param=param)
    tools: list[Tool] = []
    for n, raw in enumerate(value):
        where = f"{param}[{n}]"
        if not isinstance(raw, dict):
            raise ProtocolError("invalid_value", f"'{where}' must be an object", param=where)
        if raw.get("type") == "mcp":
            if mcp is None:
                raise ProtocolError(
                    "unsupported_value", f"'{where}': mcp tools are set for the session (session.update), not per response", param=where
                )
            server = mcp_server(raw, where)
            if any(s.label == server.label for s in mcp):
                raise ProtocolError("invalid_value", f"server_label {excerpt(server.label)} is used twice", param=f"{where}.server_label")
            mcp.append(server)
            continue
        if raw.get("type", "function") != "function":
            raise ProtocolError(
                "invalid_value", f"'{where}.type' {excerpt(raw.get('type'))} is not supported (function or mcp)", param=where
            )
        inner = raw.get("function")
        fn: dict[str, Any] = inner if isinstance(inner, dict) else raw  # the Chat Completions shape too
        name = fn.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            raise ProtocolError("invalid_value", f"'{where}.name' must be 1-64 letters, digits, _ or -", param=f"{where}.name")
        if any(t.name == name for t in tools):
            raise ProtocolError("invalid_value", f"tool name {excerpt(name)} is used twice", param=f"{where}.name")
        desc = fn.get("description", "")
        if not isinstance(desc, str):
            raise ProtocolError("invalid_value", f"'{where}.description' must be a string", param=f"{where}.description")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict) or params.get("type", "object") != "object":
            raise ProtocolError("invalid_value", f"'{where}.parameters' must be a JSON Schema of an object", param=f"{where}.parameters")
        if len(json.dumps(params)) > 16_000:
            raise ProtocolError("invalid_value", f"'{where}.parameters' is too large", param=f"{where}.parameters")
        tools.append(Tool(name, desc, params))
    return tuple(tools)


def _max_tokens(value: Any, param: str) -> int:
    """``max_output_tokens``: 1..4096, or ``"inf"`` (4096)."""
    if value == "inf":
        value = 4096
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 4096:
        raise ProtocolError("invalid_value", "max_output_tokens must be an integer 1..4096 or 'inf'", param=param)
    return value


_METADATA_KEYS = 16


def _metadata(value: Any, param: str) -> dict[str, str] | None:
    """``metadata``: at most 16 string pairs, keys up to 64 characters, values up to 512 (OpenAI's
    limits); null is none."""
    if value is None:
        return None
    if (
        not isinstance(value, dict)
        or len(value) > _METADATA_KEYS
        or not all(isinstance(k, str) and len(k) <= 64 and isinstance(v, str) and len(v) <= 512 for k, v in value.items())
    ):
        raise ProtocolError(
            "invalid_value", "metadata must be at most 16 string pairs (keys up to 64 characters, values up to 512)", param=param
        )
    return dict(value)


def _text_parts(content: Any, param: str) -> str:
    """The text of a message item's ``content``: text parts only, joined by spaces."""
    if not isinstance(content, list) or not content:
        raise ProtocolError("invalid_value", f"'{param}' must be a non-empty list", param=param)
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("input_text", "text", "output_text") or not isinstance(part.get("text"), str):
            raise ProtocolError("invalid_value", "only text content parts are supported", param=param)
        texts.append(part["text"])
    return " ".join(texts)


def _input_items(value: Any, param: str) -> tuple[InputItem, ...]:
    """``response.input``: messages (user, assistant or system text) and ``item_reference``s."""
    if not isinstance(value, list) or len(value) > 256:
        raise ProtocolError("invalid_value", f"'{param}' must be a list of at most 256 items", param=param)
    items: list[InputItem] = []
    for n, raw in enumerate(value):
        where = f"{param}[{n}]"
        if not isinstance(raw, dict):
            raise ProtocolError("invalid_value", f"'{where}' must be an object", param=where)
        kind = raw.get("type", "message")
        if kind == "item_reference":
            items.append(InputItem(ref=require_str(raw, "id", f"{where}.id")))
            continue
        if kind != "message":
            raise ProtocolError(
                "unsupported_item_type", f"'{where}.type' {excerpt(kind)} is not supported (message or item_reference)", param=where
            )
        role = raw.get("role")
        if role not in ("user", "assistant", "system"):
            raise ProtocolError("invalid_value", f"'{where}.role' must be user, assistant or system", param=f"{where}.role")
        items.append(InputItem(str(role), _text_parts(raw.get("content"), f"{where}.content")))
    return tuple(items)


def _modalities(value: Any, param: str) -> bool:
    """``output_modalities``: True for ["audio"] (speech and its transcript), False for ["text"]."""
    if not isinstance(value, list) or not value or not all(m in ("audio", "text") for m in value):
        raise ProtocolError("invalid_value", 'output_modalities must be ["audio"] or ["text"]', param=param)
    return "audio" in value


def _tool_choice(value: Any, tools: tuple[Tool, ...], param: str, servers: tuple[McpServer, ...] = ()) -> str:
    if value in ("auto", "none", "required"):
        return str(value)
    if isinstance(value, dict) and value.get("type") == "mcp":
        # An MCP tool is known once its server is listed: the name is checked when a prompt is
        # made (a name not offered then counts as "auto").
        label, name = value.get("server_label"), value.get("name")
        if all(s.label != label for s in servers):
            raise ProtocolError(
                "invalid_value", f"tool_choice names MCP server {excerpt(label)}, which is not among the tools", param=param
            )
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            raise ProtocolError("invalid_value", "an mcp tool_choice needs the tool's 'name'", param=f"{param}.name")
        return name
    name = value.get("name") if isinstance(value, dict) and value.get("type") == "function" else None
    if isinstance(value, dict) and isinstance(value.get("function"), dict):
        name = value["function"].get("name")  # the Chat Completions shape
    if not isinstance(name, str):
        raise ProtocolError("invalid_value", "tool_choice must be auto, none, required or {'type': 'function', 'name': ...}", param=param)
    if all(t.name != name for t in tools):
        raise ProtocolError("invalid_value", f"tool_choice names {excerpt(name)}, which is not among the tools", param=param)
    return name


def _finite(value: Any) -> float | None:
    """``value`` as a finite float; None for a non-number, a bool, NaN, ±Infinity (JSON as Python
    reads it) or an integer too large for a float."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _vendor(vendor: dict[str, Any]) -> dict[str, Any]:
    """The changes of this server's own fields (``session.voiceagent``; unknown ones are refused
    by the support table).  ``semantic_cache`` is checked against the server's cache by the session."""
    if "semantic_cache" not in vendor:
        return {}
    if not isinstance(vendor["semantic_cache"], bool):
        raise ProtocolError("invalid_value", "semantic_cache must be true or false", param="session.voiceagent.semantic_cache")
    return {"semantic_cache": vendor["semantic_cache"]}


def _voice(out: dict[str, Any]) -> dict[str, Any]:
    """Session changes from ``audio.output``: ``voice`` (a name, checked against the voice table
    and OpenAI's names by the session) and ``speed``."""
    changes: dict[str, Any] = {}
    if "voice" in out:
        voice = require_str(out, "voice", "session.audio.output.voice")
        if not voice.strip() or len(voice) > 64:
            raise ProtocolError(
                "invalid_value", "voice must be a non-empty name of at most 64 characters", param="session.audio.output.voice"
            )
        changes["voice"] = voice
    if "speed" in out:
        speed = out["speed"]
        if not isinstance(speed, int | float) or isinstance(speed, bool) or not 0.25 <= speed <= 4.0:
            raise ProtocolError("invalid_value", "speed must be a number 0.25..4", param="session.audio.output.speed")
        changes["speed"] = float(speed)
    return changes


_TRACING_TEXT = 512
_TRACING_KEYS = 16
_TRACING_KEY = 64


def _tracing(value: Any) -> Tracing | None:
    """``session.tracing``: null (off), ``"auto"``, or ``{workflow_name, group_id, metadata}``
    (names: strings; metadata: at most 16 keys of at most 64 characters, OpenAI's limits, each
    value kept as a string, a non-string as its JSON).  Anything else is ``invalid_value``."""
    param = "session.tracing"
    if value is None:
        return None
    if value == "auto":
        return Tracing()
    if not isinstance(value, dict):
        raise ProtocolError("invalid_value", 'tracing must be "auto", an object or null', param=param)
    unknown = sorted(set(value) - {"workflow_name", "group_id", "metadata"})
    if unknown:
        raise ProtocolError("unknown_parameter", f"unknown parameter {excerpt(f'{param}.{unknown[0]}')}", param=f"{param}.{unknown[0]}")
    names: dict[str, str | None] = {}
    for key in ("workflow_name", "group_id"):
        text = value.get(key)
        if text is not None and (not isinstance(text, str) or len(text) > _TRACING_TEXT):
            raise ProtocolError("invalid_value", f"{key} must be a string of at most {_TRACING_TEXT} characters", param=f"{param}.{key}")
        names[key] = text
    metadata = value.get("metadata") or {}
    if not isinstance(metadata, dict) or len(metadata) > _TRACING_KEYS:
        raise ProtocolError("invalid_value", f"metadata must be an object of at most {_TRACING_KEYS} keys", param=f"{param}.metadata")
    pairs: list[tuple[str, str]] = []
    for key, item in metadata.items():
        # A value that is not a string is kept as its JSON text (an attribute is a string).
        text = item if isinstance(item, str) else json.dumps(item)
        if len(key) > _TRACING_KEY or len(text) > _TRACING_TEXT:
            raise ProtocolError(
                "invalid_value",
                f"metadata keys are at most {_TRACING_KEY} characters and values at most {_TRACING_TEXT}",
                param=f"{param}.metadata",
            )
        pairs.append((key, text))
    return Tracing(auto=False, workflow_name=names["workflow_name"], group_id=names["group_id"], metadata=tuple(pairs))


def _noise_reduction(value: Any) -> str | None:
    """``audio.input.noise_reduction``: null (off) or ``{"type": "near_field" | "far_field"}``."""
    param = "session.audio.input.noise_reduction"
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ProtocolError("invalid_value", "noise_reduction must be an object or null", param=param)
    extra = sorted(set(value) - {"type"})
    if extra:
        raise ProtocolError("unknown_parameter", f"noise_reduction has no field {excerpt(extra[0])}", param=f"{param}.{extra[0]}")
    kind = value.get("type")
    if kind not in NOISE_REDUCTION_TYPES:
        raise ProtocolError(
            "invalid_value", f"noise_reduction.type must be one of {', '.join(NOISE_REDUCTION_TYPES)}", param=f"{param}.type"
        )
    return str(kind)


def _transcription(transcription: dict[str, Any]) -> dict[str, Any]:
    """Session changes from ``audio.input.transcription``: ``language`` and ``prompt`` (null or
    "" clears it)."""
    changes: dict[str, Any] = {}
    lang = transcription.get("language")
    if lang is not None:
        if not isinstance(lang, str) or not 2 <= len(lang) <= 3:
            raise ProtocolError(
                "invalid_value",
                "transcription.language must be an ISO-639-1 code",
                param="session.audio.input.transcription.language",
            )
        changes["language"] = lang
    if "prompt" in transcription:
        prompt = transcription["prompt"]
        if prompt is None:
            prompt = ""
        if not isinstance(prompt, str) or len(prompt) > MAX_TRANSCRIPTION_PROMPT:
            raise ProtocolError(
                "invalid_value",
                f"transcription.prompt must be a string of at most {MAX_TRANSCRIPTION_PROMPT} characters (or null)",
                param="session.audio.input.transcription.prompt",
            )
        changes["transcription_prompt"] = prompt
    return changes


def _obj(msg: dict[str, Any], key: str, param: str, *, required: bool = False) -> dict[str, Any]:
    value = msg.get(key)
    if value is None:
        if required:
            raise ProtocolError("missing_field", f"'{param}' is required", param=param)
        return {}
    if not isinstance(value, dict):
        raise ProtocolError("invalid_value", f"'{param}' must be an object", param=param)
    return value


def _format(obj: dict[str, Any], param: str) -> str:
    fmt = obj.get("format")
    kind = fmt.get("type") if isinstance(fmt, dict) else fmt
    if kind == "pcm16":  # beta name
        kind = "audio/pcm"
    kind = {"g711_ulaw": "audio/pcmu", "g711_alaw": "audio/pcma"}.get(kind, kind) if isinstance(kind, str) else kind
    if not isinstance(kind, str) or kind not in FORMATS:  # a list or object is not a format (nor hashable)
        raise ProtocolError(
            "unsupported_format",
            f"audio format {excerpt(kind)} is not supported (audio/pcm at {WIRE_RATE} Hz, audio/pcmu or audio/pcma)",
            param=param,
        )
    if kind == "audio/pcm" and isinstance(fmt, dict) and fmt.get("rate", WIRE_RATE) != WIRE_RATE:
        raise ProtocolError("unsupported_format", f"audio/pcm is {WIRE_RATE} Hz in this protocol", param=f"{param}.rate")
    return str(kind)


_DECODERS: dict[str, Any] = {
    "session.update": CommandDecoder._session_update,
    "input_audio_buffer.append": CommandDecoder._append,
    "input_audio_buffer.commit": lambda self, msg, eid: CommitInput(eid),
    "input_audio_buffer.clear": lambda self, msg, eid: ClearInput(eid),
    "output_audio_buffer.clear": lambda self, msg, eid: ClearOutput(eid),
    "conversation.item.create": CommandDecoder._item_create,
    "conversation.item.truncate": CommandDecoder._truncate,
    "conversation.item.delete": lambda self, msg, eid: DeleteItem(require_str(msg, "item_id", "item_id"), eid),
    "conversation.item.retrieve": lambda self, msg, eid: RetrieveItem(require_str(msg, "item_id", "item_id"), eid),
    "response.create": CommandDecoder._response_create,
    "response.cancel": CommandDecoder._response_cancel,
}
