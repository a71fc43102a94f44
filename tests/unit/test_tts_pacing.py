"""TTS stage pacing (``tts.ahead_ms``): a reply's later clauses are synthesized when its audio not
yet played falls under the lead, on the injected clock; the first clause never waits."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from voiceagent.clock import VirtualClock
from voiceagent.config import load_config
from voiceagent.events import Clause, Event, ResponseAudio
from voiceagent.pipeline import Channel, GenerationScope, StageContext
from voiceagent.settings import settings_from_config
from voiceagent.stages.tts import TtsOptions, TtsPorts, TtsStage

from .fakes import FakeTts, deadline

Run = Callable[..., Any]


class Rig:
    """A TTS stage on a virtual clock with a fake voice of 500 ms per word."""

    def __init__(self, ahead_ms: int) -> None:
        self.clock = VirtualClock()
        self.scope = GenerationScope()
        self.voice = FakeTts(ms_per_word=500.0)
        settings = settings_from_config(load_config(env={}))
        ctx = StageContext("sess_test", self.clock, self.scope, self._notify, self._report)
        self.inbox: Channel[Event] = Channel("tts", 16, self.scope)
        self.out: Channel[Event] = Channel("playout", 16, self.scope)
        self.stage = TtsStage(ctx, self.inbox, self.out, TtsPorts(self.voice, lambda: settings), TtsOptions(ahead_ms=ahead_ms))

    async def _notify(self, event: Event) -> None:
        pass

    async def _report(self, err: Exception, gen: int) -> None:
        raise AssertionError(f"stage error: {err}")

    async def clause(self, index: int, words: int, gen: int = 1) -> None:
        await self.inbox.put(Clause(t=self.clock.now(), gen=gen, text=" ".join(["word"] * words), index=index))

    async def audio(self) -> ResponseAudio:
        event = await asyncio.wait_for(self.out.get(), deadline(2.0))
        assert isinstance(event, ResponseAudio)
        return event

    async def paced(self) -> None:
        """Until the stage waits on the clock for room (a clause it took and has not synthesized).
        The stage may first finish the clause before (its voice's generator ends in the voice's
        thread), so this polls the clock's sleepers, up to the test deadline."""
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline(2.0)
        for _ in range(1_000_000):
            if self.clock._waiters:
                return
            if loop.time() > end:
                break
            await asyncio.sleep(0.001)  # a poll of the condition above, not a wait standing in for it
        raise AssertionError("the stage never waited for room")


def test_a_later_clause_waits_until_the_audio_ahead_of_the_listener_is_under_the_lead(run: Run) -> None:
    async def main() -> None:
        rig = Rig(ahead_ms=1000)
        task = asyncio.create_task(rig.stage.run())
        try:
            await rig.clause(0, words=4)  # 2.0 s of audio, made at t=0
            first = await rig.audio()
            assert (first.index, rig.clock.now()) == (0, 0.0)
            await rig.clause(1, words=2)  # 1.0 s more
            await rig.paced()
            assert rig.voice.calls.items == ["word word word word"]  # not synthesized yet
            rig.clock.advance(0.99)  # 1.01 s still ahead of the listener: more than the lead
            await rig.paced()  # still waiting
            assert len(rig.voice.calls.items) == 1
            rig.clock.advance(0.01)  # 1.0 s ahead: its turn
            second = await rig.audio()
            assert second.index == 1 and rig.clock.now() == 1.0
            await rig.clause(2, words=1)  # 3.0 s made since t=0: due at 2.0
            await rig.paced()
            assert len(rig.voice.calls.items) == 2
            rig.clock.advance(1.0)
            assert (await rig.audio()).index == 2
        finally:
            task.cancel()

    run(main())


def test_without_a_lead_and_for_a_new_reply_nothing_waits(run: Run) -> None:
    async def main() -> None:
        rig = Rig(ahead_ms=0)
        task = asyncio.create_task(rig.stage.run())
        try:
            for index in range(3):
                await rig.clause(index, words=4)
            assert [(await rig.audio()).index for _ in range(3)] == [0, 1, 2]  # with no clock moving
        finally:
            task.cancel()
        rig = Rig(ahead_ms=1000)
        task = asyncio.create_task(rig.stage.run())
        try:
            await rig.clause(0, words=4, gen=1)
            await rig.audio()
            await rig.clause(0, words=4, gen=2)  # a new reply's first clause: never paced
            assert (await rig.audio()).gen == 2
            await rig.clause(1, words=1, gen=2)  # paced from gen 2's own first audio
            await rig.paced()
            assert len(rig.voice.calls.items) == 2
            rig.clock.advance(1.0)
            assert (await rig.audio()).index == 1
        finally:
            task.cancel()

    run(main())


def test_a_barge_in_cancels_a_waiting_clause_and_the_next_reply_starts_at_once(run: Run) -> None:
    async def main() -> None:
        rig = Rig(ahead_ms=1000)
        old = rig.scope.next()
        task = asyncio.create_task(rig.stage.run())
        try:
            await rig.clause(0, words=4, gen=old)
            await rig.audio()
            await rig.clause(1, words=2, gen=old)
            await rig.paced()
            new = rig.scope.next()  # the user talks over the reply: its generation is stale
            await rig.clause(0, words=1, gen=new)
            assert (await rig.audio()).gen == new  # not held behind the stale clause's wait
            rig.clock.advance(10.0)  # long past when the stale clause was due
            await rig.clause(1, words=1, gen=new)
            assert (await rig.audio()).gen == new
            # The stale clause was never spoken, though its due time passed before the last clause.
            assert rig.voice.calls.items == ["word word word word", "word", "word"]
            assert not task.done()
        finally:
            task.cancel()

    run(main())
