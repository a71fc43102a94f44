"""Per-session settings: what a client may change with ``session.update``.

Frozen; an update builds a new object from the old one (``dataclasses.replace``), so a stage
that read the settings at the start of a turn sees one consistent view.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from voiceagent.config import Config
from voiceagent.tools.mcp import McpServer
from voiceagent.tools.spec import Tool

__all__ = ["EAGERNESS_LEVELS", "InputItem", "SessionSettings", "SettingsSource", "Tracing", "TurnDetection", "settings_from_config"]


EAGERNESS_LEVELS = ("low", "medium", "high", "auto")
"""``semantic_vad``'s ``eagerness`` values (their endpointing: :data:`voiceagent.stages.turn.EAGERNESS`)."""


@dataclass(frozen=True)
class TurnDetection:
    """Turn detection (OpenAI ``turn_detection``): ``server_vad``, or ``semantic_vad`` whose
    ``eagerness`` picks the endpointing instead of ``silence_duration_ms``.  ``threshold`` and
    ``prefix_padding_ms`` drive the VAD in both modes."""

    threshold: float
    prefix_padding_ms: int
    silence_duration_ms: int
    create_response: bool = True
    interrupt_response: bool = True
    type: str = "server_vad"
    """``server_vad`` or ``semantic_vad``."""
    eagerness: str = "auto"
    """``semantic_vad`` only: one of :data:`EAGERNESS_LEVELS`."""
    idle_timeout_ms: int | None = None
    """``server_vad`` only: silence after the agent finished speaking that triggers
    ``input_audio_buffer.timeout_triggered`` and a response (None: never)."""


@dataclass(frozen=True)
class Tracing:
    """The session's ``tracing`` (Realtime ``session.tracing``): ``"auto"`` (``auto`` True, the
    names unset) or a configuration naming the workflow, its group and metadata.  It labels the
    session's turns (their OpenTelemetry spans and the JSON turn log); nothing is sent anywhere
    because of it."""

    auto: bool = True
    workflow_name: str | None = None
    group_id: str | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    """String keys and values, in the client's order."""

    def attributes(self) -> dict[str, str]:
        """Flat attributes for a span or a log line: ``tracing`` (``auto`` or ``configured``),
        ``tracing.workflow_name``, ``tracing.group_id``, ``tracing.metadata.KEY`` where set."""
        out = {"tracing": "auto" if self.auto else "configured"}
        if self.workflow_name is not None:
            out["tracing.workflow_name"] = self.workflow_name
        if self.group_id is not None:
            out["tracing.group_id"] = self.group_id
        out.update({f"tracing.metadata.{k}": v for k, v in self.metadata})
        return out


@dataclass(frozen=True)
class InputItem:
    """One item of ``response.create``'s ``input``: a message's text, or a reference to an item
    of the conversation (``item_reference``, ``ref`` its id; ``role`` and ``text`` then empty)."""

    role: str = ""
    text: str = ""
    ref: str | None = None


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
    kind: str = "realtime"
    """``session.type``: ``realtime`` (a conversation) or ``transcription`` (VAD and STT only:
    transcripts per turn, no LLM, no voice, no responses)."""
    semantic_cache: bool = False
    """Whether this session's first questions are looked up in (and their answers stored into)
    the server's semantic reply cache: a session starts with it on wherever the server has the
    cache (``cache.semantic``), and may turn it off and on again (the vendor field
    ``session.voiceagent.semantic_cache``); it cannot be on where the server has none."""
    tracing: Tracing | None = None
    """``session.tracing``: None (off, the default) or how the session's turns are labelled."""
    noise_reduction: str | None = None
    """``audio.input.noise_reduction.type`` (``near_field`` or ``far_field``: the same
    suppressor, :mod:`voiceagent.denoise`) or None (off); a new session's is ``vad.noise_reduction``."""
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
        noise_reduction=config.vad.noise_reduction or None,
    )


class SettingsSource(Protocol):
    """Whoever holds a session's settings as they are now (the session): read at each use,
    since ``session.update`` replaces them."""

    @property
    def settings(self) -> SessionSettings: ...
