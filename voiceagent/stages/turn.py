"""Turn stage: decides when the user's turn is over, and starts answering speculatively.

:class:`Endpointer` is the pure decision logic (``feed(...) -> actions``); the stage runs the
turn model in its executor and turns actions into events.

Policy: a turn is a run of speech segments.  When a segment's final transcript arrives (after a
short silence) the endpointer may **speculate**: the answer starts at once but its audio is held.
The turn is **confirmed** once the silence reaches ``complete_ms`` and the turn model judges the
turn complete, or reaches ``silence_ms`` whatever the model says (the fallback).  Speech before
confirmation **retracts** the speculation and the turn goes on.

A transcript that stops where a sentence cannot end ("Tell me the capital of",
:func:`~voiceagent.text.turn_words.ends_unfinished`) is neither answered speculatively nor judged by
the model: the turn waits for ``incomplete_ms`` of silence (when that is longer than the fallback),
because the speaker is most likely thinking of the next word.

With ``text_threshold`` the LLM reads the words too: as the speculative answer starts, its engine
reports the probability that the user's sentence ends where their words end (the chance that the
next token would be ".", "?", "!" or the end of the turn; :attr:`LlmRequest.end_probability`).
Below the threshold the turn waits for ``doubt_ms`` of silence ("How many wheels", "Which
country"): the whole questions of the eval score above 0.003 and their first halves, paused for
600-800 ms, below it (``benchmarks/eval_end_of_turn.py``).  Shorter than ``incomplete_ms``: a word
no sentence ends on is near certain, the LLM's doubt is not (Whisper's mishearings score low
too), and a whole question it doubts waits for it.  Until the probability is in, the turn is not
confirmed (for at most ``doubt_ms``): it arrives before the answer's first token, and the held
audio cannot play before that token anyway, so the wait costs the listener nothing.

A turn of several segments is transcribed again as one clip (``rejoin``, the STT stage's
:meth:`~voiceagent.stages.stt.SttStage.decode_clip`), its gaps as silence: Whisper hears a half
sentence worse than a whole one (the figures: docs/decisions/mid-sentence-pauses.md).  It costs
one more decode, on those turns only.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from voiceagent.audio import PIPELINE_RATE, Float32Array
from voiceagent.backends.protocols import TurnBackend, confidence_of
from voiceagent.config import Config
from voiceagent.events import Event, Silence, SoundHeard, SpeechStarted, SpeechStopped, TranscriptSegment, TurnConfirmed, UserTurn
from voiceagent.pipeline import Channel, Stage, StageContext, run_in
from voiceagent.pipeline.gate import GenerationGate
from voiceagent.settings import SessionSettings
from voiceagent.stages.dismissed import Dismissed, join
from voiceagent.text.turn_words import ends_unfinished

__all__ = [
    "EAGERNESS",
    "Confirm",
    "Endpointing",
    "Endpointer",
    "Rejoin",
    "Retract",
    "RunTurnModel",
    "Speculate",
    "TurnControl",
    "TurnOptions",
    "TurnPorts",
    "TurnStage",
]

log = logging.getLogger(__name__)

_TURN_AUDIO_S = 8  # the turn model looks at the last 8 s


@dataclass(frozen=True, slots=True)
class Endpointing:
    """The waits and the threshold that end a turn (see the module docstring for each rule)."""

    silence_ms: int
    """The fallback: this much silence ends the turn whatever the turn model says."""
    complete_ms: int
    """Silence that ends the turn once the turn model judges it complete."""
    threshold: float
    """The turn model's probability from which the turn counts as complete."""
    incomplete_ms: int
    """Silence that ends a turn whose words stop where a sentence cannot end (the end-of-sentence rule)."""
    doubt_ms: int
    """Silence that ends a turn whose words the LLM doubts end a sentence (with ``turn.text_threshold``)."""


EAGERNESS: dict[str, Endpointing] = {
    # Sooner: a shorter fallback, the turn model trusted from a lower probability and after a
    # shorter silence, and unfinished words waited for 1 s at most (OpenAI's high: 2 s at most).
    "high": Endpointing(silence_ms=350, complete_ms=240, threshold=0.35, incomplete_ms=1000, doubt_ms=600),
    # The server's defaults (TurnConfig's), measured on the spoken eval (docs/decisions/turn-complete-ms.md).
    "medium": Endpointing(silence_ms=500, complete_ms=400, threshold=0.5, incomplete_ms=1500, doubt_ms=1000),
    # Patient: the user takes their time; an unfinished sentence waits 3 s (OpenAI's low: 8 s at most).
    "low": Endpointing(silence_ms=900, complete_ms=700, threshold=0.7, incomplete_ms=3000, doubt_ms=2000),
}
"""``semantic_vad``'s ``eagerness`` → the endpointing it runs with (``auto`` is ``medium``, as
OpenAI's).  ``server_vad`` runs with the server's ``turn`` settings and the client's
``silence_duration_ms`` instead.  Measured per level by ``benchmarks/eagerness.py``."""
EAGERNESS["auto"] = EAGERNESS["medium"]
_REJOIN_MAX_S = 20  # a longer turn is not transcribed again as one clip


@dataclass(frozen=True, slots=True)
class Speculate:
    text: str


@dataclass(frozen=True, slots=True)
class Retract:
    pass


@dataclass(frozen=True, slots=True)
class Confirm:
    text: str
    audio_end_ms: float
    committed: bool = False


@dataclass(frozen=True, slots=True)
class RunTurnModel:
    audio: Float32Array = field(compare=False)


Action = Speculate | Retract | Confirm | RunTurnModel


class Endpointer:
    """The turn state machine.  Time is audio time, carried by ``silence`` ticks from the VAD."""

    def __init__(
        self, *, speculative: bool, use_model: bool, incomplete_ms: float = 0.0, text_threshold: float = 0.0, doubt_ms: float = 1000.0
    ) -> None:
        """``incomplete_ms``: the silence that ends a turn whose words are unfinished (0: no such
        rule).  ``text_threshold``: below this probability that the sentence ends (told by
        :meth:`on_sentence_end` for each speculation) the turn waits ``doubt_ms`` of silence (when
        longer than the fallback); 0: not asked."""
        self.speculative = speculative
        self.use_model = use_model
        self.incomplete_ms = incomplete_ms
        self.text_threshold = text_threshold
        self.doubt_ms = doubt_ms
        self._end_pending = False  # a speculation started and its sentence-end probability is not in
        self._end_prob: float | None = None
        self._segments: list[str] = []
        self._audio: list[Float32Array] = []
        self._spans: list[tuple[float, float]] = []  # (start_ms, end_ms) of each segment
        self._tail = ""  # the last segment's text as decoded on its own
        self._paused = False  # a segment ended and no speech since
        self._transcribed = False  # the last segment's transcript is in
        self._speculating = False
        self._prob: float | None = None
        self._silence = 0.0
        self._speech_end_ms = 0.0

    @property
    def text(self) -> str:
        return " ".join(s for s in self._segments if s).strip()

    def on_speech_started(self) -> list[Action]:
        out: list[Action] = []
        if self._speculating:
            out.append(Retract())
            self._speculating = False
        self._paused = False
        self._transcribed = False
        self._prob = None
        self._end_pending, self._end_prob = False, None
        return out

    def on_speech_stopped(self, audio_ms: float) -> list[Action]:
        self._paused = True
        self._transcribed = False
        self._prob = None
        self._silence = 0.0
        self._speech_end_ms = audio_ms
        return []

    def joined(self, seg: TranscriptSegment) -> TranscriptSegment | None:
        """``seg`` with the turn's earlier segments before it, as one clip whose gaps are silence
        and whose overlaps (padding) appear once (its text still ``seg``'s: the caller transcribes
        the clip); None when no earlier segment is pending, ``seg`` is a manual commit, or the
        clip would be longer than 20 s."""
        if seg.committed or not self._spans or not self.text:
            return None
        start = self._spans[0][0]
        if seg.end_ms - start > _REJOIN_MAX_S * 1000:
            return None
        parts = [(a, b, audio) for (a, b), audio in zip(self._spans, self._audio, strict=True)]
        return dataclasses.replace(seg, audio=join([*parts, (seg.start_ms, seg.end_ms, seg.audio)]), start_ms=start)

    def on_segment(self, seg: TranscriptSegment, respond: bool, *, alone: str | None = None) -> list[Action]:
        """``alone``: given when ``seg`` is :meth:`joined` transcribed again (it then replaces the
        pending segments), the text of its last segment decoded on its own.  Whether the turn
        stops mid-sentence is judged on that: a whole-clip decode sometimes trails off into a
        word it never heard ("... the closest star of?")."""
        if seg.committed:
            text = " ".join([*self._segments, seg.text]).strip()
            self._reset()
            return [Confirm(text, seg.end_ms, committed=True)]
        if alone is not None:
            self._segments, self._audio, self._spans = [], [], []
        self._tail = seg.text if alone is None else alone
        self._segments.append(seg.text.strip())
        self._audio.append(seg.audio)
        self._spans.append((seg.start_ms, seg.end_ms))
        self._transcribed = True
        if not self._paused:
            return []  # the user already went on speaking; this text joins the turn
        if not self.text:
            self._reset()  # noise: no words, no turn
            return []
        if self._unfinished():
            return []  # the speaker is looking for the next word: nothing to answer or judge yet
        out: list[Action] = []
        # Speculate first: the answer starts while the turn model is still judging.
        if self.speculative and respond:
            self._speculating = True
            self._end_pending, self._end_prob = self.text_threshold > 0, None
            out.append(Speculate(self.text))
        if self.use_model:
            audio = np.concatenate(self._audio)[-PIPELINE_RATE * _TURN_AUDIO_S :]
            out.append(RunTurnModel(audio))
        return out

    def on_sentence_end(self, prob: float | None) -> bool:
        """The current speculation's probability that the sentence ends after the user's words
        (None: the engine cannot tell); it counts from the next silence tick.  False when no
        speculation waits for one (it was retracted, or was told already)."""
        if not (self._speculating and self._end_pending):
            return False
        self._end_pending, self._end_prob = False, prob
        return True

    @property
    def doubts_end(self) -> bool:
        """Whether the LLM judged the current words unlikely to end a sentence."""
        return self._end_prob is not None and self._end_prob < self.text_threshold

    def on_probability(self, prob: float, complete_ms: float, silence_ms: float, threshold: float) -> list[Action]:
        self._prob = prob
        return self._check(complete_ms, silence_ms, threshold)

    def on_silence(self, silence: float, complete_ms: float, silence_ms: float, threshold: float) -> list[Action]:
        self._silence = silence
        return self._check(complete_ms, silence_ms, threshold)

    def _check(self, complete_ms: float, silence_ms: float, threshold: float) -> list[Action]:
        if not (self._paused and self._transcribed and self.text):
            return []
        # Unfinished or doubted words: the model's "complete" does not count, and the fallback
        # waits longer; while the LLM's verdict is pending, so does the turn (module docstring).
        unfinished = self._unfinished()
        doubted = self.doubts_end or self._end_pending
        complete = not (unfinished or doubted) and self._prob is not None and self._prob >= threshold
        fallback_ms = silence_ms
        if unfinished:
            fallback_ms = max(silence_ms, self.incomplete_ms)
        elif doubted:
            fallback_ms = max(silence_ms, self.doubt_ms)
        if self._silence >= fallback_ms or (complete and self._silence >= complete_ms):
            action = Confirm(self.text, self._speech_end_ms)
            self._reset()
            return [action]
        return []

    def _unfinished(self) -> bool:
        return self.incomplete_ms > 0 and ends_unfinished(self._tail)

    @property
    def speculating(self) -> bool:
        return self._speculating

    def discard(self) -> None:
        """Forget the segments so far, as if they were never spoken (speech over the agent that
        was no interruption; the agent was answering, so no turn of the user's was pending)."""
        self._reset()

    def _reset(self) -> None:
        self._segments = []
        self._audio = []
        self._spans = []
        self._tail = ""
        self._paused = False
        self._transcribed = False
        self._speculating = False
        self._prob = None
        self._end_pending, self._end_prob = False, None
        self._silence = 0.0


class TurnControl(Protocol):
    """The session's turn controller, which alone moves the generation on: the stage asks it."""

    def begin(self) -> int:
        """Open a new generation for an answer; every earlier one goes stale.  Returns it."""
        ...

    def retract(self, gen: int) -> None:
        """Speculative answer ``gen`` is withdrawn (the user went on speaking): its generation
        goes stale and everything kept for its reply goes with it."""
        ...


Rejoin = Callable[[Float32Array], Awaitable[str | None]]
"""Transcribes a whole turn's clip, its gaps as silence; None: the decode failed."""


@dataclass(frozen=True)
class TurnPorts:
    """What the turn stage uses outside itself."""

    turns: TurnControl
    """The session's turn controller: opens and retracts generations."""
    backend: TurnBackend | None
    """The shared turn model; None: the silence fallback alone decides (``turn.model = "none"``)."""
    settings: Callable[[], SessionSettings]
    """The session's settings as they are now (turn detection, eagerness)."""
    llm_started: GenerationGate | None = None
    """Opened by the LLM stage at a generation's first token; the turn model is skipped while
    the silence fallback would confirm the turn before any first audio could exist."""
    may_speculate: Callable[[], bool] | None = None
    """Asked as each final transcript arrives; False holds the answer until the turn is confirmed
    (the session says so while a tool call waits for its output: the prompt cannot be known)."""
    rejoin: Rejoin | None = None
    """For turns of several segments (the STT stage's ``decode_clip``); None: not done."""
    takes_turn: Callable[[TranscriptSegment], Awaitable[bool]] | None = None
    """Asked first for each segment's final transcript; False drops the segment as if it was
    never spoken (speech over the agent's reply that is no interruption: a backchannel, a
    cough).  None: every segment counts."""
    judging: Callable[[], bool] | None = None
    """Whether speech over a paused reply is being judged now: a segment then joins the dismissed
    ones just before it and is judged as one clip with them (:mod:`~voiceagent.stages.dismissed`;
    needs ``rejoin``).  None: each segment is judged alone."""
    reads_again: Callable[[TranscriptSegment], bool] | None = None
    """Asked of each segment's final transcript before ``takes_turn``: True when it is speech
    over a paused reply that a second reading in backchannels and sounds could dismiss."""
    read_as_sounds: Callable[[TranscriptSegment], Awaitable[float | None]] | None = None
    """That second reading of a segment (its audio against its transcript): its margin in nats
    (:mod:`~voiceagent.backends.whisper_sounds`), carried to ``takes_turn`` in the segment's
    ``sound_margin``; None: not read.  Both ports or neither."""
    hears_again: Callable[[TranscriptSegment], bool] | None = None
    """Asked after the second reading: True when the segment would still interrupt but the sound
    model's reading of its audio could dismiss it."""
    hear_sounds: Callable[[TranscriptSegment], Awaitable[SoundHeard | None]] | None = None
    """That reading (``backends.yamnet``), carried to ``takes_turn`` in the segment's ``heard``;
    None: not read.  Both ports or neither."""


@dataclass(frozen=True)
class TurnOptions:
    """The server's endpointing settings, fixed for the session."""

    speculative: bool
    complete_ms: int
    threshold: float
    stop_ms: int = 160
    """The VAD's silence before it reports the end of speech (``vad.stop_ms``)."""
    min_audio_ms: float = 0.0
    """The time from the LLM's first token to the first audio of a typical first clause on this
    machine (measured at start-up, ``TurnCost.audio_after_first_token_s``; 0: unknown, never skip)."""
    incomplete_ms: int = 0
    """The silence that ends a turn whose words are unfinished (0: no such rule)."""
    text_threshold: float = 0.0
    """The LLM's sentence-end probability below which the words count as unfinished for
    ``doubt_ms`` (0: not asked)."""
    doubt_ms: int = 1000

    @classmethod
    def from_config(cls, cfg: Config, min_audio_ms: float) -> TurnOptions:
        turn = cfg.turn
        return cls(
            speculative=turn.speculative,
            complete_ms=turn.complete_ms,
            threshold=turn.threshold,
            stop_ms=cfg.vad.stop_ms,
            min_audio_ms=min_audio_ms,
            incomplete_ms=turn.incomplete_ms,
            text_threshold=turn.text_threshold,
            doubt_ms=turn.doubt_ms,
        )


class TurnStage(Stage):
    """Inbox: VAD events and transcripts from STT.  Out: ``UserTurn`` to the LLM stage."""

    name = "turn"

    def __init__(self, ctx: StageContext, inbox: Channel[Event], out: Channel[Event], ports: TurnPorts, options: TurnOptions) -> None:
        """When ``options.text_threshold`` is set, whoever runs the speculative answers must call
        :meth:`sentence_end` once for each (the LLM stage does, through its ``sentence_end`` port)."""
        super().__init__(ctx, inbox, out)
        self._turns = ports.turns
        self._speculative = options.speculative
        self._may_speculate = ports.may_speculate or (lambda: True)
        self._backend = ports.backend
        self._settings = ports.settings
        self._complete_ms = options.complete_ms
        self._threshold = options.threshold
        self._incomplete_ms = options.incomplete_ms
        self._doubt_ms = options.doubt_ms
        self.endpointer = Endpointer(
            speculative=options.speculative,
            use_model=ports.backend is not None,
            incomplete_ms=float(options.incomplete_ms),
            text_threshold=options.text_threshold,
            doubt_ms=float(options.doubt_ms),
        )
        self._spec_gen: int | None = None
        self._llm_started = ports.llm_started or GenerationGate(enabled=False)
        self._marks: dict[str, float] = {}
        self.retractions = 0
        self.model_skipped = 0
        self._stop_silence_ms = float(options.stop_ms)
        self._min_audio_ms = options.min_audio_ms
        self._rejoin = ports.rejoin
        self._takes_turn = ports.takes_turn
        self._judging = ports.judging
        self._reads_again = ports.reads_again
        self._read_as_sounds = ports.read_as_sounds
        self._hears_again = ports.hears_again
        self._hear_sounds = ports.hear_sounds
        self.heard_again = 0
        """Segments over the agent read by the sound model."""
        self.read_again = 0
        """Segments over the agent read a second time in backchannels and sounds."""
        self._dismissed = Dismissed()
        self.joined_over_agent = 0
        """Segments over the agent judged joined with the dismissed ones before them."""
        self.dropped = 0
        """Segments dropped because they were no interruption of the agent (``takes_turn``)."""
        self.rejoined = 0
        """Turns of several segments transcribed again as one clip."""
        self.doubted = 0
        """Speculations whose words the LLM judged unlikely to end a sentence (held as unfinished)."""

    def heard_so_far(self) -> str:
        """The words of the turn being spoken whose segments are transcribed (its earlier
        segments, before a pause the turn went on after); "" between turns.  The LLM stage puts
        them before a partial transcript of the segment being spoken when it prefills, so the
        prefilled prompt is the one the turn will have (a partial covers its own segment only)."""
        return self.endpointer.text

    def sentence_end(self, gen: int, prob: float | None) -> None:
        """Speculative answer ``gen``'s probability that the user's sentence ends after their
        words (None: its engine cannot tell); on the event loop.  Another generation's is ignored."""
        if gen != self._spec_gen:
            return
        if self.endpointer.on_sentence_end(prob) and self.endpointer.doubts_end:
            self.doubted += 1
        log.debug("session %s: sentence end %s for %r", self.ctx.session_id, prob, self.endpointer.text)

    def _fallback_first(self) -> bool:
        """Whether the silence fallback will confirm the turn before the answer's first audio is
        expected: the silence so far (the VAD's stop window plus the wall time since it; audio
        arrives in real time) plus the typical time from now to a first audio reaches it."""
        stopped = self._marks.get("vad_stop")
        if stopped is None:
            return False
        silence = self._stop_silence_ms + (self.ctx.clock.now() - stopped) * 1000.0
        return silence + self._min_audio_ms >= self._silence_ms()

    def endpointing(self) -> Endpointing:
        """The endpointing the session's turn detection asks for now: ``semantic_vad``'s level
        (:data:`EAGERNESS`), else the server's settings with the client's ``silence_duration_ms``."""
        td = self._settings().turn_detection
        if td is not None and td.type == "semantic_vad":
            return EAGERNESS[td.eagerness]
        return Endpointing(
            silence_ms=td.silence_duration_ms if td is not None else 0,
            complete_ms=self._complete_ms,
            threshold=self._threshold,
            incomplete_ms=self._incomplete_ms,
            doubt_ms=self._doubt_ms,
        )

    def _silence_ms(self) -> float:
        if self._settings().turn_detection is None:
            return float("inf")
        return float(self.endpointing().silence_ms)

    def _respond(self) -> bool:
        """Whether a confirmed turn is answered (never in a transcription session)."""
        settings = self._settings()
        td = settings.turn_detection
        return td is not None and td.create_response and settings.kind == "realtime"

    async def handle(self, event: Event) -> None:
        ep = self.endpointer
        ends = self.endpointing()
        # Read at each event: a session.update (a new eagerness) applies from the next one.
        ep.incomplete_ms, ep.doubt_ms = float(ends.incomplete_ms), float(ends.doubt_ms)
        args = (float(ends.complete_ms), self._silence_ms(), ends.threshold)
        if isinstance(event, SpeechStarted):
            actions = ep.on_speech_started()
        elif isinstance(event, SpeechStopped):
            self._marks = {"vad_stop": event.t}
            actions = ep.on_speech_stopped(event.audio_ms)
        elif isinstance(event, TranscriptSegment):
            if not event.committed and self._takes_turn is not None:
                event = await self._with_dismissed(event)
                event = await self._hear_again(await self._read_again(event))
                if not await self._takes_turn(event):
                    self.dropped += 1
                    self._dismissed.hold(event)
                    ep.discard()
                    return
                self._dismissed.clear()
            self._marks["transcript_final"] = event.t
            ep.speculative = self._speculative and self._may_speculate()
            rejoined = await self._rejoined(event)
            if rejoined is not None:
                actions = ep.on_segment(rejoined, self._respond(), alone=event.text)
            else:
                actions = ep.on_segment(event, self._respond())
        elif isinstance(event, Silence):
            actions = ep.on_silence(event.silence_ms, *args)
        else:
            actions = []
        await self._apply(actions)

    async def _with_dismissed(self, seg: TranscriptSegment) -> TranscriptSegment:
        """``seg``, or, while speech over the agent is judged, ``seg`` joined with the dismissed
        segments just before it and transcribed again as one clip (its confidence the clip's).
        ``seg`` alone when nothing is held, or the decode failed or was not tried (busy)."""
        if self._judging is None or self._rejoin is None or not self._judging():
            self._dismissed.clear()
            return seg
        joined = self._dismissed.with_held(seg)
        if joined is None:
            return seg
        text = await self._rejoin(joined.audio)
        if not text:
            return seg
        self.joined_over_agent += 1
        log.debug("session %s: speech over the reply judged with what was dismissed before it: %r", self.ctx.session_id, str(text))
        return dataclasses.replace(joined, text=text, confidence=confidence_of(text), joined=True)

    async def _read_again(self, seg: TranscriptSegment) -> TranscriptSegment:
        """``seg`` with the margin of its second reading in backchannels and sounds, when the
        ``reads_again`` port asks for one (else ``seg`` as it is).  Cancellation: the reading is
        dropped with the stage's task, like any decode."""
        if self._reads_again is None or self._read_as_sounds is None or not self._reads_again(seg):
            return seg
        margin = await self._read_as_sounds(seg)
        self.read_again += 1
        return seg if margin is None else dataclasses.replace(seg, sound_margin=margin)

    async def _hear_again(self, seg: TranscriptSegment) -> TranscriptSegment:
        """``seg`` with the sound model's reading of its audio, when the ``hears_again`` port asks
        for one (else ``seg`` as it is).  Cancellation: the reading is dropped with the stage's task."""
        if self._hears_again is None or self._hear_sounds is None or not self._hears_again(seg):
            return seg
        heard = await self._hear_sounds(seg)
        self.heard_again += 1
        return seg if heard is None else dataclasses.replace(seg, heard=heard)

    async def _rejoined(self, seg: TranscriptSegment) -> TranscriptSegment | None:
        """``seg`` joined with the turn's earlier segments and transcribed again as one clip; None
        when there is nothing to join, rejoining is off, or the decode failed or heard nothing."""
        joined = self.endpointer.joined(seg) if self._rejoin is not None and seg.text.strip() else None
        if self._rejoin is None or joined is None:
            return None
        text = await self._rejoin(joined.audio)
        if not text:
            return None
        self.rejoined += 1
        return dataclasses.replace(joined, text=text)

    async def _apply(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, RunTurnModel):
                if self._backend is None:
                    continue
                if self._spec_gen is not None:
                    # Off the critical path: let the speculative answer's prompt run first.
                    await self._llm_started.wait(self._spec_gen)
                if self._fallback_first():
                    # The answer's first audio is not expected before the silence fallback confirms
                    # the turn anyway, so an early "complete" from the model would gain nothing;
                    # its CPU time would only slow the answer (and other sessions' answers).
                    self.model_skipped += 1
                    continue
                prob = await run_in(self._backend.executor, self._backend.completion_probability, action.audio)
                ends = self.endpointing()
                await self._apply(self.endpointer.on_probability(prob, float(ends.complete_ms), self._silence_ms(), ends.threshold))
            elif isinstance(action, Speculate):
                gen = self._turns.begin()
                self._spec_gen = gen
                await self.emit(UserTurn(t=self.ctx.clock.now(), gen=gen, session=self.ctx.session_id, text=action.text, speculative=True))
            elif isinstance(action, Retract):
                spec = self._spec_gen
                self._spec_gen = None
                self.retractions += 1
                if spec is not None and not self.ctx.scope.is_stale(spec):
                    self._turns.retract(spec)
            elif isinstance(action, Confirm):
                await self._confirm(action)

    async def _confirm(self, action: Confirm) -> None:
        now = self.ctx.clock.now()
        respond = self._respond() and not action.committed
        gen = self._spec_gen
        self._spec_gen = None
        if gen is not None and self.ctx.scope.is_stale(gen):
            gen = None  # the speculative answer was cancelled meanwhile (barge-in): answer anew
        if not respond:
            await self.ctx.notify(
                TurnConfirmed(
                    t=now,
                    gen=-1,
                    session=self.ctx.session_id,
                    text=action.text,
                    audio_end_ms=action.audio_end_ms,
                    respond=False,
                    marks=dict(self._marks),
                )
            )
            return
        speculative = gen is not None
        if gen is None:
            gen = self._turns.begin()
        # Tell the session first, so the response is registered before its audio can arrive.
        await self.ctx.notify(
            TurnConfirmed(
                t=now,
                gen=gen,
                session=self.ctx.session_id,
                text=action.text,
                audio_end_ms=action.audio_end_ms,
                respond=True,
                marks=dict(self._marks),
            )
        )
        if not speculative:
            await self.emit(UserTurn(t=now, gen=gen, session=self.ctx.session_id, text=action.text, speculative=False))
