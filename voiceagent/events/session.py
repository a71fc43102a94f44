"""Session events: what the session tells its transport, which the transport sends its client."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from voiceagent.audio import Int16Array
from voiceagent.events.base import Event
from voiceagent.events.frames import ResponseStatus
from voiceagent.tools.mcp import McpTool
from voiceagent.tools.phone import CallAction

__all__ = [
    "AudioDelta",
    "CallControl",
    "CallSummary",
    "ErrorEvent",
    "FunctionCallAdded",
    "InputCleared",
    "InputCommitted",
    "InputSpeechStarted",
    "InputSpeechStopped",
    "InputTimeoutTriggered",
    "InputTranscriptDelta",
    "InputTranscriptDone",
    "InputTranscriptFailed",
    "ItemTruncated",
    "ItemsDropped",
    "McpCallAdded",
    "McpCallDone",
    "McpToolsListed",
    "OutputTranscriptDelta",
    "PlaybackCleared",
    "ResponseCreated",
    "ResponseDone",
    "TextItemAdded",
    "ToolOutputAdded",
    "TurnMetrics",
]


# --------------------------------------------------------------------------- session → transport


@dataclass(frozen=True, kw_only=True, slots=True)
class InputSpeechStarted(Event):
    """The user started a turn (item ``item_id``) at ``audio_ms`` of the input stream."""

    item_id: str
    audio_ms: float


@dataclass(frozen=True, kw_only=True, slots=True)
class InputTimeoutTriggered(Event):
    """No speech for ``idle_timeout_ms`` after the agent's last reply finished playing: the
    silent input from ``audio_start_ms`` to ``audio_end_ms`` becomes item ``item_id`` and a
    response follows."""

    item_id: str
    audio_start_ms: float
    audio_end_ms: float


@dataclass(frozen=True, kw_only=True, slots=True)
class InputSpeechStopped(Event):
    item_id: str
    audio_ms: float


@dataclass(frozen=True, kw_only=True, slots=True)
class InputTranscriptDelta(Event):
    """A partial transcript of the turn being spoken (the whole partial text so far)."""

    item_id: str
    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class InputCleared(Event):
    """Buffered input audio was discarded."""


@dataclass(frozen=True, kw_only=True, slots=True)
class InputCommitted(Event):
    """A user item entered the history."""

    item_id: str
    previous_item_id: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class TextItemAdded(Event):
    """A text item the client created (``conversation.item.create``) entered the history."""

    item_id: str
    previous_item_id: str | None
    role: str
    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ItemsDropped(Event):
    """The oldest items left the history (its size limit); ``item_ids`` oldest first."""

    item_ids: tuple[str, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class InputTranscriptDone(Event):
    """The final transcript of user item ``item_id``; ``audio_s``: the seconds of input audio it
    was transcribed from (what the transcription cost, as ``usage`` reports it)."""

    item_id: str
    text: str
    audio_s: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class InputTranscriptFailed(Event):
    """The speech of user item ``item_id`` could not be transcribed (the STT raised): ``message``
    says why.  No turn is made of it; the next speech is a new item."""

    item_id: str
    message: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ResponseCreated(Event):
    response_id: str
    item_id: str
    previous_item_id: str | None = None
    audio: bool = True
    """False: a text-only response (``output_modalities: ["text"]``): text deltas, no audio."""
    in_conversation: bool = True
    """False: an out-of-band response (``conversation: "none"``): its items stay out of the history."""
    metadata: Mapping[str, str] | None = None
    """The client's ``metadata`` of ``response.create``, carried back as given."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AudioDelta(Event):
    """Reply audio for the listener, at the voice's rate; ``offset_ms`` is its position in the item."""

    response_id: str
    item_id: str
    pcm: Int16Array
    rate: int
    offset_ms: float


@dataclass(frozen=True, kw_only=True, slots=True)
class OutputTranscriptDelta(Event):
    """The text of the clause whose audio starts now; ``clause_ms`` is that clause's audio length."""

    response_id: str
    item_id: str
    text: str
    clause_ms: float = 0.0
    ack: bool = False
    """The clause is an acknowledgement said while the answer is thought, not its content."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FunctionCallAdded(Event):
    """A response called a tool: the ``function_call`` item is in the history, complete."""

    response_id: str
    item_id: str
    previous_item_id: str | None
    output_index: int
    call_id: str
    name: str
    arguments: str
    in_conversation: bool = True
    """False: the call of an out-of-band response, not in the history."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolOutputAdded(Event):
    """A tool's output entered the history, right after its call: from the client, or
    ``synthetic`` (the call went unanswered when the next answer started)."""

    item_id: str
    previous_item_id: str | None
    call_id: str
    output: str
    synthetic: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class McpToolsListed(Event):
    """The listing of MCP server ``server_label``'s tools (an ``mcp_list_tools`` item): begun
    (``in_progress``), ``completed`` with its ``tools``, or ``failed``."""

    item_id: str
    server_label: str
    status: str
    tools: tuple[McpTool, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class McpCallAdded(Event):
    """A response called an MCP tool: the server runs the call now (an ``mcp_call`` item)."""

    response_id: str
    item_id: str
    previous_item_id: str | None
    output_index: int
    server_label: str
    name: str
    arguments: str


@dataclass(frozen=True, kw_only=True, slots=True)
class McpCallDone(Event):
    """An MCP call ended: ``output`` (completed) or ``error`` (the Realtime error object: failed,
    timed out, or cancelled by a barge-in)."""

    response_id: str
    item_id: str
    previous_item_id: str | None
    output_index: int
    server_label: str
    name: str
    arguments: str
    output: str | None
    error: dict[str, object] | None


@dataclass(frozen=True, slots=True)
class CallSummary:
    """A call a response made, as ``response.done`` lists it: a ``function_call`` the client
    runs, or with ``server_label`` an ``mcp_call`` the server ran (its ``output`` or ``error``)."""

    item_id: str
    call_id: str
    name: str
    arguments: str
    server_label: str | None = None
    output: str | None = None
    error: dict[str, object] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ResponseDone(Event):
    """A response ended; ``text`` is what the history holds for it (cut to what was heard);
    ``calls``: the function calls it made, in order, after its spoken message."""

    response_id: str
    item_id: str
    status: ResponseStatus
    text: str
    reason: str | None = None
    audio_ms: float = 0.0
    calls: tuple[CallSummary, ...] = ()
    metadata: Mapping[str, str] | None = None
    """The client's ``metadata`` of ``response.create``, carried back as given."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PlaybackCleared(Event):
    """Barge-in: the listener's buffered audio of this response must be discarded now."""

    response_id: str
    item_id: str
    heard_ms: float


@dataclass(frozen=True, kw_only=True, slots=True)
class ItemTruncated(Event):
    item_id: str
    audio_end_ms: float
    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnMetrics(Event):
    """Per-turn timeline: milliseconds from the end of user speech to each mark (JSON-friendly),
    with the load the turn met: sessions open at its end and its wait for the LLM (ms), and the
    LLM engine that answered and why (``llm_route``: see voiceagent.backends.fallback)."""

    response_id: str
    spans: dict[str, float]
    sessions_active: int = 0
    llm_queue_ms: float | None = None
    llm_engine: str | None = None
    llm_route: str | None = None
    playback_gap_ms: float = 0.0
    """Silence inside the reply's audio: chunks that were not ready when the one before them ended."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CallControl(Event):
    """A phone session's call-control tool ran (:mod:`voiceagent.tools.phone`): the phone
    transport carries ``action`` out.  A hang-up or a transfer waits until the replies made up to
    and including the one after ``response_id`` (the goodbye the tool asked for) have been heard;
    digits are played at once."""

    response_id: str
    action: CallAction


@dataclass(frozen=True, kw_only=True, slots=True)
class ErrorEvent(Event):
    code: str
    message: str
    kind: str = "invalid_request_error"
    param: str | None = None
    event_id: str | None = None
