"""Playout stage: a pure sink that paces released audio to the listener and writes what it sends
into the reply's heard clock.

Release: a reply's audio is heard only after its :class:`~voiceagent.events.ReleaseReply` has
come down this stage's inbox.  Audio of a generation not yet released (a speculative answer
whose turn is not confirmed yet) is held here, in order, until its release arrives; held audio of
a generation that went stale (retracted, barged in) is dropped.  Nothing else reaches in: the
session talks to playout only through the channel.

Pause: while the session's :class:`~voiceagent.pipeline.hold.PlayoutHold` names a generation
(speech over its reply is being judged), none of its audio is sent; it goes on from the same
sample when resumed.

Pacing: a chunk is sent once the listener's estimated playback is within ``lead_ms`` of needing
it.  Audio not yet sent is never heard, so on barge-in it is simply dropped; what was sent is
accounted for by the reply's :class:`~voiceagent.playback.ListenerTimeline`.

Cancellation: a bump of the generation cancels the handling of stale audio mid-pacing (the
stage contract); nothing here swallows ``CancelledError``.
"""

from __future__ import annotations

from voiceagent.events import AudioDelta, Event, GenerationEnd, OutputTranscriptDelta, ReleaseReply, ResponseAudio
from voiceagent.pipeline import Channel, Stage, StageContext
from voiceagent.pipeline.hold import PlayoutHold
from voiceagent.playback import ListenerTimeline

__all__ = ["ListenerTimeline", "PlayoutStage"]

_Output = ResponseAudio | GenerationEnd


class PlayoutStage(Stage):
    """Inbox: ``ReleaseReply`` from the session, ``ResponseAudio`` and ``GenerationEnd`` from TTS.
    Output: the session, via notify."""

    name = "playout"

    def __init__(self, ctx: StageContext, inbox: Channel[Event], lead_ms: int, chunk_ms: int, hold: PlayoutHold | None = None) -> None:
        """``hold``: paused while speech over a reply is judged (no chunk is sent meanwhile)."""
        super().__init__(ctx, inbox, None)
        self._hold = hold or PlayoutHold()
        self._lead_s = lead_ms / 1000.0
        self._chunk_ms = chunk_ms
        self._live: ReleaseReply | None = None
        """The latest release: its generation's output plays as it comes."""
        self._held: dict[int, list[_Output]] = {}
        """Output of generations not released yet, in arrival order."""

    def holding(self) -> dict[int, int]:
        """Events held per unreleased generation (for tests and diagnostics)."""
        return {gen: len(evs) for gen, evs in self._held.items()}

    async def handle(self, event: Event) -> None:
        self._drop_stale()
        if isinstance(event, ReleaseReply):
            self._live = event
            for gen in [g for g in self._held if g < event.gen]:
                del self._held[gen]  # earlier generations are over or were never confirmed
            for held in self._held.pop(event.gen, []):
                await self._out(event, held)
        elif isinstance(event, ResponseAudio | GenerationEnd):
            live = self._live
            if live is not None and live.gen == event.gen:
                await self._out(live, event)
            elif live is None or event.gen > live.gen:
                self._held.setdefault(event.gen, []).append(event)
            # else: output of a generation older than the released one: nobody will hear it

    def _drop_stale(self) -> None:
        for gen in [g for g in self._held if self.ctx.scope.is_stale(g)]:
            del self._held[gen]
        if self._live is not None and self.ctx.scope.is_stale(self._live.gen):
            self._live = None

    async def _out(self, rel: ReleaseReply, event: _Output) -> None:
        if isinstance(event, GenerationEnd):
            await self.ctx.notify(event)
        else:
            await self._play(rel, event)

    async def _play(self, rel: ReleaseReply, audio: ResponseAudio) -> None:
        tl = rel.listener
        clock = self.ctx.clock
        await self._hold.wait(audio.gen)
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
                    ack=audio.ack,
                )
            )
        step = max(1, audio.rate * self._chunk_ms // 1000)
        for i in range(0, len(audio.pcm), step):
            piece = audio.pcm[i : i + step]
            await self._hold.wait(audio.gen)
            if tl.end_t is not None:
                await clock.sleep_until(tl.end_t - self._lead_s)
                await self._hold.wait(audio.gen)  # paused while this chunk waited its turn
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
