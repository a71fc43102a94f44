"""STT stage: buffers the speech segment, decodes partials while the user speaks and the final
transcript of each segment as soon as the VAD reports a short silence.

Decodes run in the STT backend's executor.  A partial decode is skipped while another decode is
in flight (the stage degrades how often it works, never what it keeps) and ``partials_skipped``
counts that.  Whisper's encoder costs the same for any clip length, so partials are spaced by
``partial_interval_ms`` of audio.

The executor is shared by every session.  Where it is a priority executor (the real Whisper
backend's is), a final decode — on some user's critical path — runs before any queued partial,
and a partial is skipped (counted in ``partials_skipped``) while any other decode is running or
queued: under load partials are the first thing to give.

Every transcript passes :mod:`voiceagent.text.stt_guard` here too, whatever the backend (the Whisper
backend already retries a looping decode and cuts what still loops): a final or early transcript
that loops is cut to the guard's text, a partial that loops is not shown at all.  ``loops``
counts both.

Each decode carries the session's transcription prompt (:mod:`voiceagent.text.stt_prompt`), read
from the session's settings when the decode is queued.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from voiceagent.audio import PIPELINE_RATE, Float32Array, Int16Array, int16_to_float, speech_level_db
from voiceagent.backends.protocols import SoundReader, SttBackend, SttRequest, confidence_of
from voiceagent.config import SttConfig
from voiceagent.errors import StageError
from voiceagent.events import (
    AudioFrame,
    Event,
    InputClear,
    InputCommit,
    SpeechPaused,
    SpeechResumed,
    SpeechStarted,
    SpeechStopped,
    TranscriptDelta,
    TranscriptSegment,
)
from voiceagent.pipeline import Channel, Stage, StageContext
from voiceagent.pipeline.coalesce import Coalescer
from voiceagent.pipeline.offload import run_at
from voiceagent.pipeline.scheduler import PriorityExecutor
from voiceagent.settings import SessionSettings
from voiceagent.text.stt_guard import check
from voiceagent.text.stt_prompt import transcription_prompt

__all__ = ["SttOptions", "SttPorts", "SttStage"]

log = logging.getLogger(__name__)

_RING_MS = 2000.0  # audio kept before a speech start, for prefix padding
_TAIL_MS = 96.0  # silence kept after the end of speech: Whisper clips the last word without it
PRIORITY_FINAL = 0  # a transcript someone's answer waits for
PRIORITY_PARTIAL = 1  # a progress update on screen
# While speech over the agent is judged (its reply paused), partials come this often: once the
# speech is long enough their words may decide (conversation/interruption.py).
JUDGING_INTERVAL_MS = 500.0


@dataclass(frozen=True)
class SttPorts:
    """What the STT stage uses outside itself."""

    backend: SttBackend
    """The shared Whisper model (its executor orders every session's decodes)."""
    settings: Callable[[], SessionSettings]
    """The session's settings as they are now (language, prompt, tools, turn detection)."""
    finals: Coalescer[SttRequest, str] | None = None
    """Where set (shared by every session on ``backend``), final decodes go through it, so that
    several sessions' finals waiting at once are decoded as one batch; None: one by one."""
    partials: SttBackend | None = None
    """The model partials are decoded with (``stt.partial_model``), run on ``backend``'s
    executor; None: ``backend``."""
    judging: Callable[[], bool] | None = None
    """True while speech over the agent is being judged by its words: partials then come every
    :data:`JUDGING_INTERVAL_MS` (even with ``stt.partials`` off).  None: never."""


@dataclass(frozen=True)
class SttOptions:
    """The server's STT settings (``[stt]``), fixed for the session."""

    partials: bool
    partial_interval_ms: int
    early_decode: bool = True
    tools_prompt: bool = False

    @classmethod
    def from_config(cls, stt: SttConfig) -> SttOptions:
        return cls(
            partials=stt.partials, partial_interval_ms=stt.partial_interval_ms, early_decode=stt.early_decode, tools_prompt=stt.tools_prompt
        )


class SttStage(Stage):
    name = "stt"

    def __init__(self, ctx: StageContext, inbox: Channel[Event], out: Channel[Event], ports: SttPorts, options: SttOptions) -> None:
        super().__init__(ctx, inbox, out)
        self._backend = ports.backend
        self._finals = ports.finals
        self._partial_backend = ports.partials or ports.backend
        self._settings = ports.settings
        self._tools_prompt = options.tools_prompt
        self._partials = options.partials
        self._partial_interval_ms = options.partial_interval_ms
        self._judging = ports.judging or (lambda: False)
        self._chunks: list[Int16Array] = []  # audio from ``_buf_start_ms`` to the present
        self._buf_start_ms = 0.0
        self._buf_end_ms = 0.0
        self._segment_start: float | None = None
        self._last_partial_ms = 0.0
        self._partial_task: asyncio.Task[None] | None = None
        self._early_decode = options.early_decode
        self._early: tuple[float, asyncio.Task[tuple[str, Exception | None]]] | None = None  # (speech end ms, decode)
        self.early_hits = 0
        self.partials_skipped = 0
        self.rejoins_skipped = 0
        """Turns of several segments not transcribed again as one clip: the decoder was busy."""
        self.decodes = 0
        self.loops = 0

    # -- buffer -------------------------------------------------------------------------------

    def _append(self, frame: AudioFrame) -> None:
        if not self._chunks:
            self._buf_start_ms = frame.start_ms
        self._chunks.append(frame.pcm)
        self._buf_end_ms = frame.end_ms

    def _slice(self, start_ms: float, end_ms: float) -> Int16Array:
        if not self._chunks:
            return np.zeros(0, dtype=np.int16)
        audio = np.concatenate(self._chunks)
        a = max(0, int((start_ms - self._buf_start_ms) * PIPELINE_RATE / 1000))
        b = max(a, int((end_ms - self._buf_start_ms) * PIPELINE_RATE / 1000))
        return audio[a:b]

    def _trim_before(self, ms: float) -> None:
        """Forget audio older than ``ms`` (keeps whole chunks)."""
        while self._chunks:
            first_len_ms = len(self._chunks[0]) * 1000.0 / PIPELINE_RATE
            if self._buf_start_ms + first_len_ms > ms:
                return
            self._chunks.pop(0)
            self._buf_start_ms += first_len_ms

    # -- events -------------------------------------------------------------------------------

    async def handle(self, event: Event) -> None:
        manual = self._settings().turn_detection is None
        if isinstance(event, AudioFrame):
            self._append(event)
            if manual:
                return
            if self._segment_start is None:
                self._trim_before(self._buf_end_ms - _RING_MS)
            elif self._buf_end_ms - self._last_partial_ms >= self._interval_ms():
                self._maybe_partial()
            return
        if isinstance(event, SpeechStarted):
            td = self._settings().turn_detection
            pad = td.prefix_padding_ms if td is not None else 0
            self._segment_start = max(self._buf_start_ms, event.audio_ms - pad)
            self._last_partial_ms = self._buf_end_ms
            await self.emit(event)
            return
        if isinstance(event, SpeechPaused):
            if self._early_decode and self._segment_start is not None:
                # Decode now, padding the not-yet-received tail with silence; if the pause becomes
                # a stop at the same position, this result is the final one.
                audio = self._segment_audio(self._segment_start, event.audio_ms)
                task = asyncio.create_task(self._decode(audio), name="stt.early")
                self._background_track(task)
                self._early = (event.audio_ms, task)
            return
        if isinstance(event, SpeechResumed):
            if self._early is not None:
                # Stale: more speech follows.  Cancelling takes a decode that has not started off
                # the shared queue, where it would delay other sessions' finals.
                self._early[1].cancel()
            self._early = None
            return
        if isinstance(event, SpeechStopped):
            await self.emit(event)
            if self._segment_start is not None:
                start = self._segment_start
                end = event.audio_ms + _TAIL_MS
                self._segment_start = None
                early, self._early = self._early, None
                if early is not None and early[0] == event.audio_ms:
                    self.early_hits += 1
                    text, failure = await early[1]
                    await self._emit_segment(text, failure, self._segment_audio(start, event.audio_ms), start, end, committed=False)
                else:
                    await self._final(start, end, committed=False)
                self._trim_before(end - _RING_MS)
            return
        if isinstance(event, InputCommit):
            await self._final(self._buf_start_ms, self._buf_end_ms, committed=True)
            self._chunks.clear()
            return
        if isinstance(event, InputClear):
            self._chunks.clear()
            self._segment_start = None
            return
        await self.emit(event)

    async def decode_clip(self, audio: Float32Array) -> str | None:
        """Transcribe ``audio`` as a final would be (its priority, the loop guard); None when the
        decode failed, or was not tried because the shared decoder is busy.  For the turn stage,
        which transcribes a turn of several segments again as one clip: a better transcript, not
        a needed one, so under load it gives way (``rejoins_skipped``) rather than queue behind
        other sessions' finals, which cost up to a second at four turns ending together
        (docs/bench/concurrency.md).  Cancellation: the decode is dropped if it has not started."""
        if self._decoder_busy():
            self.rejoins_skipped += 1
            return None
        text, failure = await self._decode(audio)
        return None if failure is not None else text

    async def read_as_sounds(self, audio: Float32Array, text: str, phrases: tuple[str, ...]) -> float | None:
        """The margin of a second reading of ``audio`` in ``phrases`` and sound spellings against
        ``text``, its final transcript
        (:class:`~voiceagent.backends.protocols.SoundReader`), at a final's priority; None when
        the backend cannot read so, the clip is too long for it, or the reading failed (logged:
        the transcript then decides alone).  Not skipped under load as :meth:`decode_clip` is:
        it decides whether a paused reply resumes.  Cancellation: dropped if not started."""
        backend = self._backend
        if not isinstance(backend, SoundReader) or len(audio) < PIPELINE_RATE // 10:
            return None
        language = self._settings().language
        try:
            return await run_at(backend.executor, PRIORITY_FINAL, lambda: backend.read_as_sounds(audio, language, phrases, text))
        except Exception:
            log.exception("session %s: reading speech over the agent as sounds failed", self.ctx.session_id)
            return None

    def _segment_audio(self, start_ms: float, speech_end_ms: float) -> Float32Array:
        """Segment audio up to ``speech_end_ms`` plus the tail; a tail not received yet is silence."""
        audio = int16_to_float(self._slice(start_ms, speech_end_ms + _TAIL_MS))
        want = int((speech_end_ms + _TAIL_MS - start_ms) * PIPELINE_RATE / 1000)
        if len(audio) < want:
            audio = np.concatenate([audio, np.zeros(want - len(audio), dtype=np.float32)])
        return audio

    async def _decode(self, audio: Float32Array) -> tuple[str, Exception | None]:
        """Transcribe in the backend's executor; a failure is returned, not raised, so the
        segment can still be closed (as silence) and the endpointer is not left waiting."""
        if len(audio) < PIPELINE_RATE // 10:
            return "", None
        self.decodes += 1
        try:
            language, prompt = self._language_and_prompt()
            if self._finals is not None:
                text = await self._finals.submit(PRIORITY_FINAL, SttRequest(audio, language, prompt))
            else:
                text = await run_at(self._backend.executor, PRIORITY_FINAL, lambda: self._backend.transcribe(audio, language, prompt))
        except Exception as exc:
            return "", exc
        verdict = check(text, len(audio) / PIPELINE_RATE)
        if verdict.looped:
            self.loops += 1
        return verdict.text, None

    async def _final(self, start_ms: float, end_ms: float, *, committed: bool) -> None:
        audio = int16_to_float(self._slice(start_ms, end_ms))
        text, failure = await self._decode(audio)
        await self._emit_segment(text, failure, audio, start_ms, end_ms, committed=committed)

    async def _emit_segment(
        self, text: str, failure: Exception | None, audio: Float32Array, start_ms: float, end_ms: float, *, committed: bool
    ) -> None:
        await self.emit(
            TranscriptSegment(
                t=self.ctx.clock.now(),
                gen=self.ctx.scope.current,
                session=self.ctx.session_id,
                text=text,
                audio=audio,
                start_ms=start_ms,
                end_ms=end_ms,
                committed=committed,
                level_db=speech_level_db(audio),
                confidence=confidence_of(text),
            )
        )
        if failure is not None:
            raise StageError(self.name, f"transcription failed: {type(failure).__name__}: {failure}") from failure

    def _language_and_prompt(self) -> tuple[str, str]:
        """Read when a decode is queued, so a ``session.update`` applies from the next decode."""
        settings = self._settings()
        return settings.language, transcription_prompt(settings, self._tools_prompt)

    def _decoder_busy(self) -> bool:
        """A decode (any session's) is running or queued on the shared decoder; False where its
        executor cannot tell (not a priority executor)."""
        executor = self._backend.executor
        return isinstance(executor, PriorityExecutor) and executor.busy

    def _interval_ms(self) -> float:
        """The audio between two partials now (infinite: none)."""
        if self._judging():
            return min(JUDGING_INTERVAL_MS, float(self._partial_interval_ms))
        return float(self._partial_interval_ms) if self._partials else float("inf")

    def _maybe_partial(self) -> None:
        self._last_partial_ms = self._buf_end_ms
        if self._partial_task is not None and not self._partial_task.done():
            self.partials_skipped += 1
            return
        if self._decoder_busy():
            # Another session's decode is running or queued: a partial now would only delay it
            # (and its own final); skip it and try again after the next interval.
            self.partials_skipped += 1
            return
        assert self._segment_start is not None
        audio = int16_to_float(self._slice(self._segment_start, self._buf_end_ms))
        self._partial_task = self.spawn(self._partial(audio, self._buf_end_ms), "partial")

    async def _partial(self, audio: np.ndarray, end_ms: float) -> None:
        self.decodes += 1
        language, prompt = self._language_and_prompt()
        model = self._partial_backend
        text = await run_at(self._backend.executor, PRIORITY_PARTIAL, lambda: model.transcribe(audio, language, prompt))
        if check(text, len(audio) / PIPELINE_RATE).looped:
            self.loops += 1
            return
        if text:
            await self.ctx.notify(
                TranscriptDelta(
                    t=self.ctx.clock.now(),
                    gen=self.ctx.scope.current,
                    session=self.ctx.session_id,
                    text=text,
                    level_db=speech_level_db(audio),
                    audio_ms=end_ms,
                    confidence=confidence_of(text),
                )
            )
