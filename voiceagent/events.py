"""The typed events that flow between stages, and from the session to a transport.

Every event carries ``session`` (the session id), ``gen`` (the generation current when it was
made) and ``t`` (seconds on the session's injected clock).

Two families:

* **Input events** (audio, voice activity, transcripts) describe what the user did.  They are
  never dropped: losing them would lose user speech.
* **Response events** (subclasses of :class:`ResponseEvent`) belong to one attempt at answering.
  When the session's generation moves past theirs (barge-in, a retracted speculative turn,
  ``response.cancel``) every channel drops them and every stage stops working on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from voiceagent.audio import Float32Array, Int16Array
from voiceagent.playback import ListenerTimeline
from voiceagent.tools.mcp import McpTool

__all__ = [
    "AudioDelta",
    "AudioFrame",
    "CallSummary",
    "Clause",
    "ErrorEvent",
    "Event",
    "FunctionCallAdded",
    "GenerationEnd",
    "ItemTruncated",
    "LlmRoute",
    "LlmUsage",
    "InputClear",
    "InputCommit",
    "InputCleared",
    "InputCommitted",
    "ItemsDropped",
    "InputSpeechStarted",
    "InputSpeechStopped",
    "InputTimeoutTriggered",
    "InputTranscriptDelta",
    "InputTranscriptDone",
    "InputTranscriptFailed",
    "Mark",
    "McpCallAdded",
    "McpCallDone",
    "McpToolsListed",
    "OutputTranscriptDelta",
    "PlaybackCleared",
    "ReleaseReply",
    "ResponseAudio",
    "ResponseCreated",
    "ResponseDone",
    "ResponseEvent",
    "ResponseStatus",
    "Silence",
    "SpeechPaused",
    "SpeechResumed",
    "SpeechStarted",
    "SpeechStopped",
    "TextItemAdded",
    "ToolCallMade",
    "ToolCallRejected",
    "ToolOutputAdded",
    "TranscriptDelta",
    "TranscriptSegment",
    "TurnConfirmed",
    "TurnMetrics",
    "UserTurn",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """Common header of every event."""

    t: float
    gen: int
    session: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class ResponseEvent(Event):
    """An event that belongs to generation ``gen``; dropped once the session moves past it."""


# --------------------------------------------------------------------------- input side


@dataclass(frozen=True, kw_only=True, slots=True)
class AudioFrame(Event):
    """User audio: mono int16 at the pipeline rate; ``start_ms`` is its position in the input stream."""

    pcm: Int16Array
    start_ms: float

    @property
    def end_ms(self) -> float:
        return self.start_ms + len(self.pcm) * 1000.0 / 16_000


@dataclass(frozen=True, kw_only=True, slots=True)
class SpeechStarted(Event):
    """VAD: speech began at ``audio_ms`` (input-stream time, prefix padding not included)."""

    audio_ms: float


@dataclass(frozen=True, kw_only=True, slots=True)
class SpeechPaused(Event):
    """VAD: the first silent window after speech (speech ended at ``audio_ms``, perhaps for good)."""

    audio_ms: float


@dataclass(frozen=True, kw_only=True, slots=True)
class SpeechResumed(Event):
    """VAD: speech came back before the pause became a stop."""

    audio_ms: float


@dataclass(frozen=True, kw_only=True, slots=True)
class SpeechStopped(Event):
    """VAD: a short silence followed speech; speech ended at ``audio_ms``.  Not yet a turn end."""

    audio_ms: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Silence(Event):
    """VAD: ``silence_ms`` of silence since the last :class:`SpeechStopped`; the endpointer's clock."""

    audio_ms: float
    silence_ms: float


@dataclass(frozen=True, kw_only=True, slots=True)
class TranscriptDelta(Event):
    """STT: a partial transcript of the segment being spoken (replaces the previous partial)."""

    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class TranscriptSegment(Event):
    """STT: the final transcript of one speech segment, with its audio (float32, 16 kHz).

    ``committed``: the segment is a whole manual commit (``input_audio_buffer.commit``).
    """

    text: str
    audio: Float32Array
    start_ms: float
    end_ms: float
    committed: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class InputCommit(Event):
    """Manual turn-taking: everything buffered since the last commit is one user turn."""


@dataclass(frozen=True, kw_only=True, slots=True)
class InputClear(Event):
    """Drop buffered, not yet committed input audio."""


# --------------------------------------------------------------------------- turn and response


@dataclass(frozen=True, kw_only=True, slots=True)
class UserTurn(ResponseEvent):
    """Start answering.  ``text`` is the user's words (``None``: history already holds them).

    ``speculative`` turns are answered at once but their audio is held by playout until a
    :class:`TurnConfirmed` with the same ``gen`` releases it.
    """

    text: str | None
    speculative: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnConfirmed(Event):
    """Endpointer: the user's turn is over; ``gen`` is the response that answers ``text``.

    ``respond`` is False when the session does not answer on its own (``create_response``
    off, or a manual commit); ``gen`` is then meaningless.
    """

    text: str
    audio_end_ms: float
    respond: bool
    marks: dict[str, float]


@dataclass(frozen=True, kw_only=True, slots=True)
class Mark(ResponseEvent):
    """A timeline mark of generation ``gen`` (``llm_first_token``, ``first_clause``, ``tts_first_audio``)."""

    name: str


@dataclass(frozen=True, kw_only=True, slots=True)
class LlmRoute(ResponseEvent):
    """Which LLM engine answers generation ``gen``, and why (see voiceagent.backends.fallback)."""

    engine: str
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class LlmUsage(ResponseEvent):
    """What generation ``gen``'s reply used, sent when the LLM finished it (not for a reply that
    was cancelled or failed).  ``decode_s``: first token to last; ``None`` counts are unknown."""

    engine: str
    model: str
    prompt_tokens: int | None
    reused_tokens: int | None
    generated_tokens: int
    decode_s: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Clause(ResponseEvent):
    """LLM → TTS: a speakable piece of the reply, in order; ``index`` counts from 0.  ``audio``
    (mono int16 at ``rate``): the clause already spoken, from the semantic cache; the TTS stage
    passes it on instead of synthesizing."""

    text: str
    index: int
    audio: Int16Array | None = None
    rate: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class ResponseAudio(ResponseEvent):
    """TTS → playout: audio of clause ``index`` (mono int16 at ``rate``)."""

    pcm: Int16Array
    rate: int
    index: int
    text: str
    first_of_clause: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class ReleaseReply(ResponseEvent):
    """Session → playout: generation ``gen`` is this turn's answer; let it be heard.

    Its audio may already wait in playout (a speculative answer made before the turn was
    confirmed); it plays from now on as response ``response_id`` / item ``item_id``, and playout
    writes what it sends into ``listener``, the reply's own heard clock."""

    response_id: str
    item_id: str
    listener: ListenerTimeline


class ResponseStatus(StrEnum):
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"
    INCOMPLETE = "incomplete"


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallMade(ResponseEvent):
    """The LLM called a tool; ``arguments`` is checked JSON (``repaired``: only after repair)."""

    call_id: str
    name: str
    arguments: str
    repaired: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallRejected(ResponseEvent):
    """The LLM called a tool in a way that could not be repaired; nothing is sent as a call."""

    name: str
    arguments: str
    problem: str


@dataclass(frozen=True, kw_only=True, slots=True)
class GenerationEnd(ResponseEvent):
    """The producer of generation ``gen`` has finished (or failed: ``error`` says why)."""

    text: str
    status: ResponseStatus
    error: str | None = None


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
class ErrorEvent(Event):
    code: str
    message: str
    kind: str = "invalid_request_error"
    param: str | None = None
    event_id: str | None = None


def empty_pcm() -> Int16Array:
    """A zero-length int16 array (for events that carry no audio)."""
    return np.zeros(0, dtype=np.int16)
