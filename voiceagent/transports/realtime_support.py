"""What this server does with each part of the OpenAI Realtime protocol (GA): the one table.

Every GA client event, server event, ``session`` field and ``response.create`` field has one row:
``supported``, ``partial`` (the note says what is missing) or ``refused`` (a client event or a
field with a value: an ``error`` event; a server event: never sent).  docs/protocol.md holds the
table :func:`markdown` renders (tests/unit/test_realtime_support.py checks it is the same, and
that the rows cover every name the installed ``openai`` package declares).

The decoder uses the field rows (:func:`refusals`): a field this server does not know is
``unknown_parameter``, a refused field given a value (anything but null) is
``unsupported_field``; partial fields are checked where they are decoded
(:mod:`.realtime_commands`).  One row per line, so a feature that lands changes one line.

Pure data and pure functions: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from voiceagent.errors import ProtocolError, excerpt

__all__ = [
    "CLIENT_EVENTS",
    "RESPONSE_FIELDS",
    "SERVER_EVENTS",
    "SESSION_FIELDS",
    "VENDOR_SESSION_FIELDS",
    "Status",
    "Support",
    "markdown",
    "refusals",
    "table_lines",
]


class Status(StrEnum):
    SUPPORTED = "supported"
    PARTIAL = "partial"
    REFUSED = "refused"


S, P, R = Status.SUPPORTED, Status.PARTIAL, Status.REFUSED


@dataclass(frozen=True)
class Support:
    name: str
    status: Status
    note: str = ""


CLIENT_EVENTS: tuple[Support, ...] = (
    Support("session.update", P, "field by field: see the session fields below"),
    Support("input_audio_buffer.append", S, "faster than real time past `server.audio_burst_s` is refused"),
    Support("input_audio_buffer.commit", S, "with `turn_detection: null`"),
    Support("input_audio_buffer.clear", S),
    Support("output_audio_buffer.clear", S, "a barge-in without speech: the reply stops, the history keeps what was heard"),
    Support(
        "conversation.item.create",
        P,
        "`message` (text parts; `previous_item_id` places it, `root` first), `function_call_output` (at the end only)",
    ),
    Support("conversation.item.truncate", S, "an item still being paced out stops at once (its response ends `cancelled`)"),
    Support("conversation.item.delete", S),
    Support("conversation.item.retrieve", S),
    Support("response.create", P, "field by field: see the response fields below"),
    Support("response.cancel", S),
)
"""Every GA client event.  Any other type is ``unknown_event_type``."""

SERVER_EVENTS: tuple[Support, ...] = (
    Support("session.created", S),
    Support("session.updated", S, "the session as it really runs"),
    Support("error", S, "a stable `code`, the offending `param`, the client's `event_id`"),
    Support("conversation.created", R, "a conversation is implicit in the session"),
    Support("conversation.item.created", R, "beta name: `conversation.item.added` / `.done` are sent"),
    Support("conversation.item.added", S),
    Support("conversation.item.done", S),
    Support("conversation.item.deleted", S, "also when the history limit drops items"),
    Support("conversation.item.retrieved", S),
    Support("conversation.item.truncated", S),
    Support("conversation.item.input_audio_transcription.delta", S),
    Support("conversation.item.input_audio_transcription.completed", S, "`usage`: the seconds of audio transcribed"),
    Support("conversation.item.input_audio_transcription.failed", S, "the STT failed on that item's speech"),
    Support("conversation.item.input_audio_transcription.segment", R),
    Support("input_audio_buffer.committed", S),
    Support("input_audio_buffer.cleared", S),
    Support(
        "input_audio_buffer.speech_started",
        S,
        "speech over an audible reply is told once its words make it an interruption (a backchannel: never; docs/pipeline.md)",
    ),
    Support("input_audio_buffer.speech_stopped", S),
    Support(
        "input_audio_buffer.timeout_triggered",
        S,
        "`server_vad`'s `idle_timeout_ms` of silence after the last reply played (or after the update, before any); a response follows",
    ),
    Support("input_audio_buffer.dtmf_event_received", R, "SIP only"),
    Support("output_audio_buffer.started", S, "before a response's first audio"),
    Support("output_audio_buffer.stopped", P, "when the server has sent a response's last audio, not when the client has played it"),
    Support("output_audio_buffer.cleared", S, "barge-in, `response.cancel` while audible, `output_audio_buffer.clear`"),
    Support("rate_limits.updated", P, "after each response: one response at a time, `max_output_tokens` a response; no quota"),
    Support("response.created", S),
    Support("response.done", P, "`usage` is null"),
    Support("response.output_item.added", S),
    Support("response.output_item.done", S),
    Support("response.content_part.added", S),
    Support("response.content_part.done", S),
    Support("response.output_audio.delta", S),
    Support("response.output_audio.done", S),
    Support("response.output_audio_transcript.delta", S, "one delta a clause, as its audio starts"),
    Support("response.output_audio_transcript.done", S),
    Support("response.output_text.delta", S),
    Support("response.output_text.done", S),
    Support("response.function_call_arguments.delta", S, "the arguments in one delta, once checked"),
    Support("response.function_call_arguments.done", S),
    Support("mcp_list_tools.in_progress", S),
    Support("mcp_list_tools.completed", S),
    Support("mcp_list_tools.failed", S),
    Support("response.mcp_call_arguments.delta", S),
    Support("response.mcp_call_arguments.done", S),
    Support("response.mcp_call.in_progress", S),
    Support("response.mcp_call.completed", S),
    Support("response.mcp_call.failed", S),
)
"""Every GA server event (refused: never sent).  ``voiceagent.turn_metrics`` is this server's own,
sent only on opt-in (``?voiceagent_metrics=1``)."""

SESSION_FIELDS: tuple[Support, ...] = (
    Support("type", S, '`"realtime"`, or `"transcription"` (VAD and STT only; not while a response is active)'),
    Support("model", P, "accepted; the server runs its configured models (`session.updated` says `voiceagent`)"),
    Support("instructions", S),
    Support("output_modalities", S, '`["audio"]` or `["text"]`'),
    Support("max_output_tokens", S, "1..4096 or `inf` (4096)"),
    Support("tools", P, '`function` and `mcp` tools (`require_approval: "never"` only; no connectors)'),
    Support("tool_choice", S, "`auto`, `none`, `required` or a function"),
    Support("parallel_tool_calls", P, "`true` (a response may make several calls); `false` is refused"),
    Support("truncation", P, '`"auto"`: the oldest items leave to fit the LLM\'s window; others are refused'),
    Support("audio.input.format", S, "`audio/pcm` (24 kHz), `audio/pcmu`, `audio/pcma`"),
    Support("audio.input.transcription", P, "`language` and `prompt`; `model` is shown as `whisper`"),
    Support(
        "audio.input.turn_detection", S, "`server_vad` (all its fields), `semantic_vad` with `eagerness` (its own endpointing a level)"
    ),
    Support(
        "audio.input.noise_reduction",
        P,
        "`near_field` or `far_field`: both run WebRTC's noise suppressor (one strength), before the VAD and the transcriber; "
        "null turns it off (the default, `vad.noise_reduction`)",
    ),
    Support("audio.output.format", S, "`audio/pcm` (24 kHz), `audio/pcmu`, `audio/pcma`"),
    Support(
        "audio.output.voice",
        S,
        "a name of the `tts.voices` table, or an OpenAI voice name (`ash`, `marin`…: the voice `tts.openai_voices` maps it to, "
        "by default the default voice); `session.updated` names the voice spoken; unknown: an error listing them; "
        "no change once the session spoke",
    ),
    Support("audio.output.speed", S, "0.25..4"),
    Support("include", R),
    Support("prompt", R, "stored prompts live at OpenAI"),
    Support("reasoning", R),
    Support(
        "tracing",
        S,
        '`"auto"` or `{workflow_name, group_id, metadata}`: attributes of the turns\' OpenTelemetry spans and JSON log lines; '
        "nothing is sent anywhere because of it",
    ),
)
"""Every field of the GA ``session`` object a client sends (dotted below ``audio``)."""

VENDOR_SESSION_FIELDS: tuple[Support, ...] = (
    Support(
        "voiceagent.semantic_cache",
        S,
        "`true`/`false`: this session's first questions use the semantic reply cache; default the server's "
        "`cache.semantic`, `true` refused where that is off",
    ),
)
"""This server's own ``session`` fields, under the ``voiceagent`` object (the official SDK passes
an object it does not know through as it is)."""

RESPONSE_FIELDS: tuple[Support, ...] = (
    Support("instructions", S, "this response only"),
    Support("output_modalities", S, "this response only"),
    Support("tools", P, "this response only; `function` tools (`mcp` tools are the session's)"),
    Support("tool_choice", S, "this response only"),
    Support("parallel_tool_calls", P, "`true`; `false` is refused"),
    Support("conversation", S, '`"auto"`, or `"none"`: out-of-band, the conversation untouched'),
    Support("input", S, "messages and `item_reference`s read instead of the conversation"),
    Support("metadata", S, "back on `response.created` and `response.done`"),
    Support("max_output_tokens", S, "this response only"),
    Support("audio.output.format", R, "the session's applies"),
    Support("audio.output.voice", R, "the session's applies"),
    Support("prompt", R),
    Support("reasoning", R),
)
"""Every field of ``response.create``'s ``response``.  A refused field given a value refuses the
whole ``response.create`` (no response starts that would not be what was asked)."""

_CONTAINERS = frozenset({"audio", "audio.input", "audio.output"})
_VENDOR = "voiceagent."


def refusals(obj: dict[str, Any], where: str, rows: tuple[Support, ...], containers: frozenset[str] = _CONTAINERS) -> list[ProtocolError]:
    """The errors ``obj`` (a ``session`` or a ``response``, named ``where``) earns by its fields:
    ``unknown_parameter`` for a field not in ``rows``, ``unsupported_field`` for a refused one
    with a value other than null.  Nested objects (``containers``: Realtime's ``audio``,
    ``audio.input``, ``audio.output``) are walked; what is not an object there is left to the
    decoder."""
    table = {row.name: row for row in rows}
    # This server's own objects are walked only where the table has rows under them (the session's).
    containers = containers | {name.split(".")[0] for name in table if name.startswith(_VENDOR)}
    errors: list[ProtocolError] = []

    def walk(node: dict[str, Any], prefix: str) -> None:
        for key, value in node.items():
            name = f"{prefix}{key}"
            param = f"{where}.{name}"
            if name in containers:
                if isinstance(value, dict):
                    walk(value, f"{name}.")
                continue
            row = table.get(name)
            if row is None:
                errors.append(ProtocolError("unknown_parameter", f"unknown parameter {excerpt(param)}", param=param))
            elif row.status is Status.REFUSED and value is not None:
                why = f" ({row.note})" if row.note else ""
                errors.append(ProtocolError("unsupported_field", f"{param} is not supported by this server{why}", param=param))

    walk(obj, "")
    return errors


def table_lines(title: str, rows: tuple[Support, ...]) -> list[str]:
    lines = [f"| {title} | status | notes |", "|---|---|---|"]
    lines += [f"| `{row.name}` | {row.status.value} | {row.note} |" for row in rows]
    return lines


def markdown() -> str:
    """The five tables as docs/protocol.md shows them."""
    parts = [
        table_lines("client event", CLIENT_EVENTS),
        table_lines("server event", SERVER_EVENTS),
        table_lines("`session` field (`session.update`)", SESSION_FIELDS),
        table_lines("`session.voiceagent` field (this server's own)", VENDOR_SESSION_FIELDS),
        table_lines("`response` field (`response.create`)", RESPONSE_FIELDS),
    ]
    return "\n\n".join("\n".join(p) for p in parts) + "\n"
