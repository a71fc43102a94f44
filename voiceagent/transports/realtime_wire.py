"""The OpenAI Realtime wire (GA), both ways: event names, message and item shapes, audio payloads.

Pure: no sockets, no event loop.  The server's codec (:mod:`.realtime_codec`) builds its messages
and items with it, and so does the project's one client (:mod:`voiceagent.client`: ``talk --url``,
``replay``, the integration tests and the fuzzer), so both sides speak one definition of the
protocol, and the wire rate lives here only.

Audio on this wire is base64 of little-endian 16-bit mono PCM at 24 kHz (``audio/pcm``), or of
8 kHz G.711 bytes: μ-law (``audio/pcmu``) or A-law (``audio/pcma``).
"""

from __future__ import annotations

import base64
from typing import Any

from voiceagent.audio import Int16Array
from voiceagent.conversation.history import AssistantItem, FunctionCallItem, FunctionCallOutputItem, Item, McpCallItem, UserItem, new_id
from voiceagent.events import CallSummary
from voiceagent.tools.spec import Tool

__all__ = [
    "AUDIO_DELTA",
    "FORMATS",
    "TRANSCRIPT_DELTA",
    "WIRE_RATE",
    "b64_pcm16",
    "call_object",
    "format_object",
    "item_object",
    "mcp_call_object",
    "message",
    "output_object",
    "tool_object",
]

WIRE_RATE = 24000
"""The rate of ``audio/pcm`` in this protocol."""
FORMATS = {"audio/pcm": WIRE_RATE, "audio/pcmu": 8000, "audio/pcma": 8000}
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


def mcp_call_object(
    item_id: str, server_label: str, name: str, arguments: str, output: str | None = None, error: dict[str, object] | None = None
) -> dict[str, Any]:
    """An ``mcp_call`` item."""
    return {
        "id": item_id,
        "type": "mcp_call",
        "server_label": server_label,
        "name": name,
        "arguments": arguments,
        "output": output,
        "error": error,
    }


def item_object(item: Item) -> dict[str, Any]:
    """A history item as a Realtime ``item`` object."""
    if isinstance(item, McpCallItem):
        return mcp_call_object(item.id, item.server_label, item.name, item.arguments, item.output, item.error)
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
