"""VAD stage: speech probability per 32 ms window → speech start / stop / silence events.

The decision logic is :class:`VadTracker`, a pure state machine; the stage runs the model in the
VAD backend's executor and forwards the audio to STT *before* the events that refer to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from voiceagent.audio import int16_to_float
from voiceagent.backends.protocols import VadBackend
from voiceagent.config import VadConfig
from voiceagent.events import AudioFrame, Event, Silence, SpeechPaused, SpeechResumed, SpeechStarted, SpeechStopped
from voiceagent.pipeline import Channel, Stage, StageContext
from voiceagent.settings import SessionSettings
from voiceagent.stages.vad_batch import VadBatch

__all__ = ["FORWARD_SAMPLES", "VadOptions", "VadPorts", "VadStage", "VadTracker", "VoiceEvent"]

_WINDOW_MS = 32.0
_MAX_SILENCE_TICKS_MS = 4000.0  # the endpointer never needs more silence than this
_CANDIDATE_GAP_MS = 64.0  # the longest dip a speech-start candidate survives (two windows)
FORWARD_SAMPLES = 800
"""User audio goes on to STT once at least 50 ms of it is held, or at once before any VAD event:
one trip to STT per few client messages instead of one each, which delays nothing STT decides on
(partials come every few hundred ms of audio, and every event that starts a decode sends the
audio first)."""


@dataclass(frozen=True, slots=True)
class VoiceEvent:
    kind: str  # "start" | "pause" | "resume" | "stop" | "silence"
    audio_ms: float
    silence_ms: float = 0.0


class VadTracker:
    """Hysteresis over window probabilities.

    A speech-start candidate begins at a window at or above ``threshold``; later windows at or
    above ``threshold - 0.15`` add to it, and it survives dips below that of up to 64 ms (they do
    not count).  Speech starts once the candidate holds ``min_speech_ms``, at least half of it at
    or above ``threshold`` (``start`` carries the candidate's first window's start); it stops after ``stop_ms`` below ``threshold - 0.15``
    (``stop`` carries the end of the last speech window).  The first silent window inside speech
    yields ``pause`` (same position as the coming ``stop``), and speech before the stop yields
    ``resume``: that lets STT start decoding ~``stop_ms`` early.  After a stop, each silent window
    yields ``silence`` with the silence length so far, up to 4 s, except while a start candidate
    lives.
    """

    def __init__(self, window_ms: float = _WINDOW_MS) -> None:
        self.window_ms = window_ms
        self.in_speech = False
        self._cand_start: float | None = None
        self._cand_ms = 0.0
        self._cand_strong_ms = 0.0
        self._cand_gap_ms = 0.0
        self._silence_ms = 0.0
        self._last_speech_end = 0.0
        self._after_stop = False

    def feed(self, prob: float, window_end_ms: float, threshold: float, min_speech_ms: float, stop_ms: float) -> list[VoiceEvent]:
        start = window_end_ms - self.window_ms
        out: list[VoiceEvent] = []
        if not self.in_speech:
            counted = False
            if self._cand_start is None:
                if prob >= threshold:
                    self._cand_start = start
                    self._cand_ms = self._cand_strong_ms = self.window_ms
                    self._cand_gap_ms = 0.0
                    counted = True
            elif prob >= threshold - 0.15:
                self._cand_ms += self.window_ms
                self._cand_strong_ms += self.window_ms if prob >= threshold else 0.0
                self._cand_gap_ms = 0.0
                counted = True
            else:
                # A dip between syllables does not end a candidate; a real gap does.  Without this,
                # one low window in the middle of a word restarted the count, and whether a 320 ms
                # barge-in fired after 320 ms or 900 ms of speech depended on window alignment.
                self._cand_gap_ms += self.window_ms
                if self._cand_gap_ms > _CANDIDATE_GAP_MS:
                    self._cand_start = None
                    self._cand_ms = 0.0
            # At least half of it must be clear speech, so low-level noise between real dips does
            # not add up to a start.
            if counted and self._cand_start is not None and self._cand_ms >= min_speech_ms and 2 * self._cand_strong_ms >= min_speech_ms:
                self.in_speech = True
                self._after_stop = False
                self._silence_ms = 0.0
                self._last_speech_end = window_end_ms
                out.append(VoiceEvent("start", self._cand_start))
                self._cand_start = None
                self._cand_ms = 0.0
            # No silence while a candidate lives: the endpointer must not end a turn on windows
            # that may yet turn out to be speech (the next tick after the candidate dies catches up).
            if not self.in_speech and self._after_stop and prob < threshold and self._cand_start is None:
                silence = window_end_ms - self._last_speech_end
                if silence <= _MAX_SILENCE_TICKS_MS:
                    out.append(VoiceEvent("silence", window_end_ms, silence))
            return out
        if prob >= threshold - 0.15:
            if self._silence_ms > 0:
                out.append(VoiceEvent("resume", start))
            self._silence_ms = 0.0
            self._last_speech_end = window_end_ms
            return out
        self._silence_ms += self.window_ms
        if self._silence_ms == self.window_ms:
            out.append(VoiceEvent("pause", self._last_speech_end))
        if self._silence_ms >= stop_ms:
            self.in_speech = False
            self._after_stop = True
            out.append(VoiceEvent("stop", self._last_speech_end))
            out.append(VoiceEvent("silence", window_end_ms, window_end_ms - self._last_speech_end))
        return out

    def reset(self) -> None:
        self.__init__(self.window_ms)  # type: ignore[misc]


@dataclass(frozen=True)
class VadPorts:
    """What the VAD stage uses outside itself."""

    backend: VadBackend
    """The shared Silero model; the stage keeps one stream (its own state) of it."""
    settings: Callable[[], SessionSettings]
    """The session's settings as they are now (turn detection, threshold)."""
    agent_active: Callable[[], bool]
    """True while the agent answers: speech must then last ``barge_in_ms`` to start."""


@dataclass(frozen=True)
class VadOptions:
    """The server's VAD settings (``[vad]``), fixed for the session."""

    stop_ms: int
    min_speech_ms: int
    barge_in_ms: int

    @classmethod
    def from_config(cls, vad: VadConfig, interruption: str = "immediate") -> VadOptions:
        """``interruption`` (``turn.interruption``): with ``words`` speech over the agent only
        pauses it until its words are judged, so it starts after ``min_speech_ms`` as any other
        (the pause must come soon: the listener hears the agent until then)."""
        barge_in_ms = vad.barge_in_ms if interruption == "immediate" else vad.min_speech_ms
        return cls(stop_ms=vad.stop_ms, min_speech_ms=vad.min_speech_ms, barge_in_ms=barge_in_ms)


class VadStage(Stage):
    """Inbox: ``AudioFrame`` (and manual-mode control events, passed on).  Out: to STT, the audio
    in frames of 50 ms or more (:data:`FORWARD_SAMPLES`), always before the speech events about it
    and before any other event (silence ticks excepted: they need no audio).

    ``agent_active()`` says whether the agent is answering; then speech must last
    ``barge_in_ms`` (not ``min_speech_ms``) to start, so a cough does not interrupt.
    """

    name = "vad"

    def __init__(self, ctx: StageContext, inbox: Channel[Event], out: Channel[Event], ports: VadPorts, options: VadOptions) -> None:
        super().__init__(ctx, inbox, out)
        self._backend = ports.backend
        self._stream = ports.backend.stream()
        self._settings = ports.settings
        self._agent_active = ports.agent_active
        self._stop_ms = options.stop_ms
        self._min_speech_ms = options.min_speech_ms
        self._barge_in_ms = options.barge_in_ms
        self._batch: VadBatch | None = None
        self._held: list[AudioFrame] = []  # audio not yet sent on to STT, oldest first
        self._held_samples = 0
        self.tracker = VadTracker(1000.0 * self._stream.window_samples / 16000)
        self._samples = 0

    async def handle(self, event: Event) -> None:
        if not isinstance(event, AudioFrame):
            await self._forward_audio()
            await self.emit(event)
            return
        self._held.append(event)
        self._held_samples += len(event.pcm)
        # One model call for the frames of every session of this server (vad_batch.py).
        if self._batch is None:
            self._batch = VadBatch.of(self._backend)  # on the loop the stage runs on
        probs = await self._batch.process(self._stream, int16_to_float(event.pcm))
        # Windows are contiguous from the start of the stream, whatever the frame sizes.
        win = self.tracker.window_ms
        base_windows = self._samples // self._stream.window_samples
        self._samples += len(event.pcm)
        td = self._settings().turn_detection
        if td is None:
            # Manual turn-taking: no VAD events (the model still runs to keep its state current).
            self.tracker.reset()
            if self._held_samples >= FORWARD_SAMPLES:
                await self._forward_audio()
            return
        min_ms = self._barge_in_ms if self._agent_active() else self._min_speech_ms
        events = [
            ve
            for i, prob in enumerate(probs)
            for ve in self.tracker.feed(prob, (base_windows + i + 1) * win, td.threshold, min_ms, self._stop_ms)
        ]
        # The audio goes before the events about it.  A silence tick (one a window for seconds
        # after each stop) refers to no new audio STT needs: it does not send the audio on.
        if self._held_samples >= FORWARD_SAMPLES or any(ve.kind != "silence" for ve in events):
            await self._forward_audio()
        for ve in events:
            await self._forward(ve)

    async def _forward_audio(self) -> None:
        """Send the audio held back to STT as one frame (nothing when none is held)."""
        if not self._held:
            return
        held, self._held, self._held_samples = self._held, [], 0
        await self.emit(held[0].then(*held[1:]))

    async def _forward(self, ve: VoiceEvent) -> None:
        now = self.ctx.clock.now()
        ev: Event
        if ve.kind == "start":
            ev = SpeechStarted(t=now, gen=self.ctx.scope.current, session=self.ctx.session_id, audio_ms=ve.audio_ms)
        elif ve.kind == "pause":
            ev = SpeechPaused(t=now, gen=self.ctx.scope.current, session=self.ctx.session_id, audio_ms=ve.audio_ms)
        elif ve.kind == "resume":
            ev = SpeechResumed(t=now, gen=self.ctx.scope.current, session=self.ctx.session_id, audio_ms=ve.audio_ms)
        elif ve.kind == "stop":
            ev = SpeechStopped(t=now, gen=self.ctx.scope.current, session=self.ctx.session_id, audio_ms=ve.audio_ms)
        else:
            ev = Silence(t=now, gen=self.ctx.scope.current, session=self.ctx.session_id, audio_ms=ve.audio_ms, silence_ms=ve.silence_ms)
        if isinstance(ev, SpeechStarted | SpeechStopped):
            # The session reacts at once (barge-in, the pause of a reply and its resume); STT and
            # the endpointer see it in order, after the session.
            await self.ctx.notify(ev)
        await self.emit(ev)
