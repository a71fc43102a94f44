"""Clocks: the only place stage code learns the time.

Stages receive a :class:`Clock` instead of calling :mod:`time`, so that tests and replays can
run on a :class:`VirtualClock` whose time only moves when the test says so.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol

__all__ = ["Clock", "MonotonicClock", "VirtualClock"]


class Clock(Protocol):
    """A source of monotonic time in seconds, and a way to wait on it."""

    def now(self) -> float:
        """Seconds on this clock; only differences are meaningful."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Return once ``now() >= deadline``.  Cancellable: cancelling simply stops the wait."""
        ...


class MonotonicClock:
    """Wall time from :func:`time.monotonic`."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep_until(self, deadline: float) -> None:
        delay = deadline - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)


class VirtualClock:
    """A clock that moves only when :meth:`advance` is called; sleepers wake in deadline order."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._waiters: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self._now:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (deadline, next(self._seq), fut))
        await fut

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline has passed."""
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        self._now += seconds
        while self._waiters and self._waiters[0][0] <= self._now:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(None)
