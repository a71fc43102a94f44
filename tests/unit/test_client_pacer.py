"""The paced audio sender on a fake clock: when each chunk leaves, falling behind with and without
catching up, and cancellation (never swallowed; a chunk cancelled while waiting is not sent and
keeps its slot).  No event loop: the coroutines are stepped by hand."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

import numpy as np
import pytest

from voiceagent.audio import Int16Array
from voiceagent.client import Pacer

T = TypeVar("T")


@types.coroutine
def _suspend() -> Generator[None, None, None]:
    yield


class FakeTime:
    """A clock that moves only when slept on (or by hand: ``now += …``, a slow ``send``)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []
        self.sent: list[tuple[float, int]] = []
        self.send_cost = 0.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await _suspend()  # a real suspension point: cancellation lands here
        self.now += seconds

    async def send(self, pcm: Int16Array) -> None:
        self.sent.append((round(self.now, 6), len(pcm)))
        self.now += self.send_cost

    def pacer(self, **kw: Any) -> Pacer:
        return Pacer(self.send, rate=1000, chunk_ms=20, clock=self.clock, sleep=self.sleep, **kw)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Step a coroutine to its end (what an event loop with nothing else to do would do)."""
    while True:
        try:
            coro.send(None)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


def pcm(n: int) -> Int16Array:
    return np.zeros(n, dtype=np.int16)


def test_each_chunk_leaves_when_its_audio_would_have_been_spoken() -> None:
    ft = FakeTime()
    times = run(ft.pacer().play(pcm(100)))  # 5 chunks of 20 samples = 20 ms each
    assert ft.sent == [(100.0, 20), (100.02, 20), (100.04, 20), (100.06, 20), (100.08, 20)]
    assert times == pytest.approx([100.0, 100.02, 100.04, 100.06, 100.08])
    assert len(ft.sleeps) == 5  # one sleep per chunk, the first of 0


def test_speed_and_an_explicit_start() -> None:
    ft = FakeTime()
    run(ft.pacer(speed=2.0, start=100.5).play(pcm(60)))
    assert ft.sent == [(100.5, 20), (100.51, 20), (100.52, 20)]


def test_the_stream_is_continuous_across_calls() -> None:
    ft = FakeTime()
    p = ft.pacer()
    run(p.play(pcm(40)))
    ft.now += 0.005  # the caller did something in between, briefly
    run(p.chunk(pcm(20)))
    assert [t for t, _ in ft.sent] == [100.0, 100.02, 100.04]
    assert p.sent_samples == 60


def test_behind_schedule_it_catches_up_by_default() -> None:
    ft = FakeTime()
    ft.send_cost = 0.05  # each send takes 50 ms: the stream falls behind
    run(ft.pacer().play(pcm(80)))
    assert [t for t, _ in ft.sent] == [100.0, 100.05, 100.1, 100.15]  # no wait at all: it goes as fast as it can
    assert ft.sleeps == [0.0, 0.0, 0.0, 0.0]  # but it yields before each chunk


def test_without_catch_up_the_schedule_restarts_from_now() -> None:
    ft = FakeTime()
    p = ft.pacer(catch_up=False)
    run(p.chunk(pcm(20)))
    ft.now += 0.1  # a busy machine: 80 ms late
    run(p.chunk(pcm(20)))
    run(p.chunk(pcm(20)))
    assert [t for t, _ in ft.sent] == [100.0, 100.1, 100.12]  # no burst: the next one a chunk later
    ft2 = FakeTime()
    p2 = ft2.pacer()
    run(p2.chunk(pcm(20)))
    ft2.now += 0.1
    run(p2.chunk(pcm(20)))
    run(p2.chunk(pcm(20)))
    assert [t for t, _ in ft2.sent] == [100.0, 100.1, 100.1]  # catching up: the late one at once


def test_cancelled_while_waiting_the_chunk_is_not_sent_and_keeps_its_slot() -> None:
    ft = FakeTime()
    p = ft.pacer()
    run(p.chunk(pcm(20)))
    coro = p.chunk(pcm(20))
    coro.send(None)  # now waiting for its slot, at 100.02
    with pytest.raises(asyncio.CancelledError):
        coro.throw(asyncio.CancelledError())  # propagates: not swallowed
    assert ft.sent == [(100.0, 20)] and p.sent_samples == 20
    run(p.chunk(pcm(20)))  # the next chunk takes the cancelled one's slot
    assert ft.sent == [(100.0, 20), (100.02, 20)]


def test_cancelled_inside_send_it_propagates_and_counts_nothing() -> None:
    ft = FakeTime()

    async def send(chunk: Int16Array) -> None:
        ft.sent.append((ft.now, len(chunk)))
        raise asyncio.CancelledError

    p = Pacer(send, rate=1000, chunk_ms=20, clock=ft.clock, sleep=ft.sleep)
    with pytest.raises(asyncio.CancelledError):
        run(p.play(pcm(60)))
    assert len(ft.sent) == 1 and p.sent_samples == 0


def test_nonsense_pace_is_refused() -> None:
    ft = FakeTime()
    with pytest.raises(ValueError):
        ft.pacer(speed=0)
    with pytest.raises(ValueError):
        Pacer(ft.send, chunk_ms=0)
