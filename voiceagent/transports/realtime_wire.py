"""The OpenAI Realtime wire (GA), both ways: event names, message and item shapes, audio payloads.

Pure: no sockets, no event loop.  The server's codec builds its messages and items with it, and
the project's clients (``talk --url``, ``replay``, the integration tests' client) build theirs
and read the server's with it, so both sides of the project speak one definition of the protocol.

Audio on this wire is base64 of little-endian 16-bit mono PCM at 24 kHz (``audio/pcm``), or of
8 kHz μ-law bytes (``audio/pcmu``).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from voiceagent.audio import Int16Array, pcm16_from_bytes
from voiceagent.conversation.history import AssistantItem, FunctionCallItem, FunctionCallOutputItem, Item, UserItem, new_id
from voiceagent.events import CallSummary
from voiceagent.tools.spec import Tool

__all__ = [
    "AUDIO_DELTA",
    "FORMATS",
    "TRANSCRIPT_DELTA",
    "WIRE_RATE",
    "ResponseSummary",
    "append_audio",
    "audio_delta",
    "b64_pcm16",
    "call_object",
    "format_object",
    "item_object",
    "message",
    "output_object",
    "response_done",
    "session_update",
    "tool_object",
    "tool_output",
    "truncate",
]

WIRE_RATE = 24000
"""The rate of ``audio/pcm`` in this protocol."""
FORMATS = {"audio/pcm": WIRE_RATE, "audio/pcmu": 8000}
"""Audio formats and their sample rates."""

AUDIO_DELTA = ("response.output_audio.delta", "response.audio.delta")
"""A chunk of a response's audio: the GA name first (what the server sends), then the beta one."""
TRANSCRIPT_DELTA = ("response.output_audio_transcript.delta", "response.audio_transcript.delta")
"""A piece of a spoken response's transcript: GA name, then beta."""


def message(kind: str, **fields: Any) -> dict[str, Any]:
    """One event of type ``kind`` with a fresh ``event_id`` (unless ``fields`` gives one)."""
    return {"type": kind, "event_id": new_id("event"), **fields}


def b64_pcm16(pcm: Int16Array) -> str:
    """16-bit samples as the wire's base64 little-endian payload."""
    return base64.b64encode(pcm.astype("<i2").tobytes()).decode("ascii")


def format_object(kind: str) -> dict[str, Any]:
    """The ``format`` object of an audio format name (``audio/pcm`` carries its rate)."""
    return {"type": kind, "rate": FORMATS[kind]} if kind == "audio/pcm" else {"type": kind}


# --------------------------------------------------------------------------- items


def call_object(call: CallSummary, status: str) -> dict[str, Any]:
    """A ``function_call`` item."""
    return {
        "id": call.item_id,
        "object": "realtime.item",
        "type": "function_call",
        "status": status,
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments,
    }


def output_object(item_id: str, call_id: str, output: str) -> dict[str, Any]:
    """A ``function_call_output`` item."""
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "function_call_output",
        "call_id": call_id,
        "output": output,
        "status": "completed",
    }


def item_object(item: Item) -> dict[str, Any]:
    """A history item as a Realtime ``item`` object."""
    if isinstance(item, FunctionCallItem):
        return call_object(CallSummary(item.id, item.call_id, item.name, item.arguments), "completed")
    if isinstance(item, FunctionCallOutputItem):
        return output_object(item.id, item.call_id, item.output)
    part: dict[str, Any]
    if isinstance(item, UserItem):
        part = {"type": "input_text", "text": item.text, "transcript": item.text}
    else:
        assert isinstance(item, AssistantItem)
        part = {"type": "output_audio", "transcript": item.text, "text": item.text}
    return {"id": item.id, "object": "realtime.item", "type": "message", "role": item.role, "status": "completed", "content": [part]}


def tool_object(tool: Tool) -> dict[str, Any]:
    """A function tool as ``session.tools`` lists it."""
    return {"type": "function", "name": tool.name, "description": tool.description, "parameters": dict(tool.parameters)}


# --------------------------------------------------------------------------- client → server


def session_update(*, input_format: str = "audio/pcm", output_format: str | None = "audio/pcm", **session: Any) -> dict[str, Any]:
    """``session.update`` setting the audio formats (None: left as they are) and any other
    ``session`` fields given (``instructions``, ``tools``, ``tool_choice``, ``output_modalities``)."""
    audio: dict[str, Any] = {"input": {"format": format_object(input_format)}}
    if output_format is not None:
        audio["output"] = {"format": format_object(output_format)}
    return message("session.update", session={"type": "realtime", "audio": audio, **session})


def append_audio(pcm: Int16Array) -> dict[str, Any]:
    """``input_audio_buffer.append`` of 24 kHz 16-bit samples."""
    return message("input_audio_buffer.append", audio=b64_pcm16(pcm))


def truncate(item_id: str, audio_end_ms: float) -> dict[str, Any]:
    """``conversation.item.truncate``: the listener heard ``audio_end_ms`` of item ``item_id``."""
    return message("conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=int(audio_end_ms))


def tool_output(call_id: str, output: str) -> dict[str, Any]:
    """``conversation.item.create`` of the ``function_call_output`` item for call ``call_id``."""
    return message("conversation.item.create", item={"type": "function_call_output", "call_id": call_id, "output": output})


# --------------------------------------------------------------------------- server → client


def audio_delta(msg: dict[str, Any]) -> Int16Array | None:
    """The samples of a response audio delta (``audio/pcm``); None for any other event."""
    if msg.get("type") not in AUDIO_DELTA:
        return None
    return pcm16_from_bytes(base64.b64decode(msg["delta"]))


@dataclass(frozen=True, slots=True)
class ResponseSummary:
    """What a client reads off ``response.done``: the response, its status and its spoken message."""

    response_id: str
    status: str
    item_id: str
    """The message item's id ('' when the response has no message)."""
    transcript: str
    """What was said (or written, for a text-only response)."""


def response_done(msg: dict[str, Any]) -> ResponseSummary | None:
    """The summary of a ``response.done`` event; None for any other event."""
    if msg.get("type") != "response.done":
        return None
    resp = msg["response"]
    message_item: dict[str, Any] = next((o for o in resp.get("output") or [] if o.get("type", "message") == "message"), {})
    part = (message_item.get("content") or [{}])[0]
    text = part.get("transcript") or part.get("text") or ""
    return ResponseSummary(resp["id"], resp.get("status", ""), message_item.get("id", ""), text)
