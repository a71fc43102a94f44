"""Per-session settings: what a client may change with ``session.update``.

Frozen; an update builds a new object from the old one (``dataclasses.replace``), so a stage
that read the settings at the start of a turn sees one consistent view.
"""

from __future__ import annotations

from dataclasses import dataclass

from voiceagent.config import Config
from voiceagent.tools.mcp import McpServer
from voiceagent.tools.spec import Tool

__all__ = ["SessionSettings", "TurnDetection", "settings_from_config"]


@dataclass(frozen=True)
class TurnDetection:
    """Server VAD settings (OpenAI ``turn_detection`` of type ``server_vad``)."""

    threshold: float
    prefix_padding_ms: int
    silence_duration_ms: int
    create_response: bool = True
    interrupt_response: bool = True


@dataclass(frozen=True)
class SessionSettings:
    instructions: str
    turn_detection: TurnDetection | None
    language: str
    speed: float
    max_output_tokens: int
    temperature: float
    voice: str
    tools: tuple[Tool, ...] = ()
    tool_choice: str = "auto"
    """``auto``, ``none``, ``required`` or the name of one of ``tools`` (or of an MCP server's tool)."""
    mcp_servers: tuple[McpServer, ...] = ()
    """The session's ``{"type": "mcp"}`` tools: servers whose tools the model is offered and the
    server calls itself (:mod:`voiceagent.conversation.mcp_servers`)."""
    audio: bool = True
    """``output_modalities``: ["audio"] (speech, with its transcript) or ["text"] (False)."""
    transcription_prompt: str = ""
    """Text Whisper reads as if it came just before the speech (Realtime
    ``audio.input.transcription.prompt``): names and words the user is likely to say, in the
    spelling wanted.  "" for none."""
    examples: tuple[tuple[str, str], ...] = ()
    """(user, assistant) exchanges shown after the system message (``llm.examples``).  They belong
    to the server's instructions: :meth:`voiceagent.session.Session.update` drops them when a
    client changes the instructions."""


def settings_from_config(config: Config) -> SessionSettings:
    return SessionSettings(
        instructions=config.llm.instructions,
        turn_detection=TurnDetection(
            threshold=config.vad.threshold,
            prefix_padding_ms=config.vad.prefix_padding_ms,
            silence_duration_ms=config.turn.silence_ms,
        ),
        language=config.stt.language,
        speed=config.tts.speed,
        max_output_tokens=config.llm.max_tokens,
        temperature=config.llm.temperature,
        voice=config.tts.model,
        examples=config.llm.example_pairs,
    )
