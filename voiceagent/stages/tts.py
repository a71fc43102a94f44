"""TTS stage: speaks each clause as it arrives; hands each audio chunk on at once.

Cancellation: a stale generation cancels the synthesis task; the voice's generator is closed in
the TTS executor after the chunk in flight.  A failing voice ends the generation as failed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from voiceagent.audio import Int16Array
from voiceagent.backends.protocols import TtsBackend
from voiceagent.errors import StageError
from voiceagent.events import Clause, Event, GenerationEnd, Mark, ResponseAudio, ResponseStatus, empty_pcm
from voiceagent.pipeline import Channel, Stage, StageContext, iterate_in
from voiceagent.pipeline.gate import GenerationGate
from voiceagent.settings import SessionSettings
from voiceagent.text.clauses import clean_for_speech

__all__ = ["TtsPorts", "TtsStage"]


@dataclass(frozen=True)
class TtsPorts:
    """What the TTS stage uses outside itself."""

    backend: TtsBackend
    """The shared voice (its executor puts every session's first clause first)."""
    settings: Callable[[], SessionSettings]
    """The session's settings as they are now (speed)."""
    first_audio: GenerationGate | None = None
    """Opened here at a reply's first audio (the LLM stage yields the CPU until then)."""
    speaks: Callable[[int], bool] | None = None
    """``speaks(gen)``: False for a text-only response, whose clauses pass on without audio."""
    voices: Callable[[str], TtsBackend] | None = None
    """The voice of a name (the session's ``voice``); None: ``backend`` always."""


class TtsStage(Stage):
    name = "tts"

    def __init__(self, ctx: StageContext, inbox: Channel[Event], out: Channel[Event], ports: TtsPorts) -> None:
        super().__init__(ctx, inbox, out)
        self._speaks = ports.speaks or (lambda gen: True)
        self._backend = ports.backend
        self._voices = ports.voices or (lambda name: ports.backend)
        self._settings = ports.settings
        self._gate = ports.first_audio or GenerationGate(enabled=False)
        self._failed_gen: int | None = None

    async def handle(self, event: Event) -> None:
        if isinstance(event, GenerationEnd) and event.gen == self._failed_gen:
            return  # already ended as failed below
        if not isinstance(event, Clause):
            await self.emit(event)
            return
        if event.gen == self._failed_gen:
            return
        speech = clean_for_speech(event.text) if self._speaks(event.gen) else ""
        settings = self._settings()
        voice = self._voices(settings.voice)  # the session cannot change it once it has spoken
        rate = voice.sample_rate
        first = True
        speed = settings.speed

        def make() -> Iterator[Int16Array]:
            return voice.synthesize(speech, speed)

        try:
            if speech:
                # Shared voice: every session's first clause (its first audio) goes ahead of the
                # later clauses of other replies, which are needed only at speaking pace.
                async with contextlib.aclosing(iterate_in(voice.executor, make, priority=min(event.index, 1))) as chunks:
                    async for pcm in chunks:
                        if first and event.index == 0:
                            self._gate.open(event.gen)
                            mark = Mark(t=self.ctx.clock.now(), gen=event.gen, session=self.ctx.session_id, name="tts_first_audio")
                            await self.ctx.notify(mark)
                        await self.emit(self._audio(event, pcm, rate, first))
                        first = False
        except Exception as exc:
            self._gate.open(event.gen)
            self._failed_gen = event.gen
            await self.emit(
                GenerationEnd(
                    t=self.ctx.clock.now(),
                    gen=event.gen,
                    session=self.ctx.session_id,
                    text="",
                    status=ResponseStatus.FAILED,
                    error=f"{type(exc).__name__}: {exc}",
                )
            )
            raise StageError(self.name, f"{type(exc).__name__}: {exc}") from exc
        self._gate.open(event.gen)
        if first:
            # Nothing speakable (only symbols), or a text-only response: the text still goes on.
            await self.emit(self._audio(event, empty_pcm(), rate, True))

    def _audio(self, clause: Clause, pcm: Int16Array, rate: int, first: bool) -> ResponseAudio:
        return ResponseAudio(
            t=self.ctx.clock.now(),
            gen=clause.gen,
            session=self.ctx.session_id,
            pcm=pcm,
            rate=rate,
            index=clause.index,
            text=clause.text,
            first_of_clause=first,
        )
