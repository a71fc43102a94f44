"""Pipeline frames: what flows between stages and what stages report to the conversation core.

Two families:

* **Input frames** (audio, voice activity, transcripts) describe what the user did.  They are
  never dropped: losing them would lose user speech.
* **Response frames** (subclasses of :class:`~voiceagent.events.base.ResponseEvent`) belong to one
  attempt at answering.  When the session's generation moves past theirs (barge-in, a retracted
  speculative turn, ``response.cancel``) every channel drops them and every stage stops working
  on them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from voiceagent.audio import Float32Array, Int16Array
from voiceagent.events.base import Event, ResponseEvent
from voiceagent.playback import ListenerTimeline

__all__ = [
    "empty_pcm",
    "AudioFrame",
    "Clause",
    "GenerationEnd",
    "InputClear",
    "InputCommit",
    "LlmRoute",
    "LlmUsage",
    "Mark",
    "ReleaseReply",
    "ResponseAudio",
    "ResponseStatus",
    "Silence",
    "SoundHeard",
    "SpeechPaused",
    "SpeechResumed",
    "SpeechStarted",
    "SpeechStopped",
    "ToolCallMade",
    "ToolCallRejected",
    "TranscriptDelta",
    "TranscriptSegment",
    "TurnConfirmed",
    "UserTurn",
]


# --------------------------------------------------------------------------- input side


@dataclass(frozen=True, kw_only=True, slots=True)
class AudioFrame(Event):
    """User audio: mono int16 at the pipeline rate; ``start_ms`` is its position in the input stream."""

    pcm: Int16Array
    start_ms: float

    @property
    def end_ms(self) -> float:
        return self.start_ms + len(self.pcm) * 1000.0 / 16_000

    def then(self, *later: AudioFrame) -> AudioFrame:
        """This frame and the ``later`` ones that follow it in the stream, as one frame (its
        time, generation and start)."""
        if not later:
            return self
        return dataclasses.replace(self, pcm=np.concatenate([self.pcm, *(f.pcm for f in later)]))


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
    """STT: a partial transcript of the segment being spoken (replaces the previous partial);
    ``level_db``: the level of its audio (:func:`~voiceagent.audio.speech_level_db`);
    ``audio_ms``: where the audio it transcribes ends (input-stream time; 0: not told);
    ``confidence``: the transcriber's, 0..1 (None: not told; see ``backends.protocols.Transcript``)."""

    text: str
    level_db: float | None = None
    audio_ms: float = 0.0
    confidence: float | None = None


@dataclass(frozen=True, slots=True)
class SoundHeard:
    """What a sound-event model heard in a clip (``backends.yamnet``)."""

    speech: float
    """The probability of speech in the clip's most speech-like part (0..1)."""
    sound: str
    """The likeliest of the sounds it tells apart (a cough, a laugh, a hum...): the log's reason."""
    sound_p: float
    """That sound's probability (0..1)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TranscriptSegment(Event):
    """STT: the final transcript of one speech segment, with its audio (float32, 16 kHz).

    ``committed``: the segment is a whole manual commit (``input_audio_buffer.commit``).
    ``level_db``: the level of its speech (:func:`~voiceagent.audio.speech_level_db`).
    ``confidence``: the transcriber's, 0..1 (None: not told; see ``backends.protocols.Transcript``).
    ``sound_margin``: for speech over the agent, how much less likely its best reading in
    backchannels and sounds is than its transcript (nats; None: not read so; see
    ``backends.whisper_sounds``).
    ``joined``: speech over the agent joined with the dismissed segments just before it and
    transcribed again as one clip (``stages.dismissed``).
    ``heard``: for speech over the agent, what the sound-event model heard in its audio (None:
    not asked; ``backends.yamnet``).
    """

    text: str
    audio: Float32Array
    start_ms: float
    end_ms: float
    committed: bool = False
    level_db: float | None = None
    confidence: float | None = None
    sound_margin: float | None = None
    joined: bool = False
    heard: SoundHeard | None = None


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
    ack: bool = False
    """An acknowledgement said while the answer is still being thought (``llm.acknowledge_ms``),
    not the answer's content."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ResponseAudio(ResponseEvent):
    """TTS → playout: audio of clause ``index`` (mono int16 at ``rate``)."""

    pcm: Int16Array
    rate: int
    index: int
    text: str
    first_of_clause: bool
    ack: bool = False
    """Its clause is an acknowledgement, not the answer's content (:class:`Clause`)."""


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


def empty_pcm() -> Int16Array:
    """A zero-length int16 array (for events that carry no audio)."""
    return np.zeros(0, dtype=np.int16)
