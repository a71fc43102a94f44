"""What a model engine must provide; stages depend on these Protocols, never on a library.

VAD, STT, turn and TTS backends each own a single-thread ``executor``.  Their methods are
**blocking** and are called only inside that executor (see :mod:`voiceagent.pipeline.offload`);
generators they return are iterated there too.  A backend is loaded once per process and shared
by every session, so per-stream state (the VAD's recurrent state) lives in objects the caller
holds, and nothing else in them is per-conversation.

The LLM is different: a model is shared, a *sequence* is not.  Its decoding state (a llama.cpp
context and KV cache, a server slot, an engine request) belongs to one generation at a time.
Stages therefore talk to an :class:`LlmEngine`, an asynchronous layer that owns that state:

* **Shared:** the weights, the executor or the HTTP connection pool, the engine's scheduler.
* **Exclusive:** while a generation runs, the sequence state it decodes on is its alone.  No two
  generations ever step on the same context (see :class:`LlmContext` for the blocking unit the
  in-process engine schedules).
* **Affinity:** a request names its conversation (``LlmRequest.key``); the engine keeps that
  conversation's prompt prefix warm where it can (the same context, slot or prefix cache), so a
  session's next turn pays only for its new tokens even after other sessions have spoken.
* **Cancellation:** closing or cancelling the iterator that :meth:`LlmEngine.generate` returns
  stops the generation in the engine (the in-process engine closes the token generator after the
  token in flight; an HTTP engine closes the stream, which aborts the request on the server) and
  gives the sequence state back for the next request.  ``CancelledError`` propagates.
* **Prefill:** :meth:`LlmEngine.prefill` evaluates, while the user is still speaking, the prompt a
  turn will start with (the history and the words heard so far), on the sequence state that will
  serve the turn, so that the answer pays only for the words after them.  It is best effort: it
  never waits for sequence state another generation holds, and an engine that cannot keep a
  prefix for a conversation does nothing.
* **Failure:** an engine that cannot answer raises :class:`~voiceagent.errors.EngineError`
  (retryable where a later call may work); the stage turns it into a failed response.
* **Window:** a prompt longer than :attr:`LlmEngine.window` less the reply's tokens fails; the
  session measures each prompt with :meth:`LlmEngine.count_tokens` first and cuts the history to
  fit (:mod:`voiceagent.conversation.prompt_fit`).
* **Stream items:** :meth:`LlmEngine.generate` yields what the model says (text pieces, tool
  calls) and, in order between them, what the engine observed: :class:`Admitted` when the
  sequence state is granted, :class:`Routed` from an engine that chooses, one
  :class:`EndProbability` when asked, :class:`Usage` last.  They are plain values read on the
  event loop by whoever iterates the stream: no callback runs in an engine's thread, and a
  reader that wants only the words filters with :func:`is_piece`.
* **Tools:** a request may offer ``tools``.  The engine renders them the way its model was
  trained to see them (the model's own chat template; an OpenAI-compatible server's ``tools``
  field) and yields each call the model makes as one complete :class:`ToolCall`, between the
  text pieces, never as text.  Arguments are the model's JSON text, not yet checked against the
  tool's schema (the stage repairs or reports them).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Protocol, TypeGuard, runtime_checkable

from voiceagent.audio import Float32Array, Int16Array
from voiceagent.events import SoundHeard
from voiceagent.tools.spec import Message, Tool, ToolCall, ToolChoice

__all__ = [
    "Admitted",
    "EndProbability",
    "LlmContext",
    "LlmEngine",
    "LlmItem",
    "LlmRequest",
    "LlmStats",
    "Pacing",
    "Piece",
    "Report",
    "Routed",
    "SttBackend",
    "SttRequest",
    "Transcript",
    "TtsBackend",
    "TurnBackend",
    "Usage",
    "VadBackend",
    "VadStream",
    "confidence_of",
    "example_messages",
    "is_piece",
]


def example_messages(examples: Sequence[tuple[str, str]]) -> list[Message]:
    """The user and assistant messages of ``(user, assistant)`` example exchanges, in order."""
    return [m for user, assistant in examples for m in (Message("user", user), Message("assistant", assistant))]


class VadStream(Protocol):
    """Per-session VAD state."""

    def process(self, pcm: Float32Array) -> list[float]:
        """Feed 16 kHz float samples; returns one speech probability per complete window."""
        ...

    @property
    def window_samples(self) -> int: ...


class SoundBackend(Protocol):
    """A sound-event model (``turn.sound_model``): what a clip holds, speech or a sound."""

    executor: Executor

    def hear(self, audio: Float32Array) -> SoundHeard:
        """``audio`` (float, 16 kHz) read by the model.  Blocking: run it on ``executor``."""
        ...


class VadBackend(Protocol):
    executor: Executor

    def stream(self) -> VadStream:
        """A fresh per-session state (cheap; does not touch the model)."""
        ...


@dataclass(frozen=True, eq=False)
class SttRequest:
    """One clip to transcribe: :meth:`SttBackend.transcribe`'s arguments."""

    audio: Float32Array
    language: str
    prompt: str = ""


class Transcript(str):
    """A transcript (it *is* its text) with the transcriber's confidence in it.

    ``confidence`` is in 0..1 (None: the backend gives none): for Whisper, the geometric mean of
    its tokens' probabilities times the probability that the clip holds speech at all.  It is
    low where the model guessed words at a sound (a hum written "BAM", an "ooh" "OO").  A
    :class:`Transcript` compares, hashes and prints as its text, so a backend may return one
    wherever a ``str`` is asked for; :func:`confidence_of` reads it back from any ``str``."""

    confidence: float | None

    def __new__(cls, text: str, confidence: float | None = None) -> Transcript:
        obj = super().__new__(cls, text)
        obj.confidence = confidence
        return obj


def confidence_of(text: str) -> float | None:
    """The confidence ``text`` carries when it is a :class:`Transcript` (else None)."""
    return text.confidence if isinstance(text, Transcript) else None


class SttBackend(Protocol):
    executor: Executor

    def transcribe(self, audio: Float32Array, language: str, prompt: str = "") -> str:
        """Whole-clip transcription of 16 kHz float audio (the lazy segments are consumed here).
        ``prompt``: text the model reads as if it came just before the audio ("" for none).  A
        backend that can say how sure it is returns a :class:`Transcript`."""
        ...

    def transcribe_batch(self, requests: Sequence[SttRequest]) -> list[str]:
        """The transcripts of several clips, in order, each what :meth:`transcribe` would give
        for it (a backend that cannot batch decodes them one by one).  For several sessions'
        final decodes that wait at the same time (:class:`voiceagent.pipeline.coalesce.Coalescer`)."""
        ...


@runtime_checkable
class SoundReader(Protocol):
    """An STT backend that can read a clip a second time in backchannels and sounds only
    (:mod:`voiceagent.backends.whisper_sounds`): for speech over the agent's reply."""

    def read_as_sounds(self, audio: Float32Array, language: str, phrases: tuple[str, ...], text: str) -> float | None:
        """How much less likely (nats, ≤ about 0) the best reading of ``audio`` in ``phrases``
        and sound spellings is than ``text``, its transcript; None: the clip is too long to read
        so (the 30 s path), or no text.  Runs in the backend's executor like :meth:`SttBackend.transcribe`."""
        ...


class TurnBackend(Protocol):
    executor: Executor

    def completion_probability(self, audio: Float32Array) -> float:
        """P(the speaker has finished their turn) from the last seconds of 16 kHz audio."""
        ...


class LlmContext(Protocol):
    """One decoding context of a local model (blocking; thread-confined to its engine's executor).

    It holds the state of one sequence at a time and reuses the longest common prefix of the
    previous prompt it saw.  Exactly one generator may be open on it at a time.
    """

    def set_threads(self, threads: int) -> None:
        """CPU threads for the next steps (takes effect between steps)."""
        ...

    def stream(
        self,
        messages: Sequence[Message],
        max_tokens: int,
        temperature: float,
        tools: Sequence[Tool] = (),
        tool_choice: ToolChoice = "auto",
    ) -> Iterator[str | ToolCall]:
        """Generate the assistant's reply as text pieces (one per token) and complete tool calls.
        Closing the iterator stops generation."""
        ...

    def prefill(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> int:
        """Evaluate the prompt ``messages`` render to, up to the end of the last (user) message's
        text, without generating: the words heard so far, whose turn is not over yet.  Keeps the
        longest prefix already cached; returns the tokens evaluated (0: nothing new, or the
        prompt cannot be rendered).  The next :meth:`stream` reuses them as any cached prefix."""
        ...

    def end_probability(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> float | None:
        """Evaluate the prompt :meth:`stream` will render for ``messages`` and ``tools`` (keeping the
        cached prefix) and return the probability that the token after the last message's words,
        its final punctuation left out, ends the sentence (".", "?", "!") or the turn: low where
        the user's words stop mid-sentence.  None: the prompt cannot be rendered."""
        ...


@dataclass(frozen=True, slots=True)
class Admitted:
    """Stream item: the generation got its sequence state (after any queue wait); it comes before
    the first piece.  A reader that times the queue wait stamps it on arrival."""


@dataclass(frozen=True, slots=True)
class Routed:
    """Stream item, before the first piece, from an engine that chooses between engines
    (:mod:`voiceagent.backends.fallback`, :mod:`voiceagent.backends.router`): ``engine`` answers,
    for ``reason``.  The last one before the first piece is the route that answered."""

    engine: str
    reason: str


@dataclass(frozen=True, slots=True)
class EndProbability:
    """Stream item, at most one, before the first piece, only when
    :attr:`LlmRequest.end_probability` asked for it: the model's probability that the user's
    sentence ends where the last (user) message's text ends, its final punctuation aside (that
    the next token would be ".", "?", "!" or the end of the turn).  An engine that cannot tell
    (a remote server) never sends it."""

    p: float


@dataclass(frozen=True, slots=True)
class Usage:
    """Stream item, the last one of a generation that ran to its end: what it used.  ``None``:
    the engine cannot tell (an OpenAI-compatible server that reports no usage while streaming).
    A generation closed early sends none."""

    model: str = ""
    prompt_tokens: int | None = None
    reused_tokens: int | None = None
    """Prompt tokens that were already in the KV cache (not evaluated again)."""
    generated_tokens: int = 0


Piece = str | ToolCall
"""What the model says: a text piece (one per token where the engine can tell) or one complete
tool call."""

Report = Admitted | Routed | EndProbability | Usage
"""What the engine observed about a generation, in the stream between the pieces."""

LlmItem = Piece | Report
"""One item of :meth:`LlmEngine.generate`'s stream: a :data:`Piece` or a :data:`Report`, in the
stream's own order rather than through callbacks."""


def is_piece(item: LlmItem) -> TypeGuard[Piece]:
    """True for what the model says (text or a tool call), false for the engine's reports."""
    return isinstance(item, (str, ToolCall))


class Pacing:
    """How a generation's reader wants its tokens, shared by the reader (on the event loop) and
    the engine (in its own thread).

    * :attr:`urgent`: true while someone waits for the tokens (until the first clause is out);
      an engine that schedules may put those steps ahead of other generations' later tokens,
      which are needed only at speaking pace.  At most :attr:`urgent_tokens` tokens are urgent,
      whatever it says (0: none).
    * :attr:`paused`: true while the reader takes no tokens and wants none decoded meanwhile (it
      has its first clause and leaves the cores to TTS until that clause's audio exists); an
      engine that decodes ahead of its reader decodes nothing more for this generation until it
      is false again, which it sees when the reader next takes or waits for a token.
    * :meth:`piece`: called by an engine that schedules token steps, in its thread, with each
      piece as soon as it is decoded and before it decides whether the next step is urgent, so
      that a reader can end its urgency with the token that completes its first clause (by the
      time that token reaches the event loop, one more would have been decoded ahead of other
      generations' first clauses).  An engine that does not schedule steps may never call it.

    Threads: the engine only reads the two flags and calls :meth:`piece`, which must be fast and
    must not block.  The flags are plain attributes: ``paused`` is written by the reader alone,
    and ``urgent`` only ever goes from true to false (in :meth:`piece`, or by the reader), so a
    stale read costs one step's place in the order, never a wrong token.  This base is urgent
    for its first ``urgent_tokens`` tokens and ignores the pieces.
    """

    def __init__(self, urgent_tokens: int = 0) -> None:
        self.urgent_tokens = urgent_tokens
        self.urgent = True
        self.paused = False

    def urgent_at(self, produced: int) -> bool:
        """Whether the next step is urgent once ``produced`` tokens were decoded."""
        return produced < self.urgent_tokens and self.urgent

    def piece(self, piece: str | ToolCall) -> None:
        """A decoded piece (the engine's thread); see the class docstring."""


@dataclass(frozen=True, slots=True)
class LlmRequest:
    """One generation: ``key`` names the conversation (affinity for its warm prefix).

    ``pacing``: how the reader wants its tokens (urgent or paused, and each piece as soon as
    decoded; see :class:`Pacing`).  ``tools``/``tool_choice``: the functions the model may call
    (see the module docstring); none by default.  ``end_probability``: send one
    :class:`EndProbability` before the first piece, where the engine can tell.  Everything else
    the engine observes comes back as items of the stream (:data:`LlmItem`).
    """

    key: str
    messages: Sequence[Message]
    max_tokens: int
    temperature: float
    pacing: Pacing = field(default_factory=Pacing)
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = "auto"
    end_probability: bool = False


@dataclass(frozen=True, slots=True)
class LlmStats:
    """A snapshot of an engine's load, for metrics and admission control."""

    engine: str
    slots: int
    busy: int
    waiting: int
    prompt_tokens: int = 0
    reused_tokens: int = 0
    generated_tokens: int = 0
    decode_seconds: float = 0.0
    prefilled_tokens: int = 0
    """Prompt tokens evaluated ahead of their turn (:meth:`LlmEngine.prefill`)."""
    shared_tokens: int = 0
    """Prompt tokens copied from another sequence's evaluated prefix instead of evaluated (the
    same long instructions in several conversations)."""
    shifted_tokens: int = 0
    """Prompt tokens a context shift brought back after a conversation was cut to fit its window
    (:mod:`voiceagent.backends.kv_shift`) instead of evaluating them again."""
    steps: int = 0
    """Forward passes of a batched engine (each carries every decoding sequence's next token and
    any prompt chunk); 0 for an engine that does not count them."""
    step_tokens: int = 0
    """Tokens those passes carried: ``step_tokens / steps`` is the mean batch."""
    breaker: str = ""
    """The circuit breaker's state (closed, open, half_open) of an engine with a fallback; empty
    for a single engine."""


class LlmEngine(Protocol):
    """The LLM as stages see it: shared by every session of a process (contract: module docstring)."""

    name: str

    def generate(self, request: LlmRequest) -> AsyncGenerator[LlmItem, None]:
        """Stream the reply as text pieces and complete tool calls, with the engine's reports
        between them (:data:`LlmItem`); close the iterator to stop early."""
        ...

    async def prefill(self, key: str, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> int:
        """Evaluate conversation ``key``'s coming prompt, ``messages`` up to the end of the last
        (user) message's text, on the sequence state its next turn will use (see the module
        docstring); returns the tokens evaluated, 0 when it did nothing (that state is busy,
        others wait for state, or the engine keeps no prefix per conversation).  Cancelling it
        skips work not yet started; work already running finishes in the engine."""
        ...

    def prime(self, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> None:
        """Warm every slot with the prefix of ``messages`` offering ``tools`` and forget
        conversation affinity (blocking: call off the event loop, with no generation running)."""
        ...

    window: int | None
    """Tokens one sequence holds, prompt and reply together (``llm.context``); None: not known."""

    async def count_tokens(self, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> int | None:
        """The length of the prompt ``messages`` and ``tools`` render to, in this engine's own
        tokens (its chat template and tokenizer); None when it cannot tell (a remote server).
        Touches no sequence state: it may run while generations do, and never waits for one."""
        ...

    def stats(self) -> LlmStats: ...

    async def aclose(self) -> None:
        """Close what belongs to the running event loop (pooled connections); the engine stays
        usable from other loops.  Call it before a loop that used the engine ends."""
        ...

    def close(self) -> None:
        """Release threads and connections (idempotent)."""
        ...


class TtsBackend(Protocol):
    executor: Executor

    @property
    def sample_rate(self) -> int: ...

    def synthesize(self, text: str, speed: float) -> Iterator[Int16Array]:
        """Speech for ``text`` as int16 chunks at ``sample_rate``, first chunk as early as possible."""
        ...
