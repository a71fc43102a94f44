"""Server → client: the session's settings mirrored as the Realtime ``session`` object.

What ``session.created`` and ``session.updated`` carry: the settings the session runs with now
(instructions, tools, modalities, turn detection, voice) and the connection's audio formats.
Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from voiceagent.settings import SessionSettings, Tracing, TurnDetection
from voiceagent.transports.realtime_audio import WireAudio
from voiceagent.transports.realtime_mcp import mcp_tool_object
from voiceagent.transports.realtime_wire import format_object, tool_object

__all__ = ["session_object", "tracing_object", "turn_detection_object"]


def turn_detection_object(td: TurnDetection | None) -> dict[str, Any] | None:
    """``turn_detection`` as the session runs it: each mode with its own fields (the GA types')."""
    if td is None:
        return None
    common = {"type": td.type, "create_response": td.create_response, "interrupt_response": td.interrupt_response}
    if td.type == "semantic_vad":
        return {**common, "eagerness": td.eagerness}
    return {
        **common,
        "threshold": td.threshold,
        "prefix_padding_ms": td.prefix_padding_ms,
        "silence_duration_ms": td.silence_duration_ms,
        "idle_timeout_ms": td.idle_timeout_ms,
    }


def session_object(settings: SessionSettings, audio: WireAudio, session_id: str = "") -> dict[str, Any]:
    """The ``session`` object of ``settings`` on a connection with ``audio``'s formats."""
    s = settings
    td = turn_detection_object(s.turn_detection)
    transcription = {"model": "whisper", "language": s.language, "prompt": s.transcription_prompt}
    noise = None if s.noise_reduction is None else {"type": s.noise_reduction}
    if s.kind == "transcription":
        return {
            "type": "transcription",
            "id": session_id,
            "audio": {
                "input": {
                    "format": format_object(audio.input_format),
                    "transcription": transcription,
                    "turn_detection": td,
                    "noise_reduction": noise,
                }
            },
            "include": None,
        }
    return {
        "type": "realtime",
        "object": "realtime.session",
        "id": session_id,
        "model": "voiceagent",
        "output_modalities": ["audio"] if s.audio else ["text"],
        "instructions": s.instructions,
        "max_output_tokens": s.max_output_tokens,
        "tools": [*(tool_object(t) for t in s.tools), *(mcp_tool_object(m) for m in s.mcp_servers)],
        "tool_choice": _choice(s),
        "audio": {
            "input": {
                "format": format_object(audio.input_format),
                "transcription": transcription,
                "turn_detection": td,
                "noise_reduction": noise,
            },
            "output": {"format": format_object(audio.output_format), "voice": s.voice, "speed": s.speed},
        },
        "tracing": tracing_object(s.tracing),
        "voiceagent": {"semantic_cache": s.semantic_cache},
    }


def tracing_object(tracing: Tracing | None) -> str | dict[str, Any] | None:
    """``tracing`` as the client set it: null, ``"auto"`` or the configuration object."""
    if tracing is None:
        return None
    if tracing.auto:
        return "auto"
    return {"workflow_name": tracing.workflow_name, "group_id": tracing.group_id, "metadata": dict(tracing.metadata)}


def _choice(s: SessionSettings) -> str | dict[str, Any]:
    """``tool_choice``: a mode, a function tool, or else (a name no function has) an MCP tool,
    shown as the first MCP server's: the settings keep the name only."""
    if s.tool_choice in ("auto", "none", "required"):
        return s.tool_choice
    if s.mcp_servers and all(t.name != s.tool_choice for t in s.tools):
        return {"type": "mcp", "server_label": s.mcp_servers[0].label, "name": s.tool_choice}
    return {"type": "function", "name": s.tool_choice}
