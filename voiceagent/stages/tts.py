"""TTS stage: speaks each clause as it arrives; hands each audio chunk on at once.

A clause that comes with its audio (from the semantic cache) is passed on as it is.  With
``spoken``, the clauses of each generation and their audio are kept until it ends, and a
completed one is reported (the LLM stage stores it in the cache).

Cancellation: a stale generation cancels the synthesis task; the voice's generator is closed in
the TTS executor after the chunk in flight.  A failing voice ends the generation as failed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from voiceagent.audio import Int16Array
from voiceagent.backends.protocols import TtsBackend
from voiceagent.cache.store import CachedClause
from voiceagent.config import TtsConfig
from voiceagent.errors import StageError
from voiceagent.events import Clause, Event, GenerationEnd, Mark, ResponseAudio, ResponseStatus, empty_pcm
from voiceagent.pipeline import Channel, Stage, StageContext, iterate_in
from voiceagent.pipeline.gate import GenerationGate
from voiceagent.settings import SessionSettings
from voiceagent.text.clauses import clean_for_speech

__all__ = ["TtsOptions", "TtsPorts", "TtsStage"]


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
    spoken: Callable[[int, list[CachedClause]], None] | None = None
    """Told each completed generation's clauses with their audio (module docstring); None: not kept."""


@dataclass(frozen=True)
class TtsOptions:
    """The server's TTS settings (``[tts]``), fixed for the session."""

    ahead_ms: int = 0
    """A later clause waits until the reply's audio not yet played is under this (0: no wait);
    ``tts.ahead_ms``."""

    @classmethod
    def from_config(cls, tts: TtsConfig) -> TtsOptions:
        return cls(ahead_ms=tts.ahead_ms)


class TtsStage(Stage):
    name = "tts"

    def __init__(
        self, ctx: StageContext, inbox: Channel[Event], out: Channel[Event], ports: TtsPorts, options: TtsOptions | None = None
    ) -> None:
        super().__init__(ctx, inbox, out)
        self._ahead_s = (options or TtsOptions()).ahead_ms / 1000.0
        self._pace: tuple[int, float, float] | None = None
        """(generation, when its first audio went out, seconds of its audio made so far)."""
        self._speaks = ports.speaks or (lambda gen: True)
        self._backend = ports.backend
        self._voices = ports.voices or (lambda name: ports.backend)
        self._settings = ports.settings
        self._gate = ports.first_audio or GenerationGate(enabled=False)
        self._failed_gen: int | None = None
        self._spoken = ports.spoken
        self._kept: tuple[int, list[CachedClause]] | None = None

    async def handle(self, event: Event) -> None:
        if isinstance(event, GenerationEnd) and event.gen == self._failed_gen:
            return  # already ended as failed below
        if isinstance(event, GenerationEnd):
            kept, self._kept = self._kept, None
            if self._spoken is not None and kept is not None and kept[0] == event.gen and event.status == ResponseStatus.COMPLETED:
                self._spoken(event.gen, kept[1])
        if not isinstance(event, Clause):
            await self.emit(event)
            return
        if event.gen == self._failed_gen:
            return
        if event.audio is not None:
            await self._pass_on(event, event.audio)
            return
        speech = clean_for_speech(event.text) if self._speaks(event.gen) else ""
        settings = self._settings()
        voice = self._voices(settings.voice)  # the session cannot change it once it has spoken
        rate = voice.sample_rate
        first = True
        speed = settings.speed
        chunks_of_clause: list[Int16Array] = []

        def make() -> Iterator[Int16Array]:
            return voice.synthesize(speech, speed)

        try:
            if speech:
                due = await self._wait_for_room(event.gen, event.index)
                # Shared voice: every session's first clause (its first audio) goes ahead of the
                # later clauses of other replies, which are needed only at speaking pace; a later
                # clause paced until its audio is due is as urgent as a first one (a gap otherwise).
                priority = 0 if event.index == 0 or due else 1
                async with contextlib.aclosing(iterate_in(voice.executor, make, priority=priority)) as chunks:
                    async for pcm in chunks:
                        if first and event.index == 0:
                            self._gate.open(event.gen)
                            mark = Mark(t=self.ctx.clock.now(), gen=event.gen, session=self.ctx.session_id, name="tts_first_audio")
                            await self.ctx.notify(mark)
                        self._made(event.gen, len(pcm) / rate)
                        await self.emit(self._audio(event, pcm, rate, first))
                        chunks_of_clause.append(pcm)
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
        self._keep(event, np.concatenate(chunks_of_clause) if chunks_of_clause else empty_pcm(), rate)

    async def _wait_for_room(self, gen: int, index: int) -> bool:
        """Before a later clause of ``gen``: wait until the audio made for it and not yet played is
        under ``ahead_ms``.  Played is estimated as the time since its first audio went out, which
        is at most what the listener has heard (a reply held until its turn is confirmed starts
        later), so the estimate errs towards synthesizing early; the synthesis itself may still
        come late under load (docs/decisions/tts-pacing.md measured the gaps).  Cancellation:
        a stale generation cancels the wait with the rest of the clause's handling.  Returns whether
        the clause was paced: its audio is now due within ``ahead_ms``."""
        pace = self._pace
        if self._ahead_s <= 0 or index == 0 or pace is None or pace[0] != gen:
            return False
        _, first_t, made_s = pace
        await self.ctx.clock.sleep_until(first_t + made_s - self._ahead_s)
        return True

    def _made(self, gen: int, seconds: float) -> None:
        pace = self._pace
        if pace is None or pace[0] != gen:
            self._pace = (gen, self.ctx.clock.now(), seconds)
        else:
            self._pace = (gen, pace[1], pace[2] + seconds)

    async def _pass_on(self, clause: Clause, pcm: Int16Array) -> None:
        """A clause with its audio already made (the semantic cache)."""
        if clause.index == 0:
            self._gate.open(clause.gen)
            await self.ctx.notify(Mark(t=self.ctx.clock.now(), gen=clause.gen, session=self.ctx.session_id, name="tts_first_audio"))
        speaks = self._speaks(clause.gen)
        if speaks:
            self._made(clause.gen, len(pcm) / clause.rate)
        await self.emit(self._audio(clause, pcm if speaks else empty_pcm(), clause.rate, True))

    def _keep(self, clause: Clause, pcm: Int16Array, rate: int) -> None:
        """Keep a synthesized clause for ``spoken`` (a text-only reply is not kept: it has no audio)."""
        if self._spoken is None or not self._speaks(clause.gen):
            self._kept = None
            return
        if self._kept is None or self._kept[0] != clause.gen:
            self._kept = (clause.gen, [])
        self._kept[1].append(CachedClause(clause.text, pcm, rate))

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
            ack=clause.ack,
        )
