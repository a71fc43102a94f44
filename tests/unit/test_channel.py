"""pipeline.channel and pipeline.generation: back-pressure, stale drops, cancellation safety."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from voiceagent.events import AudioFrame, Clause, Event, GenerationEnd, ResponseStatus, SpeechStarted, TranscriptSegment
from voiceagent.pipeline import Channel, GenerationScope

from .fakes import deadline

Run = Callable[..., Any]


def frame(start_ms: float, gen: int = 0) -> AudioFrame:
    return AudioFrame(t=0.0, gen=gen, pcm=np.zeros(320, dtype=np.int16), start_ms=start_ms)


def clause(gen: int, text: str = "x") -> Clause:
    return Clause(t=0.0, gen=gen, text=text, index=0)


async def is_blocked(task: asyncio.Task[Any]) -> bool:
    """Give the loop a few turns; True when ``task`` is still waiting (it must never finish here)."""
    for _ in range(5):
        await asyncio.sleep(0)
    return not task.done()


# --------------------------------------------------------------------------- generation scope


def test_generation_scope_next_makes_earlier_generations_stale() -> None:
    scope = GenerationScope()
    seen: list[int] = []
    scope.subscribe(seen.append)
    assert scope.current == 0
    assert not scope.is_stale(0)
    assert scope.next() == 1
    assert scope.is_stale(0)
    assert not scope.is_stale(1)
    assert scope.next() == 2
    assert scope.is_stale(1)
    assert not scope.is_stale(2)
    assert seen == [1, 2]  # listeners are told synchronously, in order


def test_channel_rejects_zero_capacity() -> None:
    with pytest.raises(ValueError):
        Channel("x", 0, GenerationScope())


# --------------------------------------------------------------------------- back-pressure


def test_put_blocks_while_full_until_a_get(run: Run) -> None:
    async def main() -> None:
        ch: Channel[Event] = Channel("test", 2, GenerationScope())
        await ch.put(frame(0))
        await ch.put(frame(1))
        with pytest.raises(asyncio.QueueFull):
            ch.put_nowait(frame(99))
        third = asyncio.create_task(ch.put(frame(2)))
        assert await is_blocked(third)
        assert len(ch) == 2
        first = await ch.get()
        assert isinstance(first, AudioFrame) and first.start_ms == 0
        await asyncio.wait_for(third, deadline(1.0))  # the get made room
        assert len(ch) == 2
        rest = [await ch.get(), await ch.get()]
        assert [e.start_ms for e in rest if isinstance(e, AudioFrame)] == [1, 2]

    run(main(), 5)


def test_get_waits_for_a_put(run: Run) -> None:
    async def main() -> None:
        ch: Channel[Event] = Channel("test", 1, GenerationScope())
        getter = asyncio.create_task(ch.get())
        assert await is_blocked(getter)
        await ch.put(frame(7))
        got = await asyncio.wait_for(getter, deadline(1.0))
        assert isinstance(got, AudioFrame) and got.start_ms == 7

    run(main(), 5)


# --------------------------------------------------------------------------- stale drops


def test_stale_response_events_are_dropped_on_get_but_input_events_are_not(run: Run) -> None:
    async def main() -> None:
        scope = GenerationScope()
        ch: Channel[Event] = Channel("test", 10, scope)
        old_input = SpeechStarted(t=0.0, gen=0, audio_ms=5.0)
        await ch.put(clause(0, "stale"))
        await ch.put(frame(0, gen=0))
        await ch.put(GenerationEnd(t=0.0, gen=0, text="", status=ResponseStatus.COMPLETED))
        await ch.put(old_input)
        scope.next()
        await ch.put(clause(1, "fresh"))
        got = [await ch.get() for _ in range(3)]
        assert isinstance(got[0], AudioFrame) and got[0].gen == 0
        assert got[1] is old_input
        assert isinstance(got[2], Clause) and got[2].text == "fresh"
        assert ch.dropped_stale == 2
        assert len(ch) == 0

    run(main(), 5)


def test_current_generation_is_not_stale(run: Run) -> None:
    async def main() -> None:
        scope = GenerationScope()
        scope.next()
        ch: Channel[Event] = Channel("test", 4, scope)
        await ch.put(clause(1))
        got = await ch.get()
        assert isinstance(got, Clause) and got.gen == 1
        assert ch.dropped_stale == 0

    run(main(), 5)


def test_drop_stale_removes_only_stale_response_events_and_keeps_order(run: Run) -> None:
    async def main() -> None:
        scope = GenerationScope()
        ch: Channel[Event] = Channel("test", 8, scope)
        seg = TranscriptSegment(t=0.0, gen=0, text="hi", audio=np.zeros(10, dtype=np.float32), start_ms=0, end_ms=1)
        items: list[Event] = [clause(0, "a"), frame(0), clause(0, "b"), seg, frame(1)]
        for item in items:
            ch.put_nowait(item)
        scope.next()
        ch.put_nowait(clause(1, "c"))
        assert ch.drop_stale() == 2
        assert ch.dropped_stale == 2
        assert len(ch) == 4
        got = [await ch.get() for _ in range(4)]
        assert got[:3] == [items[1], items[3], items[4]]
        assert isinstance(got[3], Clause) and got[3].text == "c"
        assert ch.drop_stale() == 0

    run(main(), 5)


def test_drop_stale_frees_room_for_a_blocked_producer(run: Run) -> None:
    async def main() -> None:
        scope = GenerationScope()
        ch: Channel[Event] = Channel("test", 2, scope)
        ch.put_nowait(clause(0))
        ch.put_nowait(clause(0))
        producer = asyncio.create_task(ch.put(clause(1, "new")))
        assert await is_blocked(producer)
        scope.next()
        # The old clauses are now stale; dropping them must let the producer in.
        assert ch.drop_stale() == 2
        await asyncio.wait_for(producer, deadline(1.0))
        got = await ch.get()
        assert isinstance(got, Clause) and got.text == "new"

    run(main(), 5)


# --------------------------------------------------------------------------- cancellation


def test_put_cancellation_leaves_the_channel_unchanged(run: Run) -> None:
    async def main() -> None:
        ch: Channel[Event] = Channel("test", 1, GenerationScope())
        await ch.put(frame(0))
        waiting = asyncio.create_task(ch.put(frame(1)))
        assert await is_blocked(waiting)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert len(ch) == 1
        got = await ch.get()
        assert isinstance(got, AudioFrame) and got.start_ms == 0
        assert len(ch) == 0
        # The cancelled item never shows up later either.
        await ch.put(frame(2))
        got = await ch.get()
        assert isinstance(got, AudioFrame) and got.start_ms == 2

    run(main(), 5)


def test_get_cancellation_loses_no_item(run: Run) -> None:
    async def main() -> None:
        ch: Channel[Event] = Channel("test", 4, GenerationScope())
        getter = asyncio.create_task(ch.get())
        assert await is_blocked(getter)
        # The item arrives and wakes the getter, but the getter is cancelled before it runs.
        ch.put_nowait(frame(42))
        getter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await getter
        assert len(ch) == 1
        got = await asyncio.wait_for(ch.get(), deadline(1.0))
        assert isinstance(got, AudioFrame) and got.start_ms == 42

    run(main(), 5)


def test_get_cancellation_while_empty_loses_no_later_item(run: Run) -> None:
    async def main() -> None:
        ch: Channel[Event] = Channel("test", 4, GenerationScope())
        getters = [asyncio.create_task(ch.get()) for _ in range(2)]
        assert await is_blocked(getters[0])
        getters[0].cancel()
        with pytest.raises(asyncio.CancelledError):
            await getters[0]
        await ch.put(frame(1))
        got = await asyncio.wait_for(getters[1], deadline(1.0))  # the remaining getter gets it
        assert isinstance(got, AudioFrame) and got.start_ms == 1

    run(main(), 5)


def test_the_wait_of_each_item_in_the_channel_is_reported_on_the_channels_clock(run: Run) -> None:
    now = [10.0]
    waits: list[tuple[str, float]] = []
    scope = GenerationScope()
    ch: Channel[Event] = Channel("tts", 4, scope, on_wait=lambda name, s: waits.append((name, s)), clock=lambda: now[0])

    async def main() -> None:
        await ch.put(clause(0, "a"))
        now[0] = 10.25
        ch.put_nowait(clause(0, "b"))
        scope.next()
        ch.put_nowait(clause(1, "c"))
        now[0] = 11.0
        assert (await ch.get()).text == "c"  # type: ignore[attr-defined]
        assert waits == [("tts", 0.75)]  # put at 10.25, taken at 11.0; the stale items are not reported
        await ch.put(frame(0.0))
        now[0] = 11.5
        await ch.get()

    run(main())
    assert waits == [("tts", 0.75), ("tts", 0.5)]


# --------------------------------------------------------------------------- joining user audio


def test_audio_waiting_in_the_channel_is_joined_and_keeps_its_place_and_time(run: Run) -> None:
    from voiceagent.session import _join_audio

    async def main() -> None:
        now = [10.0]
        waits: list[float] = []
        ch: Channel[Event] = Channel("vad", 4, GenerationScope(), clock=lambda: now[0], on_wait=lambda _, s: waits.append(s))
        await ch.put_or_merge(frame(0.0), _join_audio)
        now[0] = 10.02
        await ch.put_or_merge(frame(20.0), _join_audio)  # contiguous: joined
        assert len(ch) == 1 and ch.merged == 1
        await ch.put(SpeechStarted(t=0.0, gen=0, audio_ms=0.0))
        await ch.put_or_merge(frame(40.0), _join_audio)  # behind another event: not joined
        assert len(ch) == 3
        now[0] = 10.05
        first = await ch.get()
        assert isinstance(first, AudioFrame) and len(first.pcm) == 640 and first.start_ms == 0.0
        assert waits == [pytest.approx(0.05)]  # the first message's wait, not the second's
        assert isinstance(await ch.get(), SpeechStarted)
        assert isinstance(await ch.get(), AudioFrame)
        await ch.put_or_merge(frame(60.0), _join_audio)  # the channel is empty: nothing to join
        await ch.put_or_merge(frame(100.0), _join_audio)  # a gap in the stream: not joined
        await ch.put_or_merge(frame(120.0, gen=1), _join_audio)  # another generation: not joined
        assert len(ch) == 3

    run(main(), 5)


def test_joined_audio_never_grows_past_the_limit(run: Run) -> None:
    from voiceagent.session import MERGE_SAMPLES, _join_audio

    async def main() -> None:
        ch: Channel[Event] = Channel("vad", 100, GenerationScope())
        for k in range(20):  # 20 ms each: five fit 100 ms
            await ch.put_or_merge(frame(20.0 * k), _join_audio)
        sizes = []
        while len(ch):
            got = await ch.get()
            assert isinstance(got, AudioFrame)
            sizes.append(len(got.pcm))
        assert sizes == [MERGE_SAMPLES] * 4 and MERGE_SAMPLES == 1600

    run(main(), 5)
