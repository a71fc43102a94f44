"""Playout stage: holds a response's audio until it is released, paces it to the listener and
keeps an estimate of what the listener has actually heard.

Pacing: a chunk is sent once the listener's estimated playback is within ``lead_ms`` of needing
it.  Audio not yet sent is never heard, so on barge-in it is simply dropped; what was sent is
accounted for by :class:`ListenerTimeline` (unless the transport reports the real position).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from voiceagent.events import AudioDelta, Event, GenerationEnd, OutputTranscriptDelta, ResponseAudio
from voiceagent.pipeline import Channel, Stage, StageContext

__all__ = ["ListenerTimeline", "PlayoutStage"]


@dataclass
class ListenerTimeline:
    """Where the listener's playback is, assuming it plays each chunk as soon as it has it and the
    previous one has finished (so a late chunk shows up as a gap, not as heard audio)."""

    segments: list[tuple[float, float]] = field(default_factory=list)  # (start s, duration s)
    end_t: float | None = None
    sent_ms: float = 0.0

    def schedule(self, now: float, dur_s: float) -> float:
        start = now if self.end_t is None else max(now, self.end_t)
        self.segments.append((start, dur_s))
        self.end_t = start + dur_s
        self.sent_ms += dur_s * 1000.0
        return start

    def heard_ms(self, now: float) -> float:
        total = 0.0
        for start, dur in self.segments:
            if now <= start:
                break
            total += min(now - start, dur)
        return total * 1000.0


@dataclass
class _Release:
    event: asyncio.Event = field(default_factory=asyncio.Event)
    response_id: str = ""
    item_id: str = ""


class PlayoutStage(Stage):
    """Inbox: ``ResponseAudio`` and ``GenerationEnd`` from TTS.  Output: the session, via notify."""

    name = "playout"

    def __init__(self, ctx: StageContext, inbox: Channel[Event], lead_ms: int, chunk_ms: int) -> None:
        super().__init__(ctx, inbox, None)
        self._lead_s = lead_ms / 1000.0
        self._chunk_ms = chunk_ms
        self._releases: dict[int, _Release] = {}
        self._timelines: dict[int, ListenerTimeline] = {}

    def release(self, gen: int, response_id: str, item_id: str) -> None:
        """Let generation ``gen`` be heard, as response ``response_id`` / item ``item_id``."""
        for old in [g for g in self._releases if g < gen]:
            del self._releases[old]  # earlier generations are over (or were never confirmed)
        for old in [g for g in self._timelines if g < gen]:
            del self._timelines[old]  # nothing of theirs is played or asked about any more
        rel = self._releases.setdefault(gen, _Release())
        rel.response_id = response_id
        rel.item_id = item_id
        rel.event.set()

    def timeline(self, gen: int) -> ListenerTimeline:
        return self._timelines.setdefault(gen, ListenerTimeline())

    def forget(self, gen: int) -> None:
        """Drop the bookkeeping of a finished generation."""
        self._releases.pop(gen, None)
        self._timelines.pop(gen, None)

    async def _released(self, gen: int) -> _Release:
        rel = self._releases.setdefault(gen, _Release())
        await rel.event.wait()
        return rel

    async def handle(self, event: Event) -> None:
        if isinstance(event, ResponseAudio):
            await self._play(event)
        elif isinstance(event, GenerationEnd):
            await self._released(event.gen)
            await self.ctx.notify(event)

    async def _play(self, audio: ResponseAudio) -> None:
        rel = await self._released(audio.gen)
        tl = self.timeline(audio.gen)
        clock = self.ctx.clock
        if audio.first_of_clause:
            await self.ctx.notify(
                OutputTranscriptDelta(
                    t=clock.now(),
                    gen=audio.gen,
                    session=self.ctx.session_id,
                    response_id=rel.response_id,
                    item_id=rel.item_id,
                    text=audio.text,
                    # Piper yields a whole sentence at once, so the first chunk is the clause.
                    clause_ms=len(audio.pcm) * 1000.0 / audio.rate,
                )
            )
        step = max(1, audio.rate * self._chunk_ms // 1000)
        for i in range(0, len(audio.pcm), step):
            piece = audio.pcm[i : i + step]
            if tl.end_t is not None:
                await clock.sleep_until(tl.end_t - self._lead_s)
            offset = tl.sent_ms
            tl.schedule(clock.now(), len(piece) / audio.rate)
            await self.ctx.notify(
                AudioDelta(
                    t=clock.now(),
                    gen=audio.gen,
                    session=self.ctx.session_id,
                    response_id=rel.response_id,
                    item_id=rel.item_id,
                    pcm=piece,
                    rate=audio.rate,
                    offset_ms=offset,
                )
            )
